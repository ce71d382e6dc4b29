/* test_gw_usage.c — usage and cost in the gateway: the price table of
 * --prices/--currency, the node's usage report as the store gets it, and
 * the arguments of GET /v1/usage (times, ranges, group_by). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "usage.h"

/* Parses spec and returns the table as JSON (caller decrefs), or NULL with
 * the error in err. */
static json_t *prices(const char *spec, const char *currency, char *err, size_t errlen)
{
    char *text = NULL;
    int rc = gw_prices_parse(spec, currency, &text, err, errlen);
    if (rc != 0) {
        assert_int_equal(rc, -EINVAL);
        assert_null(text);
        assert_true(strlen(err) > 0);
        return NULL;
    }
    json_t *o = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(o);
    return o;
}

static double rate(const json_t *table, const char *key)
{
    return json_number_value(json_object_get(json_object_get(table, "rates"), key));
}

static void test_price_table_is_parsed(void **state)
{
    (void)state;
    char err[160];
    json_t *t = prices(" cpu=0.04, cuda = 2.5,cuda:NVIDIA H200=3.80 ", "USD", err, sizeof(err));
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "currency")), "USD");
    assert_int_equal(json_object_size(json_object_get(t, "rates")), 3);
    assert_true(rate(t, "cpu") == 0.04);
    assert_true(rate(t, "cuda") == 2.5);
    assert_true(rate(t, "cuda:NVIDIA H200") == 3.8);
    json_decref(t);
    /* no table: every rate absent, so everything costs 0 */
    static const char *const none[] = {NULL, "", "   "};
    for (int i = 0; i < 3; i++) {
        t = prices(none[i], "EUR", err, sizeof(err));
        assert_non_null(t);
        assert_int_equal(json_object_size(json_object_get(t, "rates")), 0);
        assert_string_equal(json_string_value(json_object_get(t, "currency")), "EUR");
        json_decref(t);
    }
}

