/* test_kl_pinpool.c — the pinned buffer pool of the CUDA plugin
 * (kl_pinpool.h) with a fake allocator and fake fences: size classes,
 * reuse, the idle and total bounds, release under pressure, and a buffer a
 * cancelled run's copy may still touch never reused or released before
 * its fence is done. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kl.h"
#include "kl_pinpool.h"

#define MiB ((size_t)1 << 20)

typedef struct fake {
    int allocs, releases, refuse; /* refuse: the next allocs that fail */
    size_t live;                  /* bytes allocated and not released */
    int waits;
} fake;

typedef struct fence {
    int done;
    int refs;
} fence;

static void *fake_alloc(void *ctx, size_t bytes)
{
    fake *f = ctx;
    if (f->refuse > 0) {
        f->refuse--;
        return NULL;
    }
    f->allocs++;
    f->live += bytes;
    size_t *p = malloc(64); /* stands for the buffer: the pool never touches its bytes */
    p[0] = bytes;
    return p;
}

static void fake_release(void *ctx, void *p)
{
    fake *f = ctx;
    f->releases++;
    f->live -= ((size_t *)p)[0];
    free(p);
}

static int fence_done(void *ctx, void *fc) { (void)ctx; return ((fence *)fc)->done; }
static void fence_wait(void *ctx, void *fc)
{
    ((fake *)ctx)->waits++;
    ((fence *)fc)->done = 1; /* the device work ends */
}
static void fence_retain(void *ctx, void *fc) { (void)ctx; ((fence *)fc)->refs++; }
static void fence_drop(void *ctx, void *fc) { (void)ctx; ((fence *)fc)->refs--; }

static kl_pinpool *pool_of(fake *f, size_t max_idle, size_t max_total)
{
    memset(f, 0, sizeof *f);
    kl_pinpool_ops ops = {fake_alloc, fake_release, fence_done, fence_wait, fence_retain, fence_drop, f};
    kl_pinpool_limits lim = {.min_bytes = MiB, .max_idle = max_idle, .max_total = max_total};
    kl_pinpool *p = kl_pinpool_new(&ops, &lim);
    assert_non_null(p);
    return p;
}

static void test_classes_are_four_per_power_of_two(void **state)
{
    (void)state;
    assert_int_equal(kl_pinpool_class(MiB), MiB);
    assert_int_equal(kl_pinpool_class(MiB + 1), MiB + MiB / 4);
    assert_int_equal(kl_pinpool_class(3 * MiB), 3 * MiB);
    assert_int_equal(kl_pinpool_class(7 * MiB + 1), 8 * MiB);
    assert_int_equal(kl_pinpool_class((size_t)1 << 30), (size_t)1 << 30);
    assert_int_equal(kl_pinpool_class(((size_t)1 << 30) + 1), ((size_t)5 << 28));
    for (size_t b = MiB; b < 64 * MiB; b += 12345) {
        size_t c = kl_pinpool_class(b);
        assert_true(c >= b);
        assert_true(c - b <= b / 4); /* at most a quarter wasted */
    }
}

static void test_small_requests_are_left_to_pageable_memory(void **state)
{
    (void)state;
    fake f;
    kl_pinpool *p = pool_of(&f, 64 * MiB, 1024 * MiB);
    assert_null(kl_pinpool_get(p, MiB - 1));
    assert_int_equal(f.allocs, 0);
    int local;
    assert_int_equal(kl_pinpool_put(p, &local), 0); /* not the pool's: the caller frees it */
    kl_pinpool_free(p);
}

static void test_a_returned_buffer_serves_the_next_request_of_its_class(void **state)
{
    (void)state;
    fake f;
    kl_pinpool *p = pool_of(&f, 64 * MiB, 1024 * MiB);
    void *a = kl_pinpool_get(p, 2 * MiB + 5);
    assert_non_null(a);
    assert_int_equal(kl_pinpool_put(p, a), 1);
    void *b = kl_pinpool_get(p, 2 * MiB + 100); /* same class (2.5 MiB) */
    assert_ptr_equal(a, b);
    void *c = kl_pinpool_get(p, 4 * MiB); /* another class */
    assert_ptr_not_equal(c, a);
    assert_int_equal(f.allocs, 2);
    kl_pinpool_stats s;
    kl_pinpool_stats_get(p, &s);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.in_use_bytes, MiB * 5 / 2 + 4 * MiB);
    assert_int_equal(s.idle_bytes, 0);
    kl_pinpool_put(p, b);
    kl_pinpool_put(p, c);
    kl_pinpool_stats_get(p, &s);
    assert_int_equal(s.in_use_bytes, 0);
    assert_int_equal(s.idle_bytes, MiB * 5 / 2 + 4 * MiB);
    kl_pinpool_free(p);
    assert_int_equal(f.releases, f.allocs);
    assert_int_equal(f.live, 0);
}

