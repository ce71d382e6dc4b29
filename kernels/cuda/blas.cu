/* blas.cu — cuBLAS handles, one per (worker thread, device), made on first
 * use and destroyed when the plugin closes (kl_hcache.h). Creating one per
 * run cost milliseconds, and cublasDestroy synchronises the whole device:
 * a cancelled gemm waited there for every other run on its GPU. Each run
 * gives the handle its stream and a workspace of its own, allocated on
 * that stream and freed on it, so work a cancelled run left queued never
 * shares workspace memory with the handle's next run. */
#include "kl_cuda.h"
#include "kl_hcache.h"

#include <stdio.h>

static kl_hcache *cache;

static int handle_create(void *ctx, int dev, void **h, char *err, size_t errlen)
{
    (void)ctx;
    cublasHandle_t b = NULL;
    int cur = -1;
    cudaGetDevice(&cur);
    cudaError_t e = cudaSetDevice(dev);
    cublasStatus_t s = e == cudaSuccess ? cublasCreate(&b) : CUBLAS_STATUS_NOT_INITIALIZED;
    if (cur >= 0)
        cudaSetDevice(cur);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasCreate on GPU %d: %s", dev,
                 e != cudaSuccess ? cudaGetErrorString(e) : cublasGetStatusString(s));
        return KL_EBACKEND;
    }
    *h = (void *)b;
    return 0;
}

static void handle_destroy(void *ctx, int dev, void *h)
{
    (void)ctx;
    cudaSetDevice(dev);
    cublasDestroy((cublasHandle_t)h);
    (void)cudaGetLastError();
}

int kl__cuda_blas_open(void)
{
    if (cache) /* opened twice in one process: one cache */
        return 0;
    kl_hcache_ops ops = {handle_create, handle_destroy, NULL};
    cache = kl_hcache_new(&ops);
    return cache ? 0 : KL_ENOMEM;
}

void kl__cuda_blas_close(void)
{
    kl_hcache_free(cache);
    cache = NULL;
}

size_t kl__cuda_blas_handles(void)
{
    return cache ? kl_hcache_count(cache) : 0;
}

/* cuBLAS's recommendation: 32 MiB on Hopper and later, 4 MiB before. */
static size_t workspace_bytes(int dev)
{
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
}

int kl__cuda_blas_begin(int dev, cudaStream_t s, cublasHandle_t *h, void **ws, kl_err *err)
{
    char why[160] = "";
    void *got = NULL;
    int rc = 0;
    const size_t bytes = workspace_bytes(dev);
    *h = NULL;
    *ws = NULL;
    if ((rc = kl_hcache_get(cache, dev, &got, why, sizeof why)) < 0) {
        kl_err_set(err, NULL, "%s", why);
        return rc;
    }
    *h = (cublasHandle_t)got;
    /* The stream first: setting it resets the workspace to cuBLAS's own. */
    KL_CUBLAS_CHECK(cublasSetStream(*h, s));
    KL_CUDA_CHECK(cudaMallocAsync(ws, bytes, s));
    KL_CUBLAS_CHECK(cublasSetWorkspace(*h, *ws, bytes));
done:
    return rc;
}

void kl__cuda_blas_end(void *ws, cudaStream_t s)
{
    kl__cuda_free(ws, s);
}
