/* nccl_comms.cu — the NCCL communicators of the plugin's multi-GPU kernels:
 * the whole world in this process, or, for one node's part of a multi-node
 * run (args->dist), this node's ranks of the world: node_rank 0 makes the
 * unique id and puts it in the run's store under "nccl_id", the other nodes
 * wait for it there. Either way every local GPU joins with
 * ncclCommInitRankConfig, non-blocking, inside one group. Non-blocking
 * communicators can be aborted while they wait, so a rank that never comes,
 * a peer that dies, a device that stops, a cancel or the timeout ends the
 * run (ncclCommAbort) instead of hanging it: on one node as across nodes.
 *
 * A world on one node is kept when its run ends well, and the next run on
 * the same devices, in the same order, takes it: ncclCommDestroy waits for
 * NCCL's proxy thread, which looks every 500 ms (seen on an H100: every
 * one-GPU allreduce run took 0.5 s more than its work, its communicator
 * ready after 15 ms). KEEP_WORLDS worlds at most, the least recently used
 * destroyed first; a failed or cancelled run aborts its own; the plugin's
 * close destroys the rest. A multi-node world is never kept: its peers
 * differ from run to run. KOWLOON_NCCL_KEEP=0 in the node's environment
 * keeps none (read at each run's end). */
#include "kl_cuda.h"
#include "kl_allreduce.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NCCL_ID_KEY "nccl_id"
/* A store wait is cut into slices this long to see a cancel promptly. */
#define STORE_SLICE_MS 250
/* A world on one node: how long it may take to form, and each wait on its
 * collectives. No peer can be lost there, so only a device that stopped
 * answering makes either long; a multi-node run uses --dist-timeout-s. */
#define LOCAL_TIMEOUT_MS 120000

#define KEEP_WORLDS 4

struct kept_world {
    int R;                  /* 0: the slot is empty */
    int devs[KL_ALLREDUCE_MAX_RANKS];
    ncclComm_t comms[KL_ALLREDUCE_MAX_RANKS];
    uint64_t used;          /* keep_clock when it was put back */
};
static pthread_mutex_t keep_mu = PTHREAD_MUTEX_INITIALIZER;
static kept_world keep[KEEP_WORLDS];
static uint64_t keep_clock;

/* Takes the kept world of devs[0..R) into comms: 1, or 0 when none. */
static int keep_take(const int *devs, int R, ncclComm_t *comms)
{
    int found = 0;
    pthread_mutex_lock(&keep_mu);
    for (int k = 0; k < KEEP_WORLDS && !found; k++) {
        kept_world *w = &keep[k];
        if (w->R != R || memcmp(w->devs, devs, sizeof *devs * (size_t)R) != 0)
            continue;
        memcpy(comms, w->comms, sizeof *comms * (size_t)R);
        w->R = 0;
        found = 1;
    }
    pthread_mutex_unlock(&keep_mu);
    return found;
}

/* Keeps the world of devs[0..R); the one it displaces (least recently
 * used, when every slot is taken) is handed back in out/out_R to destroy. */
static void keep_put(const int *devs, int R, const ncclComm_t *comms, ncclComm_t *out, int *out_R)
{
    pthread_mutex_lock(&keep_mu);
    kept_world *slot = &keep[0];
    for (int k = 0; k < KEEP_WORLDS; k++) {
        if (keep[k].R == 0) {
            slot = &keep[k];
            break;
        }
        if (keep[k].used < slot->used)
            slot = &keep[k];
    }
    *out_R = slot->R;
    memcpy(out, slot->comms, sizeof *out * (size_t)slot->R);
    slot->R = R;
    memcpy(slot->devs, devs, sizeof *devs * (size_t)R);
    memcpy(slot->comms, comms, sizeof *comms * (size_t)R);
    slot->used = ++keep_clock;
    pthread_mutex_unlock(&keep_mu);
}

static void destroy_all(ncclComm_t *comms, int R, int abort)
{
    for (int r = 0; r < R; r++) {
        if (!comms[r])
            continue;
        if (abort)
            ncclCommAbort(comms[r]);
        else
            ncclCommDestroy(comms[r]);
        comms[r] = NULL;
    }
}

int kl__cuda_comms_kept(void)
{
    int n = 0;
    pthread_mutex_lock(&keep_mu);
    for (int k = 0; k < KEEP_WORLDS; k++)
        n += keep[k].R > 0;
    pthread_mutex_unlock(&keep_mu);
    return n;
}

void kl__cuda_comms_drop_kept(void)
{
    for (int k = 0; k < KEEP_WORLDS; k++) {
        ncclComm_t comms[KL_ALLREDUCE_MAX_RANKS];
        int R;
        pthread_mutex_lock(&keep_mu);
        R = keep[k].R;
        memcpy(comms, keep[k].comms, sizeof *comms * (size_t)R);
        keep[k].R = 0;
        pthread_mutex_unlock(&keep_mu);
        destroy_all(comms, R, 0);
    }
}

