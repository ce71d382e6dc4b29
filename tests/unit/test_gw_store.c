/* test_gw_store.c — which PostgreSQL errors the gateway tries again (an
 * outage) and which it gives up on at once (the statement itself refused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "store.h"

static void test_outages_are_transient(void **state)
{
    (void)state;
    assert_true(gw_store_sqlstate_transient(""));       /* no answer at all */
    assert_true(gw_store_sqlstate_transient(NULL));
    assert_true(gw_store_sqlstate_transient("08006"));  /* connection failure */
    assert_true(gw_store_sqlstate_transient("57P01"));  /* admin shutdown */
    assert_true(gw_store_sqlstate_transient("57P03"));  /* cannot connect now */
    assert_true(gw_store_sqlstate_transient("40001"));  /* serialization failure */
    assert_true(gw_store_sqlstate_transient("40P01"));  /* deadlock */
    assert_true(gw_store_sqlstate_transient("53300"));  /* too many connections */
    assert_true(gw_store_sqlstate_transient("55P03"));  /* lock not available */
    assert_true(gw_store_sqlstate_transient("58030"));  /* I/O error */
    assert_true(gw_store_sqlstate_transient("25006"));  /* read-only transaction */
    assert_true(gw_store_sqlstate_transient("26000"));  /* prepared statement missing */
}

static void test_refused_statements_are_final(void **state)
{
    (void)state;
    assert_false(gw_store_sqlstate_transient("54000"));  /* program limit (1 GB value) */
    assert_false(gw_store_sqlstate_transient("22P02"));  /* invalid text representation */
    assert_false(gw_store_sqlstate_transient("22P05"));  /* untranslatable character */
    assert_false(gw_store_sqlstate_transient("23505"));  /* unique violation */
    assert_false(gw_store_sqlstate_transient("23514"));  /* check violation */
    assert_false(gw_store_sqlstate_transient("42P01"));  /* undefined table */
    assert_false(gw_store_sqlstate_transient("XX000"));  /* internal error */
    assert_false(gw_store_sqlstate_transient("55000"));  /* object not in prerequisite state */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outages_are_transient),
        cmocka_unit_test(test_refused_statements_are_final),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
