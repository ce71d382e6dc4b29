/* train_mlp.cu — train_mlp on the GPU, side by side with cpu/train_mlp.c
 * (the reference: read its header for the algorithm) and cpu/mlp_math.c.
 *   x is (n,d) float32, y is (n) int32; outputs w1 (d,h), b1 (h), w2 (h,c),
 *   b2 (c), loss (epochs), accuracy (1).
 * Rank r runs on device gpu_ids[r] with its own stream and cuBLAS handle.
 * Rank r owns the contiguous rows [r*n/R, (r+1)*n/R) and walks them in
 * order, kl__mlp_step_rows at a time (the CPU's sharded walk), so before
 * training each rank gets its shard, and its rows of a step are the next
 * slice of it. One node's part of a multi-node run (args->dist) holds global
 * ranks node_rank*R + r and only its rows of x and y; its communicators come
 * from kl__cuda_comms_open (the NCCL id through the rendezvous), the epoch's
 * loss and the accuracy are summed over the world with one more all-reduce,
 * and only node 0 returns outputs. Per step: the
 * forward and backward pass with cuBLAS (FP32, no TF32) and small kernels,
 * then, with more than one rank, one NCCL all-reduce (sum) of the flat
 * gradient, then the same update on every rank. Weights start from
 * kl__mlp_init on the host, as on the CPU. */
#include "kl_cuda.h"
#include "cpu/mlp_math.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Rows a rank classifies at a time after training, at least: more than a
 * shard where shards are small, so that batch_size 1 does not cost four
 * launches a row (2*4096 + 1024 floats a row: 150 MB at most). */
static const int64_t EVAL_ROWS = 4096;

/* The host may run this many steps ahead of the GPU (two windows of
 * WINDOW): enough to hide launch latency, few enough that a cancel seen
 * between steps leaves little queued work behind. */
enum { WINDOW = 16 };

/* ---- GPU kernels ---- */

/* hid (rows,h) = max(hid + b1, 0). */
__global__ void bias_relu_kernel(float *__restrict__ hid, const float *__restrict__ b1, int64_t total, int64_t h)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float v = hid[i] + b1[i % h];
        hid[i] = v > 0.0f ? v : 0.0f;
    }
}

/* dhid = hid > 0 ? dhid : 0, elementwise. */
__global__ void relu_mask_kernel(float *__restrict__ dhid, const float *__restrict__ hid, int64_t total)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        dhid[i] = hid[i] > 0.0f ? dhid[i] : 0.0f;
}

/* One warp per row of l (rows,c): adds b2, writes the row's cross-entropy
 * to loss[row] and leaves softmax - onehot(y) in l, as softmax_xent in
 * cpu/mlp_math.c does (its sums run in a different order). */
__global__ void softmax_xent_kernel(float *__restrict__ l, const float *__restrict__ b2,
                                    const int32_t *__restrict__ y, float *__restrict__ loss, int64_t rows,
                                    int64_t c)
{
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float *r = l + row * c;
    const int32_t label = y[row];
    float mx = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) {
        float v = r[j] + b2[j];
        r[j] = v;
        mx = v > mx ? v : mx;
    }
    for (int o = 16; o > 0; o /= 2) {
        float other = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = other > mx ? other : mx;
    }
    __syncwarp(); /* every lane's biased logits are in r */
    const float ly = r[label];
    __syncwarp(); /* read before the lane that owns it overwrites it below */
    float sum = 0.0f;
    for (int64_t j = lane; j < c; j += 32) {
        float e = expf(r[j] - mx);
        r[j] = e;
        sum += e;
    }
    for (int o = 16; o > 0; o /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int64_t j = lane; j < c; j += 32)
        r[j] = r[j] / sum - (j == label ? 1.0f : 0.0f);
    if (lane == 0)
        loss[row] = mx + logf(sum) - ly;
}

/* One warp per row: *right += 1 when argmax(l + b2) == y (lowest class on
 * ties, as on the CPU). */
__global__ void argmax_count_kernel(const float *__restrict__ l, const float *__restrict__ b2,
                                    const int32_t *__restrict__ y, int64_t rows, int64_t c, int *right)
{
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const float *r = l + row * c;
    float top = -INFINITY;
    int best = -1;
    for (int64_t j = lane; j < c; j += 32) {
        float v = r[j] + b2[j];
        if (best < 0 || v > top) {
            top = v;
            best = (int)j;
        }
    }
    for (int o = 16; o > 0; o /= 2) {
        float t = __shfl_xor_sync(0xffffffffu, top, o);
        int b = __shfl_xor_sync(0xffffffffu, best, o);
        if (b >= 0 && (best < 0 || t > top || (t == top && b < best))) {
            top = t;
            best = b;
        }
    }
    if (lane == 0 && best == y[row])
        atomicAdd(right, 1);
}

