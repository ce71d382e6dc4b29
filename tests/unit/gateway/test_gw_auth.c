/* test_gw_auth.c — the failed-authentication limiter counts by client:
 * an IPv4 address, or an IPv6 /64 (one host picks any address of its /64,
 * so a limit per address would be no limit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "api.h"

static void test_failures_are_counted_per_ipv6_64_and_per_ipv4_address(void **state)
{
    (void)state;
    gw_authfail *f = gw_authfail_new(2, 1);
    gw_authfail_count(f, "2001:db8:1:2::1", 1000);
    gw_authfail_count(f, "2001:db8:1:2:ffff::7", 1000);
    /* the /64 is out of attempts, whichever of its addresses asks */
    assert_true(gw_authfail_blocked(f, "2001:db8:1:2::99", 1000) > 0);
    assert_true(gw_authfail_blocked(f, "2001:db8:1:2::1", 1000) > 0);
    /* the next /64, and IPv4 addresses, are other clients */
    assert_int_equal(gw_authfail_blocked(f, "2001:db8:1:3::1", 1000), 0);
    gw_authfail_count(f, "192.0.2.1", 1000);
    gw_authfail_count(f, "::ffff:192.0.2.1", 1000); /* the same IPv4 client */
    assert_true(gw_authfail_blocked(f, "192.0.2.1", 1000) > 0);
    assert_int_equal(gw_authfail_blocked(f, "192.0.2.2", 1000), 0);
    /* a token a second comes back */
    assert_int_equal(gw_authfail_blocked(f, "2001:db8:1:2::5", 2000), 0);
    gw_authfail_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failures_are_counted_per_ipv6_64_and_per_ipv4_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
