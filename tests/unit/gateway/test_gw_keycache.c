/* test_gw_keycache.c — the API key cache: answers expire after the TTL
 * (counted from when the lookup was asked), unknown keys are remembered but
 * bounded and never push out valid ones, clear forgets everything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>

#include "keycache.h"

static gw_key_auth auth_of(int64_t tenant)
{
    return (gw_key_auth){.tenant_id = tenant, .key_id = tenant * 10, .admin = 0, .rate_rps = -1,
                         .rate_burst = 7, .max_queued = 3};
}

/* A cache of 64 entries and ttl_ms that answered "kl_a" (tenant 1's key)
 * at 0; the caller frees it. */
static gw_keycache *cache_knowing_kl_a(int64_t ttl_ms)
{
    gw_keycache *c = gw_keycache_new(64, ttl_ms);
    gw_key_auth ka = auth_of(1);
    gw_keycache_put(c, "kl_a", &ka, 0);
    return c;
}

static void test_valid_key_is_kept_until_the_ttl_from_when_it_was_asked(void **state)
{
    gw_keycache *c = gw_keycache_new(64, 500);
    gw_key_auth ka = auth_of(42), out;
    assert_int_equal(gw_keycache_get(c, "kl_a", 1000, &out), -ENOENT);
    gw_keycache_put(c, "kl_a", &ka, 1000);
    assert_int_equal(gw_keycache_get(c, "kl_a", 1000, &out), 1);
    assert_int_equal(out.tenant_id, 42);
    assert_int_equal(out.key_id, 420);
    assert_int_equal(out.rate_burst, 7);
    assert_int_equal(out.max_queued, 3);
    assert_int_equal(gw_keycache_get(c, "kl_a", 1499, &out), 1);
    assert_int_equal(gw_keycache_get(c, "kl_a", 1500, &out), -ENOENT);   /* expired */
    assert_int_equal(gw_keycache_get(c, "kl_b", 1000, &out), -ENOENT);   /* another key */
    gw_keycache_free(c);
}

static void test_unknown_key_is_remembered_as_unknown(void **state)
{
    gw_keycache *c = gw_keycache_new(64, 500);
    gw_key_auth out;
    gw_keycache_put(c, "kl_wrong", NULL, 0);
    assert_int_equal(gw_keycache_get(c, "kl_wrong", 100, &out), 0);
    assert_int_equal(gw_keycache_get(c, "kl_wrong", 500, &out), -ENOENT);
    gw_keycache_free(c);
}

static void test_revocation_is_seen_once_the_old_answer_expires(void **state)
{
    gw_keycache *c = cache_knowing_kl_a(500);
    gw_key_auth ka = auth_of(1), out;
    /* the key is revoked at 100; the next lookup after expiry says so */
    assert_int_equal(gw_keycache_get(c, "kl_a", 499, &out), 1);
    assert_int_equal(gw_keycache_get(c, "kl_a", 500, &out), -ENOENT);
    gw_keycache_put(c, "kl_a", NULL, 500);
    assert_int_equal(gw_keycache_get(c, "kl_a", 600, &out), 0);
    /* a slow lookup asked before the revocation does not bring the key back */
    gw_keycache_put(c, "kl_a", &ka, 90);
    assert_int_equal(gw_keycache_get(c, "kl_a", 600, &out), 0);
    gw_keycache_free(c);
}

static void test_clear_forgets_every_answer(void **state)
{
    gw_keycache *c = cache_knowing_kl_a(1000);
    gw_key_auth out;
    gw_keycache_put(c, "kl_b", NULL, 0);
    gw_keycache_clear(c);
    assert_int_equal(gw_keycache_get(c, "kl_a", 1, &out), -ENOENT);
    assert_int_equal(gw_keycache_get(c, "kl_b", 1, &out), -ENOENT);
    gw_keycache_free(c);
}

static void test_ttl_zero_keeps_nothing(void **state)
{
    gw_keycache *c = cache_knowing_kl_a(0);
    gw_key_auth out;
    assert_int_equal(gw_keycache_get(c, "kl_a", 0, &out), -ENOENT);
    gw_keycache_free(c);
}

