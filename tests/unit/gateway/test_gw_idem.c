/* test_gw_idem.c — the Idempotency-Key header (bare or as the draft's
 * sf-string) and the fingerprint that tells a retry from another request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "idem.h"

static void test_a_bare_or_quoted_key_is_read(void **state)
{
    char k[GW_IDEM_KEY_MAX + 1];
    assert_int_equal(gw_idem_key_parse("8e03978e-40d5-43e8-bc93-6894a57f9324", k), 1);
    assert_string_equal(k, "8e03978e-40d5-43e8-bc93-6894a57f9324");
    assert_int_equal(gw_idem_key_parse("\"abc\"", k), 1);
    assert_string_equal(k, "abc");
    assert_int_equal(gw_idem_key_parse("\"a b\\\"c\\\\\"", k), 1);
    assert_string_equal(k, "a b\"c\\");
    assert_int_equal(gw_idem_key_parse("two words", k), 1);
    assert_string_equal(k, "two words");
}

static void test_no_header_is_no_key(void **state)
{
    char k[GW_IDEM_KEY_MAX + 1];
    assert_int_equal(gw_idem_key_parse(NULL, k), 0);
}

static void test_malformed_keys_are_refused(void **state)
{
    char k[GW_IDEM_KEY_MAX + 1];
    char big[GW_IDEM_KEY_MAX + 2];
    const char *bad[] = {"", "\"\"", " ab", "\"abc", "\"abc\"x", "\"a\\nb\"", "caf\xc3\xa9",
                         "tab\there", NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(gw_idem_key_parse(bad[i], k), -1);
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(gw_idem_key_parse(big, k), -1);
    big[GW_IDEM_KEY_MAX] = '\0';
    assert_int_equal(gw_idem_key_parse(big, k), 1);
    assert_int_equal(strlen(k), GW_IDEM_KEY_MAX);
}

static gw_job_new row_of(void)
{
    static const unsigned char bytes[] = {1, 2, 3, 4};
    return (gw_job_new){.kernel = "saxpy", .params_json = "{\"a\":2}", .priority = 5,
                        .timeout_s = 60, .max_attempts = 3, .gpus = 0, .backend = "any",
                        .labels_json = "{}", .inputs_meta = "[{\"name\":\"x\"}]",
                        .inputs_data = bytes, .inputs_len = sizeof bytes};
}

static void test_the_same_job_has_the_same_fingerprint(void **state)
{
    gw_job_new a = row_of(), b = row_of();
    char ha[65], hb[65];
    memcpy(b.id, "another id, not part of it", 27);
    b.tenant_id = 99;
    assert_int_equal(gw_idem_fingerprint(&a, ha), 0);
    assert_int_equal(gw_idem_fingerprint(&b, hb), 0);
    assert_int_equal(strlen(ha), 64);
    assert_string_equal(ha, hb);
}

static void test_any_difference_changes_the_fingerprint(void **state)
{
    static const unsigned char other[] = {1, 2, 3, 5};
    gw_job_new base = row_of();
    char h0[65], h[65];
    assert_int_equal(gw_idem_fingerprint(&base, h0), 0);
    gw_job_new v[9];
    for (int i = 0; i < 9; i++)
        v[i] = base;
    v[0].kernel = "gemm";
    v[1].params_json = "{\"a\":3}";
    v[2].priority = 4;
    v[3].timeout_s = 61;
    v[4].gpus = 1;
    v[5].backend = "cpu";
    v[6].labels_json = "{\"k\":\"v\"}";
    v[7].inputs_data = other;
    v[8].inputs_len = 3;
    for (int i = 0; i < 9; i++) {
        assert_int_equal(gw_idem_fingerprint(&v[i], h), 0);
        assert_string_not_equal(h, h0);
    }
}

static void test_fields_cannot_shift_into_each_other(void **state)
{
    gw_job_new a = row_of(), b = row_of();
    char ha[65], hb[65];
    a.kernel = "ab";
    a.params_json = "c";
    b.kernel = "a";
    b.params_json = "bc";
    assert_int_equal(gw_idem_fingerprint(&a, ha), 0);
    assert_int_equal(gw_idem_fingerprint(&b, hb), 0);
    assert_string_not_equal(ha, hb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_bare_or_quoted_key_is_read),
        cmocka_unit_test(test_no_header_is_no_key),
        cmocka_unit_test(test_malformed_keys_are_refused),
        cmocka_unit_test(test_the_same_job_has_the_same_fingerprint),
        cmocka_unit_test(test_any_difference_changes_the_fingerprint),
        cmocka_unit_test(test_fields_cannot_shift_into_each_other),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
