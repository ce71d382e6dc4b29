/* check_kmeans.cu — the CUDA kmeans against the CPU reference, then figures.
 * Each case runs the same points, params and start through plugin.run and
 * kl_run_cpu and compares: iterations_run exactly; centroids within
 * atol + rtol*|ref| (stopping after 10 mismatches); inertia within rtol;
 * labels exactly on well-separated clusters, and elsewhere every differing
 * label must be a near tie (its two distances to the CPU's centroids within
 * 1e-5 relative): both backends compute distances with the same roundings,
 * but double atomics may leave the GPU's sums a few ulps off the CPU's.
 * Then samples/s (points x iterations per second): the time of one Lloyd
 * iteration is the difference between plugin runs of 1 and 1+m iterations
 * from the same init (tol 0 on uniform points, which keep moving), so host
 * transfers and the start cancel out; plus end to end through the plugin.
 * Built and run by tests/gpu/run.sh (check_common.h: the summary line and exit status). */
#include "kl_cuda.h"
#include "kl_plugin.h"

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#define KL_CHECK_SEED 0x13198a2e03707344ull
#include "check_common.h"

static std::vector<float> uniform_points(int64_t n, int64_t d)
{
    std::vector<float> v((size_t)(n * d));
    for (auto &x : v)
        x = (float)(urand() * 2 - 1);
    return v;
}

/* n points in nc blobs (point i in blob i % nc) of noise sigma around
 * centers drawn in [-spread, spread]^d. */
static std::vector<float> blobs(int64_t n, int64_t d, int64_t nc, double spread, double sigma)
{
    std::vector<float> c((size_t)(nc * d)), v((size_t)(n * d));
    for (auto &x : c)
        x = (float)((urand() * 2 - 1) * spread);
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < d; q++) {
            double u = urand(), w = urand();
            double g = sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * w);
            v[(size_t)(i * d + q)] = c[(size_t)((i % nc) * d + q)] + (float)(sigma * g);
        }
    return v;
}

static kl_args km_args(const kl_tensor *points, const kl_tensor *init, int k, int iterations, double tol,
                       double seed)
{
    kl_args a = kernel_args("kmeans");
    const int which[] = {KL_KMEANS_K, KL_KMEANS_ITERATIONS, KL_KMEANS_TOL, KL_KMEANS_SEED};
    const double given[] = {(double)k, (double)iterations, tol, seed};
    for (int i = 0; i < 4; i++)
        a.params[which[i]] = kl_value{given[i], 0, 1};
    a.inputs[KL_KMEANS_POINTS] = points;
    a.inputs[KL_KMEANS_INIT] = init;
    return a;
}

static float sqdist(const float *x, const float *c, int64_t d)
{
    float acc = 0;
    for (int64_t q = 0; q < d; q++) {
        float t = x[q] - c[q];
        acc += t * t;
    }
    return acc;
}

static void free_outs(kl_tensor *o)
{
    for (int i = 0; i < 4; i++)
        kl_tensor_free(&o[i]);
}

