/* check_allreduce.cu — the NCCL all-reduce of the CUDA plugin against the CPU
 * reference, then nccl-tests-style figures. The inputs make the result exact
 * (kl_allreduce.h), so "compare" is exact: both backends must report
 * wrong = 0, for every op and dtype, on 1 GPU and on all the GPUs there are;
 * the bandwidth figures must follow nccl-tests' definitions; cancel and a
 * run on GPUs the host lacks are refused. Then, correctness done, time,
 * algbw and busbw of float32 sums from 8 MB to 256 MB per rank (busbw is 0
 * on one GPU: nothing crosses a link; algbw is then NCCL's local copy).
 * Built and run by tests/gpu/run.sh (check_common.h: the summary line and exit status). */
#include "kl_cuda.h"
#include "kl_allreduce.h"
#include "kl_plugin.h"

#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_common.h"

static const char *const op_names[] = {"sum", "max", "min"};

static kl_args args_for(int64_t count, int f64, int op, int iters, int ranks)
{
    kl_args a = kernel_args("allreduce");
    a.params[KL_ALLREDUCE_COUNT] = kl_value{(double)count, 0, 1};
    a.params[KL_ALLREDUCE_DTYPE] = kl_value{0, f64, 1};
    a.params[KL_ALLREDUCE_OP] = kl_value{0, op, 1};
    a.params[KL_ALLREDUCE_ITERS] = kl_value{(double)iters, 0, 1};
    a.ranks = ranks;
    return a;
}

struct figures {
    double time_us, algbw, busbw;
    int wrong;
};

static figures read_outs(const kl_tensor *o)
{
    figures f;
    f.time_us = ((const double *)o[0].data)[0];
    f.algbw = ((const double *)o[1].data)[0];
    f.busbw = ((const double *)o[2].data)[0];
    f.wrong = ((const int32_t *)o[3].data)[0];
    return f;
}

static void free_outs(kl_tensor *o, int rc)
{
    if (rc == 0)
        for (int i = 0; i < 4; i++)
            kl_tensor_free(&o[i]);
}

/* algbw = bytes / time and busbw = algbw * 2(n-1)/n, to rounding. */
static bool figures_consistent(const figures &f, int64_t count, int f64, int n)
{
    const double bytes = (double)count * (f64 ? 8 : 4);
    const double alg = bytes / (f.time_us * 1e-6) / 1e9, bus = alg * 2.0 * (n - 1) / n;
    return f.time_us > 0 && fabs(f.algbw - alg) <= 1e-9 * alg && fabs(f.busbw - bus) <= 1e-9 * alg;
}

static const char *info_get(const kl_info *info, const char *key)
{
    for (int i = 0; i < info->n; i++)
        if (strcmp(info->kv[i].key, key) == 0)
            return info->kv[i].value;
    return "";
}

/* One case on both backends: CUDA ranks are GPUs 0..ranks-1, CPU ranks are
 * threads; both must find every element exact. */
static void check_case(int64_t count, int f64, int op, int ranks)
{
    kl_args a = args_for(count, f64, op, 2, ranks);
    kl_info info;
    memset(&info, 0, sizeof info);
    a.info = &info;
    kl_tensor gpu[4], cpu[4];
    kl_err e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    double t0 = now_s();
    int rc_gpu = check_run(&a, ranks, gpu, &e1);
    double t1 = now_s();
    a.info = NULL;
    int rc_cpu = kl_run_cpu(&a, cpu, &e2);
    double t2 = now_s();
    bool ok = rc_gpu == 0 && rc_cpu == 0;
    char label[96];
    snprintf(label, sizeof label, "allreduce %s %s ranks=%d count=%lld", op_names[op], f64 ? "float64" : "float32",
             ranks, (long long)count);
    if (!ok) {
        printf("    cuda rc %d (%s)  cpu rc %d (%s)\n", rc_gpu, e1.message, rc_cpu, e2.message);
    } else {
        figures g = read_outs(gpu), c = read_outs(cpu);
        if (g.wrong != 0 || c.wrong != 0) {
            printf("    wrong elements: cuda %d  cpu %d\n", g.wrong, c.wrong);
            ok = false;
        }
        if (!figures_consistent(g, count, f64, ranks) || !figures_consistent(c, count, f64, ranks)) {
            printf("    inconsistent figures: cuda %g us %g %g GB/s  cpu %g us %g %g GB/s\n", g.time_us, g.algbw,
                   g.busbw, c.time_us, c.algbw, c.busbw);
            ok = false;
        }
        if (!strstr(info_get(&info, "transport"), "NCCL")) {
            printf("    info.transport is \"%s\", want NCCL ...\n", info_get(&info, "transport"));
            ok = false;
        }
    }
    printf("%s %-52s cuda %7.1f ms  cpu %7.1f ms\n", ok ? "PASS" : "FAIL", label, (t1 - t0) * 1e3,
           (t2 - t1) * 1e3);
    failures += !ok;
    free_outs(gpu, rc_gpu);
    free_outs(cpu, rc_cpu);
}

