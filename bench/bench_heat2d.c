/* bench_heat2d.c — CPU figures of heat2d: cell updates per second through
 * kl_run_cpu, on one thread and on every core, for a grid that stays in
 * cache and one that streams from DRAM, with the effective bandwidth (8 bytes
 * a cell update: one read, one write) next to a memcpy of the same size in
 * the same run. Medians of several runs after a warm-up; prints figures,
 * never judges. Takes a few seconds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kl.h"
#include "kl_kernels.h"
#include "bench_common.h"

/* Median seconds of `reps` runs after one warm-up. */
static double time_heat(const kl_args *a, int reps)
{
    double t[16];
    for (int i = 0; i <= reps; i++) {
        kl_tensor out[2];
        kl_err err;
        double t0 = now_s();
        int rc = kl_run_cpu(a, out, &err);
        double dt = now_s() - t0;
        if (rc < 0) {
            fprintf(stderr, "heat2d failed: %s\n", err.message);
            exit(1);
        }
        kl_tensor_free(&out[0]);
        kl_tensor_free(&out[1]);
        if (i > 0)
            t[i - 1] = dt;
    }
    return median(t, reps);
}

static double time_memcpy(int64_t n, int reps)
{
    size_t bytes = (size_t)n * sizeof(float);
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double t[16];
    for (int i = 0; i <= reps; i++) {
        double t0 = now_s();
        memcpy(b, a, bytes);
        double dt = now_s() - t0;
        if (i > 0)
            t[i - 1] = dt;
    }
    free(a);
    free(b);
    return median(t, reps);
}

static void bench(int64_t h, int64_t w, int steps, int reps)
{
    float *g = random_floats(h * w);
    kl_tensor tg = {.dtype = KL_F32, .ndim = 2, .shape = {h, w}, .data = g};
    kl_args a = {.kernel = kl_kernel_find("heat2d")};
    a.params[KL_HEAT2D_ALPHA] = (kl_value){.num = 0.2, .given = 1};
    a.params[KL_HEAT2D_STEPS] = (kl_value){.num = steps, .given = 1};
    a.inputs[KL_HEAT2D_GRID] = &tg;
    /* A run also copies the grid in twice: count only the updates. */
    double updates = (double)(h - 2) * (double)(w - 2) * steps;
    double copy = time_memcpy(h * w, reps);
    printf("heat2d %lldx%lld (%.0f MiB a grid) x %d steps; memcpy of one grid, 1 thread (read+write) %.1f GB/s\n",
           (long long)h, (long long)w, (double)(h * w) * 4 / 1048576.0, steps,
           2.0 * 4.0 * (double)(h * w) / copy * 1e-9);
    for (int threads = 1; threads <= 2; threads++) {
        a.threads = threads == 1 ? 1 : 0;
        double t = time_heat(&a, reps);
        printf("  %-12s %8.3f Gcell-updates/s  effective %6.1f GB/s  (%.1f ms)\n",
               threads == 1 ? "1 thread" : "all cores", updates / t * 1e-9, 8.0 * updates / t * 1e-9, t * 1e3);
    }
    free(g);
}

int main(void)
{
    printf("heat2d CPU: cores %ld, medians after a warm-up; a run includes copying the grid in; 8 bytes a cell "
           "update (one read, one write)\n",
           sysconf(_SC_NPROCESSORS_ONLN));
    bench(514, 514, 400, 5);  /* 1 MiB a grid: both buffers stay in L2 */
    bench(4096, 4096, 20, 3); /* 64 MiB a grid: streams from DRAM */
    return 0;
}
