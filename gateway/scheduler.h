/* scheduler.h — the scheduler: while this gateway holds the scheduler lock it
 * rebuilds the ready queue from PostgreSQL, places the most urgent job that
 * some node can take on the least-loaded node that fits, dispatches it and
 * follows the run to its end (one tracker thread per run), marks silent
 * nodes down and re-queues their jobs. */
#ifndef GW_SCHED_H
#define GW_SCHED_H

#include "gw.h"

/* What placement sees of a node. */
typedef struct gw_place_node {
    const char *name;
    const char *backend;   /* cpu | cuda */
    int slots, running, ngpus;
    int available;         /* up, and not in a back-off after a failed dispatch */
} gw_place_node;

/* Picks the node for a job that wants backend (any|cpu|cuda) and gpus:
 * among available nodes with a free slot and the right backend (and enough
 * GPUs for cuda), the one with the lowest running/slots, then the most free
 * slots, then the first by name. Returns its index, or -1 if none fits. */
int gw_place(const gw_place_node *nodes, int n, const char *backend, int gpus);

gw_sched *gw_sched_start(gw_app *app);
/* Stops dispatching and waits up to grace_ms for trackers. Returns how
 * many are still running: then nothing is freed, and the caller must not
 * free the store or the queue those trackers still use. */
int gw_sched_stop(gw_sched *s, int grace_ms);
/* Wakes the scheduler (a job was queued, a node freed a slot). */
void gw_sched_wake(gw_sched *s);
/* A node registered or left: reload the node table before placing. */
void gw_sched_nodes_changed(gw_sched *s);

#endif
