/* reduce.c — the reduce kernel's catalog entry and CPU reference.
 *   params: op (sum | min | max | mean, default sum)
 *   inputs: x is any shape of rank 1..8 with at least one element, float32
 *   output: value is (1) float32
 * sum and mean accumulate in double over fixed chunks, and the chunk sums are
 * added pairwise: the error stays near one float32 rounding of the result,
 * and the answer does not depend on the number of threads. min and max
 * return NaN when x holds one. */
#include "kl_cpu.h"

#include <math.h>
#include <stdlib.h>

static const char *const ops[] = {"sum", "min", "max", "mean", NULL};

static const kl_param_spec params[] = {
    {.name = "op", .type = KL_PARAM_ENUM, .choices = ops, .def_choice = KL_REDUCE_SUM,
     .doc = "sum, min, max or mean of every element"},
};

static const kl_io_spec inputs[] = {
    {.name = "x", .dtype = KL_F32, .ndim_min = 1, .ndim_max = KL_MAX_DIMS, .shape_doc = "[d0,...]",
     .max_elems = KL_MAX_ELEMS, .doc = "tensor of any rank 1..8, at least one element"},
};

static const kl_io_spec outputs[] = {
    {.name = "value", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "the reduced value"},
};

static int reduce_check(const kl_args *args, kl_err *err)
{
    if (kl_tensor_elems(args->inputs[KL_REDUCE_X]) < 1) {
        kl_err_set(err, "inputs.x", "inputs.x is empty; reduce needs at least 1 element");
        return KL_EINVAL;
    }
    return 0;
}

/* Sixteen independent accumulators (eight SSE registers): the adds pipeline
 * instead of waiting on one another, and the order stays fixed, so results
 * are reproducible. Written out so the compiler keeps them in registers. */
static double sum_chunk(const float *restrict x, int64_t n)
{
    double a[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a[0] += x[i + 0], a[1] += x[i + 1], a[2] += x[i + 2], a[3] += x[i + 3];
        a[4] += x[i + 4], a[5] += x[i + 5], a[6] += x[i + 6], a[7] += x[i + 7];
        a[8] += x[i + 8], a[9] += x[i + 9], a[10] += x[i + 10], a[11] += x[i + 11];
        a[12] += x[i + 12], a[13] += x[i + 13], a[14] += x[i + 14], a[15] += x[i + 15];
    }
    for (; i < n; i++)
        a[0] += x[i];
    for (int w = 8; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            a[l] += a[l + w];
    return a[0];
}

/* The NaN test is kept apart from the comparison so the loop vectorizes;
 * inlined so that each call site gets a loop without the want_max test. */
static inline __attribute__((always_inline)) float minmax_chunk(const float *restrict x, int64_t n, int want_max)
{
    float m[8];
    int nan = 0;
    for (int l = 0; l < 8; l++)
        m[l] = want_max ? -INFINITY : INFINITY;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; l++) {
            float v = x[i + l];
            nan |= v != v;
            if (want_max)
                m[l] = v > m[l] ? v : m[l];
            else
                m[l] = v < m[l] ? v : m[l];
        }
    }
    for (; i < n; i++) {
        nan |= x[i] != x[i];
        m[0] = want_max ? (x[i] > m[0] ? x[i] : m[0]) : (x[i] < m[0] ? x[i] : m[0]);
    }
    if (nan)
        return NAN;
    for (int l = 1; l < 8; l++)
        m[0] = want_max ? kl__maxf_nan(m[0], m[l]) : kl__minf_nan(m[0], m[l]);
    return m[0];
}

static double sum_pairwise(const double *v, int64_t n)
{
    if (n == 1)
        return v[0];
    int64_t h = n / 2;
    return sum_pairwise(v, h) + sum_pairwise(v + h, n - h);
}

typedef struct reduce_job {
    const kl_args *args;
    const float *x;
    int64_t n, nchunks;
    kl_reduce_op op;
    double *partial; /* one per chunk */
    int canceled; /* see kl__stop_seen */
} reduce_job;

static void reduce_slice(void *ctx, int i, int n)
{
    reduce_job *j = ctx;
    int64_t lo = j->nchunks * i / n, hi = j->nchunks * (i + 1) / n;
    for (int64_t c = lo; c < hi; c++) {
        if (kl__stop_seen(j->args, &j->canceled))
            return;
        int64_t start = c * KL_CHUNK_ELEMS;
        int64_t len = start + KL_CHUNK_ELEMS < j->n ? KL_CHUNK_ELEMS : j->n - start;
        if (j->op == KL_REDUCE_SUM || j->op == KL_REDUCE_MEAN)
            j->partial[c] = sum_chunk(j->x + start, len);
        else if (j->op == KL_REDUCE_MAX)
            j->partial[c] = minmax_chunk(j->x + start, len, 1);
        else
            j->partial[c] = minmax_chunk(j->x + start, len, 0);
    }
}

static int reduce_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *x = args->inputs[KL_REDUCE_X];
    reduce_job j = {.args = args, .x = x->data, .n = kl_tensor_elems(x),
                    .op = (kl_reduce_op)args->params[KL_REDUCE_OP].choice};
    j.nchunks = (j.n + KL_CHUNK_ELEMS - 1) / KL_CHUNK_ELEMS;
    j.partial = malloc(sizeof(double) * (size_t)j.nchunks);
    const int64_t one = 1;
    if (!j.partial || kl_tensor_alloc(&outs[0], KL_F32, 1, &one) < 0) {
        free(j.partial);
        kl_err_set(err, NULL, "reduce: out of memory");
        return KL_ENOMEM;
    }
    int nt = 1;
    if (j.n >= KL_PAR_MIN_ELEMS) {
        int64_t useful = j.nchunks / 4;
        nt = kl__threads(args->threads);
        nt = useful < nt ? (int)useful : nt;
    }
    kl__parallel(nt, reduce_slice, &j);
    if (j.canceled) {
        free(j.partial);
        kl_err_set(err, NULL, "reduce: cancelled");
        return KL_ECANCELED;
    }
    double r = j.partial[0];
    switch (j.op) {
    case KL_REDUCE_SUM:
        r = sum_pairwise(j.partial, j.nchunks);
        break;
    case KL_REDUCE_MEAN:
        r = sum_pairwise(j.partial, j.nchunks) / (double)j.n;
        break;
    case KL_REDUCE_MIN:
    case KL_REDUCE_MAX:
        for (int64_t c = 1; c < j.nchunks; c++) {
            float a = (float)r, b = (float)j.partial[c];
            r = j.op == KL_REDUCE_MAX ? kl__maxf_nan(a, b) : kl__minf_nan(a, b);
        }
        break;
    }
    free(j.partial);
    ((float *)outs[0].data)[0] = (float)r;
    return 0;
}

const kl_kernel kl__reduce = {
    .name = "reduce",
    .doc = "sum, min, max or mean of a float32 tensor (sum and mean accumulate in double)",
    .params = params,
    .nparams = 1,
    .inputs = inputs,
    .ninputs = 1,
    .outputs = outputs,
    .noutputs = 1,
    .check = reduce_check,
    .run_cpu = reduce_run_cpu,
};
