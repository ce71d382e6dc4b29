/* kl_test_clock.h — what the kernel unit tests that time a run or cancel
 * one share: a monotonic clock in seconds (the CPU benchmarks time with it
 * too, bench/bench_common.h), a thread body that raises a cancel flag after
 * a delay, as the node does when a run is cancelled, and a CPU run with its
 * cancel raised so.
 */
#ifndef KL_TEST_CLOCK_H
#define KL_TEST_CLOCK_H

#include <pthread.h>
#include <time.h>

#include "kl.h"

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What raise_later raises, and when. */
typedef struct kl_test_raise {
    volatile int *flag;
    long after_ms;
} kl_test_raise;

/* pthread body: sleeps r->after_ms, then sets *r->flag to 1. */
static inline void *raise_later(void *p)
{
    const kl_test_raise *r = p;
    struct timespec ts = {r->after_ms / 1000, (r->after_ms % 1000) * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n(r->flag, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* kl_run_cpu(a, out, err) with *a->cancel raised after_ms after the start;
 * its rc, and its wall seconds in *took. */
static inline int kl_test_run_cancelled(const kl_args *a, long after_ms, kl_tensor *out, kl_err *err,
                                        double *took)
{
    pthread_t t;
    kl_test_raise raiser = {(volatile int *)a->cancel, after_ms};
    const double t0 = now_s();
    *took = 0;
    if (pthread_create(&t, NULL, raise_later, &raiser) != 0)
        return KL_ENOMEM;
    int rc = kl_run_cpu(a, out, err);
    *took = now_s() - t0;
    pthread_join(t, NULL);
    return rc;
}

#endif
