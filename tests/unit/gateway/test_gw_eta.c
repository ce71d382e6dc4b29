/* test_gw_eta.c — a queued job's start estimate from the jobs ahead of it,
 * its kernel's recent run time and the slots up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "eta.h"

static void test_the_jobs_ahead_run_slots_at_a_time(void **state)
{
    assert_true(gw_eta_estimate(0, 5, 2000, 4) == 0.0);     /* next: starts at once */
    assert_true(gw_eta_estimate(8, 5, 2000, 4) == 4.0);     /* two rounds of 2 s */
    assert_true(gw_eta_estimate(3, 1, 100, 2) == 0.2);      /* 0.15 s, to a tenth */
    assert_true(gw_eta_estimate(10, 1, 1000, 1) > gw_eta_estimate(9, 1, 1000, 1));
}

static void test_no_runs_or_no_slots_is_unknown(void **state)
{
    assert_true(gw_eta_estimate(3, 0, 0, 4) < 0);
    assert_true(gw_eta_estimate(3, 5, 1000, 0) < 0);
    assert_true(gw_eta_estimate(-1, 5, 1000, 4) < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_jobs_ahead_run_slots_at_a_time),
        cmocka_unit_test(test_no_runs_or_no_slots_is_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