/* The update of cpu/train_mlp.c, rounded step by step (no fused
 * multiply-add) so it matches the CPU bit for bit given the same g. */
__global__ void update_kernel(float *__restrict__ w, float *__restrict__ v, const float *__restrict__ g,
                              int64_t size, float rows, float lr, float mom)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += stride) {
        float gi = __fdiv_rn(g[i], rows);
        float vi = __fadd_rn(__fmul_rn(mom, v[i]), gi);
        v[i] = vi;
        w[i] = __fsub_rn(w[i], __fmul_rn(lr, vi));
    }
}

/* ---- launcher ---- */

static unsigned grid_for(int64_t total)
{
    int64_t b = (total + 255) / 256;
    return (unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

static unsigned warps_grid(int64_t rows)
{
    return (unsigned)((rows + 7) / 8); /* 8 warps of 256 threads */
}

/* Row-major C (m,n) = op(A) @ op(B) + beta*C; ta: A is stored (k,m), tb: B
 * is stored (n,k). Column-major cuBLAS sees C^T = op(B)^T op(A)^T. */
static cublasStatus_t sgemm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                            const float *B, float beta, float *C)
{
    const float one = 1.0f;
    return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k,
                       &one, B, tb ? (int)k : (int)n, A, ta ? (int)m : (int)k, &beta, C, (int)n);
}

/* out (cols) = the column sums of a (rows,cols) row-major: a^T @ ones. */
static cublasStatus_t column_sums(cublasHandle_t h, const float *a, int64_t rows, int64_t cols, const float *ones,
                                  float *out)
{
    const float one = 1.0f, zero = 0.0f;
    return cublasSgemv(h, CUBLAS_OP_N, (int)cols, (int)rows, &one, a, (int)cols, ones, 1, &zero, out, 1);
}

typedef struct rank_state {
    int dev;
    cudaStream_t s;
    cublasHandle_t h;     /* the thread's, cached by the plugin (blas.cu) */
    void *ws;             /* h's workspace for this run, on s */
    ncclComm_t comm;
    cudaEvent_t ev[2];
    int64_t nr;           /* rows this rank sees per epoch */
    int64_t srows;        /* rows of the activation buffers */
    int64_t *rows;        /* host: global index of each local row */
    float *hx;            /* host staging: the local rows of x */
    int32_t *hy;
    float *hloss;         /* host: the epoch's per-row losses */
    float *x, *loss, *w, *v, *g, *hid, *dhid, *logits, *ones;
    int32_t *y;
    int *right;
    double *part;         /* a value of this rank's rows to sum over the world */
} rank_state;

/* Waits for ev, polling cancel like kl__cuda_wait. */
static int wait_event(cudaEvent_t ev, const kl_args *args, kl_err *err)
{
    const struct timespec tick = {0, 100 * 1000};
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        if (e != cudaErrorNotReady)
            return kl__cuda_fail_rt(err, __FILE__, __LINE__, "cudaEventQuery", e);
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "train_mlp: cancelled");
            return KL_ECANCELED;
        }
        nanosleep(&tick, NULL);
    }
}

