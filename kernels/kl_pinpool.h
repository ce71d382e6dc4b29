/* kl_pinpool.h — the CUDA plugin's page-locked host buffers, kept for
 * reuse. cudaHostAlloc maps and pins every page (milliseconds per MiB),
 * and cudaFreeHost unpins them again, so a node that did both for each
 * input and output of each run paid them on every run. Buffers are cut in
 * size classes (four per power of two: at most a quarter wasted), and
 * returned ones wait for the next request of their class; idle bytes are
 * bounded, and idle buffers go back to the system when an allocation is
 * refused (memory pressure) or the bound is passed, least recently used
 * first.
 * A buffer that device work may still be copying into or out of (a
 * cancelled run's stream runs on after the run has returned) carries a
 * fence, and is neither reused nor released before the fence is done.
 * Ranges the pool did not allocate (host memory registered with
 * cudaHostRegister) can carry fences too, so that their owner can wait
 * before unmapping them.
 * Allocation and fences are the caller's functions, so the bookkeeping is
 * tested without a GPU (tests/unit/kernels/test_kl_pinpool.c). */
#ifndef KL_PINPOOL_H
#define KL_PINPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_pinpool kl_pinpool;

typedef struct kl_pinpool_ops {
    /* bytes of page-locked memory, or NULL when the system refuses */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *p);
    /* A fence marks device work (its events); the pool holds a reference
     * (retain) for as long as it keeps the fence, and drops it after. */
    int (*fence_done)(void *ctx, void *fence);   /* 1 when done; never blocks */
    void (*fence_wait)(void *ctx, void *fence);  /* blocks until done */
    void (*fence_retain)(void *ctx, void *fence);
    void (*fence_drop)(void *ctx, void *fence);
    void *ctx;
} kl_pinpool_ops;

typedef struct kl_pinpool_limits {
    size_t min_bytes;  /* smaller requests get NULL: pageable is as good there */
    size_t max_idle;   /* returned buffers kept for reuse, bytes */
    size_t max_total;  /* page-locked bytes in all, in use and idle; past
                          it a request gets NULL (pageable memory) */
} kl_pinpool_limits;

typedef struct kl_pinpool_stats {
    size_t blocks;         /* buffers the pool holds, in use or idle */
    size_t in_use_bytes, idle_bytes;
    size_t fenced;         /* buffers waiting on a fence not yet done */
    uint64_t hits;         /* requests served from an idle buffer */
    uint64_t misses;       /* requests that allocated */
    uint64_t fallbacks;    /* requests refused (over max_total, or the
                              system would not pin): the caller's pageable */
    uint64_t released;     /* idle buffers given back to the system */
} kl_pinpool_stats;

/* A new pool; NULL on ENOMEM or missing ops. */
kl_pinpool *kl_pinpool_new(const kl_pinpool_ops *ops, const kl_pinpool_limits *lim);

/* The size class of a request: the least m * 2^e (m = 4..7) >= bytes. */
size_t kl_pinpool_class(size_t bytes);

/* A buffer of at least bytes (not zeroed), or NULL when the caller should
 * use pageable memory instead (a small request, the bound, a refusal). */
void *kl_pinpool_get(kl_pinpool *p, size_t bytes);

/* Takes back a buffer kl_pinpool_get returned: 1. 0 when p is not one of
 * the pool's (the caller's own pageable memory, which it frees). */
int kl_pinpool_put(kl_pinpool *p, void *ptr);

/* Attaches fence to the buffer or adopted range that holds addr: it is
 * neither reused nor released (nor disowned) before the fence is done.
 * 1 when attached, 0 when addr is nobody's here. */
int kl_pinpool_fence(kl_pinpool *p, const void *addr, void *fence);

/* Tracks [ptr, ptr + bytes), memory the pool does not own, for fences
 * only; 0 or KL_ENOMEM. */
int kl_pinpool_adopt(kl_pinpool *p, void *ptr, size_t bytes);
/* Waits for the fences of an adopted range, then forgets it. */
void kl_pinpool_disown(kl_pinpool *p, void *ptr);

/* Releases every idle buffer whose fences are done; the bytes released. */
size_t kl_pinpool_trim(kl_pinpool *p);

void kl_pinpool_stats_get(kl_pinpool *p, kl_pinpool_stats *s);

/* Waits for every fence, releases every buffer (in use ones too: the
 * caller has stopped using them) and the pool. NULL is a no-op. */
void kl_pinpool_free(kl_pinpool *p);

#ifdef __cplusplus
}
#endif
#endif