static void test_idle_bytes_past_the_bound_go_back_least_recently_used_first(void **state)
{
    (void)state;
    fake f;
    kl_pinpool *p = pool_of(&f, 3 * MiB, 1024 * MiB);
    void *v[4];
    for (int i = 0; i < 4; i++)
        v[i] = kl_pinpool_get(p, MiB);
    for (int i = 0; i < 4; i++)
        kl_pinpool_put(p, v[i]);
    kl_pinpool_stats s;
    kl_pinpool_stats_get(p, &s);
    assert_int_equal(s.idle_bytes, 3 * MiB);
    assert_int_equal(s.released, 1);
    assert_int_equal(f.releases, 1);
    assert_int_equal(f.live, 3 * MiB);
    /* v[0] went back first, so it is the one released: v[1..3] are reused */
    for (int i = 1; i < 4; i++) {
        void *again = kl_pinpool_get(p, MiB);
        assert_true(again == v[1] || again == v[2] || again == v[3]);
    }
    assert_int_equal(f.allocs, 4);
    kl_pinpool_free(p);
    assert_int_equal(f.live, 0);
}

static void test_past_the_total_bound_idle_buffers_make_room_or_the_request_is_refused(void **state)
{
    (void)state;
    fake f;
    kl_pinpool *p = pool_of(&f, 64 * MiB, 4 * MiB);
    void *a = kl_pinpool_get(p, MiB), *b = kl_pinpool_get(p, MiB), *c = kl_pinpool_get(p, MiB);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_null(kl_pinpool_get(p, 2 * MiB)); /* 5 MiB pinned would pass 4 */
    kl_pinpool_stats s;
    kl_pinpool_stats_get(p, &s);
    assert_int_equal(s.fallbacks, 1);
    kl_pinpool_put(p, a); /* idle now: released to make room */
    void *d = kl_pinpool_get(p, 2 * MiB);
    assert_non_null(d);
    assert_int_equal(f.releases, 1);
    assert_int_equal(f.live, 4 * MiB);
    kl_pinpool_put(p, b);
    kl_pinpool_put(p, c);
    kl_pinpool_put(p, d);
    kl_pinpool_free(p);
    assert_int_equal(f.live, 0);
}

static void test_a_refused_pin_releases_idle_buffers_and_tries_again(void **state)
{
    (void)state;
    fake f;
    kl_pinpool *p = pool_of(&f, 64 * MiB, 1024 * MiB);
    void *a = kl_pinpool_get(p, 8 * MiB);
    kl_pinpool_put(p, a);
    f.refuse = 1; /* the system will not pin more until something goes */
    void *b = kl_pinpool_get(p, MiB);
    assert_non_null(b);
    assert_int_equal(f.releases, 1); /* the idle 8 MiB went back */
    f.refuse = 2;                    /* and now not at all */
    assert_null(kl_pinpool_get(p, 2 * MiB));
    kl_pinpool_stats s;
    kl_pinpool_stats_get(p, &s);
    assert_int_equal(s.fallbacks, 1);
    kl_pinpool_put(p, b);
    kl_pinpool_free(p);
    assert_int_equal(f.live, 0);
}

