/* test_kl_gemm.c — gemm's precision param and batched form on the CPU:
 * batches against a triple loop in long double; info.precision is fp32
 * whatever was asked; mixed ranks and batch mismatches are refused naming
 * the field. Each case runs twice: on the catalog's gemm (OpenBLAS) and on
 * kl__gemm_blocked, the blocked C loop that a KL_NO_BLAS build runs: the
 * CPU reference of tests/gpu, whose machine has no OpenBLAS. The
 * rank-2 cases of v0 live in test_kl_kernels.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kl.h"
#include "kl_kernels.h"

/* The gemm under test: the catalog's, then the fallback (see main). */
static const kl_kernel *kernel;

static int on_openblas(void **state)
{
    (void)state;
    kernel = kl_kernel_find("gemm");
    return 0;
}

static int on_fallback(void **state)
{
    (void)state;
    kernel = &kl__gemm_blocked;
    return 0;
}

#define KL_TEST_SEED 0x2545f4914f6cdd1dull
#include "kl_test_rand.h"

static kl_args gemm_args(void)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kernel;
    assert_non_null(a.kernel);
    return a;
}

static void given_num(kl_args *a, int i, double v)
{
    a->params[i] = (kl_value){.num = v, .given = 1};
}

static void given_precision(kl_args *a, kl_gemm_precision p)
{
    a->params[KL_GEMM_PRECISION] = (kl_value){.choice = (int)p, .given = 1};
}

static const char *info_get(const kl_info *info, const char *key)
{
    for (int i = 0; i < info->n; i++)
        if (strcmp(info->kv[i].key, key) == 0)
            return info->kv[i].value;
    return NULL;
}

/* out[b] = alpha * a[b]@b[b] + beta * c[b], the textbook triple loop in long double. */
static void gemm_naive(int64_t batch, int64_t m, int64_t n, int64_t k, double alpha, const float *a,
                       const float *b, double beta, const float *c, double *out)
{
    for (int64_t t = 0; t < batch; t++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                long double acc = 0;
                for (int64_t p = 0; p < k; p++)
                    acc += (long double)a[(t * m + i) * k + p] * b[(t * k + p) * n + j];
                out[(t * m + i) * n + j] = (double)(alpha * acc + (c ? beta * c[(t * m + i) * n + j] : 0));
            }
}

/* A gemm against gemm_naive on `threads`: rank 3 everywhere, or with
 * batch = -1 rank 2. */
static void batched_matches_naive(int64_t batch, int64_t m, int64_t n, int64_t k, int with_c, int threads)
{
    const int ndim = batch < 0 ? 2 : 3;
    batch = batch < 0 ? 1 : batch;
    float *A = frand_array(batch * m * k), *B = frand_array(batch * k * n);
    float *C = with_c ? frand_array(batch * m * n) : NULL;
    double *ref = malloc(sizeof(double) * (size_t)(batch * m * n + 1));
    assert_non_null(ref);
    const double alpha = 1.5, beta = with_c ? -0.75 : 0;
    kl_tensor ta = tensor(A, 3, batch, m, k), tb = tensor(B, 3, batch, k, n), tc = tensor(C, 3, batch, m, n);
    kl_tensor out[1];
    if (ndim == 2) {
        ta = tensor(A, 2, m, k, 0), tb = tensor(B, 2, k, n, 0), tc = tensor(C, 2, m, n, 0);
    }
    kl_args a = gemm_args();
    given_num(&a, KL_GEMM_ALPHA, alpha);
    given_num(&a, KL_GEMM_BETA, beta);
    kl_args_defaults(&a);
    a.threads = threads;
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    a.inputs[KL_GEMM_C] = with_c ? &tc : NULL;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), 0);
    assert_int_equal(out[0].ndim, ndim);
    if (ndim == 3)
        assert_int_equal(out[0].shape[0], batch);
    assert_int_equal(out[0].shape[ndim - 2], m);
    assert_int_equal(out[0].shape[ndim - 1], n);
    gemm_naive(batch, m, n, k, alpha, A, B, beta, C, ref);
    const float *o = out[0].data;
    for (int64_t i = 0; i < batch * m * n; i++)
        if (!(fabs(o[i] - ref[i]) <= 1e-5 * (double)(k + 1) + 1e-5 * fabs(ref[i])))
            fail_msg("%s: batch %lld %lldx%lldx%lld: element %lld is %.9g, want %.9g",
                     kernel == &kl__gemm_blocked ? "no-BLAS fallback" : "OpenBLAS", (long long)batch,
                     (long long)m, (long long)n, (long long)k, (long long)i, o[i], ref[i]);
    kl_tensor_free(&out[0]);
    free(A);
    free(B);
    free(C);
    free(ref);
}

