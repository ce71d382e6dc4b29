/* test_kl_kmeans.c — the CPU kmeans against a naive Lloyd loop written from
 * the contract (bit for bit where the points fit in one slice), recovery of
 * separable clusters, the k-means++ start, the stopping rules, empty
 * clusters and ties, thread-count independence, cancel, and the checks that
 * name the offending field. */
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
#include "kl_test_args.h"

/* The naive loop rounds every operation apart, as the kernel does. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define KL_TEST_SEED 0x6a09e667f3bcc909ull
#include "kl_test_rand.h"

static float *uniform_points(int64_t n, int64_t d)
{
    float *p = malloc(sizeof(float) * (size_t)(n * d));
    assert_non_null(p);
    for (int64_t i = 0; i < n * d; i++)
        p[i] = (float)(urand() * 2 - 1);
    return p;
}

/* n points around `centers` (nc, d), point i in blob i % nc, noise sigma. */
static float *blobs(int64_t n, int64_t d, int64_t nc, float *centers, double spread, double sigma)
{
    for (int64_t i = 0; i < nc * d; i++)
        centers[i] = (float)((urand() * 2 - 1) * spread);
    float *p = malloc(sizeof(float) * (size_t)(n * d));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < d; q++)
            p[i * d + q] = centers[(i % nc) * d + q] + (float)(sigma * nrand());
    return p;
}

typedef struct km_out {
    kl_tensor t[4];
    kl_info info;
    const float *centroids;
    const int32_t *labels;
    float inertia;
    int iterations_run;
} km_out;

static kl_tensor f32(float *data, int64_t d0, int64_t d1)
{
    kl_tensor t = {.dtype = KL_F32, .ndim = 2, .shape = {d0, d1}, .data = data};
    return t;
}

static kl_args km_args(const kl_tensor *points, const kl_tensor *init, int k, int iterations, double tol,
                       double seed)
{
    kl_args a = args_for("kmeans");
    a.params[KL_KMEANS_K] = (kl_value){.num = k, .given = 1};
    a.params[KL_KMEANS_ITERATIONS] = (kl_value){.num = iterations, .given = 1};
    a.params[KL_KMEANS_TOL] = (kl_value){.num = tol, .given = 1};
    a.params[KL_KMEANS_SEED] = (kl_value){.num = seed, .given = 1};
    a.inputs[KL_KMEANS_POINTS] = points;
    a.inputs[KL_KMEANS_INIT] = init;
    return a;
}

static void km_run(kl_args *a, km_out *o)
{
    kl_err err = {0};
    memset(o, 0, sizeof *o);
    a->info = &o->info;
    int rc = kl_run_cpu(a, o->t, &err);
    if (rc != 0)
        fail_msg("kmeans failed (%d): %s: %s", rc, err.field, err.message);
    const int64_t k = (int64_t)a->params[KL_KMEANS_K].num, n = a->inputs[KL_KMEANS_POINTS]->shape[0];
    const int64_t d = a->inputs[KL_KMEANS_POINTS]->shape[1];
    assert_int_equal(o->t[0].dtype, KL_F32);
    assert_int_equal(o->t[0].ndim, 2);
    assert_int_equal(o->t[0].shape[0], k);
    assert_int_equal(o->t[0].shape[1], d);
    assert_int_equal(o->t[1].dtype, KL_I32);
    assert_int_equal(o->t[1].ndim, 1);
    assert_int_equal(o->t[1].shape[0], n);
    assert_int_equal(o->t[2].dtype, KL_F32);
    assert_int_equal(o->t[2].shape[0], 1);
    assert_int_equal(o->t[3].dtype, KL_I32);
    assert_int_equal(o->t[3].shape[0], 1);
    o->centroids = o->t[0].data;
    o->labels = o->t[1].data;
    o->inertia = ((float *)o->t[2].data)[0];
    o->iterations_run = ((int32_t *)o->t[3].data)[0];
    for (int64_t i = 0; i < n; i++)
        assert_true(o->labels[i] >= 0 && o->labels[i] < k);
}

static void km_free(km_out *o)
{
    for (int i = 0; i < 4; i++)
        kl_tensor_free(&o->t[i]);
}

static const char *info_of(const km_out *o, const char *key)
{
    for (int i = 0; i < o->info.n; i++)
        if (strcmp(o->info.kv[i].key, key) == 0)
            return o->info.kv[i].value;
    return "";
}

