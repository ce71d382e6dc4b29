/* train_mlp.c — the train_mlp kernel's catalog entry and CPU reference:
 * data-parallel SGD with momentum on a one-hidden-layer perceptron
 * (ReLU, softmax cross-entropy), ranks = resources.gpus, threads as ranks
 * (see thread_per_rank for when they take turns instead).
 *   params: hidden, classes, epochs, batch_size, lr, momentum, seed
 *   inputs: x is (n,d) float32, y is (n) int32 labels in [0, classes)
 *   outputs: w1 (d,hidden), b1 (hidden), w2 (hidden,classes), b2 (classes),
 *            loss (epochs) float32: mean cross-entropy of the epoch's steps,
 *            accuracy (1) float32: on the training set after training
 * Rank r of a world of W ranks (resources.nodes x resources.gpus) owns the
 * contiguous shard [r*n/W, (r+1)*n/W) of the rows and walks it in order (no
 * shuffling), ceil(batch_size / W) rows a step (kl__mlp_step_rows); it
 * computes the gradient of its rows' summed loss; the gradients are summed
 * over the world (in rank order on one node; Gloo's all-reduce across
 * nodes), divided by the step's rows in all, and every rank applies
 * v = momentum*v + g, w -= lr*v. With one rank: batches of batch_size over
 * all rows, the last one shorter. Weights start from kl__mlp_init(seed),
 * computed on the host for both backends. Across nodes (args->dist) x and y
 * hold only the node's rows, each local rank is a thread with its own
 * communicator and weights, loss and accuracy are summed over the world,
 * and only node_rank 0 returns outputs (rank 0's weights). */
#include "kl_cpu.h"
#include "kl_comm.h"
#include "mlp_math.h"

#include <pthread.h>

#include <float.h>
#include <stdlib.h>
#include <string.h>

static const kl_param_spec params[] = {
    {.name = "hidden", .type = KL_PARAM_INT, .min = 1, .max = 4096, .def = 64, .doc = "units of the hidden layer"},
    {.name = "classes", .type = KL_PARAM_INT, .required = 1, .min = 2, .max = 1024,
     .doc = "number of classes; labels in y are 0..classes-1"},
    {.name = "epochs", .type = KL_PARAM_INT, .min = 1, .max = 1000, .def = 10, .doc = "passes over the data"},
    {.name = "batch_size", .type = KL_PARAM_INT, .min = 1, .max = (double)KL_MAX_ELEMS, .def = 32,
     .doc = "rows per step over all ranks (each takes ceil(batch_size / ranks) of its own shard); at most n"},
    {.name = "lr", .type = KL_PARAM_NUMBER, .min = 0, .max = 100, .def = 0.01, .doc = "learning rate (> 0)"},
    {.name = "momentum", .type = KL_PARAM_NUMBER, .min = 0, .max = 1, .def = 0.9,
     .doc = "SGD momentum, 0 <= momentum < 1"},
    {.name = "seed", .type = KL_PARAM_INT, .min = 0, .max = 9007199254740991.0, .def = 0,
     .doc = "seed of the initial weights"},
};

static const kl_io_spec inputs[] = {
    {.name = "x", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[n,d]", .max_elems = KL_MAX_ELEMS,
     .doc = "training samples, one per row", .shard = 1},
    {.name = "y", .dtype = KL_I32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[n]", .max_elems = KL_MAX_ELEMS,
     .doc = "class of each row, 0..classes-1", .shard = 1},
};

static const kl_io_spec outputs[] = {
    {.name = "w1", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[d,hidden]",
     .max_elems = KL_MLP_MAX_W1, .doc = "input-to-hidden weights"},
    {.name = "b1", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[hidden]", .max_elems = 4096,
     .doc = "hidden bias"},
    {.name = "w2", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[hidden,classes]",
     .max_elems = 4096 * 1024, .doc = "hidden-to-output weights"},
    {.name = "b2", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[classes]", .max_elems = 1024,
     .doc = "output bias"},
    {.name = "loss", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[epochs]", .max_elems = 1000,
     .doc = "mean cross-entropy of each epoch (each row at the weights of its step)"},
    {.name = "accuracy", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "fraction of the training rows classified right after training"},
};

