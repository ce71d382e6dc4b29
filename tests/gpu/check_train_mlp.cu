/* check_train_mlp.cu — train_mlp's CUDA implementation against the CPU
 * reference (built with -DKL_NO_BLAS), then its throughput.
 * For each case, the same Gaussian blobs through plugin.run and kl_run_cpu:
 * every output compared with |got - ref| <= atol + rtol*|ref| (weights after
 * a few epochs drift apart by the rounding of different summation orders,
 * so atol 1e-4, rtol 1e-3; loss rtol 1e-4; accuracy within 2 rows), skipping
 * non-finite references and stopping after 10 mismatches; one PASS or FAIL
 * line per case, with the largest differences seen. Each case compares
 * like with like, the same number of ranks on both backends (ranks > 1 on
 * CUDA need as many GPUs: NCCL, one device per rank; skipped with fewer):
 * the ranks split every batch between them, so a run of 1 rank and one of
 * 2 walk the data in different batches and end with different weights
 * (on the first case's inputs, CPU 1 rank against CPU 2 ranks differ in
 * 383 of 387 weights) however right both are. Then labels out of range,
 * cancel, and samples per second (plugin end to end, host transfers
 * included). Built and run by tests/gpu/run.sh (check_common.h: the
 * summary line and exit status). */
#include "kl_cuda.h"
#include "kl_plugin.h"
#include "cpu/mlp_math.h"

#include <algorithm>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#define KL_CHECK_SEED 0x452821e638d01377ull
#include "check_common.h"

/* Gaussian blobs: class k = row % c, unit variance around spread at
 * coordinate k % d. */
struct blobs {
    int64_t n, d;
    std::vector<float> x;
    std::vector<int32_t> y;
    kl_tensor tx, ty;
    blobs(int64_t n_, int64_t d_, int64_t c, double spread) : n(n_), d(d_), x((size_t)(n_ * d_)), y((size_t)n_)
    {
        for (int64_t i = 0; i < n; i++) {
            y[(size_t)i] = (int32_t)(i % c);
            for (int64_t j = 0; j < d; j++) {
                double g = sqrt(-2.0 * log(1.0 - urand())) * cos(6.283185307179586 * urand());
                x[(size_t)(i * d + j)] = (float)(g + (j == (i % c) % d ? spread : 0.0));
            }
        }
        memset(&tx, 0, sizeof tx);
        memset(&ty, 0, sizeof ty);
        tx.dtype = KL_F32;
        tx.ndim = 2;
        tx.shape[0] = n;
        tx.shape[1] = d;
        tx.data = x.data();
        ty.dtype = KL_I32;
        ty.ndim = 1;
        ty.shape[0] = n;
        ty.data = y.data();
    }
};

struct hyper {
    int hidden, classes, epochs, batch;
    double lr, momentum, seed;
};

static kl_args args_for(const blobs &b, const hyper &h, int ranks)
{
    kl_args a = kernel_args("train_mlp");
    const double v[] = {(double)h.hidden, (double)h.classes, (double)h.epochs, (double)h.batch,
                        h.lr, h.momentum, h.seed};
    for (int i = 0; i < 7; i++) {
        a.params[i].num = v[i];
        a.params[i].given = 1;
    }
    a.inputs[KL_MLP_X] = &b.tx;
    a.inputs[KL_MLP_Y] = &b.ty;
    a.ranks = ranks;
    return a;
}

/* Mismatches of got against ref (at most 10 printed); *maxabs gets the
 * largest |got - ref|. */
static int compare(const char *what, const float *got, const float *ref, int64_t n, double atol, double rtol,
                   double *maxabs)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]))
            continue;
        double diff = fabs((double)got[i] - ref[i]);
        *maxabs = diff > *maxabs ? diff : *maxabs;
        if (!(diff <= atol + rtol * fabs((double)ref[i])) && bad < 10) {
            printf("    %s[%lld]: cuda %.9g cpu %.9g\n", what, (long long)i, got[i], ref[i]);
            bad++;
        }
    }
    return bad;
}

