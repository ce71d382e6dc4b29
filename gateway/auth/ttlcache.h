/* ttlcache.h — the answers of PostgreSQL about secrets (API keys, node
 * credentials) kept a short TTL in memory: a set-associative table of
 * 32-byte digests, 8 ways per set, one mutex per set so that requests of
 * different secrets rarely meet; the secret itself is never kept. Each
 * entry holds a fixed-size value (what the secret names) or says the
 * secret is unknown. The table has a fixed size, and an unknown secret
 * never takes the place of a known one, not even an expired one: made-up
 * secrets can neither grow the memory nor push out real ones. keycache.h
 * and nodecred.h are its two users. */
#ifndef GW_TTLCACHE_H
#define GW_TTLCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw_ttlcache gw_ttlcache;

/* At most capacity entries (rounded up to a multiple of 8) of value_size
 * bytes each, kept ttl_ms (0: every answer expires at once). NULL on
 * ENOMEM. */
gw_ttlcache *gw_ttlcache_new(int capacity, int ttl_ms, size_t value_size);
void gw_ttlcache_free(gw_ttlcache *c);
/* The TTL it was made with (0 or more). */
int gw_ttlcache_ttl_ms(const gw_ttlcache *c);

/* What the cache knows of digest at now_ms (monotonic): 1 with value
 * copied out for a known secret, 0 for one known to be unknown, -ENOENT
 * when it has no live answer. */
int gw_ttlcache_get(gw_ttlcache *c, const unsigned char digest[32], int64_t now_ms, void *value);
/* 1 if an answer for digest, live or expired, says it was known. */
int gw_ttlcache_was_known(gw_ttlcache *c, const unsigned char digest[32]);
/* Keeps PostgreSQL's answer for digest: value (value_size bytes) for a
 * known secret, NULL for an unknown one. asked_ms is when the lookup was
 * sent: an answer read before a change committed expires no later than
 * ttl_ms after it, and a slow answer never replaces one asked after it. */
void gw_ttlcache_put(gw_ttlcache *c, const unsigned char digest[32], const void *value, int64_t asked_ms);
/* Forgets every answer (match NULL), or those whose known value match
 * says 1 to. */
void gw_ttlcache_forget(gw_ttlcache *c, int (*match)(const void *value, const void *arg), const void *arg);

/* Calls each(digest, arg) for every known answer live at now_ms that
 * expires within ahead_ms and was read (a hit, or the lookup that put it)
 * within the last used_within_ms: what a batch refresh asks PostgreSQL
 * again before it expires. each runs under a set's lock: it must not call
 * the cache. Returns how many. */
int gw_ttlcache_due(gw_ttlcache *c, int64_t now_ms, int ahead_ms, int used_within_ms,
                    void (*each)(const unsigned char digest[32], void *arg), void *arg);
/* A batch refresh's answer for digest, asked at asked_ms: the known answer
 * the cache holds for it (live or expired, not forgotten) takes value and
 * expires ttl_ms after asked_ms, never sooner than it did; its read time
 * stays, so an answer nobody reads stops being refreshed. An answer
 * forgotten meanwhile (gw_ttlcache_forget) is not brought back. 1 when one
 * was refreshed. */
int gw_ttlcache_refresh(gw_ttlcache *c, const unsigned char digest[32], const void *value,
                        int64_t asked_ms);

#endif
