/* test_svc_dtoa.c — shortest round-trip formatting of reals (svc_dtoa.h):
 * every text reads back (strtof / strtod) as the same bits, is a JSON number
 * that reads as a real, and has no more significant digits than the fewest
 * with which printf's %.{p}g reads back. KOWLOON_DTOA_EXHAUSTIVE=1 checks
 * all 2^32 float32 bit patterns (minutes; `test_svc_dtoa` prints the time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_dtoa.h"

/* Significant digits of a decimal text ("0.00120" has 2, "100.0" has 1). */
static int sig_digits(const char *s)
{
    char d[40];
    size_t n = 0;
    for (; *s && *s != 'e' && *s != 'E'; s++)
        if (*s >= '0' && *s <= '9' && !(n == 0 && *s == '0'))
            d[n++] = *s;
    while (n > 0 && d[n - 1] == '0')
        n--;
    return n ? (int)n : 1;
}

/* The fewest %.{p}g digits that read back as v. */
static int fewest_digits_f32(float v)
{
    char buf[64];
    for (int p = 1; p < 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v)
            return p;
    }
    return 9;
}

static int fewest_digits_f64(double v)
{
    char buf[64];
    for (int p = 1; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return p;
    }
    return 17;
}

/* A JSON number that reads as a real: optional '-', digits, then a '.' or
 * an exponent. */
static void assert_json_real(const char *s)
{
    const char *p = s + (*s == '-');
    assert_true(*p >= '0' && *p <= '9');
    assert_false(p[0] == '0' && p[1] >= '0' && p[1] <= '9'); /* no leading zero */
    assert_true(strchr(s, '.') != NULL || strchr(s, 'e') != NULL);
    assert_null(strchr(s, '+'));
}

static void check_f32(float v)
{
    char buf[SVC_DTOA_MAX];
    size_t n = svc_dtoa_f32(v, buf);
    assert_int_equal(n, strlen(buf));
    float back = strtof(buf, NULL);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if (memcmp(&back, &v, 4) != 0)
        fail_msg("%.9g (bits %08x) written as %s reads back as %.9g", (double)v, bits, buf,
                 (double)back);
    assert_json_real(buf);
    if (sig_digits(buf) > fewest_digits_f32(v))
        fail_msg("%.9g written as %s: %d digits, %%.%dg suffices", (double)v, buf, sig_digits(buf),
                 fewest_digits_f32(v));
}

static void check_f64(double v)
{
    char buf[SVC_DTOA_MAX];
    size_t n = svc_dtoa_f64(v, buf);
    assert_int_equal(n, strlen(buf));
    double back = strtod(buf, NULL);
    if (memcmp(&back, &v, 8) != 0)
        fail_msg("%.17g written as %s reads back as %.17g", v, buf, back);
    assert_json_real(buf);
    if (sig_digits(buf) > fewest_digits_f64(v))
        fail_msg("%.17g written as %s: %d digits, %%.%dg suffices", v, buf, sig_digits(buf),
                 fewest_digits_f64(v));
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void test_known_texts(void **state)
{
    char buf[SVC_DTOA_MAX];
    static const struct { float v; const char *text; } f32[] = {
        {0.0f, "0.0"}, {-0.0f, "-0.0"}, {1.0f, "1.0"}, {0.1f, "0.1"}, {-2.5f, "-2.5"},
        {1e-45f, "1e-45"}, {FLT_MAX, "3.4028235e38"}, {FLT_MIN, "1.1754944e-38"},
        {16777216.0f, "16777216.0"}, {1e10f, "10000000000.0"}, {0.3f, "0.3"},
    };
    for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++) {
        svc_dtoa_f32(f32[i].v, buf);
        assert_string_equal(buf, f32[i].text);
    }
    svc_dtoa_f64(0.1, buf);
    assert_string_equal(buf, "0.1");
    svc_dtoa_f64(5e-324, buf);
    assert_string_equal(buf, "5e-324");
    svc_dtoa_f64(DBL_MAX, buf);
    assert_string_equal(buf, "1.7976931348623157e308");
    /* float32 0.1 widened is not double 0.1: its shortest double text is long. */
    svc_dtoa_f64((double)0.1f, buf);
    assert_string_equal(buf, "0.10000000149011612");
}

