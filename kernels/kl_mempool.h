/* kl_mempool.h — how the CUDA plugin sets up each device's stream-ordered
 * memory pool (the one cudaMallocAsync draws from). By default a pool
 * gives freed memory back to the driver at every synchronisation, so each
 * run maps its buffers again; a release threshold keeps that much reserved
 * between runs. The device calls are the caller's functions, so the policy
 * is tested without a GPU (tests/unit/kernels/test_kl_mempool.c). */
#ifndef KL_MEMPOOL_H
#define KL_MEMPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_mempool_ops {
    /* 1 when dev has memory pools (cudaDevAttrMemoryPoolsSupported), 0
     * when not, negative when the question failed */
    int (*supported)(void *ctx, int dev);
    uint64_t (*total)(void *ctx, int dev); /* the device's memory, bytes */
    /* cudaMemPoolAttrReleaseThreshold of dev's default pool: 0 or negative */
    int (*set_threshold)(void *ctx, int dev, uint64_t bytes);
    void *ctx;
} kl_mempool_ops;

/* The bytes a device's pool keeps between runs: half its memory. The rest
 * goes back to the driver, for the node's tasks (containers placed on the
 * same GPU) and anything else on the host. */
uint64_t kl_mempool_threshold(uint64_t total);

/* Sets the threshold on devices 0..ndev-1. 0, with note (may be NULL)
 * saying what each pool keeps ("pool keeps 70.5 GiB on GPU 0, ..."); or
 * KL_ENOTSUP when a device has no memory pools (every kernel allocates
 * with cudaMallocAsync, so none could run there), KL_EBACKEND when a call
 * failed, with note saying which device and what. */
int kl_mempool_setup(int ndev, const kl_mempool_ops *ops, char *note, size_t len);

#ifdef __cplusplus
}
#endif
#endif
