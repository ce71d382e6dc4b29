/* check_kernels.cu — the CUDA plugin against the CPU reference, then figures.
 * For each kernel: the same random inputs through plugin.run (CUDA) and
 * kl_run_cpu, compared element-wise with |got - ref| <= atol + rtol*|ref|,
 * skipping non-finite references, stopping after 10 mismatches; one PASS or
 * FAIL line per case. Then, untimed correctness done, the performance of
 * gemm (fp32: plugin end to end, the library's device path and cublasSgemm
 * called directly on device-resident data; tf32 and bf16 tensor cores, bf16
 * with and without the conversion of its inputs; strided batches) and of
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

#define KL_CHECK_SEED 0x243f6a8885a308d3ull
#include "check_common.h"

static std::vector<float> frand_vec(int64_t n)
{
    std::vector<float> v((size_t)n);
    for (auto &x : v)
        x = frand();
    return v;
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
    int rc_gpu = check_run(a, 1, gpu, &e1);
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
    kl_tensor tx = f32_tensor(x.data(), 1, n), ty = f32_tensor(y.data(), 1, n);
    kl_args a = kernel_args("saxpy");
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
    kl_tensor tx = f32_tensor(x.data(), ndim, d0, d1, d2);
    kl_args a = kernel_args("reduce");
    a.params[KL_REDUCE_OP] = kl_value{0, (int)op, 1};
    a.inputs[KL_REDUCE_X] = &tx;
    char label[64];
    snprintf(label, sizeof label, "reduce %s n=%lld rank %d", names[op], (long long)n, ndim);
    /* Both accumulate in double: they agree to about one float rounding. */
    check_case(label, &a, 1e-6, 2e-7);
}

static const char *const gemm_precisions[] = {"fp32", "tf32", "bf16"};

/* Error bounds per precision, for inputs in [-1, 1): a sum of k products
 * each off by the rounding of its operands, in random directions, so the
 * error grows like sqrt(k) (k for fp32, whose bound is also tight enough to
 * catch TF32 leaking into the fp32 path: that would be off by ~1e-3*sqrt(k)).
 * tf32 keeps 10 mantissa bits (cuBLAS may truncate), bf16 7 bits. */
static void gemm_tolerance(kl_gemm_precision p, int64_t k, double *atol, double *rtol)
{
    double sk = sqrt((double)(k + 1));
    switch (p) {
    case KL_GEMM_FP32: *atol = 2e-6 * (double)(k + 1), *rtol = 1e-4; break;
    case KL_GEMM_TF32: *atol = 5e-3 * sk, *rtol = 1e-2; break;
    case KL_GEMM_BF16: *atol = 1e-2 * sk, *rtol = 2e-2; break;
    }
}

static const char *info_get(const kl_info *info, const char *key)
{
    for (int i = 0; i < info->n; i++)
        if (strcmp(info->kv[i].key, key) == 0)
            return info->kv[i].value;
    return "";
}

/* batch = 0 means rank 2 ([m,k] @ [k,n]); otherwise rank 3 with that batch.
 * CUDA and the CPU on the same inputs; also that CUDA's info names the
 * precision asked for, and the largest error, to show each path's own. */
