/* saxpy.c — the saxpy kernel's catalog entry and CPU reference.
 *   params: a (number)
 *   inputs: x is (n) float32, y is (n) float32
 *   output: y is (n) float32, y = a*x + y, computed in float32 */
#include "kl_cpu.h"

#include <float.h>
#include <string.h>

static const kl_param_spec params[] = {
    {.name = "a", .type = KL_PARAM_NUMBER, .required = 1, .min = -FLT_MAX, .max = FLT_MAX,
     .doc = "scale applied to x (a float32)"},
};

static const kl_io_spec inputs[] = {
    {.name = "x", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[n]",
     .max_elems = KL_MAX_ELEMS, .doc = "vector scaled by a"},
    {.name = "y", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[n]",
     .max_elems = KL_MAX_ELEMS, .doc = "vector added"},
};

static const kl_io_spec outputs[] = {
    {.name = "y", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[n]",
     .max_elems = KL_MAX_ELEMS, .doc = "a*x + y"},
};

static int saxpy_check(const kl_args *args, kl_err *err)
{
    const kl_tensor *x = args->inputs[KL_SAXPY_X], *y = args->inputs[KL_SAXPY_Y];
    if (y->shape[0] != x->shape[0]) {
        kl_err_set(err, "inputs.y", "inputs.y has shape [%lld]; saxpy needs [n] with n = %lld from inputs.x",
                   (long long)y->shape[0], (long long)x->shape[0]);
        return KL_EINVAL;
    }
    return 0;
}

/* y is [n] float32, n from x. */
static int64_t saxpy_output_bytes(const kl_args *args, const char **field)
{
    *field = "inputs.x";
    return args->inputs[KL_SAXPY_X]->shape[0] * 4;
}

typedef struct saxpy_job {
    const kl_args *args;
    float a;
    const float *x, *y;
    float *out;
    int64_t n;
    int canceled; /* see kl__stop_seen */
} saxpy_job;

/* Thread i of n takes one contiguous slice and polls cancel per chunk. */
static void saxpy_slice(void *ctx, int i, int n)
{
    saxpy_job *j = ctx;
    int64_t lo = j->n * i / n, hi = j->n * (i + 1) / n;
    const float a = j->a, *restrict x = j->x, *restrict y = j->y;
    float *restrict out = j->out;
    for (int64_t c = lo; c < hi; c += KL_CHUNK_ELEMS) {
        if (kl__stop_seen(j->args, &j->canceled))
            return;
        int64_t end = c + KL_CHUNK_ELEMS < hi ? c + KL_CHUNK_ELEMS : hi;
        int64_t k = c;
        /* Fixed blocks of 8 vectorize at -O2, where an open loop does not. */
        for (; k + 8 <= end; k += 8)
            for (int l = 0; l < 8; l++)
                out[k + l] = a * x[k + l] + y[k + l];
        for (; k < end; k++)
            out[k] = a * x[k] + y[k];
    }
}

static int saxpy_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *x = args->inputs[KL_SAXPY_X], *y = args->inputs[KL_SAXPY_Y];
    int rc = kl_tensor_alloc(&outs[0], KL_F32, 1, x->shape);
    if (rc < 0) {
        kl_err_set(err, NULL, "saxpy: cannot allocate output y of %lld elements", (long long)x->shape[0]);
        return rc;
    }
    saxpy_job j = {.args = args, .a = (float)args->params[KL_SAXPY_A].num, .x = x->data, .y = y->data,
                   .out = outs[0].data, .n = x->shape[0]};
    int nt = 1;
    if (j.n >= KL_PAR_MIN_ELEMS) {
        int64_t useful = j.n / (KL_PAR_MIN_ELEMS / 4); /* at least 256Ki elements a thread */
        nt = kl__threads(args->threads);
        nt = useful < nt ? (int)useful : nt;
    }
    kl__parallel(nt, saxpy_slice, &j);
    if (j.canceled) {
        kl_err_set(err, NULL, "saxpy: cancelled");
        return KL_ECANCELED;
    }
    return 0;
}

const kl_kernel kl__saxpy = {
    .name = "saxpy",
    .doc = "y = a*x + y on float32 vectors",
    .params = params,
    .nparams = 1,
    .inputs = inputs,
    .ninputs = 2,
    .outputs = outputs,
    .noutputs = 1,
    .check = saxpy_check,
    .run_cpu = saxpy_run_cpu,
    .output_bytes = saxpy_output_bytes,
};
