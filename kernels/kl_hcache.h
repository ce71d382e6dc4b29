/* kl_hcache.h — a cache of library handles, one per (thread, device),
 * created on a thread's first use of a device and destroyed together when
 * the cache goes. The CUDA plugin keeps its cuBLAS handles here:
 * cublasCreate costs milliseconds and cublasDestroy synchronises the whole
 * device, so neither belongs in a run. The create and destroy functions
 * are the caller's, so the bookkeeping is tested without a GPU
 * (tests/unit/kernels/test_kl_hcache.c). */
#ifndef KL_HCACHE_H
#define KL_HCACHE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_hcache kl_hcache;

typedef struct kl_hcache_ops {
    /* Makes a handle for device dev (the calling thread's): 0 and *h, or a
     * negative KL_ code with err (may be NULL) saying why. */
    int (*create)(void *ctx, int dev, void **h, char *err, size_t errlen);
    /* Releases a handle create made; may run on any thread. */
    void (*destroy)(void *ctx, int dev, void *h);
    void *ctx;
} kl_hcache_ops;

/* Most handles a cache keeps: threads x devices of one node are far fewer
 * (256 slots x 16 GPUs would be the most a node can have). */
#define KL_HCACHE_MAX 4096

/* A new, empty cache that calls ops (copied); NULL on ENOMEM. */
kl_hcache *kl_hcache_new(const kl_hcache_ops *ops);

/* The calling thread's handle for dev, created on first use: 0 and *h,
 * or the create's code (nothing is cached then, so the next call tries
 * again), or KL_ENOMEM when the cache is full. The handle stays the
 * cache's: the caller never destroys it, and uses it from this thread
 * only. */
int kl_hcache_get(kl_hcache *c, int dev, void **h, char *err, size_t errlen);

/* Handles held. */
size_t kl_hcache_count(kl_hcache *c);

/* Destroys every handle (ops.destroy) and the cache; NULL is a no-op. No
 * thread may be using a handle. */
void kl_hcache_free(kl_hcache *c);

#ifdef __cplusplus
}
#endif
#endif