static void check_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, bool with_c, double alpha, double beta,
                       kl_gemm_precision p = KL_GEMM_FP32)
{
    const int64_t bt = batch ? batch : 1;
    std::vector<float> A = frand_vec(bt * m * k), B = frand_vec(bt * k * n), C = frand_vec(bt * m * n);
    kl_tensor ta = batch ? f32_tensor(A.data(), 3, batch, m, k) : f32_tensor(A.data(), 2, m, k);
    kl_tensor tb = batch ? f32_tensor(B.data(), 3, batch, k, n) : f32_tensor(B.data(), 2, k, n);
    kl_tensor tc = batch ? f32_tensor(C.data(), 3, batch, m, n) : f32_tensor(C.data(), 2, m, n);
    kl_args a = kernel_args("gemm");
    a.params[KL_GEMM_ALPHA] = kl_value{alpha, 0, 1};
    a.params[KL_GEMM_BETA] = kl_value{beta, 0, 1};
    a.params[KL_GEMM_PRECISION] = kl_value{0, (int)p, 1};
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    a.inputs[KL_GEMM_C] = with_c ? &tc : NULL;
    char label[96], batch_of[32] = "";
    if (batch)
        snprintf(batch_of, sizeof batch_of, "%lldx(", (long long)batch);
    snprintf(label, sizeof label, "gemm %s %s%lldx%lldx%lld%s%s", gemm_precisions[p], batch_of, (long long)m,
             (long long)n, (long long)k, batch ? ")" : "", with_c ? " with c" : "");
    double atol, rtol;
    gemm_tolerance(p, k, &atol, &rtol);

    kl_tensor cpu[1], gpu[1];
    kl_err e1, e2;
    kl_info info;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    memset(&info, 0, sizeof info);
    a.info = &info;
    double t0 = now_s();
    int rc_gpu = check_run(&a, 1, gpu, &e1);
    double t1 = now_s();
    a.info = NULL;
    int rc_cpu = kl_run_cpu(&a, cpu, &e2);
    double t2 = now_s();
    bool ok = rc_gpu == 0 && rc_cpu == 0;
    if (!ok)
        printf("    cuda rc %d (%s)  cpu rc %d (%s)\n", rc_gpu, e1.message, rc_cpu, e2.message);
    double maxerr = 0;
    if (ok) {
        int64_t ne = kl_tensor_elems(&cpu[0]);
        ok = gpu[0].ndim == cpu[0].ndim && kl_tensor_elems(&gpu[0]) == ne;
        for (int d = 0; ok && d < cpu[0].ndim; d++)
            ok = gpu[0].shape[d] == cpu[0].shape[d];
        ok = ok && compare((float *)gpu[0].data, (float *)cpu[0].data, ne, atol, rtol);
        for (int64_t i = 0; ok && i < ne; i++)
            maxerr = std::max(maxerr, fabs((double)((float *)gpu[0].data)[i] - ((float *)cpu[0].data)[i]));
        /* Empty products run on the CPU, which says fp32. */
        const char *want = bt * m * n * k == 0 ? "fp32" : gemm_precisions[p];
        if (ok && strcmp(info_get(&info, "precision"), want) != 0) {
            printf("    info.precision is \"%s\", want \"%s\"\n", info_get(&info, "precision"), want);
            ok = false;
        }
    }
    printf("%s %-40s cuda %8.1f ms  cpu %8.1f ms  max|err| %.2g\n", ok ? "PASS" : "FAIL", label, (t1 - t0) * 1e3,
           (t2 - t1) * 1e3, maxerr);
    failures += !ok;
    if (rc_gpu == 0)
        kl_tensor_free(&gpu[0]);
    if (rc_cpu == 0)
        kl_tensor_free(&cpu[0]);
}

static void check_sleep_and_cancel(void)
{
    kl_tensor out[1];
    kl_err err;
    kl_args a = kernel_args("sleep");
    a.params[KL_SLEEP_SECONDS] = kl_value{0.2, 0, 1};
    int rc = check_run(&a, 1, out, &err);
    bool ok = rc == 0 && ((float *)out[0].data)[0] >= 0.2f && ((float *)out[0].data)[0] < 0.3f;
    printf("%s %-40s\n", ok ? "PASS" : "FAIL", "sleep 0.2 s");
    failures += !ok;
    if (rc == 0)
        kl_tensor_free(&out[0]);

    volatile int cancel = 0;
    a.params[KL_SLEEP_SECONDS] = kl_value{10, 0, 1};
    a.cancel = &cancel;
    double took;
    rc = check_run_cancelled(&a, &cancel, out, &err, &took);
    ok = rc == KL_ECANCELED && took < 0.1 + 0.05 + 0.03;
    printf("%s %-40s %.0f ms\n", ok ? "PASS" : "FAIL", "sleep cancelled after 100 ms", took * 1e3);
    failures += !ok;

    /* A cancel raised before a GPU kernel starts stops it too. */
    std::vector<float> A = frand_vec(256 * 256);
    kl_tensor ta = f32_tensor(A.data(), 2, 256, 256);
    kl_args g = kernel_args("gemm");
    kl_args_defaults(&g);
    g.inputs[KL_GEMM_A] = &ta;
    g.inputs[KL_GEMM_B] = &ta;
    cancel = 1;
    g.cancel = &cancel;
    rc = check_run(&g, 1, out, &err);
    ok = rc == KL_ECANCELED && out[0].data == NULL;
    printf("%s %-40s\n", ok ? "PASS" : "FAIL", "gemm cancelled before launch");
    failures += !ok;

    const int absent = plugin.ngpus;
    rc = plugin.run(&g, &absent, 1, out, &err);
    ok = rc == KL_EINVAL && strcmp(err.field, "resources.gpus") == 0;
    printf("%s %-40s\n", ok ? "PASS" : "FAIL", "run on a GPU the node lacks is refused");
    failures += !ok;
}

static double time_plugin(const kl_args *a, int reps)
{
    return time_plugin_runs(a, reps, [](kl_tensor *out) { kl_tensor_free(&out[0]); });
}