/* ---- the naive reference: Lloyd from the contract, one point at a time ---- */

typedef struct ref_out {
    float *C;
    int32_t *labels;
    double inertia;
    int iterations_run;
} ref_out;

static double ref_assign(const float *X, int64_t n, int64_t d, int64_t k, const float *C, int32_t *labels,
                         int64_t *changed)
{
    double inertia = 0;
    *changed = 0;
    for (int64_t i = 0; i < n; i++) {
        float best = INFINITY;
        int32_t lab = 0;
        for (int64_t c = 0; c < k; c++) {
            float acc = 0;
            for (int64_t q = 0; q < d; q++) {
                float t = X[i * d + q] - C[c * d + q];
                float sq = t * t;
                acc = acc + sq;
            }
            if (acc < best) {
                best = acc;
                lab = (int32_t)c;
            }
        }
        *changed += labels[i] != lab;
        labels[i] = lab;
        inertia += best;
    }
    return inertia;
}

static ref_out ref_lloyd(const float *X, int64_t n, int64_t d, int64_t k, const float *init, int iterations,
                         double tol)
{
    ref_out r = {.C = malloc(sizeof(float) * (size_t)(k * d)), .labels = malloc(sizeof(int32_t) * (size_t)n)};
    double *sum = malloc(sizeof(double) * (size_t)(k * d));
    int64_t *count = malloc(sizeof(int64_t) * (size_t)k), changed;
    assert_true(r.C && r.labels && sum && count);
    memcpy(r.C, init, sizeof(float) * (size_t)(k * d));
    for (int64_t i = 0; i < n; i++)
        r.labels[i] = -1;
    int final_pass = 1;
    while (r.iterations_run < iterations) {
        r.inertia = ref_assign(X, n, d, k, r.C, r.labels, &changed);
        r.iterations_run++;
        if (changed == 0) {
            final_pass = 0;
            break;
        }
        memset(sum, 0, sizeof(double) * (size_t)(k * d));
        memset(count, 0, sizeof(int64_t) * (size_t)k);
        for (int64_t i = 0; i < n; i++) {
            count[r.labels[i]]++;
            for (int64_t q = 0; q < d; q++)
                sum[r.labels[i] * d + q] += X[i * d + q];
        }
        double max_shift2 = 0;
        for (int64_t c = 0; c < k; c++) {
            if (!count[c])
                continue;
            double s2 = 0;
            for (int64_t q = 0; q < d; q++) {
                float v = (float)(sum[c * d + q] / (double)count[c]);
                s2 += ((double)v - r.C[c * d + q]) * ((double)v - r.C[c * d + q]);
                r.C[c * d + q] = v;
            }
            max_shift2 = s2 > max_shift2 ? s2 : max_shift2;
        }
        if (sqrt(max_shift2) <= tol)
            break;
    }
    if (final_pass)
        r.inertia = ref_assign(X, n, d, k, r.C, r.labels, &changed);
    free(sum);
    free(count);
    return r;
}

static void ref_free(ref_out *r)
{
    free(r->C);
    free(r->labels);
}

/* ---- tests ---- */

static void kmeans_spec_indices_match_enums(void **state)
{
    (void)state;
    const kl_kernel *k = kl_kernel_find("kmeans");
    assert_non_null(k);
    assert_int_equal(kl_param_index(k, "k"), KL_KMEANS_K);
    assert_int_equal(kl_param_index(k, "iterations"), KL_KMEANS_ITERATIONS);
    assert_int_equal(kl_param_index(k, "tol"), KL_KMEANS_TOL);
    assert_int_equal(kl_param_index(k, "seed"), KL_KMEANS_SEED);
    assert_int_equal(kl_input_index(k, "points"), KL_KMEANS_POINTS);
    assert_int_equal(kl_input_index(k, "init"), KL_KMEANS_INIT);
    assert_int_equal(k->noutputs, 4);
    assert_string_equal(k->outputs[0].name, "centroids");
    assert_string_equal(k->outputs[1].name, "labels");
    assert_string_equal(k->outputs[2].name, "inertia");
    assert_string_equal(k->outputs[3].name, "iterations_run");
}

