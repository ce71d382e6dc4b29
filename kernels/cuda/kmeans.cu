/* kmeans.cu — kmeans on the GPU, side by side with cpu/kmeans.c (the
 * reference, which documents the contract).
 *   points is (n,d) float32, init (k,d) float32 optional;
 *   centroids (k,d) float32, labels (n) int32, inertia (1), iterations_run (1) int32.
 * The start (init, or k-means++ from seed) is kl__kmeans_start on the host,
 * the same function the CPU runs, so both backends begin from the same
 * centroids. Each iteration is four kernels on one stream:
 *   km_assign      one thread per point (grid-stride); centroids in shared
 *                  memory when they fit in 48 KiB; squared distances with
 *                  __fsub_rn/__fmul_rn/__fadd_rn in the CPU's order, so the
 *                  same centroids give the same labels bit for bit; counts
 *                  the labels that changed
 *   km_accumulate  per-cluster sums in double: the lanes of a warp with the
 *                  same label add their points first (__match_any_sync),
 *                  one lane adds that into the block's shared sums, and the
 *                  block adds its sums to global memory at the end
 *   km_finish      one block per centroid: mean (or the old place when
 *                  empty) and its squared shift; the largest via atomicMax
 *   km_decide      one thread: the CPU's stopping rules, in device memory
 * so the host enqueues iterations in batches and reads the state once per
 * batch; the kernels of an iteration after the stop return at once. Double
 * atomics add in no fixed order: sums may differ from the CPU's in the last
 * bits, which the stop on unchanged labels makes harmless. */
#include "kl_cuda.h"

#include <math.h>
#include <string.h>

namespace {

constexpr int KM_THREADS = 256;
constexpr int KM_FINISH_THREADS = 128;
constexpr int KM_BATCH = 8;                  /* iterations enqueued between two looks at the state */
constexpr size_t KM_SMEM_BYTES = 48 * 1024;  /* shared memory a block gets without opting in */

/* Floats of shared memory km_assign gives the centroids: k*d, then
 * KM_UNROLL more centroids of zeros, in whole float4s. ptxas merges the
 * loads of the unrolled loop's last few centroids into one wide load
 * issued before it knows how many are left (seen under compute-sanitizer on
 * an H100: a 12-byte read at n = k = d = 1); the pad keeps that load
 * inside the block's allocation. */
constexpr int KM_UNROLL = 4;
__host__ __device__ constexpr int km_smem_floats(int k, int d)
{
    return ((k + KM_UNROLL) * d + 3) / 4 * 4;
}

/* Lives in device memory; written by km_decide (and km_begin), read by the
 * host after each batch. */
struct km_state {
    int done;           /* 1 once an iteration decided to stop */
    int changed;        /* labels the current iteration's assignment changed */
    int iterations_run;
    int final_buf;      /* the centroid buffer holding the result */
    int final_pass;     /* 1: the labels are for the previous centroids; assign once more */
    int stopped;        /* 0 iterations, 1 tol, 2 labels unchanged */
    unsigned long long max_shift2; /* bits of a non-negative double, so integer max orders them */
};

__global__ void km_begin(km_state *st)
{
    if (st->done)
        return;
    st->changed = 0;
    st->max_shift2 = 0;
}

/* labels[i] = argmin_c |x_i - C_c|^2 (lowest c on ties), dist[i] = that
 * minimum. D > 0: d = D known at compile time, the point kept in registers.
 * iterating: part of an iteration (skipped once st->done; counts the changed
 * labels into st->changed); 0 for the last pass after the stop. */
template <int D, bool SMEM>
__global__ void __launch_bounds__(KM_THREADS)
    km_assign(km_state *st, bool iterating, const float *__restrict__ X, int64_t n, int d_rt, int k,
              const float *__restrict__ C, int *__restrict__ labels, float *__restrict__ dist)
{
    if (iterating && st->done)
        return;
    extern __shared__ float4 km_smem[]; /* float4: 16-byte alignment */
    const int d = D > 0 ? D : d_rt;
    const float *cs = C;
    if (SMEM) {
        float *s = reinterpret_cast<float *>(km_smem);
        for (int e = threadIdx.x; e < km_smem_floats(k, d); e += blockDim.x)
            s[e] = e < k * d ? C[e] : 0.f;
        __syncthreads();
        cs = s;
    }
    unsigned moved = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float *x = X + i * d;
        float best = INFINITY;
        int lab = 0;
        if constexpr (D > 0) {
            float xr[D];
#pragma unroll
            for (int q = 0; q < D; q++)
                xr[q] = x[q];
#pragma unroll KM_UNROLL
            for (int c = 0; c < k; c++) {
                const float *cr = cs + c * D;
                float acc = 0.f;
#pragma unroll
                for (int q = 0; q < D; q++) {
                    float t = __fsub_rn(xr[q], cr[q]);
                    acc = __fadd_rn(acc, __fmul_rn(t, t));
                }
                if (acc < best) {
                    best = acc;
                    lab = c;
                }
            }
        } else {
            for (int c = 0; c < k; c++) {
                const float *cr = cs + (int64_t)c * d;
                float acc = 0.f;
                for (int q = 0; q < d; q++) {
                    float t = __fsub_rn(x[q], cr[q]);
                    acc = __fadd_rn(acc, __fmul_rn(t, t));
                }
                if (acc < best) {
                    best = acc;
                    lab = c;
                }
            }
        }
        moved += labels[i] != lab;
        labels[i] = lab;
        dist[i] = best;
    }
    if (iterating) { /* every block is whole warps, and every lane gets here */
        moved = __reduce_add_sync(0xffffffffu, moved);
        if ((threadIdx.x & 31) == 0 && moved)
            atomicAdd(&st->changed, (int)moved);
    }
}

