/* check_heat2d.cu — heat2d on CUDA (the plugin) against the CPU reference,
 * then figures. Both backends round every float32 operation apart, in the
 * same order (no FMA anywhere), so the grid and the residual must agree bit
 * for bit: the comparison is exact (atol = rtol = 0), skipping non-finite
 * reference cells, stopping after 10 mismatches; one PASS or FAIL line per
 * case. Then, correctness done, the device-resident stencil (cell updates/s
 * and effective bandwidth at 8 bytes a cell update) against a device-to-
 * device cudaMemcpy of the same grid measured in the same run (the issue's
 * target: >= 70 %), and the plugin end to end. Built and run by
 * tests/gpu/run.sh (check_common.h: the summary line and exit status);
 * about 10 s on an H200. */
#include "kl_cuda.h"
#include "kl_plugin.h"

#include <algorithm>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#define KL_CHECK_SEED 0x3c6ef372fe94f82bull
#include "check_common.h"

static std::vector<float> frand_grid(int64_t h, int64_t w)
{
    std::vector<float> v((size_t)(h * w));
    for (auto &x : v)
        x = frand();
    return v;
}

static kl_args heat_args(const kl_tensor *g, double alpha, int64_t steps)
{
    kl_args a = kernel_args("heat2d");
    a.params[KL_HEAT2D_ALPHA] = kl_value{alpha, 0, 1};
    a.params[KL_HEAT2D_STEPS] = kl_value{(double)steps, 0, 1};
    a.inputs[KL_HEAT2D_GRID] = g;
    return a;
}

/* Exact comparison; a NaN reference wants a NaN. */
static int same_bits_or_both_nan(float got, float ref)
{
    return isnan(ref) ? isnan(got) : memcmp(&got, &ref, sizeof got) == 0;
}

static int compare_grid(const float *got, const float *ref, int64_t n, int64_t w)
{
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 10; i++) {
        if (!isfinite(ref[i]))
            continue;
        if (memcmp(&got[i], &ref[i], sizeof(float)) != 0) {
            printf("    mismatch at (%lld,%lld): cuda %.9g cpu %.9g\n", (long long)(i / w), (long long)(i % w), got[i],
                   ref[i]);
            bad++;
        }
    }
    return bad == 0;
}

