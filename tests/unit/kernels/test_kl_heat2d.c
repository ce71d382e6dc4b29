/* test_kl_heat2d.c — the CPU heat2d against a direct loop written from the
 * formula (bit for bit: same float32 operations in the same order), its
 * boundary, residual and constant-grid properties, threads and cancel, and
 * the checks that name the offending field. */
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

/* The direct loop rounds every operation apart, as the kernel does. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define KL_TEST_SEED 0x2545f4914f6cdd1dull
#include "kl_test_rand.h"

static kl_tensor grid_tensor(float *data, int64_t h, int64_t w)
{
    kl_tensor t = {.dtype = KL_F32, .ndim = 2, .shape = {h, w}, .data = data};
    return t;
}

static kl_args heat_args(const kl_tensor *grid, double alpha, double steps, int threads)
{
    kl_args a = args_for("heat2d");
    a.params[KL_HEAT2D_ALPHA] = (kl_value){.num = alpha, .given = 1};
    a.params[KL_HEAT2D_STEPS] = (kl_value){.num = steps, .given = 1};
    a.inputs[KL_HEAT2D_GRID] = grid;
    a.threads = threads;
    return a;
}

/* The formula as the issue states it, one cell at a time; returns the
 * residual of the last step. u is updated in place (h,w). */
static float naive_heat(float *u, int64_t h, int64_t w, float a, int steps)
{
    float *v = malloc(sizeof(float) * (size_t)(h * w));
    assert_non_null(v);
    float resid = 0;
    int nan = 0;
    for (int s = 0; s < steps; s++) {
        memcpy(v, u, sizeof(float) * (size_t)(h * w));
        resid = 0;
        nan = 0;
        for (int64_t r = 1; r < h - 1; r++)
            for (int64_t c = 1; c < w - 1; c++) {
                float old = u[r * w + c];
                float n = u[(r - 1) * w + c], so = u[(r + 1) * w + c];
                float we = u[r * w + c - 1], e = u[r * w + c + 1];
                float lap = ((n + so) + (we + e)) - 4.0f * old;
                float nu = old + a * lap;
                v[r * w + c] = nu;
                float d = fabsf(nu - old);
                if (d != d)
                    nan = 1;
                else if (d > resid)
                    resid = d;
            }
        memcpy(u, v, sizeof(float) * (size_t)(h * w));
    }
    free(v);
    return nan ? NAN : resid;
}

static void run_ok(const kl_args *a, kl_tensor out[2])
{
    kl_err err = {0};
    int rc = kl_run_cpu(a, out, &err);
    if (rc != 0)
        fail_msg("heat2d failed: %d %s: %s", rc, err.field, err.message);
    assert_int_equal(out[0].ndim, 2);
    assert_int_equal(out[1].ndim, 1);
    assert_int_equal(out[1].shape[0], 1);
}

static void matches_naive(int64_t h, int64_t w, double alpha, int steps, int threads)
{
    float *g = frand_array(h * w);
    float *ref = malloc(sizeof(float) * (size_t)(h * w));
    assert_non_null(ref);
    memcpy(ref, g, sizeof(float) * (size_t)(h * w));
    float ref_resid = naive_heat(ref, h, w, (float)alpha, steps);

    kl_tensor tg = grid_tensor(g, h, w), out[2];
    kl_args a = heat_args(&tg, alpha, steps, threads);
    run_ok(&a, out);
    assert_int_equal(out[0].shape[0], h);
    assert_int_equal(out[0].shape[1], w);
    const float *o = out[0].data;
    for (int64_t i = 0; i < h * w; i++)
        if (memcmp(&o[i], &ref[i], sizeof(float)) != 0)
            fail_msg("%lldx%lld steps %d threads %d: cell (%lld,%lld) is %.9g, the direct loop gives %.9g",
                     (long long)h, (long long)w, steps, threads, (long long)(i / w), (long long)(i % w), o[i],
                     ref[i]);
    float got_resid = ((float *)out[1].data)[0];
    if (memcmp(&got_resid, &ref_resid, sizeof(float)) != 0)
        fail_msg("%lldx%lld steps %d: residual %.9g, the direct loop gives %.9g", (long long)h, (long long)w,
                 steps, got_resid, ref_resid);
    kl_tensor_free(&out[0]);
    kl_tensor_free(&out[1]);
    free(ref);
    free(g);
}

