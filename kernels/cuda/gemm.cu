/* gemm.cu — gemm on the GPU with cuBLAS, side by side with cpu/gemm.c.
 *   a is (m,k), b is (k,n), c is (m,n) optional, float32 row-major, or all
 *   three batched: (batch,m,k), (batch,k,n), (batch,m,n);
 *   output c (m,n) or (batch,m,n) = alpha * a@b + beta * c.
 * cuBLAS is column-major: a row-major (m,n) matrix is its transpose there,
 * so c^T = b^T a^T is one gemm with the operands swapped and no copies; a
 * batch is one strided-batched call.
 * Precisions:
 *   fp32  cublasSgemm(StridedBatched) in cuBLAS's default math mode (full
 *         FP32, no TF32): results match the CPU within FP32 rounding;
 *   tf32  cublasGemm(StridedBatched)Ex with CUBLAS_COMPUTE_32F_FAST_TF32:
 *         FP32 data, tensor cores round the operands to TF32 (10-bit
 *         mantissa), FP32 accumulation;
 *   bf16  a and b converted to bf16 on the device (f32_to_bf16 below), then
 *         cublasGemm(StridedBatched)Ex with bf16 inputs, FP32 output and
 *         CUBLAS_COMPUTE_32F (FP32 accumulation on the tensor cores).
 * The run's info says which precision ran. */
#include "kl_cuda.h"

#include <cuda_bf16.h>

cublasStatus_t kl__cuda_sgemm_rm(cublasHandle_t h, int m, int n, int k, float alpha, const float *dA,
                                 const float *dB, float beta, float *dC)
{
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, dB, n, dA, k, &beta, dC, n);
}

/* Matrices per cuBLAS call: the batch count is an int, and older cuBLAS
 * releases mapped it onto gridDim.y/z (at most 65535). */
#define BATCH_PER_CALL 65535

/* dC[t] (m,n) = alpha * dA[t] (m,k) @ dB[t] (k,n) + beta * dC[t] for t <
 * batch, row-major, the matrices of each operand contiguous. For bf16, dA
 * and dB hold __nv_bfloat16; otherwise float. Queued on h's stream. */
cublasStatus_t kl__cuda_gemm_rm(cublasHandle_t h, kl_gemm_precision p, int64_t batch, int m, int n, int k,
                                float alpha, const void *dA, const void *dB, float beta, float *dC)
{
    const long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * n;
    const size_t esz = p == KL_GEMM_BF16 ? sizeof(__nv_bfloat16) : sizeof(float);
    if (p == KL_GEMM_FP32 && batch == 1)
        return kl__cuda_sgemm_rm(h, m, n, k, alpha, (const float *)dA, (const float *)dB, beta, dC);
    const cudaDataType in = p == KL_GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute = p == KL_GEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    for (int64_t t = 0; t < batch; t += BATCH_PER_CALL) {
        const int count = (int)(batch - t < BATCH_PER_CALL ? batch - t : BATCH_PER_CALL);
        const char *A = (const char *)dA + (size_t)(t * sa) * esz, *B = (const char *)dB + (size_t)(t * sb) * esz;
        float *C = dC + t * sc;
        cublasStatus_t s;
        if (p == KL_GEMM_FP32)
            s = cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, (const float *)B, n, sb,
                                          (const float *)A, k, sa, &beta, C, n, sc, count);
        else if (count == 1)
            s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, B, in, n, A, in, k, &beta, C, CUDA_R_32F,
                             n, compute, CUBLAS_GEMM_DEFAULT);
        else
            s = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, B, in, n, sb, A, in, k, sa,
                                           &beta, C, CUDA_R_32F, n, sc, count, compute, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Eight floats a thread per step (two float4 loads, one 16-byte store),
 * grid-stride; the tail of n % 8 elements one at a time. */
