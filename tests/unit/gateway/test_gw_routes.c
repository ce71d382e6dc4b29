/* test_gw_routes.c — the gateway's route table fails closed: every route
 * says who may call it, as one of the roles gw_authorize checks or as
 * public, and the public ones are exactly those meant for anyone. A route
 * added without an access fails here (and the server would not start). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "api.h"

static void test_every_route_declares_a_known_access(void **state)
{
    (void)state;
    int n = 0;
    for (const svc_route *r = gw_routes; r->method != NULL; r++, n++) {
        if (r->access == 0)
            fail_msg("%s %s declares no access", r->method, r->pattern);
        if (r->access == GW_ACCESS_PUBLIC)
            continue;
        int role = GW_ACCESS_ROLE(r->access);
        if (role != GW_ACCESS_TENANT && role != GW_ACCESS_ADMIN && role != GW_ACCESS_CLUSTER &&
            role != GW_ACCESS_METRICS)
            fail_msg("%s %s: access %#x is no role gw_authorize checks", r->method, r->pattern,
                     (unsigned)r->access);
        if ((r->access & ~0xff) & ~GW_ACCESS_WRITE)
            fail_msg("%s %s: unknown access flags %#x", r->method, r->pattern, (unsigned)r->access);
    }
    assert_true(n > 20);
}

/* Public: health, the spec and the dashboard's files; nothing else. */
static void test_only_health_the_spec_and_the_dashboard_are_public(void **state)
{
    (void)state;
    static const char *const open[] = {"/healthz", "/readyz", "/openapi.yaml", "/", "/ui", "/ui/",
                                       "/ui/{file}", "/ui/vendor/chart.js/{file}", NULL};
    for (const svc_route *r = gw_routes; r->method != NULL; r++) {
        int listed = 0;
        for (int i = 0; open[i] != NULL; i++)
            listed |= strcmp(r->pattern, open[i]) == 0;
        if (listed != (r->access == GW_ACCESS_PUBLIC))
            fail_msg("%s %s is %spublic", r->method, r->pattern, listed ? "not " : "");
        if (listed && strcmp(r->method, "GET") != 0)
            fail_msg("%s %s: a public route only reads", r->method, r->pattern);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_route_declares_a_known_access),
        cmocka_unit_test(test_only_health_the_spec_and_the_dashboard_are_public),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