/* n < 2048: one slice, so the sums add in the naive loop's order. */
static void kmeans_matches_naive_lloyd_bit_for_bit(void **state)
{
    (void)state;
    const int64_t n = 900, d = 5, k = 7;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d), ti = f32(X + 100 * d, k, d); /* init: seven of the points */
    kl_args a = km_args(&tx, &ti, (int)k, 12, 0, 0);
    km_out o;
    km_run(&a, &o);
    ref_out r = ref_lloyd(X, n, d, k, X + 100 * d, 12, 0);
    assert_int_equal(o.iterations_run, r.iterations_run);
    assert_memory_equal(o.centroids, r.C, sizeof(float) * (size_t)(k * d));
    assert_memory_equal(o.labels, r.labels, sizeof(int32_t) * (size_t)n);
    assert_true(o.inertia == (float)r.inertia);
    assert_string_equal(info_of(&o, "init"), "inputs.init");
    ref_free(&r);
    km_free(&o);
    free(X);
}

/* Many slices: the sums add in another order, so the centroids agree to a
 * few ulps and the labels exactly (uniform points, 3 iterations). */
static void kmeans_threaded_matches_naive_lloyd(void **state)
{
    (void)state;
    const int64_t n = 40000, d = 3, k = 16;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d), ti = f32(X, k, d);
    kl_args a = km_args(&tx, &ti, (int)k, 3, 0, 0);
    a.threads = 3;
    km_out o;
    km_run(&a, &o);
    ref_out r = ref_lloyd(X, n, d, k, X, 3, 0);
    assert_int_equal(o.iterations_run, 3);
    assert_int_equal(r.iterations_run, 3);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++)
        differ += o.labels[i] != r.labels[i];
    assert_true(differ <= 2); /* only a point within an ulp of a tie could move */
    for (int64_t e = 0; e < k * d; e++)
        assert_true(fabsf(o.centroids[e] - r.C[e]) <= 1e-6f);
    assert_true(fabs(o.inertia - r.inertia) <= 1e-5 * r.inertia);
    ref_free(&r);
    km_free(&o);
    free(X);
}

static void kmeans_gives_the_same_bits_on_any_thread_count(void **state)
{
    (void)state;
    const int64_t n = 30000, d = 4, k = 24;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d);
    km_out o[3];
    const int threads[3] = {1, 2, 5};
    for (int t = 0; t < 3; t++) {
        kl_args a = km_args(&tx, NULL, (int)k, 8, 0, 42);
        a.threads = threads[t];
        km_run(&a, &o[t]);
    }
    for (int t = 1; t < 3; t++) {
        assert_int_equal(o[t].iterations_run, o[0].iterations_run);
        assert_memory_equal(o[t].centroids, o[0].centroids, sizeof(float) * (size_t)(k * d));
        assert_memory_equal(o[t].labels, o[0].labels, sizeof(int32_t) * (size_t)n);
        assert_true(o[t].inertia == o[0].inertia);
    }
    for (int t = 0; t < 3; t++)
        km_free(&o[t]);
    free(X);
}

/* The true center nearest each centroid is within `tol`, and every true
 * center is matched once. */
static void assert_recovers(const float *centroids, const float *centers, int64_t k, int64_t d, float tol)
{
    int used[64] = {0};
    for (int64_t c = 0; c < k; c++) {
        int64_t best = -1;
        double bd = INFINITY;
        for (int64_t t = 0; t < k; t++) {
            double s = 0;
            for (int64_t q = 0; q < d; q++)
                s += pow((double)centroids[c * d + q] - centers[t * d + q], 2);
            if (s < bd) {
                bd = s;
                best = t;
            }
        }
        if (sqrt(bd) > tol)
            fail_msg("centroid %lld is %g from the nearest true center", (long long)c, sqrt(bd));
        assert_int_equal(used[best], 0);
        used[best] = 1;
    }
}

static void kmeans_recovers_separable_clusters(void **state)
{
    (void)state;
    const int64_t n = 3000, d = 4, k = 6;
    const double sigma = 0.05;
    float centers[6 * 4];
    float *X = blobs(n, d, k, centers, 10, sigma);
    kl_tensor tx = f32(X, n, d);
    kl_args a = km_args(&tx, NULL, (int)k, 100, 1e-4, 3);
    km_out o;
    km_run(&a, &o);
    assert_recovers(o.centroids, centers, k, d, 0.02f);
    for (int64_t i = k; i < n; i++) /* a blob is one cluster, and no two share one */
        assert_int_equal(o.labels[i], o.labels[i % k]);
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i; j++)
            assert_int_not_equal(o.labels[i], o.labels[j]);
    /* inertia ~ n*d*sigma^2 (chi-square with n*d degrees of freedom) */
    double expect = (double)(n * d) * sigma * sigma;
    assert_true(o.inertia > 0.8 * expect && o.inertia < 1.2 * expect);
    assert_true(o.iterations_run >= 1 && o.iterations_run < 100);
    assert_string_equal(info_of(&o, "init"), "k-means++ (seed 3)");
    km_free(&o);
    free(X);
}