/* Queues rank k's gradient of local rows [off, off+b) on its stream. */
static int queue_grad(rank_state *k, const kl_mlp_dims *m, int64_t off, int64_t b, kl_err *err)
{
    int rc = 0;
    const float *x = k->x + off * m->d;
    const int32_t *y = k->y + off;
    if (b == 0) {
        KL_CUDA_CHECK(cudaMemsetAsync(k->g, 0, sizeof(float) * (size_t)m->size, k->s));
        return 0;
    }
    KL_CUBLAS_CHECK(sgemm(k->h, false, false, b, m->h, m->d, x, k->w + m->w1, 0.0f, k->hid));
    bias_relu_kernel<<<grid_for(b * m->h), 256, 0, k->s>>>(k->hid, k->w + m->b1, b * m->h, m->h);
    KL_CUBLAS_CHECK(sgemm(k->h, false, false, b, m->c, m->h, k->hid, k->w + m->w2, 0.0f, k->logits));
    softmax_xent_kernel<<<warps_grid(b), 256, 0, k->s>>>(k->logits, k->w + m->b2, y, k->loss + off, b, m->c);
    KL_CUBLAS_CHECK(sgemm(k->h, true, false, m->h, m->c, b, k->hid, k->logits, 0.0f, k->g + m->w2));
    KL_CUBLAS_CHECK(column_sums(k->h, k->logits, b, m->c, k->ones, k->g + m->b2));
    KL_CUBLAS_CHECK(sgemm(k->h, false, true, b, m->h, m->c, k->logits, k->w + m->w2, 0.0f, k->dhid));
    relu_mask_kernel<<<grid_for(b * m->h), 256, 0, k->s>>>(k->dhid, k->hid, b * m->h);
    KL_CUBLAS_CHECK(sgemm(k->h, true, false, m->d, m->h, b, x, k->dhid, 0.0f, k->g + m->w1));
    KL_CUBLAS_CHECK(column_sums(k->h, k->dhid, b, m->h, k->ones, k->g + m->b1));
    KL_CUDA_CHECK(cudaGetLastError());
done:
    return rc;
}

/* Queues the classification count of rank k's local rows, in chunks of
 * `chunk` rows, into k->right. */
static int queue_correct(rank_state *k, const kl_mlp_dims *m, int64_t chunk, kl_err *err)
{
    int rc = 0;
    KL_CUDA_CHECK(cudaMemsetAsync(k->right, 0, sizeof(int), k->s));
    for (int64_t off = 0; off < k->nr; off += chunk) {
        int64_t b = off + chunk < k->nr ? chunk : k->nr - off;
        KL_CUBLAS_CHECK(sgemm(k->h, false, false, b, m->h, m->d, k->x + off * m->d, k->w + m->w1, 0.0f, k->hid));
        bias_relu_kernel<<<grid_for(b * m->h), 256, 0, k->s>>>(k->hid, k->w + m->b1, b * m->h, m->h);
        KL_CUBLAS_CHECK(sgemm(k->h, false, false, b, m->c, m->h, k->hid, k->w + m->w2, 0.0f, k->logits));
        argmax_count_kernel<<<warps_grid(b), 256, 0, k->s>>>(k->logits, k->w + m->b2, k->y + off, b, m->c,
                                                             k->right);
    }
    KL_CUDA_CHECK(cudaGetLastError());
done:
    return rc;
}

/* Where this node's ranks sit: a world of W ranks, local rank r being
 * global rank base + r, x and y holding global rows from node_lo on. */
typedef struct placement {
    int W, base;
    int64_t node_lo;
} placement;

/* Copies each rank's shard of x and y to its staging buffers. */
static void gather_rows(rank_state *ranks, int R, const placement *pl, const kl_mlp_dims *m, const float *x,
                        const int32_t *y)
{
    for (int r = 0; r < R; r++) {
        rank_state *k = &ranks[r];
        int64_t lo, hi;
        kl_shard_rows(m->n, pl->W, pl->base + r, &lo, &hi);
        memcpy(k->hx, x + (lo - pl->node_lo) * m->d, sizeof(float) * (size_t)((hi - lo) * m->d));
        memcpy(k->hy, y + (lo - pl->node_lo), sizeof(int32_t) * (size_t)(hi - lo));
        for (int64_t i = lo; i < hi; i++)
            k->rows[i - lo] = i;
    }
}

static int64_t rows_of_rank(const kl_mlp_dims *m, const placement *pl, int r)
{
    int64_t lo, hi;
    kl_shard_rows(m->n, pl->W, pl->base + r, &lo, &hi);
    return hi - lo;
}

/* One all-reduce (sum) of `count` elements at each rank's p(k), in place,
 * every local rank's call in one group. */
template <typename P>
static int allreduce_group(const kl_args *args, rank_state *ranks, int R, ncclComm_t *comms, size_t count,
                           ncclDataType_t type, P p, kl_err *err)
{
    ncclResult_t first = ncclGroupStart();
    for (int r = 0; r < R && (first == ncclSuccess || first == ncclInProgress); r++)
        first = ncclAllReduce(p(&ranks[r]), p(&ranks[r]), count, type, ncclSum, comms[r], ranks[r].s);
    ncclResult_t end = ncclGroupEnd();
    if (first != ncclSuccess && first != ncclInProgress)
        return kl__cuda_fail(err, __FILE__, __LINE__, "ncclAllReduce", ncclGetErrorString(first));
    return kl__cuda_comms_settle(args, comms, R, end, err);
}

