/* montecarlo.cu — montecarlo_option on the GPU, side by side with
 * cpu/montecarlo.c (the reference: the model, the estimator and the draws
 * are described there).
 *   params: type, style, s0, strike, rate, sigma, maturity, paths, steps, seed
 *   outputs: price (1) float32, std_error (1) float32
 * One thread per antithetic pair of paths, a grid-stride loop over the
 * pairs of a batch; the same Philox words as the CPU (kl_philox.h), and
 * the same float32 path arithmetic and double payoffs (kl__mc_step and its
 * neighbours in kl_kernels.h, every operation rounded on its own: nvcc
 * would otherwise fuse drift + vol*z into an FMA, which the CPU never
 * does), so the two agree to the ulps of CUDA's logf/sincosf/expf against
 * glibc's and no further. Each block adds its
 * threads' sums in a fixed order (warp shuffles, then the warps in turn)
 * into its own slot, and the host adds the slots in a fixed order: a seed
 * gives the same bits on every run on a given device model.
 * Batches of about 2^33 path-steps (tens of ms) go out one at a time, so a
 * cancel is seen between them. */
#include "kl_cuda.h"
#include "kl_philox.h"

#include <math.h>
#include <stdlib.h>

namespace {

constexpr int THREADS = 256;
constexpr double BATCH_PATH_STEPS = 8589934592.0; /* 2^33 */

/* The run's constants: derived exactly as mc_model_of in cpu/montecarlo.c
 * (double, rounded once to float), so both backends start from the same bits. */
struct mc_model {
    int put, steps;
    float drift, vol, drift_t;
    double s0, strike, disc, shift;
    kl_philox_key key;
};

mc_model mc_model_of(const kl_args *args)
{
    const kl_value *p = args->params;
    double r = p[KL_MC_RATE].num, sigma = p[KL_MC_SIGMA].num, T = p[KL_MC_MATURITY].num;
    int steps = (int)p[KL_MC_STEPS].num;
    double dt = T / steps, mu = r - 0.5 * sigma * sigma;
    uint64_t seed = (uint64_t)p[KL_MC_SEED].num;
    mc_model m;
    m.put = p[KL_MC_TYPE].choice == KL_MC_PUT;
    m.steps = steps;
    m.drift = (float)(mu * dt);
    m.vol = (float)(sigma * sqrt(dt));
    m.drift_t = (float)(mu * T);
    m.s0 = p[KL_MC_S0].num;
    m.strike = p[KL_MC_STRIKE].num;
    m.disc = exp(-r * T);
    m.key.v[0] = (uint32_t)seed;
    m.key.v[1] = (uint32_t)(seed >> 32);
    double fwd = m.s0 * exp(r * T);
    m.shift = m.disc * (m.put ? fmax(m.strike - fwd, 0.0) : fmax(fwd - m.strike, 0.0));
    return m;
}

__device__ __forceinline__ double payoff(const mc_model &m, double s)
{
    return m.put ? fmax(m.strike - s, 0.0) : fmax(s - m.strike, 0.0);
}

/* Y_p - shift for pair p, as mc_pair in cpu/montecarlo.c. */
template <bool ASIAN> __device__ __forceinline__ double mc_pair(const mc_model &m, uint64_t p)
{
    kl_philox4x32 ctr = {{0, (uint32_t)p, (uint32_t)(p >> 32), 0}};
    float zsum = 0, lp = 0, lm = 0;
    double ap = 0, am = 0;
    for (int t = 0; t < m.steps; t += 4) {
        ctr.v[0] = (uint32_t)(t / 4);
        kl_philox4x32 w = kl_philox4x32_10(ctr, m.key);
        float z[4];
        const int n = m.steps - t < 4 ? m.steps - t : 4;
        kl_box_muller(w.v[0], w.v[1], &z[0], &z[1]);
        if (n > 2)
            kl_box_muller(w.v[2], w.v[3], &z[2], &z[3]);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            if (l >= n)
                break;
            if (!ASIAN) {
                zsum = KL_FADD(zsum, z[l]);
            } else {
                kl__mc_step(m.drift, m.vol, z[l], &lp, &lm);
                ap = KL_DADD(ap, (double)expf(lp));
                am = KL_DADD(am, (double)expf(lm));
            }
        }
    }
    double sp, sm;
    if (ASIAN) {
        sp = KL_DMUL(m.s0, ap) / m.steps;
        sm = KL_DMUL(m.s0, am) / m.steps;
    } else {
        float xp, xm;
        kl__mc_end(m.drift_t, m.vol, zsum, &xp, &xm);
        sp = KL_DMUL(m.s0, (double)expf(xp));
        sm = KL_DMUL(m.s0, (double)expf(xm));
    }
    return kl__mc_value(m.disc, payoff(m, sp), payoff(m, sm), m.shift);
}

/* Pairs [lo, hi); sums[b] += (sum of Y - shift, sum of (Y - shift)^2) over
 * the pairs of block b, in a fixed order. */
