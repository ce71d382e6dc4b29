/* test_kl_cputime.c — a run's CPU time (kl_cputime) counts every thread the
 * CPU kernels start for it, not only the thread that called them, and
 * nothing of threads outside the run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu/kl_cpu.h"

#define MS 1000000LL

static int64_t thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Burns ctx's milliseconds of this thread's CPU time. */
static void spin(void *ctx, int i, int n)
{
    (void)i;
    (void)n;
    int64_t until = thread_ns() + *(int *)ctx * MS;
    while (thread_ns() < until) {
    }
}

static void test_helper_threads_count_for_the_run(void **state)
{
    (void)state;
    int ms = 40;
    kl_cputime c;
    kl_cputime_start(&c);
    kl__parallel(4, spin, &ms);
    int64_t ns = kl_cputime_stop(&c);
    /* four threads of 40 ms each, the caller's one among them */
    assert_true(ns >= 4 * ms * MS * 95 / 100);
    assert_true(ns < 4 * ms * MS * 3);
}

/* Each of the outer threads forks two spinners of its own. */
static void fork_spin(void *ctx, int i, int n)
{
    (void)i;
    (void)n;
    kl__parallel(2, spin, ctx);
}

static void test_nested_helpers_count_too(void **state)
{
    (void)state;
    int ms = 30;
    kl_cputime c;
    kl_cputime_start(&c);
    kl__parallel(2, fork_spin, &ms);
    int64_t ns = kl_cputime_stop(&c);
    assert_true(ns >= 4 * ms * MS * 95 / 100);
}

static void test_sleeping_costs_nothing_and_no_run_counts_nothing(void **state)
{
    (void)state;
    kl_cputime c;
    kl_cputime_start(&c);
    usleep(50000);
    int64_t ns = kl_cputime_stop(&c);
    assert_true(ns < 20 * MS);
    /* outside a run, helpers have no account to add to */
    int ms = 5;
    kl__parallel(2, spin, &ms);
    assert_null(kl__cputime_current());
    kl_cputime_start(&c);
    assert_true(kl_cputime_stop(&c) < 5 * MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helper_threads_count_for_the_run),
        cmocka_unit_test(test_nested_helpers_count_too),
        cmocka_unit_test(test_sleeping_costs_nothing_and_no_run_counts_nothing),
    };
    return cmocka_run_group_tests_name("kl_cputime", tests, NULL, NULL);
}