/* sums (k,d) += points by label, counts (k) += 1 per point. With SMEM the
 * block first gathers into shared memory (k*d doubles, then k ints). */
template <bool SMEM>
__global__ void __launch_bounds__(KM_THREADS)
    km_accumulate(const km_state *st, const float *__restrict__ X, int64_t n, int d, int k,
                  const int *__restrict__ labels, double *sums, int *counts)
{
    if (st->done || st->changed == 0)
        return;
    extern __shared__ float4 km_smem[];
    double *acc = sums;
    int *cnt = counts;
    if (SMEM) {
        acc = reinterpret_cast<double *>(km_smem);
        cnt = reinterpret_cast<int *>(acc + k * d);
        for (int e = threadIdx.x; e < k * d; e += blockDim.x)
            acc[e] = 0;
        for (int e = threadIdx.x; e < k; e += blockDim.x)
            cnt[e] = 0;
        __syncthreads();
    }
    const int lane = threadIdx.x & 31;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    /* base is the same for the 32 lanes of a warp, so all of them take every
     * trip of the loop and the _sync calls see the whole warp. */
    for (int64_t base = (int64_t)blockIdx.x * blockDim.x + (threadIdx.x - lane); base < n; base += stride) {
        const int64_t i = base + lane;
        const int lab = i < n ? labels[i] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, lab);
        if (lab < 0)
            continue;
        const int leader = __ffs(peers) - 1;
        const float *x = X + i * d;
        for (int q = 0; q < d; q++) {
            const double v = x[q];
            double s = 0;
            for (unsigned m = peers; m; m &= m - 1) /* the same trips for every lane of the group */
                s += __shfl_sync(peers, v, __ffs(m) - 1);
            if (lane == leader)
                atomicAdd(&acc[(int64_t)lab * d + q], s);
        }
        if (lane == leader)
            atomicAdd(&cnt[lab], __popc(peers));
    }
    if (SMEM) {
        __syncthreads();
        for (int e = threadIdx.x; e < k * d; e += blockDim.x)
            if (acc[e] != 0)
                atomicAdd(&sums[e], acc[e]);
        for (int e = threadIdx.x; e < k; e += blockDim.x)
            if (cnt[e])
                atomicAdd(&counts[e], cnt[e]);
    }
}

/* Block c: cnew[c] = sums[c] / counts[c] (cold[c] when empty), and the
 * squared distance it moved, folded into st->max_shift2. */
