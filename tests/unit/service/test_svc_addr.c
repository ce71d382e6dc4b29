/* test_svc_addr.c — client addresses: parsing (ports, brackets, mapped
 * IPv4), limit keys (an IPv6 /64 is one client), CIDR sets, and the client
 * an X-Forwarded-For chain names behind trusted proxies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "svc_addr.h"

static void text_of(const char *in, char *out)
{
    svc_addr a;
    assert_int_equal(svc_addr_parse(in, strlen(in), &a), 0);
    svc_addr_text(&a, out, SVC_ADDR_TEXT);
}

static void addresses_parse_with_ports_brackets_and_mapped_v4(void **state)
{
    (void)state;
    char t[SVC_ADDR_TEXT];
    text_of("192.0.2.1", t);
    assert_string_equal(t, "192.0.2.1");
    text_of(" 192.0.2.1:5678 ", t);
    assert_string_equal(t, "192.0.2.1");
    text_of("[2001:db8::1]:443", t);
    assert_string_equal(t, "2001:db8::1");
    text_of("[2001:db8::1]", t);
    assert_string_equal(t, "2001:db8::1");
    text_of("2001:DB8:0::1", t);
    assert_string_equal(t, "2001:db8::1");
    text_of("::ffff:198.51.100.7", t);
    assert_string_equal(t, "198.51.100.7");
    svc_addr a;
    static const char *const bad[] = {"", "unknown", "1.2.3", "1.2.3.4:", "1.2.3.4:x",
                                      "[::1", "[::1]x", "[::1]:", "256.1.1.1", "1.2.3.4/8",
                                      "::1%lo", NULL};
    for (int i = 0; bad[i] != NULL; i++)
        assert_int_equal(svc_addr_parse(bad[i], strlen(bad[i]), &a), -1);
}

static void ipv6_addresses_of_one_64_share_a_limit_key(void **state)
{
    (void)state;
    char k1[SVC_ADDR_TEXT], k2[SVC_ADDR_TEXT], k3[SVC_ADDR_TEXT];
    svc_addr_key_of("2001:db8:1:2::1", k1, sizeof k1);
    svc_addr_key_of("2001:db8:1:2:ffff:ffff:ffff:fffe", k2, sizeof k2);
    svc_addr_key_of("2001:db8:1:3::1", k3, sizeof k3);
    assert_string_equal(k1, "2001:db8:1:2::/64");
    assert_string_equal(k1, k2);
    assert_string_not_equal(k1, k3);
    svc_addr_key_of("198.51.100.7", k1, sizeof k1);
    assert_string_equal(k1, "198.51.100.7");
    svc_addr_key_of("::ffff:198.51.100.7", k1, sizeof k1);
    assert_string_equal(k1, "198.51.100.7");
    svc_addr_key_of("unknown", k1, sizeof k1);
    assert_string_equal(k1, "unknown");
}

static int in(const svc_cidrs *s, const char *ip)
{
    svc_addr a;
    assert_int_equal(svc_addr_parse(ip, strlen(ip), &a), 0);
    return svc_cidrs_match(s, &a);
}

static void cidr_sets_match_by_prefix(void **state)
{
    (void)state;
    char err[128];
    svc_cidrs *s = svc_cidrs_parse("10.0.0.0/8, 192.0.2.5 ,fd00:1::/32,172.16.1.129/25,::1", err,
                                   sizeof err);
    assert_non_null(s);
    assert_int_equal(svc_cidrs_count(s), 5);
    static const struct {
        const char *ip;
        int in;
    } cases[] = {
        {"10.255.1.2", 1}, {"11.0.0.1", 0}, {"192.0.2.5", 1}, {"192.0.2.6", 0},
        {"fd00:1:ffff::9", 1}, {"fd00:2::9", 0},
        {"172.16.1.200", 1}, {"172.16.1.100", 0},   /* host bits of the block ignored */
        {"::1", 1}, {"::ffff:10.1.1.1", 1},         /* mapped IPv4 is IPv4 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!!in(s, cases[i].ip) != cases[i].in)
            fail_msg("%s: in the set %d, want %d", cases[i].ip, !cases[i].in, cases[i].in);
    assert_false(in(NULL, "10.1.1.1"));
    svc_cidrs_free(s);
    s = svc_cidrs_parse("", err, sizeof err);
    assert_non_null(s);
    assert_int_equal(svc_cidrs_count(s), 0);
    svc_cidrs_free(s);
    static const char *const bad[] = {"10.0.0.0/33", "10.0.0.0/", "fd00::/129", "x", "10/8",
                                      "10.0.0.0/8,,", "[::1]/128", "1.2.3.4/-1", NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        err[0] = '\0';
        assert_null(svc_cidrs_parse(bad[i], err, sizeof err));
        assert_non_null(strstr(err, "CIDR"));
    }
}

static const char *client(const svc_cidrs *t, const char *peer, const char *xff)
{
    static char out[SVC_ADDR_TEXT];
    svc_addr_client(t, peer, xff, out, sizeof out);
    return out;
}

static void forwarded_for_names_the_rightmost_untrusted_hop(void **state)
{
    (void)state;
    char err[128];
    svc_cidrs *t = svc_cidrs_parse("10.0.0.0/8,2001:db8:ffff::/48", err, sizeof err);
    /* the proxy's own peer */
    assert_string_equal(client(t, "10.0.0.1", "203.0.113.7"), "203.0.113.7");
    /* what the client wrote on the left is never read past the hop the
     * proxy added */
    assert_string_equal(client(t, "10.0.0.1", "1.1.1.1, 203.0.113.7"), "203.0.113.7");
    /* two proxies of ours: skipped */
    assert_string_equal(client(t, "10.0.0.1", "198.51.100.9, 203.0.113.7, 10.9.9.9"),
                        "203.0.113.7");
    assert_string_equal(client(t, "10.0.0.1", "198.51.100.9,[2001:db8:ffff::2]:80"),
                        "198.51.100.9");
    /* not from a trusted proxy: the header is the client's own words */
    assert_string_equal(client(t, "192.0.2.1", "203.0.113.7"), "192.0.2.1");
    assert_string_equal(client(NULL, "10.0.0.1", "203.0.113.7"), "10.0.0.1");
    /* no header, an empty one, only trusted hops */
    assert_string_equal(client(t, "10.0.0.1", NULL), "10.0.0.1");
    assert_string_equal(client(t, "10.0.0.1", ""), "10.0.0.1");
    assert_string_equal(client(t, "10.0.0.1", "10.2.2.2, 10.3.3.3"), "10.2.2.2");
    /* garbage stops the walk at the hop that forwarded it */
    assert_string_equal(client(t, "10.0.0.1", "203.0.113.7, nonsense"), "10.0.0.1");
    assert_string_equal(client(t, "10.0.0.1", "nonsense, 10.4.4.4"), "10.4.4.4");
    assert_string_equal(client(t, "10.0.0.1", "203.0.113.7, , 10.4.4.4"), "203.0.113.7");
    assert_string_equal(client(t, "10.0.0.1", "203.0.113.7:5555"), "203.0.113.7");
    svc_cidrs_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(addresses_parse_with_ports_brackets_and_mapped_v4),
        cmocka_unit_test(ipv6_addresses_of_one_64_share_a_limit_key),
        cmocka_unit_test(cidr_sets_match_by_prefix),
        cmocka_unit_test(forwarded_for_names_the_rightmost_untrusted_hop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
