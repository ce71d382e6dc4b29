/* jobcache.h — ended jobs as GET /v1/jobs/{id} answers them, kept in this
 * gateway's memory. A job that has ended never changes again (nothing
 * rewrites a succeeded, failed or cancelled job), so an answer read once is
 * right on every gateway until the job is deleted: a dashboard polling
 * finished jobs costs no PostgreSQL at all.
 *
 * Deletion (DELETE /v1/jobs/{id}, retention) is the one change. Each
 * answer is kept with its tenant's count of deleted jobs as the caller's
 * key lookup last read it (gen: jobs_deleted, keycache.h), and is found
 * only under the same count: once a job of the tenant is deleted on any
 * gateway, every gateway stops answering the tenant's cached jobs from
 * memory within the key cache's period (at most 1 s) and reads them again.
 * The gateway that deletes a job also drops its answer at once. The count
 * must be read before the job is (as authentication is, before the
 * handler): an answer read just before a deletion is then kept under the
 * count from before it, and found no more once the count has moved.
 *
 * A set-associative table (8 ways a set, one mutex a set, so readers of
 * different jobs rarely meet); each set has an equal share of the byte
 * budget, and the least recently read entries of a set leave first. An
 * answer is found only by its job id and its tenant, as the PostgreSQL
 * lookup it replaces. */
#ifndef GW_JOBCACHE_H
#define GW_JOBCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw_jobcache gw_jobcache;

/* A cache of at most max_bytes of answers (0: nothing is kept). NULL on
 * ENOMEM. */
gw_jobcache *gw_jobcache_new(size_t max_bytes);
void gw_jobcache_free(gw_jobcache *c);

/* A copy (malloc'd, *len bytes) of the answer kept for job id of tenant
 * under gen, or NULL (nothing kept: the caller asks PostgreSQL). */
char *gw_jobcache_get(gw_jobcache *c, int64_t tenant, int64_t gen, const char *id, size_t *len);

/* Keeps json (len bytes, the answer of an ended job) for job id of tenant
 * under gen; an answer larger than a set's share is not kept. */
void gw_jobcache_put(gw_jobcache *c, int64_t tenant, int64_t gen, const char *id, const char *json,
                     size_t len);

/* Forgets the answer kept for job id, if any (the job was deleted). */
void gw_jobcache_drop(gw_jobcache *c, const char *id);

#endif
