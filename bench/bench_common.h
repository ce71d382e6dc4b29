/* bench_common.h — what the CPU kernel benchmarks (bench/bench_*.c) share:
 * a monotonic clock (now_s, the kernel unit tests' own), the median of
 * repeated timings, and reproducible random inputs. Each benchmark is
 * its own program, so these are per-program statics; one a program does not
 * use is marked so the compiler does not warn. */
#ifndef KL_BENCH_COMMON_H
#define KL_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tests/unit/kernels/kl_test_clock.h"

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place and returns its middle element. */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* n floats in [-1, 1) from a fixed xorshift64 seed, so every run times the
 * same data; the caller frees. Exits when memory runs out (a benchmark). */
static inline float *random_floats(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
    }
    return p;
}

#endif
