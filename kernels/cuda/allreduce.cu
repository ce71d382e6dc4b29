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

int kl__cuda_allreduce(const kl_args *args, const int *gpu_ids, kl_tensor *outs, kl_err *err)
{
    const int n = args->ranks > 0 ? args->ranks : 1;
    const kl_dist *dist = args->dist;
    const int world = dist ? dist->nodes * n : n, base = dist ? dist->node_rank * n : 0;
    const int64_t count = (int64_t)args->params[KL_ALLREDUCE_COUNT].num;
    const bool f64 = args->params[KL_ALLREDUCE_DTYPE].choice == 1;
    const size_t bytes = (size_t)count * (f64 ? sizeof(double) : sizeof(float));
    const kl_allreduce_op op = (kl_allreduce_op)args->params[KL_ALLREDUCE_OP].choice;
    const int iters = (int)args->params[KL_ALLREDUCE_ITERS].num;
    const ncclDataType_t ntype = f64 ? ncclFloat64 : ncclFloat32;
    const ncclRedOp_t nop = op == KL_ALLREDUCE_SUM ? ncclSum : op == KL_ALLREDUCE_MAX ? ncclMax : ncclMin;
    const int64_t one = 1;
    const unsigned blocks = blocks_for(count);

    int devs[KL_ALLREDUCE_MAX_RANKS];
    ncclComm_t comms[KL_ALLREDUCE_MAX_RANKS] = {};
    cudaStream_t streams[KL_ALLREDUCE_MAX_RANKS] = {};
    void *send[KL_ALLREDUCE_MAX_RANKS] = {}, *recv[KL_ALLREDUCE_MAX_RANKS] = {};
    unsigned long long *dbad[KL_ALLREDUCE_MAX_RANKS] = {}, hbad = 0, bad = 0;
    cudaEvent_t ahead[AR_DEPTH] = {};
    expected_table table;
    bool have_comms = false, have_turn = false;
    int rc = 0, nccl_version = 0, it = 0;
    double t0 = 0, seconds = 0;

    if (n > KL_ALLREDUCE_MAX_RANKS) { /* the catalog check refuses it first */
        kl_err_set(err, "resources.gpus", "allreduce takes at most %d ranks", KL_ALLREDUCE_MAX_RANKS);
        return KL_EINVAL;
    }
    for (int o = 0; o < 3; o++)
        if (kl_tensor_alloc(&outs[o], KL_F64, 1, &one) < 0)
            rc = KL_ENOMEM;
    if (rc < 0 || kl_tensor_alloc(&outs[3], KL_I32, 1, &one) < 0) {
        kl_err_set(err, NULL, "allreduce: out of memory");
        return KL_ENOMEM; /* the plugin frees what was allocated */
    }
    kl__allreduce_expected(op, world, table.v);
    if ((rc = kl__cuda_nccl_turn_take(args, err)) < 0)
        return rc;
    have_turn = true;

    for (int r = 0; r < n; r++)
        devs[r] = gpu_ids[r];
    if ((rc = kl__cuda_comms_open(args, devs, n, comms, err)) < 0)
        goto done;
    have_comms = true;
    KL_NCCL_CHECK(ncclGetVersion(&nccl_version));
    kl_info_set(args->info, "ranks", "%d", world);
    if (dist)
        kl_info_set(args->info, "nodes", "%d", dist->nodes);
    kl_info_set(args->info, "transport", "NCCL %d.%d.%d, GPUs %d..%d", nccl_version / 10000,
                nccl_version / 100 % 100, nccl_version % 100, devs[0], devs[n - 1]);

    for (int r = 0; r < n; r++) {
        KL_CUDA_CHECK(cudaSetDevice(devs[r]));
        KL_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
        KL_CUDA_CHECK(cudaMalloc(&send[r], bytes));
        KL_CUDA_CHECK(cudaMalloc(&recv[r], bytes));
        KL_CUDA_CHECK(cudaMalloc((void **)&dbad[r], sizeof *dbad[r]));
        if (f64)
            fill_input<<<blocks, 256, 0, streams[r]>>>((double *)send[r], count, base + r);
        else
            fill_input<<<blocks, 256, 0, streams[r]>>>((float *)send[r], count, base + r);
        KL_CUDA_CHECK(cudaGetLastError());
        KL_CUDA_CHECK(cudaMemsetAsync(recv[r], 0xff, bytes, streams[r])); /* NaN in either dtype */
        KL_CUDA_CHECK(cudaMemsetAsync(dbad[r], 0, sizeof *dbad[r], streams[r]));
    }

    /* Untimed: one all-reduce, then the count of wrong elements per rank. */
    if ((rc = kl__cuda_comms_settle(args, comms, n,
                                    allreduce_ranks(n, send, recv, count, ntype, nop, comms, streams), err)) < 0)
        goto done;
    for (int r = 0; r < n; r++) {
        KL_CUDA_CHECK(cudaSetDevice(devs[r]));
        if (f64)
            count_wrong<<<blocks, 256, 0, streams[r]>>>((const double *)recv[r], count, table, dbad[r]);
        else
            count_wrong<<<blocks, 256, 0, streams[r]>>>((const float *)recv[r], count, table, dbad[r]);
        KL_CUDA_CHECK(cudaGetLastError());
    }
    if (dist) /* the world's count, in every rank's dbad */
        if ((rc = kl__cuda_comms_settle(args, comms, n,
                                        allreduce_ranks(n, (void *const *)dbad, (void *const *)dbad, 1, ncclUint64,
                                                        ncclSum, comms, streams),
                                        err)) < 0)
            goto done;
    if ((rc = kl__cuda_comms_wait(args, comms, streams, devs, n, err)) < 0)
        goto done;
    for (int r = 0; r < (dist ? 1 : n); r++) {
        KL_CUDA_CHECK(cudaSetDevice(devs[r]));
        KL_CUDA_CHECK(cudaMemcpy(&hbad, dbad[r], sizeof hbad, cudaMemcpyDeviceToHost));
        bad += hbad;
    }

    /* Timed. The events mark iterations on rank 0's stream; a collective
     * ends on every rank at about the same time. */
    KL_CUDA_CHECK(cudaSetDevice(devs[0]));
    for (int d = 0; d < AR_DEPTH; d++)
        KL_CUDA_CHECK(cudaEventCreateWithFlags(&ahead[d], cudaEventDisableTiming));
    t0 = now_s();
    for (it = 0; it < iters; it++) {
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "allreduce: cancelled after %d of %d timed iterations", it, iters);
            rc = KL_ECANCELED;
            goto done;
        }
        if (it >= AR_DEPTH && (rc = kl__cuda_comms_wait_event(args, comms, n, ahead[it % AR_DEPTH], err)) < 0)
            goto done;
        if ((rc = kl__cuda_comms_settle(args, comms, n,
                                        allreduce_ranks(n, send, recv, count, ntype, nop, comms, streams), err)) < 0)
            goto done;
        KL_CUDA_CHECK(cudaEventRecord(ahead[it % AR_DEPTH], streams[0]));
    }
    if ((rc = kl__cuda_comms_wait(args, comms, streams, devs, n, err)) < 0)
        goto done;
    seconds = (now_s() - t0) / iters;

    ((double *)outs[0].data)[0] = seconds * 1e6;
    kl__allreduce_bw((double)bytes, world, seconds, (double *)outs[1].data, (double *)outs[2].data);
    ((int32_t *)outs[3].data)[0] = bad > INT32_MAX ? INT32_MAX : (int32_t)bad;
    if (dist && dist->node_rank != 0) /* node 0 answers for the world */
        for (int o = 0; o < 4; o++)
            kl_tensor_free(&outs[o]);

