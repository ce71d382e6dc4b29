/* allreduce.c — the allreduce kernel's catalog entry and CPU reference: an
 * all-reduce among `ranks` threads over shared memory, checked and timed the
 * way nccl-tests does it.
 *   params: count (elements per rank), dtype (float32 | float64),
 *           op (sum | max | min), iters
 *   inputs: none; rank r's send buffer is (count) of dtype, element i being
 *           kl__allreduce_input(i, r) (kl_allreduce.h), so the result is exact
 *   outputs: time_us (1) float64, the mean time of one all-reduce;
 *            algbw_gbps (1) and busbw_gbps (1) float64 (nccl-tests' figures);
 *            wrong (1) int32, the elements of all ranks' receive buffers that
 *            differ from the exact value after an untimed first pass
 * One all-reduce, out of place from send to recv (so every iteration reduces
 * the same data): reduce-scatter, where rank r reduces its segment of every
 * rank's send buffer in rank order into its own recv; a barrier; all-gather,
 * where rank r copies each other segment s from rank s's recv; a barrier.
 * Each rank reads its segment n times and copies n-1 segments: the traffic of
 * a direct (one-step) reduce-scatter + all-gather, which on shared memory
 * beats a ring's n-1 steps with a barrier each.
 * Ranks are pthreads started here, not through kl__parallel: ranks wait on
 * one another at barriers, so all must run at once (kl__parallel runs a share
 * whose thread did not start later, on the caller, which would deadlock).
 * Across nodes (args->dist): each local rank is a thread with its own
 * communicator (kl_comm, Gloo over TCP) as global rank node_rank * ranks +
 * local rank; the same inputs by global rank, the same untimed check, the
 * figures with the world size; `wrong` is summed over the world, and only
 * node_rank 0 returns outputs (the others return none). */
#include "kl_cpu.h"
#include "kl_allreduce.h"
#include "kl_comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Elements reduced at a time: the output block stays in L1 while each
 * rank's input streams through it. */
#define AR_BLOCK 2048

static const char *const dtypes[] = {"float32", "float64", NULL};
static const char *const ops[] = {"sum", "max", "min", NULL};

static const kl_param_spec params[] = {
    {.name = "count", .type = KL_PARAM_INT, .min = 1, .max = (double)((int64_t)1 << 26), .def = 1 << 20,
     .doc = "elements per rank (count * ranks <= 268435456)"},
    {.name = "dtype", .type = KL_PARAM_ENUM, .choices = dtypes, .def_choice = 0,
     .doc = "element type: float32 or float64"},
    {.name = "op", .type = KL_PARAM_ENUM, .choices = ops, .def_choice = KL_ALLREDUCE_SUM,
     .doc = "reduction: sum, max or min"},
    {.name = "iters", .type = KL_PARAM_INT, .min = 1, .max = 1000, .def = 20,
     .doc = "timed all-reduces; time_us is their mean"},
};

static const kl_io_spec outputs[] = {
    {.name = "time_us", .dtype = KL_F64, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "mean microseconds per all-reduce over the timed iterations"},
    {.name = "algbw_gbps", .dtype = KL_F64, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "algorithm bandwidth, count * dtype size / time, in GB/s"},
    {.name = "busbw_gbps", .dtype = KL_F64, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "bus bandwidth, algbw * 2(ranks-1)/ranks, in GB/s (0 for one rank)"},
    {.name = "wrong", .dtype = KL_I32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "elements, over all ranks, that differ from the exact result (0 when correct)"},
};

static int ranks_of(const kl_args *args)
{
    return args->ranks > 0 ? args->ranks : 1;
}

