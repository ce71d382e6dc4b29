/* test_svc_metrics.c — the registry and its text exposition: escaping of
 * label values and help text, histogram buckets (cumulative, +Inf, _sum,
 * _count), series identity by label values, bounded families, invalid
 * names refused, collectors and the process series, and concurrent
 * updates that lose nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_metrics.h"

static char *render(svc_metrics *m)
{
    size_t len = 0;
    char *text = svc_metrics_render(m, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

static void test_counter_with_labels_renders_help_type_and_sample(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    svc_metric *f = svc_metric_counter(m, "kl_requests_total", "requests served",
                                       (const char *[]){"method", "code", NULL});
    svc_counter_add(svc_metric_with(f, "GET", "200"), 2);
    svc_counter_add(svc_metric_with(f, "GET", "200"), 3);
    svc_counter_add(svc_metric_with(f, "POST", "202"), 1);
    char *t = render(m);
    assert_string_equal(t, "# HELP kl_requests_total requests served\n"
                           "# TYPE kl_requests_total counter\n"
                           "kl_requests_total{method=\"GET\",code=\"200\"} 5\n"
                           "kl_requests_total{method=\"POST\",code=\"202\"} 1\n");
    free(t);
    svc_metrics_free(m);
}

static void test_label_values_and_help_are_escaped(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    svc_metric *f = svc_metric_gauge(m, "kl_g", "a \\ back\nslash \"quoted\"",
                                     (const char *[]){"v", NULL});
    svc_gauge_set(svc_metric_with(f, "a\"b\\c\nd"), 1.5);
    char *t = render(m);
    /* help: backslash and newline escaped, quotes kept; label: all three */
    assert_non_null(strstr(t, "# HELP kl_g a \\\\ back\\nslash \"quoted\"\n"));
    assert_non_null(strstr(t, "kl_g{v=\"a\\\"b\\\\c\\nd\"} 1.5\n"));
    free(t);
    svc_metrics_free(m);
}

static void test_histogram_buckets_are_cumulative_with_inf_sum_and_count(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    const double bounds[] = {0.1, 1, 10};
    svc_metric *f = svc_metric_histogram(m, "kl_seconds", "time", (const char *[]){"k", NULL},
                                         bounds, 3);
    svc_series *s = svc_metric_with(f, "gemm");
    svc_histogram_observe(s, 0.05);
    svc_histogram_observe(s, 0.1);  /* on a bound: le is inclusive */
    svc_histogram_observe(s, 5);
    svc_histogram_observe(s, 100);
    char *t = render(m);
    assert_string_equal(t, "# HELP kl_seconds time\n"
                           "# TYPE kl_seconds histogram\n"
                           "kl_seconds_bucket{k=\"gemm\",le=\"0.1\"} 2\n"
                           "kl_seconds_bucket{k=\"gemm\",le=\"1\"} 2\n"
                           "kl_seconds_bucket{k=\"gemm\",le=\"10\"} 3\n"
                           "kl_seconds_bucket{k=\"gemm\",le=\"+Inf\"} 4\n"
                           "kl_seconds_sum{k=\"gemm\"} 105.15\n"
                           "kl_seconds_count{k=\"gemm\"} 4\n");
    assert_true(svc_series_value(s) == 4);
    free(t);
    svc_metrics_free(m);
}

static void test_histogram_without_labels_and_nan_ignored(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    const double bounds[] = {1};
    svc_series *s = svc_metric_with(svc_metric_histogram(m, "kl_h", "h", NULL, bounds, 1));
    svc_histogram_observe(s, NAN);
    svc_histogram_observe(s, 2);
    char *t = render(m);
    assert_non_null(strstr(t, "kl_h_bucket{le=\"1\"} 0\nkl_h_bucket{le=\"+Inf\"} 1\n"
                              "kl_h_sum 2\nkl_h_count 1\n"));
    free(t);
    svc_metrics_free(m);
}

static void test_gauge_special_values_render_as_the_format_spells_them(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    svc_metric *f = svc_metric_gauge(m, "kl_v", "v", (const char *[]){"i", NULL});
    svc_gauge_set(svc_metric_with(f, "a"), INFINITY);
    svc_gauge_set(svc_metric_with(f, "b"), -INFINITY);
    svc_gauge_set(svc_metric_with(f, "c"), NAN);
    svc_gauge_set(svc_metric_with(f, "d"), 0.1);
    svc_gauge_add(svc_metric_with(f, "e"), 2);
    svc_gauge_add(svc_metric_with(f, "e"), -0.5);
    char *t = render(m);
    assert_non_null(strstr(t, "kl_v{i=\"a\"} +Inf\nkl_v{i=\"b\"} -Inf\nkl_v{i=\"c\"} NaN\n"
                              "kl_v{i=\"d\"} 0.1\nkl_v{i=\"e\"} 1.5\n"));
    free(t);
    svc_metrics_free(m);
}

