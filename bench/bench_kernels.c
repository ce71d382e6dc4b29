/* bench_kernels.c — CPU figures for the kernel library: gemm through
 * kl_run_cpu against cblas_sgemm called directly in the same process (the
 * ratio is the library's overhead), batched gemm against a loop of
 * cblas_sgemm, and the bandwidth of saxpy and reduce.
 * Medians of several runs after a warm-up; prints figures, never judges.
 * Usage: bench_kernels [gemm_size=2048] [vector_elems=2^26] [reps=5] */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kl.h"
#include "kl_kernels.h"
#include "bench_common.h"

/* Median seconds of `reps` kl_run_cpu calls after one warm-up; with
 * reps = 0, the seconds of a single call. */
static double time_kl(const kl_args *a, int reps)
{
    double t[64];
    for (int i = 0; i <= reps; i++) {
        kl_tensor out[KL_MAX_IO];
        kl_err err;
        double t0 = now_s();
        int rc = kl_run_cpu(a, out, &err);
        double dt = now_s() - t0;
        if (rc < 0) {
            fprintf(stderr, "%s failed: %s\n", a->kernel->name, err.message);
            exit(1);
        }
        kl_tensor_free(&out[0]);
        if (reps == 0)
            return dt;
        if (i > 0)
            t[i - 1] = dt;
    }
    return median(t, reps);
}

/* Median seconds of batch products of s^3 through kl_run_cpu (*tk) and
 * through cblas_sgemm, one call per matrix (*tblas). batch 0: one plain
 * rank-2 product; otherwise rank-3 inputs. The two are interleaved so that
 * both see the same machine: on a shared host, turbo and neighbours shift
 * figures between phases. */
static void time_gemm(int64_t batch, int64_t s, int reps, double *tk, double *tblas)
{
    int64_t per = s * s, n = batch ? batch : 1;
    float *A = random_floats(n * per), *B = random_floats(n * per);
    float *C = calloc((size_t)(n * per), sizeof(float));
    kl_tensor ta = {.dtype = KL_F32, .ndim = 2, .shape = {s, s}, .data = A};
    kl_tensor tb = {.dtype = KL_F32, .ndim = 2, .shape = {s, s}, .data = B};
    if (batch) {
        ta = (kl_tensor){.dtype = KL_F32, .ndim = 3, .shape = {batch, s, s}, .data = A};
        tb = (kl_tensor){.dtype = KL_F32, .ndim = 3, .shape = {batch, s, s}, .data = B};
    }
    kl_args a = {.kernel = kl_kernel_find("gemm")};
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    double t_kl[64], t_blas[64];
    for (int i = 0; i <= reps; i++) {
        double k = time_kl(&a, 0);
        double t0 = now_s();
        for (int64_t b = 0; b < n; b++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s, (int)s, (int)s, 1.0f, A + b * per,
                        (int)s, B + b * per, (int)s, 0.0f, C + b * per, (int)s);
        if (i > 0) {
            t_kl[i - 1] = k;
            t_blas[i - 1] = now_s() - t0;
        }
    }
    *tk = median(t_kl, reps);
    *tblas = median(t_blas, reps);
    free(A);
    free(B);
    free(C);
}

static void bench_gemm(int64_t s, int reps)
{
    double tk, tblas, flops = 2.0 * (double)s * (double)s * (double)s;
    time_gemm(0, s, reps, &tk, &tblas);
    printf("gemm %lld^3 fp32   kl_run_cpu %7.1f GFLOP/s   cblas_sgemm direct %7.1f GFLOP/s   ratio %.3f\n",
           (long long)s, flops / tk * 1e-9, flops / tblas * 1e-9, tblas / tk);
}

/* A batch of s^3 products (rank-3 inputs) through kl_run_cpu against a
 * loop of cblas_sgemm calls, one per matrix, as a caller would write it. */
static void bench_gemm_batched(int64_t batch, int64_t s, int reps)
{
    double tk, tblas, flops = 2.0 * (double)batch * (double)s * (double)s * (double)s;
    time_gemm(batch, s, reps, &tk, &tblas);
    printf("gemm batched %lldx%lld^3 fp32   kl_run_cpu %7.1f GFLOP/s   cblas_sgemm loop %7.1f GFLOP/s   ratio %.3f\n",
           (long long)batch, (long long)s, flops / tk * 1e-9, flops / tblas * 1e-9, tblas / tk);
}

static void bench_vectors(int64_t n, int reps)
{
    float *x = random_floats(n), *y = random_floats(n);
    kl_tensor tx = {.dtype = KL_F32, .ndim = 1, .shape = {n}, .data = x};
    kl_tensor ty = {.dtype = KL_F32, .ndim = 1, .shape = {n}, .data = y};

    kl_args s = {.kernel = kl_kernel_find("saxpy")};
    s.params[KL_SAXPY_A] = (kl_value){.num = 0.5, .given = 1};
    s.inputs[KL_SAXPY_X] = &tx;
    s.inputs[KL_SAXPY_Y] = &ty;
    double t = time_kl(&s, reps);
    /* Reads x and y, writes y: 12 bytes an element (the output is a new
     * tensor, so its page faults are part of the cost). */
    printf("saxpy n=%lld      %7.1f GB/s  (%.1f ms)\n", (long long)n, 12.0 * (double)n / t * 1e-9, t * 1e3);

    static const char *ops[] = {"sum", "min", "max", "mean"};
    for (int op = 0; op < 3; op++) {
        kl_args r = {.kernel = kl_kernel_find("reduce")};
        r.params[KL_REDUCE_OP] = (kl_value){.choice = op, .given = 1};
        r.inputs[KL_REDUCE_X] = &tx;
        t = time_kl(&r, reps);
        printf("reduce %-4s n=%lld %7.1f GB/s  (%.1f ms)\n", ops[op], (long long)n, 4.0 * (double)n / t * 1e-9,
               t * 1e3);
    }
    free(x);
    free(y);
}

int main(int argc, char **argv)
{
    int64_t s = argc > 1 ? atoll(argv[1]) : 2048;
    int64_t n = argc > 2 ? atoll(argv[2]) : (int64_t)1 << 26;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    reps = reps < 1 ? 1 : reps > 63 ? 63 : reps;
    printf("cores %ld, OpenBLAS threads %d, medians of %d runs after a warm-up\n", sysconf(_SC_NPROCESSORS_ONLN),
           openblas_get_num_threads(), reps);
    bench_gemm(s, reps);
    bench_gemm_batched(512, 64, reps);  /* small: the batch split across threads */
    bench_gemm_batched(8, 512, reps);   /* large: one threaded BLAS call per matrix */
    bench_vectors(n, reps);
    return 0;
}
