/* gemm.c — the gemm kernel's catalog entry and CPU implementation.
 *   params: alpha (number, default 1), beta (number, default 0)
 *   inputs: a is (m,k) float32, b is (k,n) float32, c is (m,n) float32, optional
 *   output: c is (m,n) float32, c = alpha * a@b + beta * c
 * Row-major throughout. An absent c counts as zeros; beta = 0 ignores c, as
 * BLAS does (a NaN in c does not reach the result). The work goes to OpenBLAS
 * (cblas_sgemm), which sizes its own thread pool (OPENBLAS_NUM_THREADS, all
 * cores by default) and ignores args->threads. Built with -DKL_NO_BLAS (the
 * GPU test machine has no OpenBLAS) it uses the blocked C loop below, which
 * does use args->threads. */
#include "kl_cpu.h"

#include <float.h>
#include <string.h>
#ifndef KL_NO_BLAS
#include <cblas.h>
#endif

static const kl_param_spec params[] = {
    {.name = "alpha", .type = KL_PARAM_NUMBER, .min = -FLT_MAX, .max = FLT_MAX, .def = 1,
     .doc = "scale of a@b (a float32)"},
    {.name = "beta", .type = KL_PARAM_NUMBER, .min = -FLT_MAX, .max = FLT_MAX, .def = 0,
     .doc = "scale of c (a float32); 0 ignores c"},
};

static const kl_io_spec inputs[] = {
    {.name = "a", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[m,k]",
     .max_elems = KL_MAX_ELEMS, .doc = "left matrix, row-major"},
    {.name = "b", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[k,n]",
     .max_elems = KL_MAX_ELEMS, .doc = "right matrix, row-major"},
    {.name = "c", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .optional = 1, .shape_doc = "[m,n]",
     .max_elems = KL_MAX_ELEMS, .doc = "added after scaling by beta; absent means zeros"},
};

static const kl_io_spec outputs[] = {
    {.name = "c", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[m,n]",
     .max_elems = KL_MAX_ELEMS, .doc = "alpha*a@b + beta*c"},
};

static int gemm_check(const kl_args *args, kl_err *err)
{
    const kl_tensor *a = args->inputs[KL_GEMM_A], *b = args->inputs[KL_GEMM_B], *c = args->inputs[KL_GEMM_C];
    long long m = a->shape[0], k = a->shape[1], n = b->shape[1];
    if (b->shape[0] != k) {
        kl_err_set(err, "inputs.b", "inputs.b has shape [%lld,%lld]; gemm needs [k,n] with k = %lld from inputs.a",
                   (long long)b->shape[0], n, k);
        return KL_EINVAL;
    }
    if (c && (c->shape[0] != m || c->shape[1] != n)) {
        kl_err_set(err, "inputs.c",
                   "inputs.c has shape [%lld,%lld]; gemm needs [m,n] = [%lld,%lld] from inputs.a and inputs.b",
                   (long long)c->shape[0], (long long)c->shape[1], m, n);
        return KL_EINVAL;
    }
    if (m * n > KL_MAX_ELEMS) {
        kl_err_set(err, "inputs.b", "the output c would have %lld elements (m = %lld, n = %lld); the limit is %lld",
                   m * n, m, n, (long long)KL_MAX_ELEMS);
        return KL_EINVAL;
    }
    return 0;
}

/* C (rows x n, already holding beta*c) += alpha * A (rows x k) @ B (k x n). */
#ifndef KL_NO_BLAS
static void panel(const kl_args *args, int64_t rows, int64_t n, int64_t k, float alpha, const float *A,
                  const float *B, float *C)
{
    (void)args;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)n, (int)k, alpha, A, (int)k, B,
                (int)n, 1.0f, C, (int)n);
}
#else
/* Blocks sized for a private L2 of 1 MiB or more: a KC x NC block of B
 * (256 KiB) is reused by every row of the panel, and four rows of C
 * share each load of B. The inner loop is an axpy the compiler vectorizes. */
enum { KC = 256, NC = 256 };

typedef struct nb_job {
    const kl_args *args;
    int64_t rows, n, k;
    float alpha;
    const float *A, *B;
    float *C;
} nb_job;