static void test_f32_edges_round_trip(void **state)
{
    const float edges[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 2e-45f, FLT_MIN, -FLT_MIN,
                           nextafterf(FLT_MIN, 0), FLT_MAX, -FLT_MAX, nextafterf(FLT_MAX, 0),
                           FLT_EPSILON, 1.0f + FLT_EPSILON, 1.0f - FLT_EPSILON / 2, 16777217.0f,
                           8388608.5f, 3.14159265f, 2.7182818f, 123456789.0f, 0.333333343f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_f32(edges[i]);
    for (int e = -45; e <= 38; e++) {
        char t[16];
        snprintf(t, sizeof t, "1e%d", e);
        float p = strtof(t, NULL);
        check_f32(p);
        check_f32(nextafterf(p, INFINITY));
        check_f32(nextafterf(p, 0));
    }
    /* Every denormal exponent step and the first and last 100 000 patterns. */
    for (uint32_t b = 0; b < 100000; b++) {
        float v, w;
        uint32_t hi = 0x7f7fffffu - b;
        memcpy(&v, &b, 4);
        memcpy(&w, &hi, 4);
        check_f32(v);
        check_f32(w);
    }
}

static void test_f32_random_bits_round_trip(void **state)
{
    for (int i = 0; i < 300000; i++) {
        uint32_t b = (uint32_t)next_u64();
        float v;
        memcpy(&v, &b, 4);
        if (isfinite(v))
            check_f32(v);
    }
}

static void test_f64_random_and_edges_round_trip(void **state)
{
    const double edges[] = {0.0, -0.0, 5e-324, -5e-324, DBL_MIN, DBL_MAX, -DBL_MAX, DBL_EPSILON,
                            0.1, 0.2, 0.30000000000000004, 1e21, 1e22, 1e-7, 123456789012345678.0,
                            9007199254740993.0, (double)FLT_MAX, (double)1e-45f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_f64(edges[i]);
    for (int i = 0; i < 100000; i++) {
        uint64_t b = next_u64();
        double v;
        memcpy(&v, &b, 8);
        if (isfinite(v))
            check_f64(v);
    }
}

/* ---- exhaustive float32 (opt-in) ---- */

typedef struct span {
    uint64_t lo, hi;
    uint64_t bad, checked;
    uint32_t first_bad;
} span;

static void *span_run(void *p)
{
    span *s = p;
    char buf[SVC_DTOA_MAX];
    for (uint64_t b = s->lo; b < s->hi; b++) {
        uint32_t bits = (uint32_t)b;
        float v, back;
        memcpy(&v, &bits, 4);
        if (!isfinite(v))
            continue;
        svc_dtoa_f32(v, buf);
        back = strtof(buf, NULL);
        s->checked++;
        if (memcmp(&back, &v, 4) != 0 && s->bad++ == 0)
            s->first_bad = bits;
    }
    return NULL;
}

static void test_f32_all_bit_patterns_round_trip(void **state)
{
    const char *on = getenv("KOWLOON_DTOA_EXHAUSTIVE");
    if (!on || strcmp(on, "1") != 0)
        skip();
    enum { T = 16 };
    int threads = getenv("KOWLOON_DTOA_THREADS") ? atoi(getenv("KOWLOON_DTOA_THREADS")) : 2;
    threads = threads < 1 ? 1 : threads > T ? T : threads;
    span spans[T];
    pthread_t th[T];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t total = (uint64_t)1 << 32, per = total / (uint64_t)threads;
    for (int i = 0; i < threads; i++) {
        spans[i] = (span){.lo = per * (uint64_t)i, .hi = i == threads - 1 ? total : per * (uint64_t)(i + 1)};
        assert_int_equal(pthread_create(&th[i], NULL, span_run, &spans[i]), 0);
    }
    uint64_t bad = 0, checked = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        bad += spans[i].bad;
        checked += spans[i].checked;
        if (spans[i].bad)
            print_error("first bad pattern %08x\n", spans[i].first_bad);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    print_message("exhaustive float32: %llu finite patterns, %llu that do not read back, %.0f s "
                  "on %d threads\n", (unsigned long long)checked, (unsigned long long)bad, s, threads);
    assert_int_equal(checked, 4278190080ull); /* 2^32 less 2^24 NaN/Inf patterns */
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_texts),
        cmocka_unit_test(test_f32_edges_round_trip),
        cmocka_unit_test(test_f32_random_bits_round_trip),
        cmocka_unit_test(test_f64_random_and_edges_round_trip),
        cmocka_unit_test(test_f32_all_bit_patterns_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