__global__ void __launch_bounds__(KM_FINISH_THREADS)
    km_finish(km_state *st, int d, const double *__restrict__ sums, const int *__restrict__ counts,
              const float *__restrict__ cold, float *__restrict__ cnew)
{
    if (st->done || st->changed == 0)
        return;
    __shared__ double part[KM_FINISH_THREADS / 32];
    const int64_t c = blockIdx.x;
    const int count = counts[c];
    double s2 = 0;
    for (int q = threadIdx.x; q < d; q += blockDim.x) {
        const int64_t e = c * d + q;
        const float o = cold[e];
        const float v = count > 0 ? (float)(sums[e] / (double)count) : o;
        cnew[e] = v;
        const double df = (double)v - (double)o;
        s2 += df * df;
    }
    for (int off = 16; off > 0; off >>= 1)
        s2 += __shfl_down_sync(0xffffffffu, s2, off);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = s2;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int w = 0; w < KM_FINISH_THREADS / 32; w++)
            t += part[w];
        atomicMax(&st->max_shift2, (unsigned long long)__double_as_longlong(t));
    }
}

/* The CPU's stopping rules, after iteration `it` read buffer cur and wrote nxt. */
__global__ void km_decide(km_state *st, int it, int iterations, double tol, int cur, int nxt)
{
    if (st->done)
        return;
    st->iterations_run = it;
    if (st->changed == 0) {
        *st = km_state{1, 0, it, cur, 0, 2, 0};
        return;
    }
    const double shift = sqrt(__longlong_as_double((long long)st->max_shift2));
    if (shift <= tol || it >= iterations) {
        st->done = 1;
        st->final_buf = nxt;
        st->final_pass = 1;
        st->stopped = shift <= tol ? 1 : 0;
    }
}

/* Blocks for a grid-stride kernel: enough to fill the device, no more than
 * the points need (a block per SM would reload the centroids for nothing). */
template <typename K> static cudaError_t grid_for(K kernel, size_t smem, int64_t n, int dev, int *blocks)
{
    int sms = 0, per_sm = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, KM_THREADS, smem);
    int64_t want = (n + KM_THREADS - 1) / KM_THREADS, fill = (int64_t)sms * (per_sm > 0 ? per_sm : 1);
    *blocks = (int)(want < fill ? want : fill);
    if (*blocks < 1)
        *blocks = 1;
    return e;
}

struct km_dev {
    int dev;
    int64_t n;
    int d, k;
    const float *X;
    float *C[2];
    int *labels;
    float *dist;
    double *sums;
    int *counts;
    km_state *st;
    cudaStream_t s;
};

template <int D> static cudaError_t launch_assign_d(const km_dev &m, bool iterating, int buf)
{
    const size_t smem = sizeof(float) * (size_t)km_smem_floats(m.k, m.d);
    int blocks = 0;
    cudaError_t e;
    if (smem <= KM_SMEM_BYTES) {
        if ((e = grid_for(km_assign<D, true>, smem, m.n, m.dev, &blocks)) != cudaSuccess)
            return e;
        km_assign<D, true><<<blocks, KM_THREADS, smem, m.s>>>(m.st, iterating, m.X, m.n, m.d, m.k, m.C[buf],
                                                             m.labels, m.dist);
    } else {
        if ((e = grid_for(km_assign<D, false>, 0, m.n, m.dev, &blocks)) != cudaSuccess)
            return e;
        km_assign<D, false><<<blocks, KM_THREADS, 0, m.s>>>(m.st, iterating, m.X, m.n, m.d, m.k, m.C[buf], m.labels,
                                                           m.dist);
    }
    return cudaGetLastError();
}

static cudaError_t launch_assign(const km_dev &m, bool iterating, int buf)
{
    switch (m.d) {
    case 1: return launch_assign_d<1>(m, iterating, buf);
    case 2: return launch_assign_d<2>(m, iterating, buf);
    case 3: return launch_assign_d<3>(m, iterating, buf);
    case 4: return launch_assign_d<4>(m, iterating, buf);
    case 8: return launch_assign_d<8>(m, iterating, buf);
    case 16: return launch_assign_d<16>(m, iterating, buf);
    case 32: return launch_assign_d<32>(m, iterating, buf);
    case 64: return launch_assign_d<64>(m, iterating, buf);
    default: return launch_assign_d<0>(m, iterating, buf);
    }
}

