/* test_kl_kernels.c — each CPU kernel against a naive reference (long double
 * reductions, a triple-loop gemm), the shape checks of each kernel, and the
 * cancel flag. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kl.h"
#include "kl_test_clock.h"
#include "kl_kernels.h"
#include "kl_test_args.h"

#define KL_TEST_SEED 0x9e3779b97f4a7c15ull
#include "kl_test_rand.h"

static void given(kl_args *a, int i, double v)
{
    a->params[i] = (kl_value){.num = v, .given = 1};
}

/* ---- saxpy ---- */

static void saxpy_matches_reference(int64_t n, int threads)
{
    float *x = frand_array(n), *y = frand_array(n);
    kl_tensor tx = tensor(x, 1, n, 0, 0), ty = tensor(y, 1, n, 0, 0), out[1];
    kl_args a = args_for("saxpy");
    given(&a, KL_SAXPY_A, -1.75);
    a.inputs[KL_SAXPY_X] = &tx;
    a.inputs[KL_SAXPY_Y] = &ty;
    a.threads = threads;
    kl_args_defaults(&a);
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), 0);
    assert_int_equal(out[0].ndim, 1);
    assert_int_equal(out[0].shape[0], n);
    const float *o = out[0].data;
    for (int64_t i = 0; i < n; i++) {
        double ref = -1.75 * (double)x[i] + (double)y[i];
        assert_true(fabs(o[i] - ref) <= 1e-6 + 1e-6 * fabs(ref));
    }
    kl_tensor_free(&out[0]);
    free(x);
    free(y);
}

static void saxpy_small_matches_reference(void **state)
{
    (void)state;
    saxpy_matches_reference(1001, 0);
    saxpy_matches_reference(0, 0);
}

static void saxpy_threaded_matches_reference(void **state)
{
    (void)state;
    saxpy_matches_reference((1 << 20) + 37, 3);
}

static void saxpy_rejects_vectors_of_different_lengths(void **state)
{
    (void)state;
    float x[4] = {0}, y[5] = {0};
    kl_tensor tx = tensor(x, 1, 4, 0, 0), ty = tensor(y, 1, 5, 0, 0), out[1];
    kl_args a = args_for("saxpy");
    given(&a, KL_SAXPY_A, 1);
    a.inputs[KL_SAXPY_X] = &tx;
    a.inputs[KL_SAXPY_Y] = &ty;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.y");
    assert_string_equal(err.message, "inputs.y has shape [5]; saxpy needs [n] with n = 4 from inputs.x");
}

static void saxpy_stops_when_cancelled(void **state)
{
    (void)state;
    int64_t n = 1 << 20;
    float *x = frand_array(n), *y = frand_array(n);
    kl_tensor tx = tensor(x, 1, n, 0, 0), ty = tensor(y, 1, n, 0, 0), out[1];
    volatile int cancel = 1;
    kl_args a = args_for("saxpy");
    given(&a, KL_SAXPY_A, 1);
    a.inputs[KL_SAXPY_X] = &tx;
    a.inputs[KL_SAXPY_Y] = &ty;
    a.cancel = &cancel;
    assert_int_equal(kl_run_cpu(&a, out, NULL), KL_ECANCELED);
    assert_null(out[0].data);
    free(x);
    free(y);
}

/* ---- reduce ---- */

static float reduce_run(float *x, int ndim, int64_t d0, int64_t d1, int64_t d2, kl_reduce_op op, int threads)
{
    kl_tensor tx = tensor(x, ndim, d0, d1, d2), out[1];
    kl_args a = args_for("reduce");
    a.params[KL_REDUCE_OP] = (kl_value){.choice = op, .given = 1};
    a.inputs[KL_REDUCE_X] = &tx;
    a.threads = threads;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), 0);
    assert_int_equal(out[0].ndim, 1);
    assert_int_equal(out[0].shape[0], 1);
    float v = ((float *)out[0].data)[0];
    kl_tensor_free(&out[0]);
    return v;
}