static int allreduce_check(const kl_args *args, kl_err *err)
{
    const int n = ranks_of(args);
    const int64_t count = (int64_t)args->params[KL_ALLREDUCE_COUNT].num;
    if (args->dist && (int64_t)args->dist->nodes * n > KL_ALLREDUCE_MAX_RANKS) {
        kl_err_set(err, "resources.nodes",
                   "allreduce takes at most %d ranks in all; %d nodes x %d ranks (resources.gpus) asked",
                   KL_ALLREDUCE_MAX_RANKS, args->dist->nodes, n);
        return KL_EINVAL;
    }
    if (n > KL_ALLREDUCE_MAX_RANKS) {
        kl_err_set(err, "resources.gpus", "allreduce takes at most %d ranks (resources.gpus); %d asked",
                   KL_ALLREDUCE_MAX_RANKS, n);
        return KL_EINVAL;
    }
    if (count > KL_ALLREDUCE_MAX_TOTAL / n) {
        kl_err_set(err, "params.count",
                   "params.count is %lld; with %d ranks allreduce allows at most %lld (count * ranks <= %lld)",
                   (long long)count, n, (long long)(KL_ALLREDUCE_MAX_TOTAL / n), (long long)KL_ALLREDUCE_MAX_TOTAL);
        return KL_EINVAL;
    }
    return 0;
}

/* A barrier that also decides, once for everyone, whether the run goes on:
 * the last thread to arrive polls cancel, and every thread returns the same
 * answer, so no rank leaves the loop while the others wait for it. */
typedef struct ar_barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting;
    unsigned gen;
    int stop; /* once raised, stays raised */
} ar_barrier;

typedef struct ar_run {
    const kl_args *args;
    int n;
    int64_t count;
    kl_dtype dtype;
    kl_allreduce_op op;
    int iters;
    void **send, **recv;  /* [n] buffers of count elements, each owned by its rank */
    int64_t *wrong;       /* [n] mismatches in each rank's recv */
    double expected[KL_ALLREDUCE_PERIOD];
    int failed_rank;      /* first rank that could not allocate, or -1 */
    int iters_done;       /* rank 0's count */
    double seconds;       /* the timed loop, measured by rank 0 */
    ar_barrier bar;
} ar_run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 1 when the run must stop (cancelled, or a rank failed), else 0. */
static int ar_wait(ar_run *run)
{
    ar_barrier *b = &run->bar;
    pthread_mutex_lock(&b->mu);
    if (++b->waiting == b->n) {
        b->waiting = 0;
        b->gen++;
        if (kl__canceled(run->args) || __atomic_load_n(&run->failed_rank, __ATOMIC_RELAXED) >= 0)
            b->stop = 1;
        pthread_cond_broadcast(&b->cv);
    } else {
        unsigned gen = b->gen;
        while (gen == b->gen)
            pthread_cond_wait(&b->cv, &b->mu);
    }
    int stop = b->stop; /* no later barrier can complete before this thread reaches it */
    pthread_mutex_unlock(&b->mu);
    return stop;
}

/* out[i] = op(out[i], in[i]). Fixed blocks of 8 vectorize at -O2, where an
 * open loop does not (see saxpy.c); max and min compile to maxps/minps. */
#define AR_COMBINE(T, name)                                                                    \
    static void name(T *restrict out, const T *restrict in, int64_t len, kl_allreduce_op op)  \
    {                                                                                          \
        int64_t i = 0;                                                                         \
        if (op == KL_ALLREDUCE_SUM) {                                                          \
            for (; i + 8 <= len; i += 8)                                                       \
                for (int l = 0; l < 8; l++)                                                    \
                    out[i + l] += in[i + l];                                                   \
            for (; i < len; i++)                                                               \
                out[i] += in[i];                                                               \
        } else if (op == KL_ALLREDUCE_MAX) {                                                   \
            for (; i + 8 <= len; i += 8)                                                       \
                for (int l = 0; l < 8; l++)                                                    \
                    out[i + l] = in[i + l] > out[i + l] ? in[i + l] : out[i + l];              \
            for (; i < len; i++)                                                               \
                out[i] = in[i] > out[i] ? in[i] : out[i];                                      \
        } else {                                                                               \
            for (; i + 8 <= len; i += 8)                                                       \
                for (int l = 0; l < 8; l++)                                                    \
                    out[i + l] = in[i + l] < out[i + l] ? in[i + l] : out[i + l];              \
            for (; i < len; i++)                                                               \
                out[i] = in[i] < out[i] ? in[i] : out[i];                                      \
        }                                                                                      \
    }
AR_COMBINE(float, combine_f32)
AR_COMBINE(double, combine_f64)