static void heat2d_small_grids_match_direct_loop_bit_for_bit(void **state)
{
    (void)state;
    matches_naive(3, 3, 0.25, 1, 1);
    matches_naive(3, 3, 0.1, 7, 1);
    matches_naive(3, 41, 0.2, 5, 1);  /* one interior row */
    matches_naive(41, 3, 0.2, 5, 1);  /* one interior column */
    matches_naive(17, 29, 0.25, 1, 1);
    matches_naive(17, 29, 0.13, 64, 1); /* even step count: result from the other buffer */
    matches_naive(17, 29, 0.13, 63, 1);
    matches_naive(64, 75, 1e-3, 10, 0);
}

/* Grids past the threading threshold, several bands per step, with band
 * and vector-block edges that do not line up. */
static void heat2d_threaded_grids_match_direct_loop_bit_for_bit(void **state)
{
    (void)state;
    matches_naive(300, 701, 0.21, 9, 2);
    matches_naive(300, 701, 0.21, 10, 3);
    matches_naive(1030, 67, 0.25, 4, 0);
    matches_naive(70, 5000, 0.05, 3, 8); /* more threads than cores */
}

static void heat2d_boundary_cells_are_unchanged(void **state)
{
    (void)state;
    const int64_t h = 33, w = 47;
    float *g = frand_array(h * w);
    kl_tensor tg = grid_tensor(g, h, w), out[2];
    kl_args a = heat_args(&tg, 0.25, 100, 0);
    run_ok(&a, out);
    const float *o = out[0].data;
    int changed_inside = 0;
    for (int64_t r = 0; r < h; r++)
        for (int64_t c = 0; c < w; c++) {
            int edge = r == 0 || r == h - 1 || c == 0 || c == w - 1;
            if (edge)
                assert_memory_equal(&o[r * w + c], &g[r * w + c], sizeof(float));
            else
                changed_inside += o[r * w + c] != g[r * w + c];
        }
    assert_true(changed_inside > (h - 2) * (w - 2) / 2);
    kl_tensor_free(&out[0]);
    kl_tensor_free(&out[1]);
    free(g);
}

/* A unit spike in a cold grid: one step gives 1 - 4a at the spike, a at its
 * four neighbours, and residual 4a (the spike's drop), exactly for a = 1/8. */
static void heat2d_single_spike_spreads_to_its_neighbours(void **state)
{
    (void)state;
    const int64_t h = 7, w = 9;
    float g[7 * 9] = {0};
    g[3 * w + 4] = 1;
    kl_tensor tg = grid_tensor(g, h, w), out[2];
    kl_args a = heat_args(&tg, 0.125, 1, 1);
    run_ok(&a, out);
    const float *o = out[0].data;
    for (int64_t r = 0; r < h; r++)
        for (int64_t c = 0; c < w; c++) {
            float want = 0;
            if (r == 3 && c == 4)
                want = 0.5f;
            else if ((r == 3 && (c == 3 || c == 5)) || (c == 4 && (r == 2 || r == 4)))
                want = 0.125f;
            assert_true(o[r * w + c] == want);
        }
    assert_true(((float *)out[1].data)[0] == 0.5f);
    kl_tensor_free(&out[0]);
    kl_tensor_free(&out[1]);
}

/* The residual is of the last step only: it equals max |u_n - u_(n-1)|
 * between the grids that runs of n and n-1 steps return, and after n = 30
 * steps it is well below the first step's. */
static void heat2d_residual_is_of_the_last_step(void **state)
{
    (void)state;
    const int64_t h = 12, w = 13;
    float *g = frand_array(h * w);
    kl_tensor tg = grid_tensor(g, h, w), out1[2], prev[2], last[2];
    kl_args a = heat_args(&tg, 0.2, 1, 1);
    run_ok(&a, out1);
    a = heat_args(&tg, 0.2, 29, 1);
    run_ok(&a, prev);
    a = heat_args(&tg, 0.2, 30, 1);
    run_ok(&a, last);
    float want = 0;
    for (int64_t i = 0; i < h * w; i++) {
        float d = fabsf(((float *)last[0].data)[i] - ((float *)prev[0].data)[i]);
        want = d > want ? d : want;
    }
    float r1 = ((float *)out1[1].data)[0], rn = ((float *)last[1].data)[0];
    assert_true(rn == want);
    assert_true(rn > 0 && rn < r1 * 0.5f);
    kl_tensor_free(&out1[0]);
    kl_tensor_free(&out1[1]);
    kl_tensor_free(&prev[0]);
    kl_tensor_free(&prev[1]);
    kl_tensor_free(&last[0]);
    kl_tensor_free(&last[1]);
    free(g);
}

