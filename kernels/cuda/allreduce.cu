/* allreduce.cu — allreduce across GPUs with NCCL, side by side with
 * cpu/allreduce.c and with the same contract:
 *   params: count (elements per rank), dtype (float32 | float64),
 *           op (sum | max | min), iters; inputs: none
 *   outputs: time_us, algbw_gbps, busbw_gbps (1) float64; wrong (1) int32
 * Rank r runs on device gpu_ids[r] (ncclCommInitAll, one process, one stream per
 * device; the plugin has checked that the devices exist). Each rank fills its
 * send buffer on its device with kl__allreduce_input (kl_allreduce.h) and
 * poisons its receive buffer with NaN; one untimed all-reduce, out of place,
 * is then counted element by element on the devices against the exact value
 * (nccl-tests' correctness pass, and the warm-up); then `iters` all-reduces
 * are timed by the host clock from the first enqueue to the last stream's
 * end, as nccl-tests does. Cancel is polled before each iteration, and the
 * host runs at most AR_DEPTH iterations ahead of the GPUs, so a cancel waits
 * for a few all-reduces only. One node's part of a multi-node run
 * (args->dist) holds global ranks node_rank * ranks + r of the world
 * (kl__cuda_comms_open: the unique id through the rendezvous), fills by
 * global rank, checks against the world's exact value, sums `wrong` over the
 * world with one more all-reduce, and returns outputs on node_rank 0 only;
 * a peer lost, a cancel or the timeout aborts the communicators. */
#include "kl_cuda.h"
#include "kl_allreduce.h"

#include <nccl.h>
#include <pthread.h>
#include <time.h>

/* Iterations enqueued ahead of the GPUs: enough to keep them busy between
 * two host polls, few enough that a cancel is seen within milliseconds. */
#define AR_DEPTH 8

namespace {

struct expected_table {
    double v[KL_ALLREDUCE_PERIOD];
};

template <typename T> __global__ void fill_input(T *x, int64_t count, int rank)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = (T)kl__allreduce_input(i, rank);
}

/* *bad += elements of x that differ from the exact result (a NaN counts). */
template <typename T> __global__ void count_wrong(const T *x, int64_t count, expected_table e, unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        mine += !(x[i] == (T)e.v[i % KL_ALLREDUCE_PERIOD]);
    for (int off = 16; off > 0; off /= 2)
        mine += __shfl_down_sync(0xffffffffu, mine, off);
    if ((threadIdx.x & 31) == 0 && mine)
        atomicAdd(bad, mine);
}

/* Grid-stride kernels: enough blocks to fill an H200, no more. */
unsigned blocks_for(int64_t count)
{
    int64_t b = (count + 255) / 256;
    return (unsigned)(b < 2048 ? (b > 0 ? b : 1) : 2048);
}

/* One all-reduce: every rank's call in one group, as one thread driving
 * several GPUs must. The group is closed even when a call fails, so no
 * half-open group is left on the worker thread for its next run. */
ncclResult_t allreduce_ranks(int n, void *const *send, void *const *recv, int64_t count, ncclDataType_t type,
                             ncclRedOp_t op, const ncclComm_t *comms, const cudaStream_t *streams)
{
    ncclResult_t first = ncclGroupStart();
    if (first != ncclSuccess)
        return first;
    for (int r = 0; r < n && first == ncclSuccess; r++)
        first = ncclAllReduce(send[r], recv[r], (size_t)count, type, op, comms[r], streams[r]);
    ncclResult_t end = ncclGroupEnd();
    return first != ncclSuccess ? first : end;
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

} // namespace

/* One run: its shape, and per local rank r its device, communicator,
 * stream, buffers (send, recv: count elements; dbad: one counter). */
typedef struct ar_run {
    const kl_args *args;
    kl_err *err;
    int n, world, base;
    int64_t count;
    bool f64;
    size_t bytes;
    ncclDataType_t ntype;
    ncclRedOp_t nop;
    unsigned blocks;
    int devs[KL_ALLREDUCE_MAX_RANKS];
    ncclComm_t comms[KL_ALLREDUCE_MAX_RANKS];
    cudaStream_t streams[KL_ALLREDUCE_MAX_RANKS];
    void *send[KL_ALLREDUCE_MAX_RANKS], *recv[KL_ALLREDUCE_MAX_RANKS];
    unsigned long long *dbad[KL_ALLREDUCE_MAX_RANKS];
    cudaEvent_t ahead[AR_DEPTH];
    expected_table table;
    bool have_comms;
} ar_run;

/* The communicators, and what the run says of them in its info. */
static int ar_open(ar_run *a)
{
    const kl_args *args = a->args;
    kl_err *err = a->err;
    int rc, nccl_version = 0;
    if ((rc = kl__cuda_comms_open(args, a->devs, a->n, a->comms, err)) < 0)
        goto done;
    a->have_comms = true;
    KL_NCCL_CHECK(ncclGetVersion(&nccl_version));
    kl_info_set(args->info, "ranks", "%d", a->world);
    if (args->dist)
        kl_info_set(args->info, "nodes", "%d", args->dist->nodes);
    kl_info_set(args->info, "transport", "NCCL %d.%d.%d, GPUs %d..%d", nccl_version / 10000,
                nccl_version / 100 % 100, nccl_version % 100, a->devs[0], a->devs[a->n - 1]);
done:
    return rc;
}

