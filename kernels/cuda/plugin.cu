/* plugin.cu — the entry point of lib/kowloon-cuda.so: finds the devices,
 * fills the kl_plugin table, and dispatches runs to the per-kernel files.
 * On a host without a driver or a device, kl_cuda_plugin_open fails with a
 * reason and touches nothing else, so the node falls back to the CPU. */
#include "kl_cuda.h"
#include "kl_plugin.h"

#include <pthread.h>
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
            return kl__cuda_fail(err, __FILE__, __LINE__, "cudaStreamQuery", cudaGetErrorString(e));
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
        return kl__cuda_fail(err, __FILE__, __LINE__, "cudaSetDevice", cudaGetErrorString(e));
    /* Start clean: CUB and the launch checks read the thread's last error,
     * which an earlier run on this worker thread may have left set. */
    (void)cudaGetLastError();
    rc = run(args, gpu_ids, outs, err);
    if (rc < 0)
        for (int i = 0; i < args->kernel->noutputs; i++)
            kl_tensor_free(&outs[i]);
    return rc;
}

/* Below this, pinning costs more than the faster copy gains. */
#define PIN_MIN ((size_t)1 << 20)

static void *plugin_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes >= PIN_MIN && cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess)
        return p;
    (void)cudaGetLastError(); /* a refused pin is no error of the next run's */
    return malloc(bytes ? bytes : 1);
}

static void plugin_host_free(void *p)
{
    cudaPointerAttributes a;
    if (!p)
        return;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost &&
        a.hostPointer == p) {
        cudaFreeHost(p);
        return;
    }
    (void)cudaGetLastError();
    free(p);
}

static int plugin_host_register(void *p, size_t bytes)
{
    if (!p || bytes < PIN_MIN)
        return KL_EINVAL;
    /* Read-only: the mapping is private and writable, and a pin for writing
     * would copy every page of the file first. */
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return KL_EBACKEND;
    }
    return 0;
}

static void plugin_host_unregister(void *p)
{
    if (p && cudaHostUnregister(p) != cudaSuccess)
        (void)cudaGetLastError();
}

static void plugin_close(void)
{
    /* Nothing is cached between runs; a device reset here would break any
     * other user of the CUDA context in this process. */
}

extern "C" __attribute__((visibility("default"))) int kl_cuda_plugin_open(kl_plugin *p, char *why,
                                                                         size_t why_len)
{
    int n = 0;
    if (why && why_len)
        why[0] = '\0';
    if (!p) {
        if (why)
            snprintf(why, why_len, "kl_cuda_plugin_open: no plugin table given");
        return KL_EINVAL;
    }
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
    memset(p, 0, sizeof *p);
    const int cap = (int)(sizeof p->gpus / sizeof p->gpus[0]);
    for (int i = 0; i < n && i < cap; i++) {
        cudaDeviceProp prop;
        e = cudaGetDeviceProperties(&prop, i);
        if (e != cudaSuccess) {
            if (why)
                snprintf(why, why_len, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorString(e));
            return KL_EBACKEND;
        }
        /* Device names are far shorter than the table's 128 bytes. */
        memcpy(p->gpus[i].name, prop.name, sizeof p->gpus[i].name - 1);
        p->gpus[i].memory_bytes = prop.totalGlobalMem;
        p->gpus[i].cc_major = prop.major;
        p->gpus[i].cc_minor = prop.minor;
    }
    ngpus = n < cap ? n : cap;
    p->abi = KL_PLUGIN_ABI;
    p->ngpus = ngpus;
    p->supports = plugin_supports;
    p->run = plugin_run;
    p->close = plugin_close;
    p->host_alloc = plugin_host_alloc;
    p->host_free = plugin_host_free;
    p->host_register = plugin_host_register;
    p->host_unregister = plugin_host_unregister;
    /* This library's own copy of the kernel library allocates outputs with
     * the same allocator as the node's (which sets its copy from the table) */
    kl_host_allocator_set(plugin_host_alloc, plugin_host_free);
    return 0;
}

/* The node casts the dlsym result to this type: keep the two in step. */
static_assert(std::is_same<decltype(&kl_cuda_plugin_open), kl_plugin_open_fn>::value,
              "kl_cuda_plugin_open must have the type kl_plugin_open_fn");