/* Runs `a` on both backends and compares as the header says. */
static void check_case(const char *label, const kl_args *a, bool exact_labels, double atol, double rtol)
{
    kl_tensor gpu[4], cpu[4];
    kl_err e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    memset(gpu, 0, sizeof gpu);
    memset(cpu, 0, sizeof cpu);
    double t0 = now_s();
    int rc_gpu = check_run(a, 1, gpu, &e1);
    double t1 = now_s();
    int rc_cpu = kl_run_cpu(a, cpu, &e2);
    double t2 = now_s();
    bool ok = rc_gpu == 0 && rc_cpu == 0;
    int64_t label_diff = 0;
    if (!ok)
        printf("    cuda rc %d (%s)  cpu rc %d (%s)\n", rc_gpu, e1.message, rc_cpu, e2.message);
    if (ok) {
        const kl_tensor *X = a->inputs[KL_KMEANS_POINTS];
        const int64_t n = X->shape[0], d = X->shape[1], k = (int64_t)a->params[KL_KMEANS_K].num;
        const float *gc = (const float *)gpu[0].data, *cc = (const float *)cpu[0].data;
        const int32_t *gl = (const int32_t *)gpu[1].data, *cl = (const int32_t *)cpu[1].data;
        int git = ((int32_t *)gpu[3].data)[0], cit = ((int32_t *)cpu[3].data)[0];
        float gin = ((float *)gpu[2].data)[0], cin = ((float *)cpu[2].data)[0];
        if (git != cit) {
            printf("    iterations_run: cuda %d cpu %d\n", git, cit);
            ok = false;
        }
        int bad = 0;
        for (int64_t e = 0; e < k * d && bad < 10; e++) {
            if (!(fabs((double)gc[e] - cc[e]) <= atol + rtol * fabs((double)cc[e]))) {
                printf("    centroid mismatch at [%lld][%lld]: cuda %.9g cpu %.9g\n", (long long)(e / d),
                       (long long)(e % d), gc[e], cc[e]);
                bad++;
            }
        }
        ok = ok && bad == 0;
        const float *xs = (const float *)X->data;
        bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (gl[i] == cl[i])
                continue;
            label_diff++;
            if (gl[i] < 0 || gl[i] >= k) {
                printf("    label %lld out of range: %d\n", (long long)i, gl[i]);
                ok = false;
                continue;
            }
            float dg = sqdist(xs + i * d, cc + gl[i] * d, d), dc = sqdist(xs + i * d, cc + cl[i] * d, d);
            if (exact_labels || fabsf(dg - dc) > 1e-5f * fmaxf(dg, dc) + 1e-12f) {
                if (bad++ < 10)
                    printf("    label mismatch at %lld: cuda %d (d2 %.9g) cpu %d (d2 %.9g)\n", (long long)i, gl[i],
                           dg, cl[i], dc);
                ok = false;
            }
        }
        if (!(fabs((double)gin - cin) <= 1e-5 * fabs((double)cin) + 1e-6)) {
            printf("    inertia: cuda %.9g cpu %.9g\n", gin, cin);
            ok = false;
        }
    }
    printf("%s %-52s cuda %8.1f ms  cpu %8.1f ms  labels differing (near ties) %lld\n", ok ? "PASS" : "FAIL", label,
           (t1 - t0) * 1e3, (t2 - t1) * 1e3, (long long)label_diff);
    failures += !ok;
    if (rc_gpu == 0)
        free_outs(gpu);
    if (rc_cpu == 0)
        free_outs(cpu);
}

static void check_blobs(int64_t n, int64_t d, int k, double seed)
{
    std::vector<float> X = blobs(n, d, k, 10, 0.05);
    kl_tensor tx = f32_tensor(X.data(), 2, n, d);
    kl_args a = km_args(&tx, NULL, k, 100, 1e-4, seed);
    char label[96];
    snprintf(label, sizeof label, "blobs n=%lld d=%lld k=%d k-means++ seed %g", (long long)n, (long long)d, k, seed);
    check_case(label, &a, true, 1e-5, 1e-5);
}

/* One iteration from the first k points: exercises every code path of the
 * assignment (d templates, shared or global centroids and sums). */
static void check_uniform(int64_t n, int64_t d, int k, int iterations)
{
    std::vector<float> X = uniform_points(n, d);
    kl_tensor tx = f32_tensor(X.data(), 2, n, d), ti = f32_tensor(X.data(), 2, k, d);
    kl_args a = km_args(&tx, &ti, k, iterations, 0, 0);
    char label[96];
    snprintf(label, sizeof label, "uniform n=%lld d=%lld k=%d init, %d iteration(s)", (long long)n, (long long)d, k,
             iterations);
    check_case(label, &a, false, 1e-6, 1e-5);
}

