/* kl_test_rand.h — reproducible inputs for the kernel unit tests: a
 * splitmix64 stream mapped to [-1, 1) (frand), [0, 1) (urand) or a normal
 * distribution (nrand), seeded per test file (define
 * KL_TEST_SEED before including, after cmocka.h and kl.h), and a helper to
 * view a float buffer as a tensor of up to three dimensions. */
#ifndef KL_TEST_RAND_H
#define KL_TEST_RAND_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef KL_TEST_SEED
#error "define KL_TEST_SEED before including kl_test_rand.h"
#endif

static uint64_t rng = KL_TEST_SEED;

/* splitmix64, mapped to [-1, 1) */
static inline float frand(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ull << 23) - 1.0);
}

/* splitmix64, mapped to [0, 1) */
static inline double urand(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}

/* A standard normal value: Box-Muller, one of the pair. */
static inline double nrand(void)
{
    double u = urand(), v = urand();
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

/* n values of frand() in a new buffer the test frees. */
static inline float *frand_array(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static inline kl_tensor tensor(float *data, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    kl_tensor t = {.dtype = KL_F32, .ndim = ndim, .shape = {d0, d1, d2}, .data = data};
    return t;
}

#endif