/* Waits until every rank's stream has drained (multi-node runs: also
 * failing on a lost peer or the timeout, see kl__cuda_comms_wait). */
static int ranks_wait(const kl_args *args, rank_state *ranks, int R, ncclComm_t *comms, kl_err *err)
{
    cudaStream_t streams[KL_MLP_MAX_RANKS];
    int devs[KL_MLP_MAX_RANKS];
    for (int r = 0; r < R; r++) {
        streams[r] = ranks[r].s;
        devs[r] = ranks[r].dev;
    }
    return kl__cuda_comms_wait(args, comms, streams, devs, R, err);
}

/* The sum over the world of each local rank's value v[r] (doubles), read
 * back: one all-reduce of the ranks' part[0] across the nodes. */
static int world_sum(const kl_args *args, rank_state *ranks, int R, ncclComm_t *comms, const double *v,
                     double *sum, kl_err *err)
{
    int rc = 0;
    for (int r = 0; r < R; r++) {
        KL_CUDA_CHECK(cudaSetDevice(ranks[r].dev));
        KL_CUDA_CHECK(cudaMemcpyAsync(ranks[r].part, &v[r], sizeof(double), cudaMemcpyHostToDevice, ranks[r].s));
    }
    if ((rc = allreduce_group(args, ranks, R, comms, 1, ncclFloat64, [](rank_state *k) { return (void *)k->part; },
                              err)) < 0 ||
        (rc = ranks_wait(args, ranks, R, comms, err)) < 0)
        goto done;
    KL_CUDA_CHECK(cudaSetDevice(ranks[0].dev));
    KL_CUDA_CHECK(cudaMemcpy(sum, ranks[0].part, sizeof(double), cudaMemcpyDeviceToHost));
done:
    return rc;
}

/* One run of train_mlp on this node: its shapes, its ranks and what the
 * stages below share. */
typedef struct mlp_run {
    const kl_args *args;
    kl_err *err;
    const kl_dist *dist;
    kl_mlp_dims m;
    placement pl;
    int R;
    int64_t epochs, bmax, steps, held;
    float lr, mom;
    rank_state ranks[KL_MLP_MAX_RANKS];
    ncclComm_t comms[KL_MLP_MAX_RANKS];
    int devs[KL_MLP_MAX_RANKS];  /* rank r's device */
    float *w0;                  /* the initial weights, then rank 0's result (m.size) */
    float *loss_out;            /* outs' loss (epochs) */
    int64_t t;                  /* steps queued so far */
    int started, have_turn;
} mlp_run;

/* The six outputs: w1 (d,h), b1 (h), w2 (h,c), b2 (c), loss (epochs),
 * accuracy (1). 0, or -1 when memory ran out. */
static int alloc_outputs(kl_tensor *outs, const kl_mlp_dims *m, int64_t epochs)
{
    const int64_t w1s[2] = {m->d, m->h}, b1s[1] = {m->h}, w2s[2] = {m->h, m->c}, b2s[1] = {m->c};
    const int64_t ls[1] = {epochs}, as[1] = {1};
    if (kl_tensor_alloc(&outs[KL_MLP_OUT_W1], KL_F32, 2, w1s) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_B1], KL_F32, 1, b1s) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_W2], KL_F32, 2, w2s) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_B2], KL_F32, 1, b2s) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_LOSS], KL_F32, 1, ls) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_ACC], KL_F32, 1, as) < 0)
        return -1;
    return 0;
}

/* The host side: the initial weights, and each rank's shard of x (nr,d)
 * and y (nr) staged. 0, or -1 when memory ran out. */
static int stage_host(mlp_run *run, const float *x, const int32_t *y)
{
    const kl_mlp_dims *m = &run->m;
    run->w0 = (float *)malloc(sizeof(float) * (size_t)m->size);
    if (!run->w0)
        return -1;
    kl__mlp_init(m, (uint64_t)run->args->params[KL_MLP_SEED].num, run->w0);
    for (int r = 0; r < run->R; r++) {
        rank_state *k = &run->ranks[r];
        k->nr = rows_of_rank(m, &run->pl, r);
        const size_t nr = (size_t)(k->nr > 0 ? k->nr : 1);
        k->rows = (int64_t *)malloc(sizeof(int64_t) * nr);
        k->hx = (float *)malloc(sizeof(float) * nr * (size_t)m->d);
        k->hy = (int32_t *)malloc(sizeof(int32_t) * nr);
        k->hloss = (float *)malloc(sizeof(float) * nr);
        if (!k->rows || !k->hx || !k->hy || !k->hloss)
            return -1;
    }
    gather_rows(run->ranks, run->R, &run->pl, m, x, y);
    return 0;
}

