/* stats.h — GET /v1/stats/history's answers kept a few seconds per tenant
 * and window, so a dashboard polling it costs PostgreSQL at most one query
 * per TTL per tenant (store_stats.c asks, api_stats.c replies). */
#ifndef GW_STATS_H
#define GW_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw_stats gw_stats;

#define GW_STATS_MINUTES_MAX 1440 /* a day of one-minute buckets */

/* A cache of at most slots answers, each trusted ttl_ms. NULL on ENOMEM. */
gw_stats *gw_stats_new(int slots, int ttl_ms);
/* NULL is a no-op. */
void gw_stats_free(gw_stats *c);

/* Parses the minutes query parameter (NULL: the default, 60) into *out:
 * an integer in 1..GW_STATS_MINUTES_MAX written in decimal digits only.
 * 0 or -EINVAL. */
int gw_stats_minutes_parse(const char *s, int *out);

/* A copy of the cached answer under key, fresh at now_ms (monotonic), or
 * NULL when there is none. The caller frees it; *len gets its length. */
char *gw_stats_get(gw_stats *c, const char *key, int64_t now_ms, size_t *len);
/* Keeps a copy of body (len bytes) under key from now_ms, replacing the
 * entry of key or the oldest one. 0 or -ENOMEM. */
int gw_stats_put(gw_stats *c, const char *key, const char *body, size_t len, int64_t now_ms);

#endif