static void reduce_matches_long_double_reference(void **state)
{
    (void)state;
    const int64_t d0 = 33, d1 = 129, d2 = 257; /* rank 3, past the threading threshold */
    const int64_t n = d0 * d1 * d2;
    float *x = frand_array(n);
    long double sum = 0, abs_sum = 0;
    float mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        sum += x[i];
        abs_sum += fabsl((long double)x[i]);
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    /* One float32 rounding of the result, plus a double-sized error. */
    double tol = 1e-12 * (double)abs_sum;
    float s = reduce_run(x, 3, d0, d1, d2, KL_REDUCE_SUM, 4);
    assert_true(fabs(s - (double)sum) <= tol + fabs((double)sum) * 0x1p-24);
    float m = reduce_run(x, 3, d0, d1, d2, KL_REDUCE_MEAN, 4);
    assert_true(fabs(m - (double)(sum / n)) <= tol / n + fabs((double)(sum / n)) * 0x1p-24);
    assert_true(reduce_run(x, 3, d0, d1, d2, KL_REDUCE_MIN, 4) == mn);
    assert_true(reduce_run(x, 3, d0, d1, d2, KL_REDUCE_MAX, 4) == mx);
    assert_true(reduce_run(x, 1, 7, 0, 0, KL_REDUCE_MIN, 0) <= x[0]);
    free(x);
}

static void reduce_sum_keeps_small_terms_next_to_large_ones(void **state)
{
    (void)state;
    /* A float32 accumulator stops growing at 2^24; double keeps every 1. */
    const int64_t n = (1 << 21) + 2;
    float *x = malloc(sizeof(float) * n);
    assert_non_null(x);
    x[0] = 1e8f;
    for (int64_t i = 1; i < n - 1; i++)
        x[i] = 1.0f;
    x[n - 1] = -1e8f;
    assert_true(reduce_run(x, 1, n, 0, 0, KL_REDUCE_SUM, 2) == (float)(n - 2));
    free(x);
}

static void reduce_sum_does_not_depend_on_thread_count(void **state)
{
    (void)state;
    const int64_t n = (3 << 20) + 11;
    float *x = frand_array(n);
    float one = reduce_run(x, 1, n, 0, 0, KL_REDUCE_SUM, 1);
    assert_true(reduce_run(x, 1, n, 0, 0, KL_REDUCE_SUM, 2) == one);
    assert_true(reduce_run(x, 1, n, 0, 0, KL_REDUCE_SUM, 7) == one);
    free(x);
}

static void reduce_min_and_max_propagate_nan(void **state)
{
    (void)state;
    float x[19];
    for (int i = 0; i < 19; i++)
        x[i] = (float)i;
    x[11] = NAN;
    assert_true(isnan(reduce_run(x, 1, 19, 0, 0, KL_REDUCE_MIN, 1)));
    assert_true(isnan(reduce_run(x, 1, 19, 0, 0, KL_REDUCE_MAX, 1)));
    assert_true(isnan(reduce_run(x, 1, 19, 0, 0, KL_REDUCE_SUM, 1)));
}

static void reduce_rejects_an_empty_tensor(void **state)
{
    (void)state;
    float x[1];
    kl_tensor tx = tensor(x, 2, 4, 0, 0), out[1];
    kl_args a = args_for("reduce");
    kl_args_defaults(&a);
    a.inputs[KL_REDUCE_X] = &tx;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.x");
}

/* ---- gemm ---- */

/* c = alpha * a@b + beta * c, the textbook triple loop in long double. */
static void gemm_naive(int64_t m, int64_t n, int64_t k, double alpha, const float *a, const float *b,
                       double beta, const float *c, double *out)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            long double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += (long double)a[i * k + p] * b[p * n + j];
            out[i * n + j] = (double)(alpha * acc + (c ? beta * c[i * n + j] : 0));
        }
}