/* A vector of `rows` ones on k's device (the bias gradients' reduction). */
static int fill_ones(rank_state *k, size_t rows, kl_err *err)
{
    int rc = 0;
    float *ones = (float *)malloc(sizeof(float) * rows);
    if (!ones) {
        kl_err_set(err, NULL, "train_mlp: cannot allocate host memory (%zu rows)", rows);
        return KL_ENOMEM;
    }
    for (size_t i = 0; i < rows; i++)
        ones[i] = 1.0f;
    cudaError_t e = cudaMemcpyAsync(k->ones, ones, sizeof(float) * rows, cudaMemcpyHostToDevice, k->s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(k->s); /* pageable source: done before it is freed */
    free(ones);
    KL_CUDA_CHECK(e);
done:
    return rc;
}

/* Rank k's device: its stream, events and cuBLAS handle, its buffers (x
 * (nr,d), y, loss (nr); w, v, g (m.size); hid, dhid (srows,h); logits
 * (srows,c); ones (srows)), its shard and the initial weights copied in. */
static int rank_setup(mlp_run *run, rank_state *k)
{
    const kl_mlp_dims *m = &run->m;
    kl_err *err = run->err;
    int rc = 0;
    k->srows = k->nr < EVAL_ROWS ? k->nr : EVAL_ROWS;
    k->srows = k->srows > run->bmax ? k->srows : run->bmax;
    const size_t nr = (size_t)(k->nr > 0 ? k->nr : 1), P = (size_t)m->size, rows = (size_t)k->srows;
    KL_CUDA_CHECK(cudaSetDevice(k->dev));
    KL_CUDA_CHECK(cudaStreamCreateWithFlags(&k->s, cudaStreamNonBlocking));
    KL_CUDA_CHECK(cudaEventCreateWithFlags(&k->ev[0], cudaEventDisableTiming));
    KL_CUDA_CHECK(cudaEventCreateWithFlags(&k->ev[1], cudaEventDisableTiming));
    if ((rc = kl__cuda_blas_begin(k->dev, k->s, &k->h, &k->ws, err)) < 0)
        goto done;
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->x, sizeof(float) * nr * (size_t)m->d, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->y, sizeof(int32_t) * nr, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->loss, sizeof(float) * nr, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->w, sizeof(float) * P, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->v, sizeof(float) * P, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->g, sizeof(float) * P, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->hid, sizeof(float) * rows * (size_t)m->h, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->dhid, sizeof(float) * rows * (size_t)m->h, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->logits, sizeof(float) * rows * (size_t)m->c, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->ones, sizeof(float) * rows, k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->right, sizeof(int), k->s));
    KL_CUDA_CHECK(cudaMallocAsync((void **)&k->part, sizeof(double), k->s));
    KL_CUDA_CHECK(cudaMemcpyAsync(k->x, k->hx, sizeof(float) * (size_t)k->nr * (size_t)m->d,
                                  cudaMemcpyHostToDevice, k->s));
    KL_CUDA_CHECK(cudaMemcpyAsync(k->y, k->hy, sizeof(int32_t) * (size_t)k->nr, cudaMemcpyHostToDevice, k->s));
    KL_CUDA_CHECK(cudaMemcpyAsync(k->w, run->w0, sizeof(float) * P, cudaMemcpyHostToDevice, k->s));
    KL_CUDA_CHECK(cudaMemsetAsync(k->v, 0, sizeof(float) * P, k->s));
    rc = fill_ones(k, rows, err);
done:
    return rc;
}

/* Every rank's device, then (more than one rank in the world) the NCCL
 * communicators, under this process' NCCL turn. */
static int ranks_setup(mlp_run *run, const int *gpu_ids)
{
    int rc;
    for (int r = 0; r < run->R; r++) {
        run->devs[r] = gpu_ids[r];
        if ((rc = rank_setup(run, &run->ranks[r])) < 0)
            return rc;
    }
    if (run->pl.W > 1) {
        if ((rc = kl__cuda_nccl_turn_take(run->args, run->err)) < 0)
            return rc;
        run->have_turn = 1;
        if ((rc = kl__cuda_comms_open(run->args, run->devs, run->R, run->comms, run->err)) < 0)
            return rc;
    }
    for (int r = 0; r < run->R; r++)
        run->ranks[r].comm = run->comms[r];
    run->started = 1;
    return 0;
}

