/* gemm.c — the gemm kernel's catalog entry and CPU implementation (the
 * reference for cuda/gemm.cu).
 *   params: alpha (number, default 1), beta (number, default 0),
 *           precision (fp32 | tf32 | bf16, default fp32)
 *   inputs: a is (m,k) float32, b is (k,n) float32, c is (m,n) float32, optional
 *           or, batched, a (batch,m,k), b (batch,k,n), c (batch,m,n): all
 *           rank 2 or all rank 3
 *   output: c is (m,n) or (batch,m,n) float32, c = alpha * a@b + beta * c
 * Row-major throughout. An absent c counts as zeros; beta = 0 ignores c, as
 * BLAS does (a NaN in c does not reach the result). The CPU computes every
 * precision in FP32 and says so in the run's info ("precision": "fp32",
 * plus "requested_precision" when another was asked for); tf32 and bf16 are
 * tensor-core paths of the GPU.
 * The work goes to OpenBLAS (cblas_sgemm, one call per matrix of the batch),
 * which sizes its own thread pool (OPENBLAS_NUM_THREADS, all cores by
 * default) and ignores args->threads; a batch of small matrices, which
 * OpenBLAS would run on one core each, is spread over args->threads
 * threads instead. Built with -DKL_NO_BLAS (the GPU test machine has no
 * OpenBLAS) it uses the blocked C loop below, which uses args->threads;
 * kl__gemm_blocked, outside the catalog, runs that loop on every build so
 * that the unit tests check it where OpenBLAS is installed too. */
#include "kl_cpu.h"

#include <float.h>
#include <stdio.h>
#include <string.h>
#ifndef KL_NO_BLAS
#include <cblas.h>
/* Weak (kl_cpu.h, "BLAS"): NULL in a process that did not load OpenBLAS. */
#pragma weak cblas_sgemm
#endif

static const char *const precisions[] = {"fp32", "tf32", "bf16", NULL};

static const kl_param_spec params[] = {
    {.name = "alpha", .type = KL_PARAM_NUMBER, .min = -FLT_MAX, .max = FLT_MAX, .def = 1,
     .doc = "scale of a@b (a float32)"},
    {.name = "beta", .type = KL_PARAM_NUMBER, .min = -FLT_MAX, .max = FLT_MAX, .def = 0,
     .doc = "scale of c (a float32); 0 ignores c"},
    {.name = "precision", .type = KL_PARAM_ENUM, .choices = precisions, .def_choice = KL_GEMM_FP32,
     .doc = "arithmetic of a@b: fp32 (full FP32), tf32 or bf16 (GPU tensor cores: a and b rounded to "
            "TF32 or BF16, FP32 accumulation and output); CPU nodes compute every precision in fp32, and "
            "the run's info.precision says which ran"},
};

static const kl_io_spec inputs[] = {
    {.name = "a", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 3, .shape_doc = "[m,k] or [batch,m,k]",
     .max_elems = KL_MAX_ELEMS, .doc = "left matrix (or batch of matrices), row-major"},
    {.name = "b", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 3, .shape_doc = "[k,n] or [batch,k,n]",
     .max_elems = KL_MAX_ELEMS, .doc = "right matrix (or batch), row-major; the rank of a"},
    {.name = "c", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 3, .optional = 1,
     .shape_doc = "[m,n] or [batch,m,n]", .max_elems = KL_MAX_ELEMS,
     .doc = "added after scaling by beta; absent means zeros; the rank of a"},
};

static const kl_io_spec outputs[] = {
    {.name = "c", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 3, .shape_doc = "[m,n] or [batch,m,n]",
     .max_elems = KL_MAX_ELEMS, .doc = "alpha*a@b + beta*c, for each matrix of the batch"},
};

/* "[2,3]" or "[4,2,3]" into buf. */
static const char *shape_str(const kl_tensor *t, char *buf, size_t len)
{
    if (t->ndim == 3)
        snprintf(buf, len, "[%lld,%lld,%lld]", (long long)t->shape[0], (long long)t->shape[1],
                 (long long)t->shape[2]);
    else
        snprintf(buf, len, "[%lld,%lld]", (long long)t->shape[0], (long long)t->shape[1]);
    return buf;
}