static void heat2d_constant_grid_stays_constant_with_zero_residual(void **state)
{
    (void)state;
    const int64_t h = 260, w = 300; /* threaded */
    float *g = malloc(sizeof(float) * (size_t)(h * w));
    assert_non_null(g);
    for (int64_t i = 0; i < h * w; i++)
        g[i] = 3.7f;
    kl_tensor tg = grid_tensor(g, h, w), out[2];
    kl_args a = heat_args(&tg, 0.25, 25, 2);
    run_ok(&a, out);
    const float *o = out[0].data;
    for (int64_t i = 0; i < h * w; i++)
        assert_true(o[i] == 3.7f);
    assert_true(((float *)out[1].data)[0] == 0.0f);
    kl_tensor_free(&out[0]);
    kl_tensor_free(&out[1]);
    free(g);
}

static void heat2d_nan_in_grid_makes_residual_nan(void **state)
{
    (void)state;
    const int64_t h = 9, w = 40;
    float *g = frand_array(h * w);
    g[4 * w + 20] = NAN;
    kl_tensor tg = grid_tensor(g, h, w), out[2];
    kl_args a = heat_args(&tg, 0.2, 2, 1);
    run_ok(&a, out);
    assert_true(isnan(((float *)out[1].data)[0]));
    assert_true(isnan(((float *)out[0].data)[4 * w + 21]));
    kl_tensor_free(&out[0]);
    kl_tensor_free(&out[1]);
    free(g);
}

static void heat2d_steps_defaults_to_one(void **state)
{
    (void)state;
    float *g = frand_array(5 * 6), ref[30];
    memcpy(ref, g, sizeof ref);
    float ref_resid = naive_heat(ref, 5, 6, 0.2f, 1);
    kl_tensor tg = grid_tensor(g, 5, 6), out[2];
    kl_args a = heat_args(&tg, 0.2, 0, 1);
    a.params[KL_HEAT2D_STEPS].given = 0;
    kl_args_defaults(&a);
    run_ok(&a, out);
    assert_memory_equal(out[0].data, ref, sizeof ref);
    assert_true(((float *)out[1].data)[0] == ref_resid);
    kl_tensor_free(&out[0]);
    kl_tensor_free(&out[1]);
    free(g);
}

static void expect_einval(const kl_args *a, const char *field)
{
    kl_tensor out[2];
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(a, out, &err), KL_EINVAL);
    assert_string_equal(err.field, field);
    assert_non_null(strstr(err.message, field));
}

static void heat2d_rejects_alpha_out_of_range(void **state)
{
    (void)state;
    float g[9] = {0};
    kl_tensor tg = grid_tensor(g, 3, 3);
    kl_args a = heat_args(&tg, 0, 1, 1);
    expect_einval(&a, "params.alpha");
    a = heat_args(&tg, -0.1, 1, 1);
    expect_einval(&a, "params.alpha");
    a = heat_args(&tg, 0.2500001, 1, 1);
    expect_einval(&a, "params.alpha");
    a = heat_args(&tg, NAN, 1, 1);
    expect_einval(&a, "params.alpha");
    a = heat_args(&tg, 0, 1, 1);
    a.params[KL_HEAT2D_ALPHA].given = 0; /* required */
    expect_einval(&a, "params.alpha");
}

static void heat2d_rejects_steps_out_of_range(void **state)
{
    (void)state;
    float g[9] = {0};
    kl_tensor tg = grid_tensor(g, 3, 3);
    kl_args a = heat_args(&tg, 0.1, 0, 1);
    expect_einval(&a, "params.steps");
    a = heat_args(&tg, 0.1, 100001, 1);
    expect_einval(&a, "params.steps");
    a = heat_args(&tg, 0.1, 2.5, 1);
    expect_einval(&a, "params.steps");
}