static void test_a_fenced_buffer_is_neither_reused_nor_released_until_its_fence_is_done(void **state)
{
    (void)state;
    fake f;
    fence fc = {0, 0};
    kl_pinpool *p = pool_of(&f, 64 * MiB, 1024 * MiB);
    char *a = kl_pinpool_get(p, MiB);
    /* a cancelled run's copy may still read a view into it */
    assert_int_equal(kl_pinpool_fence(p, a + 4096, &fc), 1);
    assert_int_equal(fc.refs, 1);
    kl_pinpool_put(p, a);
    void *b = kl_pinpool_get(p, MiB);
    assert_ptr_not_equal(b, a); /* a still waits on the device */
    kl_pinpool_put(p, b);
    assert_int_equal(kl_pinpool_trim(p), MiB); /* b goes; a stays */
    kl_pinpool_stats s;
    kl_pinpool_stats_get(p, &s);
    assert_int_equal(s.blocks, 1);
    assert_int_equal(s.fenced, 1);
    assert_int_equal(f.live, MiB);
    fc.done = 1; /* the stream drained */
    kl_pinpool_stats_get(p, &s);
    assert_int_equal(s.fenced, 0);
    void *c = kl_pinpool_get(p, MiB);
    assert_ptr_equal(c, a);
    assert_int_equal(fc.refs, 0); /* the pool let go of the fence */
    kl_pinpool_put(p, c);
    assert_int_equal(kl_pinpool_trim(p), MiB);
    assert_int_equal(f.live, 0);
    assert_int_equal(f.waits, 0); /* nobody blocked */
    kl_pinpool_free(p);
}

static void test_free_waits_for_fences_before_releasing(void **state)
{
    (void)state;
    fake f;
    fence fc = {0, 0};
    kl_pinpool *p = pool_of(&f, 64 * MiB, 1024 * MiB);
    char *a = kl_pinpool_get(p, MiB);
    kl_pinpool_fence(p, a, &fc);
    kl_pinpool_put(p, a);
    kl_pinpool_free(p);
    assert_int_equal(f.waits, 1);
    assert_int_equal(fc.refs, 0);
    assert_int_equal(f.live, 0);
}

static void test_an_adopted_range_is_fenced_and_disowning_it_waits(void **state)
{
    (void)state;
    fake f;
    fence fc = {0, 0};
    static char mapping[1 << 16]; /* a registered file mapping, say */
    kl_pinpool *p = pool_of(&f, 64 * MiB, 1024 * MiB);
    assert_int_equal(kl_pinpool_adopt(p, mapping, sizeof mapping), 0);
    assert_int_equal(kl_pinpool_fence(p, mapping + 100, &fc), 1);
    assert_int_equal(kl_pinpool_fence(p, mapping + sizeof mapping, &fc), 0); /* past its end */
    assert_int_equal(kl_pinpool_put(p, mapping), 0); /* never the pool's to take */
    kl_pinpool_disown(p, mapping);
    assert_int_equal(f.waits, 1);
    assert_int_equal(fc.refs, 0);
    assert_int_equal(kl_pinpool_fence(p, mapping, &fc), 0); /* forgotten */
    kl_pinpool_free(p);
    assert_int_equal(f.releases, 0);
}

static void test_a_fifth_fence_on_one_buffer_waits_for_the_oldest(void **state)
{
    (void)state;
    fake f;
    fence fc[5];
    memset(fc, 0, sizeof fc);
    kl_pinpool *p = pool_of(&f, 64 * MiB, 1024 * MiB);
    char *a = kl_pinpool_get(p, MiB);
    for (int i = 0; i < 5; i++)
        assert_int_equal(kl_pinpool_fence(p, a, &fc[i]), 1);
    assert_int_equal(f.waits, 1);
    assert_int_equal(fc[0].done, 1);
    assert_int_equal(fc[0].refs, 0);
    assert_int_equal(kl_pinpool_fence(p, a, &fc[4]), 1); /* the same one twice: kept once */
    assert_int_equal(fc[4].refs, 1);
    kl_pinpool_put(p, a);
    kl_pinpool_free(p);
    for (int i = 0; i < 5; i++)
        assert_int_equal(fc[i].refs, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes_are_four_per_power_of_two),
        cmocka_unit_test(test_small_requests_are_left_to_pageable_memory),
        cmocka_unit_test(test_a_returned_buffer_serves_the_next_request_of_its_class),
        cmocka_unit_test(test_idle_bytes_past_the_bound_go_back_least_recently_used_first),
        cmocka_unit_test(test_past_the_total_bound_idle_buffers_make_room_or_the_request_is_refused),
        cmocka_unit_test(test_a_refused_pin_releases_idle_buffers_and_tries_again),
        cmocka_unit_test(test_a_fenced_buffer_is_neither_reused_nor_released_until_its_fence_is_done),
        cmocka_unit_test(test_free_waits_for_fences_before_releasing),
        cmocka_unit_test(test_an_adopted_range_is_fenced_and_disowning_it_waits),
        cmocka_unit_test(test_a_fifth_fence_on_one_buffer_waits_for_the_oldest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
