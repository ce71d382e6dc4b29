/* scheduler.h — the scheduler: while this gateway holds the scheduler lock it
 * rebuilds the ready queue from PostgreSQL, places the most urgent jobs that
 * some node can take on the least-loaded nodes that fit and claims them for
 * those nodes in batches (the nodes' lease polls take them from there),
 * marks silent nodes down and re-queues their jobs. */
#ifndef GW_SCHED_H
#define GW_SCHED_H

#include "gw.h"
#include "placement.h"

/* What placement sees of a node. */

/* Picks the node for a job that wants backend (any|cpu|cuda) and gpus:
 * among available nodes with a free slot and the right backend (and enough
 * GPUs for cuda), the one with the lowest running/slots, then the most free
 * slots, then the first by name. Returns its index, or -1 if none fits. */
int gw_place(const gw_place_node *nodes, int n, const char *backend, int gpus);

/* Each tenant's running jobs among runs[0..nr) (ST_RUNS_PLACED's rows): a
 * job once however many of its runs are there (a gang's parts), a run of
 * an attempt that ended (live 0) not at all; and the units they hold (each
 * run's gw_sched_run_units). *out (the caller frees it): {tenant_id,
 * running, units} sorted by tenant. Returns how many, or -1 on ENOMEM.
 * Sorts runs by job. */
int gw_sched_count_running(gw_run_place *runs, int nr, gw_tenant_run **out);
/* A run whose end was reported. */
typedef struct gw_ended_run {
    char node_id[37], job_id[37];
    int attempt;
} gw_ended_run;
/* Leaves out of runs[0..nr) those among ended[0..nended) (the same node,
 * job and attempt: another attempt of the job, or its part on another
 * node, stays): each left out gets an empty node_id and live 0. Sorts
 * ended. Returns how many were left out. */
int gw_sched_runs_drop_ended(gw_run_place *runs, int nr, gw_ended_run *ended, int nended);
/* What a run holding ngpu devices of a node counts in its tenant's share
 * in use (fair share): its devices, 1 for a run without any. */
int gw_sched_run_units(int ngpu);

gw_sched *gw_sched_start(gw_app *app);
/* Stops the scheduler thread and frees s; runs on nodes go on, and the next
 * scheduler finds them in PostgreSQL. NULL is a no-op. */
void gw_sched_stop(gw_sched *s);
/* The API serves: the scheduler may take the lock from now on (a gateway
 * that took it before nodes could reach it would find their heartbeats
 * late and mark them down). */
void gw_sched_serving(gw_sched *s);
/* Wakes the scheduler (a job was queued). */
void gw_sched_wake(gw_sched *s);
/* The runs of job_ids[0..n) (attempts[0..n)) on node_id ended (their
 * reports were recorded): their slots and devices are free for placement
 * now, before the next count from PostgreSQL; a reload of the runs under
 * way leaves them out (its query may have read them before their ends
 * were committed). */
void gw_sched_runs_ended(gw_sched *s, const char *node_id, const char *const *job_ids,
                         const int *attempts, int n);
/* A node registered or left: reload the node table before placing. */
void gw_sched_nodes_changed(gw_sched *s);
/* A tenant was made, or its weight or running quota changed: the next pass
 * of this gateway's scheduler reloads the tenants first (the scheduler of
 * another gateway reloads them every second). NULL is a no-op. */
void gw_sched_tenants_changed(gw_sched *s);

#endif