static int gemm_check(const kl_args *args, kl_err *err)
{
    const kl_tensor *a = args->inputs[KL_GEMM_A], *b = args->inputs[KL_GEMM_B], *c = args->inputs[KL_GEMM_C];
    char got[96];
    int p = args->params[KL_GEMM_PRECISION].choice;
    if (p < KL_GEMM_FP32 || p > KL_GEMM_BF16) { /* a default never filled in by kl_args_defaults */
        kl_err_set(err, "params.precision", "params.precision must be one of fp32, tf32, bf16");
        return KL_EINVAL;
    }
    if (b->ndim != a->ndim || (c && c->ndim != a->ndim)) {
        const char *field = b->ndim != a->ndim ? "inputs.b" : "inputs.c";
        kl_err_set(err, field,
                   "%s has rank %d and inputs.a rank %d; gemm needs a, b (and c) all of rank 2 ([m,k], [k,n], "
                   "[m,n]) or all of rank 3 ([batch,m,k], [batch,k,n], [batch,m,n])",
                   field, b->ndim != a->ndim ? b->ndim : c->ndim, a->ndim);
        return KL_EINVAL;
    }
    const int batched = a->ndim == 3, o = batched;
    long long batch = batched ? a->shape[0] : 1, m = a->shape[o], k = a->shape[o + 1], n = b->shape[o + 1];
    if (batched && b->shape[0] != batch) {
        kl_err_set(err, "inputs.b", "inputs.b has shape %s; gemm needs [batch,k,n] with batch = %lld from inputs.a",
                   shape_str(b, got, sizeof got), batch);
        return KL_EINVAL;
    }
    if (b->shape[o] != k) {
        kl_err_set(err, "inputs.b", "inputs.b has shape %s; gemm needs %s with k = %lld from inputs.a",
                   shape_str(b, got, sizeof got), batched ? "[batch,k,n]" : "[k,n]", k);
        return KL_EINVAL;
    }
    if (c && ((batched && c->shape[0] != batch) || c->shape[o] != m || c->shape[o + 1] != n)) {
        if (batched)
            kl_err_set(err, "inputs.c",
                       "inputs.c has shape %s; gemm needs [batch,m,n] = [%lld,%lld,%lld] from inputs.a and inputs.b",
                       shape_str(c, got, sizeof got), batch, m, n);
        else
            kl_err_set(err, "inputs.c", "inputs.c has shape %s; gemm needs [m,n] = [%lld,%lld] from inputs.a and inputs.b",
                       shape_str(c, got, sizeof got), m, n);
        return KL_EINVAL;
    }
    /* Each dim is at most KL_MAX_ELEMS (2^30), so m*n fits; the batch
     * factor is checked by division so that it cannot wrap round. */
    if (m * n > KL_MAX_ELEMS || (m * n > 0 && batch > KL_MAX_ELEMS / (m * n))) {
        kl_err_set(err, "inputs.b",
                   "the output c would have more than %lld elements (batch = %lld, m = %lld, n = %lld), the limit",
                   (long long)KL_MAX_ELEMS, batch, m, n);
        return KL_EINVAL;
    }
    return 0;
}

/* c is [batch,m,n] float32; gemm_check has bounded its element count. */
static int64_t gemm_output_bytes(const kl_args *args, const char **field)
{
    const kl_tensor *a = args->inputs[KL_GEMM_A], *b = args->inputs[KL_GEMM_B];
    const int o = a->ndim == 3;
    *field = "inputs.b";
    return (o ? a->shape[0] : 1) * a->shape[o] * b->shape[o + 1] * 4;
}

/* One multiplication problem: for each of `batch` matrices, C (m x n,
 * already holding beta*c) += alpha * A (m x k) @ B (k x n), contiguous. */
typedef struct gemm_job {
    const kl_args *args;
    int64_t batch, m, n, k;
    float alpha;
    const float *A, *B;
    float *C;
    int stop;
} gemm_job;

#ifndef KL_NO_BLAS
/* Rows per call between two polls of cancel: about 2^34 flops (a fraction of
 * a second to a few seconds on a CPU), never fewer than 256 rows so each
 * call stays large enough for the BLAS to run at full speed. */
static int64_t panel_rows(int64_t m, int64_t n, int64_t k)
{
    int64_t rows = ((int64_t)1 << 33) / (n * k);
    rows = rows < 256 ? 256 : rows;
    return rows > m ? m : rows;
}

