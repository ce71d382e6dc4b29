/* jobcache.h — ended jobs as GET /v1/jobs/{id} answers them, kept in this
 * gateway's memory. A job that has ended never changes again (nothing
 * rewrites a succeeded, failed or cancelled job; jobs are not deleted), so
 * an answer read once is right for ever and on every gateway: a dashboard
 * polling finished jobs costs no PostgreSQL at all, and the cache needs no
 * invalidation — only a bound on its memory.
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

/* A copy (malloc'd, *len bytes) of the answer kept for job id of tenant,
 * or NULL (nothing kept: the caller asks PostgreSQL). */
char *gw_jobcache_get(gw_jobcache *c, int64_t tenant, const char *id, size_t *len);

/* Keeps json (len bytes, the answer of an ended job) for job id of tenant;
 * an answer larger than a set's share is not kept. */
void gw_jobcache_put(gw_jobcache *c, int64_t tenant, const char *id, const char *json, size_t len);

#endif