__global__ static void f32_to_bf16(const float *__restrict__ src, __nv_bfloat16 *__restrict__ dst, int64_t n)
{
    const int64_t n8 = n / 8, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += stride) {
        float4 lo = reinterpret_cast<const float4 *>(src)[2 * i];
        float4 hi = reinterpret_cast<const float4 *>(src)[2 * i + 1];
        uint4 o;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&o);
        h[0] = __floats2bfloat162_rn(lo.x, lo.y);
        h[1] = __floats2bfloat162_rn(lo.z, lo.w);
        h[2] = __floats2bfloat162_rn(hi.x, hi.y);
        h[3] = __floats2bfloat162_rn(hi.z, hi.w);
        reinterpret_cast<uint4 *>(dst)[i] = o;
    }
    for (int64_t i = 8 * n8 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* src and dst must be 16-byte aligned (cudaMalloc'd buffers are). */
cudaError_t kl__cuda_f32_to_bf16(const float *src, void *dst, int64_t n, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    const int threads = 256;
    int64_t blocks = (n / 8 + threads - 1) / threads;
    blocks = blocks < 1 ? 1 : blocks > 8192 ? 8192 : blocks; /* grid-stride past 2^21 threads */
    f32_to_bf16<<<(unsigned)blocks, threads, 0, s>>>(src, (__nv_bfloat16 *)dst, n);
    return cudaGetLastError();
}

int kl__cuda_gemm(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err)
{
    const int dev = devs[0];
    const kl_tensor *a = args->inputs[KL_GEMM_A], *b = args->inputs[KL_GEMM_B], *c = args->inputs[KL_GEMM_C];
    const int batched = a->ndim == 3, o = batched;
    const int64_t batch = batched ? a->shape[0] : 1, m = a->shape[o], k = a->shape[o + 1], n = b->shape[o + 1];
    const int64_t shape[3] = {batch, m, n};
    const size_t na = (size_t)(batch * m * k), nb = (size_t)(batch * k * n), nc = (size_t)(batch * m * n);
    const float alpha = (float)args->params[KL_GEMM_ALPHA].num;
    float beta = (float)args->params[KL_GEMM_BETA].num;
    const kl_gemm_precision p = (kl_gemm_precision)args->params[KL_GEMM_PRECISION].choice;
    float *dA = NULL, *dB = NULL, *dC = NULL;
    __nv_bfloat16 *hA = NULL, *hB = NULL;
    cudaStream_t s = NULL;
    cublasHandle_t h = NULL;
    void *ws = NULL;
    int rc = 0;

    /* Empty products are beta*c or nothing: no GPU work, and cuBLAS would
     * reject the zero leading dimensions. The CPU's info (fp32) is true. */
    if (batch == 0 || m == 0 || n == 0 || k == 0)
        return args->kernel->run_cpu(args, outs, err);
    if (kl_tensor_alloc(&outs[0], KL_F32, a->ndim, shape + !batched) < 0) {
        kl_err_set(err, NULL, "gemm: cannot allocate output c of %lld x %lld x %lld", (long long)batch,
                   (long long)m, (long long)n);
        return KL_ENOMEM;
    }
    KL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if ((rc = kl__cuda_blas_begin(dev, s, &h, &ws, err)) < 0)
        goto done;
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dA, na * sizeof(float), s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dB, nb * sizeof(float), s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dC, nc * sizeof(float), s));
    KL_CUDA_CHECK(cudaMemcpyAsync(dA, a->data, na * sizeof(float), cudaMemcpyHostToDevice, s));
    KL_CUDA_CHECK(cudaMemcpyAsync(dB, b->data, nb * sizeof(float), cudaMemcpyHostToDevice, s));
    if (c && beta != 0) {
        KL_CUDA_CHECK(cudaMemcpyAsync(dC, c->data, nc * sizeof(float), cudaMemcpyHostToDevice, s));
    } else {
        /* beta = 0 must not read c (BLAS semantics): uninitialised memory
         * could hold NaN, and 0 * NaN is NaN. */
        beta = 0;
        KL_CUDA_CHECK(cudaMemsetAsync(dC, 0, nc * sizeof(float), s));
    }
    if (p == KL_GEMM_BF16) {
        KL_CUDA_CHECK(cudaMallocAsync((void **)&hA, na * sizeof(__nv_bfloat16), s));
        KL_CUDA_CHECK(cudaMallocAsync((void **)&hB, nb * sizeof(__nv_bfloat16), s));
        KL_CUDA_CHECK(kl__cuda_f32_to_bf16(dA, hA, (int64_t)na, s));
        KL_CUDA_CHECK(kl__cuda_f32_to_bf16(dB, hB, (int64_t)nb, s));
    }
    if (kl__cuda_canceled(args)) {
        rc = KL_ECANCELED;
        kl_err_set(err, NULL, "gemm: cancelled");
        goto done;
    }
    KL_CUBLAS_CHECK(kl__cuda_gemm_rm(h, p, batch, (int)m, (int)n, (int)k, alpha,
                                     p == KL_GEMM_BF16 ? (const void *)hA : (const void *)dA,
                                     p == KL_GEMM_BF16 ? (const void *)hB : (const void *)dB, beta, dC));
    if ((rc = kl__cuda_wait(s, args, err)) < 0)
        goto done;
    KL_CUDA_CHECK(cudaMemcpyAsync(outs[0].data, dC, nc * sizeof(float), cudaMemcpyDeviceToHost, s));
    KL_CUDA_CHECK(cudaStreamSynchronize(s));
    kl_info_set(args->info, "precision", "%s", args->kernel->params[KL_GEMM_PRECISION].choices[p]);
done:
    if (s) {
        kl__cuda_free(hA, s);
        kl__cuda_free(hB, s);
        kl__cuda_free(dA, s);
        kl__cuda_free(dB, s);
        kl__cuda_free(dC, s);
    }
    if (s) {
        kl__cuda_blas_end(ws, s);
        kl__cuda_stream_close(s, dev);
    }
    return rc;
}