static void sgemm(const gemm_job *j, int64_t rows, const float *A, const float *B, float *C)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)j->n, (int)j->k, j->alpha, A,
                (int)j->k, B, (int)j->n, 1.0f, C, (int)j->n);
}

/* Matrices [lo, hi) of the batch for thread t: each call is small enough
 * that OpenBLAS runs it on the calling thread. */
static void small_matrices(void *ctx, int t, int nt)
{
    gemm_job *j = ctx;
    int64_t lo = j->batch * t / nt, hi = j->batch * (t + 1) / nt;
    for (int64_t b = lo; b < hi && !kl__stop_seen(j->args, &j->stop); b++)
        sgemm(j, j->m, j->A + b * j->m * j->k, j->B + b * j->k * j->n, j->C + b * j->m * j->n);
}

/* OpenBLAS 0.3 runs a product of m*n*k <= 4 * 65536 on one thread
 * (GEMM_MULTITHREAD_THRESHOLD); the batch is then split across threads. */
#define SMALL_MNK ((int64_t)1 << 18)

static int multiply_blas(gemm_job *j)
{
    int nt = kl__threads(j->args->threads);
    if (j->m * j->n * j->k <= SMALL_MNK && j->batch > 1 && nt > 1) {
        /* 2^20 multiply-adds a thread at least: well over the cost of starting it */
        int64_t useful = j->batch * j->m * j->n * j->k >> 20;
        nt = useful < nt ? (useful > 1 ? (int)useful : 1) : nt;
        kl__parallel(nt, small_matrices, j);
        return kl__stop_seen(j->args, &j->stop) ? KL_ECANCELED : 0;
    }
    int64_t step = panel_rows(j->m, j->n, j->k);
    for (int64_t b = 0; b < j->batch; b++) {
        const float *A = j->A + b * j->m * j->k, *B = j->B + b * j->k * j->n;
        float *C = j->C + b * j->m * j->n;
        for (int64_t r = 0; r < j->m; r += step) {
            if (kl__canceled(j->args))
                return KL_ECANCELED;
            sgemm(j, r + step < j->m ? step : j->m - r, A + r * j->k, B, C + r * j->n);
        }
    }
    return 0;
}
#endif

/* Blocks sized for a private L2 of 1 MiB or more: a KC x NC block of B
 * (256 KiB) is reused by every row of the panel, and four rows of C
 * share each load of B. The inner loop is an axpy the compiler vectorizes. */
enum { KC = 256, NC = 256 };

/* Rows [lo, hi) of one matrix: C += alpha * A @ B. */
static void nb_block(gemm_job *j, const float *A, const float *B, float *C, int64_t lo, int64_t hi)
{
    const int64_t n = j->n, k = j->k;
    const float alpha = j->alpha;
    for (int64_t pk = 0; pk < k; pk += KC) {
        if (kl__stop_seen(j->args, &j->stop))
            return;
        int64_t pe = pk + KC < k ? pk + KC : k;
        for (int64_t jn = 0; jn < n; jn += NC) {
            int64_t je = jn + NC < n ? jn + NC : n;
            int64_t i = lo;
            for (; i + 4 <= hi; i += 4) {
                float *restrict c0 = C + i * n, *restrict c1 = c0 + n, *restrict c2 = c1 + n, *restrict c3 = c2 + n;
                for (int64_t p = pk; p < pe; p++) {
                    const float *restrict b = B + p * n;
                    float a0 = alpha * A[i * k + p], a1 = alpha * A[(i + 1) * k + p];
                    float a2 = alpha * A[(i + 2) * k + p], a3 = alpha * A[(i + 3) * k + p];
                    for (int64_t q = jn; q < je; q++) {
                        float bq = b[q];
                        c0[q] += a0 * bq;
                        c1[q] += a1 * bq;
                        c2[q] += a2 * bq;
                        c3[q] += a3 * bq;
                    }
                }
            }
            for (; i < hi; i++) {
                float *restrict c0 = C + i * n;
                for (int64_t p = pk; p < pe; p++) {
                    const float *restrict b = B + p * n;
                    float a0 = alpha * A[i * k + p];
                    for (int64_t q = jn; q < je; q++)
                        c0[q] += a0 * b[q];
                }
            }
        }
    }
}

/* Thread t takes a share of the batch*m rows of all the matrices, cut at
 * matrix boundaries into blocks of nb_block. */