static int train_mlp_check(const kl_args *args, kl_err *err)
{
    const kl_tensor *x = args->inputs[KL_MLP_X], *y = args->inputs[KL_MLP_Y];
    const long long rows_held = x->shape[0], d = x->shape[1];
    /* Across nodes x holds the node's rows of shard_total. */
    const long long n = args->dist ? (long long)args->dist->shard_total : rows_held;
    const int64_t h = (int64_t)args->params[KL_MLP_HIDDEN].num, c = (int64_t)args->params[KL_MLP_CLASSES].num;
    const int64_t bs = (int64_t)args->params[KL_MLP_BATCH].num;
    const double lr = args->params[KL_MLP_LR].num, mom = args->params[KL_MLP_MOMENTUM].num;
    const int R = kl__mlp_ranks(args);

    if (!(lr > 0)) {
        kl_err_set(err, "params.lr", "params.lr must be a number > 0 and <= 100");
        return KL_EINVAL;
    }
    if (!(mom < 1)) {
        kl_err_set(err, "params.momentum", "params.momentum must be a number >= 0 and < 1");
        return KL_EINVAL;
    }
    if (R > KL_MLP_MAX_RANKS) {
        kl_err_set(err, "resources.gpus", "train_mlp runs on at most %d ranks; resources.gpus is %d",
                   KL_MLP_MAX_RANKS, R);
        return KL_EINVAL;
    }
    if (n < 1 || d < 1 || (args->dist && rows_held < 1)) {
        kl_err_set(err, "inputs.x", "inputs.x has shape [%lld,%lld]; train_mlp needs at least one row and column",
                   n, d);
        return KL_EINVAL;
    }
    if (args->dist) {
        const kl_dist *dd = args->dist;
        const int W = dd->nodes * R;
        int64_t lo, hi, unused;
        kl_shard_rows(n, W, dd->node_rank * R, &lo, &unused);
        kl_shard_rows(n, W, dd->node_rank * R + R - 1, &unused, &hi);
        if (dd->shard_lo != lo || rows_held != hi - lo) {
            kl_err_set(err, "inputs.x",
                       "inputs.x holds rows [%lld, %lld) of %lld; node %d of %d x %d ranks owns [%lld, %lld)",
                       (long long)dd->shard_lo, (long long)dd->shard_lo + rows_held, n, dd->node_rank, dd->nodes, R,
                       (long long)lo, (long long)hi);
            return KL_EINVAL;
        }
    }
    if (y->shape[0] != rows_held) {
        kl_err_set(err, "inputs.y", "inputs.y has shape [%lld]; train_mlp needs [n] with n = %lld from inputs.x",
                   (long long)y->shape[0], rows_held);
        return KL_EINVAL;
    }
    if (d * h > KL_MLP_MAX_W1) {
        kl_err_set(err, "inputs.x", "w1 would have d*hidden = %lld*%lld elements (d from inputs.x); the limit is %lld",
                   d, (long long)h, (long long)KL_MLP_MAX_W1);
        return KL_EINVAL;
    }
    if (bs > n) {
        kl_err_set(err, "params.batch_size",
                   "params.batch_size is %lld; it must be between 1 and n = %lld (rows of inputs.x)", (long long)bs, n);
        return KL_EINVAL;
    }
    const int64_t rows = kl__mlp_shard_max(bs, R) * R; /* bs, rounded up to fill every rank */
    if (rows * (2 * h + c) > KL_MLP_MAX_SCRATCH) {
        kl_err_set(err, "params.batch_size",
                   "params.batch_size %lld needs %lld activations (batch_size x (2*hidden + classes)); the limit "
                   "is %lld",
                   (long long)bs, (long long)(rows * (2 * h + c)), (long long)KL_MLP_MAX_SCRATCH);
        return KL_EINVAL;
    }
    return 0;
}

/* One run's state. g[r] is rank r's gradient; w and v are shared and only
 * written between the parallel phases. */