static void test_bad_price_tables_are_refused_saying_why(void **state)
{
    (void)state;
    static const struct { const char *spec, *currency, *says; } bad[] = {
        {"cpu", "USD", "KEY=RATE"},
        {"gpu=1", "USD", "not cpu, cuda"},
        {"cuda:=1", "USD", "not cpu, cuda"},
        {"cpu=-1", "USD", "non-negative"},
        {"cpu=1e3", "USD", "non-negative"},
        {"cpu=abc", "USD", "non-negative"},
        {"cpu=", "USD", "non-negative"},
        {"cpu=nan", "USD", "non-negative"},
        {"cpu=1,cpu=2", "USD", "twice"},
        {"cpu=1,,cuda=2", "USD", "empty"},
        {"cpu=1,", "USD", "comma"},
        {"cpu=1", "usd", "ISO 4217"},
        {"cpu=1", "EURO", "ISO 4217"},
        {"cpu=1", NULL, "ISO 4217"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[160] = "";
        json_t *t = prices(bad[i].spec, bad[i].currency, err, sizeof(err));
        if (t || !strstr(err, bad[i].says))
            fail_msg("%s / %s: got \"%s\"", bad[i].spec, bad[i].currency ? bad[i].currency : "NULL", err);
    }
}

/* The report's usage as the store would get it (caller decrefs; NULL when none). */
static json_t *from_report(const char *report)
{
    json_t *r = json_loads(report, 0, NULL);
    assert_non_null(r);
    char *text = gw_usage_from_report(r);
    json_decref(r);
    json_t *u = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return u;
}

static void test_node_usage_keeps_only_well_formed_members(void **state)
{
    (void)state;
    json_t *u = from_report("{\"usage\":{\"run_s\":1.5,\"cpu_s\":2,\"gpus\":2,\"gpu_model\":\"H200\","
                            "\"extra\":1}}");
    assert_non_null(u);
    assert_int_equal(json_object_size(u), 4);
    assert_true(json_number_value(json_object_get(u, "cpu_s")) == 2.0);
    assert_int_equal(json_integer_value(json_object_get(u, "gpus")), 2);
    assert_string_equal(json_string_value(json_object_get(u, "gpu_model")), "H200");
    json_decref(u);
    /* what PostgreSQL could not cast, or should not believe, is left out */
    u = from_report("{\"usage\":{\"run_s\":-1,\"cpu_s\":\"3\",\"gpus\":65,\"gpu_model\":\"\"}}");
    assert_null(u);
    u = from_report("{\"usage\":{\"run_s\":1e12,\"cpu_s\":0.5,\"gpus\":1.5}}");
    assert_non_null(u);
    assert_int_equal(json_object_size(u), 1);
    json_decref(u);
    assert_null(from_report("{\"usage\":[1]}"));
    assert_null(from_report("{}"));

    json_t *r = json_loads("{\"backend\":\"cuda\"}", 0, NULL);
    assert_string_equal(gw_usage_backend(r), "cuda");
    json_decref(r);
    r = json_loads("{\"backend\":\"tpu\"}", 0, NULL);
    assert_null(gw_usage_backend(r));
    json_decref(r);
}

static void test_times_are_dates_or_rfc3339(void **state)
{
    (void)state;
    int64_t ms;
    assert_int_equal(gw_usage_time_parse("1970-01-02", &ms), 0);
    assert_int_equal(ms, 86400000);
    assert_int_equal(gw_usage_time_parse("2024-02-29T12:00:00Z", &ms), 0);
    assert_int_equal(ms, 1709208000000LL);
    assert_int_equal(gw_usage_time_parse("2024-02-29T14:00:00.5+02:00", &ms), 0);
    assert_int_equal(ms, 1709208000500LL);
    assert_int_equal(gw_usage_time_parse("2024-02-29T07:30:00.123456-04:30", &ms), 0);
    assert_int_equal(ms, 1709208000123LL);
    static const char *const bad[] = {
        "", "2024", "2024-1-01", "2023-02-29", "2024-13-01", "2024-00-10", "2024-04-31",
        "1969-12-31", "2024-01-01T", "2024-01-01T10:00:00", "2024-01-01T24:00:00Z",
        "2024-01-01T10:60:00Z", "2024-01-01T10:00:00.Z", "2024-01-01T10:00:00+2:00",
        "2024-01-01T10:00:00Zjunk", "2024-01-01 10:00:00Z", "yesterday", "2024-01-01x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (gw_usage_time_parse(bad[i], &ms) != -EINVAL)
            fail_msg("\"%s\" was accepted", bad[i]);
}

static void expect_bad(const char *from, const char *to, const char *group_by, const char *field)
{
    gw_usage_query q;
    const char *got = NULL;
    char msg[160] = "";
    assert_int_equal(gw_usage_query_parse(from, to, group_by, 1700000000000LL, &q, &got, msg,
                                          sizeof(msg)), -EINVAL);
    assert_string_equal(got, field);
    assert_non_null(strstr(msg, field));
}

static void test_usage_query_defaults_and_checks(void **state)
{
    (void)state;
    const int64_t now = 1700000000000LL, day = 86400000;
    gw_usage_query q;
    const char *field;
    char msg[160];
    assert_int_equal(gw_usage_query_parse(NULL, NULL, NULL, now, &q, &field, msg, sizeof(msg)), 0);
    assert_int_equal(q.to_ms, now);
    assert_int_equal(q.from_ms, now - GW_USAGE_DEFAULT_DAYS * day);
    assert_null(q.group);
    assert_int_equal(gw_usage_query_parse("2024-01-01", "2024-12-31", "label:team.a-1", now, &q,
                                          &field, msg, sizeof(msg)), 0);
    assert_string_equal(q.group, "label");
    assert_string_equal(q.label_key, "team.a-1");
    assert_int_equal(gw_usage_query_parse("2024-01-01", "2024-01-01", "day", now, &q, &field, msg,
                                          sizeof(msg)), 0);
    assert_string_equal(q.group, "day");
    assert_int_equal(q.from_ms, q.to_ms);
    assert_int_equal(gw_usage_query_parse(NULL, NULL, "kernel", now, &q, &field, msg, sizeof(msg)), 0);
    assert_string_equal(q.group, "kernel");

    expect_bad("soon", NULL, NULL, "from");
    expect_bad(NULL, "2024-02-30", NULL, "to");
    expect_bad("2024-03-02", "2024-03-01", NULL, "from");
    expect_bad("2023-01-01", "2024-01-03", NULL, "from");   /* 367 days */
    expect_bad(NULL, NULL, "node", "group_by");
    expect_bad(NULL, NULL, "label:", "group_by");
    expect_bad(NULL, NULL, "label:a b", "group_by");
    expect_bad(NULL, NULL, "Kernel", "group_by");
}

/* The result path's usage fragments: kowloon_usage's members, order and
 * rounding; a report that does not say enough is left to PostgreSQL. */
static void test_usage_fragments_match_kowloon_usage(void **state)
{
    (void)state;
    json_t *prices = json_loads("{\"currency\": \"EUR\", \"rates\": {\"cpu\": 3600,"
                                " \"cuda\": 1, \"cuda:H200\": 7200}}", 0, NULL);
    json_t *cpu = json_loads("{\"usage\": {\"run_s\": 0.0125, \"cpu_s\": 0.002}}", 0, NULL);
    char *u1, *u2;
    assert_int_equal(gw_usage_fragments(cpu, "cpu", 4096, prices, &u1, &u2), 0);
    assert_string_equal(u1, "\"run_s\":0.013,\"backend\":\"cpu\",\"gpus\":0,\"gpu_s\":0.000,"
                            "\"cpu_s\":0.002000");
    assert_string_equal(u2, "\"bytes_out\":4096,\"cost\":0.002000000,\"currency\":\"EUR\"");
    free(u1);
    free(u2);
    json_t *gpu = json_loads("{\"usage\": {\"run_s\": 2, \"gpus\": 2, \"gpu_model\": \"H200\"}}",
                             0, NULL);
    assert_int_equal(gw_usage_fragments(gpu, "cuda", 0, prices, &u1, &u2), 0);
    assert_string_equal(u1, "\"run_s\":2.000,\"backend\":\"cuda\",\"gpus\":2,"
                            "\"gpu_model\":\"H200\",\"gpu_s\":4.000,\"cpu_s\":0.000000");
    assert_string_equal(u2, "\"bytes_out\":0,\"cost\":8.000000000,\"currency\":\"EUR\"");
    free(u1);
    free(u2);
    /* no run time, or a CUDA run without its model: PostgreSQL's part */
    json_t *none = json_loads("{\"usage\": {\"cpu_s\": 1}}", 0, NULL);
    json_t *nomodel = json_loads("{\"usage\": {\"run_s\": 1, \"gpus\": 1}}", 0, NULL);
    assert_int_equal(gw_usage_fragments(none, "cpu", 0, prices, &u1, &u2), -1);
    assert_int_equal(gw_usage_fragments(nomodel, "cuda", 0, prices, &u1, &u2), -1);
    assert_int_equal(gw_usage_fragments(cpu, NULL, 0, prices, &u1, &u2), -1);
    assert_null(u1);
    json_decref(prices);
    json_decref(cpu);
    json_decref(gpu);
    json_decref(none);
    json_decref(nomodel);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_price_table_is_parsed),
        cmocka_unit_test(test_bad_price_tables_are_refused_saying_why),
        cmocka_unit_test(test_node_usage_keeps_only_well_formed_members),
        cmocka_unit_test(test_times_are_dates_or_rfc3339),
        cmocka_unit_test(test_usage_query_defaults_and_checks),
        cmocka_unit_test(test_usage_fragments_match_kowloon_usage),
    };
    return cmocka_run_group_tests_name("gw_usage", tests, NULL, NULL);
}