static void *raise_after_50ms(void *p)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n((volatile int *)p, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void check_refusals_and_cancel(int ngpus)
{
    kl_tensor out[4];
    kl_err err;

    memset(&err, 0, sizeof err);
    kl_args a = args_for(1024, 0, 0, 1, ngpus + 1);
    int rc = check_run(&a, ngpus + 1, out, &err);
    bool ok = rc == KL_EINVAL && strcmp(err.field, "resources.gpus") == 0;
    printf("%s %-52s %s\n", ok ? "PASS" : "FAIL", "more ranks than GPUs is refused", err.message);
    failures += !ok;
    free_outs(out, rc);

    volatile int cancel = 1;
    memset(&err, 0, sizeof err);
    a = args_for(1024, 0, 0, 10, ngpus);
    a.cancel = &cancel;
    rc = check_run(&a, ngpus, out, &err);
    ok = rc == KL_ECANCELED;
    printf("%s %-52s %s\n", ok ? "PASS" : "FAIL", "a raised cancel stops the run", err.message);
    failures += !ok;
    free_outs(out, rc);

    if (check_small) /* the long run below is no small case */
        return;
    /* 1000 x 256 MB: seconds of work; the cancel must end it well before. */
    cancel = 0;
    memset(&err, 0, sizeof err);
    a = args_for((int64_t)1 << 26, 0, 0, 1000, 1);
    a.cancel = &cancel;
    pthread_t t;
    pthread_create(&t, NULL, raise_after_50ms, (void *)&cancel);
    double t0 = now_s();
    rc = check_run(&a, 1, out, &err);
    double took = now_s() - t0;
    pthread_join(t, NULL);
    ok = rc == KL_ECANCELED && took < 3.0;
    printf("%s %-52s rc %d after %.0f ms (%s)\n", ok ? "PASS" : "FAIL", "cancel during a long run", rc, took * 1e3,
           err.message);
    failures += !ok;
    free_outs(out, rc);
}

/* A world of this node is kept when its run ends well and taken by the
 * next run on the same GPUs (ncclCommDestroy costs ~0.5 s: NCCL's proxy
 * thread looks every 500 ms); a cancelled run aborts its own; the
 * plugin's close destroys the rest. The times are shown, not judged. */
static void check_kept_worlds(int ngpus)
{
    kl_tensor out[4];
    kl_err err;
    double ms[2];
    kl__cuda_comms_drop_kept();
    bool ok = kl__cuda_comms_kept() == 0;
    for (int i = 0; i < 2; i++) {
        memset(&err, 0, sizeof err);
        kl_args a = args_for(4099, 0, 0, 2, 1);
        double t0 = now_s();
        int rc = check_run(&a, 1, out, &err);
        ms[i] = (now_s() - t0) * 1e3;
        ok &= rc == 0 && kl__cuda_comms_kept() == 1;
        free_outs(out, rc);
    }
    printf("%s %-52s first %.1f ms, second %.1f ms\n", ok ? "PASS" : "FAIL",
           "a second run takes the first's kept communicator", ms[0], ms[1]);
    failures += !ok;
    /* KOWLOON_NCCL_KEEP=0: the run takes the kept one and keeps nothing */
    setenv("KOWLOON_NCCL_KEEP", "0", 1);
    {
        memset(&err, 0, sizeof err);
        kl_args a = args_for(4099, 0, 0, 2, 1);
        int rc = check_run(&a, 1, out, &err);
        ok = rc == 0 && kl__cuda_comms_kept() == 0;
        printf("%s %-52s %d kept\n", ok ? "PASS" : "FAIL", "KOWLOON_NCCL_KEEP=0 keeps none",
               kl__cuda_comms_kept());
        failures += !ok;
        free_outs(out, rc);
    }
    unsetenv("KOWLOON_NCCL_KEEP");
    if (ngpus >= 2) { /* GPU 0's world again, then GPUs 0 and 1's */
        int rc = -1;  /* nothing to free before the first run */
        for (int ranks = 1; ranks <= 2; ranks++) {
            free_outs(out, rc);
            memset(&err, 0, sizeof err);
            kl_args a = args_for(4099, 0, 0, 2, ranks);
            rc = check_run(&a, ranks, out, &err);
        }
        ok = rc == 0 && kl__cuda_comms_kept() == 2;
        printf("%s %-52s %d kept\n", ok ? "PASS" : "FAIL", "another set of GPUs keeps a world of its own",
               kl__cuda_comms_kept());
        failures += !ok;
        free_outs(out, rc);
    }
    /* a run that is cancelled once its communicator is taken aborts it
     * (256 MB x 1000: seconds of work; not among the small cases) */
    if (check_small) {
        kl__cuda_comms_drop_kept();
        return;
    }
    { /* GPU 0's world kept (again) for the cancelled run to take */
        memset(&err, 0, sizeof err);
        kl_args a = args_for(4099, 0, 0, 2, 1);
        int rc = check_run(&a, 1, out, &err);
        failures += rc != 0;
        free_outs(out, rc);
    }
    volatile int cancel = 0;
    memset(&err, 0, sizeof err);
    kl_args a = args_for((int64_t)1 << 26, 0, 0, 1000, 1);
    a.cancel = &cancel;
    pthread_t t;
    pthread_create(&t, NULL, raise_after_50ms, (void *)&cancel);
    int rc = check_run(&a, 1, out, &err);
    pthread_join(t, NULL);
    const int left = kl__cuda_comms_kept();
    ok = rc == KL_ECANCELED && left == (ngpus >= 2 ? 1 : 0);
    printf("%s %-52s rc %d, %d kept\n", ok ? "PASS" : "FAIL", "a cancelled run aborts the world it took", rc, left);
    failures += !ok;
    free_outs(out, rc);
    kl__cuda_comms_drop_kept();
    ok = kl__cuda_comms_kept() == 0;
    printf("%s %-52s\n", ok ? "PASS" : "FAIL", "the plugin's close destroys the kept worlds");
    failures += !ok;
}

/* D2D copy of `bytes` on GPU 0, as bytes / time in GB/s: what one rank's
 * all-reduce (a local copy) can reach. */
static double d2d_copy_gbps(size_t bytes)
{
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    float ms = 0;
    if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess)
        return 0;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    for (int i = 0; i < 20; i++)
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return ms > 0 ? (double)bytes * 20 / (ms * 1e-3) / 1e9 : 0;
}

