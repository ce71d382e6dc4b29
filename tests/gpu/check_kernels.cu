/* check_kernels.cu — the CUDA plugin against the CPU reference, then figures.
 * For each kernel: the same random inputs through plugin.run (CUDA) and
 * kl_run_cpu, compared element-wise with |got - ref| <= atol + rtol*|ref|,
 * skipping non-finite references, stopping after 10 mismatches; one PASS or
 * FAIL line per case. Then, untimed correctness done, the performance of
 * gemm (plugin end to end, and cublasSgemm on device-resident data) and of
 * reduce (plugin, device-resident CUB, and cudaMemcpy D2D bandwidth).
 * Built and run by tests/gpu/run.sh; exits 1 if any case fails. */
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

extern "C" int kl_cuda_plugin_open(kl_plugin *p, char *why, size_t why_len);

static kl_plugin plugin;
static int failures;

#define CHECK_CUDA(call)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static float frand(void) /* splitmix64 to [-1, 1) */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ull << 23) - 1.0);
}

static std::vector<float> frand_vec(int64_t n)
{
    std::vector<float> v((size_t)n);
    for (auto &x : v)
        x = frand();
    return v;
}

static kl_tensor tensor(float *data, int ndim, int64_t d0, int64_t d1 = 0, int64_t d2 = 0)
{
    kl_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = KL_F32;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.shape[2] = d2;
    t.data = data;
    return t;
}

static kl_args args_for(const char *name)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find(name);
    return a;
}

static int compare(const float *got, const float *ref, int64_t n, double atol, double rtol)
{
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 10; i++) {
        if (!isfinite(ref[i]))
            continue;
        if (!(fabs((double)got[i] - ref[i]) <= atol + rtol * fabs((double)ref[i]))) {
            printf("    mismatch at %lld: cuda %.9g cpu %.9g\n", (long long)i, got[i], ref[i]);
            bad++;
        }
    }
    return bad == 0;
}

/* Runs `a` on both backends and compares output 0. */
static void check_case(const char *label, const kl_args *a, double atol, double rtol)
{
    kl_tensor cpu[KL_MAX_IO], gpu[KL_MAX_IO];
    kl_err e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    double t0 = now_s();
    int rc_gpu = plugin.run(a, 0, 1, gpu, &e1);
    double t1 = now_s();
    int rc_cpu = kl_run_cpu(a, cpu, &e2);
    double t2 = now_s();
    int ok = rc_gpu == 0 && rc_cpu == 0;
    if (!ok)
        printf("    cuda rc %d (%s)  cpu rc %d (%s)\n", rc_gpu, e1.message, rc_cpu, e2.message);
    if (ok) {
        ok = gpu[0].ndim == cpu[0].ndim && kl_tensor_elems(&gpu[0]) == kl_tensor_elems(&cpu[0]);
        ok = ok && compare((float *)gpu[0].data, (float *)cpu[0].data, kl_tensor_elems(&cpu[0]), atol, rtol);
    }
    printf("%s %-40s cuda %8.1f ms  cpu %8.1f ms\n", ok ? "PASS" : "FAIL", label, (t1 - t0) * 1e3,
           (t2 - t1) * 1e3);
    failures += !ok;
    if (rc_gpu == 0)
        kl_tensor_free(&gpu[0]);
    if (rc_cpu == 0)
        kl_tensor_free(&cpu[0]);
}

static void check_saxpy(int64_t n)
{
    std::vector<float> x = frand_vec(n), y = frand_vec(n);
    kl_tensor tx = tensor(x.data(), 1, n), ty = tensor(y.data(), 1, n);
    kl_args a = args_for("saxpy");
    a.params[KL_SAXPY_A] = kl_value{0.37, 0, 1};
    a.inputs[KL_SAXPY_X] = &tx;
    a.inputs[KL_SAXPY_Y] = &ty;
    char label[64];
    snprintf(label, sizeof label, "saxpy n=%lld", (long long)n);
    check_case(label, &a, 1e-6, 1e-6); /* FMA on the GPU: last-bit differences */
}

static void check_reduce(int ndim, int64_t d0, int64_t d1, int64_t d2, kl_reduce_op op)
{
    static const char *names[] = {"sum", "min", "max", "mean"};
    int64_t n = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
    std::vector<float> x = frand_vec(n);
    kl_tensor tx = tensor(x.data(), ndim, d0, d1, d2);
    kl_args a = args_for("reduce");
    a.params[KL_REDUCE_OP] = kl_value{0, (int)op, 1};
    a.inputs[KL_REDUCE_X] = &tx;
    char label[64];
    snprintf(label, sizeof label, "reduce %s n=%lld rank %d", names[op], (long long)n, ndim);
    /* Both accumulate in double: they agree to about one float rounding. */
    check_case(label, &a, 1e-6, 2e-7);
}