static void check_case(const char *label, std::vector<float> &g, int64_t h, int64_t w, double alpha, int64_t steps)
{
    kl_tensor tg = f32_tensor(g.data(), 2, h, w), cpu[2], gpu[2];
    kl_args a = heat_args(&tg, alpha, steps);
    kl_err e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    double t0 = now_s();
    int rc_gpu = check_run(&a, 1, gpu, &e1);
    double t1 = now_s();
    int rc_cpu = kl_run_cpu(&a, cpu, &e2);
    double t2 = now_s();
    int ok = rc_gpu == 0 && rc_cpu == 0;
    if (!ok)
        printf("    cuda rc %d (%s)  cpu rc %d (%s)\n", rc_gpu, e1.message, rc_cpu, e2.message);
    if (ok) {
        ok = gpu[0].ndim == 2 && gpu[0].shape[0] == h && gpu[0].shape[1] == w && gpu[1].ndim == 1 &&
             gpu[1].shape[0] == 1;
        ok = ok && compare_grid((float *)gpu[0].data, (float *)cpu[0].data, h * w, w);
        float rg = ((float *)gpu[1].data)[0], rc = ((float *)cpu[1].data)[0];
        if (ok && !same_bits_or_both_nan(rg, rc)) {
            printf("    residual: cuda %.9g cpu %.9g\n", rg, rc);
            ok = 0;
        }
    }
    char full[128];
    snprintf(full, sizeof full, "heat2d %s %lldx%lld alpha %g steps %lld", label, (long long)h, (long long)w, alpha,
             (long long)steps);
    printf("%s %-56s cuda %8.1f ms  cpu %8.1f ms\n", ok ? "PASS" : "FAIL", full, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    failures += !ok;
    if (rc_gpu == 0) {
        kl_tensor_free(&gpu[0]);
        kl_tensor_free(&gpu[1]);
    }
    if (rc_cpu == 0) {
        kl_tensor_free(&cpu[0]);
        kl_tensor_free(&cpu[1]);
    }
}

static void check_random(int64_t h, int64_t w, double alpha, int64_t steps)
{
    std::vector<float> g = frand_grid(h, w);
    check_case("random", g, h, w, alpha, steps);
}

/* A constant grid is a fixed point: unchanged, residual exactly 0 (checked
 * against the CPU, whose unit tests prove both). */
static void check_constant(void)
{
    std::vector<float> g((size_t)(300 * 301), 2.5f);
    check_case("constant", g, 300, 301, 0.25, 10);
}

/* A NaN spreads: the residual is NaN on both. */
static void check_nan(void)
{
    std::vector<float> g = frand_grid(64, 70);
    g[(size_t)(30 * 70 + 33)] = NAN;
    check_case("with a NaN", g, 64, 70, 0.2, 3);
}

static void check_cancel_and_refusals(void)
{
    /* 8192^2 x 100000 steps would take minutes: a cancel after 100 ms is
     * seen within a group of steps (a few ms). */
    const int64_t n = 8192;
    std::vector<float> g = frand_grid(n, n);
    kl_tensor tg = f32_tensor(g.data(), 2, n, n), out[2];
    kl_args a = heat_args(&tg, 0.2, 100000);
    volatile int cancel = 0;
    a.cancel = &cancel;
    kl_err err;
    memset(&err, 0, sizeof err);
    double took;
    int rc = check_run_cancelled(&a, &cancel, out, &err, &took);
    bool ok = rc == KL_ECANCELED && out[0].data == NULL && took < 0.1 + 0.15;
    printf("%s %-56s %.0f ms (rc %d)\n", ok ? "PASS" : "FAIL", "heat2d 8192x8192 cancelled after 100 ms", took * 1e3,
           rc);
    failures += !ok;

    rc = check_run(&a, 1, out, &err); /* cancel still raised: refused before any step */
    ok = rc == KL_ECANCELED && out[0].data == NULL;
    printf("%s %-56s\n", ok ? "PASS" : "FAIL", "heat2d cancelled before launch");
    failures += !ok;

    a = heat_args(&tg, 0.3, 1);
    rc = check_run(&a, 1, out, &err);
    ok = rc == KL_EINVAL && strcmp(err.field, "params.alpha") == 0;
    printf("%s %-56s\n", ok ? "PASS" : "FAIL", "heat2d alpha 0.3 refused, naming params.alpha");
    failures += !ok;
}


/* The stencil on device-resident buffers against a D2D copy of one grid. */
static void bench_device(int64_t h, int64_t w, int64_t steps, const char *note)
{
    const size_t bytes = (size_t)(h * w) * sizeof(float);
    std::vector<float> g = frand_grid(h, w);
    float *buf[2], *dcopy;
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&buf[0], bytes));
    CHECK_CUDA(cudaMalloc(&buf[1], bytes));
    CHECK_CUDA(cudaMalloc(&dcopy, bytes));
    CHECK_CUDA(cudaMemcpy(buf[0], g.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(buf[1], buf[0], bytes, cudaMemcpyDeviceToDevice));
    float resid = 0;
    kl_err err;
    int rc = 0;
    double t_heat = time_device(
        [&] { rc |= kl__cuda_heat2d_dev(buf, (int)h, (int)w, 0.2f, steps, NULL, s, &resid, &err); }, 5, s);
    if (rc < 0) {
        printf("FAIL heat2d device run for timing: %s\n", err.message);
        failures++;
    }
    double t_copy = time_device(
        [&] { CHECK_CUDA(cudaMemcpyAsync(dcopy, buf[0], bytes, cudaMemcpyDeviceToDevice, s)); }, 10, s);
    cudaFree(buf[0]);
    cudaFree(buf[1]);
    cudaFree(dcopy);
    cudaStreamDestroy(s);
    const double updates = (double)(h - 2) * (double)(w - 2) * (double)steps;
    const double bw = 8.0 * updates / t_heat * 1e-9, copy_bw = 2.0 * (double)bytes / t_copy * 1e-9;
    printf("heat2d %lldx%lld x %lld steps (%.0f MiB a grid%s): %7.1f Gcell-updates/s  effective %7.1f GB/s  "
           "D2D memcpy (read+write) %7.1f GB/s  ratio %.2f\n",
           (long long)h, (long long)w, (long long)steps, (double)bytes / 1048576.0, note, updates / t_heat * 1e-9, bw,
           copy_bw, bw / copy_bw);
}

static void bench_plugin(int64_t n, int64_t steps)
{
    std::vector<float> g = frand_grid(n, n);
    kl_tensor tg = f32_tensor(g.data(), 2, n, n);
    kl_args a = heat_args(&tg, 0.2, steps);
    double t = time_plugin_runs(&a, 3, [](kl_tensor *out) {
        kl_tensor_free(&out[0]);
        kl_tensor_free(&out[1]);
    });
    if (isnan(t))
        return;
    printf("heat2d %lldx%lld x %lld steps: plugin end to end (host grid in and out) %.1f ms, %.1f Gcell-updates/s\n",
           (long long)n, (long long)n, (long long)steps, t * 1e3, (double)(n - 2) * (n - 2) * steps / t * 1e-9);
}

int main(int argc, char **argv)
{
    check_begin("check_heat2d", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;

    check_random(3, 3, 0.25, 1);
    check_random(3, 1000, 0.2, 7);  /* one interior row, many column blocks */
    check_random(1000, 3, 0.2, 7);  /* one interior column, many bands */
    check_random(37, 53, 0.1, 1);
    if (!check_small) {
        check_random(131, 257, 0.25, 50); /* a partial band and a partial column block */
        check_random(64, 64, 0.15, 1000); /* several groups of launches, even steps */
        check_random(64, 64, 0.15, 1001); /* odd steps: the result in the other buffer */
        check_random(1025, 2049, 0.2, 20);
        check_random(4099, 4097, 0.25, 3);
    }
    check_constant();
    check_nan();
    if (!check_small) /* an 8192^2 grid against the clock: no small case */
        check_cancel_and_refusals();
    printf("%s: %d failure(s)\n\n", failures ? "FAIL" : "PASS", failures);
    if (check_small)
        return check_end();

    bench_device(8192, 8192, 100, "");
    bench_device(16384, 16384, 20, "");
    bench_device(2048, 2048, 500, ", fits in L2");
    bench_plugin(8192, 100);
    return check_end();
}