/* Keeps at most two windows of steps queued: at the start of each window,
 * waits for the event of the window before the last, then records it. */
static int window_turn(mlp_run *run)
{
    const kl_args *args = run->args;
    kl_err *err = run->err;
    const int slot = (int)(run->t / WINDOW % 2);
    int rc = 0;
    for (int r = 0; r < run->R; r++) {
        rank_state *k = &run->ranks[r];
        KL_CUDA_CHECK(cudaSetDevice(k->dev));
        if (run->t >= 2 * WINDOW &&
            (rc = run->pl.W > 1 ? kl__cuda_comms_wait_event(args, run->comms, run->R, k->ev[slot], err)
                                : wait_event(k->ev[slot], args, err)) < 0)
            goto done;
        KL_CUDA_CHECK(cudaEventRecord(k->ev[slot], k->s));
    }
done:
    return rc;
}

/* Step s of an epoch: every rank's gradient of its next rows (from
 * cursor[r]), summed over the world, then the momentum update of the
 * weights with the step's total rows. */
static int train_step(mlp_run *run, int64_t s, int64_t *cursor)
{
    const kl_mlp_dims *m = &run->m;
    const int64_t bt = kl__mlp_step_total(m->n, run->pl.W, run->bmax, s);
    kl_err *err = run->err;
    int rc = 0;
    if (kl__cuda_canceled(run->args)) {
        kl_err_set(err, NULL, "train_mlp: cancelled");
        return KL_ECANCELED;
    }
    if (run->t % WINDOW == 0 && (rc = window_turn(run)) < 0)
        return rc;
    for (int r = 0; r < run->R; r++) {
        int64_t lo;
        const int64_t b = kl__mlp_step_rows(m->n, run->pl.W, run->pl.base + r, run->bmax, s, &lo);
        KL_CUDA_CHECK(cudaSetDevice(run->ranks[r].dev));
        if ((rc = queue_grad(&run->ranks[r], m, cursor[r], b, err)) < 0)
            goto done;
        cursor[r] += b;
    }
    if (run->pl.W > 1 &&
        (rc = allreduce_group(run->args, run->ranks, run->R, run->comms, (size_t)m->size, ncclFloat,
                              [](rank_state *k) { return (void *)k->g; }, err)) < 0)
        goto done;
    for (int r = 0; r < run->R; r++) {
        rank_state *k = &run->ranks[r];
        KL_CUDA_CHECK(cudaSetDevice(k->dev));
        update_kernel<<<grid_for(m->size), 256, 0, k->s>>>(k->w, k->v, k->g, m->size, (float)bt, run->lr,
                                                          run->mom);
        KL_CUDA_CHECK(cudaGetLastError());
    }
done:
    return rc;
}

/* The epoch's losses, each rank's summed on the host in row order (its
 * rows are contiguous, so on one node this is the CPU's row order), then
 * over the world: the mean into *mean. */
static int epoch_loss(mlp_run *run, double *mean)
{
    const kl_args *args = run->args;
    kl_err *err = run->err;
    double parts[KL_MLP_MAX_RANKS], sum = 0;
    int rc;
    if ((rc = ranks_wait(args, run->ranks, run->R, run->comms, err)) < 0)
        goto done;
    for (int r = 0; r < run->R; r++) {
        rank_state *k = &run->ranks[r];
        KL_CUDA_CHECK(cudaSetDevice(k->dev));
        KL_CUDA_CHECK(cudaMemcpy(k->hloss, k->loss, sizeof(float) * (size_t)k->nr, cudaMemcpyDeviceToHost));
        parts[r] = 0;
        for (int64_t i = 0; i < k->nr; i++)
            parts[r] += k->hloss[i];
        sum += parts[r];
    }
    if (run->dist && (rc = world_sum(args, run->ranks, run->R, run->comms, parts, &sum, err)) < 0)
        goto done;
    *mean = sum / (double)run->m.n;
done:
    return rc;
}

/* Every epoch: its steps, then its mean loss into loss_out[e] (and as
 * progress, but for the last, reported with the accuracy). */