/* One iteration (`it`, 1-based), all on m.s; each kernel checks the state. */
static cudaError_t enqueue_iteration(const km_dev &m, int it, int iterations, double tol)
{
    const int cur = (it - 1) & 1, nxt = it & 1;
    const size_t acc_smem = sizeof(double) * (size_t)m.k * (size_t)m.d + sizeof(int) * (size_t)m.k;
    int blocks = 0;
    cudaError_t e;
    km_begin<<<1, 1, 0, m.s>>>(m.st);
    if ((e = launch_assign(m, true, cur)) != cudaSuccess)
        return e;
    if ((e = cudaMemsetAsync(m.sums, 0, sizeof(double) * (size_t)m.k * (size_t)m.d, m.s)) != cudaSuccess ||
        (e = cudaMemsetAsync(m.counts, 0, sizeof(int) * (size_t)m.k, m.s)) != cudaSuccess)
        return e;
    if (acc_smem <= KM_SMEM_BYTES) {
        if ((e = grid_for(km_accumulate<true>, acc_smem, m.n, m.dev, &blocks)) != cudaSuccess)
            return e;
        km_accumulate<true><<<blocks, KM_THREADS, acc_smem, m.s>>>(m.st, m.X, m.n, m.d, m.k, m.labels, m.sums,
                                                                       m.counts);
    } else {
        if ((e = grid_for(km_accumulate<false>, 0, m.n, m.dev, &blocks)) != cudaSuccess)
            return e;
        km_accumulate<false><<<blocks, KM_THREADS, 0, m.s>>>(m.st, m.X, m.n, m.d, m.k, m.labels, m.sums, m.counts);
    }
    km_finish<<<m.k, KM_FINISH_THREADS, 0, m.s>>>(m.st, m.d, m.sums, m.counts, m.C[cur], m.C[nxt]);
    km_decide<<<1, 1, 0, m.s>>>(m.st, it, iterations, tol, cur, nxt);
    return cudaGetLastError();
}

} // namespace

