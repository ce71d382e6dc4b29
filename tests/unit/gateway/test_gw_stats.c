/* test_gw_stats.c — GET /v1/stats/history's minutes argument and the
 * answers' cache: fresh for its TTL, per key, bounded, oldest out first. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "stats.h"

static void test_minutes_default_and_bounds(void **state)
{
    int m = -1;
    assert_int_equal(gw_stats_minutes_parse(NULL, &m), 0);
    assert_int_equal(m, 60);
    assert_int_equal(gw_stats_minutes_parse("1", &m), 0);
    assert_int_equal(m, 1);
    assert_int_equal(gw_stats_minutes_parse("1440", &m), 0);
    assert_int_equal(m, 1440);
    assert_int_equal(gw_stats_minutes_parse("0060", &m), 0);
    assert_int_equal(m, 60);
}

static void test_minutes_refuses_all_else(void **state)
{
    const char *bad[] = {"", "0", "1441", "-1", "+5", " 5", "5 ", "1.5", "1e2", "abc", "99999",
                         "18446744073709551617", "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int m = 7;
        assert_int_equal(gw_stats_minutes_parse(bad[i], &m), -EINVAL);
        assert_int_equal(m, 7); /* untouched */
    }
}

static void test_an_answer_is_fresh_for_the_ttl_only(void **state)
{
    gw_stats *c = gw_stats_new(4, 5000);
    assert_non_null(c);
    size_t len = 0;
    assert_null(gw_stats_get(c, "i:60:1", 1000, &len));
    assert_int_equal(gw_stats_put(c, "i:60:1", "{\"a\":1}", 7, 1000), 0);
    char *b = gw_stats_get(c, "i:60:1", 5999, &len);
    assert_non_null(b);
    assert_int_equal(len, 7);
    assert_string_equal(b, "{\"a\":1}");
    free(b);
    assert_null(gw_stats_get(c, "i:60:1", 6000, &len)); /* 5 s later: asked again */
    assert_null(gw_stats_get(c, "i:5:1", 1000, &len));  /* another window */
    assert_null(gw_stats_get(c, "i:60:2", 1000, &len)); /* another tenant */
    /* a newer answer replaces the old one under its key */
    assert_int_equal(gw_stats_put(c, "i:60:1", "{}", 2, 7000), 0);
    b = gw_stats_get(c, "i:60:1", 7000, &len);
    assert_string_equal(b, "{}");
    free(b);
    gw_stats_free(c);
}

static void test_the_table_is_bounded_oldest_out_first(void **state)
{
    gw_stats *c = gw_stats_new(3, 5000);
    char key[32];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "i:60:%d", i);
        assert_int_equal(gw_stats_put(c, key, key, strlen(key), 100 + i), 0);
    }
    size_t len;
    assert_null(gw_stats_get(c, "i:60:0", 200, &len)); /* the oldest went */
    for (int i = 1; i < 4; i++) {
        snprintf(key, sizeof key, "i:60:%d", i);
        char *b = gw_stats_get(c, key, 200, &len);
        assert_non_null(b);
        assert_string_equal(b, key);
        free(b);
    }
    /* a key too long for an entry is not kept, and nothing is evicted */
    char longkey[400];
    memset(longkey, 'x', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(gw_stats_put(c, longkey, "{}", 2, 300), 0);
    assert_null(gw_stats_get(c, longkey, 300, &len));
    char *b = gw_stats_get(c, "i:60:1", 300, &len);
    assert_non_null(b);
    free(b);
    gw_stats_free(c);
    gw_stats_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minutes_default_and_bounds),
        cmocka_unit_test(test_minutes_refuses_all_else),
        cmocka_unit_test(test_an_answer_is_fresh_for_the_ttl_only),
        cmocka_unit_test(test_the_table_is_bounded_oldest_out_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
