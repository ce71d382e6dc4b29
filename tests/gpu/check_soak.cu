/* check_soak.cu — what many runs leave behind. For each kernel: one run
 * (its handles, pools and contexts made), the state taken as a baseline,
 * then 20 more of the same run, one in four cancelled while it runs and
 * one in four cancelled before it starts, as the node does them. Then:
 * every run answered 0 or, cancelled, KL_ECANCELED; every run that was not
 * cancelled gave the first run's outputs (bit for bit where the kernel is
 * deterministic, within 1e-4 where double atomics may reorder sums; for
 * kmeans the inertia, for allreduce its count of wrong elements); and,
 * once the device is idle, memory is back at the baseline: nothing in use
 * in the stream-ordered pool, the device's free memory (pool trimmed) and
 * the pinned buffers in use where they were, no buffer still fenced, no
 * cuBLAS handle more. Host RSS is shown, not judged. Inputs come from the
 * plugin's host_alloc, as the node's do, so pinned buffers and their
 * fences are exercised. Built and run by tests/gpu/run.sh (check_common.h:
 * the summary line and exit status). */
#include "kl_cuda.h"
#include "kl_pinpool.h"
#include "kl_plugin.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KL_CHECK_SEED 0x082efa98ec4e6c89ull
#include "check_common.h"

#define RUNS 20

/* ---- building runs ---- */

struct soak_case {
    const char *label;
    kl_args args;
    kl_tensor in[KL_MAX_IO];
    int nin;
    bool exact;        /* outputs bit for bit from run to run */
    int only;          /* compare this output alone (-1: all of them) */
};

static void set_num(kl_args *a, const char *name, double v)
{
    int i = kl_param_index(a->kernel, name);
    a->params[i].num = v;
    a->params[i].given = 1;
}

static void set_choice(kl_args *a, const char *name, const char *choice)
{
    int i = kl_param_index(a->kernel, name);
    const char *const *c = a->kernel->params[i].choices;
    for (int k = 0; c[k]; k++)
        if (strcmp(c[k], choice) == 0)
            a->params[i].choice = k;
    a->params[i].given = 1;
}

/* A float32 input of the given shape in page-locked memory (the plugin's
 * host_alloc), filled with frand() or, with labels > 0, int32 labels. */
static void add_input(soak_case *c, const char *name, int ndim, const int64_t *shape, int labels = 0)
{
    kl_tensor *t = &c->in[c->nin++];
    memset(t, 0, sizeof *t);
    t->dtype = labels ? KL_I32 : KL_F32;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    const int64_t n = kl_tensor_elems(t);
    t->data = kl_host_alloc(kl_tensor_bytes(t));
    for (int64_t i = 0; i < n; i++) {
        if (labels)
            ((int32_t *)t->data)[i] = (int32_t)(i % labels);
        else
            ((float *)t->data)[i] = frand();
    }
    c->args.inputs[kl_input_index(c->args.kernel, name)] = t;
}

static soak_case make(const char *label, const char *kernel, bool exact)
{
    soak_case c;
    memset(&c, 0, sizeof c);
    c.label = label;
    c.exact = exact;
    c.only = -1;
    c.args.kernel = kl_kernel_find(kernel);
    c.args.ranks = 1;
    return c;
}

/* ---- the state runs leave ---- */

struct mem_state {
    uint64_t pool_used;   /* stream-ordered pool, in use */
    size_t dev_free;      /* device free memory with the pool trimmed */
    size_t pinned_in_use, pinned_idle, fenced, handles;
    double rss_mib;
};

static double rss_mib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static mem_state measure(void)
{
    mem_state m;
    memset(&m, 0, sizeof m);
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaDeviceSynchronize()); /* cancelled runs' work has ended */
    cudaMemPool_t mp;
    CHECK_CUDA(cudaDeviceGetDefaultMemPool(&mp, 0));
    CHECK_CUDA(cudaMemPoolGetAttribute(mp, cudaMemPoolAttrUsedMemCurrent, &m.pool_used));
    CHECK_CUDA(cudaMemPoolTrimTo(mp, 0));
    size_t total = 0;
    CHECK_CUDA(cudaMemGetInfo(&m.dev_free, &total));
    kl_pinpool_stats ps;
    kl__cuda_hostmem_stats(&ps);
    m.pinned_in_use = ps.in_use_bytes;
    m.pinned_idle = ps.idle_bytes;
    m.fenced = ps.fenced;
    m.handles = kl__cuda_blas_handles();
    m.rss_mib = rss_mib();
    return m;
}