/* How many of n keys "<prefix><i>" the cache answers for at now. */
static int answered(gw_keycache *c, const char *prefix, int n, int64_t now)
{
    int hits = 0;
    for (int i = 0; i < n; i++) {
        char key[48];
        gw_key_auth out;
        snprintf(key, sizeof key, "%s%d", prefix, i);
        hits += gw_keycache_get(c, key, now, &out) >= 0;
    }
    return hits;
}

static void test_the_table_never_holds_more_than_its_capacity(void **state)
{
    gw_keycache *c = gw_keycache_new(64, 1000);
    for (int i = 0; i < 10000; i++) {
        char key[48];
        snprintf(key, sizeof key, "kl_made_up_%d", i);
        gw_keycache_put(c, key, NULL, 0);
    }
    assert_true(answered(c, "kl_made_up_", 10000, 1) <= 64);
    gw_keycache_free(c);
}

static void test_unknown_keys_never_push_out_valid_ones(void **state)
{
    gw_keycache *c = gw_keycache_new(64, 1000);
    /* 16 valid keys in 8 sets of 8: all of them, unless the hash put more
     * than 8 in one set; count what was kept before the flood */
    for (int i = 0; i < 16; i++) {
        char key[48];
        gw_key_auth ka = auth_of(i + 1);
        snprintf(key, sizeof key, "kl_valid_%d", i);
        gw_keycache_put(c, key, &ka, 0);
    }
    int kept = answered(c, "kl_valid_", 16, 1);
    assert_true(kept >= 8);
    for (int i = 0; i < 100000; i++) {
        char key[48];
        snprintf(key, sizeof key, "kl_attack_%d", i);
        gw_keycache_put(c, key, NULL, 1 + i / 1000);   /* fresher and fresher */
    }
    assert_int_equal(answered(c, "kl_valid_", 16, 200), kept);
    /* but a valid key may take the place of an unknown one */
    gw_key_auth ka = auth_of(99), out;
    gw_keycache_put(c, "kl_new_valid", &ka, 150);
    assert_int_equal(gw_keycache_get(c, "kl_new_valid", 200, &out), 1);
    gw_keycache_free(c);
}

/* An expired valid answer stays as the memory that the key was valid
 * (the failure limiter never throttles it), unknown keys do not push it
 * out, and a revocation (PostgreSQL's "unknown") ends it. */
static void test_a_valid_key_is_remembered_after_its_answer_expires(void **state)
{
    gw_keycache *c = gw_keycache_new(64, 500);
    gw_key_auth ka = auth_of(5), out;
    assert_false(gw_keycache_was_valid(c, "kl_a"));
    gw_keycache_put(c, "kl_a", &ka, 0);
    assert_int_equal(gw_keycache_get(c, "kl_a", 600, &out), -ENOENT);
    assert_true(gw_keycache_was_valid(c, "kl_a"));
    for (int i = 0; i < 100000; i++) {
        char key[48];
        snprintf(key, sizeof key, "kl_attack_%d", i);
        gw_keycache_put(c, key, NULL, 600 + i);
    }
    assert_true(gw_keycache_was_valid(c, "kl_a"));
    assert_false(gw_keycache_was_valid(c, "kl_attack_7"));
    gw_keycache_put(c, "kl_a", NULL, 200000);
    assert_false(gw_keycache_was_valid(c, "kl_a"));
    gw_keycache_free(c);
    /* with a TTL of 0 nothing is answered, but the memory is kept */
    c = gw_keycache_new(64, 0);
    gw_keycache_put(c, "kl_b", &ka, 0);
    assert_int_equal(gw_keycache_get(c, "kl_b", 0, &out), -ENOENT);
    assert_true(gw_keycache_was_valid(c, "kl_b"));
    gw_keycache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_key_is_kept_until_the_ttl_from_when_it_was_asked),
        cmocka_unit_test(test_unknown_key_is_remembered_as_unknown),
        cmocka_unit_test(test_revocation_is_seen_once_the_old_answer_expires),
        cmocka_unit_test(test_clear_forgets_every_answer),
        cmocka_unit_test(test_ttl_zero_keeps_nothing),
        cmocka_unit_test(test_the_table_never_holds_more_than_its_capacity),
        cmocka_unit_test(test_unknown_keys_never_push_out_valid_ones),
        cmocka_unit_test(test_a_valid_key_is_remembered_after_its_answer_expires),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