static void kmeans_with_init_converges_to_the_true_centers(void **state)
{
    (void)state;
    const int64_t n = 2000, d = 2, k = 4;
    float centers[4 * 2], init[4 * 2];
    float *X = blobs(n, d, k, centers, 5, 0.1);
    for (int64_t e = 0; e < k * d; e++)
        init[e] = centers[e] + 0.7f; /* off by 0.99 in the plane */
    kl_tensor tx = f32(X, n, d), ti = f32(init, k, d);
    kl_args a = km_args(&tx, &ti, (int)k, 50, 0, 0);
    km_out o;
    km_run(&a, &o);
    assert_recovers(o.centroids, centers, k, d, 0.03f);
    assert_true(o.iterations_run <= 50);
    assert_string_equal(info_of(&o, "stopped"), "labels unchanged");
    km_free(&o);
    free(X);
}

static void kmeans_is_deterministic_for_a_seed(void **state)
{
    (void)state;
    const int64_t n = 5000, d = 3, k = 10;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d);
    km_out a1, a2, b;
    kl_args a = km_args(&tx, NULL, (int)k, 1, 0, 7);
    km_run(&a, &a1);
    km_run(&a, &a2);
    a.params[KL_KMEANS_SEED].num = 8;
    km_run(&a, &b);
    assert_memory_equal(a1.centroids, a2.centroids, sizeof(float) * (size_t)(k * d));
    assert_memory_equal(a1.labels, a2.labels, sizeof(int32_t) * (size_t)n);
    assert_true(a1.inertia == a2.inertia);
    assert_memory_not_equal(a1.centroids, b.centroids, sizeof(float) * (size_t)(k * d));
    km_free(&a1);
    km_free(&a2);
    km_free(&b);
    free(X);
}

/* k = n distinct points: k-means++ must take every point once (a point
 * already taken has D^2 = 0), so each point is its own cluster. */
static void kmeans_with_k_equal_n_gives_each_point_its_own_centroid(void **state)
{
    (void)state;
    const int64_t n = 37, d = 3;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d);
    kl_args a = km_args(&tx, NULL, (int)n, 10, 0, 5);
    km_out o;
    km_run(&a, &o);
    assert_true(o.inertia == 0);
    int seen[37] = {0};
    for (int64_t i = 0; i < n; i++) {
        assert_memory_equal(o.centroids + o.labels[i] * d, X + i * d, sizeof(float) * (size_t)d);
        assert_int_equal(seen[o.labels[i]]++, 0);
    }
    km_free(&o);
    free(X);
}

static void kmeans_iterations_run_never_exceeds_iterations(void **state)
{
    (void)state;
    const int64_t n = 3000, d = 2, k = 50;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d);
    for (int iters = 1; iters <= 4; iters++) {
        kl_args a = km_args(&tx, NULL, (int)k, iters, 0, 1);
        km_out o;
        km_run(&a, &o);
        assert_int_equal(o.iterations_run, iters); /* uniform points: still moving after 4 */
        assert_string_equal(info_of(&o, "stopped"), "iterations");
        km_free(&o);
    }
    free(X);
}

static void kmeans_tol_stops_early(void **state)
{
    (void)state;
    const int64_t n = 4000, d = 2, k = 40;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d);
    km_out loose, tight, none;
    kl_args a = km_args(&tx, NULL, (int)k, 200, 1e9, 9);
    km_run(&a, &loose); /* any shift is under 1e9: one iteration */
    a.params[KL_KMEANS_TOL].num = 1e-2;
    km_run(&a, &tight);
    a.params[KL_KMEANS_TOL].num = 0;
    km_run(&a, &none);
    assert_int_equal(loose.iterations_run, 1);
    assert_string_equal(info_of(&loose, "stopped"), "tol");
    assert_true(tight.iterations_run > 1 && tight.iterations_run < none.iterations_run);
    assert_string_equal(info_of(&tight, "stopped"), "tol");
    /* tol 0 runs to the fixed point: no label changes any more */
    assert_true(none.iterations_run < 200);
    assert_string_equal(info_of(&none, "stopped"), "labels unchanged");
    assert_true(none.inertia <= tight.inertia && tight.inertia <= loose.inertia);
    km_free(&loose);
    km_free(&tight);
    km_free(&none);
    free(X);
}