static int train_epochs(mlp_run *run)
{
    for (int64_t e = 0; e < run->epochs; e++) {
        int64_t cursor[KL_MLP_MAX_RANKS] = {0};
        double mean = 0;
        int rc;
        for (int64_t s = 0; s < run->steps; s++, run->t++)
            if ((rc = train_step(run, s, cursor)) < 0)
                return rc;
        if ((rc = epoch_loss(run, &mean)) < 0)
            return rc;
        run->loss_out[e] = (float)mean;
        if (e + 1 < run->epochs)
            kl__mlp_progress(run->args, e + 1, run->epochs, run->loss_out[e], -1);
    }
    return 0;
}

/* The accuracy over the world's rows into *acc (each rank counts its
 * first srows rows' right answers). */
static int accuracy(mlp_run *run, double *acc)
{
    const kl_args *args = run->args;
    kl_err *err = run->err;
    double parts[KL_MLP_MAX_RANKS], right = 0;
    int rc = 0;
    for (int r = 0; r < run->R; r++) {
        KL_CUDA_CHECK(cudaSetDevice(run->ranks[r].dev));
        if ((rc = queue_correct(&run->ranks[r], &run->m, run->ranks[r].srows, err)) < 0)
            goto done;
    }
    if ((rc = ranks_wait(args, run->ranks, run->R, run->comms, err)) < 0)
        goto done;
    for (int r = 0; r < run->R; r++) {
        int got = 0;
        KL_CUDA_CHECK(cudaSetDevice(run->ranks[r].dev));
        KL_CUDA_CHECK(cudaMemcpy(&got, run->ranks[r].right, sizeof(int), cudaMemcpyDeviceToHost));
        parts[r] = got;
        right += got;
    }
    if (run->dist && (rc = world_sum(args, run->ranks, run->R, run->comms, parts, &right, err)) < 0)
        goto done;
    *acc = right / (double)run->m.n;
done:
    return rc;
}

/* The outputs: the accuracy, and rank 0's weights (every rank holds the
 * same) split into w1, b1, w2, b2; the run's figures in its info. */
static int write_outputs(mlp_run *run, kl_tensor *outs, double acc)
{
    const kl_mlp_dims *m = &run->m;
    kl_err *err = run->err;
    int rc = 0;
    ((float *)outs[KL_MLP_OUT_ACC].data)[0] = (float)acc;
    kl__mlp_progress(run->args, run->epochs, run->epochs, run->loss_out[run->epochs - 1], acc);
    KL_CUDA_CHECK(cudaSetDevice(run->ranks[0].dev));
    KL_CUDA_CHECK(cudaMemcpy(run->w0, run->ranks[0].w, sizeof(float) * (size_t)m->size, cudaMemcpyDeviceToHost));
    memcpy(outs[KL_MLP_OUT_W1].data, run->w0 + m->w1, sizeof(float) * (size_t)(m->d * m->h));
    memcpy(outs[KL_MLP_OUT_B1].data, run->w0 + m->b1, sizeof(float) * (size_t)m->h);
    memcpy(outs[KL_MLP_OUT_W2].data, run->w0 + m->w2, sizeof(float) * (size_t)(m->h * m->c));
    memcpy(outs[KL_MLP_OUT_B2].data, run->w0 + m->b2, sizeof(float) * (size_t)m->c);
    kl_info_set(run->args->info, "ranks", "%d", run->pl.W);
    if (run->dist)
        kl_info_set(run->args->info, "nodes", "%d", run->dist->nodes);
    kl_info_set(run->args->info, "steps", "%lld", (long long)(run->steps * run->epochs));
    if (run->dist && run->dist->node_rank != 0) /* node 0 answers for the world */
        for (int o = 0; o < 6; o++)
            kl_tensor_free(&outs[o]);
done:
    return rc;
}

/* Frees what the run holds; rc < 0: it failed, and collectives may be
 * stuck on a lost peer or a stopped GPU. */