static void param_and_input_indices_agree_with_the_spec(void **state)
{
    (void)state;
    const kl_kernel *g = kernel;
    assert_int_equal(kl_param_index(g, "alpha"), KL_GEMM_ALPHA);
    assert_int_equal(kl_param_index(g, "beta"), KL_GEMM_BETA);
    assert_int_equal(kl_param_index(g, "precision"), KL_GEMM_PRECISION);
    const kl_param_spec *p = &g->params[KL_GEMM_PRECISION];
    assert_int_equal(p->type, KL_PARAM_ENUM);
    assert_int_equal(p->def_choice, KL_GEMM_FP32);
    assert_string_equal(p->choices[KL_GEMM_FP32], "fp32");
    assert_string_equal(p->choices[KL_GEMM_TF32], "tf32");
    assert_string_equal(p->choices[KL_GEMM_BF16], "bf16");
    assert_null(p->choices[3]);
    assert_string_equal(g->inputs[KL_GEMM_A].shape_doc, "[m,k] or [batch,m,k]");
    assert_string_equal(g->inputs[KL_GEMM_B].shape_doc, "[k,n] or [batch,k,n]");
    assert_string_equal(g->inputs[KL_GEMM_C].shape_doc, "[m,n] or [batch,m,n]");
    assert_string_equal(g->outputs[0].shape_doc, "[m,n] or [batch,m,n]");
}

static void rank_two_matches_naive(void **state)
{
    (void)state;
    batched_matches_naive(-1, 130, 70, 300, 1, 0);
    batched_matches_naive(-1, 37, 29, 53, 0, 1);
    batched_matches_naive(-1, 1, 1, 1, 1, 0);
}

static void batched_matches_naive_for_large_and_small_matrices(void **state)
{
    (void)state;
    batched_matches_naive(3, 130, 70, 300, 1, 0); /* a BLAS call per matrix */
    batched_matches_naive(1, 37, 29, 53, 1, 0);
    batched_matches_naive(2, 1, 1, 1, 0, 0);
    batched_matches_naive(5, 4, 7, 3, 0, 1);
}

static void many_small_matrices_split_over_threads_match_naive(void **state)
{
    (void)state;
    batched_matches_naive(301, 8, 9, 7, 1, 2);    /* the batch split across threads */
    batched_matches_naive(97, 64, 64, 64, 0, 3);  /* at OpenBLAS's one-thread threshold */
    batched_matches_naive(1000, 2, 3, 5, 1, 0);
}

static void batched_with_an_empty_dimension_gives_beta_c(void **state)
{
    (void)state;
    batched_matches_naive(4, 5, 6, 0, 1, 0); /* k = 0: beta*c */
    batched_matches_naive(4, 0, 6, 3, 1, 0);
    batched_matches_naive(0, 5, 6, 3, 1, 0); /* an empty batch: c of shape [0,5,6] */
}

/* Each precision on the CPU: the same fp32 result, bit for bit, and an info
 * that says fp32 ran (and what was asked, when it was not fp32). */
