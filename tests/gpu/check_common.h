/* check_common.h — what every GPU checker (tests/gpu/check_*.cu) shares: the
 * plugin table it runs kernels through, the failure count its exit status
 * comes from, a CUDA call check for the checker's own device work, and a
 * monotonic clock for the figures. Each checker is its own program, so
 * these are per-program statics. */
#ifndef KL_CHECK_COMMON_H
#define KL_CHECK_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kl_plugin.h"

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

#endif
