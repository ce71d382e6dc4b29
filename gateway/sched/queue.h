/* queue.h — the gateway's Redis side: the ready queue (a sorted set per
 * tenant ordered by priority, then age, and the set of tenants that have
 * one), the delayed set of retries waiting out their
 * back-off (ordered by when they may run), and the scheduler lock. All of
 * it can be rebuilt from PostgreSQL. Functions return 0 or -EIO when Redis
 * cannot be reached or answers with an error. */
#ifndef GW_QUEUE_H
#define GW_QUEUE_H

#include <jansson.h>
#include <stdint.h>

typedef struct gw_queue gw_queue;

/* A ready-queue entry: the member text carries what placement needs, so
 * the scheduler does not ask PostgreSQL about jobs it cannot place. */
typedef struct gw_ready {
    char member[128];
    char job_id[37];
    char backend[8];
    int gpus;
    int64_t tenant_id;     /* 0 in an entry written before it was kept there */
    int nodes;             /* resources.nodes; 1 in an entry written before */
    int gpu_mem_mb;        /* resources.gpu_memory_gb in MiB; 0: any */
    int timeout_s;         /* 0 in an entry written before it was kept there */
    uint32_t image;        /* a task's image key (task.h); 0: a kernel job */
    double score;          /* its place: gw_queue_score */
} gw_ready;

/* A queue on the Redis of url with pool_size connections (made on first
 * use); NULL after logging for a malformed URL or ENOMEM. */
gw_queue *gw_queue_open(const char *url, int pool_size);
void gw_queue_close(gw_queue *q);
int gw_queue_ping(gw_queue *q);
/* The queue's connection pool (its figures for /metrics: redis.h). */
struct gw_redis *gw_queue_redis(gw_queue *q);

/* Score: more urgent priority first, then smaller seq (older) first. */
double gw_queue_score(int priority, int64_t seq);
typedef struct gw_queued gw_queued;
/* Adds a job to its tenant's ready queue (an entry already there takes the
 * new score). */
int gw_queue_push(gw_queue *q, const gw_queued *j);
/* Adds a re-queued job: to the delayed set while its back-off lasts (its
 * not_before is in the future), else to the ready queue. */
int gw_queue_push_queued(gw_queue *q, const gw_queued *j);
/* Who is told when gw_queue_push_queued has pushed a job (the scheduler
 * registers its wake here, so what requeues a job need not know it); fn
 * NULL: no one. fn runs on the pushing thread, after the push (also one
 * that failed), and must not block. */
void gw_queue_on_push(gw_queue *q, void (*fn)(void *arg), void *arg);
/* Adds every job of list that is missing from both sets, each where it
 * belongs; *added says how many were. */
int gw_queue_push_missing(gw_queue *q, const gw_queued *list, int n, int *added);
/* Moves the delayed jobs whose back-off has ended to the ready queue;
 * *moved says how many. */
int gw_queue_promote_due(gw_queue *q, int *moved);
/* Up to per_tenant entries from the head of every tenant's ready queue,
 * and no more than max / tenants (at least 1), at most max in all, in one
 * round trip: out holds them tenant by tenant, each tenant's most urgent
 * first (score set). Where more tenants wait than max, the first tenant
 * read turns from one call to the next. The scheduler orders the tenants
 * (fair share). */
int gw_queue_peek(gw_queue *q, int per_tenant, gw_ready *out, int max, int *n);
/* How many entries of its tenant are ahead of j's in the ready queue
 * (ZRANK, one round trip, O(log n)): 0 with *ahead set, -ENOENT when the
 * job is not in it (waiting out a back-off, taken, or not enqueued yet),
 * -EIO. */
int gw_queue_rank(gw_queue *q, const gw_queued *j, int64_t *ahead);
/* Removes an entry: 1 when this call removed it, 0 when it was gone. */
int gw_queue_take(gw_queue *q, const char *member);
/* Removes n entries in one round trip: taken[i] is 1 when this call
 * removed members[i], 0 when it was gone. 0 or -EIO. */
int gw_queue_take_many(gw_queue *q, const char *const *members, int n, int *taken);
/* Removes the ready entry of j; 0 or -EIO. */
int gw_queue_drop_job(gw_queue *q, const gw_queued *j);
/* Drops the single ready set of earlier versions; the reconciler puts its
 * jobs back, each in its tenant's set. 0 or -EIO. */
int gw_queue_forget_legacy(gw_queue *q);
/* The entry fields of a job object (GET /v1/jobs/{id}'s) of tenant_id. */
void gw_queued_from_job(const json_t *job, int64_t tenant_id, gw_queued *q);

/* Takes or renews a lock held by owner for ttl_ms: 1 held, 0 held by
 * another, -EIO. */
int gw_queue_lock(gw_queue *q, const char *name, const char *owner, int ttl_ms);

#endif