static void heat2d_rejects_grids_of_wrong_shape_or_dtype(void **state)
{
    (void)state;
    float g[64] = {0};
    kl_tensor t = grid_tensor(g, 2, 5);
    kl_args a = heat_args(&t, 0.1, 1, 1);
    expect_einval(&a, "inputs.grid");
    t = grid_tensor(g, 5, 2);
    expect_einval(&a, "inputs.grid");
    t = grid_tensor(g, 0, 7);
    expect_einval(&a, "inputs.grid");
    t = (kl_tensor){.dtype = KL_F32, .ndim = 1, .shape = {9}, .data = g};
    expect_einval(&a, "inputs.grid");
    t = (kl_tensor){.dtype = KL_F32, .ndim = 3, .shape = {3, 3, 3}, .data = g};
    expect_einval(&a, "inputs.grid");
    t = grid_tensor(g, 4, 4);
    t.dtype = KL_F64;
    expect_einval(&a, "inputs.grid");
    a.inputs[KL_HEAT2D_GRID] = NULL;
    expect_einval(&a, "inputs.grid");

    kl_err err = {0};
    t = grid_tensor(g, 2, 5);
    a.inputs[KL_HEAT2D_GRID] = &t;
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.message, "inputs.grid has shape [2,5]; heat2d needs [h,w] with h >= 3 and w >= 3");
}

static void heat2d_cancel_raised_before_run_stops_it(void **state)
{
    (void)state;
    float *g = frand_array(64 * 64);
    volatile int cancel = 1;
    kl_tensor tg = grid_tensor(g, 64, 64), out[2];
    kl_args a = heat_args(&tg, 0.2, 1000, 1);
    a.cancel = &cancel;
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_ECANCELED);
    assert_null(out[0].data);
    assert_null(out[1].data);
    free(g);
}

/* 1000 x 1000 x 100000 steps would take minutes: a cancel after 50 ms
 * stops every thread within a band, single-threaded and threaded alike. */
static void heat2d_cancel_during_run_stops_every_thread(void **state)
{
    (void)state;
    float *g = frand_array(1000 * 1000);
    kl_tensor tg = grid_tensor(g, 1000, 1000), out[2];
    for (int threads = 1; threads <= 3; threads++) {
        volatile int cancel = 0;
        kl_args a = heat_args(&tg, 0.2, 100000, threads);
        a.cancel = &cancel;
        kl_err err = {0};
        double took;
        int rc = kl_test_run_cancelled(&a, 50, out, &err, &took);
        assert_int_equal(rc, KL_ECANCELED);
        assert_string_equal(err.message, "heat2d: cancelled");
        assert_true(took < 0.05 + 0.25);
    }
    free(g);
}

static void heat2d_spec_indices_match_the_catalog(void **state)
{
    (void)state;
    const kl_kernel *k = kl_kernel_find("heat2d");
    assert_non_null(k);
    assert_int_equal(kl_param_index(k, "alpha"), KL_HEAT2D_ALPHA);
    assert_int_equal(kl_param_index(k, "steps"), KL_HEAT2D_STEPS);
    assert_int_equal(kl_input_index(k, "grid"), KL_HEAT2D_GRID);
    assert_int_equal(k->noutputs, 2);
    assert_string_equal(k->outputs[0].name, "grid");
    assert_string_equal(k->outputs[1].name, "residual");
    assert_true(k->params[KL_HEAT2D_STEPS].max >= 100000);
    assert_true(k->params[KL_HEAT2D_ALPHA].max == 0.25);
    assert_true(k->inputs[KL_HEAT2D_GRID].max_elems > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heat2d_small_grids_match_direct_loop_bit_for_bit),
        cmocka_unit_test(heat2d_threaded_grids_match_direct_loop_bit_for_bit),
        cmocka_unit_test(heat2d_boundary_cells_are_unchanged),
        cmocka_unit_test(heat2d_single_spike_spreads_to_its_neighbours),
        cmocka_unit_test(heat2d_residual_is_of_the_last_step),
        cmocka_unit_test(heat2d_constant_grid_stays_constant_with_zero_residual),
        cmocka_unit_test(heat2d_nan_in_grid_makes_residual_nan),
        cmocka_unit_test(heat2d_steps_defaults_to_one),
        cmocka_unit_test(heat2d_rejects_alpha_out_of_range),
        cmocka_unit_test(heat2d_rejects_steps_out_of_range),
        cmocka_unit_test(heat2d_rejects_grids_of_wrong_shape_or_dtype),
        cmocka_unit_test(heat2d_cancel_raised_before_run_stops_it),
        cmocka_unit_test(heat2d_cancel_during_run_stops_every_thread),
        cmocka_unit_test(heat2d_spec_indices_match_the_catalog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