int kl__cuda_kmeans(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err)
{
    const int dev = devs[0];
    const kl_tensor *pts = args->inputs[KL_KMEANS_POINTS];
    const int64_t n = pts->shape[0], d = pts->shape[1], k = (int64_t)args->params[KL_KMEANS_K].num, one = 1;
    const int64_t cshape[2] = {k, d};
    const int iterations = (int)args->params[KL_KMEANS_ITERATIONS].num;
    const double tol = args->params[KL_KMEANS_TOL].num;
    const size_t cbytes = sizeof(float) * (size_t)(k * d);
    static const char *const stopped_names[] = {"iterations", "tol", "labels unchanged"};
    km_dev m;
    memset(&m, 0, sizeof m);
    m.dev = dev;
    m.n = n;
    m.d = (int)d; /* k*d <= 2^24, so d fits */
    m.k = (int)k;
    float *dX = NULL;
    km_state hs;
    double inertia = 0;
    int rc = 0;

    if (kl_tensor_alloc(&outs[0], KL_F32, 2, cshape) < 0 || kl_tensor_alloc(&outs[1], KL_I32, 1, &n) < 0 ||
        kl_tensor_alloc(&outs[2], KL_F32, 1, &one) < 0 || kl_tensor_alloc(&outs[3], KL_I32, 1, &one) < 0) {
        kl_err_set(err, NULL, "kmeans: out of host memory for the outputs");
        return KL_ENOMEM;
    }
    /* The start, on the host (threads): the CPU backend's own function. */
    if ((rc = kl__kmeans_start(args, (float *)outs[0].data, err)) < 0)
        return rc;

    KL_CUDA_CHECK(cudaStreamCreateWithFlags(&m.s, cudaStreamNonBlocking));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&dX, sizeof(float) * (size_t)(n * d), m.s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&m.C[0], cbytes, m.s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&m.C[1], cbytes, m.s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&m.labels, sizeof(int) * (size_t)n, m.s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&m.dist, sizeof(float) * (size_t)n, m.s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&m.sums, sizeof(double) * (size_t)(k * d), m.s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&m.counts, sizeof(int) * (size_t)k, m.s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&m.st, sizeof(km_state), m.s));
    m.X = dX;
    KL_CUDA_CHECK(cudaMemcpyAsync(dX, pts->data, sizeof(float) * (size_t)(n * d), cudaMemcpyHostToDevice, m.s));
    KL_CUDA_CHECK(cudaMemcpyAsync(m.C[0], outs[0].data, cbytes, cudaMemcpyHostToDevice, m.s));
    KL_CUDA_CHECK(cudaMemsetAsync(m.labels, 0xff, sizeof(int) * (size_t)n, m.s)); /* -1: every label changes */
    KL_CUDA_CHECK(cudaMemsetAsync(m.st, 0, sizeof(km_state), m.s));

    memset(&hs, 0, sizeof hs);
    for (int it = 1; it <= iterations && !hs.done; it += KM_BATCH) {
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "kmeans: cancelled");
            rc = KL_ECANCELED;
            goto done;
        }
        for (int b = it; b < it + KM_BATCH && b <= iterations; b++) {
            cudaError_t e = enqueue_iteration(m, b, iterations, tol);
            if (e != cudaSuccess) {
                rc = kl__cuda_fail_rt(err, __FILE__, __LINE__, "enqueue_iteration", e);
                goto done;
            }
        }
        /* Wait first: a copy to pageable memory would block without polling cancel. */
        if ((rc = kl__cuda_wait(m.s, args, err)) < 0)
            goto done;
        KL_CUDA_CHECK(cudaMemcpyAsync(&hs, m.st, sizeof hs, cudaMemcpyDeviceToHost, m.s));
        KL_CUDA_CHECK(cudaStreamSynchronize(m.s));
        if (!hs.done) /* the end is reported with the inertia */
            kl__kmeans_progress(args, hs.iterations_run, iterations, -1);
    }
    if (hs.final_pass) { /* the last update moved the centroids: labels for them */
        cudaError_t e = launch_assign(m, false, hs.final_buf);
        if (e != cudaSuccess) {
            rc = kl__cuda_fail_rt(err, __FILE__, __LINE__, "launch_assign", e);
            goto done;
        }
    }
    if ((rc = kl__cuda_wait(m.s, args, err)) < 0)
        goto done;
    /* Sum of the n distances in double (CUB; synchronizes the stream). */
    if ((rc = kl__cuda_reduce_dev(m.dist, n, KL_REDUCE_SUM, m.s, &inertia, err)) < 0)
        goto done;
    KL_CUDA_CHECK(cudaMemcpyAsync(outs[0].data, m.C[hs.final_buf], cbytes, cudaMemcpyDeviceToHost, m.s));
    KL_CUDA_CHECK(cudaMemcpyAsync(outs[1].data, m.labels, sizeof(int) * (size_t)n, cudaMemcpyDeviceToHost, m.s));
    KL_CUDA_CHECK(cudaStreamSynchronize(m.s));
    ((float *)outs[2].data)[0] = (float)inertia;
    ((int32_t *)outs[3].data)[0] = hs.iterations_run;
    kl__kmeans_progress(args, hs.iterations_run, iterations, inertia);
    kl_info_set(args->info, "stopped", "%s", stopped_names[hs.stopped >= 0 && hs.stopped <= 2 ? hs.stopped : 0]);
done:
    if (m.s) {
        kl__cuda_free(dX, m.s);
        kl__cuda_free(m.C[0], m.s);
        kl__cuda_free(m.C[1], m.s);
        kl__cuda_free(m.labels, m.s);
        kl__cuda_free(m.dist, m.s);
        kl__cuda_free(m.sums, m.s);
        kl__cuda_free(m.counts, m.s);
        kl__cuda_free(m.st, m.s);
        kl__cuda_stream_close(m.s, m.dev);
    }
    return rc; /* on failure the plugin frees outs */
}