static int timeout_ms(const kl_args *args)
{
    return args->dist ? args->dist->timeout_ms : LOCAL_TIMEOUT_MS;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void pause_100us(void)
{
    const struct timespec tick = {0, 100 * 1000};
    nanosleep(&tick, NULL);
}

/* Node 0: makes the id every rank of the world joins with, and publishes it. */
static int publish_id(const kl_args *args, ncclUniqueId *id, kl_err *err)
{
    kl_store *s = args->dist->store;
    int rc = 0;
    KL_NCCL_CHECK(ncclGetUniqueId(id));
    if ((rc = s->set(s->ctx, NCCL_ID_KEY, id, sizeof *id)) < 0)
        kl_err_set(err, NULL, "%s: cannot publish the NCCL id in the rendezvous", args->kernel->name);
done:
    return rc;
}

/* The id every rank of the world joins with: made here on node_rank 0 and
 * published, else read from the store. */
static int unique_id(const kl_args *args, ncclUniqueId *id, kl_err *err)
{
    const kl_dist *d = args->dist;
    kl_store *s = d->store;
    int rc = 0;
    if (d->node_rank == 0)
        return publish_id(args, id, err);
    const double deadline = mono_ms() + d->timeout_ms;
    for (;;) {
        void *data = NULL;
        size_t len = 0;
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "%s: cancelled during the rendezvous", args->kernel->name);
            return KL_ECANCELED;
        }
        const double left = deadline - mono_ms();
        if (left <= 0) {
            kl_err_set(err, NULL, "%s: node 0's NCCL id never came (%d ms)", args->kernel->name, d->timeout_ms);
            return KL_ETIMEDOUT;
        }
        rc = s->get(s->ctx, NCCL_ID_KEY, &data, &len, left < STORE_SLICE_MS ? (int)left + 1 : STORE_SLICE_MS);
        if (rc == 0) {
            const int ok = len == sizeof *id;
            if (ok)
                memcpy(id, data, sizeof *id);
            free(data);
            if (ok)
                return 0;
            kl_err_set(err, NULL, "%s: the NCCL id in the rendezvous has %zu bytes, not %zu", args->kernel->name,
                       len, sizeof *id);
            return KL_EBACKEND;
        }
        if (rc != KL_ETIMEDOUT) {
            kl_err_set(err, NULL, "%s: the rendezvous failed while waiting for the NCCL id", args->kernel->name);
            return rc;
        }
    }
}

/* Polls the communicators until none is in progress: 0, or the failure,
 * the cancel or the timeout (deadline_ms, 0 for none) with err set. */
static int settle(const kl_args *args, ncclComm_t *comms, int R, double deadline_ms, kl_err *err)
{
    for (;;) {
        int busy = 0;
        for (int r = 0; r < R; r++) {
            ncclResult_t st = ncclSuccess;
            if (!comms[r]) /* one rank: no communicator */
                continue;
            ncclResult_t q = ncclCommGetAsyncError(comms[r], &st);
            if (q != ncclSuccess)
                st = q;
            if (st == ncclInProgress) {
                busy = 1;
            } else if (st != ncclSuccess) {
                kl_err_set(err, NULL, "%s: NCCL rank %d: %s (%s)", args->kernel->name, r, ncclGetErrorString(st),
                           ncclGetLastError(comms[r]));
                return st == ncclRemoteError || st == ncclSystemError ? KL_ETIMEDOUT : KL_EBACKEND;
            }
        }
        if (!busy)
            return 0;
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "%s: cancelled", args->kernel->name);
            return KL_ECANCELED;
        }
        if (deadline_ms > 0 && mono_ms() > deadline_ms) {
            kl_err_set(err, NULL, "%s: %s did not answer within %d ms", args->kernel->name,
                       args->dist ? "a peer" : "a GPU of this node", timeout_ms(args));
            return KL_ETIMEDOUT;
        }
        pause_100us();
    }
}

static double deadline_of(const kl_args *args)
{
    return mono_ms() + timeout_ms(args);
}

