/* kl_pinpool.c — size-classed page-locked buffers (see kl_pinpool.h). One
 * mutex guards an array of blocks; a node holds tens of them, so lookups
 * scan it. The system's allocator and release are never called with the
 * lock held: pinning and unpinning take milliseconds, and cudaFreeHost may
 * wait for the device. */
#include "kl_pinpool.h"

#include "kl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Fences one block carries at once; a fifth waits for the oldest. A block
 * belongs to one run at a time, so one is the rule. */
#define PP_FENCES 4

typedef struct pp_block {
    char *p;
    size_t size;
    int in_use;
    int adopted;             /* the caller's memory, tracked for fences */
    int nf;
    void *fence[PP_FENCES];
    uint64_t last_used;      /* tick of its return, for least recently used */
} pp_block;

struct kl_pinpool {
    kl_pinpool_ops ops;
    kl_pinpool_limits lim;
    pthread_mutex_t mu;
    pp_block *v;
    size_t n, cap;
    size_t total;            /* owned bytes, in use + idle + being allocated */
    size_t idle;
    uint64_t tick;
    kl_pinpool_stats st;
};

size_t kl_pinpool_class(size_t bytes)
{
    if (bytes < 4)
        return 4;
    if (bytes > SIZE_MAX / 4)
        return bytes;
    size_t base = 1;
    while (base <= bytes / 2)
        base *= 2; /* the largest power of two <= bytes */
    for (size_t m = 4; m <= 8; m++)
        if (m * (base / 4) >= bytes)
            return m * (base / 4);
    return 2 * base;
}

kl_pinpool *kl_pinpool_new(const kl_pinpool_ops *ops, const kl_pinpool_limits *lim)
{
    if (!ops || !lim || !ops->alloc || !ops->release || !ops->fence_done || !ops->fence_wait ||
        !ops->fence_retain || !ops->fence_drop)
        return NULL;
    kl_pinpool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->ops = *ops;
    p->lim = *lim;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

/* Drops the fences of b that are done; 1 when none is left (lock held). */
static int pp_settled(kl_pinpool *p, pp_block *b)
{
    int k = 0;
    for (int i = 0; i < b->nf; i++) {
        if (p->ops.fence_done(p->ops.ctx, b->fence[i]))
            p->ops.fence_drop(p->ops.ctx, b->fence[i]);
        else
            b->fence[k++] = b->fence[i];
    }
    b->nf = k;
    return k == 0;
}

/* Takes block i out of the array (lock held); returns it. */
static pp_block pp_take(kl_pinpool *p, size_t i)
{
    pp_block b = p->v[i];
    p->v[i] = p->v[--p->n];
    return b;
}

/* The idle, settled block used longest ago, or -1 (lock held). */
static long pp_lru_idle(kl_pinpool *p)
{
    long best = -1;
    for (size_t i = 0; i < p->n; i++) {
        pp_block *b = &p->v[i];
        if (b->adopted || b->in_use || !pp_settled(p, b))
            continue;
        if (best < 0 || b->last_used < p->v[best].last_used)
            best = (long)i;
    }
    return best;
}

/* Moves the LRU idle settled block into *out for release outside the lock,
 * fixing the counts; 0 when there is none (lock held). */
static int pp_evict_one(kl_pinpool *p, pp_block *out)
{
    long i = pp_lru_idle(p);
    if (i < 0)
        return 0;
    *out = pp_take(p, (size_t)i);
    p->total -= out->size;
    p->idle -= out->size;
    p->st.released++;
    return 1;
}

static int pp_grow(kl_pinpool *p)
{
    if (p->n < p->cap)
        return 0;
    size_t cap = p->cap ? p->cap * 2 : 16;
    pp_block *v = realloc(p->v, sizeof *v * cap);
    if (!v)
        return KL_ENOMEM;
    p->v = v;
    p->cap = cap;
    return 0;
}

/* Releases victims[0..n) (lock not held). */
static void pp_release_all(kl_pinpool *p, pp_block *victims, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p->ops.release(p->ops.ctx, victims[i].p);
}

void *kl_pinpool_get(kl_pinpool *p, size_t bytes)
{
    if (!p || bytes < p->lim.min_bytes)
        return NULL;
    const size_t cls = kl_pinpool_class(bytes);
    pp_block victims[8];
    size_t nv = 0;
    void *q = NULL;

    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n; i++) {
        pp_block *b = &p->v[i];
        if (!b->adopted && !b->in_use && b->size == cls && pp_settled(p, b)) {
            b->in_use = 1;
            p->idle -= cls;
            p->st.hits++;
            q = b->p;
            break;
        }
    }
    /* Room under max_total: idle buffers of other classes go first. */
    while (!q && p->total + cls > p->lim.max_total && nv < 8 && pp_evict_one(p, &victims[nv]))
        nv++;
    int room = !q && p->total + cls <= p->lim.max_total && pp_grow(p) == 0;
    if (room)
        p->total += cls; /* reserved while the lock is dropped */
    else if (!q)
        p->st.fallbacks++;
    pthread_mutex_unlock(&p->mu);
    pp_release_all(p, victims, nv);
    if (q || !room)
        return q;

    q = p->ops.alloc(p->ops.ctx, cls);
    if (!q) {
        /* The system will not pin more: what sits idle goes back, then
         * one more try. */
        size_t freed = kl_pinpool_trim(p);
        if (freed)
            q = p->ops.alloc(p->ops.ctx, cls);
    }
    pthread_mutex_lock(&p->mu);
    if (q && pp_grow(p) == 0) {
        p->v[p->n++] = (pp_block){.p = q, .size = cls, .in_use = 1};
        p->st.misses++;
    } else {
        p->total -= cls;
        p->st.fallbacks++;
        if (q) {
            pthread_mutex_unlock(&p->mu);
            p->ops.release(p->ops.ctx, q);
            return NULL;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return q;
}

int kl_pinpool_put(kl_pinpool *p, void *ptr)
{
    pp_block victims[8];
    size_t nv = 0;
    int found = 0;

    if (!p || !ptr)
        return 0;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n; i++) {
        pp_block *b = &p->v[i];
        if (b->p == (char *)ptr && !b->adopted && b->in_use) {
            b->in_use = 0;
            b->last_used = ++p->tick;
            p->idle += b->size;
            found = 1;
            break;
        }
    }
    /* Past the idle bound, the least recently used settled ones go; a
     * fenced one waits for a later return or trim. */
    while (found && p->idle > p->lim.max_idle && nv < 8 && pp_evict_one(p, &victims[nv]))
        nv++;
    pthread_mutex_unlock(&p->mu);
    pp_release_all(p, victims, nv);
    return found;
}

int kl_pinpool_fence(kl_pinpool *p, const void *addr, void *fence)
{
    const char *a = addr;
    void *oldest = NULL;
    int found = 0;

    if (!p || !addr || !fence)
        return 0;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n && !found; i++) {
        pp_block *b = &p->v[i];
        if (a < b->p || a >= b->p + b->size)
            continue;
        found = 1;
        for (int k = 0; k < b->nf; k++)
            if (b->fence[k] == fence)
                goto out; /* attached already */
        if (b->nf == PP_FENCES)
            pp_settled(p, b);
        if (b->nf == PP_FENCES) {
            oldest = b->fence[0];
            memmove(b->fence, b->fence + 1, sizeof b->fence[0] * (PP_FENCES - 1));
            b->nf--;
        }
        p->ops.fence_retain(p->ops.ctx, fence);
        b->fence[b->nf++] = fence;
    }
out:
    pthread_mutex_unlock(&p->mu);
    if (oldest) {
        p->ops.fence_wait(p->ops.ctx, oldest);
        p->ops.fence_drop(p->ops.ctx, oldest);
    }
    return found;
}