static void kmeans_empty_cluster_keeps_its_centroid(void **state)
{
    (void)state;
    const int64_t n = 500, d = 2;
    float *X = uniform_points(n, d);
    float init[3 * 2] = {-0.5f, 0, 0.5f, 0, 100, 100};
    kl_tensor tx = f32(X, n, d), ti = f32(init, 3, d);
    kl_args a = km_args(&tx, &ti, 3, 20, 0, 0);
    km_out o;
    km_run(&a, &o);
    assert_true(o.centroids[4] == 100 && o.centroids[5] == 100);
    for (int64_t i = 0; i < n; i++)
        assert_int_not_equal(o.labels[i], 2);
    km_free(&o);
    free(X);
}

static void kmeans_ties_go_to_the_lowest_index(void **state)
{
    (void)state;
    /* Two equal centroids: every point goes to the first, the second stays. */
    float X[4 * 1] = {1, 2, 3, 4}, init[2] = {2.5f, 2.5f};
    kl_tensor tx = f32(X, 4, 1), ti = f32(init, 2, 1);
    kl_args a = km_args(&tx, &ti, 2, 10, 0, 0);
    km_out o;
    km_run(&a, &o);
    for (int i = 0; i < 4; i++)
        assert_int_equal(o.labels[i], 0);
    assert_true(o.centroids[0] == 2.5f && o.centroids[1] == 2.5f);
    km_free(&o);
    /* A point halfway between two centroids goes to the lower index. */
    float Y[2] = {1, 1}, init2[2] = {2, 0};
    kl_tensor ty = f32(Y, 2, 1), ti2 = f32(init2, 2, 1);
    a = km_args(&ty, &ti2, 2, 10, 0, 0);
    a.params[KL_KMEANS_ITERATIONS].num = 1;
    km_run(&a, &o);
    /* iteration 1: both points tie at distance 1, both go to centroid 0 (at 2),
     * which moves to 1; centroid 1 keeps its place */
    assert_true(o.centroids[0] == 1 && o.centroids[1] == 0);
    assert_int_equal(o.labels[0], 0);
    assert_int_equal(o.labels[1], 0);
    km_free(&o);
}

static void kmeans_stops_when_cancelled(void **state)
{
    (void)state;
    const int64_t n = 20000, d = 4;
    float *X = uniform_points(n, d);
    kl_tensor tx = f32(X, n, d), out[4];
    volatile int cancel = 1;
    for (int with_init = 0; with_init < 2; with_init++) {
        kl_tensor ti = f32(X, 16, d);
        kl_args a = km_args(&tx, with_init ? &ti : NULL, 16, 50, 0, 0);
        a.cancel = &cancel;
        kl_err err = {0};
        assert_int_equal(kl_run_cpu(&a, out, &err), KL_ECANCELED);
        for (int i = 0; i < 4; i++)
            assert_null(out[i].data);
    }
    free(X);
}

static void expect_error(kl_args *a, const char *field, const char *message_part)
{
    kl_tensor out[4];
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(a, out, &err), KL_EINVAL);
    assert_string_equal(err.field, field);
    if (message_part && !strstr(err.message, message_part))
        fail_msg("message \"%s\" lacks \"%s\"", err.message, message_part);
}

