/* test_svc_util.c — base64 against RFC 4648's vectors and its strictness,
 * ids, times, constant-time comparison, log levels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_log.h"
#include "svc_util.h"

static const char *const rfc4648[][2] = {
    {"", ""},          {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
};

static void test_b64_matches_rfc4648_vectors_both_ways(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof rfc4648 / sizeof *rfc4648; i++) {
        const char *plain = rfc4648[i][0], *enc = rfc4648[i][1];
        char *e = svc_b64_encode(plain, strlen(plain));
        assert_string_equal(e, enc);
        free(e);
        unsigned char *d = NULL;
        size_t dl = 99;
        assert_int_equal(svc_b64_decode(enc, strlen(enc), &d, &dl), 0);
        assert_int_equal(dl, strlen(plain));
        assert_memory_equal(d, plain, dl);
        free(d);
    }
}

static void test_b64_round_trips_every_byte_value(void **state)
{
    (void)state;
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    for (size_t len = 0; len <= 256; len += 1) {
        char *e = svc_b64_encode(all, len);
        assert_int_equal(strlen(e), (len + 2) / 3 * 4);
        unsigned char *d;
        size_t dl;
        assert_int_equal(svc_b64_decode(e, strlen(e), &d, &dl), 0);
        assert_int_equal(dl, len);
        assert_memory_equal(d, all, len);
        free(d);
        free(e);
    }
}

static void test_b64_decoder_is_strict(void **state)
{
    (void)state;
    const char *bad[] = {
        "Zg",       /* unpadded */
        "Zg=",      /* length not a multiple of 4 */
        "Zm9v\n",   /* trailing newline */
        "Zm 9v",    /* inner space */
        "Z===",     /* three pad characters */
        "=Zm9",     /* pad first */
        "Zg==Zm9v", /* padding before the end */
        "Zm9v====", /* a group of padding only */
        "Zh==",     /* non-zero bits under the padding */
        "Zm9=",     /* same, one pad character */
        "Zm9-",     /* base64url alphabet */
        "Zm9_",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unsigned char *d = (unsigned char *)"untouched";
        size_t dl = 7;
        if (svc_b64_decode(bad[i], strlen(bad[i]), &d, &dl) != -1)
            fail_msg("accepted '%s'", bad[i]);
        assert_string_equal((char *)d, "untouched");
    }
    /* slen counts: an embedded NUL is a bad character. */
    unsigned char *d;
    size_t dl;
    assert_int_equal(svc_b64_decode("Zm9v\0\0\0\0", 8, &d, &dl), -1);
}

/* The fast path (every quad but the last) refuses what the byte-by-byte
 * decoder refused, wherever the bad character sits; the last quad keeps the
 * padding rules; decode_to writes only into a buffer large enough. */
static void test_b64_long_input_is_as_strict_as_short(void **state)
{
    (void)state;
    unsigned char raw[3000];
    for (size_t i = 0; i < sizeof raw; i++)
        raw[i] = (unsigned char)(i * 151u + 7u);
    char *e = svc_b64_encode(raw, sizeof raw);
    size_t el = strlen(e);
    unsigned char *d, buf[3000];
    size_t dl;
    assert_int_equal(svc_b64_decode_to(e, el, buf, sizeof buf, &dl), 0);
    assert_int_equal(dl, sizeof raw);
    assert_memory_equal(buf, raw, sizeof raw);
    assert_int_equal(svc_b64_decode_to(e, el, buf, sizeof buf - 1, &dl), -1); /* too small */
    static const char bads[] = {'=', '-', '_', ' ', '\n', '\0', '\x80', '\xff', '.'};
    static const size_t where[] = {0, 1, 2, 3, 4, 1001, 2002, 3998, 3999};
    for (size_t b = 0; b < sizeof bads; b++) {
        for (size_t w = 0; w < sizeof where / sizeof *where; w++) {
            char saved = e[where[w]];
            e[where[w]] = bads[b];
            if (svc_b64_decode(e, el, &d, &dl) != -1)
                fail_msg("accepted 0x%02x at %zu", (unsigned char)bads[b], where[w]);
            assert_int_equal(svc_b64_decode_to(e, el, buf, sizeof buf, &dl), -1);
            e[where[w]] = saved;
        }
    }
    free(e);
    /* Padding after a long valid run: one and two '=', non-zero bits under
     * them, '=' in the third place only. */
    char s[4004];
    memset(s, 'A', 4000);
    memcpy(s + 4000, "Zg==", 4);
    assert_int_equal(svc_b64_decode(s, 4004, &d, &dl), 0);
    assert_int_equal(dl, 3001);
    assert_int_equal(d[3000], 'f');
    free(d);
    memcpy(s + 4000, "Zm8=", 4);
    assert_int_equal(svc_b64_decode(s, 4004, &d, &dl), 0);
    assert_int_equal(dl, 3002);
    free(d);
    static const char *const last[] = {"Zh==", "Zm9=", "Z===", "====", "Z=g=", "=Zm9"};
    for (size_t i = 0; i < sizeof last / sizeof *last; i++) {
        memcpy(s + 4000, last[i], 4);
        if (svc_b64_decode(s, 4004, &d, &dl) != -1)
            fail_msg("accepted a long run ending '%s'", last[i]);
    }
    assert_int_equal(svc_b64_decoded_len(s, 4003), 3000);
    memcpy(s + 4000, "Zg==", 4);
    assert_int_equal(svc_b64_decoded_len(s, 4004), 3001);
}