static void check_edges(void)
{
    float one[1] = {3.5f};
    kl_tensor t1 = f32_tensor(one, 2, 1, 1);
    kl_args a = km_args(&t1, NULL, 1, 10, 0, 0);
    check_case("n=1 d=1 k=1", &a, true, 0, 0);

    std::vector<float> X = uniform_points(37, 3);
    kl_tensor tx = f32_tensor(X.data(), 2, 37, 3);
    a = km_args(&tx, NULL, 37, 10, 0, 5);
    check_case("k = n = 37 (every point its own centroid)", &a, true, 0, 0);

    std::vector<float> B = blobs(20000, 4, 5, 10, 0.05);
    kl_tensor tb = f32_tensor(B.data(), 2, 20000, 4);
    a = km_args(&tb, NULL, 5, 100, 1e9, 2);
    check_case("tol 1e9 stops after one iteration", &a, true, 1e-5, 1e-5);

    std::vector<float> U = uniform_points(5000, 2);
    float init[3 * 2] = {-0.5f, 0, 0.5f, 0, 100, 100};
    kl_tensor tu = f32_tensor(U.data(), 2, 5000, 2), ti = f32_tensor(init, 2, 3, 2);
    a = km_args(&tu, &ti, 3, 30, 0, 0);
    kl_tensor out[4];
    kl_err err;
    int rc = check_run(&a, 1, out, &err);
    bool ok = rc == 0 && ((float *)out[0].data)[4] == 100 && ((float *)out[0].data)[5] == 100;
    for (int64_t i = 0; ok && i < 5000; i++)
        ok = ((int32_t *)out[1].data)[i] != 2;
    printf("%s %-52s\n", ok ? "PASS" : "FAIL", "empty cluster keeps its centroid");
    failures += !ok;
    if (rc == 0)
        free_outs(out);

    volatile int cancel = 1;
    a.cancel = &cancel;
    rc = check_run(&a, 1, out, &err);
    ok = rc == KL_ECANCELED && out[0].data == NULL;
    printf("%s %-52s\n", ok ? "PASS" : "FAIL", "cancelled before launch");
    failures += !ok;
}

/* Median seconds of plugin runs (after one warm-up) and the iterations run. */
static double time_plugin(const kl_args *a, int reps, int *iterations_run)
{
    return time_plugin_runs(a, reps, [&](kl_tensor *out) {
        *iterations_run = ((int32_t *)out[3].data)[0];
        free_outs(out);
    });
}

static void bench(int64_t n, int64_t d, int k, int m)
{
    std::vector<float> X = uniform_points(n, d);
    kl_tensor tx = f32_tensor(X.data(), 2, n, d), ti = f32_tensor(X.data(), 2, k, d);
    int it1 = 0, itm = 0, its = 0;
    kl_args a = km_args(&tx, &ti, k, 1, 0, 0);
    double t1 = time_plugin(&a, 3, &it1);
    a = km_args(&tx, &ti, k, 1 + m, 0, 0);
    double tm = time_plugin(&a, 3, &itm);
    a = km_args(&tx, NULL, k, 1, 0, 0);
    double ts = time_plugin(&a, 1, &its);
    if (itm <= it1) {
        printf("kmeans n=%lld d=%lld k=%d: converged after %d iteration(s); no figure\n", (long long)n, (long long)d,
               k, itm);
        return;
    }
    double per_it = (tm - t1) / (double)(itm - it1);
    printf("kmeans n=%lld d=%lld k=%-4d  Lloyd %8.1f Msamples/s (%.3f ms an iteration, %d iterations)  plugin end to "
           "end %7.1f Msamples/s  k-means++ start (host) %7.1f ms\n",
           (long long)n, (long long)d, k, (double)n / per_it * 1e-6, per_it * 1e3, itm, (double)n * itm / tm * 1e-6,
           (ts - t1) * 1e3);
}

int main(int argc, char **argv)
{
    check_begin("check_kmeans", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;

    if (check_small) {
        check_blobs(2000, 8, 16, 7);
        check_uniform(2000, 3, 32, 1);
    } else {
        check_blobs(100000, 8, 16, 7);
        check_blobs(50000, 2, 5, 1);
        check_blobs(20000, 100, 10, 3); /* d > 64: the generic assignment */
        check_blobs(30000, 32, 200, 4);
        check_uniform(200000, 3, 32, 1);
        check_uniform(50000, 1, 16, 2);
        check_uniform(50000, 5, 100, 1);
        check_uniform(20000, 64, 64, 1);
        check_uniform(20000, 16, 1024, 1); /* centroids past 48 KiB: global memory */
        check_uniform(20000, 200, 50, 1);
    }
    check_edges();
    printf("%s: %d failure(s)\n\n", failures ? "FAIL" : "PASS", failures);
    if (check_small)
        return check_end();

    bench(4000000, 2, 8, 100);
    bench(4000000, 16, 64, 50);
    bench(1000000, 64, 256, 20);
    bench(1000000, 32, 1024, 10);
    return check_end();
}
