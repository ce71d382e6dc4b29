/* kl_philox.h — the counter-based generator of the Monte Carlo kernels:
 * Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11; the Random123 reference), uniforms on (0, 1] and
 * Box–Muller normals. Written once for host and device code (KL_HD), so the
 * CPU reference and the CUDA plugin draw bit-identical 32-bit words; the
 * float normals then differ only by the libm ulps of logf/sincosf.
 * tests/unit/kernels/test_kl_philox.c checks the Random123 known-answer vectors. */
#ifndef KL_PHILOX_H
#define KL_PHILOX_H

#include <math.h>
#include <stdint.h>

#include "kl_kernels.h" /* KL_HD */

/* Four 32-bit words: a counter going in, random bits coming out. */
typedef struct kl_philox4x32 {
    uint32_t v[4];
} kl_philox4x32;

/* The 64-bit key: a stream. A different key gives an unrelated sequence. */
typedef struct kl_philox_key {
    uint32_t v[2];
} kl_philox_key;

#define KL_PHILOX_M0 0xD2511F53u /* round multipliers */
#define KL_PHILOX_M1 0xCD9E8D57u
#define KL_PHILOX_W0 0x9E3779B9u /* key schedule: golden ratio, sqrt(3) - 1 */
#define KL_PHILOX_W1 0xBB67AE85u

/* High and low halves of the 64-bit product a*b. */
static inline KL_HD uint32_t kl__philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
#if defined(__CUDA_ARCH__)
    *hi = __umulhi(a, b);
    return a * b;
#else
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
#endif
}

static inline KL_HD kl_philox4x32 kl__philox_round(kl_philox4x32 c, kl_philox_key k)
{
    uint32_t hi0, hi1;
    uint32_t lo0 = kl__philox_mulhilo(KL_PHILOX_M0, c.v[0], &hi0);
    uint32_t lo1 = kl__philox_mulhilo(KL_PHILOX_M1, c.v[2], &hi1);
    kl_philox4x32 r = {{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
    return r;
}

/* Philox-4x32 with 10 rounds: 128 random bits for each (counter, key). A
 * pure function, so any thread can draw any part of any stream. */
static inline KL_HD kl_philox4x32 kl_philox4x32_10(kl_philox4x32 ctr, kl_philox_key key)
{
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < 9; i++) {
        ctr = kl__philox_round(ctr, key);
        key.v[0] += KL_PHILOX_W0;
        key.v[1] += KL_PHILOX_W1;
    }
    return kl__philox_round(ctr, key);
}

/* A 32-bit word as a float in (0, 1]: x * 2^-32 + 2^-33, Random123's u01.
 * Never 0, so logf of it is finite; the smallest value, 2^-33, bounds the
 * Box–Muller radius at sqrt(66 ln 2) = 6.77. Scaling by a power of two is
 * exact, so a fused multiply-add (nvcc) rounds as mul-then-add (gcc) does,
 * and (float)x rounds to nearest on both: host and device agree bit for bit. */
static inline KL_HD float kl_philox_u01f(uint32_t x)
{
    return (float)x * 0x1p-32f + 0x1p-33f;
}

#define KL_TWO_PI_F 6.28318530717958647692f

/* Box–Muller: two independent N(0, 1) draws from two words, the radius
 * from a and the angle from b. */
static inline KL_HD void kl_box_muller(uint32_t a, uint32_t b, float *z0, float *z1)
{
    float r = sqrtf(-2.0f * logf(kl_philox_u01f(a)));
    float s, c;
    sincosf(KL_TWO_PI_F * kl_philox_u01f(b), &s, &c);
    *z0 = r * c;
    *z1 = r * s;
}

#endif