static void outs_free(kl_tensor *o, int rc)
{
    if (rc == 0)
        for (int i = 0; i < 6; i++)
            kl_tensor_free(&o[i]);
}

/* CUDA on gpu_ranks devices against the CPU on cpu_ranks threads. */
static void check_case(const char *label, const blobs &b, const hyper &h, int gpu_ranks, int cpu_ranks)
{
    if (gpu_ranks > plugin.ngpus) {
        printf("SKIP %-48s needs %d GPUs, this host has %d\n", label, gpu_ranks, plugin.ngpus);
        return;
    }
    kl_tensor gpu[KL_MAX_IO], cpu[KL_MAX_IO];
    kl_err e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    kl_args ag = args_for(b, h, gpu_ranks), ac = args_for(b, h, cpu_ranks);
    double t0 = now_s();
    int rc_gpu = check_run(&ag, gpu_ranks, gpu, &e1);
    double t1 = now_s();
    int rc_cpu = kl_run_cpu(&ac, cpu, &e2);
    double t2 = now_s();
    bool ok = rc_gpu == 0 && rc_cpu == 0;
    if (!ok)
        printf("    cuda rc %d (%s)  cpu rc %d (%s)\n", rc_gpu, e1.message, rc_cpu, e2.message);
    double dw = 0, dl = 0, da = 0;
    if (ok) {
        static const char *names[] = {"w1", "b1", "w2", "b2"};
        int bad = 0;
        for (int i = 0; i < 6; i++)
            ok = ok && kl_tensor_elems(&gpu[i]) == kl_tensor_elems(&cpu[i]) && gpu[i].ndim == cpu[i].ndim;
        for (int i = 0; ok && i < 4; i++)
            bad += compare(names[i], (float *)gpu[i].data, (float *)cpu[i].data, kl_tensor_elems(&cpu[i]), 1e-4,
                           1e-3, &dw);
        if (ok) {
            bad += compare("loss", (float *)gpu[KL_MLP_OUT_LOSS].data, (float *)cpu[KL_MLP_OUT_LOSS].data,
                           h.epochs, 1e-5, 1e-4, &dl);
            bad += compare("accuracy", (float *)gpu[KL_MLP_OUT_ACC].data, (float *)cpu[KL_MLP_OUT_ACC].data, 1,
                           2.0 / (double)b.n + 1e-7, 0, &da);
        }
        ok = ok && bad == 0;
    }
    printf("%s %-48s max|dw| %.2e  max|dloss| %.2e  acc cuda %.4f cpu %.4f  cuda %7.1f ms  cpu %7.1f ms\n",
           ok ? "PASS" : "FAIL", label, dw, dl, rc_gpu == 0 ? ((float *)gpu[KL_MLP_OUT_ACC].data)[0] : NAN,
           rc_cpu == 0 ? ((float *)cpu[KL_MLP_OUT_ACC].data)[0] : NAN, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    failures += !ok;
    outs_free(gpu, rc_gpu);
    outs_free(cpu, rc_cpu);
}

static void check_labels_refused(void)
{
    blobs b(100, 4, 3, 3.0);
    b.y[57] = 3;
    hyper h = {8, 3, 1, 10, 0.1, 0.9, 1};
    kl_args a = args_for(b, h, 1);
    kl_tensor out[KL_MAX_IO];
    kl_err err;
    memset(&err, 0, sizeof err);
    int rc = check_run(&a, 1, out, &err);
    bool ok = rc == KL_EINVAL && strcmp(err.field, "inputs.y") == 0 && out[0].data == NULL;
    printf("%s %-48s %s\n", ok ? "PASS" : "FAIL", "labels out of range refused (inputs.y)", err.message);
    failures += !ok;
    outs_free(out, rc);
}

static void check_cancel(void)
{
    blobs b(20000, 32, 10, 3.0);
    hyper h = {256, 10, 1000, 32, 0.01, 0.9, 1};
    kl_args a = args_for(b, h, 1);
    volatile int cancel = 1;
    a.cancel = &cancel;
    kl_tensor out[KL_MAX_IO];
    kl_err err;
    int rc = check_run(&a, 1, out, &err);
    bool ok = rc == KL_ECANCELED && out[0].data == NULL;
    printf("%s %-48s\n", ok ? "PASS" : "FAIL", "cancel raised before the run");
    failures += !ok;
    outs_free(out, rc);

    cancel = 0;
    double took;
    rc = check_run_cancelled(&a, &cancel, out, &err, &took);
    ok = rc == KL_ECANCELED && took < 0.1 + 0.4; /* start-up, then two windows of queued steps at most */
    printf("%s %-48s %.0f ms\n", ok ? "PASS" : "FAIL", "1000 epochs cancelled after 100 ms", took * 1e3);
    failures += !ok;
    outs_free(out, rc);
}

/* Samples per second of the plugin, end to end: the median of 3 runs
 * after a warm-up one. */
static void bench(const char *label, int64_t n, int64_t d, const hyper &h, int ranks)
{
    if (ranks > plugin.ngpus)
        return;
    blobs b(n, d, h.classes, 2.0);
    kl_args a = args_for(b, h, ranks);
    std::vector<double> ts;
    for (int i = 0; i < 4; i++) {
        kl_tensor out[KL_MAX_IO];
        kl_err err;
        double t0 = now_s();
        int rc = check_run(&a, ranks, out, &err);
        double dt = now_s() - t0;
        if (rc < 0) {
            printf("FAIL train_mlp bench %s: %s\n", label, err.message);
            failures++;
            return;
        }
        outs_free(out, rc);
        if (i > 0)
            ts.push_back(dt);
    }
    double t = median(ts);
    printf("train_mlp %-40s %d rank(s): %10.0f samples/s  (%lld x %d epochs in %.3f s)\n", label, ranks,
           (double)n * h.epochs / t, (long long)n, h.epochs, t);
}

int main(int argc, char **argv)
{
    check_begin("check_train_mlp", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;

    {
        blobs b(1000, 8, 3, 3.0);
        /* The same ranks on both (see the top of the file). */
        check_case("blobs 1000x8 h32 c3 e5 b32", b, hyper{32, 3, 5, 32, 0.05, 0.9, 1}, 1, 1);
        check_case("blobs 1000x8 h32 c3 e5 b32 2 ranks", b, hyper{32, 3, 5, 32, 0.05, 0.9, 1}, 2, 2);
    }
    {
        blobs b(1001, 20, 10, 2.0); /* last batch of 1 row */
        check_case("blobs 1001x20 h100 c10 e3 b100", b, hyper{100, 10, 3, 100, 0.05, 0.9, 7}, 1, 1);
        check_case("blobs 1001x20 h100 c10 e3 b100 3 ranks", b, hyper{100, 10, 3, 100, 0.05, 0.9, 7}, 3, 3);
    }
    {
        blobs b(64, 4, 2, 2.0);
        check_case("blobs 64x4 h8 c2 e2 b1", b, hyper{8, 2, 2, 1, 0.02, 0.5, 3}, 1, 1);
    }
    if (!check_small) {
        blobs b(2048, 64, 100, 2.0); /* classes past a warp, hidden past a block */
        check_case("blobs 2048x64 h512 c100 e2 b256", b, hyper{512, 100, 2, 256, 0.02, 0.9, 11}, 1, 1);
    }
    check_labels_refused();
    if (!check_small)
        check_cancel();
    printf("%s: %d failure(s)\n\n", failures ? "FAIL" : "PASS", failures);
    if (check_small)
        return check_end();

    const hyper mnist = {1024, 10, 3, 256, 0.01, 0.9, 1};
    const hyper small = {128, 10, 5, 1024, 0.01, 0.9, 1};
    bench("784-1024-10 batch 256 (MNIST-sized)", 60000, 784, mnist, 1);
    bench("32-128-10 batch 1024", 262144, 32, small, 1);
    if (plugin.ngpus > 1) {
        bench("784-1024-10 batch 256 (MNIST-sized)", 60000, 784, mnist, plugin.ngpus);
        bench("32-128-10 batch 1024", 262144, 32, small, plugin.ngpus);
    }
    return check_end();
}
