/* train_mlp.c — the train_mlp kernel's catalog entry and CPU reference:
 * data-parallel SGD with momentum on a one-hidden-layer perceptron
 * (ReLU, softmax cross-entropy), ranks = resources.gpus, threads as ranks
 * (see thread_per_rank for when they take turns instead).
 *   params: hidden, classes, epochs, batch_size, lr, momentum, seed
 *   inputs: x is (n,d) float32, y is (n) int32 labels in [0, classes)
 *   outputs: w1 (d,hidden), b1 (hidden), w2 (hidden,classes), b2 (classes),
 *            loss (epochs) float32: mean cross-entropy of the epoch's steps,
 *            accuracy (1) float32: on the training set after training
 * Each epoch walks the rows in order (no shuffling) in batches of
 * batch_size, the last one shorter when n is not a multiple. Rank r of R
 * takes a contiguous shard of each batch (kl__mlp_shard) and computes the
 * gradient of its rows' summed loss; the gradients are summed in rank order
 * (what the all-reduce does on the GPU), divided by the batch's rows, and
 * every rank applies v = momentum*v + g, w -= lr*v. Weights start from
 * kl__mlp_init(seed), computed on the host for both backends. */
#include "kl_cpu.h"
#include "mlp_math.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static const kl_param_spec params[] = {
    {.name = "hidden", .type = KL_PARAM_INT, .min = 1, .max = 4096, .def = 64, .doc = "units of the hidden layer"},
    {.name = "classes", .type = KL_PARAM_INT, .required = 1, .min = 2, .max = 1024,
     .doc = "number of classes; labels in y are 0..classes-1"},
    {.name = "epochs", .type = KL_PARAM_INT, .min = 1, .max = 1000, .def = 10, .doc = "passes over the data"},
    {.name = "batch_size", .type = KL_PARAM_INT, .min = 1, .max = (double)KL_MAX_ELEMS, .def = 32,
     .doc = "rows per step, split across the ranks; at most n"},
    {.name = "lr", .type = KL_PARAM_NUMBER, .min = 0, .max = 100, .def = 0.01, .doc = "learning rate (> 0)"},
    {.name = "momentum", .type = KL_PARAM_NUMBER, .min = 0, .max = 1, .def = 0.9,
     .doc = "SGD momentum, 0 <= momentum < 1"},
    {.name = "seed", .type = KL_PARAM_INT, .min = 0, .max = 9007199254740991.0, .def = 0,
     .doc = "seed of the initial weights"},
};

static const kl_io_spec inputs[] = {
    {.name = "x", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[n,d]", .max_elems = KL_MAX_ELEMS,
     .doc = "training samples, one per row"},
    {.name = "y", .dtype = KL_I32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[n]", .max_elems = KL_MAX_ELEMS,
     .doc = "class of each row, 0..classes-1"},
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
    const long long n = x->shape[0], d = x->shape[1];
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
    if (n < 1 || d < 1) {
        kl_err_set(err, "inputs.x", "inputs.x has shape [%lld,%lld]; train_mlp needs at least one row and column",
                   n, d);
        return KL_EINVAL;
    }
    if (y->shape[0] != n) {
        kl_err_set(err, "inputs.y", "inputs.y has shape [%lld]; train_mlp needs [n] with n = %lld from inputs.x",
                   (long long)y->shape[0], n);
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
    int64_t batch0, batch;    /* the step's rows [batch0, batch0 + batch) */
    float lr, mom;
    int64_t right[KL_MLP_MAX_RANKS];
    int stop;                 /* see kl__stop_seen */
} mlp_run;

static void rank_grad(void *ctx, int r, int nt)
{
    mlp_run *j = ctx;
    int64_t lo, hi;
    (void)nt;
    kl__mlp_shard(j->batch, r, j->ranks, &lo, &hi);
    lo += j->batch0;
    hi += j->batch0;
    kl__mlp_grad(&j->m, j->w, j->x + lo * j->m.d, j->y + lo, hi - lo, j->g[r], j->row_loss + lo, &j->s[r]);
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

/* The all-reduce and the update, on slice t of nt of the parameters: each
 * element sums the ranks in rank order, so the split changes nothing. */
static void update_slice(void *ctx, int t, int nt)
{
    mlp_run *j = ctx;
    const int64_t lo = j->m.size * t / nt, hi = j->m.size * (t + 1) / nt;
    const float rows = (float)j->batch, lr = j->lr, mom = j->mom;
    float *restrict w = j->w, *restrict v = j->v;
    for (int64_t i = lo; i < hi; i++) {
        float sum = j->g[0][i];
        for (int r = 1; r < j->ranks; r++)
            sum += j->g[r][i];
        const float g = sum / rows;
        v[i] = mom * v[i] + g;
        w[i] = w[i] - lr * v[i];
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
    const int64_t n = j.m.n, steps = (n + bs - 1) / bs;
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
        if (!j.g[r] || kl__mlp_scratch_alloc(&j.s[r], &j.m, kl__mlp_shard_max(bs, j.ranks)) < 0)
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
            j.batch0 = s * bs;
            j.batch = j.batch0 + bs <= n ? bs : n - j.batch0;
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
           "resources.gpus ranks split each batch and all-reduce the gradients",
    .params = params,
    .nparams = 7,
    .inputs = inputs,
    .ninputs = 2,
    .outputs = outputs,
    .noutputs = 6,
    .check = train_mlp_check,
    .run_cpu = train_mlp_run_cpu,
    .output_bytes = train_mlp_output_bytes,
};
