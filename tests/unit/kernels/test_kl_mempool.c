/* test_kl_mempool.c — the memory pool setup of the CUDA plugin
 * (kl_mempool.h) with fake device calls: every device's pool keeps half of
 * its memory between runs, and a device without pools, or a call that
 * fails, makes the setup fail naming that device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "kl.h"
#include "kl_mempool.h"

#define GiB ((uint64_t)1 << 30)

typedef struct fake {
    int supported[4];       /* 1, 0, or -1 (the question fails) */
    uint64_t total[4];
    uint64_t threshold[4];  /* what was set; 0: nothing */
    int set_fails_on;       /* -1: never */
} fake;

static int f_supported(void *ctx, int dev) { return ((fake *)ctx)->supported[dev]; }
static uint64_t f_total(void *ctx, int dev) { return ((fake *)ctx)->total[dev]; }
static int f_set(void *ctx, int dev, uint64_t bytes)
{
    fake *f = ctx;
    if (dev == f->set_fails_on)
        return KL_EBACKEND;
    f->threshold[dev] = bytes;
    return 0;
}

static kl_mempool_ops ops_of(fake *f)
{
    kl_mempool_ops o = {f_supported, f_total, f_set, f};
    return o;
}

static void test_each_pool_keeps_half_its_device(void **state)
{
    (void)state;
    fake f = {.supported = {1, 1}, .total = {141 * GiB, 80 * GiB}, .set_fails_on = -1};
    kl_mempool_ops o = ops_of(&f);
    char note[256];
    assert_int_equal(kl_mempool_setup(2, &o, note, sizeof note), 0);
    assert_int_equal(f.threshold[0], 141 * GiB / 2);
    assert_int_equal(f.threshold[1], 40 * GiB);
    assert_string_equal(note, "pool keeps 70.5 GiB on GPU 0, pool keeps 40.0 GiB on GPU 1");
    assert_int_equal(kl_mempool_threshold(0), 0);
}

static void test_a_device_without_pools_fails_the_setup_naming_it(void **state)
{
    (void)state;
    fake f = {.supported = {1, 0}, .total = {80 * GiB, 80 * GiB}, .set_fails_on = -1};
    kl_mempool_ops o = ops_of(&f);
    char note[256];
    assert_int_equal(kl_mempool_setup(2, &o, note, sizeof note), KL_ENOTSUP);
    assert_non_null(strstr(note, "GPU 1 has no stream-ordered memory pools"));
    assert_int_equal(f.threshold[1], 0);
}

static void test_a_failed_call_fails_the_setup_naming_the_device(void **state)
{
    (void)state;
    fake f = {.supported = {1, 1, -1}, .total = {80 * GiB, 80 * GiB}, .set_fails_on = 1};
    kl_mempool_ops o = ops_of(&f);
    char note[256];
    assert_int_equal(kl_mempool_setup(2, &o, note, sizeof note), KL_EBACKEND);
    assert_non_null(strstr(note, "GPU 1: cannot set"));
    f.set_fails_on = -1;
    assert_int_equal(kl_mempool_setup(3, &o, note, sizeof note), KL_EBACKEND);
    assert_non_null(strstr(note, "GPU 2: cannot tell"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_pool_keeps_half_its_device),
        cmocka_unit_test(test_a_device_without_pools_fails_the_setup_naming_it),
        cmocka_unit_test(test_a_failed_call_fails_the_setup_naming_the_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
