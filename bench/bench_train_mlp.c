/* bench_train_mlp.c — CPU figures of train_mlp: training samples per second
 * through kl_run_cpu, for a small net (steps short enough that thread
 * start-up and memory traffic count) and an MNIST-sized one (BLAS-bound), on
 * 1 rank and on 2 (a thread a rank for the small net; ranks in turn on
 * OpenBLAS's threads for the large one), with the GFLOP/s that implies
 * (4*d*h + 6*h*c flops a sample: the forward pass, the two weight gradients
 * and the hidden gradient). Medians of 3 runs after a warm-up; prints
 * figures, never judges. Takes a few seconds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kl.h"
#include "kl_kernels.h"
#include "bench_common.h"

static void bench(const char *label, int64_t n, int64_t d, int h, int c, int epochs, int batch, int ranks)
{
    float *x = malloc(sizeof(float) * (size_t)(n * d));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    if (!x || !y) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        y[i] = (int32_t)(i % c);
        for (int64_t j = 0; j < d; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[i * d + j] = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0) + (j == y[i] % d ? 2.0f : 0.0f);
        }
    }
    kl_tensor tx = {.dtype = KL_F32, .ndim = 2, .shape = {n, d}, .data = x};
    kl_tensor ty = {.dtype = KL_I32, .ndim = 1, .shape = {n}, .data = y};
    kl_args a = {.kernel = kl_kernel_find("train_mlp"), .ranks = ranks};
    const double v[] = {h, c, epochs, batch, 0.01, 0.9, 1};
    for (int i = 0; i < 7; i++)
        a.params[i] = (kl_value){.num = v[i], .given = 1};
    a.inputs[KL_MLP_X] = &tx;
    a.inputs[KL_MLP_Y] = &ty;
    double t[3];
    float acc = 0;
    for (int i = 0; i <= 3; i++) {
        kl_tensor out[KL_MAX_IO];
        kl_err err;
        double t0 = now_s();
        int rc = kl_run_cpu(&a, out, &err);
        double dt = now_s() - t0;
        if (rc < 0) {
            fprintf(stderr, "train_mlp failed: %s\n", err.message);
            exit(1);
        }
        acc = ((float *)out[5].data)[0];
        for (int k = 0; k < 6; k++)
            kl_tensor_free(&out[k]);
        if (i > 0)
            t[i - 1] = dt;
    }
    qsort(t, 3, sizeof t[0], cmp_double);
    double samples = (double)n * epochs, flops = samples * (4.0 * (double)d * h + 6.0 * (double)h * c);
    printf("train_mlp %-34s %d rank(s)  %9.0f samples/s  %6.1f GFLOP/s  (%.3f s, accuracy %.3f)\n", label, ranks,
           samples / t[1], flops / t[1] * 1e-9, t[1], acc);
    free(x);
    free(y);
}

int main(void)
{
    printf("train_mlp on %ld cores, medians of 3 runs after a warm-up\n", sysconf(_SC_NPROCESSORS_ONLN));
    for (int r = 1; r <= 2; r++)
        bench("32-128-10 batch 128", 16384, 32, 128, 10, 2, 128, r);
    for (int r = 1; r <= 2; r++)
        bench("784-256-10 batch 256 (MNIST-sized)", 16384, 784, 256, 10, 2, 256, r);
    return 0;
}
