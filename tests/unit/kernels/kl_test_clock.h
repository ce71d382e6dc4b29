/* kl_test_clock.h — what the kernel unit tests that time a run or cancel
 * one share: a monotonic clock in seconds, and a thread body that raises a
 * cancel flag after a delay, as the node does when a run is cancelled.
 */
#ifndef KL_TEST_CLOCK_H
#define KL_TEST_CLOCK_H

#include <time.h>

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

#endif