static void gemm_matches_naive(int64_t m, int64_t n, int64_t k, int with_c, int use_defaults)
{
    float *A = frand_array(m * k), *B = frand_array(k * n), *C = with_c ? frand_array(m * n) : NULL;
    double *ref = malloc(sizeof(double) * (size_t)(m * n + 1));
    double alpha = use_defaults ? 1 : 1.5, beta = use_defaults ? 0 : -0.75;
    kl_tensor ta = tensor(A, 2, m, k, 0), tb = tensor(B, 2, k, n, 0), tc = tensor(C, 2, m, n, 0), out[1];
    kl_args a = args_for("gemm");
    if (!use_defaults) {
        given(&a, KL_GEMM_ALPHA, alpha);
        given(&a, KL_GEMM_BETA, beta);
    }
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    a.inputs[KL_GEMM_C] = with_c ? &tc : NULL;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), 0);
    assert_int_equal(out[0].shape[0], m);
    assert_int_equal(out[0].shape[1], n);
    gemm_naive(m, n, k, alpha, A, B, beta, C, ref);
    const float *o = out[0].data;
    for (int64_t i = 0; i < m * n; i++)
        assert_true(fabs(o[i] - ref[i]) <= 1e-5 * (double)(k + 1) + 1e-5 * fabs(ref[i]));
    kl_tensor_free(&out[0]);
    free(A);
    free(B);
    free(C);
    free(ref);
}

static void gemm_with_alpha_beta_and_c_matches_naive(void **state)
{
    (void)state;
    gemm_matches_naive(37, 29, 53, 1, 0);
    gemm_matches_naive(1, 1, 1, 1, 0);
    gemm_matches_naive(130, 70, 300, 1, 0);
}

static void gemm_defaults_to_alpha_one_beta_zero(void **state)
{
    (void)state;
    gemm_matches_naive(64, 48, 32, 0, 1);
    gemm_matches_naive(17, 19, 23, 1, 1); /* beta = 0 ignores the c given */
}

static void gemm_with_empty_inner_dimension_gives_beta_c(void **state)
{
    (void)state;
    gemm_matches_naive(5, 4, 0, 1, 0);
    gemm_matches_naive(0, 4, 3, 0, 0);
}

static void gemm_rejects_inner_dimension_mismatch(void **state)
{
    (void)state;
    float A[10], B[12];
    kl_tensor ta = tensor(A, 2, 2, 5, 0), tb = tensor(B, 2, 3, 4, 0), out[1];
    kl_args a = args_for("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.b");
    assert_string_equal(err.message, "inputs.b has shape [3,4]; gemm needs [k,n] with k = 5 from inputs.a");
}

static void gemm_rejects_c_of_the_wrong_shape(void **state)
{
    (void)state;
    float A[6], B[12], C[6];
    kl_tensor ta = tensor(A, 2, 2, 3, 0), tb = tensor(B, 2, 3, 4, 0), tc = tensor(C, 2, 3, 2, 0), out[1];
    kl_args a = args_for("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    a.inputs[KL_GEMM_C] = &tc;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.c");
    assert_non_null(strstr(err.message, "[m,n] = [2,4]"));
}