/* Each rank's stream and buffers: send filled by global rank, recv
 * poisoned with NaN, dbad zeroed. */
static int ar_buffers(ar_run *a)
{
    kl_err *err = a->err;
    int rc = 0;
    for (int r = 0; r < a->n; r++) {
        KL_CUDA_CHECK(cudaSetDevice(a->devs[r]));
        KL_CUDA_CHECK(cudaStreamCreateWithFlags(&a->streams[r], cudaStreamNonBlocking));
        KL_CUDA_CHECK(cudaMalloc(&a->send[r], a->bytes));
        KL_CUDA_CHECK(cudaMalloc(&a->recv[r], a->bytes));
        KL_CUDA_CHECK(cudaMalloc((void **)&a->dbad[r], sizeof *a->dbad[r]));
        if (a->f64)
            fill_input<<<a->blocks, 256, 0, a->streams[r]>>>((double *)a->send[r], a->count, a->base + r);
        else
            fill_input<<<a->blocks, 256, 0, a->streams[r]>>>((float *)a->send[r], a->count, a->base + r);
        KL_CUDA_CHECK(cudaGetLastError());
        KL_CUDA_CHECK(cudaMemsetAsync(a->recv[r], 0xff, a->bytes, a->streams[r])); /* NaN in either dtype */
        KL_CUDA_CHECK(cudaMemsetAsync(a->dbad[r], 0, sizeof *a->dbad[r], a->streams[r]));
    }
done:
    return rc;
}

/* Untimed: one all-reduce, then the count of wrong elements per rank (the
 * world's, across nodes) into *bad. */
static int ar_check(ar_run *a, unsigned long long *bad)
{
    const kl_args *args = a->args;
    kl_err *err = a->err;
    const int n = a->n;
    unsigned long long hbad = 0;
    int rc;
    if ((rc = kl__cuda_comms_settle(args, a->comms, n,
                                    allreduce_ranks(n, a->send, a->recv, a->count, a->ntype, a->nop, a->comms,
                                                    a->streams),
                                    err)) < 0)
        goto done;
    for (int r = 0; r < n; r++) {
        KL_CUDA_CHECK(cudaSetDevice(a->devs[r]));
        if (a->f64)
            count_wrong<<<a->blocks, 256, 0, a->streams[r]>>>((const double *)a->recv[r], a->count, a->table,
                                                              a->dbad[r]);
        else
            count_wrong<<<a->blocks, 256, 0, a->streams[r]>>>((const float *)a->recv[r], a->count, a->table,
                                                              a->dbad[r]);
        KL_CUDA_CHECK(cudaGetLastError());
    }
    if (args->dist) /* the world's count, in every rank's dbad */
        if ((rc = kl__cuda_comms_settle(args, a->comms, n,
                                        allreduce_ranks(n, (void *const *)a->dbad, (void *const *)a->dbad, 1,
                                                        ncclUint64, ncclSum, a->comms, a->streams),
                                        err)) < 0)
            goto done;
    if ((rc = kl__cuda_comms_wait(args, a->comms, a->streams, a->devs, n, err)) < 0)
        goto done;
    for (int r = 0; r < (args->dist ? 1 : n); r++) {
        KL_CUDA_CHECK(cudaSetDevice(a->devs[r]));
        KL_CUDA_CHECK(cudaMemcpy(&hbad, a->dbad[r], sizeof hbad, cudaMemcpyDeviceToHost));
        *bad += hbad;
    }
done:
    return rc;
}

/* Timed: iters all-reduces, *seconds each. The events mark iterations on
 * rank 0's stream; a collective ends on every rank at about the same
 * time. */
static int ar_timed(ar_run *a, int iters, double *seconds)
{
    const kl_args *args = a->args;
    kl_err *err = a->err;
    const int n = a->n;
    int rc = 0;
    KL_CUDA_CHECK(cudaSetDevice(a->devs[0]));
    for (int d = 0; d < AR_DEPTH; d++)
        KL_CUDA_CHECK(cudaEventCreateWithFlags(&a->ahead[d], cudaEventDisableTiming));
    {
        const double t0 = now_s();
        for (int it = 0; it < iters; it++) {
            if (kl__cuda_canceled(args)) {
                kl_err_set(err, NULL, "allreduce: cancelled after %d of %d timed iterations", it, iters);
                rc = KL_ECANCELED;
                goto done;
            }
            if (it >= AR_DEPTH &&
                (rc = kl__cuda_comms_wait_event(args, a->comms, n, a->ahead[it % AR_DEPTH], err)) < 0)
                goto done;
            if ((rc = kl__cuda_comms_settle(args, a->comms, n,
                                            allreduce_ranks(n, a->send, a->recv, a->count, a->ntype, a->nop,
                                                            a->comms, a->streams),
                                            err)) < 0)
                goto done;
            KL_CUDA_CHECK(cudaEventRecord(a->ahead[it % AR_DEPTH], a->streams[0]));
        }
        if ((rc = kl__cuda_comms_wait(args, a->comms, a->streams, a->devs, n, err)) < 0)
            goto done;
        *seconds = (now_s() - t0) / iters;
    }
done:
    return rc;
}