/* Fills rank r's send buffer; the inputs repeat every PERIOD elements. */
#define AR_FILL(T, name)                                                                       \
    static void name(T *restrict x, int64_t count, int r)                                      \
    {                                                                                          \
        T v[KL_ALLREDUCE_PERIOD];                                                              \
        for (int j = 0; j < KL_ALLREDUCE_PERIOD; j++)                                          \
            v[j] = (T)kl__allreduce_input(j, r);                                               \
        for (int64_t i = 0, j = 0; i < count; i++, j = j + 1 == KL_ALLREDUCE_PERIOD ? 0 : j + 1) \
            x[i] = v[j];                                                                       \
    }
AR_FILL(float, fill_f32)
AR_FILL(double, fill_f64)

/* Elements of x that differ from the exact result (a NaN counts). */
#define AR_COUNT_WRONG(T, name)                                                                \
    static int64_t name(const T *restrict x, int64_t count, const double *expected)            \
    {                                                                                          \
        T e[KL_ALLREDUCE_PERIOD];                                                              \
        int64_t bad = 0;                                                                       \
        for (int j = 0; j < KL_ALLREDUCE_PERIOD; j++)                                          \
            e[j] = (T)expected[j];                                                             \
        for (int64_t i = 0, j = 0; i < count; i++, j = j + 1 == KL_ALLREDUCE_PERIOD ? 0 : j + 1) \
            bad += !(x[i] == e[j]);                                                            \
        return bad;                                                                            \
    }
AR_COUNT_WRONG(float, count_wrong_f32)
AR_COUNT_WRONG(double, count_wrong_f64)

/* One all-reduce as rank r; 1 when the run must stop. */
static int allreduce_once(ar_run *run, int r)
{
    const int n = run->n;
    const size_t es = kl_dtype_size(run->dtype);
    const int64_t lo = run->count * r / n, hi = run->count * (r + 1) / n;
    char *out = (char *)run->recv[r];
    for (int64_t c = lo; c < hi; c += AR_BLOCK) {
        const int64_t len = c + AR_BLOCK < hi ? AR_BLOCK : hi - c;
        memcpy(out + c * es, (const char *)run->send[0] + c * es, (size_t)len * es);
        for (int k = 1; k < n; k++) {
            const char *in = (const char *)run->send[k] + c * es;
            if (run->dtype == KL_F32)
                combine_f32((float *)(void *)(out + c * es), (const float *)(const void *)in, len, run->op);
            else
                combine_f64((double *)(void *)(out + c * es), (const double *)(const void *)in, len, run->op);
        }
    }
    if (ar_wait(run))
        return 1;
    for (int s = 1; s < n; s++) { /* from the next rank on, so ranks spread their reads */
        const int src = (r + s) % n;
        const int64_t slo = run->count * src / n, shi = run->count * (src + 1) / n;
        memcpy(out + slo * es, (const char *)run->recv[src] + slo * es, (size_t)(shi - slo) * es);
    }
    return ar_wait(run);
}

/* What rank r does, from allocating its buffers to the end of the timed
 * loop. Every rank passes the same barriers in the same order until the
 * one where they stop together. */
