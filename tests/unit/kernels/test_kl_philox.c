/* test_kl_philox.c — kl_philox.h against the published Random123
 * known-answer vectors for Philox-4x32-10 (kat_vectors), the range of the
 * uniforms, and the moments of the Box–Muller normals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "kl_philox.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1, uint32_t r0,
                uint32_t r1, uint32_t r2, uint32_t r3)
{
    kl_philox4x32 ctr = {{c0, c1, c2, c3}};
    kl_philox_key key = {{k0, k1}};
    kl_philox4x32 r = kl_philox4x32_10(ctr, key);
    assert_int_equal(r.v[0], r0);
    assert_int_equal(r.v[1], r1);
    assert_int_equal(r.v[2], r2);
    assert_int_equal(r.v[3], r3);
}

static void philox_matches_random123_known_answers(void **state)
{
    (void)state;
    kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
    kat(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
        0xa20bc7c6, 0x6d5451fd);
    /* digits of pi */
    kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
        0x5001e420, 0x24126ea1);
}

static void philox_changes_with_every_word_of_counter_and_key(void **state)
{
    (void)state;
    kl_philox4x32 base = kl_philox4x32_10((kl_philox4x32){{1, 2, 3, 4}}, (kl_philox_key){{5, 6}});
    for (int i = 0; i < 6; i++) {
        kl_philox4x32 c = {{1, 2, 3, 4}};
        kl_philox_key k = {{5, 6}};
        if (i < 4)
            c.v[i] ^= 1;
        else
            k.v[i - 4] ^= 1;
        kl_philox4x32 r = kl_philox4x32_10(c, k);
        int same = 0;
        for (int w = 0; w < 4; w++)
            same += r.v[w] == base.v[w];
        assert_int_equal(same, 0);
    }
}

static void u01_lies_in_zero_one_and_keeps_the_extremes_apart(void **state)
{
    (void)state;
    assert_true(kl_philox_u01f(0) == 0x1p-33f);
    assert_true(kl_philox_u01f(1) > kl_philox_u01f(0));
    assert_true(kl_philox_u01f(0xffffffffu) == 1.0f);
    assert_true(kl_philox_u01f(0x80000000u) == 0.5f); /* 2^-33 is below half an ulp of 0.5 */
    for (uint64_t x = 0; x <= 0xffffffffull; x += 0x10001ull) {
        float u = kl_philox_u01f((uint32_t)x);
        assert_true(u > 0.0f && u <= 1.0f);
    }
    /* The widest Box–Muller radius there can be. */
    float z0, z1;
    kl_box_muller(0, 0, &z0, &z1);
    assert_true(fabsf(z0 - sqrtf(66.0f * logf(2.0f))) < 1e-5f);
    assert_true(isfinite(z1));
}

/* One million normals: mean 0, variance 1, kurtosis 3 and the tails of a
 * standard normal, within a few standard errors of each estimate. */
static void box_muller_normals_have_standard_moments(void **state)
{
    (void)state;
    const int n = 1 << 20;
    double m1 = 0, m2 = 0, m4 = 0, cov = 0;
    long beyond2 = 0;
    kl_philox_key key = {{20261202, 0}};
    for (int i = 0; i < n / 4; i++) {
        kl_philox4x32 w = kl_philox4x32_10((kl_philox4x32){{(uint32_t)i, 0, 0, 0}}, key);
        float z[4];
        kl_box_muller(w.v[0], w.v[1], &z[0], &z[1]);
        kl_box_muller(w.v[2], w.v[3], &z[2], &z[3]);
        for (int l = 0; l < 4; l++) {
            double x = z[l];
            m1 += x, m2 += x * x, m4 += x * x * x * x;
            beyond2 += fabs(x) > 2;
        }
        cov += (double)z[0] * z[1] + (double)z[2] * z[3];
    }
    m1 /= n, m2 /= n, m4 /= n, cov /= n / 2;
    assert_true(fabs(m1) < 4 / sqrt(n));
    assert_true(fabs(m2 - 1) < 4 * sqrt(2.0 / n));
    assert_true(fabs(m4 - 3) < 4 * sqrt(96.0 / n));
    assert_true(fabs(cov) < 4 / sqrt(n / 2.0)); /* the two of a pair are uncorrelated */
    double p2 = 0.04550026389635842;            /* P(|Z| > 2) */
    assert_true(fabs((double)beyond2 / n - p2) < 4 * sqrt(p2 * (1 - p2) / n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_matches_random123_known_answers),
        cmocka_unit_test(philox_changes_with_every_word_of_counter_and_key),
        cmocka_unit_test(u01_lies_in_zero_one_and_keeps_the_extremes_apart),
        cmocka_unit_test(box_muller_normals_have_standard_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
