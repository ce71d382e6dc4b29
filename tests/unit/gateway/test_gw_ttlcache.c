/* test_gw_ttlcache.c — the secrets' answer cache that the API keys and the
 * node credentials share: values round-trip and expire, an unknown secret
 * never takes a known one's place in a full set, a slow answer never
 * replaces a newer one, forgetting by value, and a TTL of 0. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ttlcache.h"

typedef struct val {
    char name[40];
    int n;
} val;

/* A digest in set 0 of a cache of one set, told apart by its last byte. */
static void digest(unsigned char d[32], int k)
{
    memset(d, 0, 32);
    d[31] = (unsigned char)k;
    d[30] = (unsigned char)(k >> 8);
}

static void values_round_trip_and_expire(void **state)
{
    gw_ttlcache *c = gw_ttlcache_new(64, 500, sizeof(val));
    unsigned char d[32];
    digest(d, 1);
    val v = {"node-a", 7}, out;
    assert_int_equal(gw_ttlcache_get(c, d, 1000, &out), -ENOENT);
    gw_ttlcache_put(c, d, &v, 1000);
    memset(&out, 0, sizeof out);
    assert_int_equal(gw_ttlcache_get(c, d, 1499, &out), 1);
    assert_string_equal(out.name, "node-a");
    assert_int_equal(out.n, 7);
    assert_int_equal(gw_ttlcache_get(c, d, 1500, &out), -ENOENT);
    assert_int_equal(gw_ttlcache_was_known(c, d), 1);   /* expired, still remembered */
    gw_ttlcache_put(c, d, NULL, 1500);
    assert_int_equal(gw_ttlcache_get(c, d, 1600, &out), 0);
    assert_int_equal(gw_ttlcache_was_known(c, d), 0);
    gw_ttlcache_free(c);
}

static void an_unknown_secret_never_takes_a_known_ones_place(void **state)
{
    gw_ttlcache *c = gw_ttlcache_new(8, 100, sizeof(val));   /* one set of 8 ways */
    unsigned char d[32];
    val v = {"k", 0}, out;
    for (int k = 0; k < 8; k++) {
        digest(d, k);
        v.n = k;
        gw_ttlcache_put(c, d, &v, 0);
    }
    /* long expired: still not displaced by 1,000 made-up secrets */
    for (int k = 100; k < 1100; k++) {
        digest(d, k);
        gw_ttlcache_put(c, d, NULL, 10000);
        assert_int_equal(gw_ttlcache_get(c, d, 10000, &out), -ENOENT);
    }
    for (int k = 0; k < 8; k++) {
        digest(d, k);
        assert_int_equal(gw_ttlcache_was_known(c, d), 1);
    }
    /* a known secret takes the place of the one that expired first */
    digest(d, 50);
    v.n = 50;
    gw_ttlcache_put(c, d, &v, 10000);
    assert_int_equal(gw_ttlcache_get(c, d, 10001, &out), 1);
    assert_int_equal(out.n, 50);
    gw_ttlcache_free(c);
}

static void a_slow_answer_never_replaces_a_newer_one(void **state)
{
    gw_ttlcache *c = gw_ttlcache_new(64, 500, sizeof(val));
    unsigned char d[32];
    digest(d, 3);
    val v = {"new", 2}, old = {"old", 1}, out;
    gw_ttlcache_put(c, d, &v, 1000);
    gw_ttlcache_put(c, d, &old, 200);      /* asked before, answered after */
    assert_int_equal(gw_ttlcache_get(c, d, 1100, &out), 1);
    assert_string_equal(out.name, "new");
    gw_ttlcache_free(c);
}

static int named(const void *value, const void *arg)
{
    return strcmp(((const val *)value)->name, arg) == 0;
}

static void forgetting_by_value_and_all(void **state)
{
    gw_ttlcache *c = gw_ttlcache_new(64, 1000, sizeof(val));
    unsigned char a[32], b[32], u[32];
    digest(a, 1);
    digest(b, 2);
    digest(u, 3);
    val va = {"node-a", 1}, vb = {"node-b", 2}, out;
    gw_ttlcache_put(c, a, &va, 0);
    gw_ttlcache_put(c, b, &vb, 0);
    gw_ttlcache_put(c, u, NULL, 0);
    gw_ttlcache_forget(c, named, "node-a");
    assert_int_equal(gw_ttlcache_get(c, a, 1, &out), -ENOENT);
    assert_int_equal(gw_ttlcache_get(c, b, 1, &out), 1);
    assert_int_equal(gw_ttlcache_get(c, u, 1, &out), 0);
    gw_ttlcache_forget(c, NULL, NULL);
    assert_int_equal(gw_ttlcache_get(c, b, 1, &out), -ENOENT);
    assert_int_equal(gw_ttlcache_get(c, u, 1, &out), -ENOENT);
    gw_ttlcache_free(c);
}

static void a_ttl_of_0_answers_nothing_but_remembers_known_secrets(void **state)
{
    gw_ttlcache *c = gw_ttlcache_new(64, 0, sizeof(val));
    unsigned char d[32];
    digest(d, 9);
    val v = {"x", 1}, out;
    gw_ttlcache_put(c, d, &v, 0);
    assert_int_equal(gw_ttlcache_get(c, d, 0, &out), -ENOENT);
    assert_int_equal(gw_ttlcache_was_known(c, d), 1);
    assert_int_equal(gw_ttlcache_ttl_ms(c), 0);
    gw_ttlcache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_round_trip_and_expire),
        cmocka_unit_test(an_unknown_secret_never_takes_a_known_ones_place),
        cmocka_unit_test(a_slow_answer_never_replaces_a_newer_one),
        cmocka_unit_test(forgetting_by_value_and_all),
        cmocka_unit_test(a_ttl_of_0_answers_nothing_but_remembers_known_secrets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