typedef struct mlp_run {
    const kl_args *args;
    kl_mlp_dims m;
    int ranks;
    const float *x;
    const int32_t *y;
    float *w, *v, *g[KL_MLP_MAX_RANKS];
    kl_mlp_scratch s[KL_MLP_MAX_RANKS];
    float *row_loss;          /* (n): each row's loss in the current epoch */
    int64_t lb;               /* rows each rank takes per step */
    int64_t step, batch;      /* the step, and its rows over all ranks */
    float lr, mom;
    int64_t right[KL_MLP_MAX_RANKS];
    int stop;                 /* see kl__stop_seen */
} mlp_run;

static void rank_grad(void *ctx, int r, int nt)
{
    mlp_run *j = ctx;
    int64_t lo;
    (void)nt;
    const int64_t b = kl__mlp_step_rows(j->m.n, j->ranks, r, j->lb, j->step, &lo);
    kl__mlp_grad(&j->m, j->w, j->x + lo * j->m.d, j->y + lo, b, j->g[r], j->row_loss + lo, &j->s[r]);
}

/* All ranks on the calling thread, in rank order. */
static void ranks_in_turn(void *ctx, int t, int nt)
{
    mlp_run *j = ctx;
    (void)t;
    (void)nt;
    for (int r = 0; r < j->ranks; r++)
        rank_grad(ctx, r, j->ranks);
}

/* Whether each rank gets a thread. Where a rank's products are large
 * enough for OpenBLAS to spread them over the cores itself, rank threads
 * would only queue behind one another in its thread pool, so the ranks
 * take turns on the caller instead; the arithmetic is the same. The
 * -DKL_NO_BLAS loops are single-threaded: there, always a thread a rank. */
static int thread_per_rank(const kl_mlp_dims *m, int64_t rows)
{
#ifndef KL_NO_BLAS
    return rows * m->d * m->h < ((int64_t)1 << 20);
#else
    (void)m;
    (void)rows;
    return 1;
#endif
}

/* The update of elements [lo, hi) from the summed gradient sum (the same
 * float arithmetic on one node and across nodes). */
static inline void mlp_step(float *restrict w, float *restrict v, float sum, int64_t i, float rows, float lr,
                            float mom)
{
    const float g = sum / rows;
    v[i] = mom * v[i] + g;
    w[i] = w[i] - lr * v[i];
}

/* The all-reduce and the update, on slice t of nt of the parameters: each
 * element sums the ranks in rank order, so the split changes nothing. */
static void update_slice(void *ctx, int t, int nt)
{
    mlp_run *j = ctx;
    const int64_t lo = j->m.size * t / nt, hi = j->m.size * (t + 1) / nt;
    const float rows = (float)j->batch;
    for (int64_t i = lo; i < hi; i++) {
        float sum = j->g[0][i];
        for (int r = 1; r < j->ranks; r++)
            sum += j->g[r][i];
        mlp_step(j->w, j->v, sum, i, rows, j->lr, j->mom);
    }
}

/* Rank r classifies chunks r, r+R, r+2R... of s[r].rows rows each. */
static void rank_correct(void *ctx, int r, int nt)
{
    mlp_run *j = ctx;
    const int64_t chunk = j->s[r].rows;
    (void)nt;
    j->right[r] = 0;
    for (int64_t lo = (int64_t)r * chunk; lo < j->m.n; lo += (int64_t)j->ranks * chunk) {
        if (kl__stop_seen(j->args, &j->stop))
            return;
        int64_t b = lo + chunk < j->m.n ? chunk : j->m.n - lo;
        j->right[r] += kl__mlp_correct(&j->m, j->w, j->x + lo * j->m.d, j->y + lo, b, &j->s[r]);
    }
}

static int alloc_outputs(const kl_mlp_dims *m, int64_t epochs, kl_tensor *outs)
{
    const int64_t w1[2] = {m->d, m->h}, b1[1] = {m->h}, w2[2] = {m->h, m->c}, b2[1] = {m->c};
    const int64_t loss[1] = {epochs}, acc[1] = {1};
    if (kl_tensor_alloc(&outs[KL_MLP_OUT_W1], KL_F32, 2, w1) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_B1], KL_F32, 1, b1) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_W2], KL_F32, 2, w2) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_B2], KL_F32, 1, b2) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_LOSS], KL_F32, 1, loss) < 0 ||
        kl_tensor_alloc(&outs[KL_MLP_OUT_ACC], KL_F32, 1, acc) < 0)
        return KL_ENOMEM;
    return 0;
}

