/* reduce.cu — reduce on the GPU with CUB, side by side with cpu/reduce.c.
 *   x is any shape (n elements, n >= 1) float32; output value (1) float32.
 * sum and mean read float32 and accumulate in double (a transform-reduce),
 * like the CPU reference; min and max propagate NaN. The reduction reads
 * 4 bytes per element and adds once, so the double adds cost nothing on
 * parts with full-rate FP64 (A100, H100) and stay memory-bound elsewhere. */
#include "kl_cuda.h"

#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

namespace {
struct to_double {
    __host__ __device__ double operator()(float v) const { return (double)v; }
};
struct min_nan {
    __host__ __device__ float operator()(float a, float b) const { return kl__minf_nan(a, b); }
};
struct max_nan {
    __host__ __device__ float operator()(float a, float b) const { return kl__maxf_nan(a, b); }
};
} // namespace

int kl__cuda_reduce_dev(const float *dx, int64_t n, kl_reduce_op op, cudaStream_t s, double *result,
                        kl_err *err)
{
    const int items = (int)n; /* n <= KL_MAX_ELEMS < 2^31 */
    const bool is_sum = op == KL_REDUCE_SUM || op == KL_REDUCE_MEAN;
    void *temp = NULL, *dout = NULL;
    size_t temp_bytes = 0;
    double sum = 0;
    float extreme = 0;
    int rc = 0;

    KL_CUDA_CHECK(cudaMallocAsync(&dout, sizeof(double), s));
    for (int pass = 0; pass < 2; pass++) { /* the first pass only sizes the temp storage */
        /* Never 0 bytes: a NULL temp would make the second pass a query too. */
        if (pass == 1)
            KL_CUDA_CHECK(cudaMallocAsync(&temp, temp_bytes > 16 ? temp_bytes : 16, s));
        if (is_sum)
            KL_CUDA_CHECK(cub::DeviceReduce::TransformReduce(temp, temp_bytes, dx, (double *)dout, items,
                                                             cuda::std::plus<double>{}, to_double{}, 0.0, s));
        else if (op == KL_REDUCE_MIN)
            KL_CUDA_CHECK(cub::DeviceReduce::Reduce(temp, temp_bytes, dx, (float *)dout, items, min_nan{},
                                                    INFINITY, s));
        else
            KL_CUDA_CHECK(cub::DeviceReduce::Reduce(temp, temp_bytes, dx, (float *)dout, items, max_nan{},
                                                    -INFINITY, s));
    }
    if (is_sum) {
        KL_CUDA_CHECK(cudaMemcpyAsync(&sum, dout, sizeof sum, cudaMemcpyDeviceToHost, s));
        KL_CUDA_CHECK(cudaStreamSynchronize(s));
        *result = op == KL_REDUCE_MEAN ? sum / (double)n : sum;
    } else {
        KL_CUDA_CHECK(cudaMemcpyAsync(&extreme, dout, sizeof extreme, cudaMemcpyDeviceToHost, s));
        KL_CUDA_CHECK(cudaStreamSynchronize(s));
        *result = extreme;
    }
done:
    kl__cuda_free(temp, s);
    kl__cuda_free(dout, s);
    return rc;
}

int kl__cuda_reduce(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err)
{
    const int dev = devs[0];
    const kl_tensor *x = args->inputs[KL_REDUCE_X];
    const int64_t n = kl_tensor_elems(x), one = 1;
    const size_t bytes = (size_t)n * sizeof(float);
    const kl_reduce_op op = (kl_reduce_op)args->params[KL_REDUCE_OP].choice;
    float *dx = NULL;
    cudaStream_t s = NULL;
    double r = 0;
    int rc = 0;

    if (kl_tensor_alloc(&outs[0], KL_F32, 1, &one) < 0) {
        kl_err_set(err, NULL, "reduce: out of memory");
        return KL_ENOMEM;
    }
    KL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dx, bytes, s));
    KL_CUDA_CHECK(cudaMemcpyAsync(dx, x->data, bytes, cudaMemcpyHostToDevice, s));
    if ((rc = kl__cuda_wait(s, args, err)) < 0)
        goto done;
    if ((rc = kl__cuda_reduce_dev(dx, n, op, s, &r, err)) < 0)
        goto done;
    ((float *)outs[0].data)[0] = (float)r;
done:
    if (s) {
        kl__cuda_free(dx, s);
        kl__cuda_stream_close(s, dev);
    }
    return rc;
}
