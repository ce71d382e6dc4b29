/* keycache.h — API key → tenant answers of PostgreSQL kept in memory for a
 * short TTL, so that a request costs no key lookup. Several gateways share
 * one PostgreSQL, and a key revoked through any of them must stop working
 * on all within 1 s: the TTL (at most 1 s) is that bound.
 *
 * Why a TTL and not Redis pub/sub invalidation: revocation is rare and its
 * bound is a second, so a sub-second TTL meets it with no subscriber
 * thread, no ordering between the PostgreSQL commit and the message, and
 * nothing to get wrong when Redis is down (a missed invalidation would
 * leave a revoked key working until the TTL anyway, so pub/sub could only
 * shorten the common case, never the bound). The price is one lookup per
 * key in use, per gateway, per TTL: a few queries a second, whatever the
 * request rate. The gateway that revokes clears its own cache at once.
 *
 * Unknown keys are remembered too (a client retrying a wrong key costs one
 * lookup per TTL), but the table has a fixed size and an unknown key never
 * takes the place of a valid one, not even an expired one: keys made up by
 * an attacker can neither grow the memory nor push out the keys of real
 * tenants. An expired valid answer is kept as a memory that the key was
 * valid (gw_keycache_was_valid): the failed-authentication limiter never
 * throttles such a key, only keys it does not know. */
#ifndef GW_KEYCACHE_H
#define GW_KEYCACHE_H

#include <stdint.h>

#include "store.h"

typedef struct gw_keycache gw_keycache;

/* A cache of at most capacity keys (rounded up to a multiple of 8), each
 * answer kept ttl_ms (0: nothing is kept, every lookup goes to PostgreSQL).
 * NULL on ENOMEM. */
gw_keycache *gw_keycache_new(int capacity, int ttl_ms);
void gw_keycache_free(gw_keycache *c);

/* What the cache knows of key at now_ms (monotonic): 1 with *out filled
 * for a valid key, 0 for a key known to be unknown or revoked, -ENOENT
 * when it has no answer (never asked, or expired). */
int gw_keycache_get(gw_keycache *c, const char *key, int64_t now_ms, gw_key_auth *out);

/* 1 if an answer for key, fresh or expired, says it was valid: it is worth
 * a lookup whatever its client's address did; 0 otherwise. Works with a
 * TTL of 0 too (answers are then kept only as this memory). */
int gw_keycache_was_valid(gw_keycache *c, const char *key);

/* Keeps PostgreSQL's answer for key: ka for a valid key, NULL for an
 * unknown or revoked one. asked_ms is when the lookup was sent, not when
 * it came back: an answer read before a revocation committed was asked
 * before it, so it expires no later than ttl_ms after the revocation. */
void gw_keycache_put(gw_keycache *c, const char *key, const gw_key_auth *ka, int64_t asked_ms);

/* Forgets every answer: after this gateway revoked a key or changed a
 * tenant's limits, so that the change applies here at once. */
void gw_keycache_clear(gw_keycache *c);

#endif