template <bool ASIAN>
__global__ void __launch_bounds__(THREADS) mc_kernel(mc_model m, int64_t lo, int64_t hi, double2 *sums)
{
    double s1 = 0, s2 = 0;
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    for (int64_t p = lo + (int64_t)blockIdx.x * THREADS + threadIdx.x; p < hi; p += stride) {
        double y = mc_pair<ASIAN>(m, (uint64_t)p);
        s1 = KL_DADD(s1, y);
        s2 = KL_DADD(s2, KL_DMUL(y, y));
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        s1 += __shfl_down_sync(0xffffffffu, s1, o);
        s2 += __shfl_down_sync(0xffffffffu, s2, o);
    }
    __shared__ double2 warp_sums[THREADS / 32];
    if (threadIdx.x % 32 == 0)
        warp_sums[threadIdx.x / 32] = make_double2(s1, s2);
    __syncthreads();
    if (threadIdx.x == 0) {
        double2 t = sums[blockIdx.x];
        for (int w = 0; w < THREADS / 32; w++) {
            t.x += warp_sums[w].x;
            t.y += warp_sums[w].y;
        }
        sums[blockIdx.x] = t;
    }
}

/* Pairwise sum of v[0..n).x (or .y): the order of cpu/montecarlo.c's. */
double sum_pairwise(const double2 *v, int n, bool second)
{
    if (n == 1)
        return second ? v[0].y : v[0].x;
    int h = n / 2;
    return sum_pairwise(v, h, second) + sum_pairwise(v + h, n - h, second);
}

} // namespace

int kl__cuda_montecarlo_option(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err)
{
    const int dev = devs[0];
    const mc_model m = mc_model_of(args);
    const bool asian = args->params[KL_MC_STYLE].choice == KL_MC_ASIAN;
    const int64_t paths = (int64_t)args->params[KL_MC_PATHS].num, one = 1;
    double2 *dsums = NULL, *sums = NULL;
    cudaStream_t s = NULL;
    int rc = 0, sms = 0, per_sm = 0, blocks = 0;
    int64_t batch = 0;

    if (kl_tensor_alloc(&outs[0], KL_F32, 1, &one) < 0 || kl_tensor_alloc(&outs[1], KL_F32, 1, &one) < 0) {
        kl_err_set(err, NULL, "montecarlo_option: out of memory");
        return KL_ENOMEM;
    }
    KL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, asian ? (const void *)mc_kernel<true> : (const void *)mc_kernel<false>, THREADS, 0));
    /* A full wave of resident blocks, fewer when there are fewer pairs. */
    blocks = sms * (per_sm > 0 ? per_sm : 1);
    if ((int64_t)blocks * THREADS > paths)
        blocks = (int)((paths + THREADS - 1) / THREADS);
    /* Whole strides of the grid per batch, ~2^33 path-steps each. */
    batch = (int64_t)(BATCH_PATH_STEPS / m.steps) / ((int64_t)blocks * THREADS) * ((int64_t)blocks * THREADS);
    if (batch < (int64_t)blocks * THREADS)
        batch = (int64_t)blocks * THREADS;
    sums = (double2 *)malloc(sizeof(double2) * (size_t)blocks);
    if (!sums) {
        rc = KL_ENOMEM;
        kl_err_set(err, NULL, "montecarlo_option: out of memory");
        goto done;
    }
    KL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dsums, sizeof(double2) * (size_t)blocks, s));
    KL_CUDA_CHECK(cudaMemsetAsync(dsums, 0, sizeof(double2) * (size_t)blocks, s));
    for (int64_t lo = 0; lo < paths; lo += batch) {
        if (kl__cuda_canceled(args)) {
            rc = KL_ECANCELED;
            kl_err_set(err, NULL, "montecarlo_option: cancelled");
            goto done;
        }
        const int64_t hi = paths - lo < batch ? paths : lo + batch;
        (void)cudaGetLastError(); /* so the check below sees this launch only */
        if (asian)
            mc_kernel<true><<<blocks, THREADS, 0, s>>>(m, lo, hi, dsums);
        else
            mc_kernel<false><<<blocks, THREADS, 0, s>>>(m, lo, hi, dsums);
        KL_CUDA_CHECK(cudaGetLastError());
        if ((rc = kl__cuda_wait(s, args, err)) < 0)
            goto done;
        kl__mc_progress(args, hi, paths);
    }
    KL_CUDA_CHECK(cudaMemcpyAsync(sums, dsums, sizeof(double2) * (size_t)blocks, cudaMemcpyDeviceToHost, s));
    KL_CUDA_CHECK(cudaStreamSynchronize(s));
    {
        const double n = (double)paths, s1 = sum_pairwise(sums, blocks, false), s2 = sum_pairwise(sums, blocks, true);
        const double var = (s2 - s1 * s1 / n) / (n - 1);
        ((float *)outs[0].data)[0] = (float)(m.shift + s1 / n);
        ((float *)outs[1].data)[0] = (float)sqrt(var > 0 ? var / n : 0);
    }
    kl_info_set(args->info, "simulated_paths", "%lld (%lld antithetic pairs)", 2 * (long long)paths,
                (long long)paths);
done:
    if (s) {
        kl__cuda_free(dsums, s);
        kl__cuda_stream_close(s, dev);
    }
    free(sums);
    return rc;
}