static void copy_weights(const kl_mlp_dims *m, const float *w, kl_tensor *outs)
{
    memcpy(outs[KL_MLP_OUT_W1].data, w + m->w1, sizeof(float) * (size_t)(m->d * m->h));
    memcpy(outs[KL_MLP_OUT_B1].data, w + m->b1, sizeof(float) * (size_t)m->h);
    memcpy(outs[KL_MLP_OUT_W2].data, w + m->w2, sizeof(float) * (size_t)(m->h * m->c));
    memcpy(outs[KL_MLP_OUT_B2].data, w + m->b2, sizeof(float) * (size_t)m->c);
}

/* ---- across nodes: one thread per local rank, each its own communicator,
 * weights and velocities (the same on every rank after each all-reduce) ---- */

typedef struct mlpd_run {
    const kl_args *args;
    kl_mlp_dims m;            /* n: the rows of the whole job */
    int world, local;
    int64_t node_lo;          /* the global row of x's first row */
    const float *x;
    const int32_t *y;
    int64_t lb, steps, epochs;
    float lr, mom;
    float *row_loss;          /* the node's rows */
    float *loss;              /* (epochs), filled by local rank 0 */
    double accuracy;
    const float *w0;          /* local rank 0's weights, once done */
    struct mlpd_rank *ranks;
    int aborted;              /* a local rank failed: the others stop too */
} mlpd_run;

typedef struct mlpd_rank {
    mlpd_run *run;
    int global;
    kl_comm *comm;
    float *w, *v, *g;
    kl_mlp_scratch s;
    int rc;
    kl_err err;
    kl_cputime *acc;
    pthread_t tid;
} mlpd_rank;

/* Fails every local rank's communicator; one still opening sees
 * `aborted` when it publishes its own (kl__comm_publish). */
static void mlpd_abort_all(mlpd_run *run)
{
    __atomic_store_n(&run->aborted, 1, __ATOMIC_SEQ_CST);
    for (int l = 0; l < run->local; l++)
        kl_comm_abort(__atomic_load_n(&run->ranks[l].comm, __ATOMIC_SEQ_CST));
}

/* The world's sum of v, a count or a loss: each rank's part, all-reduced. */
static int mlpd_sum(mlpd_rank *me, double *v)
{
    return kl_comm_allreduce(me->comm, v, 1, KL_F64, KL_ALLREDUCE_SUM, &me->err);
}

/* Rows of this rank's shard that the trained net classifies right. */
static int64_t mlpd_correct(mlpd_rank *me)
{
    const mlpd_run *run = me->run;
    int64_t lo, hi, right = 0;
    kl_shard_rows(run->m.n, run->world, me->global, &lo, &hi);
    for (int64_t r = lo; r < hi; r += me->s.rows) {
        const int64_t b = r + me->s.rows <= hi ? me->s.rows : hi - r;
        const int64_t at = r - run->node_lo;
        right += kl__mlp_correct(&run->m, me->w, run->x + at * run->m.d, run->y + at, b, &me->s);
    }
    return right;
}

static int mlpd_epoch(mlpd_rank *me, int64_t e)
{
    mlpd_run *run = me->run;
    const kl_mlp_dims *m = &run->m;
    int rc;
    for (int64_t s = 0; s < run->steps; s++) {
        int64_t lo;
        const int64_t b = kl__mlp_step_rows(m->n, run->world, me->global, run->lb, s, &lo);
        const int64_t at = lo - run->node_lo;
        kl__mlp_grad(m, me->w, run->x + at * m->d, run->y + at, b, me->g, run->row_loss + at, &me->s);
        if ((rc = kl_comm_allreduce(me->comm, me->g, m->size, KL_F32, KL_ALLREDUCE_SUM, &me->err)) < 0)
            return rc;
        const float rows = (float)kl__mlp_step_total(m->n, run->world, run->lb, s);
        for (int64_t i = 0; i < m->size; i++)
            mlp_step(me->w, me->v, me->g[i], i, rows, run->lr, run->mom);
    }
    int64_t lo, hi;
    kl_shard_rows(m->n, run->world, me->global, &lo, &hi);
    double sum = 0;
    for (int64_t i = lo; i < hi; i++)
        sum += run->row_loss[i - run->node_lo];
    if ((rc = mlpd_sum(me, &sum)) < 0)
        return rc;
    if (me == &run->ranks[0]) {
        run->loss[e] = (float)(sum / (double)m->n);
        if (e + 1 < run->epochs)
            kl__mlp_progress(run->args, e + 1, run->epochs, run->loss[e], -1);
    }
    return 0;
}