static void every_precision_runs_fp32_on_the_cpu_and_says_so(void **state)
{
    (void)state;
    const int64_t m = 33, n = 17, k = 65;
    float *A = frand_array(m * k), *B = frand_array(k * n);
    kl_tensor ta = tensor(A, 2, m, k, 0), tb = tensor(B, 2, k, n, 0), ref[1], out[1];
    kl_info info = {0};
    kl_args a = gemm_args();
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    a.info = &info;
    assert_int_equal(kl_run_cpu(&a, ref, NULL), 0);
    assert_string_equal(info_get(&info, "precision"), "fp32");
    assert_null(info_get(&info, "requested_precision"));

    static const struct {
        kl_gemm_precision p;
        const char *requested;
    } cases[] = {{KL_GEMM_FP32, NULL}, {KL_GEMM_TF32, "tf32"}, {KL_GEMM_BF16, "bf16"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&info, 0, sizeof info);
        given_precision(&a, cases[i].p);
        assert_int_equal(kl_run_cpu(&a, out, NULL), 0);
        assert_memory_equal(out[0].data, ref[0].data, sizeof(float) * (size_t)(m * n));
        assert_string_equal(info_get(&info, "precision"), "fp32");
        if (cases[i].requested)
            assert_string_equal(info_get(&info, "requested_precision"), cases[i].requested);
        else
            assert_null(info_get(&info, "requested_precision"));
        kl_tensor_free(&out[0]);
    }
    a.info = NULL; /* no info wanted: nothing to fill */
    assert_int_equal(kl_run_cpu(&a, out, NULL), 0);
    kl_tensor_free(&out[0]);
    kl_tensor_free(&ref[0]);
    free(A);
    free(B);
}

static void precision_outside_the_choices_is_refused(void **state)
{
    (void)state;
    float A[4], B[4];
    kl_tensor ta = tensor(A, 2, 2, 2, 0), tb = tensor(B, 2, 2, 2, 0);
    kl_args a = gemm_args();
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    kl_err err = {0};
    a.params[KL_GEMM_PRECISION] = (kl_value){.choice = 3, .given = 1};
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "params.precision");
    assert_non_null(strstr(err.message, "fp32, tf32, bf16"));
    a.params[KL_GEMM_PRECISION] = (kl_value){.choice = -1, .given = 0}; /* defaults never filled in */
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "params.precision");
}

/* Shapes only: kl_args_check reads no data. */
static void expect_refused(const kl_tensor *ta, const kl_tensor *tb, const kl_tensor *tc, const char *field,
                           const char *fragment)
{
    kl_args a = gemm_args();
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = ta;
    a.inputs[KL_GEMM_B] = tb;
    a.inputs[KL_GEMM_C] = tc;
    kl_err err = {0};
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, field);
    if (!strstr(err.message, fragment))
        fail_msg("message \"%s\" lacks \"%s\"", err.message, fragment);
}

static void mixed_ranks_are_refused_naming_the_field(void **state)
{
    (void)state;
    kl_tensor a2 = tensor(NULL, 2, 2, 3, 0), b2 = tensor(NULL, 2, 3, 4, 0), c2 = tensor(NULL, 2, 2, 4, 0);
    kl_tensor a3 = tensor(NULL, 3, 5, 2, 3), b3 = tensor(NULL, 3, 5, 3, 4), c3 = tensor(NULL, 3, 5, 2, 4);
    expect_refused(&a3, &b2, NULL, "inputs.b", "inputs.b has rank 2 and inputs.a rank 3");
    expect_refused(&a2, &b3, NULL, "inputs.b", "inputs.b has rank 3 and inputs.a rank 2");
    expect_refused(&a2, &b2, &c3, "inputs.c", "inputs.c has rank 3 and inputs.a rank 2");
    expect_refused(&a3, &b3, &c2, "inputs.c", "all of rank 3 ([batch,m,k], [batch,k,n], [batch,m,n])");
    kl_tensor a4 = {.dtype = KL_F32, .ndim = 4, .shape = {1, 5, 2, 3}};
    expect_refused(&a4, &b3, NULL, "inputs.a", "rank 2 to 3");
}