static void test_invalid_names_and_clashes_are_refused(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    const double b[] = {2, 1};
    assert_null(svc_metric_counter(m, "9lives", "x", NULL));
    assert_null(svc_metric_counter(m, "has space", "x", NULL));
    assert_null(svc_metric_counter(m, "ok", "x", (const char *[]){"bad-label", NULL}));
    assert_null(svc_metric_counter(m, "ok", "x", (const char *[]){"__reserved", NULL}));
    assert_null(svc_metric_histogram(m, "h", "x", (const char *[]){"le", NULL}, b, 0));
    assert_null(svc_metric_histogram(m, "h", "x", NULL, b, 2)); /* bounds not increasing */
    svc_metric *a = svc_metric_counter(m, "kl_same", "x", (const char *[]){"l", NULL});
    assert_non_null(a);
    assert_ptr_equal(svc_metric_counter(m, "kl_same", "x", (const char *[]){"l", NULL}), a);
    assert_null(svc_metric_gauge(m, "kl_same", "x", (const char *[]){"l", NULL}));
    assert_null(svc_metric_counter(m, "kl_same", "x", NULL));
    assert_null(svc_metric_with(a, NULL));
    svc_counter_add(NULL, 1); /* no-ops */
    svc_histogram_observe(NULL, 1);
    svc_metrics_free(m);
}

static void test_a_family_holds_a_bounded_number_of_series(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    svc_metric *f = svc_metric_counter(m, "kl_many", "x", (const char *[]){"id", NULL});
    char id[16];
    int made = 0;
    for (int i = 0; i < SVC_METRIC_MAX_SERIES + 10; i++) {
        snprintf(id, sizeof id, "%d", i);
        made += svc_metric_with(f, id) != NULL;
    }
    assert_int_equal(made, SVC_METRIC_MAX_SERIES);
    snprintf(id, sizeof id, "%d", 5);
    assert_non_null(svc_metric_with(f, id)); /* existing ones are still found */
    svc_metrics_free(m);
}

static void collect_two(svc_mwriter *w, void *arg)
{
    const char *v[] = {(const char *)arg};
    svc_mwriter_family(w, "kl_collected", "from a collector", SVC_METRIC_GAUGE);
    svc_mwriter_sample(w, "kl_collected", (const char *[]){"who", NULL}, v, 42);
}

static void test_collectors_follow_the_families_and_process_series_exist(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    svc_counter_add(svc_metric_with(svc_metric_counter(m, "kl_first_total", "f", NULL)), 1);
    assert_int_equal(svc_metrics_add_collector(m, collect_two, "x"), 0);
    assert_int_equal(svc_metrics_add_process(m), 0);
    char *t = render(m);
    char *first = strstr(t, "kl_first_total 1\n"), *coll = strstr(t, "kl_collected{who=\"x\"} 42\n");
    assert_non_null(first);
    assert_non_null(coll);
    assert_true(first < coll);
    /* a sample line each, after its HELP and TYPE */
    const char *process[] = {"\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ",
                             "\nprocess_open_fds ", "\nprocess_max_fds ", "\nprocess_threads ",
                             "\nprocess_start_time_seconds ", NULL};
    for (int i = 0; process[i]; i++)
        assert_non_null(strstr(t, process[i]));
    double threads = 0;
    assert_int_equal(sscanf(strstr(t, "\nprocess_threads ") + 1, "process_threads %lf", &threads), 1);
    assert_true(threads >= 1);
    free(t);
    svc_metrics_free(m);
}

typedef struct {
    svc_metric *c, *h;
} hammer_arg;

static void *hammer(void *p)
{
    hammer_arg *a = p;
    for (int i = 0; i < 20000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i % 7);
        svc_counter_add(svc_metric_with(a->c, k), 1);
        svc_histogram_observe(svc_metric_with(a->h, k), 0.5);
    }
    return NULL;
}

static void test_concurrent_updates_lose_nothing(void **state)
{
    (void)state;
    svc_metrics *m = svc_metrics_new();
    const double b[] = {1};
    hammer_arg a = {svc_metric_counter(m, "kl_c", "c", (const char *[]){"k", NULL}),
                    svc_metric_histogram(m, "kl_hh", "h", (const char *[]){"k", NULL}, b, 1)};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, hammer, &a);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    double total = 0, htotal = 0;
    for (int i = 0; i < 7; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        total += svc_series_value(svc_metric_with(a.c, k));
        htotal += svc_series_value(svc_metric_with(a.h, k));
    }
    assert_true(total == 80000);
    assert_true(htotal == 80000);
    char *txt = render(m);
    /* one series per key, whatever the races on first use */
    int lines = 0;
    for (char *p = txt; (p = strstr(p, "\nkl_c{")) != NULL; p++)
        lines++;
    assert_int_equal(lines, 7);
    free(txt);
    svc_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_with_labels_renders_help_type_and_sample),
        cmocka_unit_test(test_label_values_and_help_are_escaped),
        cmocka_unit_test(test_histogram_buckets_are_cumulative_with_inf_sum_and_count),
        cmocka_unit_test(test_histogram_without_labels_and_nan_ignored),
        cmocka_unit_test(test_gauge_special_values_render_as_the_format_spells_them),
        cmocka_unit_test(test_invalid_names_and_clashes_are_refused),
        cmocka_unit_test(test_a_family_holds_a_bounded_number_of_series),
        cmocka_unit_test(test_collectors_follow_the_families_and_process_series_exist),
        cmocka_unit_test(test_concurrent_updates_lose_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