int kl__cuda_comms_open(const kl_args *args, const int *devs, int R, ncclComm_t *comms, kl_err *err)
{
    int rc = 0;
    memset(comms, 0, sizeof *comms * (size_t)R);
    const kl_dist *d = args->dist;
    const int world = d ? d->nodes * R : R, base = d ? d->node_rank * R : 0;
    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    if (!d && R <= KL_ALLREDUCE_MAX_RANKS && keep_take(devs, R, comms)) {
        /* one that failed since it was kept is not used again */
        if ((rc = settle(args, comms, R, deadline_of(args), err)) == 0)
            return 0;
        destroy_all(comms, R, 1);
        rc = 0;
    }
    if (d && (rc = unique_id(args, &id, err)) < 0)
        return rc;
    if (!d) /* what ncclCommInitAll does, without its blocking wait */
        KL_NCCL_CHECK(ncclGetUniqueId(&id));
    cfg.blocking = 0;
    {
        ncclResult_t first = ncclGroupStart();
        for (int r = 0; r < R && (first == ncclSuccess || first == ncclInProgress); r++) {
            if (cudaSetDevice(devs[r]) != cudaSuccess) {
                first = ncclInvalidUsage;
                break;
            }
            first = ncclCommInitRankConfig(&comms[r], world, id, base + r, &cfg);
        }
        ncclResult_t end = ncclGroupEnd();
        if (first != ncclSuccess && first != ncclInProgress) {
            rc = kl__cuda_fail(err, __FILE__, __LINE__, "ncclCommInitRankConfig", ncclGetErrorString(first));
            goto done;
        }
        if (end != ncclSuccess && end != ncclInProgress) {
            rc = kl__cuda_fail(err, __FILE__, __LINE__, "ncclGroupEnd", ncclGetErrorString(end));
            goto done;
        }
    }
    rc = settle(args, comms, R, deadline_of(args), err);
done:
    if (rc < 0)
        destroy_all(comms, R, 1);
    return rc;
}

int kl__cuda_comms_settle(const kl_args *args, ncclComm_t *comms, int R, ncclResult_t enqueued, kl_err *err)
{
    int rc = 0;
    if (enqueued != ncclInProgress)
        KL_NCCL_CHECK(enqueued);
    rc = settle(args, comms, R, deadline_of(args), err);
done:
    return rc;
}

/* Polls query() (a stream's or an event's) until it is done, failing on the
 * communicators' async errors (a peer lost), a cancel or the deadline. */
template <typename Q> static int wait_done(const kl_args *args, ncclComm_t *comms, int R, double deadline, Q query,
                                            kl_err *err)
{
    for (;;) {
        cudaError_t e = query();
        if (e == cudaSuccess)
            break;
        if (e != cudaErrorNotReady)
            return kl__cuda_fail_rt(err, __FILE__, __LINE__, "cudaStreamQuery/cudaEventQuery", e);
        int rc = settle(args, comms, R, deadline, err);
        if (rc < 0)
            return rc;
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "%s: cancelled", args->kernel->name);
            return KL_ECANCELED;
        }
        if (mono_ms() > deadline) {
            kl_err_set(err, NULL, "%s: a collective did not end within %d ms (%s)", args->kernel->name,
                       timeout_ms(args), args->dist ? "a peer is gone" : "a GPU of this node stopped");
            return KL_ETIMEDOUT;
        }
        pause_100us();
    }
    (void)cudaGetLastError(); /* no cudaErrorNotReady left behind */
    return 0;
}

int kl__cuda_comms_wait(const kl_args *args, ncclComm_t *comms, const cudaStream_t *streams, const int *devs, int R,
                        kl_err *err)
{
    const double deadline = deadline_of(args);
    for (int r = 0; r < R; r++) {
        cudaSetDevice(devs[r]);
        if (!comms[r]) { /* no NCCL in a run of one rank: nothing to time out */
            int rc = kl__cuda_wait(streams[r], args, err);
            if (rc < 0)
                return rc;
            continue;
        }
        int rc = wait_done(args, comms, R, deadline, [&] { return cudaStreamQuery(streams[r]); }, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int kl__cuda_comms_wait_event(const kl_args *args, ncclComm_t *comms, int R, cudaEvent_t ev, kl_err *err)
{
    return wait_done(args, comms, R, deadline_of(args), [&] { return cudaEventQuery(ev); }, err);
}

void kl__cuda_comms_close(const kl_args *args, const int *devs, ncclComm_t *comms, int R, int abort)
{
    int whole = R > 0 && R <= KL_ALLREDUCE_MAX_RANKS;
    for (int r = 0; r < R; r++)
        whole &= comms[r] != NULL;
    const char *keep_env = getenv("KOWLOON_NCCL_KEEP");
    if (abort || args->dist || !whole || (keep_env && strcmp(keep_env, "0") == 0)) {
        destroy_all(comms, R, abort);
        return;
    }
    ncclComm_t old[KL_ALLREDUCE_MAX_RANKS];
    int old_R = 0;
    keep_put(devs, R, comms, old, &old_R);
    memset(comms, 0, sizeof *comms * (size_t)R);
    destroy_all(old, old_R, 0);
}