static void nb_rows(void *ctx, int t, int nt)
{
    nb_job *j = ctx;
    int64_t lo = j->rows * t / nt, hi = j->rows * (t + 1) / nt, n = j->n, k = j->k;
    for (int64_t pk = 0; pk < k; pk += KC) {
        if (kl__canceled(j->args))
            return;
        int64_t pe = pk + KC < k ? pk + KC : k;
        for (int64_t jn = 0; jn < n; jn += NC) {
            int64_t je = jn + NC < n ? jn + NC : n;
            int64_t i = lo;
            for (; i + 4 <= hi; i += 4) {
                float *restrict c0 = j->C + i * n, *restrict c1 = c0 + n, *restrict c2 = c1 + n,
                                *restrict c3 = c2 + n;
                for (int64_t p = pk; p < pe; p++) {
                    const float *restrict b = j->B + p * n;
                    float a0 = j->alpha * j->A[i * k + p], a1 = j->alpha * j->A[(i + 1) * k + p];
                    float a2 = j->alpha * j->A[(i + 2) * k + p], a3 = j->alpha * j->A[(i + 3) * k + p];
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
                float *restrict c0 = j->C + i * n;
                for (int64_t p = pk; p < pe; p++) {
                    const float *restrict b = j->B + p * n;
                    float a0 = j->alpha * j->A[i * k + p];
                    for (int64_t q = jn; q < je; q++)
                        c0[q] += a0 * b[q];
                }
            }
        }
    }
}

static void panel(const kl_args *args, int64_t rows, int64_t n, int64_t k, float alpha, const float *A,
                  const float *B, float *C)
{
    nb_job j = {.args = args, .rows = rows, .n = n, .k = k, .alpha = alpha, .A = A, .B = B, .C = C};
    int nt = kl__threads(args->threads);
    int64_t useful = rows / 16; /* 16 rows a thread at least */
    nt = useful < nt ? (useful > 0 ? (int)useful : 1) : nt;
    kl__parallel(nt, nb_rows, &j);
}
#endif

/* Rows per call between two polls of cancel: about 2^34 flops (a fraction of
 * a second to a few seconds on a CPU), never fewer than 256 rows so each
 * call stays large enough for the BLAS to run at full speed. */
static int64_t panel_rows(int64_t m, int64_t n, int64_t k)
{
    int64_t rows = ((int64_t)1 << 33) / (n * k);
    rows = rows < 256 ? 256 : rows;
    return rows > m ? m : rows;
}

static int gemm_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *a = args->inputs[KL_GEMM_A], *b = args->inputs[KL_GEMM_B], *c = args->inputs[KL_GEMM_C];
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    float alpha = (float)args->params[KL_GEMM_ALPHA].num, beta = (float)args->params[KL_GEMM_BETA].num;
    const int64_t shape[2] = {m, n};
    if (kl_tensor_alloc(&outs[0], KL_F32, 2, shape) < 0) {
        kl_err_set(err, NULL, "gemm: cannot allocate output c of %lld x %lld", (long long)m, (long long)n);
        return KL_ENOMEM;
    }
    float *C = outs[0].data;
    if (c && beta != 0) {
        const float *src = c->data;
        for (int64_t i = 0; i < m * n; i++)
            C[i] = beta * src[i];
    }
    if (m == 0 || n == 0 || k == 0) /* nothing to multiply; BLAS would reject the leading dimensions */
        return 0;
    int64_t step = panel_rows(m, n, k);
    for (int64_t r = 0; r < m; r += step) {
        if (kl__canceled(args)) {
            kl_err_set(err, NULL, "gemm: cancelled");
            return KL_ECANCELED;
        }
        int64_t rows = r + step < m ? step : m - r;
        panel(args, rows, n, k, alpha, (const float *)a->data + r * k, b->data, C + r * n);
    }
    if (kl__canceled(args)) { /* the fallback stops mid-panel, leaving C partial */
        kl_err_set(err, NULL, "gemm: cancelled");
        return KL_ECANCELED;
    }
    return 0;
}

const kl_kernel kl__gemm = {
    .name = "gemm",
    .doc = "c = alpha*a@b + beta*c on float32 matrices, row-major",
    .params = params,
    .nparams = 2,
    .inputs = inputs,
    .ninputs = 3,
    .outputs = outputs,
    .noutputs = 1,
    .check = gemm_check,
    .run_cpu = gemm_run_cpu,
};
