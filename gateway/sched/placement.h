/* placement.h — where a job goes: the scheduler's choices as pure
 * functions over a view of the nodes (no locks, no I/O), so that they are
 * tested alone. A job takes one slot on each of its nodes (resources.nodes
 * distinct nodes) and, on a GPU node, resources.gpus devices there — the
 * least loaded that have resources.gpu_memory_gb; where devices are not
 * shared, on the node they fill best. A job that fits nowhere now may
 * reserve the nodes that free up first (EASY backfill): later jobs go on
 * reserved nodes only when their timeout_s ends before the reservation
 * starts. */
#ifndef GW_PLACEMENT_H
#define GW_PLACEMENT_H

#include <stdint.h>

#define GW_PLACE_MAX_GPUS 16
#define GW_PLACE_MAX_NODES 64   /* resources.nodes at most */

typedef struct gw_place_gpu {
    int mem_mb;            /* memory of the device (0: unknown, fits any) */
    int load;              /* runs placed on it now */
    int util;              /* utilisation % the node last reported (-1: unknown) */
    int64_t end_ms;        /* when its runs end at the latest, epoch ms (0: unknown) */
} gw_place_gpu;

typedef struct gw_place_node {
    const char *name;
    const char *backend;   /* cpu | cuda */
    int slots, running, ngpus;
    int available;         /* up, and not drained */
    gw_place_gpu gpu[GW_PLACE_MAX_GPUS];   /* ngpus of them */
    /* When its runs are due to end at the latest (started + timeout_s),
     * epoch ms, ascending; nends <= running (runs the scheduler knows no
     * end of are counted as never ending). */
    const int64_t *ends;
    int nends;
    int tasks;             /* it has a task engine */
    const uint32_t *images; /* the image keys (task.h) its engine has; nimages -1: not listed */
    int nimages;
} gw_place_node;

typedef struct gw_place_req {
    const char *backend;   /* any | cpu | cuda */
    int gpus;              /* per node; <= 0 counts as 1 on a GPU node (a task's 0 is none) */
    int nodes;             /* <= 1: one node */
    int gpu_mem_mb;        /* 0: any */
    uint32_t image;        /* a task: its image key; 0: a kernel job */
    int image_anywhere;    /* a task: some node with an engine lists the image (the
                              caller's gw_place_image_listed); else any engine node
                              will do (it fails the task image_not_found, once) */
} gw_place_req;

typedef struct gw_place_pick {
    int nnodes;
    int node[GW_PLACE_MAX_NODES];          /* indices into the view, node_rank order */
    int ngpu;                              /* devices per node (0 on CPU nodes) */
    int gpu[GW_PLACE_MAX_NODES][GW_PLACE_MAX_GPUS];
} gw_place_pick;

/* Places r on nodes that have a free slot (and allowed[i] when allowed is
 * not NULL): the r->nodes least loaded (running/slots, then most free
 * slots, then name), and on each the least loaded fitting devices (load,
 * then utilisation, then index). On a GPU node with no more slots than
 * devices a device holds one run at a time: the node fits only while
 * enough fitting devices are idle (a node with more slots than devices
 * shares them, as its operator asked), and among such nodes the one with
 * the fewest idle fitting devices left goes first (best fit, before the
 * load: whole nodes stay free for the jobs that need one). 0 with *out,
 * or -1 when it fits nowhere now. */
int gw_place_job(const gw_place_node *nodes, int n, const gw_place_req *r, const uint8_t *allowed,
                 gw_place_pick *out);

/* The one copy placement keeps of backend b ("cuda", "cpu", "any"; b
 * itself when it is none of them). Views and requests built with it are
 * compared by pointer instead of by strcmp, per node and per job. */
const char *gw_place_backend(const char *b);

/* 1 when one of the n nodes with a task engine lists image key image. */
int gw_place_image_listed(const gw_place_node *nodes, int n, uint32_t image);

/* 1 when node could ever hold a part of r (backend, devices, memory,
 * a task engine and the task's image), however busy it is now. */
int gw_place_capable(const gw_place_node *node, const gw_place_req *r);

