/* plugin.cu — the entry point of lib/kowloon-cuda.so: finds the devices,
 * sets them up (eager module loading, a context per device, memory pools
 * that keep memory between runs, cached cuBLAS handles and pinned host
 * buffers), fills the kl_plugin table, and dispatches runs to the
 * per-kernel files. On a host without a driver or a device,
 * kl_cuda_plugin_open fails with a reason and fills nothing, so the node
 * falls back to the CPU. */
#include "kl_cuda.h"
#include "kl_mempool.h"
#include "kl_plugin.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <type_traits>

typedef int (*kl_cuda_run_fn)(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);

static const struct {
    const char *name;
    kl_cuda_run_fn run;
} impls[] = {
    {"saxpy", kl__cuda_saxpy},
    {"reduce", kl__cuda_reduce},
    {"gemm", kl__cuda_gemm},
    {"sleep", kl__cuda_sleep},
    {"allreduce", kl__cuda_allreduce},
    {"train_mlp", kl__cuda_train_mlp},
    {"heat2d", kl__cuda_heat2d},
    {"kmeans", kl__cuda_kmeans},
    {"montecarlo_option", kl__cuda_montecarlo_option},
};

static int ngpus;

/* Runs that use NCCL (allreduce, train_mlp) take turns in this process:
 * kernels of two communicators that share devices can interleave in
 * different orders on different GPUs and wait on each other forever (NCCL's
 * "using multiple communicators concurrently"). A waiting run still
 * honours cancel. */
static pthread_mutex_t nccl_turn = PTHREAD_MUTEX_INITIALIZER;

int kl__cuda_nccl_turn_take(const kl_args *args, kl_err *err)
{
    const struct timespec tick = {0, 1000 * 1000};
    while (pthread_mutex_trylock(&nccl_turn) != 0) {
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "%s: cancelled while waiting for another NCCL run to finish",
                       args->kernel->name);
            return KL_ECANCELED;
        }
        nanosleep(&tick, NULL);
    }
    return 0;
}

void kl__cuda_nccl_turn_give(void)
{
    pthread_mutex_unlock(&nccl_turn);
}

int kl__cuda_fail(kl_err *err, const char *file, int line, const char *call, const char *reason)
{
    kl_err_set(err, NULL, "%s:%d: %s: %s", file, line, call, reason);
    return KL_EBACKEND;
}

/* Polls rather than blocks so that a cancel is seen while a long kernel
 * runs; 200 us between polls costs nothing against kernels this size. */
int kl__cuda_wait(cudaStream_t s, const kl_args *args, kl_err *err)
{
    const struct timespec tick = {0, 200 * 1000};
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) {
            (void)cudaGetLastError(); /* leave no cudaErrorNotReady behind */
            return 0;
        }
        if (e != cudaErrorNotReady)
            return kl__cuda_fail_rt(err, __FILE__, __LINE__, "cudaStreamQuery", e);
        if (kl__cuda_canceled(args)) {
            kl_err_set(err, NULL, "%s: cancelled", args->kernel->name);
            return KL_ECANCELED;
        }
        nanosleep(&tick, NULL);
    }
}

static kl_cuda_run_fn impl_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof impls / sizeof impls[0]; i++)
        if (strcmp(impls[i].name, name) == 0)
            return impls[i].run;
    return NULL;
}

static int plugin_supports(const char *kernel)
{
    return impl_find(kernel) != NULL;
}

/* Single-device kernels run on gpu_ids[0]; the multi-GPU ones (allreduce,
 * train_mlp) put rank r on gpu_ids[r]. On failure outs[] is left empty, as
 * kl_run_cpu does. */