static void rank_run(ar_run *run, int r)
{
    const size_t bytes = (size_t)run->count * kl_dtype_size(run->dtype);
    run->send[r] = malloc(bytes);
    run->recv[r] = malloc(bytes);
    if (!run->send[r] || !run->recv[r]) {
        int none = -1;
        __atomic_compare_exchange_n(&run->failed_rank, &none, r, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    } else {
        if (run->dtype == KL_F32)
            fill_f32(run->send[r], run->count, r);
        else
            fill_f64(run->send[r], run->count, r);
        /* All-ones bytes are a NaN in either dtype: an element the
         * all-reduce fails to write counts as wrong, whatever malloc
         * handed back. */
        memset(run->recv[r], 0xff, bytes);
    }
    if (ar_wait(run))
        return;
    /* Untimed pass: correctness, and the warm-up. */
    if (allreduce_once(run, r))
        return;
    run->wrong[r] = run->dtype == KL_F32 ? count_wrong_f32(run->recv[r], run->count, run->expected)
                                         : count_wrong_f64(run->recv[r], run->count, run->expected);
    if (ar_wait(run))
        return;
    double t0 = now_s();
    for (int it = 0; it < run->iters; it++) {
        if (allreduce_once(run, r))
            return;
        if (r == 0)
            run->iters_done = it + 1;
    }
    if (r == 0)
        run->seconds = now_s() - t0;
}

typedef struct ar_thread {
    ar_run *run;
    int rank;
    kl_cputime *acc;   /* the run's CPU-time account (its starter's) */
} ar_thread;

static void *rank_main(void *p)
{
    ar_thread *t = p;
    kl__cputime_enter(t->acc);
    rank_run(t->run, t->rank);
    kl__cputime_leave();
    return NULL;
}

/* Allocates a [1] output of dtype and returns its data, or NULL. */
static void *scalar_out(kl_tensor *t, kl_dtype dtype)
{
    const int64_t one = 1;
    return kl_tensor_alloc(t, dtype, 1, &one) < 0 ? NULL : t->data;
}

/* One local rank of a multi-node run: its communicator, its buffer and
 * what it measured. */
typedef struct ard_rank {
    const kl_args *args;
    struct ard_run *run;
    int global;
    kl_comm *comm;
    void *buf;
    int rc;
    kl_err err;
    int64_t wrong;        /* over the world, once reduced */
    double seconds;       /* the timed loop */
    double meet_s;        /* opening the communicator: the rendezvous */
    kl_cputime *acc;
    pthread_t tid;
} ard_rank;

typedef struct ard_run {
    int64_t count;
    kl_dtype dtype;
    kl_allreduce_op op;
    int iters, world, local;
    double expected[KL_ALLREDUCE_PERIOD];
    ard_rank *ranks;
    int aborted;          /* a local rank failed: the others stop too */
} ard_run;

/* Fails the other local ranks' communicators, so that none waits for a
 * rank of this node that has stopped (the peers on other nodes fail too).
 * A rank whose communicator is not published yet sees `aborted` once it
 * publishes (kl__comm_publish). */
static void ard_abort_all(ard_run *run)
{
    __atomic_store_n(&run->aborted, 1, __ATOMIC_SEQ_CST);
    for (int l = 0; l < run->local; l++)
        kl_comm_abort(__atomic_load_n(&run->ranks[l].comm, __ATOMIC_SEQ_CST));
}

static int ard_steps(ard_rank *me)
{
    ard_run *run = me->run;
    const kl_args *args = me->args;
    kl_comm *c;
    double t_meet = now_s();
    int rc = kl_comm_open(args->dist, me->global, "allreduce", args->cancel, &c, &me->err);
    me->meet_s = now_s() - t_meet;
    if (rc < 0)
        return rc;
    kl__comm_publish(&me->comm, c, &run->aborted);
    const size_t bytes = (size_t)run->count * kl_dtype_size(run->dtype);
    if (!(me->buf = malloc(bytes))) {
        kl_err_set(&me->err, NULL, "allreduce: rank %d cannot allocate %zu bytes", me->global, bytes);
        return KL_ENOMEM;
    }
    /* Untimed pass: correctness, and the warm-up. */
    if (run->dtype == KL_F32)
        fill_f32(me->buf, run->count, me->global);
    else
        fill_f64(me->buf, run->count, me->global);
    if ((rc = kl_comm_allreduce(c, me->buf, run->count, run->dtype, run->op, &me->err)) < 0)
        return rc;
    double wrong = (double)(run->dtype == KL_F32 ? count_wrong_f32(me->buf, run->count, run->expected)
                                                 : count_wrong_f64(me->buf, run->count, run->expected));
    if ((rc = kl_comm_allreduce(c, &wrong, 1, KL_F64, KL_ALLREDUCE_SUM, &me->err)) < 0 ||
        (rc = kl_comm_barrier(c, &me->err)) < 0)
        return rc;
    me->wrong = (int64_t)wrong;
    /* In place, so the values change from one iteration to the next: what
     * is timed is the all-reduce alone, with no copy between. */
    double t0 = now_s();
    for (int it = 0; it < run->iters; it++)
        if ((rc = kl_comm_allreduce(c, me->buf, run->count, run->dtype, run->op, &me->err)) < 0)
            return rc;
    me->seconds = now_s() - t0;
    return 0;
}

static void *ard_main(void *p)
{
    ard_rank *me = p;
    kl__cputime_enter(me->acc);
    me->rc = ard_steps(me);
    if (me->rc < 0)
        ard_abort_all(me->run);
    kl__cputime_leave();
    return NULL;
}

/* The error of the run: cancelled when its cancel flag is up (a rank may
 * have failed first on a peer that stopped for the same cancel); else the
 * first rank's that is not a consequence of another's (a cancel or a
 * closed peer), else the first. */
static int ard_result(ard_run *run, const kl_args *args, kl_err *err)
{
    int pick = -1;
    for (int l = 0; l < run->local; l++) {
        if (run->ranks[l].rc != 0 && kl__canceled(args)) {
            kl_err_set(err, NULL, "allreduce: cancelled");
            return KL_ECANCELED;
        }
    }
    for (int l = 0; l < run->local; l++) {
        if (run->ranks[l].rc == 0)
            continue;
        if (pick < 0 || (run->ranks[pick].rc == KL_ECANCELED && run->ranks[l].rc != KL_ECANCELED))
            pick = l;
    }
    if (pick < 0)
        return 0;
    *err = run->ranks[pick].err;
    return run->ranks[pick].rc;
}

static int allreduce_run_dist(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_dist *d = args->dist;
    ard_run run = {
        .count = (int64_t)args->params[KL_ALLREDUCE_COUNT].num,
        .dtype = args->params[KL_ALLREDUCE_DTYPE].choice == 1 ? KL_F64 : KL_F32,
        .op = (kl_allreduce_op)args->params[KL_ALLREDUCE_OP].choice,
        .iters = (int)args->params[KL_ALLREDUCE_ITERS].num,
        .local = ranks_of(args),
        .world = d->nodes * ranks_of(args),
    };
    run.ranks = calloc((size_t)run.local, sizeof *run.ranks);
    if (!run.ranks) {
        kl_err_set(err, NULL, "allreduce: out of memory");
        return KL_ENOMEM;
    }
    kl__allreduce_expected(run.op, run.world, run.expected);
    kl_info_set(args->info, "ranks", "%d", run.world);
    kl_info_set(args->info, "nodes", "%d", d->nodes);
    kl_info_set(args->info, "transport", "Gloo over TCP, one thread per rank");
    int started = 0;
    for (; started < run.local; started++) {
        ard_rank *r = &run.ranks[started];
        *r = (ard_rank){.args = args, .run = &run, .global = d->node_rank * run.local + started,
                        .acc = kl__cputime_current()};
        if (pthread_create(&r->tid, NULL, ard_main, r) != 0)
            break;
    }
    if (started < run.local) {
        ard_abort_all(&run);
        kl_err_set(&run.ranks[started].err, NULL, "allreduce: cannot start the thread of local rank %d", started);
        run.ranks[started].rc = KL_EBACKEND;
    }
    for (int l = 0; l < started; l++)
        pthread_join(run.ranks[l].tid, NULL);
    int rc = ard_result(&run, args, err);
    if (rc == 0 && d->node_rank == 0) {
        const ard_rank *r0 = &run.ranks[0];
        double *time_us = scalar_out(&outs[0], KL_F64), *algbw = scalar_out(&outs[1], KL_F64);
        double *busbw = scalar_out(&outs[2], KL_F64);
        int32_t *wrong = scalar_out(&outs[3], KL_I32);
        if (!time_us || !algbw || !busbw || !wrong) {
            kl_err_set(err, NULL, "allreduce: out of memory");
            rc = KL_ENOMEM;
        } else {
            const double t = r0->seconds / run.iters;
            *time_us = t * 1e6;
            kl__allreduce_bw((double)run.count * (double)kl_dtype_size(run.dtype), run.world, t, algbw, busbw);
            *wrong = r0->wrong > INT32_MAX ? INT32_MAX : (int32_t)r0->wrong;
        }
        /* How long global rank 0 took to meet the world: the store's
         * exchange through the gateway, and the TCP mesh. */
        kl_info_set(args->info, "rendezvous_ms", "%.1f", r0->meet_s * 1e3);
    }
    for (int l = 0; l < run.local; l++) {
        kl_comm_close(run.ranks[l].comm);
        free(run.ranks[l].buf);
    }
    free(run.ranks);
    return rc;
}

static int allreduce_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    if (args->dist)
        return allreduce_run_dist(args, outs, err);
    const int n = ranks_of(args);
    ar_run run = {
        .args = args,
        .n = n,
        .count = (int64_t)args->params[KL_ALLREDUCE_COUNT].num,
        .dtype = args->params[KL_ALLREDUCE_DTYPE].choice == 1 ? KL_F64 : KL_F32,
        .op = (kl_allreduce_op)args->params[KL_ALLREDUCE_OP].choice,
        .iters = (int)args->params[KL_ALLREDUCE_ITERS].num,
        .failed_rank = -1,
        .bar = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .n = n},
    };
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    ar_thread *th = calloc((size_t)n, sizeof *th);
    run.send = calloc((size_t)n, sizeof *run.send);
    run.recv = calloc((size_t)n, sizeof *run.recv);
    run.wrong = calloc((size_t)n, sizeof *run.wrong);
    double *time_us = scalar_out(&outs[0], KL_F64), *algbw = scalar_out(&outs[1], KL_F64);
    double *busbw = scalar_out(&outs[2], KL_F64);
    int32_t *wrong = scalar_out(&outs[3], KL_I32);
    int rc = 0, started = 1;
    if (!tid || !th || !run.send || !run.recv || !run.wrong || !time_us || !algbw || !busbw || !wrong) {
        kl_err_set(err, NULL, "allreduce: out of memory");
        rc = KL_ENOMEM;
        goto done;
    }
    kl__allreduce_expected(run.op, n, run.expected);
    kl_info_set(args->info, "ranks", "%d", n);
    kl_info_set(args->info, "transport", "shared memory, one thread per rank");

    for (; started < n; started++) {
        th[started] = (ar_thread){.run = &run, .rank = started, .acc = kl__cputime_current()};
        if (pthread_create(&tid[started], NULL, rank_main, &th[started]) != 0) {
            /* Ranks 0..started-1 run and stop at their first barrier; the
             * caller (rank 0) has not reached it, so none is released early. */
            pthread_mutex_lock(&run.bar.mu);
            run.bar.n = started;
            run.bar.stop = 1;
            pthread_mutex_unlock(&run.bar.mu);
            break;
        }
    }
    rank_run(&run, 0);
    for (int r = 1; r < started; r++)
        pthread_join(tid[r], NULL);

    if (started < n) {
        kl_err_set(err, NULL, "allreduce: cannot start the thread of rank %d of %d", started, n);
        rc = KL_EBACKEND;
    } else if (run.failed_rank >= 0) {
        kl_err_set(err, NULL, "allreduce: rank %d cannot allocate 2 x %lld bytes", run.failed_rank,
                   (long long)(run.count * (int64_t)kl_dtype_size(run.dtype)));
        rc = KL_ENOMEM;
    } else if (run.iters_done < run.iters) {
        kl_err_set(err, NULL, "allreduce: cancelled after %d of %d timed iterations", run.iters_done, run.iters);
        rc = KL_ECANCELED;
    } else {
        int64_t bad = 0;
        for (int r = 0; r < n; r++)
            bad += run.wrong[r];
        const double t = run.seconds / run.iters;
        *time_us = t * 1e6;
        kl__allreduce_bw((double)run.count * (double)kl_dtype_size(run.dtype), n, t, algbw, busbw);
        *wrong = bad > INT32_MAX ? INT32_MAX : (int32_t)bad;
    }
done:
    for (int r = 0; run.send && run.recv && r < n; r++) {
        free(run.send[r]);
        free(run.recv[r]);
    }
    free(run.send);
    free(run.recv);
    free(run.wrong);
    free(th);
    free(tid);
    return rc; /* on failure kl_run_cpu frees the outputs */
}

const kl_kernel kl__allreduce = {
    .name = "allreduce",
    .doc = "all-reduce (sum, max, min) among resources.nodes x resources.gpus ranks, checked exactly and timed "
           "as nccl-tests does: NCCL across GPUs on CUDA, one thread per rank on CPU (Gloo over TCP between "
           "nodes)",
    .params = params,
    .nparams = 4,
    .inputs = NULL,
    .ninputs = 0,
    .outputs = outputs,
    .noutputs = 4,
    .check = allreduce_check,
    .run_cpu = allreduce_run_cpu,
    .max_nodes = 64,
};
