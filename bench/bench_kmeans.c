/* bench_kmeans.c — CPU figures for kmeans: Lloyd iterations as samples/s
 * (points x iterations per second) and the k-means++ start, on uniform
 * random points (they keep moving, so every iteration asked for is run).
 * An iteration's time is the difference between runs of 1 and 1+m
 * iterations from the same init, so the start and the last assignment
 * cancel out; medians of a few runs. Prints figures, never judges.
 * Usage: bench_kmeans [reps=5] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kl.h"
#include "kl_kernels.h"
#include "bench_common.h"

static float *uniform_points(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    uint64_t s = 0x853c49e6748fea9bull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
    }
    return p;
}

/* Seconds of one run (median of reps) and its iterations_run. */
static double time_run(const kl_args *a, int reps, int *iterations_run)
{
    double t[16];
    for (int r = 0; r < reps; r++) {
        kl_tensor out[4];
        kl_err err;
        double t0 = now_s();
        if (kl_run_cpu(a, out, &err) < 0) {
            fprintf(stderr, "kmeans failed: %s\n", err.message);
            exit(1);
        }
        t[r] = now_s() - t0;
        *iterations_run = ((int32_t *)out[3].data)[0];
        for (int i = 0; i < 4; i++)
            kl_tensor_free(&out[i]);
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return t[reps / 2];
}

static void bench(int64_t n, int64_t d, int k, int m, int reps)
{
    float *X = uniform_points(n * d);
    kl_tensor tx = {.dtype = KL_F32, .ndim = 2, .shape = {n, d}, .data = X};
    kl_tensor ti = {.dtype = KL_F32, .ndim = 2, .shape = {k, d}, .data = X}; /* the first k points */
    kl_args a = {.kernel = kl_kernel_find("kmeans")};
    a.params[KL_KMEANS_K] = (kl_value){.num = k, .given = 1};
    a.params[KL_KMEANS_TOL] = (kl_value){.num = 0, .given = 1};
    kl_args_defaults(&a);
    a.inputs[KL_KMEANS_POINTS] = &tx;
    a.inputs[KL_KMEANS_INIT] = &ti;
    int it1 = 0, itm = 0, its = 0;
    a.params[KL_KMEANS_ITERATIONS] = (kl_value){.num = 1, .given = 1};
    double t1 = time_run(&a, reps, &it1);
    a.params[KL_KMEANS_ITERATIONS] = (kl_value){.num = 1 + m, .given = 1};
    double tm = time_run(&a, reps, &itm);
    a.inputs[KL_KMEANS_INIT] = NULL; /* k-means++ from seed 0, then one iteration */
    a.params[KL_KMEANS_ITERATIONS] = (kl_value){.num = 1, .given = 1};
    double ts = time_run(&a, reps, &its);
    if (itm <= it1) {
        printf("kmeans n=%lld d=%lld k=%d: converged after %d iteration(s); no figure\n", (long long)n, (long long)d,
               k, itm);
        free(X);
        return;
    }
    double per_it = (tm - t1) / (double)(itm - it1);
    printf("kmeans n=%lld d=%lld k=%-4d  Lloyd %7.2f Msamples/s (%.1f ms an iteration, %d iterations)  "
           "end to end (with init) %6.2f Msamples/s  k-means++ start %7.1f ms\n",
           (long long)n, (long long)d, k, (double)n / per_it * 1e-6, per_it * 1e3, itm,
           (double)n * itm / tm * 1e-6, (ts - t1) * 1e3);
    free(X);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 16)
        reps = 5;
    printf("kmeans CPU, %ld cores (samples = points x iterations; each iteration assigns and updates)\n",
           sysconf(_SC_NPROCESSORS_ONLN));
    bench(200000, 2, 8, 10, reps);
    bench(200000, 16, 64, 5, reps);
    bench(50000, 64, 256, 3, reps);
    return 0;
}