static void batch_mismatches_are_refused_naming_the_field(void **state)
{
    (void)state;
    kl_tensor a = tensor(NULL, 3, 5, 2, 3), b = tensor(NULL, 3, 4, 3, 4), c = tensor(NULL, 3, 5, 2, 4);
    expect_refused(&a, &b, NULL, "inputs.b", "inputs.b has shape [4,3,4]; gemm needs [batch,k,n] with batch = 5");
    kl_tensor b_ok = tensor(NULL, 3, 5, 3, 4), c_bad = tensor(NULL, 3, 6, 2, 4);
    expect_refused(&a, &b_ok, &c_bad, "inputs.c", "[batch,m,n] = [5,2,4]");
    kl_tensor b_inner = tensor(NULL, 3, 5, 7, 4);
    expect_refused(&a, &b_inner, &c, "inputs.b", "inputs.b has shape [5,7,4]; gemm needs [batch,k,n] with k = 3");
    kl_tensor c_mn = tensor(NULL, 3, 5, 4, 2);
    expect_refused(&a, &b_ok, &c_mn, "inputs.c", "inputs.c has shape [5,4,2]");
}

static void batched_output_past_the_limit_is_refused_without_overflow(void **state)
{
    (void)state;
    /* Every input within the limit, the output 2^10 times past it. */
    kl_tensor a = tensor(NULL, 3, 1 << 10, 1 << 15, 1), b = tensor(NULL, 3, 1 << 10, 1, 1 << 15);
    expect_refused(&a, &b, NULL, "inputs.b", "output c");
    kl_tensor a1 = tensor(NULL, 3, (int64_t)1 << 30, 1, 1), b1 = tensor(NULL, 3, (int64_t)1 << 30, 1, 1);
    kl_args g = gemm_args();
    kl_args_defaults(&g);
    g.inputs[KL_GEMM_A] = &a1;
    g.inputs[KL_GEMM_B] = &b1;
    assert_int_equal(kl_args_check(&g, NULL), 0); /* exactly at the limit */
}

static void batched_stops_when_cancelled(void **state)
{
    (void)state;
    static const int64_t sizes[][4] = {{4, 64, 64, 64}, {50, 8, 8, 8}, {2, 300, 300, 300}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t batch = sizes[s][0], m = sizes[s][1], n = sizes[s][2], k = sizes[s][3];
        float *A = frand_array(batch * m * k), *B = frand_array(batch * k * n);
        kl_tensor ta = tensor(A, 3, batch, m, k), tb = tensor(B, 3, batch, k, n), out[1];
        volatile int cancel = 1;
        kl_info info = {0};
        kl_args a = gemm_args();
        kl_args_defaults(&a);
        a.threads = 2;
        a.inputs[KL_GEMM_A] = &ta;
        a.inputs[KL_GEMM_B] = &tb;
        a.cancel = &cancel;
        a.info = &info;
        assert_int_equal(kl_run_cpu(&a, out, NULL), KL_ECANCELED);
        assert_null(out[0].data);
        assert_null(info_get(&info, "precision")); /* a run that did not finish says nothing */
        free(A);
        free(B);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(param_and_input_indices_agree_with_the_spec),
        cmocka_unit_test(rank_two_matches_naive),
        cmocka_unit_test(batched_matches_naive_for_large_and_small_matrices),
        cmocka_unit_test(many_small_matrices_split_over_threads_match_naive),
        cmocka_unit_test(batched_with_an_empty_dimension_gives_beta_c),
        cmocka_unit_test(every_precision_runs_fp32_on_the_cpu_and_says_so),
        cmocka_unit_test(precision_outside_the_choices_is_refused),
        cmocka_unit_test(mixed_ranks_are_refused_naming_the_field),
        cmocka_unit_test(batch_mismatches_are_refused_naming_the_field),
        cmocka_unit_test(batched_output_past_the_limit_is_refused_without_overflow),
        cmocka_unit_test(batched_stops_when_cancelled),
    };
    int failed = cmocka_run_group_tests_name("gemm on OpenBLAS", tests, on_openblas, NULL);
    return failed + cmocka_run_group_tests_name("gemm on the no-BLAS fallback", tests, on_fallback, NULL);
}
