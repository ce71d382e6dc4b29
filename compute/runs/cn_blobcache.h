/* cn_blobcache.h — the node's cache of input blobs by content address: the
 * bytes of recently fetched blobs, least recently used evicted first, within
 * a byte budget, so that weights or a dataset sent with many jobs cross the
 * network once. Runs get copies (kernels may write their inputs); the cache's
 * own buffers never leave it. No HTTP: the caller fetches. Thread-safe. */
#ifndef CN_BLOBCACHE_H
#define CN_BLOBCACHE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cn_blobcache cn_blobcache;
typedef struct cn_blobcache_entry cn_blobcache_claim;

typedef struct cn_blobcache_stats {
    uint64_t budget_bytes;
    uint64_t used_bytes;     /* bytes held by cached blobs */
    uint64_t entries;
    uint64_t hits;           /* lookups answered from the cache */
    uint64_t misses;         /* lookups the caller had to fetch */
    uint64_t fetched_bytes;  /* bytes fetched over the network (cn_blobcache_count_fetch) */
    uint64_t served_bytes;   /* bytes copied out of the cache to runs */
} cn_blobcache_stats;

enum {
    CN_BLOB_MISS = 0,        /* not cached: the caller fetches */
    CN_BLOB_HIT = 1,         /* copied into the caller's buffer */
    CN_BLOB_ESIZE = -EMSGSIZE,      /* cached, but its size is not the one asked for */
    CN_BLOB_ECANCELED = -ECANCELED, /* *cancel was raised while waiting */
};

/* A cache of at most budget bytes (0: it keeps nothing, but still counts).
 * Returns 0 and *out, or -ENOMEM. */
int cn_blobcache_create(uint64_t budget, cn_blobcache **out);

/* Frees every entry. No caller may still be inside a cn_blobcache_ function
 * nor hold a claim. NULL is a no-op. */
void cn_blobcache_destroy(cn_blobcache *c);

/* Looks id up for a caller that needs its size bytes in dst (caller-owned).
 *   CN_BLOB_HIT: the bytes are copied into dst.
 *   CN_BLOB_MISS: the caller fetches the blob itself. When *claim is set the
 *     caller is the one fetching it for everybody: it must then call
 *     cn_blobcache_fill or cn_blobcache_abandon exactly once, and others who
 *     ask for id meanwhile wait for that instead of fetching it again. *claim
 *     is NULL when the blob is not to be cached (larger than the budget).
 *   CN_BLOB_ESIZE: the cached blob has *actual bytes, not size.
 *   CN_BLOB_ECANCELED: *cancel (may be NULL) was raised while waiting for
 *     another caller's fetch; polled every 100 ms. */
int cn_blobcache_get(cn_blobcache *c, const char *id, void *dst, size_t size,
                     const volatile int *cancel, cn_blobcache_claim **claim, uint64_t *actual);

/* Resolves a claim with the verified bytes of the blob (borrowed: the cache
 * keeps its own copy, made outside the lock). Least recently used blobs are
 * evicted to make room; blobs being copied out are not, and when they alone
 * stand in the way the blob is not kept. The claim is gone afterwards. */
void cn_blobcache_fill(cn_blobcache *c, cn_blobcache_claim *claim, const void *data);

/* Resolves a claim whose fetch failed: a waiter fetches it instead. */
void cn_blobcache_abandon(cn_blobcache *c, cn_blobcache_claim *claim);

/* Adds n to the bytes fetched over the network. */
void cn_blobcache_count_fetch(cn_blobcache *c, uint64_t n);

void cn_blobcache_stats_get(cn_blobcache *c, cn_blobcache_stats *out);

#endif