static void bench_sizes(int ranks)
{
    printf("\nallreduce float32 sum, %d rank(s) on GPUs 0..%d, out of place (nccl-tests definitions)\n", ranks,
           ranks - 1);
    printf("%12s %12s %10s %12s %12s %6s\n", "bytes/rank", "count", "time_us", "algbw_GB/s", "busbw_GB/s", "wrong");
    for (int64_t mb = 8; mb <= 256; mb *= 2) {
        const int64_t count = mb * (1 << 20) / 4;
        if (count * ranks > KL_ALLREDUCE_MAX_TOTAL) {
            printf("%12lld %12lld   skipped: count * ranks > %lld\n", (long long)(mb << 20), (long long)count,
                   (long long)KL_ALLREDUCE_MAX_TOTAL);
            continue;
        }
        kl_args a = args_for(count, 0, KL_ALLREDUCE_SUM, mb <= 32 ? 200 : 50, ranks);
        kl_tensor out[4];
        kl_err err;
        memset(&err, 0, sizeof err);
        int rc = check_run(&a, ranks, out, &err);
        if (rc != 0) {
            printf("FAIL allreduce %lld MB: %s\n", (long long)mb, err.message);
            failures++;
            continue;
        }
        figures f = read_outs(out);
        printf("%12lld %12lld %10.1f %12.1f %12.1f %6d\n", (long long)(mb << 20), (long long)count, f.time_us,
               f.algbw, f.busbw, f.wrong);
        if (f.wrong) {
            printf("FAIL %d wrong elements\n", f.wrong);
            failures++;
        }
        free_outs(out, rc);
    }
}

int main(int argc, char **argv)
{
    check_begin("check_allreduce", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;
    const int ngpus = plugin.ngpus;
    int version = 0;
    ncclGetVersion(&version);
    printf("%d GPU(s), NCCL %d.%d.%d; %s\n", ngpus, version / 10000, version / 100 % 100, version % 100,
           ngpus > 1 ? "checking 1 and all GPUs" : "one GPU: ranks = 1 (NCCL's single-rank path)");

    int rank_sets[3] = {1, 2, ngpus}, nsets = ngpus > 2 ? 3 : ngpus;
    for (int s = 0; s < nsets; s++)
        for (int f64 = 0; f64 < 2; f64++)
            for (int op = 0; op < 3; op++)
                if (!check_small || op == f64) /* small: a sum of float32, a max of float64 */
                    check_case(check_small ? 4099 : 1000003, f64, op, rank_sets[s]);
    check_case(1, 0, KL_ALLREDUCE_SUM, ngpus);
    check_case(7, 1, KL_ALLREDUCE_MIN, ngpus);
    check_refusals_and_cancel(ngpus);
    check_kept_worlds(ngpus);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    if (check_small)
        return check_end();

    bench_sizes(1);
    if (ngpus > 1)
        bench_sizes(ngpus);
    printf("\nreference: cudaMemcpy D2D 256 MB on GPU 0: %.1f GB/s (bytes / time)\n", d2d_copy_gbps((size_t)256 << 20));
    return check_end();
}