static int plugin_run(const kl_args *args, const int *gpu_ids, int gpus, kl_tensor *outs, kl_err *err)
{
    char why[sizeof err->message];
    if (kl__cuda_dead(why, sizeof why)) {
        kl_err_set(err, NULL, "%s", why);
        return KL_EDEVICE;
    }
    int rc = kl__args_ready(args, err);
    if (rc < 0)
        return rc;
    kl_cuda_run_fn run = impl_find(args->kernel->name);
    if (!run) {
        kl_err_set(err, NULL, "kernel %s has no CUDA implementation", args->kernel->name);
        return KL_ENOTSUP;
    }
    const int ranks = args->ranks > 0 ? args->ranks : 1;
    if (!gpu_ids || gpus < ranks || gpus > 16) {
        kl_err_set(err, "resources.gpus", "%d GPUs given for %d ranks", gpu_ids ? gpus : 0, ranks);
        return KL_EINVAL;
    }
    for (int i = 0; i < gpus; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= gpu_ids[j] == gpu_ids[i];
        if (gpu_ids[i] < 0 || gpu_ids[i] >= ngpus || seen) {
            kl_err_set(err, "resources.gpus", "GPU %d %s; this node has GPUs 0..%d", gpu_ids[i],
                       seen ? "is given twice" : "does not exist", ngpus - 1);
            return KL_EINVAL;
        }
    }
    memset(outs, 0, sizeof *outs * (size_t)args->kernel->noutputs);
    cudaError_t e = cudaSetDevice(gpu_ids[0]);
    if (e != cudaSuccess)
        return kl__cuda_fail_rt(err, __FILE__, __LINE__, "cudaSetDevice", e);
    /* Start clean: CUB and the launch checks read the thread's last error,
     * which an earlier run on this worker thread may have left set. */
    (void)cudaGetLastError();
    kl__cuda_scope_begin();
    rc = kl__cuda_probe(run(args, gpu_ids, outs, err), err);
    /* Before the outputs go: a copy may still be on its way into them. */
    kl__cuda_scope_end(args, outs, args->kernel->noutputs);
    if (rc < 0)
        for (int i = 0; i < args->kernel->noutputs; i++)
            kl_tensor_free(&outs[i]);
    return rc;
}

static void plugin_close(void)
{
    /* Destroying the handles synchronises each device, and freeing the
     * pool waits for the fences left by cancelled runs: whatever is still
     * in flight ends before its memory goes. No device reset: it would
     * break any other user of the CUDA context in this process. */
    kl__cuda_comms_drop_kept();
    kl__cuda_blas_close();
    kl__cuda_hostmem_close();
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int pool_supported(void *ctx, int dev)
{
    (void)ctx;
    int v = 0;
    return cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, dev) == cudaSuccess ? v != 0 : -1;
}

static uint64_t pool_total(void *ctx, int dev)
{
    const kl_plugin *p = (const kl_plugin *)ctx;
    return p->gpus[dev].memory_bytes;
}

static int pool_set_threshold(void *ctx, int dev, uint64_t bytes)
{
    (void)ctx;
    cudaMemPool_t mp;
    uint64_t v = bytes; /* the attribute is a cuuint64_t */
    if (cudaDeviceGetDefaultMemPool(&mp, dev) != cudaSuccess ||
        cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &v) != cudaSuccess) {
        (void)cudaGetLastError();
        return KL_EBACKEND;
    }
    return 0;
}