done:
    /* A failed run may have collectives stuck on a lost peer or a stopped
     * GPU: aborting the communicators is what lets its streams drain. */
    if (have_comms && rc < 0) {
        kl__cuda_comms_close(comms, n, 1);
        have_comms = false;
    }
    /* Whatever was enqueued runs to its end before the buffers and the
     * communicators go: NCCL kernels of every rank were enqueued together. */
    for (int r = 0; r < n; r++) {
        if (!streams[r])
            continue;
        cudaSetDevice(devs[r]);
        cudaStreamSynchronize(streams[r]);
    }
    if (have_comms)
        kl__cuda_comms_close(comms, n, 0);
    for (int r = 0; r < n; r++) {
        cudaSetDevice(devs[r]);
        if (send[r])
            cudaFree(send[r]);
        if (recv[r])
            cudaFree(recv[r]);
        if (dbad[r])
            cudaFree(dbad[r]);
        kl__cuda_stream_close(streams[r], devs[r]);
    }
    cudaSetDevice(gpu_ids[0]);
    for (int d = 0; d < AR_DEPTH; d++)
        if (ahead[d])
            cudaEventDestroy(ahead[d]);
    (void)cudaGetLastError(); /* leave no error behind for the worker's next run */
    if (have_turn)
        kl__cuda_nccl_turn_give();
    return rc;
}