static int mlpd_train(mlpd_rank *me)
{
    mlpd_run *run = me->run;
    const kl_mlp_dims *m = &run->m;
    kl_comm *c;
    int rc = kl_comm_open(run->args->dist, me->global, "train_mlp", run->args->cancel, &c, &me->err);
    if (rc < 0)
        return rc;
    kl__comm_publish(&me->comm, c, &run->aborted);
    me->w = malloc(sizeof(float) * (size_t)m->size);
    me->v = calloc((size_t)m->size, sizeof(float));
    me->g = malloc(sizeof(float) * (size_t)m->size);
    if (!me->w || !me->v || !me->g || kl__mlp_scratch_alloc(&me->s, m, run->lb) < 0) {
        kl_err_set(&me->err, NULL, "train_mlp: cannot allocate the weights and activations (%lld parameters)",
                   (long long)m->size);
        return KL_ENOMEM;
    }
    kl__mlp_init(m, (uint64_t)run->args->params[KL_MLP_SEED].num, me->w);
    for (int64_t e = 0; e < run->epochs; e++)
        if ((rc = mlpd_epoch(me, e)) < 0)
            return rc;
    double right = (double)mlpd_correct(me);
    if ((rc = mlpd_sum(me, &right)) < 0)
        return rc;
    if (me == &run->ranks[0]) {
        run->accuracy = right / (double)m->n;
        kl__mlp_progress(run->args, run->epochs, run->epochs, run->loss[run->epochs - 1], run->accuracy);
    }
    return 0;
}

static void *mlpd_main(void *p)
{
    mlpd_rank *me = p;
    kl__cputime_enter(me->acc);
    me->rc = mlpd_train(me);
    if (me->rc < 0)
        mlpd_abort_all(me->run);
    kl__cputime_leave();
    return NULL;
}

/* The run's error: cancelled when its cancel flag is up; else the first
 * rank's that is not a consequence of another's (a cancel), else the
 * first; 0 when all succeeded. */
static int mlpd_result(const mlpd_run *run, kl_err *err)
{
    int pick = -1;
    for (int l = 0; l < run->local; l++)
        if (run->ranks[l].rc < 0 && kl__canceled(run->args)) {
            kl_err_set(err, NULL, "train_mlp: cancelled");
            return KL_ECANCELED;
        }
    for (int l = 0; l < run->local; l++)
        if (run->ranks[l].rc < 0 &&
            (pick < 0 || (run->ranks[pick].rc == KL_ECANCELED && run->ranks[l].rc != KL_ECANCELED)))
            pick = l;
    if (pick < 0)
        return 0;
    *err = run->ranks[pick].err;
    return run->ranks[pick].rc;
}

static int mlpd_start(mlpd_run *run)
{
    const kl_dist *d = run->args->dist;
    int started = 0;
    for (; started < run->local; started++) {
        mlpd_rank *r = &run->ranks[started];
        *r = (mlpd_rank){.run = run, .global = d->node_rank * run->local + started, .acc = kl__cputime_current()};
        if (pthread_create(&r->tid, NULL, mlpd_main, r) != 0)
            break;
    }
    if (started < run->local) {
        mlpd_abort_all(run);
        run->ranks[started].rc = KL_EBACKEND;
        kl_err_set(&run->ranks[started].err, NULL, "train_mlp: cannot start the thread of local rank %d", started);
    }
    for (int l = 0; l < started; l++)
        pthread_join(run->ranks[l].tid, NULL);
    return started;
}