static void release(mlp_run *run, int rc)
{
    const int R = run->R;
    /* Aborting the communicators is what lets the streams drain. */
    if (rc < 0)
        kl__cuda_comms_close(run->args, run->devs, run->comms, R, 1);
    for (int r = 0; r < R; r++) {
        rank_state *k = &run->ranks[r];
        if (!k->s)
            continue;
        cudaSetDevice(k->dev);
        /* Work left queued by a cancel or a failure holds collectives that
         * the communicators must see through before they are destroyed. */
        if (rc < 0 && run->started && run->pl.W > 1)
            cudaStreamSynchronize(k->s);
        kl__cuda_free(k->x, k->s);
        kl__cuda_free(k->y, k->s);
        kl__cuda_free(k->loss, k->s);
        kl__cuda_free(k->w, k->s);
        kl__cuda_free(k->v, k->s);
        kl__cuda_free(k->g, k->s);
        kl__cuda_free(k->hid, k->s);
        kl__cuda_free(k->dhid, k->s);
        kl__cuda_free(k->logits, k->s);
        kl__cuda_free(k->ones, k->s);
        kl__cuda_free(k->right, k->s);
        kl__cuda_free(k->part, k->s);
        kl__cuda_blas_end(k->ws, k->s);
    }
    kl__cuda_comms_close(run->args, run->devs, run->comms, R, 0);
    for (int r = 0; r < R; r++) {
        rank_state *k = &run->ranks[r];
        if (k->s) {
            cudaSetDevice(k->dev);
            if (k->ev[0])
                cudaEventDestroy(k->ev[0]);
            if (k->ev[1])
                cudaEventDestroy(k->ev[1]);
            kl__cuda_stream_close(k->s, k->dev);
        }
        free(k->rows);
        free(k->hx);
        free(k->hy);
        free(k->hloss);
    }
    free(run->w0);
    if (run->have_turn)
        kl__cuda_nccl_turn_give();
}

int kl__cuda_train_mlp(const kl_args *args, const int *gpu_ids, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *tx = args->inputs[KL_MLP_X], *ty = args->inputs[KL_MLP_Y];
    const kl_dist *dist = args->dist;
    const int R = kl__mlp_ranks(args);
    /* n: the rows of the whole job; x holds held = n of them, or the node's. */
    const int64_t held = tx->shape[0];
    const placement pl = {dist ? dist->nodes * R : R, dist ? dist->node_rank * R : 0, dist ? dist->shard_lo : 0};
    static const mlp_run zero = {};
    mlp_run *run;
    double acc = 0;
    int rc = kl__mlp_labels_check((const int32_t *)ty->data, held, (int64_t)args->params[KL_MLP_CLASSES].num, err);

    if (rc < 0)
        return rc;
    if (kl__cuda_canceled(args)) {
        kl_err_set(err, NULL, "train_mlp: cancelled");
        return KL_ECANCELED;
    }
    if (!(run = (mlp_run *)malloc(sizeof *run))) {
        kl_err_set(err, NULL, "train_mlp: cannot allocate host memory");
        return KL_ENOMEM;
    }
    *run = zero;
    run->args = args;
    run->err = err;
    run->dist = dist;
    run->R = R;
    run->held = held;
    run->pl = pl;
    run->m = kl__mlp_dims(dist ? dist->shard_total : held, tx->shape[1], (int64_t)args->params[KL_MLP_HIDDEN].num,
                          (int64_t)args->params[KL_MLP_CLASSES].num);
    run->epochs = (int64_t)args->params[KL_MLP_EPOCHS].num;
    run->bmax = kl__mlp_shard_max((int64_t)args->params[KL_MLP_BATCH].num, run->pl.W);
    run->steps = kl__mlp_steps(run->m.n, run->pl.W, run->bmax);
    run->lr = (float)args->params[KL_MLP_LR].num;
    run->mom = (float)args->params[KL_MLP_MOMENTUM].num;
    for (int r = 0; r < R; r++)
        run->ranks[r].dev = gpu_ids[r];

    if (alloc_outputs(outs, &run->m, run->epochs) < 0 ||
        stage_host(run, (const float *)tx->data, (const int32_t *)ty->data) < 0) {
        kl_err_set(err, NULL, "train_mlp: cannot allocate host memory (%lld parameters, %lld rows)",
                   (long long)run->m.size, (long long)held);
        rc = KL_ENOMEM;
        goto done;
    }
    run->loss_out = (float *)outs[KL_MLP_OUT_LOSS].data;
    if ((rc = ranks_setup(run, gpu_ids)) < 0 || (rc = train_epochs(run)) < 0 ||
        (rc = accuracy(run, &acc)) < 0 || (rc = write_outputs(run, outs, acc)) < 0)
        goto done;
done:
    release(run, rc);
    free(run);
    cudaSetDevice(gpu_ids[0]);
    (void)cudaGetLastError(); /* leave nothing for the next run on this thread */
    return rc;
}