/* The reservation of a job that does not fit now: the earliest time (epoch
 * ms, >= now) at which r->nodes capable nodes have a free slot (and, where
 * devices are not shared, enough idle devices) by their runs' ends, with
 * reserved[i] set for those nodes. Nodes an earlier reservation holds
 * (held[i] != 0; held may be NULL) are left out. -1 (and nothing reserved)
 * when fewer than r->nodes nodes are capable and not held. */
int64_t gw_place_reserve(const gw_place_node *nodes, int n, const gw_place_req *r, int64_t now,
                         const int64_t *held, uint8_t *reserved);

/* gw_place_reserve in two halves, so that a pass reserving for many jobs
 * of one shape works out when each node frees once (the scheduler keeps
 * them per shape and updates only the nodes it places on): when node c
 * frees for r (-1: it cannot take r at all), each of n nodes' into at;
 * and the reservation of want nodes from at, held and reserved as in
 * gw_place_reserve, times room for n. */
int64_t gw_place_free_time(const gw_place_node *c, const gw_place_req *r, int64_t now);
void gw_place_free_times(const gw_place_node *nodes, int n, const gw_place_req *r, int64_t now,
                         int64_t *at);
int64_t gw_place_reserve_at(const int64_t *at, int n, int want, const int64_t *held,
                            uint8_t *reserved, int64_t *times);

/* Which nodes a job of timeout_s may use while reservations hold nodes
 * (held[i]: the start of the reservation holding node i, 0 when none):
 * every node not held, and a held one too when the job ends (now +
 * timeout_s) by that reservation's start. */
void gw_place_backfill_mask(int n, const int64_t *held, int64_t now, int timeout_s,
                            uint8_t *allowed);

/* Weighted fair share, of the devices in use first, then of starts. Each
 * waiting tenant has a target: the capacity of the nodes that take work
 * (devices; slots on a node without any), less what the tenants not
 * waiting hold, shared among the waiting ones by weight; its deficit is
 * its target less the units its runs hold now (devices; 1 a node for a run
 * without any). The tenant with the largest deficit, in whole units
 * rounded up, goes next; among those level, the least virtual time (stride
 * scheduling: every start advances it by the job's units over the weight;
 * a tenant back from idle starts from the floor, the least of the busy
 * ones, so idling banks no credit); then the more urgent next entry. Each
 * job a pass places, or reserves nodes for, takes its units off the
 * deficit. So on a cluster with room for many runs the devices each
 * tenant holds, and its GPU-seconds, follow the weights whatever the
 * lengths of its jobs; where the targets are fractions of a unit (two
 * slots, weights 1 and 3) the virtual times share the units over time.
 * gw_place_fair_pick: among the k tenants with candidate[i] set, the one
 * that goes next by deficit[i], vtime[i] and head[i] (a gw_queue_score:
 * smaller is more urgent), then the lower index; -1 when there is none.
 * With target (the tenants' targets; NULL: whole units throughout), a
 * deficit against a target of more than 8 units counts in parts of it: 4
 * units short of 16 is as far behind as 16 short of 64 (in whole units,
 * what is left over after the others reached their targets went to the
 * tenants of small targets, which a unit takes furthest past them). */
int gw_place_fair_pick(const double *deficit, const double *target, const double *vtime,
                       const double *head, const uint8_t *candidate, int k);
/* 1 when the pass should end instead of placing for pick (the tenant
 * gw_place_fair_pick chose): pick is at or past its target (its deficit,
 * in whole units rounded up, is not above 0) while some tenant j below its
 * target has cut[j] set (its window of the queue ran out after a
 * placement, so more of its jobs may wait). Work-conserving within a pass
 * would hand the devices its window could not reach to tenants already
 * at their share; a new pass reads a new window (at 1,000 nodes such fills
 * left the weight-1 tenants at 1.2-1.4 times their share for minutes). */
