/* bench_common.h — what the CPU kernel benchmarks (bench/bench_*.c) share:
 * a monotonic clock and the median of repeated timings. Each benchmark is
 * its own program, so these are per-program statics; one a program does not
 * use is marked so the compiler does not warn. */
#ifndef KL_BENCH_COMMON_H
#define KL_BENCH_COMMON_H

#include <stdlib.h>
#include <time.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

#endif