static void test_uuid_v4_has_canonical_form_version_and_variant(void **state)
{
    (void)state;
    char a[37], b[37];
    assert_int_equal(svc_uuid_v4(a), 0);
    assert_int_equal(svc_uuid_v4(b), 0);
    assert_int_equal(strlen(a), 36);
    assert_true(svc_uuid_valid(a));
    assert_string_not_equal(a, b);
    assert_int_equal(a[14], '4');
    assert_non_null(strchr("89ab", a[19]));
    for (int i = 0; i < 36; i++)
        assert_non_null(strchr(i == 8 || i == 13 || i == 18 || i == 23 ? "-" : "0123456789abcdef", a[i]));
}

static void test_uuid_valid_rejects_other_forms(void **state)
{
    (void)state;
    assert_true(svc_uuid_valid("123e4567-e89b-12d3-a456-426614174000"));
    assert_true(svc_uuid_valid("123E4567-E89B-12D3-A456-426614174000"));
    assert_false(svc_uuid_valid("123e4567e89b12d3a456426614174000"));
    assert_false(svc_uuid_valid("123e4567-e89b-12d3-a456-42661417400"));
    assert_false(svc_uuid_valid("123e4567-e89b-12d3-a456-4266141740000"));
    assert_false(svc_uuid_valid("{123e4567-e89b-12d3-a456-426614174000}"));
    assert_false(svc_uuid_valid("123e4567-e89b-12d3-a456-42661417400g"));
    assert_false(svc_uuid_valid(""));
    assert_false(svc_uuid_valid(NULL));
}

