/* scheduler_int.h — state shared by the scheduler loop (scheduler.c) and the run
 * trackers (track.c). Not for other modules. */
#ifndef GW_SCHED_INT_H
#define GW_SCHED_INT_H

#include <pthread.h>

#include "scheduler.h"

#define SCHED_MAX_NODES 256

typedef struct sched__node {
    gw_node n;
    int64_t avoid_until_ms;   /* back-off after a failed dispatch */
} sched__node;

typedef struct sched__run {
    char job_id[37];
    int attempt;
    char node_id[37];
} sched__run;

struct gw_sched {
    gw_app *app;
    pthread_t thread;
    pthread_mutex_t mu;       /* guards nodes and tracked */
    pthread_cond_t cv;
    volatile int stop;
    int wake;
    int nodes_changed;        /* reload the node table before placing */
    volatile int leader;
    int64_t leader_since_ms;  /* monotonic: when this gateway took the lock */
    int64_t next_deep_ms;     /* monotonic: earliest next scan past the first window */
    char owner[96];
    sched__node nodes[SCHED_MAX_NODES];
    int nnodes;
    sched__run *tracked;      /* runs with a live tracker */
    int ntracked, cap;
};

/* Runs this gateway follows on node_id. Call with s->mu held. */
int sched__running_on(gw_sched *s, const char *node_id);
/* Starts a tracker thread for the run; fresh != 0 dispatches it first.
 * Takes d's contents either way. 0, or -EEXIST when already tracked. */
int sched__track(gw_sched *s, gw_dispatch *d, int fresh);
/* Fenced: back to queued (and into Redis) or failed when attempts are
 * spent, or cancelled when a cancel was asked for. Returns the store's
 * answer: 0, -EAGAIN (the attempt is no longer current), -EIO, -EPROTO. */
int sched__requeue(gw_sched *s, const char *job_id, int attempt, int uncounted,
                   const char *code, const char *message);

#endif