static void gemm_rejects_an_output_past_the_limit(void **state)
{
    (void)state;
    kl_tensor ta = {.dtype = KL_F32, .ndim = 2, .shape = {1 << 20, 1}};
    kl_tensor tb = {.dtype = KL_F32, .ndim = 2, .shape = {1, 1 << 20}};
    kl_args a = args_for("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    kl_err err = {0};
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_non_null(strstr(err.message, "output c"));
}

static void gemm_stops_when_cancelled(void **state)
{
    (void)state;
    float *A = frand_array(64 * 64), *B = frand_array(64 * 64);
    kl_tensor ta = tensor(A, 2, 64, 64, 0), tb = tensor(B, 2, 64, 64, 0), out[1];
    volatile int cancel = 1;
    kl_args a = args_for("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    a.cancel = &cancel;
    assert_int_equal(kl_run_cpu(&a, out, NULL), KL_ECANCELED);
    assert_null(out[0].data);
    free(A);
    free(B);
}

/* ---- sleep ---- */

static void sleep_reports_the_time_slept(void **state)
{
    (void)state;
    kl_tensor out[1];
    kl_args a = args_for("sleep");
    given(&a, KL_SLEEP_SECONDS, 0.12);
    double t0 = now_s();
    assert_int_equal(kl_run_cpu(&a, out, NULL), 0);
    double took = now_s() - t0;
    float slept = ((float *)out[0].data)[0];
    assert_true(slept >= 0.12f && slept <= took + 1e-3);
    assert_true(took < 0.5);
    kl_tensor_free(&out[0]);

    given(&a, KL_SLEEP_SECONDS, 0);
    assert_int_equal(kl_run_cpu(&a, out, NULL), 0);
    assert_true(((float *)out[0].data)[0] < 0.01f);
    kl_tensor_free(&out[0]);
}

static void sleep_honours_cancel_within_50ms(void **state)
{
    (void)state;
    volatile int cancel = 0;
    kl_tensor out[1];
    kl_args a = args_for("sleep");
    given(&a, KL_SLEEP_SECONDS, 10);
    a.cancel = &cancel;
    kl_err err = {0};
    double took;
    assert_int_equal(kl_test_run_cancelled(&a, 100, out, &err, &took), KL_ECANCELED);
    assert_true(took >= 0.1 && took < 0.1 + 0.05 + 0.03); /* 30 ms of scheduling slack */
    assert_null(out[0].data);
    assert_non_null(strstr(err.message, "cancelled"));
}

/* ---- progress ---- */

typedef struct count_sink {
    kl_progress_sink sink;
    int n;
    double last_fraction;
} count_sink;

static void count_report(kl_progress_sink *sink, const kl_progress *p)
{
    count_sink *c = (count_sink *)sink;
    c->n++;
    c->last_fraction = p->fraction;
}

static void progress_reports_are_throttled_but_the_last_always_goes(void **state)
{
    (void)state;
    count_sink c = {.sink = {.report = count_report}};
    kl_progress p = {.fraction = 0.1};
    kl_progress_report(&c.sink, &p);
    assert_int_equal(c.n, 1); /* the first goes at once */
    p.fraction = 0.2;
    kl_progress_report(&c.sink, &p);
    assert_int_equal(c.n, 1); /* within KL_PROGRESS_EVERY_MS: dropped */
    p.fraction = 1.0;
    kl_progress_report(&c.sink, &p);
    assert_int_equal(c.n, 2); /* the end is never dropped */
    struct timespec ts = {0, (KL_PROGRESS_EVERY_MS + 20) * 1000000L};
    nanosleep(&ts, NULL);
    p.fraction = 0.5;
    kl_progress_report(&c.sink, &p);
    assert_int_equal(c.n, 3);
    assert_true(c.last_fraction == 0.5);
    kl_progress_report(NULL, &p); /* no sink: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(saxpy_small_matches_reference),
        cmocka_unit_test(saxpy_threaded_matches_reference),
        cmocka_unit_test(saxpy_rejects_vectors_of_different_lengths),
        cmocka_unit_test(saxpy_stops_when_cancelled),
        cmocka_unit_test(reduce_matches_long_double_reference),
        cmocka_unit_test(reduce_sum_keeps_small_terms_next_to_large_ones),
        cmocka_unit_test(reduce_sum_does_not_depend_on_thread_count),
        cmocka_unit_test(reduce_min_and_max_propagate_nan),
        cmocka_unit_test(reduce_rejects_an_empty_tensor),
        cmocka_unit_test(gemm_with_alpha_beta_and_c_matches_naive),
        cmocka_unit_test(gemm_defaults_to_alpha_one_beta_zero),
        cmocka_unit_test(gemm_with_empty_inner_dimension_gives_beta_c),
        cmocka_unit_test(gemm_rejects_inner_dimension_mismatch),
        cmocka_unit_test(gemm_rejects_c_of_the_wrong_shape),
        cmocka_unit_test(gemm_rejects_an_output_past_the_limit),
        cmocka_unit_test(gemm_stops_when_cancelled),
        cmocka_unit_test(sleep_reports_the_time_slept),
        cmocka_unit_test(sleep_honours_cancel_within_50ms),
        cmocka_unit_test(progress_reports_are_throttled_but_the_last_always_goes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
