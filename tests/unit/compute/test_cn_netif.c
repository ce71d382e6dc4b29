/* test_cn_netif.c — the interface that carries an address, which the node
 * gives NCCL as NCCL_SOCKET_IFNAME: loopback addresses are on lo, an
 * address no interface here has is -ENOENT, a name that does not resolve
 * an error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "cn_netif.h"

static void test_loopback_addresses_are_on_lo(void **state)
{
    (void)state;
    char ifn[64] = "";
    assert_int_equal(cn_netif_of("127.0.0.1", ifn, sizeof ifn), 0);
    assert_string_equal(ifn, "lo");
    memset(ifn, 0, sizeof ifn);
    assert_int_equal(cn_netif_of("localhost", ifn, sizeof ifn), 0);
    assert_string_equal(ifn, "lo");
}

static void test_an_address_no_interface_has_is_not_found(void **state)
{
    (void)state;
    char ifn[64] = "unchanged";
    assert_int_equal(cn_netif_of("192.0.2.77", ifn, sizeof ifn), -ENOENT); /* TEST-NET-1 */
    assert_string_equal(ifn, "unchanged");
}

static void test_bad_host_is_an_error(void **state)
{
    (void)state;
    char ifn[64];
    assert_true(cn_netif_of("no-such-host.invalid", ifn, sizeof ifn) < 0);
    assert_int_equal(cn_netif_of("", ifn, sizeof ifn), -EINVAL);
    assert_int_equal(cn_netif_of(NULL, ifn, sizeof ifn), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loopback_addresses_are_on_lo),
        cmocka_unit_test(test_an_address_no_interface_has_is_not_found),
        cmocka_unit_test(test_bad_host_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