static int train_mlp_run_dist(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *x = args->inputs[KL_MLP_X], *y = args->inputs[KL_MLP_Y];
    const kl_dist *d = args->dist;
    const int64_t bs = (int64_t)args->params[KL_MLP_BATCH].num;
    mlpd_run run = {
        .args = args,
        .m = kl__mlp_dims(d->shard_total, x->shape[1], (int64_t)args->params[KL_MLP_HIDDEN].num,
                          (int64_t)args->params[KL_MLP_CLASSES].num),
        .local = kl__mlp_ranks(args),
        .world = d->nodes * kl__mlp_ranks(args),
        .node_lo = d->shard_lo,
        .x = x->data,
        .y = y->data,
        .epochs = (int64_t)args->params[KL_MLP_EPOCHS].num,
        .lr = (float)args->params[KL_MLP_LR].num,
        .mom = (float)args->params[KL_MLP_MOMENTUM].num,
    };
    run.lb = kl__mlp_shard_max(bs, run.world);
    run.steps = kl__mlp_steps(run.m.n, run.world, run.lb);
    int rc = kl__mlp_labels_check(run.y, x->shape[0], run.m.c, err);
    if (rc < 0)
        return rc;
    run.ranks = calloc((size_t)run.local, sizeof *run.ranks);
    run.row_loss = malloc(sizeof(float) * (size_t)x->shape[0]);
    run.loss = malloc(sizeof(float) * (size_t)run.epochs);
    if (!run.ranks || !run.row_loss || !run.loss) {
        kl_err_set(err, NULL, "train_mlp: out of memory");
        rc = KL_ENOMEM;
        goto done;
    }
    const int started = mlpd_start(&run);
    rc = mlpd_result(&run, err);
    if (rc == 0 && d->node_rank == 0) {
        if (alloc_outputs(&run.m, run.epochs, outs) < 0) {
            kl_err_set(err, NULL, "train_mlp: out of memory for the outputs");
            rc = KL_ENOMEM;
        } else {
            copy_weights(&run.m, run.ranks[0].w, outs);
            memcpy(outs[KL_MLP_OUT_LOSS].data, run.loss, sizeof(float) * (size_t)run.epochs);
            ((float *)outs[KL_MLP_OUT_ACC].data)[0] = (float)run.accuracy;
        }
    }
    kl_info_set(args->info, "ranks", "%d", run.world);
    kl_info_set(args->info, "nodes", "%d", d->nodes);
    kl_info_set(args->info, "steps", "%lld", (long long)(run.steps * run.epochs));
    for (int l = 0; l < started; l++) {
        mlpd_rank *r = &run.ranks[l];
        kl_comm_close(r->comm);
        free(r->w);
        free(r->v);
        free(r->g);
        kl__mlp_scratch_free(&r->s);
    }
done:
    free(run.ranks);
    free(run.row_loss);
    free(run.loss);
    return rc;
}

