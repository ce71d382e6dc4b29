/* check_common.h — what every GPU checker (tests/gpu/check_*.cu) shares:
 * its start and end (check_begin, check_end: the contract with run.sh
 * below), the plugin table it runs kernels through (opened by open_plugin,
 * which also lists the GPUs and the plugin's info line), the failure count
 * its exit status comes from, a CUDA call check for the checker's own device
 * work, a monotonic clock and a median for the figures, a thread body that
 * cancels a run later, and (with KL_CHECK_SEED defined before the include) a
 * seeded splitmix64 source of floats in [-1, 1) (frand) and doubles in
 * [0, 1) (urand). Each checker is its own program, so these are
 * per-program statics.
 *
 * The contract with tests/gpu/run.sh: stdout is line-buffered from the
 * first line, so a checker killed at its timeout leaves every line it
 * printed; the last line is "SUMMARY <name>: PASS", "SUMMARY <name>: FAIL
 * (<n> failures)" or "SUMMARY <name>: SKIPPED: <why>", and the exit status
 * 0, 1 or 77 says the same. --small (or KL_CHECK_SMALL=1) keeps only the
 * small correctness cases (run.sh runs those under compute-sanitizer);
 * KL_CHECK_STALL_S=<s> makes the checker sleep that long after its first
 * line, which is how run.sh's timeout path is tested on a machine without
 * a GPU (tests/gpu/test_run_sh.sh). */
#ifndef KL_CHECK_COMMON_H
#define KL_CHECK_COMMON_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "kl_plugin.h"

extern "C" int kl_cuda_plugin_open(kl_plugin *p, char *why, size_t why_len);

static kl_plugin plugin;
static int failures;
static int check_small;          /* --small: the small correctness cases only */
static const char *check_name = "check";

/* The first call of every checker's main. */
static void check_begin(const char *name, int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    check_name = name;
    const char *small = getenv("KL_CHECK_SMALL");
    check_small = small && strcmp(small, "1") == 0;
    for (int i = 1; i < argc; i++)
        check_small |= strcmp(argv[i], "--small") == 0;
    printf("== %s: start (pid %d%s)\n", name, (int)getpid(), check_small ? ", small cases only" : "");
    const char *stall = getenv("KL_CHECK_STALL_S");
    if (stall && atoi(stall) > 0) {
        printf("%s: stalling %d s (KL_CHECK_STALL_S)\n", name, atoi(stall));
        sleep((unsigned)atoi(stall));
    }
}

/* The last word of a checker: its summary line and exit status. The
 * plugin is closed first, so that compute-sanitizer's leak check sees
 * everything it cached (cuBLAS handles, pinned buffers) given back. */
static int check_end(void)
{
    if (plugin.close)
        plugin.close();
    if (failures)
        printf("SUMMARY %s: FAIL (%d failure%s)\n", check_name, failures, failures == 1 ? "" : "s");
    else
        printf("SUMMARY %s: PASS\n", check_name);
    return failures ? 1 : 0;
}

/* A checker that cannot run here says why and exits 77. */
static int check_skip(const char *why)
{
    printf("SUMMARY %s: SKIPPED: %s\n", check_name, why);
    return 77;
}

/* The arguments of the kernel called name, nothing given yet. */
static inline kl_args kernel_args(const char *name)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find(name);
    return a;
}

/* A float32 tensor of shape (d0[, d1[, d2]]) over data (not owned). */
static inline kl_tensor f32_tensor(float *data, int ndim, int64_t d0, int64_t d1 = 0, int64_t d2 = 0)
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

/* plugin.run with rank r on GPU r, for n ranks (at most 16). */
static inline int check_run(const kl_args *a, int n, kl_tensor *out, kl_err *err)
{
    int ids[16];
    n = n < 16 ? n : 16;
    for (int i = 0; i < n; i++)
        ids[i] = i;
    return plugin.run(a, ids, n, out, err);
}

#define CHECK_CUDA(call)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

/* Opens the CUDA plugin and prints its GPUs and what opening found: 0, or
 * the exit status for main to return, after the summary line (SKIPPED
 * where no device answers, FAIL where one does and the plugin still will
 * not open). */
static int open_plugin(void)
{
    char why[256], line[300];
    int devices = 0;
    if (kl_cuda_plugin_open(&plugin, why, sizeof why) < 0) {
        printf("plugin open: %s\n", why);
        if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
            snprintf(line, sizeof line, "no CUDA device (%s)", why);
            return check_skip(line);
        }
        failures++;
        return check_end();
    }
    for (int i = 0; i < plugin.ngpus; i++)
        printf("gpu %d: %s, %.1f GiB, sm_%d%d\n", i, plugin.gpus[i].name,
               plugin.gpus[i].memory_bytes / 1073741824.0, plugin.gpus[i].cc_major, plugin.gpus[i].cc_minor);
    printf("plugin: %s\n", plugin.info);
    return 0;
}

/* pthread body: raises the cancel flag p points to after 100 ms, as the
 * node does when a run is cancelled. */
static void *raise_later(void *p)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n((volatile int *)p, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* The middle value (the upper one of an even count). */
static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Device seconds of fn() on stream s (0: the default stream), the median
 * of reps launches after one warm-up. */
template <typename F> static double time_device(F fn, int reps, cudaStream_t s = 0)
{
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    fn(); /* warm-up */
    std::vector<double> ts;
    for (int i = 0; i < reps; i++) {
        CHECK_CUDA(cudaEventRecord(a, s));
        fn();
        CHECK_CUDA(cudaEventRecord(b, s));
        CHECK_CUDA(cudaEventSynchronize(b));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms * 1e-3);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(ts);
}

/* Wall seconds of a plugin run on GPU 0, the median of reps runs after one
 * warm-up (which pays for cuBLAS and pool set-up). seen(out) reads and
 * frees each run's outputs. NAN, with a failure counted, when a run fails. */
template <typename F> static double time_plugin_runs(const kl_args *a, int reps, F seen)
{
    std::vector<double> ts;
    for (int i = 0; i <= reps; i++) {
        kl_tensor out[8];
        kl_err err;
        double t0 = now_s();
        int rc = check_run(a, 1, out, &err);
        double t = now_s() - t0;
        if (rc < 0) {
            printf("FAIL plugin run for timing: %s\n", err.message);
            failures++;
            return NAN;
        }
        seen(out);
        if (i > 0)
            ts.push_back(t);
    }
    return median(ts);
}

/* Runs a on GPU 0 with *cancel raised 100 ms after the start (a->cancel
 * must point at it); the run's rc, and its wall seconds in *took. */
static int check_run_cancelled(const kl_args *a, volatile int *cancel, kl_tensor *out, kl_err *err,
                               double *took)
{
    pthread_t t;
    pthread_create(&t, NULL, raise_later, (void *)cancel);
    double t0 = now_s();
    int rc = check_run(a, 1, out, err);
    *took = now_s() - t0;
    pthread_join(t, NULL);
    return rc;
}

#ifdef KL_CHECK_SEED
static uint64_t rng_state = KL_CHECK_SEED;

static float frand(void) /* splitmix64 to [-1, 1) */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ull << 23) - 1.0);
}

static double urand(void) /* the same stream, to [0, 1) */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}
#endif

#endif