int kl_pinpool_adopt(kl_pinpool *p, void *ptr, size_t bytes)
{
    int rc = KL_ENOMEM;
    if (!p || !ptr)
        return KL_EINVAL;
    pthread_mutex_lock(&p->mu);
    if (pp_grow(p) == 0) {
        p->v[p->n++] = (pp_block){.p = ptr, .size = bytes, .in_use = 1, .adopted = 1};
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void kl_pinpool_disown(kl_pinpool *p, void *ptr)
{
    pp_block b = {0};
    int found = 0;
    if (!p || !ptr)
        return;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n && !found; i++)
        if (p->v[i].adopted && p->v[i].p == (char *)ptr) {
            b = pp_take(p, i);
            found = 1;
        }
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < b.nf; k++) {
        p->ops.fence_wait(p->ops.ctx, b.fence[k]);
        p->ops.fence_drop(p->ops.ctx, b.fence[k]);
    }
}

size_t kl_pinpool_trim(kl_pinpool *p)
{
    size_t freed = 0;
    if (!p)
        return 0;
    for (;;) {
        pp_block victims[8];
        size_t nv = 0;
        pthread_mutex_lock(&p->mu);
        while (nv < 8 && pp_evict_one(p, &victims[nv]))
            nv++;
        pthread_mutex_unlock(&p->mu);
        pp_release_all(p, victims, nv);
        for (size_t i = 0; i < nv; i++)
            freed += victims[i].size;
        if (nv < 8)
            return freed;
    }
}

void kl_pinpool_stats_get(kl_pinpool *p, kl_pinpool_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    *s = p->st;
    for (size_t i = 0; i < p->n; i++) {
        pp_block *b = &p->v[i];
        if (!pp_settled(p, b)) /* fences that are done do not count */
            s->fenced++;
        if (b->adopted)
            continue;
        s->blocks++;
        if (b->in_use)
            s->in_use_bytes += b->size;
    }
    s->idle_bytes = p->idle;
    pthread_mutex_unlock(&p->mu);
}

void kl_pinpool_free(kl_pinpool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        pp_block *b = &p->v[i];
        for (int k = 0; k < b->nf; k++) {
            p->ops.fence_wait(p->ops.ctx, b->fence[k]);
            p->ops.fence_drop(p->ops.ctx, b->fence[k]);
        }
        if (!b->adopted)
            p->ops.release(p->ops.ctx, b->p);
    }
    pthread_mutex_destroy(&p->mu);
    free(p->v);
    free(p);
}