static void test_time_format_is_rfc3339_utc_with_milliseconds(void **state)
{
    (void)state;
    char buf[32];
    svc_time_format(0, buf, sizeof buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    svc_time_format(1796212800123LL, buf, sizeof buf);
    assert_string_equal(buf, "2026-12-02T12:00:00.123Z");
    svc_time_format(-1, buf, sizeof buf);
    assert_string_equal(buf, "1969-12-31T23:59:59.999Z");
    svc_time_format(svc_now_wall_ms(), buf, sizeof buf);
    assert_int_equal(strlen(buf), 24);
    assert_int_equal(buf[10], 'T');
    assert_int_equal(buf[23], 'Z');
}

static void test_clocks_advance_and_sleep_waits(void **state)
{
    (void)state;
    int64_t m0 = svc_now_mono_ms();
    svc_sleep_ms(30);
    int64_t m1 = svc_now_mono_ms();
    assert_true(m1 - m0 >= 30);
    assert_true(m1 - m0 < 2000);
    assert_true(svc_now_wall_ms() > 1700000000000LL);
}

static void test_random_hex_has_requested_length(void **state)
{
    (void)state;
    char a[65], b[65];
    assert_int_equal(svc_random_hex(a, 32), 0);
    assert_int_equal(svc_random_hex(b, 32), 0);
    assert_int_equal(strlen(a), 64);
    assert_int_equal(strspn(a, "0123456789abcdef"), 64);
    assert_string_not_equal(a, b);
    char big[2 * 200 + 1];
    assert_int_equal(svc_random_hex(big, 200), 0);
    assert_int_equal(strlen(big), 400);
}

static void test_utf8_valid_takes_rfc3629_and_refuses_the_rest(void **state)
{
    (void)state;
    assert_true(svc_utf8_valid("", 0));
    assert_true(svc_utf8_valid("h\xc3\xa9llo", 6));
    assert_true(svc_utf8_valid("\xf0\x9f\x98\x80", 4)); /* U+1F600 */
    assert_true(svc_utf8_valid("\xf4\x8f\xbf\xbf", 4)); /* U+10FFFF, the last */
    assert_true(svc_utf8_valid("a\0b", 3));                /* NUL is a character here */
    assert_false(svc_utf8_valid("\xc0\xaf", 2));          /* overlong '/' */
    assert_false(svc_utf8_valid("\xe0\x80\xaf", 3));     /* overlong, three bytes */
    assert_false(svc_utf8_valid("\xed\xa0\x80", 3));     /* a surrogate, U+D800 */
    assert_false(svc_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    assert_false(svc_utf8_valid("\xc3", 1));               /* cut short */
    assert_false(svc_utf8_valid("\xc3\xa9", 1));          /* cut short by n, not by NUL */
    assert_false(svc_utf8_valid("\x80", 1));               /* a lone continuation byte */
    assert_false(svc_utf8_valid("\xc3(", 2));              /* a lead without its continuation */
}

static void test_utf8_chars_counts_code_points_not_bytes(void **state)
{
    (void)state;
    assert_int_equal(svc_utf8_chars(""), 0);
    assert_int_equal(svc_utf8_chars("abc"), 3);
    assert_int_equal(svc_utf8_chars("h\xc3\xa9llo"), 5);            /* é: 2 bytes */
    assert_int_equal(svc_utf8_chars("\xe6\x97\xa5\xe6\x9c\xac"), 2); /* 日本 */
    assert_int_equal(svc_utf8_chars("\xf0\x9f\x98\x80!"), 2);        /* an emoji, 4 bytes */
}

static void test_fnv1a_matches_the_reference_vectors(void **state)
{
    (void)state;
    /* From the FNV reference test suite (fnv32a of "", "a", "foobar"). */
    assert_int_equal(svc_fnv1a(""), 0x811c9dc5u);
    assert_int_equal(svc_fnv1a("a"), 0xe40c292cu);
    assert_int_equal(svc_fnv1a("foobar"), 0xbf9cf968u);
}

static void test_secure_equal(void **state)
{
    (void)state;
    assert_true(svc_secure_equal("token-abc", "token-abc"));
    assert_true(svc_secure_equal("", ""));
    assert_false(svc_secure_equal("token-abc", "token-abd"));
    assert_false(svc_secure_equal("token-abc", "token-ab"));
    assert_false(svc_secure_equal("token-ab", "token-abc"));
    assert_false(svc_secure_equal("", "x"));
    assert_false(svc_secure_equal(NULL, "x"));
    assert_false(svc_secure_equal(NULL, NULL));
}

static void test_log_level_parse_and_filter(void **state)
{
    (void)state;
    assert_int_equal(svc_log_level_parse("debug"), SVC_LOG_DEBUG);
    assert_int_equal(svc_log_level_parse("INFO"), SVC_LOG_INFO);
    assert_int_equal(svc_log_level_parse("warn"), SVC_LOG_WARN);
    assert_int_equal(svc_log_level_parse("error"), SVC_LOG_ERROR);
    assert_int_equal(svc_log_level_parse("verbose"), -1);
    assert_int_equal(svc_log_level_parse(NULL), -1);
    svc_log_init("test", SVC_LOG_WARN);
    assert_false(svc_log_enabled(SVC_LOG_INFO));
    assert_true(svc_log_enabled(SVC_LOG_ERROR));
    svc_info("not shown");
}

/* A download's name from a URL path cannot break out of its header value:
 * quotes, semicolons, CR/LF and non-ASCII are replaced in the quoted form
 * and percent-encoded in filename* (RFC 6266, RFC 8187). */
static void test_content_disposition_quotes_and_encodes_the_name(void **state)
{
    (void)state;
    char out[256];
    assert_string_equal(svc_content_disposition("c.npy", out, sizeof out),
                        "attachment; filename=\"c.npy\"; filename*=UTF-8''c.npy");
    assert_string_equal(svc_content_disposition("a\"; x=\r\n\xc3\xa9.bin", out, sizeof out),
                        "attachment; filename=\"a___x_____.bin\"; "
                        "filename*=UTF-8''a%22%3B%20x%3D%0D%0A%C3%A9.bin");
    assert_null(strpbrk(out + 10, "\r\n"));
    /* too long: cut at a whole character, the value still closed */
    char name[300];
    memset(name, 'x', sizeof name);
    memcpy(name + 46, "\xc3\xa9", 2);
    name[299] = '\0';
    svc_content_disposition(name, out, 256);
    assert_true(strlen(out) < 256);
    assert_non_null(strstr(out, "\"; filename*=UTF-8''"));
    assert_null(strstr(out, "%C3\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_matches_rfc4648_vectors_both_ways),
        cmocka_unit_test(test_b64_round_trips_every_byte_value),
        cmocka_unit_test(test_b64_decoder_is_strict),
        cmocka_unit_test(test_b64_long_input_is_as_strict_as_short),
        cmocka_unit_test(test_uuid_v4_has_canonical_form_version_and_variant),
        cmocka_unit_test(test_uuid_valid_rejects_other_forms),
        cmocka_unit_test(test_time_format_is_rfc3339_utc_with_milliseconds),
        cmocka_unit_test(test_clocks_advance_and_sleep_waits),
        cmocka_unit_test(test_random_hex_has_requested_length),
        cmocka_unit_test(test_secure_equal),
        cmocka_unit_test(test_utf8_chars_counts_code_points_not_bytes),
        cmocka_unit_test(test_utf8_valid_takes_rfc3629_and_refuses_the_rest),
        cmocka_unit_test(test_fnv1a_matches_the_reference_vectors),
        cmocka_unit_test(test_content_disposition_quotes_and_encodes_the_name),
        cmocka_unit_test(test_log_level_parse_and_filter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
