/* test_gw_metrics.c — the gateway's job counters: a kernel outside the
 * catalog or an unknown state is counted as "other" (nothing a node or a
 * client sends can add series), a run time is observed only when known,
 * and a gateway without metrics (NULL) counts nothing without failing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "metrics.h"

static double count(gw_metrics *m, const char *name, const char *const *labels,
                    const char *const *values)
{
    svc_metric *f = svc_metric_counter(gw_metrics_registry(m), name, "", labels);
    assert_non_null(f);
    return svc_series_value(svc_metric_series(f, values));
}

static double observed(gw_metrics *m, const char *name, const char *kernel)
{
    static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                    2.5,   5,    10,    30,   60,  300,  900, 3600};
    svc_metric *f = svc_metric_histogram(gw_metrics_registry(m), name, "",
                                         (const char *[]){"kernel", NULL}, bounds,
                                         (int)(sizeof bounds / sizeof *bounds));
    assert_non_null(f);
    return svc_series_value(svc_metric_with(f, kernel));
}

static void test_unknown_kernels_and_states_are_counted_as_other(void **state)
{
    (void)state;
    gw_app app = {0};
    gw_metrics *m = gw_metrics_new(&app);
    assert_non_null(m);
    const char *const ks[] = {"kernel", "state", NULL};
    gw_metrics_submitted(m, "gemm");
    gw_metrics_submitted(m, "no-such-kernel");
    gw_metrics_submitted(m, NULL);
    gw_metrics_reported(m, "gemm", "succeeded", 1.5);
    gw_metrics_reported(m, "'); DROP TABLE jobs", "succeeded", 2);
    gw_metrics_reported(m, "gemm", "exploded", -1);
    gw_metrics_started(m, "saxpy", 0.25);
    gw_metrics_started(m, "saxpy", -1);  /* not a first attempt: not observed */
    assert_true(count(m, "kowloon_job_submits_total", (const char *[]){"kernel", NULL},
                      (const char *[]){"gemm"}) == 1);
    assert_true(count(m, "kowloon_job_submits_total", (const char *[]){"kernel", NULL},
                      (const char *[]){"other"}) == 2);
    assert_true(count(m, "kowloon_job_results_total", ks, (const char *[]){"gemm", "succeeded"}) == 1);
    assert_true(count(m, "kowloon_job_results_total", ks, (const char *[]){"other", "succeeded"}) == 1);
    assert_true(count(m, "kowloon_job_results_total", ks, (const char *[]){"gemm", "other"}) == 1);
    assert_true(observed(m, "kowloon_job_run_seconds", "gemm") == 1); /* the -1 is not a time */
    assert_true(observed(m, "kowloon_job_run_seconds", "other") == 1);
    assert_true(observed(m, "kowloon_job_queue_wait_seconds", "saxpy") == 1);
    gw_metrics_free(m);
}

static void test_a_gateway_without_metrics_counts_nothing(void **state)
{
    (void)state;
    gw_metrics_submitted(NULL, "gemm");
    gw_metrics_reported(NULL, "gemm", "succeeded", 1);
    gw_metrics_started(NULL, "gemm", 1);
    assert_null(gw_metrics_registry(NULL));
    gw_metrics_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_kernels_and_states_are_counted_as_other),
        cmocka_unit_test(test_a_gateway_without_metrics_counts_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
