/* committer.h — group commit (of submits, heartbeats and nodes' reports). Handlers hand over items and
 * return (their requests suspended); committer threads take everything
 * waiting, up to a batch maximum, and commit it in one round trip. While one
 * batch commits the next accumulates, so batches grow with the load and a
 * lone submit is committed at once: no timer adds latency, unless the
 * caller asks a busy committer to gather (gw_committer_linger). A batch that
 * fails on a live connection is retried item by item, so one bad row fails
 * only itself. What a commit is and how an item is answered are the
 * caller's (gw_committer_ops): the unit tests drive the batching alone. */
#ifndef GW_COMMITTER_H
#define GW_COMMITTER_H

/* Embedded in the caller's own record of a submit. */
typedef struct gw_commit_item {
    struct gw_commit_item *next;  /* the committer's */
    long long at_ms;              /* the committer's: when it was handed over */
    int rc;                       /* the outcome, set before ops.done */
} gw_commit_item;

typedef struct gw_committer_ops {
    /* Commits items[0..n) together. 0 when every one is recorded; -EIO
     * when the connection was lost or PostgreSQL was unreachable (every
     * item fails with it, not retried); any other negative code when the
     * batch failed as a whole on a live connection: each item is then
     * committed again alone, and gets the code of its own try. */
    int (*commit)(void *arg, gw_commit_item *const *items, int n);
    /* Called once per batch after the outcomes are known (each item's rc)
     * and before any item is answered: the place for work done once for
     * the committed ones (queue them, wake the scheduler). May be NULL. */
    void (*committed)(void *arg, gw_commit_item *const *items, int n);
    /* Answers one item; the committer does not touch it afterwards. */
    void (*done)(void *arg, gw_commit_item *item);
} gw_committer_ops;

typedef struct gw_committer gw_committer;

/* Starts threads committer threads taking batches of at most batch_max
 * items. ops is copied; arg is passed to each op. NULL on failure. */
gw_committer *gw_committer_start(const gw_committer_ops *ops, void *arg, int threads,
                                 int batch_max);
/* Hands item over: from here on the committer owns it until ops.done. 0,
 * or -ESHUTDOWN when the committer is stopping (the caller keeps item and
 * answers it). Never blocks on a commit. */
int gw_committer_add(gw_committer *c, gw_commit_item *item);
/* Gathering, for a committer whose statements cost PostgreSQL mostly a
 * fixed price (the nodes' reports: one row costs about a tenth of the
 * statement at four rows a statement): while batches follow each other
 * (the last one was taken less than busy_ms ago), a thread waits until the
 * first waiting item has waited linger_ms, or a whole batch waits, before
 * it takes them. An item arriving after a quiet spell is taken at once.
 * linger_ms 0 (the default): no waiting. */
void gw_committer_linger(gw_committer *c, int linger_ms, int busy_ms);
/* Refuses new items, commits and answers every item already handed over,
 * then joins the threads and frees c. NULL is a no-op. */
void gw_committer_stop(gw_committer *c);

#endif