/* Appends to the table's info line. */
static void info_add(kl_plugin *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void info_add(kl_plugin *p, const char *fmt, ...)
{
    size_t used = strlen(p->info);
    va_list ap;
    va_start(ap, fmt);
    if (used < sizeof p->info)
        vsnprintf(p->info + used, sizeof p->info - used, fmt, ap);
    va_end(ap);
}

extern "C" __attribute__((visibility("default"))) int kl_cuda_plugin_abi(void)
{
    return KL_PLUGIN_ABI;
}

extern "C" __attribute__((visibility("default"))) int kl_cuda_plugin_open(kl_plugin *p, char *why,
                                                                         size_t why_len)
{
    char note[256];
    kl_plugin t;
    int n = 0;
    if (why && why_len)
        why[0] = '\0';
    if (!p) {
        if (why)
            snprintf(why, why_len, "kl_cuda_plugin_open: no plugin table given");
        return KL_EINVAL;
    }
    /* Lazy loading (CUDA's default) loads a kernel at its first launch,
     * which may wait for the work already on the device: next to NCCL
     * kernels that spin until their peers arrive, a deadlock. Loaded
     * eagerly, every module is in place once the context exists. The
     * driver reads the variable when it initialises, so before the first
     * runtime call; an operator's own setting is kept. */
    const char *loading = getenv("CUDA_MODULE_LOADING");
    const int ours = loading == NULL;
    if (ours)
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    /* The first runtime call: it is where a missing libcuda.so or an old
     * driver shows, as an error code rather than a crash. */
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why)
            snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return KL_EBACKEND;
    }
    if (n <= 0) {
        if (why)
            snprintf(why, why_len, "cudaGetDeviceCount: no CUDA-capable device is detected");
        return KL_EBACKEND;
    }
    memset(&t, 0, sizeof t);
    const int cap = (int)(sizeof t.gpus / sizeof t.gpus[0]);
    info_add(&t, "modules %s (CUDA_MODULE_LOADING=%s, %s)", ours || strcmp(loading, "EAGER") == 0 ? "eager" : "lazy",
             ours ? "EAGER" : loading, ours ? "set by the plugin" : "from the environment");
    for (int i = 0; i < n && i < cap; i++) {
        cudaDeviceProp prop;
        e = cudaGetDeviceProperties(&prop, i);
        if (e != cudaSuccess) {
            if (why)
                snprintf(why, why_len, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorString(e));
            return KL_EBACKEND;
        }
        /* Device names are far shorter than the table's 128 bytes. */
        memcpy(t.gpus[i].name, prop.name, sizeof t.gpus[i].name - 1);
        t.gpus[i].memory_bytes = prop.totalGlobalMem;
        t.gpus[i].cc_major = prop.major;
        t.gpus[i].cc_minor = prop.minor;
        /* Each context now, and timed, rather than inside a first run. */
        const double t0 = now_ms();
        size_t free_b = 0, total_b = 0;
        if ((e = cudaSetDevice(i)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess ||
            (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
            if (why)
                snprintf(why, why_len, "GPU %d: creating its context: %s", i, cudaGetErrorString(e));
            return KL_EBACKEND;
        }
        info_add(&t, "; GPU %d context %.0f ms, %.1f of %.1f GiB free", i, now_ms() - t0,
                 (double)free_b / 1073741824.0, (double)total_b / 1073741824.0);
    }
    t.ngpus = n < cap ? n : cap;
    cudaSetDevice(0);
    kl_mempool_ops mo = {pool_supported, pool_total, pool_set_threshold, &t};
    int rc = kl_mempool_setup(t.ngpus, &mo, note, sizeof note);
    if (rc < 0) {
        if (why)
            snprintf(why, why_len, "%s", note);
        return rc;
    }
    info_add(&t, "; %s", note);
    if (kl__cuda_blas_open() < 0 || kl__cuda_hostmem_open(note, sizeof note) < 0) {
        kl__cuda_blas_close();
        if (why)
            snprintf(why, why_len, "out of memory setting up the plugin");
        return KL_ENOMEM;
    }
    info_add(&t, "; %s", note);
    ngpus = t.ngpus;
    t.abi = KL_PLUGIN_ABI;
    t.supports = plugin_supports;
    t.run = plugin_run;
    t.close = plugin_close;
    t.host_alloc = kl__cuda_host_alloc;
    t.host_free = kl__cuda_host_free;
    t.host_register = kl__cuda_host_register;
    t.host_unregister = kl__cuda_host_unregister;
    *p = t;
    /* This library's own copy of the kernel library allocates outputs with
     * the same allocator as the node's (which sets its copy from the table) */
    kl_host_allocator_set(kl__cuda_host_alloc, kl__cuda_host_free);
    return 0;
}

/* The node casts the dlsym result to this type: keep the two in step. */
static_assert(std::is_same<decltype(&kl_cuda_plugin_open), kl_plugin_open_fn>::value,
              "kl_cuda_plugin_open must have the type kl_plugin_open_fn");
static_assert(std::is_same<decltype(&kl_cuda_plugin_abi), kl_plugin_abi_fn>::value,
              "kl_cuda_plugin_abi must have the type kl_plugin_abi_fn");