static void check_gemm(int64_t m, int64_t n, int64_t k, bool with_c, double alpha, double beta)
{
    std::vector<float> A = frand_vec(m * k), B = frand_vec(k * n), C = frand_vec(m * n);
    kl_tensor ta = tensor(A.data(), 2, m, k), tb = tensor(B.data(), 2, k, n), tc = tensor(C.data(), 2, m, n);
    kl_args a = args_for("gemm");
    a.params[KL_GEMM_ALPHA] = kl_value{alpha, 0, 1};
    a.params[KL_GEMM_BETA] = kl_value{beta, 0, 1};
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    a.inputs[KL_GEMM_C] = with_c ? &tc : NULL;
    char label[64];
    snprintf(label, sizeof label, "gemm %lldx%lldx%lld%s", (long long)m, (long long)n, (long long)k,
             with_c ? " with c" : "");
    /* FP32 sums of k products in different orders: error grows with k. */
    check_case(label, &a, 2e-6 * (double)(k + 1), 1e-4);
}

static void *raise_later(void *p)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n((volatile int *)p, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void check_sleep_and_cancel(void)
{
    kl_tensor out[1];
    kl_err err;
    kl_args a = args_for("sleep");
    a.params[KL_SLEEP_SECONDS] = kl_value{0.2, 0, 1};
    int rc = plugin.run(&a, 0, 1, out, &err);
    bool ok = rc == 0 && ((float *)out[0].data)[0] >= 0.2f && ((float *)out[0].data)[0] < 0.3f;
    printf("%s %-40s\n", ok ? "PASS" : "FAIL", "sleep 0.2 s");
    failures += !ok;
    if (rc == 0)
        kl_tensor_free(&out[0]);

    volatile int cancel = 0;
    a.params[KL_SLEEP_SECONDS] = kl_value{10, 0, 1};
    a.cancel = &cancel;
    pthread_t t;
    pthread_create(&t, NULL, raise_later, (void *)&cancel);
    double t0 = now_s();
    rc = plugin.run(&a, 0, 1, out, &err);
    double took = now_s() - t0;
    pthread_join(t, NULL);
    ok = rc == KL_ECANCELED && took < 0.1 + 0.05 + 0.03;
    printf("%s %-40s %.0f ms\n", ok ? "PASS" : "FAIL", "sleep cancelled after 100 ms", took * 1e3);
    failures += !ok;

    /* A cancel raised before a GPU kernel starts stops it too. */
    std::vector<float> A = frand_vec(256 * 256);
    kl_tensor ta = tensor(A.data(), 2, 256, 256);
    kl_args g = args_for("gemm");
    kl_args_defaults(&g);
    g.inputs[KL_GEMM_A] = &ta;
    g.inputs[KL_GEMM_B] = &ta;
    cancel = 1;
    g.cancel = &cancel;
    rc = plugin.run(&g, 0, 1, out, &err);
    ok = rc == KL_ECANCELED && out[0].data == NULL;
    printf("%s %-40s\n", ok ? "PASS" : "FAIL", "gemm cancelled before launch");
    failures += !ok;

    rc = plugin.run(&g, plugin.ngpus, 1, out, &err);
    ok = rc == KL_EINVAL && strcmp(err.field, "resources.gpus") == 0;
    printf("%s %-40s\n", ok ? "PASS" : "FAIL", "run on a GPU the node lacks is refused");
    failures += !ok;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Device time of `reps` launches of fn, median per launch, in seconds. */
template <typename F> static double time_device(F fn, int reps)
{
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    fn(); /* warm-up */
    std::vector<double> ts;
    for (int i = 0; i < reps; i++) {
        CHECK_CUDA(cudaEventRecord(a));
        fn();
        CHECK_CUDA(cudaEventRecord(b));
        CHECK_CUDA(cudaEventSynchronize(b));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms * 1e-3);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(ts);
}

static double time_plugin(const kl_args *a, int reps)
{
    std::vector<double> ts;
    for (int i = 0; i < reps + 1; i++) {
        kl_tensor out[1];
        kl_err err;
        double t0 = now_s();
        int rc = plugin.run(a, 0, 1, out, &err);
        double t = now_s() - t0;
        if (rc < 0) {
            printf("FAIL plugin run for timing: %s\n", err.message);
            failures++;
            return NAN;
        }
        kl_tensor_free(&out[0]);
        if (i > 0) /* the first run pays for cuBLAS and pool set-up */
            ts.push_back(t);
    }
    return median(ts);
}

static void bench_gemm(int64_t s)
{
    double flops = 2.0 * (double)s * (double)s * (double)s;
    std::vector<float> A = frand_vec(s * s), B = frand_vec(s * s);
    kl_tensor ta = tensor(A.data(), 2, s, s), tb = tensor(B.data(), 2, s, s);
    kl_args a = args_for("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    double t_plugin = time_plugin(&a, 3);

    float *dA, *dB, *dC;
    size_t bytes = (size_t)(s * s) * sizeof(float);
    CHECK_CUDA(cudaMalloc(&dA, bytes));
    CHECK_CUDA(cudaMalloc(&dB, bytes));
    CHECK_CUDA(cudaMalloc(&dC, bytes));
    CHECK_CUDA(cudaMemcpy(dA, A.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dB, B.data(), bytes, cudaMemcpyHostToDevice));
    cublasHandle_t h;
    cublasCreate(&h);
    double t_direct = time_device([&] { kl__cuda_sgemm_rm(h, (int)s, (int)s, (int)s, 1.0f, dA, dB, 0.0f, dC); }, 5);
    cublasDestroy(h);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    printf("gemm %lld^3 fp32: plugin (host in/out) %6.2f TFLOP/s  cublasSgemm direct (device-resident) %6.2f "
           "TFLOP/s  ratio %.2f\n",
           (long long)s, flops / t_plugin * 1e-12, flops / t_direct * 1e-12, t_direct / t_plugin);
}

static void bench_reduce(int64_t n)
{
    size_t bytes = (size_t)n * sizeof(float);
    std::vector<float> x = frand_vec(n);
    kl_tensor tx = tensor(x.data(), 1, n);
    kl_args a = args_for("reduce");
    kl_args_defaults(&a);
    a.inputs[KL_REDUCE_X] = &tx;
    double t_plugin = time_plugin(&a, 3);

    float *dx, *dy;
    CHECK_CUDA(cudaMalloc(&dx, bytes));
    CHECK_CUDA(cudaMalloc(&dy, bytes));
    CHECK_CUDA(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    double r;
    kl_err err;
    double t_sum = time_device([&] { kl__cuda_reduce_dev(dx, n, KL_REDUCE_SUM, 0, &r, &err); }, 10);
    double t_max = time_device([&] { kl__cuda_reduce_dev(dx, n, KL_REDUCE_MAX, 0, &r, &err); }, 10);
    double t_copy = time_device([&] { cudaMemcpy(dy, dx, bytes, cudaMemcpyDeviceToDevice); }, 10);
    cudaFree(dx);
    cudaFree(dy);
    /* A reduce reads each byte once; a copy reads and writes it. */
    printf("reduce %lld floats (%.0f MiB): plugin (host in) %6.1f GB/s  device sum %6.1f GB/s  device max %6.1f "
           "GB/s  D2D memcpy (read+write) %6.1f GB/s\n",
           (long long)n, bytes / 1048576.0, bytes / t_plugin * 1e-9, bytes / t_sum * 1e-9, bytes / t_max * 1e-9,
           2.0 * bytes / t_copy * 1e-9);
}

int main(void)
{
    char why[256];
    if (kl_cuda_plugin_open(&plugin, why, sizeof why) < 0) {
        printf("FAIL plugin open: %s\n", why);
        return 1;
    }
    for (int i = 0; i < plugin.ngpus; i++)
        printf("gpu %d: %s, %.1f GiB, sm_%d%d\n", i, plugin.gpus[i].name,
               plugin.gpus[i].memory_bytes / 1073741824.0, plugin.gpus[i].cc_major, plugin.gpus[i].cc_minor);

    check_saxpy(1);
    check_saxpy(1000);
    check_saxpy((1 << 24) + 3);
    for (int op = 0; op < 4; op++) {
        check_reduce(1, 1, 0, 0, (kl_reduce_op)op);
        check_reduce(1, 1000, 0, 0, (kl_reduce_op)op);
        check_reduce(3, 257, 129, 513, (kl_reduce_op)op);
    }
    check_gemm(1, 1, 1, false, 1, 0);
    check_gemm(37, 29, 53, true, 1.5, -0.75);
    check_gemm(513, 257, 1031, true, 1.5, -0.75);
    check_gemm(1024, 1024, 1024, false, 1, 0);
    check_gemm(7, 5, 0, true, 1, 2);
    check_sleep_and_cancel();
    printf("%s: %d failure(s)\n\n", failures ? "FAIL" : "PASS", failures);

    bench_gemm(4096);
    bench_gemm(8192);
    bench_reduce((int64_t)1 << 28);
    return failures ? 1 : 0;
}