/* ---- cancels, as the node raises them ---- */

struct later {
    volatile int *flag;
    long us;
};

static void *raise_after(void *p)
{
    later *l = (later *)p;
    struct timespec ts = {l->us / 1000000, (l->us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n(l->flag, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* Largest |a - b| / (1 + |b|) over every output element; 0 when equal. */
static double outputs_differ(const kl_kernel *k, const kl_tensor *a, const kl_tensor *b, bool exact, int only)
{
    double worst = 0;
    for (int o = 0; o < k->noutputs; o++) {
        if (only >= 0 && o != only)
            continue;
        if (kl_tensor_bytes(&a[o]) != kl_tensor_bytes(&b[o]))
            return INFINITY;
        if (exact) {
            if (memcmp(a[o].data, b[o].data, kl_tensor_bytes(&a[o])) != 0)
                return INFINITY;
            continue;
        }
        for (int64_t i = 0; i < kl_tensor_elems(&a[o]); i++) {
            double x, y;
            if (a[o].dtype == KL_F32) {
                x = ((float *)a[o].data)[i];
                y = ((float *)b[o].data)[i];
            } else if (a[o].dtype == KL_F64) {
                x = ((double *)a[o].data)[i];
                y = ((double *)b[o].data)[i];
            } else {
                x = ((int32_t *)a[o].data)[i];
                y = ((int32_t *)b[o].data)[i];
            }
            worst = std::max(worst, fabs(x - y) / (1 + fabs(y)));
        }
    }
    return worst;
}

static void free_outs(const kl_kernel *k, kl_tensor *o, int rc)
{
    if (rc == 0)
        for (int i = 0; i < k->noutputs; i++)
            kl_tensor_free(&o[i]);
}

/* The run, its baseline, 20 more, and the comparison. */
static void soak(soak_case &c)
{
    const kl_kernel *k = c.args.kernel;
    kl_tensor ref[KL_MAX_IO], out[KL_MAX_IO];
    kl_err err;
    memset(&err, 0, sizeof err);
    kl_args_defaults(&c.args);
    int rc = check_run(&c.args, 1, ref, &err);
    if (rc != 0) {
        printf("FAIL soak %-28s first run: rc %d (%s)\n", c.label, rc, err.message);
        failures++;
        return;
    }
    const mem_state base = measure();
    int cancelled = 0, bad_rc = 0, differ = 0;
    double worst = 0, t_run = 0;
    for (int i = 0; i < RUNS; i++) {
        volatile int flag = 0;
        kl_args a = c.args;
        a.cancel = &flag;
        pthread_t t;
        later l = {&flag, (long)(urand() * 20000)}; /* within the first 20 ms */
        const int mid = i % 4 == 1, before = i % 4 == 3;
        if (before)
            flag = 1;
        if (mid)
            pthread_create(&t, NULL, raise_after, &l);
        memset(&err, 0, sizeof err);
        const double t0 = now_s();
        rc = check_run(&a, 1, out, &err);
        t_run += now_s() - t0;
        if (mid)
            pthread_join(t, NULL);
        if (rc == KL_ECANCELED && (mid || before)) {
            cancelled++;
            continue;
        }
        if (rc != 0) {
            if (bad_rc++ < 3)
                printf("    run %d: rc %d (%s)\n", i, rc, err.message);
            continue;
        }
        double d = outputs_differ(k, out, ref, c.exact, c.only);
        worst = std::max(worst, d);
        differ += d > (c.exact ? 0 : 1e-4);
        free_outs(k, out, 0);
    }
    free_outs(k, ref, 0);
    const mem_state now = measure();
    const size_t slack = (size_t)64 << 20; /* the driver's own bookkeeping */
    const bool mem_ok = now.pool_used == base.pool_used && now.dev_free + slack >= base.dev_free &&
                        now.pinned_in_use <= base.pinned_in_use && now.fenced == 0 && now.handles <= base.handles;
    const bool ok = bad_rc == 0 && differ == 0 && mem_ok;
    printf("%s soak %-28s %d runs (%d cancelled, %.1f ms each): outputs %s (worst %.2g); pool in use %llu -> "
           "%llu B; device free %.2f -> %.2f GiB; pinned in use %.1f -> %.1f MiB (idle %.1f MiB, fenced %zu); "
           "cuBLAS handles %zu -> %zu; RSS %.0f -> %.0f MiB\n",
           ok ? "PASS" : "FAIL", c.label, RUNS, cancelled, t_run / RUNS * 1e3, differ ? "DIFFER" : "same", worst,
           (unsigned long long)base.pool_used, (unsigned long long)now.pool_used, base.dev_free / 1073741824.0,
           now.dev_free / 1073741824.0, base.pinned_in_use / 1048576.0, now.pinned_in_use / 1048576.0,
           now.pinned_idle / 1048576.0, now.fenced, base.handles, now.handles, base.rss_mib, now.rss_mib);
    failures += !ok;
    for (int i = 0; i < c.nin; i++)
        kl_host_free(c.in[i].data);
}

int main(int argc, char **argv)
{
    check_begin("check_soak", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;
    /* Sizes that take milliseconds on an H100/H200, so that a cancel
     * raised within 20 ms lands while the run is on the device. */
    const int64_t n = check_small ? 1 << 16 : 1 << 26, g = check_small ? 128 : 4096;
    {
        soak_case c = make("saxpy", "saxpy", true);
        set_num(&c.args, "a", 1.5);
        add_input(&c, "x", 1, &n);
        add_input(&c, "y", 1, &n);
        soak(c);
    }
    {
        soak_case c = make("reduce sum", "reduce", true);
        set_choice(&c.args, "op", "sum");
        add_input(&c, "x", 1, &n);
        soak(c);
    }
    for (const char *p : {"fp32", "tf32", "bf16"}) {
        char label[32];
        snprintf(label, sizeof label, "gemm %s %lld", p, (long long)g);
        soak_case c = make(label, "gemm", true);
        kl_args_defaults(&c.args);
        set_choice(&c.args, "precision", p);
        const int64_t s[2] = {g, g};
        add_input(&c, "a", 2, s);
        add_input(&c, "b", 2, s);
        soak(c);
    }
    {
        soak_case c = make("heat2d", "heat2d", true);
        set_num(&c.args, "alpha", 0.2);
        set_num(&c.args, "steps", check_small ? 10 : 500);
        const int64_t s[2] = {g, g};
        add_input(&c, "grid", 2, s);
        soak(c);
    }
    {
        soak_case c = make("montecarlo_option", "montecarlo_option", true);
        kl_args_defaults(&c.args);
        set_num(&c.args, "s0", 100);
        set_num(&c.args, "strike", 100);
        set_num(&c.args, "sigma", 0.2);
        set_num(&c.args, "maturity", 1);
        set_num(&c.args, "paths", check_small ? 1e4 : 1e8);
        soak(c);
    }
    {
        soak_case c = make("kmeans", "kmeans", false);
        c.only = 2; /* the inertia: a near tie may move a label between runs */
        kl_args_defaults(&c.args);
        set_num(&c.args, "k", 64);
        set_num(&c.args, "iterations", 20);
        set_num(&c.args, "tol", 0);
        const int64_t s[2] = {check_small ? 2048 : 1 << 20, 16};
        add_input(&c, "points", 2, s);
        soak(c);
    }
    {
        soak_case c = make("train_mlp", "train_mlp", false);
        kl_args_defaults(&c.args);
        set_num(&c.args, "hidden", 256);
        set_num(&c.args, "classes", 10);
        set_num(&c.args, "epochs", 1);
        set_num(&c.args, "batch", 256);
        const int64_t sx[2] = {check_small ? 1024 : 60000, 64}, sy[1] = {sx[0]};
        add_input(&c, "x", 2, sx);
        add_input(&c, "y", 1, sy, 10);
        soak(c);
    }
    {
        /* NCCL on one GPU: communicators made and destroyed each run. */
        soak_case c = make("allreduce 1 GPU", "allreduce", true);
        c.only = 3; /* wrong = 0 each time; the times differ */
        kl_args_defaults(&c.args);
        set_num(&c.args, "count", check_small ? 4096 : 1 << 24);
        set_num(&c.args, "iters", 5);
        soak(c);
    }
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return check_end();
}
