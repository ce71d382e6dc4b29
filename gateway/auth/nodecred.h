/* nodecred.h — the secrets of the cluster listener. The cluster token only
 * registers a node; registration gives the node a credential of its own
 * (32 random bytes), bound to its id, that every later call carries. Here:
 * the token's strength (checked at start), the credentials' form and hash
 * (PostgreSQL keeps only the SHA-256), and a short-lived cache of which
 * node a credential names, so that a node's calls cost no lookup.
 *
 * The cache's TTL is the key cache's (--key-cache-ms, at most 1 s): a
 * credential replaced or dropped on one gateway (a name taken anew, a node
 * that left) stops working on every gateway within it; the gateway that
 * made the change forgets the node at once. Unknown credentials are not
 * kept: they are failed authentications, which the per-address limiter
 * throttles before any lookup. */
#ifndef GW_NODECRED_H
#define GW_NODECRED_H

#include <stddef.h>
#include <stdint.h>

/* The shortest cluster token serve accepts. */
#define GW_CLUSTER_TOKEN_MIN 32
/* "kn_" + 43 base64url characters (32 bytes) + NUL, rounded up. */
#define GW_NODECRED_SIZE 48
/* The SHA-256 of a credential as 64 hex digits + NUL. */
#define GW_NODECRED_HASH_SIZE 65

/* 0 when token may guard the cluster: at least GW_CLUSTER_TOKEN_MIN
 * printable ASCII characters without spaces, not a default anyone knows
 * (the old compose string, "changeme", ...), and not trivially repetitive
 * (fewer than 8 distinct characters, or a shorter string repeated); else
 * -EINVAL with why filled, naming the rule. */
int gw_cluster_token_check(const char *token, char *why, size_t whylen);

/* A new credential: "kn_" + 32 random bytes in base64url (no padding).
 * 0 or -errno. */
int gw_nodecred_make(char cred[GW_NODECRED_SIZE]);
/* 1 when s has a credential's form (what a node presents is checked before
 * it is hashed or looked up). */
int gw_nodecred_valid(const char *s);
/* The SHA-256 of cred as lowercase hex: what PostgreSQL keeps and looks
 * up. 0 or -1. */
int gw_nodecred_hash(const char *cred, char hex[GW_NODECRED_HASH_SIZE]);

typedef struct gw_nodecreds gw_nodecreds;

/* A cache of at most capacity credentials (rounded up to a multiple of 8),
 * each answer kept ttl_ms (0: none kept). NULL on ENOMEM. */
gw_nodecreds *gw_nodecreds_new(int capacity, int ttl_ms);
void gw_nodecreds_free(gw_nodecreds *c);
/* The node the credential of hash hex names at now_ms (monotonic): 0 with
 * node_id (and name, namelen bytes) filled, or -ENOENT when the cache has
 * no live answer. */
int gw_nodecreds_get(gw_nodecreds *c, const char *hex, int64_t now_ms, char node_id[37],
                     char *name, size_t namelen);
/* Keeps PostgreSQL's answer: the credential of hash hex names node_id
 * (name). asked_ms is when the lookup was sent, so an answer read before a
 * change committed expires no later than ttl_ms after it. */
void gw_nodecreds_put(gw_nodecreds *c, const char *hex, const char *node_id, const char *name,
                      int64_t asked_ms);
/* Forgets every answer naming node_id: its credential changed here (a
 * registration, a deregistration). */
void gw_nodecreds_forget(gw_nodecreds *c, const char *node_id);

/* The refresh. Without it every node's first call after each TTL looked
 * its credential up: at 1,000 nodes heartbeating and polling, 1,200
 * statements a second, a few per job started. Every ttl/4 one statement
 * asks again for the answers that expire within ttl/2 and that a call read
 * within the last GW_NODECRED_KEEP_MS (a node calls at least every
 * heartbeat): a node's calls then find a live answer. The bound stays: an
 * answer is asked after the refresh starts, so a change committed before
 * it is seen, and a credential dropped on another gateway stops working
 * here within the TTL; one forgotten here is not brought back. */
#define GW_NODECRED_KEEP_MS 10000

/* A batch lookup: the nodes the n credential hashes hex[] name, each found
 * one given to gw_nodecreds_refreshed(c, hex, node_id, name, asked_ms);
 * the others are left to expire. 0 or -errno. */
typedef int (*gw_nodecreds_lookup)(void *arg, gw_nodecreds *c, const char *const *hex, int n,
                                   int64_t asked_ms);
/* Starts the refresh thread (none when the TTL is 0; gw_nodecreds_free
 * stops it). 0 or -errno. */
int gw_nodecreds_refresh_start(gw_nodecreds *c, gw_nodecreds_lookup lookup, void *arg);
/* One pass at now_ms with lookup, what the thread does every ttl/4: the
 * number of answers asked again (0: none due, lookup not called), or
 * -errno. */
int gw_nodecreds_refresh_once(gw_nodecreds *c, int64_t now_ms, gw_nodecreds_lookup lookup,
                              void *arg);
/* A batch lookup's answer, asked at asked_ms: refreshes the cached answer
 * for hex, if the cache still holds one. */
void gw_nodecreds_refreshed(gw_nodecreds *c, const char *hex, const char *node_id,
                            const char *name, int64_t asked_ms);

#endif
