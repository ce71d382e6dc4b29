/* test_svc_url.c — the one URL parser: Redis and HTTP URLs, defaults, and
 * what it refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "svc_url.h"

static void test_redis_url_with_port_and_db(void **state)
{
    (void)state;
    svc_url u;
    assert_int_equal(svc_url_parse("redis://127.0.0.1:6380/3", NULL, &u), 0);
    assert_string_equal(u.scheme, "redis");
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 6380);
    assert_string_equal(u.path, "/3");
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "");
}

static void test_absent_port_is_zero_and_absent_path_is_slash(void **state)
{
    (void)state;
    svc_url u;
    assert_int_equal(svc_url_parse("redis://cache.internal", NULL, &u), 0);
    assert_string_equal(u.host, "cache.internal");
    assert_int_equal(u.port, 0);
    assert_string_equal(u.path, "/");
}

static void test_default_scheme_applies_only_without_one(void **state)
{
    (void)state;
    svc_url u;
    assert_int_equal(svc_url_parse("localhost:7000/1", "redis", &u), 0);
    assert_string_equal(u.scheme, "redis");
    assert_string_equal(u.host, "localhost");
    assert_int_equal(u.port, 7000);
    assert_int_equal(svc_url_parse("localhost:7000", NULL, &u), -EINVAL);
    assert_int_equal(svc_url_parse("http://gw:8080/x", "redis", &u), 0);
    assert_string_equal(u.scheme, "http");
}

static void test_userinfo_is_decoded_and_ipv6_keeps_brackets(void **state)
{
    (void)state;
    svc_url u;
    assert_int_equal(svc_url_parse("redis://:p%40ss@[::1]:6379/0", NULL, &u), 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "p@ss");
    assert_string_equal(u.host, "[::1]");
    assert_int_equal(u.port, 6379);
}

static void test_malformed_urls_are_refused(void **state)
{
    (void)state;
    svc_url u;
    assert_int_equal(svc_url_parse("", "redis", &u), -EINVAL);
    assert_int_equal(svc_url_parse(NULL, "redis", &u), -EINVAL);
    assert_int_equal(svc_url_parse("redis://host:99999/0", NULL, &u), -EINVAL);
    assert_int_equal(svc_url_parse("redis://host:port/0", NULL, &u), -EINVAL);
    assert_int_equal(svc_url_parse("redis://host:0/0", NULL, &u), -EINVAL);
    assert_int_equal(svc_url_parse("redis:///0", NULL, &u), -EINVAL);
    char longhost[600];
    memset(longhost, 'a', sizeof longhost);
    memcpy(longhost, "redis://", 8);
    longhost[sizeof longhost - 1] = '\0';
    assert_int_equal(svc_url_parse(longhost, NULL, &u), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_url_with_port_and_db),
        cmocka_unit_test(test_absent_port_is_zero_and_absent_path_is_slash),
        cmocka_unit_test(test_default_scheme_applies_only_without_one),
        cmocka_unit_test(test_userinfo_is_decoded_and_ipv6_keeps_brackets),
        cmocka_unit_test(test_malformed_urls_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
