/* test_gw_webhook_net.c — which addresses webhooks may reach: the ranges a
 * server-side request must not reach are refused, public ones pass, the
 * operator's allow-list and --webhook-allow-private open exactly what they
 * name, and URLs are checked by the addresses of their host (IP literals
 * here; a name is left to the resolver), with refusals that name no
 * address. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>

#include "webhook_net.h"

/* 1 when p lets a webhook connect to the address text a. */
static int ok(const gw_whnet *p, const char *a)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(a, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, a, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, a, &s4->sin_addr), 1);
    }
    char why[128] = "";
    int r = gw_whnet_addr_ok(p, (struct sockaddr *)&ss, why, sizeof why);
    if (!r)
        assert_non_null(strstr(why, " is "));
    return r;
}

static void test_internal_ranges_are_refused(void **state)
{
    (void)state;
    char err[128];
    gw_whnet *p = gw_whnet_new(0, NULL, err, sizeof err);
    assert_non_null(p);
    const char *bad[] = {"127.0.0.1", "127.255.0.9", "10.0.0.1", "172.16.0.1", "172.31.255.255",
                         "192.168.1.1", "169.254.169.254", "100.64.0.1", "100.127.255.254",
                         "0.0.0.0", "224.0.0.1", "255.255.255.255", "::", "::1", "fd00::1",
                         "fc12:3456::1", "fe80::1", "::ffff:10.0.0.1", "::ffff:8.8.8.8", "ff02::1",
                         /* IPv6 ways to an IPv4 address, and discard-only */
                         "64:ff9b::a00:1", "64:ff9b:1::a00:1", "64:ff9b:1:ffff::1",
                         "2002:a00:1::1", "2002:7f00:1::", "2001:0:4136:e378::1",
                         "2001:0:ffff::1", "100::1", "100::ffff:ffff:ffff:ffff"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (ok(p, bad[i]))
            fail_msg("%s was allowed", bad[i]);
    }
    gw_whnet_free(p);
}

static void test_public_addresses_pass(void **state)
{
    (void)state;
    char err[128];
    gw_whnet *p = gw_whnet_new(0, "", err, sizeof err);
    const char *good[] = {"8.8.8.8", "93.184.216.34", "172.32.0.1", "100.128.0.1", "11.0.0.1",
                          "2001:4860:4860::8888", "2606:4700::1111",
                          /* just past the new blocks */
                          "64:ff9b:2::1", "2001:1::1", "2003::1", "100:0:0:1::1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (!ok(p, good[i]))
            fail_msg("%s was refused", good[i]);
    }
    gw_whnet_free(p);
}

static void test_allow_list_opens_only_its_blocks(void **state)
{
    (void)state;
    char err[128];
    gw_whnet *p = gw_whnet_new(0, "127.0.0.1/32, 10.20.0.0/16,fd00::/8", err, sizeof err);
    assert_non_null(p);
    assert_true(ok(p, "127.0.0.1"));
    assert_false(ok(p, "127.0.0.2"));
    assert_true(ok(p, "10.20.3.4"));
    assert_false(ok(p, "10.21.0.1"));
    assert_true(ok(p, "fd00::5"));
    assert_false(ok(p, "fe80::1"));
    assert_false(ok(p, "::1"));
    gw_whnet_free(p);
}

static void test_allow_private_opens_everything(void **state)
{
    (void)state;
    char err[128];
    gw_whnet *p = gw_whnet_new(1, NULL, err, sizeof err);
    assert_true(ok(p, "127.0.0.1"));
    assert_true(ok(p, "192.168.0.1"));
    assert_true(ok(p, "::1"));
    gw_whnet_free(p);
}

static void test_bad_allow_list_is_refused_naming_the_entry(void **state)
{
    (void)state;
    char err[128] = "";
    assert_null(gw_whnet_new(0, "10.0.0.0/8,10.0.0.0/33", err, sizeof err));
    assert_non_null(strstr(err, "10.0.0.0/33"));
    assert_null(gw_whnet_new(0, "example.com", err, sizeof err));
    assert_non_null(strstr(err, "example.com"));
}

static void test_urls_are_checked_by_scheme_and_address(void **state)
{
    (void)state;
    char err[128], msg[256], host[256];
    gw_whnet *p = gw_whnet_new(0, "127.0.0.1/32", err, sizeof err);
    assert_int_equal(gw_whnet_url_check(p, "https://93.184.216.34/hook", host, sizeof host, msg,
                                        sizeof msg), 0);
    assert_string_equal(host, "93.184.216.34");
    assert_int_equal(gw_whnet_url_check(p, "http://127.0.0.1:8080/x", host, sizeof host, msg,
                                        sizeof msg), 0);
    assert_int_equal(gw_whnet_url_check(p, "http://10.1.2.3/x", host, sizeof host, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "not allowed"));
    assert_int_equal(gw_whnet_url_check(p, "http://[::1]:9/x", host, sizeof host, msg, sizeof msg), -1);
    assert_string_equal(host, "::1");
    assert_int_equal(gw_whnet_url_check(p, "http://[::ffff:127.0.0.1]/", host, sizeof host, msg,
                                        sizeof msg), -1);
    assert_int_equal(gw_whnet_url_check(p, "http://[2002:a00:1::1]/", host, sizeof host, msg,
                                        sizeof msg), -1);
    assert_int_equal(gw_whnet_url_check(p, "ftp://93.184.216.34/x", host, sizeof host, msg,
                                        sizeof msg), -1);
    assert_non_null(strstr(msg, "ftp"));
    assert_int_equal(gw_whnet_url_check(p, "not a url", host, sizeof host, msg, sizeof msg), -1);
    /* a name is not resolved here: the caller resolves it off the HTTP
     * threads (resolver.h) */
    assert_int_equal(gw_whnet_url_check(p, "https://hooks.example.com/x", host, sizeof host, msg,
                                        sizeof msg), 1);
    assert_string_equal(host, "hooks.example.com");
    gw_whnet_free(p);
}

/* What a refusal tells the client: that the host's address is not
 * allowed, never the address or the kind of network it is in (an internal
 * DNS answer is the operator's to know). */
static void test_a_refusal_names_no_address(void **state)
{
    (void)state;
    char err[128], msg[256];
    gw_whnet *p = gw_whnet_new(0, NULL, err, sizeof err);
    struct sockaddr_in pub = {.sin_family = AF_INET}, priv = {.sin_family = AF_INET};
    inet_pton(AF_INET, "93.184.216.34", &pub.sin_addr);
    inet_pton(AF_INET, "10.20.30.40", &priv.sin_addr);
    const struct sockaddr *both[2] = {(struct sockaddr *)&pub, (struct sockaddr *)&priv};
    assert_int_equal(gw_whnet_addrs_check(p, "hooks.example.com", both, 1, msg, sizeof msg), 0);
    assert_int_equal(gw_whnet_addrs_check(p, "hooks.example.com", both, 2, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "hooks.example.com"));
    assert_non_null(strstr(msg, "not allowed"));
    assert_null(strstr(msg, "10.20"));
    assert_null(strstr(msg, "private"));
    gw_whnet_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_internal_ranges_are_refused),
        cmocka_unit_test(test_public_addresses_pass),
        cmocka_unit_test(test_allow_list_opens_only_its_blocks),
        cmocka_unit_test(test_allow_private_opens_everything),
        cmocka_unit_test(test_bad_allow_list_is_refused_naming_the_entry),
        cmocka_unit_test(test_urls_are_checked_by_scheme_and_address),
        cmocka_unit_test(test_a_refusal_names_no_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