/* Frees the run's devices' part; rc < 0: it failed. */
static void ar_release(ar_run *a, int rc, int gpu0)
{
    const int n = a->n;
    /* A failed run may have collectives stuck on a lost peer or a stopped
     * GPU: aborting the communicators is what lets its streams drain. */
    if (a->have_comms && rc < 0) {
        kl__cuda_comms_close(a->args, a->devs, a->comms, n, 1);
        a->have_comms = false;
    }
    /* Whatever was enqueued runs to its end before the buffers and the
     * communicators go: NCCL kernels of every rank were enqueued together. */
    for (int r = 0; r < n; r++) {
        if (!a->streams[r])
            continue;
        cudaSetDevice(a->devs[r]);
        cudaStreamSynchronize(a->streams[r]);
    }
    if (a->have_comms)
        kl__cuda_comms_close(a->args, a->devs, a->comms, n, 0);
    for (int r = 0; r < n; r++) {
        cudaSetDevice(a->devs[r]);
        if (a->send[r])
            cudaFree(a->send[r]);
        if (a->recv[r])
            cudaFree(a->recv[r]);
        if (a->dbad[r])
            cudaFree(a->dbad[r]);
        kl__cuda_stream_close(a->streams[r], a->devs[r]);
    }
    cudaSetDevice(gpu0);
    for (int d = 0; d < AR_DEPTH; d++)
        if (a->ahead[d])
            cudaEventDestroy(a->ahead[d]);
    (void)cudaGetLastError(); /* leave no error behind for the worker's next run */
}

int kl__cuda_allreduce(const kl_args *args, const int *gpu_ids, kl_tensor *outs, kl_err *err)
{
    const int n = args->ranks > 0 ? args->ranks : 1;
    const kl_dist *dist = args->dist;
    const kl_allreduce_op op = (kl_allreduce_op)args->params[KL_ALLREDUCE_OP].choice;
    const int iters = (int)args->params[KL_ALLREDUCE_ITERS].num;
    const int64_t one = 1;
    static const ar_run zero = {};
    ar_run *a;
    unsigned long long bad = 0;
    double seconds = 0;
    int rc = 0;

    if (n > KL_ALLREDUCE_MAX_RANKS) { /* the catalog check refuses it first */
        kl_err_set(err, "resources.gpus", "allreduce takes at most %d ranks", KL_ALLREDUCE_MAX_RANKS);
        return KL_EINVAL;
    }
    for (int o = 0; o < 3; o++)
        if (kl_tensor_alloc(&outs[o], KL_F64, 1, &one) < 0)
            rc = KL_ENOMEM;
    if (rc < 0 || kl_tensor_alloc(&outs[3], KL_I32, 1, &one) < 0 || !(a = (ar_run *)malloc(sizeof *a))) {
        kl_err_set(err, NULL, "allreduce: out of memory");
        return KL_ENOMEM; /* the plugin frees what was allocated */
    }
    *a = zero;
    a->args = args;
    a->err = err;
    a->n = n;
    a->world = dist ? dist->nodes * n : n;
    a->base = dist ? dist->node_rank * n : 0;
    a->count = (int64_t)args->params[KL_ALLREDUCE_COUNT].num;
    a->f64 = args->params[KL_ALLREDUCE_DTYPE].choice == 1;
    a->bytes = (size_t)a->count * (a->f64 ? sizeof(double) : sizeof(float));
    a->ntype = a->f64 ? ncclFloat64 : ncclFloat32;
    a->nop = op == KL_ALLREDUCE_SUM ? ncclSum : op == KL_ALLREDUCE_MAX ? ncclMax : ncclMin;
    a->blocks = blocks_for(a->count);
    kl__allreduce_expected(op, a->world, a->table.v);
    if ((rc = kl__cuda_nccl_turn_take(args, err)) < 0) {
        free(a);
        return rc;
    }
    for (int r = 0; r < n; r++)
        a->devs[r] = gpu_ids[r];
    if ((rc = ar_open(a)) < 0 || (rc = ar_buffers(a)) < 0 || (rc = ar_check(a, &bad)) < 0 ||
        (rc = ar_timed(a, iters, &seconds)) < 0)
        goto done;

    ((double *)outs[0].data)[0] = seconds * 1e6;
    kl__allreduce_bw((double)a->bytes, a->world, seconds, (double *)outs[1].data, (double *)outs[2].data);
    ((int32_t *)outs[3].data)[0] = bad > INT32_MAX ? INT32_MAX : (int32_t)bad;
    if (dist && dist->node_rank != 0) /* node 0 answers for the world */
        for (int o = 0; o < 4; o++)
            kl_tensor_free(&outs[o]);
done:
    ar_release(a, rc, gpu_ids[0]);
    free(a);
    kl__cuda_nccl_turn_give();
    return rc;
}
