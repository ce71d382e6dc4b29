/* gemm.cu — gemm on the GPU with cuBLAS, side by side with cpu/gemm.c.
 *   a is (m,k), b is (k,n), c is (m,n) optional, float32 row-major;
 *   output c (m,n) = alpha * a@b + beta * c.
 * cuBLAS is column-major: a row-major (m,n) matrix is its transpose there,
 * so c^T = b^T a^T is one sgemm with the operands swapped and no copies.
 * The math mode stays cuBLAS's default (full FP32, no TF32), so results
 * match the CPU within FP32 rounding. */
#include "kl_cuda.h"

cublasStatus_t kl__cuda_sgemm_rm(cublasHandle_t h, int m, int n, int k, float alpha, const float *dA,
                                 const float *dB, float beta, float *dC)
{
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, dB, n, dA, k, &beta, dC, n);
}

int kl__cuda_gemm(const kl_args *args, int dev, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *a = args->inputs[KL_GEMM_A], *b = args->inputs[KL_GEMM_B], *c = args->inputs[KL_GEMM_C];
    const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    const int64_t shape[2] = {m, n};
    const float alpha = (float)args->params[KL_GEMM_ALPHA].num;
    float beta = (float)args->params[KL_GEMM_BETA].num;
    float *dA = NULL, *dB = NULL, *dC = NULL;
    cudaStream_t s = NULL;
    cublasHandle_t h = NULL;
    int rc = 0;

    (void)dev;
    /* Empty products are beta*c or nothing: no GPU work, and cuBLAS would
     * reject the zero leading dimensions. */
    if (m == 0 || n == 0 || k == 0)
        return args->kernel->run_cpu(args, outs, err);
    if (kl_tensor_alloc(&outs[0], KL_F32, 2, shape) < 0) {
        kl_err_set(err, NULL, "gemm: cannot allocate output c of %lld x %lld", (long long)m, (long long)n);
        return KL_ENOMEM;
    }
    KL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    KL_CUBLAS_CHECK(cublasCreate(&h));
    KL_CUBLAS_CHECK(cublasSetStream(h, s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dA, (size_t)(m * k) * sizeof(float), s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dB, (size_t)(k * n) * sizeof(float), s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dC, (size_t)(m * n) * sizeof(float), s));
    KL_CUDA_CHECK(cudaMemcpyAsync(dA, a->data, (size_t)(m * k) * sizeof(float), cudaMemcpyHostToDevice, s));
    KL_CUDA_CHECK(cudaMemcpyAsync(dB, b->data, (size_t)(k * n) * sizeof(float), cudaMemcpyHostToDevice, s));
    if (c && beta != 0) {
        KL_CUDA_CHECK(cudaMemcpyAsync(dC, c->data, (size_t)(m * n) * sizeof(float), cudaMemcpyHostToDevice, s));
    } else {
        /* beta = 0 must not read c (BLAS semantics): uninitialised memory
         * could hold NaN, and 0 * NaN is NaN. */
        beta = 0;
        KL_CUDA_CHECK(cudaMemsetAsync(dC, 0, (size_t)(m * n) * sizeof(float), s));
    }
    if (kl__cuda_canceled(args)) {
        rc = KL_ECANCELED;
        kl_err_set(err, NULL, "gemm: cancelled");
        goto done;
    }
    KL_CUBLAS_CHECK(kl__cuda_sgemm_rm(h, (int)m, (int)n, (int)k, alpha, dA, dB, beta, dC));
    if ((rc = kl__cuda_wait(s, args, err)) < 0)
        goto done;
    KL_CUDA_CHECK(cudaMemcpyAsync(outs[0].data, dC, (size_t)(m * n) * sizeof(float), cudaMemcpyDeviceToHost, s));
    KL_CUDA_CHECK(cudaStreamSynchronize(s));
done:
    if (s) {
        kl__cuda_free(dA, s);
        kl__cuda_free(dB, s);
        kl__cuda_free(dC, s);
    }
    if (h)
        cublasDestroy(h);
    if (s)
        cudaStreamDestroy(s);
    return rc;
}
