/* heat2d.cu — heat2d on the GPU, side by side with cpu/heat2d.c.
 *   grid is (h,w) float32, h, w >= 3; outputs grid (h,w) after `steps`
 *   updates u' = u + alpha*(((uN + uS) + (uW + uE)) - 4u) of the interior
 *   cells (boundary fixed) and residual (1) = max |u' - u| of the last step.
 * Each operation is an explicit __fadd_rn/__fsub_rn/__fmul_rn, which nvcc
 * never fuses into an FMA: the same roundings in the same order as the CPU
 * reference, so the two agree bit for bit.
 * One launch per step, two buffers ping-ponging on the device. A thread owns
 * one column of a band of RY rows and walks down it, keeping north, centre
 * and south in registers: each cell is read once from DRAM and written once
 * (the west/east reads hit L1), so a step costs 8 bytes a cell, like a copy.
 * Steps go out in groups of a few milliseconds, one group queued ahead of
 * the one the host waits for, so the GPU never idles and a cancel is seen
 * within a group. */
#include "kl_cuda.h"

#include <string.h>
#include <time.h>

namespace {

constexpr int BX = 128; /* threads of a block, along a row */
constexpr int RY = 16;  /* rows each thread walks down */
/* A group: at most this many launches, and about 2^30 cell updates (~2 ms
 * at H200 bandwidth), whichever is fewer. */
constexpr int GROUP_LAUNCHES = 256;
constexpr int64_t GROUP_CELLS = (int64_t)1 << 30;

__device__ __forceinline__ float cell(float u, float n, float s, float w, float e, float a)
{
    return __fadd_rn(u, __fmul_rn(a, __fsub_rn(__fadd_rn(__fadd_rn(n, s), __fadd_rn(w, e)), __fmul_rn(4.0f, u))));
}

/* |v - u| as bits: the sign cleared by hand, so every NaN is a positive
 * NaN, whose bits compare above +inf's: an unsigned max propagates it. */
__device__ __forceinline__ unsigned diff_bits(float v, float u)
{
    return __float_as_uint(__fsub_rn(v, u)) & 0x7fffffffu;
}

/* One cell of a column walked downwards: n and u are the cells above and
 * at i, carried from the row before; m the largest change so far. */
template <bool RESID>
__device__ __forceinline__ void step_cell(const float *__restrict__ src, float *__restrict__ dst, int i, int w,
                                          float a, float &n, float &u, unsigned &m)
{
    float s = src[i + w];
    float v = cell(u, n, s, src[i - 1], src[i + 1], a);
    dst[i] = v;
    if constexpr (RESID)
        m = max(m, diff_bits(v, u));
    n = u;
    u = s;
}

/* src, dst are (h,w); the grid is flat: block b covers columns
 * (b % nbx)*BX .. +BX of rows 1 + (b / nbx)*RY .. +RY. */
template <bool RESID>
__global__ void __launch_bounds__(BX) heat2d_step(const float *__restrict__ src, float *__restrict__ dst, int h,
                                                  int w, int nbx, float a, unsigned *resid)
{
    const int j = (int)(blockIdx.x % (unsigned)nbx) * BX + (int)threadIdx.x;
    const int r0 = 1 + (int)(blockIdx.x / (unsigned)nbx) * RY;
    const int r1 = min(r0 + RY, h - 1);
    unsigned m = 0;
    if (j >= 1 && j < w - 1) {
        int i = r0 * w + j; /* h*w <= KL_MAX_ELEMS < 2^31 */
        float n = src[i - w], u = src[i];
        if (r1 - r0 == RY) { /* a whole strip: unrolled */
#pragma unroll
            for (int k = 0; k < RY; k++, i += w)
                step_cell<RESID>(src, dst, i, w, a, n, u, m);
        } else { /* the last, shorter strip */
            for (int r = r0; r < r1; r++, i += w)
                step_cell<RESID>(src, dst, i, w, a, n, u, m);
        }
    }
    if constexpr (RESID) {
        __shared__ unsigned warp_max[BX / 32];
        m = __reduce_max_sync(0xffffffffu, m);
        if (threadIdx.x % 32 == 0)
            warp_max[threadIdx.x / 32] = m;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int k = 1; k < BX / 32; k++)
                m = max(m, warp_max[k]);
            atomicMax(resid, m);
        }
    }
}

/* Waits for `ev`, polling *cancel (may be NULL) every 100 us. */
int wait_event(cudaEvent_t ev, volatile int *cancel, kl_err *err)
{
    const struct timespec tick = {0, 100 * 1000};
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return kl__cuda_fail_rt(err, __FILE__, __LINE__, "cudaEventQuery", e);
        (void)cudaGetLastError(); /* leave no cudaErrorNotReady behind */
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
            kl_err_set(err, NULL, "heat2d: cancelled");
            return KL_ECANCELED;
        }
        nanosleep(&tick, NULL);
    }
}

} // namespace

