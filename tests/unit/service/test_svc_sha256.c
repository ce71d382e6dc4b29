/* test_svc_sha256.c — HMAC-SHA256 against RFC 4231's test cases (case 5,
 * a truncated output, has nothing to check that the others do not), and
 * the raw digest against FIPS 180-2's "abc". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "svc_sha256.h"

static void hex_of(const unsigned char md[32], char hex[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void check_hmac(const unsigned char *key, size_t klen, const char *msg, size_t mlen,
                       const char *want)
{
    unsigned char md[32];
    char hex[65];
    assert_int_equal(svc_hmac_sha256(key, klen, msg, mlen, md), 0);
    hex_of(md, hex);
    assert_string_equal(hex, want);
}

/* check_hmac of 50 bytes of value d (the data of RFC 4231's cases 3 and 4). */
static void check_hmac_of_50(const unsigned char *key, size_t klen, unsigned char d, const char *want)
{
    char data[50];
    memset(data, d, sizeof data);
    check_hmac(key, klen, data, sizeof data, want);
}

static void test_hmac_rfc4231_case1_short_key(void **state)
{
    (void)state;
    unsigned char key[20];
    memset(key, 0x0b, sizeof key);
    check_hmac(key, sizeof key, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

static void test_hmac_rfc4231_case2_key_shorter_than_digest(void **state)
{
    (void)state;
    const char *msg = "what do ya want for nothing?";
    check_hmac((const unsigned char *)"Jefe", 4, msg, strlen(msg),
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

static void test_hmac_rfc4231_case3_combined_key_and_data(void **state)
{
    (void)state;
    unsigned char key[20];
    memset(key, 0xaa, sizeof key);
    check_hmac_of_50(key, sizeof key, 0xdd, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}

static void test_hmac_rfc4231_case4_counting_key(void **state)
{
    (void)state;
    unsigned char key[25];
    for (int i = 0; i < 25; i++)
        key[i] = (unsigned char)(i + 1);
    check_hmac_of_50(key, sizeof key, 0xcd, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
}

static void test_hmac_rfc4231_case6_key_longer_than_block_is_hashed(void **state)
{
    (void)state;
    unsigned char key[131];
    memset(key, 0xaa, sizeof key);
    const char *msg = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(key, sizeof key, msg, strlen(msg),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void test_hmac_rfc4231_case7_long_key_and_long_data(void **state)
{
    (void)state;
    unsigned char key[131];
    memset(key, 0xaa, sizeof key);
    const char *msg = "This is a test using a larger than block-size key and a larger than "
                      "block-size data. The key needs to be hashed before being used by the "
                      "HMAC algorithm.";
    check_hmac(key, sizeof key, msg, strlen(msg),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static void test_raw_final_equals_the_hex_digest(void **state)
{
    (void)state;
    unsigned char md[32];
    char hex[65];
    svc_sha256 *h = svc_sha256_new();
    assert_non_null(h);
    assert_int_equal(svc_sha256_update(h, "abc", 3), 0);
    assert_int_equal(svc_sha256_final(h, md), 0);
    hex_of(md, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hmac_rfc4231_case1_short_key),
        cmocka_unit_test(test_hmac_rfc4231_case2_key_shorter_than_digest),
        cmocka_unit_test(test_hmac_rfc4231_case3_combined_key_and_data),
        cmocka_unit_test(test_hmac_rfc4231_case4_counting_key),
        cmocka_unit_test(test_hmac_rfc4231_case6_key_longer_than_block_is_hashed),
        cmocka_unit_test(test_hmac_rfc4231_case7_long_key_and_long_data),
        cmocka_unit_test(test_raw_final_equals_the_hex_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