__global__ static void fill_uniform(float *x, int64_t n, uint64_t seed) /* splitmix64 to [-1, 1) */
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        x[i] = (float)((double)(z >> 40) / (double)(1ull << 23) - 1.0);
    }
}

/* Device buffers of one gemm problem, random a and b, with the bf16 copies
 * that the bf16 path multiplies. */
struct gemm_dev {
    int64_t batch, m, n, k;
    float *A, *B, *C;
    void *A16, *B16;
    gemm_dev(int64_t batch_, int64_t m_, int64_t n_, int64_t k_) : batch(batch_), m(m_), n(n_), k(k_)
    {
        CHECK_CUDA(cudaMalloc(&A, sizeof(float) * (size_t)(batch * m * k)));
        CHECK_CUDA(cudaMalloc(&B, sizeof(float) * (size_t)(batch * k * n)));
        CHECK_CUDA(cudaMalloc(&C, sizeof(float) * (size_t)(batch * m * n)));
        CHECK_CUDA(cudaMalloc(&A16, 2 * (size_t)(batch * m * k)));
        CHECK_CUDA(cudaMalloc(&B16, 2 * (size_t)(batch * k * n)));
        fill_uniform<<<4096, 256>>>(A, batch * m * k, 1);
        fill_uniform<<<4096, 256>>>(B, batch * k * n, 2);
        CHECK_CUDA(cudaGetLastError());
        to_bf16();
        CHECK_CUDA(cudaDeviceSynchronize());
    }
    ~gemm_dev()
    {
        cudaFree(A);
        cudaFree(B);
        cudaFree(C);
        cudaFree(A16);
        cudaFree(B16);
    }
    void to_bf16()
    {
        CHECK_CUDA(kl__cuda_f32_to_bf16(A, A16, batch * m * k, 0));
        CHECK_CUDA(kl__cuda_f32_to_bf16(B, B16, batch * k * n, 0));
    }
    /* The library's device path, as the plugin calls it. */
    void run(cublasHandle_t h, kl_gemm_precision p)
    {
        bool half = p == KL_GEMM_BF16;
        cublasStatus_t s = kl__cuda_gemm_rm(h, p, batch, (int)m, (int)n, (int)k, 1.0f, half ? A16 : (void *)A,
                                            half ? B16 : (void *)B, 0.0f, C);
        if (s != CUBLAS_STATUS_SUCCESS) {
            printf("FAIL kl__cuda_gemm_rm %s: %s\n", gemm_precisions[p], cublasGetStatusString(s));
            failures++;
        }
    }
    double flops() const { return 2.0 * (double)batch * (double)m * (double)n * (double)k; }
};

/* fp32 s^3: the plugin end to end (host in and out, so PCIe included), the
 * library's device path, and cublasSgemm called directly on the same
 * device buffers; the two ratios are against the direct call. */
static void bench_gemm_fp32(int64_t s)
{
    std::vector<float> A = frand_vec(s * s), B = frand_vec(s * s);
    kl_tensor ta = f32_tensor(A.data(), 2, s, s), tb = f32_tensor(B.data(), 2, s, s);
    kl_args a = kernel_args("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    double t_plugin = time_plugin(&a, 3);

    gemm_dev g(1, s, s, s);
    cublasHandle_t h;
    cublasCreate(&h);
    const float one = 1, zero = 0;
    const int si = (int)s;
    double t_direct = time_device([&] { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, si, si, si, &one, g.B, si, g.A, si, &zero, g.C, si); }, 5);
    double t_lib = time_device([&] { g.run(h, KL_GEMM_FP32); }, 5);
    cublasDestroy(h);
    double f = g.flops();
    printf("gemm %lld^3 fp32: cublasSgemm direct %6.2f TFLOP/s | kl device path %6.2f TFLOP/s, ratio %.3f | "
           "plugin end to end (host in/out) %6.2f TFLOP/s, ratio %.3f\n",
           (long long)s, f / t_direct * 1e-12, f / t_lib * 1e-12, t_direct / t_lib, f / t_plugin * 1e-12,
           t_direct / t_plugin);
}

/* The tensor-core paths on device-resident data: tf32, and bf16 timed
 * without and with the conversion of a and b from fp32. */
