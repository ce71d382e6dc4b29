/* fake_cuda.c — a stand-in for lib/kowloon-cuda.so, for the node's tests on
 * machines without a GPU: it answers the plugin ABI (kl_plugin.h) with one
 * "Fake GPU" and runs every kernel with the CPU reference. Environment:
 *   KOWLOON_FAKE_CUDA_FAULT=<kernel>  a run of that kernel loses the device
 *       as a real illegal address would: it fails KL_EDEVICE, and so does
 *       every run after it, and every run still going (the context is gone
 *       for the whole process);
 *   KOWLOON_FAKE_CUDA_HOLD_S=<seconds>  a sleep run that finds the device
 *       lost fails only after that long (a long kernel that reaches its
 *       next check late), so that a test can watch the node drain.
 * Built three ways (Makefile): as is; with FAKE_ABI=4, a plugin of another
 * version, whose open must never be called (it aborts); and with
 * FAKE_NO_ABI_SYMBOL, a plugin from before the version had its symbol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kl_plugin.h"

#ifndef FAKE_ABI
#define FAKE_ABI KL_PLUGIN_ABI
#endif

static int dead;
static char dead_why[200];

static int fake_supports(const char *kernel)
{
    return kl_kernel_find(kernel) != NULL;
}

/* The message the real plugin gives (fault.cu). */
static int lose_device(const char *kernel, kl_err *err)
{
    if (!__atomic_load_n(&dead, __ATOMIC_ACQUIRE)) {
        snprintf(dead_why, sizeof dead_why,
                 "GPU 0: sticky CUDA error cudaErrorIllegalAddress (an illegal memory access was encountered) at "
                 "%s.cu:1 cudaStreamQuery; the device is lost until the process restarts", kernel);
        __atomic_store_n(&dead, 1, __ATOMIC_RELEASE);
    }
    kl_err_set(err, NULL, "%s", dead_why);
    return KL_EDEVICE;
}

static int canceled(const kl_args *a)
{
    return a->cancel && __atomic_load_n(a->cancel, __ATOMIC_RELAXED);
}

static int fake_run(const kl_args *args, const int *gpu_ids, int ngpus, kl_tensor *outs, kl_err *err)
{
    const char *fault = getenv("KOWLOON_FAKE_CUDA_FAULT");
    (void)gpu_ids;
    (void)ngpus;
    if (__atomic_load_n(&dead, __ATOMIC_ACQUIRE))
        return lose_device(args->kernel->name, err);
    if (fault && strcmp(fault, args->kernel->name) == 0)
        return lose_device(args->kernel->name, err);
    if (strcmp(args->kernel->name, "sleep") == 0) {
        /* A long run on the device: it fails when another loses it. */
        const struct timespec tick = {0, 10 * 1000 * 1000};
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            if (__atomic_load_n(&dead, __ATOMIC_ACQUIRE)) {
                const char *hold = getenv("KOWLOON_FAKE_CUDA_HOLD_S");
                const struct timespec h = {hold ? atoi(hold) : 0, 0};
                nanosleep(&h, NULL);
                return lose_device(args->kernel->name, err);
            }
            if (canceled(args)) {
                kl_err_set(err, NULL, "sleep: cancelled");
                return KL_ECANCELED;
            }
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 >= args->params[0].num) {
                kl_args done = *args; /* its outputs, without sleeping again */
                done.params[0].num = 0;
                return kl_run_cpu(&done, outs, err);
            }
            nanosleep(&tick, NULL);
        }
    }
    return kl_run_cpu(args, outs, err);
}

static void fake_close(void)
{
}

static void *fake_alloc(size_t bytes)
{
    return malloc(bytes ? bytes : 1);
}

static void fake_free(void *p)
{
    free(p);
}

static int fake_register(void *p, size_t bytes)
{
    (void)p;
    (void)bytes;
    return KL_EBACKEND; /* mapped inputs stay pageable, as a refused pin leaves them */
}

static void fake_unregister(void *p)
{
    (void)p;
}

#ifndef FAKE_NO_ABI_SYMBOL
__attribute__((visibility("default"))) int kl_cuda_plugin_abi(void)
{
    return FAKE_ABI;
}
#endif

__attribute__((visibility("default"))) int kl_cuda_plugin_open(kl_plugin *p, char *why, size_t why_len)
{
    if (FAKE_ABI != KL_PLUGIN_ABI)
        abort(); /* a node must never open a plugin of another version */
#ifdef FAKE_NO_ABI_SYMBOL
    abort();
#endif
    (void)why;
    (void)why_len;
    memset(p, 0, sizeof *p);
    p->abi = KL_PLUGIN_ABI;
    p->ngpus = 1;
    snprintf(p->gpus[0].name, sizeof p->gpus[0].name, "Fake GPU");
    p->gpus[0].memory_bytes = (uint64_t)80 << 30;
    p->gpus[0].cc_major = 9;
    p->supports = fake_supports;
    p->run = fake_run;
    p->close = fake_close;
    p->host_alloc = fake_alloc;
    p->host_free = fake_free;
    p->host_register = fake_register;
    p->host_unregister = fake_unregister;
    snprintf(p->info, sizeof p->info, "fake plugin (tests/plugins/fake_cuda.c): the CPU reference as a Fake GPU");
    return 0;
}