static int train_mlp_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *x = args->inputs[KL_MLP_X], *y = args->inputs[KL_MLP_Y];
    const int64_t epochs = (int64_t)args->params[KL_MLP_EPOCHS].num;
    const int64_t bs = (int64_t)args->params[KL_MLP_BATCH].num;
    mlp_run j = {
        .args = args,
        .m = kl__mlp_dims(x->shape[0], x->shape[1], (int64_t)args->params[KL_MLP_HIDDEN].num,
                          (int64_t)args->params[KL_MLP_CLASSES].num),
        .ranks = kl__mlp_ranks(args),
        .x = x->data,
        .y = y->data,
        .lr = (float)args->params[KL_MLP_LR].num,
        .mom = (float)args->params[KL_MLP_MOMENTUM].num,
    };
    if (args->dist)
        return train_mlp_run_dist(args, outs, err);
    j.lb = kl__mlp_shard_max(bs, j.ranks);
    const int64_t n = j.m.n, steps = kl__mlp_steps(n, j.ranks, j.lb);
    int rc = kl__mlp_labels_check(j.y, n, j.m.c, err);
    if (rc < 0)
        return rc;
    rc = KL_ENOMEM;
    if (alloc_outputs(&j.m, epochs, outs) < 0)
        goto nomem;
    j.w = malloc(sizeof(float) * (size_t)j.m.size);
    j.v = calloc((size_t)j.m.size, sizeof(float));
    j.row_loss = malloc(sizeof(float) * (size_t)n);
    if (!j.w || !j.v || !j.row_loss)
        goto nomem;
    for (int r = 0; r < j.ranks; r++) {
        j.g[r] = malloc(sizeof(float) * (size_t)j.m.size);
        if (!j.g[r] || kl__mlp_scratch_alloc(&j.s[r], &j.m, j.lb) < 0)
            goto nomem;
    }
    kl__mlp_init(&j.m, (uint64_t)args->params[KL_MLP_SEED].num, j.w);

    /* The update is memory-bound: worth threads only on large nets. */
    int nt_update = 1;
    if (j.m.size * j.ranks >= KL_PAR_MIN_ELEMS) {
        int64_t useful = j.m.size * j.ranks / (KL_PAR_MIN_ELEMS / 4);
        nt_update = kl__threads(args->threads);
        nt_update = useful < nt_update ? (int)useful : nt_update;
    }
    const int threaded = thread_per_rank(&j.m, j.s[0].rows);
    float *loss = outs[KL_MLP_OUT_LOSS].data;
    for (int64_t e = 0; e < epochs; e++) {
        for (int64_t s = 0; s < steps; s++) {
            if (kl__canceled(args)) {
                rc = KL_ECANCELED;
                kl_err_set(err, NULL, "train_mlp: cancelled");
                goto done;
            }
            j.step = s;
            j.batch = kl__mlp_step_total(n, j.ranks, j.lb, s);
            if (threaded)
                kl__parallel(j.ranks, rank_grad, &j);
            else
                ranks_in_turn(&j, 0, 1);
            kl__parallel(nt_update, update_slice, &j);
        }
        double sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += j.row_loss[i];
        loss[e] = (float)(sum / (double)n);
        if (e + 1 < epochs) /* the last epoch is reported with the accuracy */
            kl__mlp_progress(args, e + 1, epochs, loss[e], -1);
    }
    kl__parallel(j.ranks, rank_correct, &j);
    if (j.stop) {
        rc = KL_ECANCELED;
        kl_err_set(err, NULL, "train_mlp: cancelled");
        goto done;
    }
    int64_t right = 0;
    for (int r = 0; r < j.ranks; r++)
        right += j.right[r];
    ((float *)outs[KL_MLP_OUT_ACC].data)[0] = (float)((double)right / (double)n);
    kl__mlp_progress(args, epochs, epochs, loss[epochs - 1], (double)right / (double)n);
    copy_weights(&j.m, j.w, outs);
    kl_info_set(args->info, "ranks", "%d", j.ranks);
    kl_info_set(args->info, "steps", "%lld", (long long)(steps * epochs));
    rc = 0;
    goto done;
nomem:
    kl_err_set(err, NULL, "train_mlp: cannot allocate the weights and activations (%lld parameters)",
               (long long)j.m.size);
done:
    for (int r = 0; r < j.ranks; r++) {
        free(j.g[r]);
        kl__mlp_scratch_free(&j.s[r]);
    }
    free(j.w);
    free(j.v);
    free(j.row_loss);
    return rc;
}

/* w1 [d,hidden], b1 [hidden], w2 [hidden,classes], b2 [classes], loss
 * [epochs], accuracy [1], all float32; w1 is what grows. */
static int64_t train_mlp_output_bytes(const kl_args *args, const char **field)
{
    const int64_t d = args->inputs[KL_MLP_X]->shape[1];
    const int64_t h = (int64_t)args->params[KL_MLP_HIDDEN].num, c = (int64_t)args->params[KL_MLP_CLASSES].num;
    const int64_t epochs = (int64_t)args->params[KL_MLP_EPOCHS].num;
    *field = "params.hidden";
    return (d * h + h + h * c + c + epochs + 1) * 4;
}

const kl_kernel kl__train_mlp = {
    .name = "train_mlp",
    .doc = "data-parallel SGD with momentum on a one-hidden-layer perceptron (ReLU, softmax cross-entropy); "
           "resources.nodes x resources.gpus ranks each walk their own shard of the rows and all-reduce the "
           "gradients every step",
    .params = params,
    .nparams = 7,
    .inputs = inputs,
    .ninputs = 2,
    .outputs = outputs,
    .noutputs = 6,
    .check = train_mlp_check,
    .run_cpu = train_mlp_run_cpu,
    .output_bytes = train_mlp_output_bytes,
    .max_nodes = 64,
};