int gw_place_fair_waits(const double *deficit, const uint8_t *cut, int k, int pick);
/* 1 when pick's next job, of units, is a lump that should yield to the
 * other tenants first: more than half of pick's target (its share, units),
 * and more than its deficit (in whole units rounded up), so that it would
 * take pick past its share, while some other tenant j below its target has
 * candidate[j] set. Such a job (a gang as large as its tenant's share)
 * started whenever its tenant was below its share, and held it past the
 * share for as long as it ran, which fair share between passes cannot give
 * back without preemption (at 1,000 nodes the worst tenant held 1.3 times
 * its share over two minutes). A pass places it after every other
 * tenant's window, when room is left; one that has yielded for long enough
 * goes in its tenant's turn (scheduler.c: --fair-lump-wait-s), so that it cannot
 * starve. Smaller jobs past a deficit are not lumps: in a busy cluster
 * every tenant's deficit is the few devices freed since the last pass. */
int gw_place_fair_defers(const double *deficit, const uint8_t *candidate, int k, int pick,
                         double units, double target);
/* 1 when a job of units is large enough to be a lump for a tenant whose
 * target is target: more than half of it. */
int gw_place_fair_lump_size(double units, double target);

/* The jobs a scheduler held back as lumps, and since when: an entry per
 * job (open addressing by the hash of its id), its first and its latest
 * hold (monotonic ms; since 0: never used). */
#define GW_LUMP_SLOTS 1024
typedef struct gw_lumps {
    struct gw_lump { char job_id[37]; int64_t since, seen; } at[GW_LUMP_SLOTS];
} gw_lumps;
/* 1 when job_id, held back as a lump again now (mono), has been held back
 * for wait_ms since its first hold, or when no entry is left to remember
 * it: it goes in its tenant's turn. Otherwise notes the hold; 0. An entry
 * not held for forget_ms is forgotten (its job left the queue, or a new
 * hold starts its wait again). */
int gw_lumps_waited(gw_lumps *t, const char *job_id, int64_t mono, int64_t wait_ms,
                    int64_t forget_ms);
/* job_id started: its entry, if any, is forgotten. */
void gw_lumps_placed(gw_lumps *t, const char *job_id, int64_t mono, int64_t forget_ms);
/* --fair-preempt: a run of the tenant whose big job took it past its
 * share, one preemption may stop (a single-node run, not this pass's). */
typedef struct gw_preempt_cand {
    int64_t start_ms;      /* when it started */
    int units;             /* what it holds of the tenant's share */
} gw_preempt_cand;
/* Which of the n runs c to stop so that the tenant holds at most over
 * units less and stays at or above its share: the youngest first (the
 * least work lost), each taken while what is taken stays within over
 * (a run larger than what is left is passed over, and younger or older
 * smaller ones still go). take[i] is set for those. Returns the units
 * taken. Ties in start_ms go by index. */
int gw_place_preempt_pick(const gw_preempt_cand *c, int n, double over, uint8_t *take);
/* What starting a job of units adds to the virtual time of a tenant of
 * weight (> 0; else 1). */
double gw_place_fair_charge(double units, double weight);
/* A waiting tenant's target in units: room shared by weight (> 0; else 1)
 * among waiting tenants whose weights sum to wsum. */
double gw_place_fair_target(double room, double weight, double wsum);

/* Fair share on device-seconds (--fair-repay-s: repay > 0). What a
 * waiting tenant is owed, in unit-seconds, after dt more seconds at target
 * and units: owed halved every half_life seconds, plus (target - units) *
 * dt; at most target * repay (a tenant cannot bank more than repay seconds
 * of its whole share: one kept from running by its own quota, or by a job
 * no node can take, would otherwise bank without end). Negative: a debt.
 * owed unchanged when dt <= 0. */
double gw_place_fair_owed(double owed, double target, double units, double dt, double repay,
                          double half_life);
/* A waiting tenant's deficit in units (what gw_place_fair_pick compares):
 * target less the units it holds, plus what it is owed repaid over repay
 * seconds (0: devices held now only). So a tenant held below its share
 * for a while (its big job waiting for nodes to drain, its lump banking)
 * is ahead of the others for a while after, and one held past it (a lump
 * beside its other runs) behind, until the device-seconds even out. */
double gw_place_fair_deficit(double target, double units, double owed, double repay);

#endif