static void nb_rows(void *ctx, int t, int nt)
{
    gemm_job *j = ctx;
    const int64_t total = j->batch * j->m;
    int64_t r = total * t / nt, hi = total * (t + 1) / nt;
    while (r < hi && !kl__stop_seen(j->args, &j->stop)) {
        int64_t b = r / j->m, i0 = r % j->m, i1 = i0 + (hi - r) < j->m ? i0 + (hi - r) : j->m;
        nb_block(j, j->A + b * j->m * j->k, j->B + b * j->k * j->n, j->C + b * j->m * j->n, i0, i1);
        r += i1 - i0;
    }
}

static int multiply_blocked(gemm_job *j)
{
    int nt = kl__threads(j->args->threads);
    int64_t rows = j->batch * j->m, macs = rows * j->n * j->k;
    int64_t useful = macs >> 18; /* 2^18 multiply-adds a thread at least */
    useful = useful < rows ? useful : rows;
    nt = useful < nt ? (useful > 1 ? (int)useful : 1) : nt;
    kl__parallel(nt, nb_rows, j);
    return kl__stop_seen(j->args, &j->stop) ? KL_ECANCELED : 0; /* a stop leaves C partial */
}

static int run(const kl_args *args, kl_tensor *outs, kl_err *err, int (*multiply)(gemm_job *))
{
    const kl_tensor *a = args->inputs[KL_GEMM_A], *b = args->inputs[KL_GEMM_B], *c = args->inputs[KL_GEMM_C];
    const int batched = a->ndim == 3, o = batched;
    const int64_t batch = batched ? a->shape[0] : 1, m = a->shape[o], k = a->shape[o + 1], n = b->shape[o + 1];
    const float alpha = (float)args->params[KL_GEMM_ALPHA].num, beta = (float)args->params[KL_GEMM_BETA].num;
    const int64_t shape[3] = {batch, m, n};
    if (kl_tensor_alloc(&outs[0], KL_F32, a->ndim, shape + !batched) < 0) {
        kl_err_set(err, NULL, "gemm: cannot allocate output c of %lld x %lld x %lld", (long long)batch,
                   (long long)m, (long long)n);
        return KL_ENOMEM;
    }
    float *C = outs[0].data;
    if (c && beta != 0) {
        const float *src = c->data;
        for (int64_t i = 0; i < batch * m * n; i++)
            C[i] = beta * src[i];
    }
    /* An empty product leaves beta*c; BLAS would reject its leading dimensions. */
    if (batch > 0 && m > 0 && n > 0 && k > 0) {
        gemm_job j = {.args = args, .batch = batch, .m = m, .n = n, .k = k, .alpha = alpha,
                      .A = a->data, .B = b->data, .C = C};
        if (multiply(&j) < 0 || kl__canceled(args)) {
            kl_err_set(err, NULL, "gemm: cancelled");
            return KL_ECANCELED;
        }
    }
    kl_info_set(args->info, "precision", "fp32");
    int asked = args->params[KL_GEMM_PRECISION].choice;
    if (asked != KL_GEMM_FP32)
        kl_info_set(args->info, "requested_precision", "%s", precisions[asked]);
    return 0;
}

static int gemm_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
#ifndef KL_NO_BLAS
    if (cblas_sgemm != NULL)
        return run(args, outs, err, multiply_blas);
    return run(args, outs, err, multiply_blocked);
#else
    return run(args, outs, err, multiply_blocked);
#endif
}

static int gemm_run_blocked(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    return run(args, outs, err, multiply_blocked);
}

#define GEMM_KERNEL(run_fn)                                                                            \
    {                                                                                                  \
        .name = "gemm",                                                                                \
        .doc = "c = alpha*a@b + beta*c on float32 matrices (or batches of them), row-major; fp32, tf32 " \
               "or bf16 arithmetic on the GPU",                                                        \
        .params = params, .nparams = 3, .inputs = inputs, .ninputs = 3, .outputs = outputs,            \
        .noutputs = 1, .check = gemm_check, .run_cpu = run_fn, .output_bytes = gemm_output_bytes,      \
    }

const kl_kernel kl__gemm = GEMM_KERNEL(gemm_run_cpu);
const kl_kernel kl__gemm_blocked = GEMM_KERNEL(gemm_run_blocked);