static void bench_gemm_tensor_cores(int64_t s)
{
    gemm_dev g(1, s, s, s);
    cublasHandle_t h;
    cublasCreate(&h);
    double t_tf32 = time_device([&] { g.run(h, KL_GEMM_TF32); }, 5);
    double t_bf16 = time_device([&] { g.run(h, KL_GEMM_BF16); }, 5);
    double t_conv = time_device([&] { g.to_bf16(); g.run(h, KL_GEMM_BF16); }, 5);
    cublasDestroy(h);
    double f = g.flops();
    printf("gemm %lld^3 device-resident: tf32 %6.1f TFLOP/s | bf16 gemm only %6.1f TFLOP/s (target >= 600) | "
           "bf16 with fp32->bf16 conversion %6.1f TFLOP/s\n",
           (long long)s, f / t_tf32 * 1e-12, f / t_bf16 * 1e-12, f / t_conv * 1e-12);
}

/* Strided-batched: device-resident in each precision, and the plugin end to end in fp32. */
static void bench_gemm_batched(int64_t batch, int64_t s)
{
    gemm_dev g(batch, s, s, s);
    cublasHandle_t h;
    cublasCreate(&h);
    double t[3];
    for (int p = 0; p < 3; p++)
        t[p] = time_device([&] { g.run(h, (kl_gemm_precision)p); }, 5);
    cublasDestroy(h);

    std::vector<float> A = frand_vec(batch * s * s), B = frand_vec(batch * s * s);
    kl_tensor ta = f32_tensor(A.data(), 3, batch, s, s), tb = f32_tensor(B.data(), 3, batch, s, s);
    kl_args a = kernel_args("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    double t_plugin = time_plugin(&a, 3);
    double f = g.flops();
    printf("gemm batched %lldx%lld^3 device-resident: fp32 %6.1f  tf32 %6.1f  bf16 %6.1f TFLOP/s | plugin fp32 end "
           "to end %6.2f TFLOP/s\n",
           (long long)batch, (long long)s, f / t[0] * 1e-12, f / t[1] * 1e-12, f / t[2] * 1e-12,
           f / t_plugin * 1e-12);
}

static void bench_reduce(int64_t n)
{
    size_t bytes = (size_t)n * sizeof(float);
    std::vector<float> x = frand_vec(n);
    kl_tensor tx = f32_tensor(x.data(), 1, n);
    kl_args a = kernel_args("reduce");
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

int main(int argc, char **argv)
{
    check_begin("check_kernels", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;

    check_saxpy(1);
    check_saxpy(1000);
    if (!check_small)
        check_saxpy((1 << 24) + 3);
    for (int op = 0; op < 4; op++) {
        check_reduce(1, 1, 0, 0, (kl_reduce_op)op);
        check_reduce(1, 1000, 0, 0, (kl_reduce_op)op);
        check_reduce(3, 257, 129, 513, (kl_reduce_op)op);
    }
    check_gemm(0, 1, 1, 1, false, 1, 0);
    check_gemm(0, 37, 29, 53, true, 1.5, -0.75);
    if (!check_small) {
        check_gemm(0, 513, 257, 1031, true, 1.5, -0.75);
        check_gemm(0, 1024, 1024, 1024, false, 1, 0);
    }
    check_gemm(0, 7, 5, 0, true, 1, 2);
    for (int p = KL_GEMM_TF32; p <= KL_GEMM_BF16; p++) {
        check_gemm(0, 37, 29, 53, true, 1.5, -0.75, (kl_gemm_precision)p); /* odd sizes: the bf16 tail */
        if (check_small)
            continue;
        check_gemm(0, 513, 257, 1031, true, 1.5, -0.75, (kl_gemm_precision)p);
        check_gemm(0, 1024, 1024, 1024, false, 1, 0, (kl_gemm_precision)p);
    }
    for (int p = KL_GEMM_FP32; p <= KL_GEMM_BF16; p++) {
        check_gemm(7, 65, 33, 129, true, 1.5, -0.75, (kl_gemm_precision)p);
        if (check_small)
            continue;
        check_gemm(1, 128, 96, 64, false, 1, 0, (kl_gemm_precision)p);
        check_gemm(300, 8, 16, 24, true, 1, 1, (kl_gemm_precision)p);
    }
    check_gemm(4, 5, 6, 0, true, 1, 2, KL_GEMM_BF16);
    check_gemm(0, 0, 6, 3, false, 1, 0, KL_GEMM_TF32);
    if (!check_small) /* against the clock: no case for compute-sanitizer */
        check_sleep_and_cancel();
    printf("%s: %d failure(s)\n\n", failures ? "FAIL" : "PASS", failures);
    if (check_small)
        return check_end();

    bench_gemm_fp32(4096);
    bench_gemm_fp32(8192);
    bench_gemm_tensor_cores(8192);
    bench_gemm_tensor_cores(16384);
    bench_gemm_batched(64, 512);
    bench_reduce((int64_t)1 << 28);
    return check_end();
}