int kl__cuda_heat2d_dev(float *const buf[2], int h, int w, float alpha, int64_t steps, const kl_args *args,
                        cudaStream_t s, float *residual, kl_err *err)
{
    volatile int *cancel = args ? args->cancel : NULL;
    const int nbx = (w + BX - 1) / BX, nby = (h - 2 + RY - 1) / RY;
    const unsigned blocks = (unsigned)nbx * (unsigned)nby; /* < h*w/2048 + w/128 + h/16 + 1 */
    const int64_t cells = (int64_t)h * w;
    int64_t group = GROUP_CELLS / cells;
    group = group < 1 ? 1 : group > GROUP_LAUNCHES ? GROUP_LAUNCHES : group;
    cudaEvent_t ev[2] = {NULL, NULL};
    unsigned *dres = NULL, bits = 0;
    int rc = 0;
    int64_t g = 0;

    if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
        kl_err_set(err, NULL, "heat2d: cancelled");
        return KL_ECANCELED;
    }
    KL_CUDA_CHECK(cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming));
    KL_CUDA_CHECK(cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dres, sizeof *dres, s));
    KL_CUDA_CHECK(cudaMemsetAsync(dres, 0, sizeof *dres, s));
    (void)cudaGetLastError(); /* so the launch checks see these launches only */
    for (int64_t s0 = 0; s0 < steps; s0 += group, g++) {
        int64_t s1 = s0 + group < steps ? s0 + group : steps;
        for (int64_t k = s0; k < s1; k++) {
            const float *src = buf[k & 1];
            float *dst = buf[(k + 1) & 1];
            if (k == steps - 1)
                heat2d_step<true><<<blocks, BX, 0, s>>>(src, dst, h, w, nbx, alpha, dres);
            else
                heat2d_step<false><<<blocks, BX, 0, s>>>(src, dst, h, w, nbx, alpha, dres);
        }
        KL_CUDA_CHECK(cudaGetLastError());
        KL_CUDA_CHECK(cudaEventRecord(ev[g & 1], s));
        if (g > 0 && (rc = wait_event(ev[(g - 1) & 1], cancel, err)) < 0)
            goto done;
        if (g > 0 && args) /* the previous group's steps are done */
            kl__heat2d_progress(args, s0, steps, -1);
    }
    if ((rc = wait_event(ev[(g - 1) & 1], cancel, err)) < 0)
        goto done;
    KL_CUDA_CHECK(cudaMemcpyAsync(&bits, dres, sizeof bits, cudaMemcpyDeviceToHost, s));
    KL_CUDA_CHECK(cudaStreamSynchronize(s));
    if (bits > 0x7f800000u)
        *residual = NAN;
    else
        memcpy(residual, &bits, sizeof bits);
done:
    kl__cuda_free(dres, s);
    if (ev[0])
        cudaEventDestroy(ev[0]);
    if (ev[1])
        cudaEventDestroy(ev[1]);
    return rc;
}

int kl__cuda_heat2d(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err)
{
    const int dev = devs[0];
    const kl_tensor *g = args->inputs[KL_HEAT2D_GRID];
    const int h = (int)g->shape[0], w = (int)g->shape[1]; /* h*w <= KL_MAX_ELEMS */
    const int64_t steps = (int64_t)args->params[KL_HEAT2D_STEPS].num, one = 1;
    const size_t bytes = (size_t)h * (size_t)w * sizeof(float);
    const float alpha = (float)args->params[KL_HEAT2D_ALPHA].num;
    float *buf[2] = {NULL, NULL};
    cudaStream_t s = NULL;
    int rc = 0;

    if (kl__cuda_canceled(args)) { /* before copying in a grid for nothing */
        kl_err_set(err, NULL, "heat2d: cancelled");
        return KL_ECANCELED;
    }
    if (kl_tensor_alloc(&outs[0], KL_F32, 2, g->shape) < 0 || kl_tensor_alloc(&outs[1], KL_F32, 1, &one) < 0) {
        kl_err_set(err, NULL, "heat2d: cannot allocate the output grid of %d x %d", h, w);
        return KL_ENOMEM;
    }
    KL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&buf[0], bytes, s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&buf[1], bytes, s));
    /* Both buffers hold the input: the boundary is never written again. */
    KL_CUDA_CHECK(cudaMemcpyAsync(buf[0], g->data, bytes, cudaMemcpyHostToDevice, s));
    KL_CUDA_CHECK(cudaMemcpyAsync(buf[1], buf[0], bytes, cudaMemcpyDeviceToDevice, s));
    rc = kl__cuda_heat2d_dev(buf, h, w, alpha, steps, args, s, (float *)outs[1].data, err);
    if (rc < 0)
        goto done;
    KL_CUDA_CHECK(cudaMemcpyAsync(outs[0].data, buf[steps & 1], bytes, cudaMemcpyDeviceToHost, s));
    KL_CUDA_CHECK(cudaStreamSynchronize(s));
    if (!isnan(((float *)outs[1].data)[0]))
        kl__heat2d_progress(args, steps, steps, ((float *)outs[1].data)[0]);
done:
    if (s) {
        kl__cuda_free(buf[0], s);
        kl__cuda_free(buf[1], s);
        kl__cuda_stream_close(s, dev);
    }
    return rc;
}
