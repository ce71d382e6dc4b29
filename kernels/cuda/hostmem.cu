/* hostmem.cu — the plugin's page-locked host memory and the fences that
 * keep it safe. host_alloc serves buffers of 1 MiB or more from a pool of
 * cudaHostAlloc'd buffers (kl_pinpool.h), smaller ones and refused ones
 * from malloc. A run that returns with work still queued on its streams
 * (a cancel returns at once; the stream runs on) leaves a fence, a set of
 * events recorded on those streams, on its inputs and outputs: the pool
 * neither reuses nor unpins such a buffer, and host_unregister does not
 * unpin a mapping, before the events have completed. */
#include "kl_cuda.h"
#include "kl_pinpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Below this, pinning costs more than the faster copy gains. */
#define PIN_MIN ((size_t)1 << 20)
/* Streams one run may leave unfinished: a rank each, at most 16. */
#define SCOPE_MAX 32

/* Events recorded on the unfinished streams of one run, shared by every
 * buffer the run touched. */
struct fence {
    int refs;
    int n;
    int dev[SCOPE_MAX];
    cudaEvent_t ev[SCOPE_MAX];
};

struct scope {
    int active;
    fence *f;    /* made at the first stream closed with work queued */
};

static __thread scope run_scope;
static kl_pinpool *pool;

static int fence_done(void *ctx, void *fc)
{
    (void)ctx;
    fence *f = (fence *)fc;
    for (int i = 0; i < f->n; i++) {
        cudaError_t e = cudaEventQuery(f->ev[i]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            return 0;
        }
        /* cudaSuccess, or an error (a lost device) that no wait can end */
    }
    return 1;
}

static void fence_wait(void *ctx, void *fc)
{
    (void)ctx;
    fence *f = (fence *)fc;
    for (int i = 0; i < f->n; i++)
        (void)cudaEventSynchronize(f->ev[i]);
    (void)cudaGetLastError();
}

static void fence_retain(void *ctx, void *fc)
{
    (void)ctx;
    __atomic_add_fetch(&((fence *)fc)->refs, 1, __ATOMIC_RELAXED);
}

static void fence_drop(void *ctx, void *fc)
{
    (void)ctx;
    fence *f = (fence *)fc;
    if (__atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int i = 0; i < f->n; i++)
        cudaEventDestroy(f->ev[i]);
    (void)cudaGetLastError();
    free(f);
}

static void *pin_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess)
        return p;
    (void)cudaGetLastError(); /* a refused pin is no error of the next run's */
    return NULL;
}

static void pin_release(void *ctx, void *p)
{
    (void)ctx;
    if (cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

int kl__cuda_hostmem_open(char *note, size_t len)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const size_t phys = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)8 << 30;
    const size_t four_gib = (size_t)4 << 30;
    kl_pinpool_ops ops = {pin_alloc, pin_release, fence_done, fence_wait, fence_retain, fence_drop, NULL};
    /* Pinned pages are taken from the host for good: at most half of
     * memory in all, and an eighth (4 GiB at most) kept idle. */
    kl_pinpool_limits lim = {PIN_MIN, phys / 8 < four_gib ? phys / 8 : four_gib, phys / 2};
    if (!pool) /* opened twice in one process: one pool */
        pool = kl_pinpool_new(&ops, &lim);
    if (!pool)
        return KL_ENOMEM;
    snprintf(note, len, "pinned buffers >= 1 MiB pooled, %.1f GiB idle and %.1f GiB in all at most",
             (double)lim.max_idle / 1073741824.0, (double)lim.max_total / 1073741824.0);
    return 0;
}

void kl__cuda_hostmem_close(void)
{
    kl_pinpool_free(pool);
    pool = NULL;
}

void kl__cuda_hostmem_stats(kl_pinpool_stats *s)
{
    kl_pinpool_stats_get(pool, s);
}

void *kl__cuda_host_alloc(size_t bytes)
{
    void *p = kl_pinpool_get(pool, bytes);
    return p ? p : malloc(bytes ? bytes : 1);
}

void kl__cuda_host_free(void *p)
{
    if (p && !kl_pinpool_put(pool, p))
        free(p);
}

int kl__cuda_host_register(void *p, size_t bytes)
{
    if (!p || bytes < PIN_MIN)
        return KL_EINVAL;
    /* Read-only: the mapping is private and writable, and a pin for writing
     * would copy every page of the file first. */
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return KL_EBACKEND;
    }
    /* Untracked, it could be unpinned under a cancelled run's copy. */
    if (kl_pinpool_adopt(pool, p, bytes) < 0) {
        cudaHostUnregister(p);
        (void)cudaGetLastError();
        return KL_ENOMEM;
    }
    return 0;
}

void kl__cuda_host_unregister(void *p)
{
    if (!p)
        return;
    kl_pinpool_disown(pool, p); /* after the copies that may still read it */
    if (cudaHostUnregister(p) != cudaSuccess)
        (void)cudaGetLastError();
}

void kl__cuda_scope_begin(void)
{
    run_scope.active = 1;
    run_scope.f = NULL;
}

void kl__cuda_stream_close(cudaStream_t s, int dev)
{
    if (!s)
        return;
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaErrorNotReady && run_scope.active) {
        (void)cudaGetLastError();
        if (!run_scope.f && (run_scope.f = (fence *)calloc(1, sizeof(fence))) != NULL)
            run_scope.f->refs = 1;
        fence *f = run_scope.f;
        int cur = -1;
        cudaGetDevice(&cur);
        cudaSetDevice(dev);
        if (f && f->n < SCOPE_MAX && cudaEventCreateWithFlags(&f->ev[f->n], cudaEventDisableTiming) == cudaSuccess) {
            if (cudaEventRecord(f->ev[f->n], s) == cudaSuccess)
                f->dev[f->n++] = dev;
            else
                cudaEventDestroy(f->ev[f->n]);
        } else if (f) {
            /* No room to fence it: wait, the one safe answer left. */
            cudaStreamSynchronize(s);
        }
        if (cur >= 0)
            cudaSetDevice(cur);
    }
    cudaStreamDestroy(s);
    (void)cudaGetLastError();
}

void kl__cuda_scope_end(const kl_args *args, const kl_tensor *outs, int nouts)
{
    fence *f = run_scope.f;
    run_scope.active = 0;
    run_scope.f = NULL;
    if (!f)
        return;
    if (f->n > 0) {
        for (int i = 0; i < KL_MAX_IO; i++)
            if (args->inputs[i] && args->inputs[i]->data)
                kl_pinpool_fence(pool, args->inputs[i]->data, f);
        for (int i = 0; outs && i < nouts; i++)
            if (outs[i].data)
                kl_pinpool_fence(pool, outs[i].data, f);
    }
    fence_drop(NULL, f); /* the scope's reference; the buffers hold theirs */
}
