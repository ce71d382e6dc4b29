/* test_gw_webhooks.c — the delivery worker's pure parts: the signature
 * (Standard Webhooks' own published example) and the back-off schedule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "webhooks.h"

static void test_signature_matches_the_standard_webhooks_example(void **state)
{
    (void)state;
    const char *body = "{\"test\": 2432232314}";
    char sig[128];
    assert_int_equal(gw_webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                     "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body,
                                     strlen(body), sig, sizeof sig), 0);
    assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

static void test_signature_covers_id_timestamp_and_body(void **state)
{
    (void)state;
    const char *sec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    char a[128], b[128], c[128], d[128];
    assert_int_equal(gw_webhook_sign(sec, "msg_1", 100, "{}", 2, a, sizeof a), 0);
    assert_int_equal(gw_webhook_sign(sec, "msg_2", 100, "{}", 2, b, sizeof b), 0);
    assert_int_equal(gw_webhook_sign(sec, "msg_1", 101, "{}", 2, c, sizeof c), 0);
    assert_int_equal(gw_webhook_sign(sec, "msg_1", 100, "[]", 2, d, sizeof d), 0);
    assert_string_not_equal(a, b);
    assert_string_not_equal(a, c);
    assert_string_not_equal(a, d);
}

static void test_secret_without_whsec_prefix_or_base64_is_refused(void **state)
{
    (void)state;
    char sig[128];
    assert_int_equal(gw_webhook_sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, "", 0, sig,
                                     sizeof sig), -1);
    assert_int_equal(gw_webhook_sign("whsec_not base64!", "m", 1, "", 0, sig, sizeof sig), -1);
}

static void test_backoff_doubles_with_jitter_and_stops_at_an_hour(void **state)
{
    (void)state;
    /* rnd 0 is the low end (half the delay), UINT32_MAX just under the high */
    assert_int_equal(gw_webhook_backoff_ms(5000, 1, 0), 2500);
    assert_true(gw_webhook_backoff_ms(5000, 1, UINT32_MAX) < 5000);
    assert_true(gw_webhook_backoff_ms(5000, 1, UINT32_MAX) >= 4999);
    assert_int_equal(gw_webhook_backoff_ms(5000, 2, 0), 5000);
    assert_int_equal(gw_webhook_backoff_ms(5000, 4, 0), 20000);
    assert_int_equal(gw_webhook_backoff_ms(5000, 30, 0), 1800 * 1000);
    assert_int_equal(gw_webhook_backoff_ms(5000, 1000, 0), 1800 * 1000);
    assert_true(gw_webhook_backoff_ms(5000, 1000, UINT32_MAX) < 3600 * 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature_matches_the_standard_webhooks_example),
        cmocka_unit_test(test_signature_covers_id_timestamp_and_body),
        cmocka_unit_test(test_secret_without_whsec_prefix_or_base64_is_refused),
        cmocka_unit_test(test_backoff_doubles_with_jitter_and_stops_at_an_hour),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
