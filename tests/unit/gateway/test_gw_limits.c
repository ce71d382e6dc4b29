/* test_gw_limits.c — the pure parts of rate limits and quotas: which bucket
 * a key gets, the Retry-After of a wait, and the POST /v1/tenants body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "api.h"
#include "gw_limits.h"
#include "reply.h"

static void test_tenant_values_override_the_gateway_defaults(void **state)
{
    gw_rate r = gw_rate_resolve(50, 100, -1, -1);
    assert_int_equal(r.rps, 50);
    assert_int_equal(r.burst, 100);
    r = gw_rate_resolve(50, 100, 2, -1);
    assert_int_equal(r.rps, 2);
    assert_int_equal(r.burst, 100);
    r = gw_rate_resolve(50, 100, 2, 3);
    assert_int_equal(r.rps, 2);
    assert_int_equal(r.burst, 3);
}

static void test_zero_rate_is_unlimited_and_zero_burst_is_the_rate(void **state)
{
    assert_int_equal(gw_rate_resolve(0, 100, -1, -1).rps, 0);
    assert_int_equal(gw_rate_resolve(50, 100, 0, -1).rps, 0);
    gw_rate r = gw_rate_resolve(50, 0, -1, -1);
    assert_int_equal(r.burst, 50);
    r = gw_rate_resolve(50, 100, 7, 0);
    assert_int_equal(r.burst, 7);
    assert_true(gw_rate_resolve(0, 0, -1, -1).burst >= 1);
}

static void test_retry_after_rounds_up_to_whole_seconds(void **state)
{
    assert_int_equal(gw_retry_after_s(0), 1);
    assert_int_equal(gw_retry_after_s(1), 1);
    assert_int_equal(gw_retry_after_s(1000), 1);
    assert_int_equal(gw_retry_after_s(1001), 2);
    assert_int_equal(gw_retry_after_s(2500), 3);
    assert_int_equal(gw_retry_after_s((int64_t)1 << 40), 86400);
}

static int parse(const char *text, gw_tenant_body *tb, char field[32])
{
    char msg[160];
    json_t *body = json_loads(text, 0, NULL);
    assert_non_null(body);
    int rc = gw_tenant_body_parse(body, tb, field, msg, sizeof(msg));
    /* tb->name points into body: compare before it goes */
    static char name[160];
    snprintf(name, sizeof(name), "%s", tb->name ? tb->name : "");
    tb->name = name;
    json_decref(body);
    return rc;
}

static void test_tenant_body_absent_null_and_set_limits(void **state)
{
    gw_tenant_body tb;
    char field[32];
    assert_int_equal(parse("{\"name\": \"acme\", \"rate_rps\": 5, \"max_queued\": null}", &tb, field), 0);
    assert_string_equal(tb.name, "acme");
    assert_int_equal(tb.lim[GW_LIM_RATE_RPS].set, 1);
    assert_int_equal(tb.lim[GW_LIM_RATE_RPS].value, 5);
    assert_int_equal(tb.lim[GW_LIM_MAX_QUEUED].set, 1);
    assert_int_equal(tb.lim[GW_LIM_MAX_QUEUED].value, -1);
    assert_int_equal(tb.lim[GW_LIM_RATE_BURST].set, 0);
    assert_int_equal(tb.lim[GW_LIM_MAX_RUNNING].set, 0);
    assert_int_equal(parse("{\"name\": \"a\", \"max_running\": 0}", &tb, field), 0);
    assert_int_equal(tb.lim[GW_LIM_MAX_RUNNING].value, 0);
}

static void test_tenant_body_errors_name_the_field(void **state)
{
    static const struct { const char *body, *field; } bad[] = {
        {"{}", "name"},
        {"{\"name\": \"\"}", "name"},
        {"{\"name\": 7}", "name"},
        {"{\"name\": \"a\\u0001b\"}", "name"},
        {"{\"name\": \"a\", \"rate_rps\": -1}", "rate_rps"},
        {"{\"name\": \"a\", \"rate_burst\": 1.5}", "rate_burst"},
        {"{\"name\": \"a\", \"max_queued\": \"10\"}", "max_queued"},
        {"{\"name\": \"a\", \"max_running\": 1000000000}", "max_running"},
        {"{\"name\": \"a\", \"rate\": 1}", "rate"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gw_tenant_body tb;
        char field[32];
        assert_int_equal(parse(bad[i].body, &tb, field), -1);
        assert_string_equal(field, bad[i].field);
    }
}

static void test_reads_and_writes_of_a_key_are_two_buckets(void **state)
{
    char r[48], w[48], other[48];
    gw_rate_key(r, sizeof r, 7, GW_RATE_READ);
    gw_rate_key(w, sizeof w, 7, GW_RATE_WRITE);
    gw_rate_key(other, sizeof other, 77, GW_RATE_READ);
    assert_string_not_equal(r, w);
    assert_string_not_equal(r, other);
    assert_string_equal(w, "kowloon:rate:7"); /* the bucket's name from before the split */
}

/* The route table declares each tenant or admin route's bucket: what
 * changes something (POST, PUT, DELETE) takes a write token, what only
 * reads (GET, and HEAD through it) a read token. A new route that forgets
 * to say so fails here. */
static void test_every_changing_route_takes_the_write_bucket(void **state)
{
    int writes = 0;
    for (const svc_route *r = gw_routes; r->method != NULL; r++) {
        int role = GW_ACCESS_ROLE(r->access);
        if (role != GW_ACCESS_TENANT && role != GW_ACCESS_ADMIN) {
            assert_false(r->access != GW_ACCESS_PUBLIC && (r->access & GW_ACCESS_WRITE));
            continue;
        }
        int changes = strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0;
        if (changes != !!(r->access & GW_ACCESS_WRITE))
            fail_msg("%s %s: a %s route must %sbe GW_ACCESS_WRITE", r->method, r->pattern,
                     changes ? "changing" : "reading", changes ? "" : "not ");
        writes += changes;
    }
    assert_true(writes >= 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenant_values_override_the_gateway_defaults),
        cmocka_unit_test(test_zero_rate_is_unlimited_and_zero_burst_is_the_rate),
        cmocka_unit_test(test_retry_after_rounds_up_to_whole_seconds),
        cmocka_unit_test(test_tenant_body_absent_null_and_set_limits),
        cmocka_unit_test(test_tenant_body_errors_name_the_field),
        cmocka_unit_test(test_reads_and_writes_of_a_key_are_two_buckets),
        cmocka_unit_test(test_every_changing_route_takes_the_write_bucket),
    };
    return cmocka_run_group_tests_name("gw_limits", tests, NULL, NULL);
}