static void kmeans_rejects_bad_params_and_shapes_naming_the_field(void **state)
{
    (void)state;
    float X[6 * 2] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, init[9] = {0};
    kl_tensor tx = f32(X, 6, 2);
    kl_args a = km_args(&tx, NULL, 7, 10, 0, 0);
    expect_error(&a, "params.k", "params.k = 7 is more than the 6 points of inputs.points");
    a = km_args(&tx, NULL, 0, 10, 0, 0);
    expect_error(&a, "params.k", "between 1 and 1024");
    a = km_args(&tx, NULL, 1025, 10, 0, 0);
    expect_error(&a, "params.k", NULL);
    a = km_args(&tx, NULL, 2, 0, 0, 0);
    expect_error(&a, "params.iterations", NULL);
    a = km_args(&tx, NULL, 2, 10, -1e-3, 0);
    expect_error(&a, "params.tol", NULL);
    a = km_args(&tx, NULL, 2, 10, 0, -1);
    expect_error(&a, "params.seed", NULL);
    a = km_args(&tx, NULL, 2, 10, 0, 0.5);
    expect_error(&a, "params.seed", NULL);

    kl_tensor rows = f32(init, 3, 2); /* k = 2 wanted */
    a = km_args(&tx, &rows, 2, 10, 0, 0);
    expect_error(&a, "inputs.init", "inputs.init has shape [3,2]; kmeans needs [k,d] = [2,2]");
    kl_tensor cols = f32(init, 2, 3); /* d = 2 wanted */
    a = km_args(&tx, &cols, 2, 10, 0, 0);
    expect_error(&a, "inputs.init", "inputs.init has shape [2,3]");
    kl_tensor ints = {.dtype = KL_I32, .ndim = 2, .shape = {2, 2}, .data = init};
    a = km_args(&tx, &ints, 2, 10, 0, 0);
    expect_error(&a, "inputs.init", "dtype");
    kl_tensor flat = {.dtype = KL_F32, .ndim = 1, .shape = {12}, .data = X};
    a = km_args(&flat, NULL, 2, 10, 0, 0);
    expect_error(&a, "inputs.points", "rank");
    kl_tensor nod = f32(X, 6, 0);
    a = km_args(&nod, NULL, 2, 10, 0, 0);
    expect_error(&a, "inputs.points", "d >= 1");
    a = km_args(&tx, NULL, 2, 10, 0, 0);
    a.params[KL_KMEANS_K].given = 0; /* k has no default */
    expect_error(&a, "params.k", "required");
}

static void kmeans_rejects_values_that_are_not_finite(void **state)
{
    (void)state;
    float X[4 * 2] = {0, 1, 2, 3, 4, NAN, 6, 7}, init[2 * 2] = {0, 0, INFINITY, 0};
    kl_tensor tx = f32(X, 4, 2);
    kl_args a = km_args(&tx, NULL, 2, 10, 0, 0);
    expect_error(&a, "inputs.points", "inputs.points[2][1] is nan");
    X[5] = 5;
    kl_tensor ti = f32(init, 2, 2);
    a = km_args(&tx, &ti, 2, 10, 0, 0);
    expect_error(&a, "inputs.init", "inputs.init[1][0] is inf");
}

static void kmeans_defaults_are_documented_values(void **state)
{
    (void)state;
    float *X = uniform_points(300, 2);
    kl_tensor tx = f32(X, 300, 2);
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find("kmeans");
    a.params[KL_KMEANS_K] = (kl_value){.num = 3, .given = 1};
    a.inputs[KL_KMEANS_POINTS] = &tx;
    kl_args_defaults(&a);
    assert_true(a.params[KL_KMEANS_ITERATIONS].num == 100);
    assert_true(a.params[KL_KMEANS_TOL].num == 1e-4);
    assert_true(a.params[KL_KMEANS_SEED].num == 0);
    km_out o;
    km_run(&a, &o);
    assert_true(o.iterations_run >= 1 && o.iterations_run <= 100);
    km_free(&o);
    free(X);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kmeans_spec_indices_match_enums),
        cmocka_unit_test(kmeans_matches_naive_lloyd_bit_for_bit),
        cmocka_unit_test(kmeans_threaded_matches_naive_lloyd),
        cmocka_unit_test(kmeans_gives_the_same_bits_on_any_thread_count),
        cmocka_unit_test(kmeans_recovers_separable_clusters),
        cmocka_unit_test(kmeans_with_init_converges_to_the_true_centers),
        cmocka_unit_test(kmeans_is_deterministic_for_a_seed),
        cmocka_unit_test(kmeans_with_k_equal_n_gives_each_point_its_own_centroid),
        cmocka_unit_test(kmeans_iterations_run_never_exceeds_iterations),
        cmocka_unit_test(kmeans_tol_stops_early),
        cmocka_unit_test(kmeans_empty_cluster_keeps_its_centroid),
        cmocka_unit_test(kmeans_ties_go_to_the_lowest_index),
        cmocka_unit_test(kmeans_stops_when_cancelled),
        cmocka_unit_test(kmeans_rejects_bad_params_and_shapes_naming_the_field),
        cmocka_unit_test(kmeans_rejects_values_that_are_not_finite),
        cmocka_unit_test(kmeans_defaults_are_documented_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
