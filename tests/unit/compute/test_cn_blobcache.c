/* test_cn_blobcache.c — the input cache: hits copy, least recently used
 * blobs go first, the byte budget holds, a blob larger than the budget is
 * never kept, a size that disagrees is reported, and concurrent callers of
 * a missing blob fetch it once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cn_blobcache.h"

/* A fake id; the cache never hashes. */
/* Per thread: the churners build ids at once, and a slot being rewritten
 * reads "sha256:" for a moment (another id, whose bytes would then be
 * served for this one: the test's race, not the cache's). */
static const char *id_of(char c)
{
    static __thread char ids[256][72];
    char *s = ids[(unsigned char)c];
    snprintf(s, 72, "sha256:");
    memset(s + 7, c, 64);
    s[71] = '\0';
    return s;
}

/* Fetches id (missing) and fills the cache with size bytes of value c. */
static void put(cn_blobcache *bc, char c, size_t size)
{
    char buf[256];
    cn_blobcache_claim *claim = NULL;
    uint64_t actual;
    assert_int_equal(cn_blobcache_get(bc, id_of(c), buf, size, NULL, &claim, &actual), CN_BLOB_MISS);
    assert_non_null(claim);
    memset(buf, c, size);
    cn_blobcache_fill(bc, claim, buf);
}

/* 1 when id is cached (and then its bytes were copied out right). */
static int has(cn_blobcache *bc, char c, size_t size)
{
    char buf[256];
    cn_blobcache_claim *claim = NULL;
    uint64_t actual;
    memset(buf, 0, sizeof buf);
    int rc = cn_blobcache_get(bc, id_of(c), buf, size, NULL, &claim, &actual);
    if (claim)
        cn_blobcache_abandon(bc, claim);
    if (rc != CN_BLOB_HIT)
        return 0;
    for (size_t i = 0; i < size; i++)
        assert_int_equal(buf[i], c);
    return 1;
}

static cn_blobcache_stats stats_of(cn_blobcache *bc)
{
    cn_blobcache_stats s;
    cn_blobcache_stats_get(bc, &s);
    return s;
}

static void test_hit_copies_the_bytes_and_counts(void **state)
{
    cn_blobcache *bc;
    assert_int_equal(cn_blobcache_create(100, &bc), 0);
    put(bc, 'a', 10);
    assert_true(has(bc, 'a', 10));
    assert_true(has(bc, 'a', 10));
    cn_blobcache_count_fetch(bc, 10);
    cn_blobcache_stats s = stats_of(bc);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.used_bytes, 10);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.fetched_bytes, 10);
    assert_int_equal(s.served_bytes, 20);
    assert_int_equal(s.budget_bytes, 100);
    cn_blobcache_destroy(bc);
}

static void test_least_recently_used_is_evicted_first(void **state)
{
    cn_blobcache *bc;
    assert_int_equal(cn_blobcache_create(30, &bc), 0);
    put(bc, 'a', 10);
    put(bc, 'b', 10);
    put(bc, 'c', 10);
    assert_true(has(bc, 'a', 10));  /* a is now the most recent; b the least */
    put(bc, 'd', 10);
    assert_false(has(bc, 'b', 10));
    assert_true(has(bc, 'a', 10));
    assert_true(has(bc, 'c', 10));
    assert_true(has(bc, 'd', 10));
    cn_blobcache_destroy(bc);
}

static void test_budget_holds_and_big_blobs_evict_several(void **state)
{
    cn_blobcache *bc;
    assert_int_equal(cn_blobcache_create(100, &bc), 0);
    for (char c = 'a'; c < 'a' + 10; c++)
        put(bc, c, 10);
    assert_int_equal(stats_of(bc).used_bytes, 100);
    put(bc, 'z', 35);  /* needs the four oldest out */
    assert_true(stats_of(bc).used_bytes <= 100);
    assert_int_equal(stats_of(bc).used_bytes, 95);
    for (char c = 'a'; c < 'a' + 4; c++)
        assert_false(has(bc, c, 10));
    for (char c = 'e'; c < 'a' + 10; c++)
        assert_true(has(bc, c, 10));
    assert_true(has(bc, 'z', 35));
    cn_blobcache_destroy(bc);
}

static void test_a_blob_larger_than_the_budget_is_not_cached(void **state)
{
    cn_blobcache *bc, *off;
    cn_blobcache_claim *claim = (void *)1;
    uint64_t actual;
    char buf[64];
    assert_int_equal(cn_blobcache_create(32, &bc), 0);
    put(bc, 'a', 16);
    assert_int_equal(cn_blobcache_get(bc, id_of('b'), buf, 33, NULL, &claim, &actual), CN_BLOB_MISS);
    assert_null(claim);  /* nobody is told to fill it, */
    assert_true(has(bc, 'a', 16));  /* and it evicted nothing */
    /* a budget of 0 keeps nothing but still counts */
    assert_int_equal(cn_blobcache_create(0, &off), 0);
    claim = (void *)1;
    assert_int_equal(cn_blobcache_get(off, id_of('a'), buf, 1, NULL, &claim, &actual), CN_BLOB_MISS);
    assert_null(claim);
    cn_blobcache_stats s = stats_of(off);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.used_bytes, 0);
    cn_blobcache_destroy(off);
    cn_blobcache_destroy(bc);
}

static void test_a_cached_blob_of_another_size_is_esize(void **state)
{
    cn_blobcache *bc;
    cn_blobcache_claim *claim;
    uint64_t actual = 0;
    char buf[64];
    assert_int_equal(cn_blobcache_create(100, &bc), 0);
    put(bc, 'a', 20);
    assert_int_equal(cn_blobcache_get(bc, id_of('a'), buf, 24, NULL, &claim, &actual), CN_BLOB_ESIZE);
    assert_null(claim);
    assert_int_equal(actual, 20);
    cn_blobcache_destroy(bc);
}

/* ---- concurrency ------------------------------------------------------- */

#define NTHREADS 8
#define BIG 4096

typedef struct racer {
    cn_blobcache *bc;
    int fail_first;      /* the first fetcher abandons */
    int *fetches;        /* shared, atomic */
    int rc;
    char buf[BIG];
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    cn_blobcache_claim *claim = NULL;
    uint64_t actual;
    for (;;) {
        r->rc = cn_blobcache_get(r->bc, id_of('r'), r->buf, BIG, NULL, &claim, &actual);
        if (r->rc != CN_BLOB_MISS)
            return NULL;
        assert_non_null(claim);
        int n = __atomic_add_fetch(r->fetches, 1, __ATOMIC_SEQ_CST);
        usleep(50 * 1000);  /* the fetch takes a while: the others pile up */
        if (r->fail_first && n == 1) {
            cn_blobcache_abandon(r->bc, claim);
            continue;  /* as a real caller would report; here: ask again */
        }
        memset(r->buf, 'r', BIG);
        cn_blobcache_fill(r->bc, claim, r->buf);
        r->rc = CN_BLOB_HIT;
        return NULL;
    }
}

static void run_race(int fail_first, int want_fetches)
{
    cn_blobcache *bc;
    pthread_t th[NTHREADS];
    static racer rs[NTHREADS];
    int fetches = 0;
    assert_int_equal(cn_blobcache_create(1 << 20, &bc), 0);
    for (int i = 0; i < NTHREADS; i++) {
        rs[i] = (racer){.bc = bc, .fail_first = fail_first, .fetches = &fetches};
        assert_int_equal(pthread_create(&th[i], NULL, race, &rs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(rs[i].rc, CN_BLOB_HIT);
        for (int j = 0; j < BIG; j++)
            assert_int_equal(rs[i].buf[j], 'r');
    }
    assert_int_equal(fetches, want_fetches);
    cn_blobcache_stats s = stats_of(bc);
    /* the abandoner asks once more */
    assert_int_equal(s.misses, want_fetches);
    assert_int_equal(s.hits, NTHREADS + fail_first - want_fetches);
    assert_int_equal(s.used_bytes, BIG);
    cn_blobcache_destroy(bc);
}

static void test_concurrent_callers_fetch_a_missing_blob_once(void **state)
{
    run_race(0, 1);
}

static void test_an_abandoned_fetch_is_taken_over_by_one_waiter(void **state)
{
    run_race(1, 2);
}

static void *wait_cancellable(void *arg)
{
    racer *r = arg;
    cn_blobcache_claim *claim = NULL;
    uint64_t actual;
    r->rc = cn_blobcache_get(r->bc, id_of('w'), r->buf, 8, r->fetches, &claim, &actual);
    return NULL;
}

static void test_a_waiter_stops_when_cancelled(void **state)
{
    cn_blobcache *bc;
    cn_blobcache_claim *claim;
    uint64_t actual;
    char buf[8];
    int cancel = 0;
    static racer r;
    pthread_t th;
    assert_int_equal(cn_blobcache_create(100, &bc), 0);
    assert_int_equal(cn_blobcache_get(bc, id_of('w'), buf, 8, NULL, &claim, &actual), CN_BLOB_MISS);
    r = (racer){.bc = bc, .fetches = &cancel};
    assert_int_equal(pthread_create(&th, NULL, wait_cancellable, &r), 0);
    usleep(150 * 1000);
    __atomic_store_n(&cancel, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    assert_int_equal(r.rc, CN_BLOB_ECANCELED);
    cn_blobcache_abandon(bc, claim);
    cn_blobcache_destroy(bc);
}

/* Eviction never frees a blob while it is being copied out: many readers
 * and writers on a cache that holds two blobs at a time. */
typedef struct churner {
    cn_blobcache *bc;
    int seed;
} churner;

static void *churn(void *arg)
{
    churner *c = arg;
    static __thread char buf[BIG];
    for (int i = 0; i < 300; i++) {
        char id = (char)('a' + (c->seed + i) % 5);
        cn_blobcache_claim *claim = NULL;
        uint64_t actual;
        int rc = cn_blobcache_get(c->bc, id_of(id), buf, BIG, NULL, &claim, &actual);
        if (rc == CN_BLOB_HIT) {
            for (int j = 0; j < BIG; j += 512)
                assert_int_equal(buf[j], id);
        } else if (claim) {
            memset(buf, id, BIG);
            cn_blobcache_fill(c->bc, claim, buf);
        }
    }
    return NULL;
}

static void test_concurrent_use_keeps_bytes_and_budget(void **state)
{
    cn_blobcache *bc;
    pthread_t th[NTHREADS];
    churner cs[NTHREADS];
    assert_int_equal(cn_blobcache_create(2 * BIG, &bc), 0);
    for (int i = 0; i < NTHREADS; i++) {
        cs[i] = (churner){.bc = bc, .seed = i};
        assert_int_equal(pthread_create(&th[i], NULL, churn, &cs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    cn_blobcache_stats s = stats_of(bc);
    assert_true(s.used_bytes <= 2 * BIG);
    assert_int_equal(s.hits + s.misses, NTHREADS * 300);
    cn_blobcache_destroy(bc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_copies_the_bytes_and_counts),
        cmocka_unit_test(test_least_recently_used_is_evicted_first),
        cmocka_unit_test(test_budget_holds_and_big_blobs_evict_several),
        cmocka_unit_test(test_a_blob_larger_than_the_budget_is_not_cached),
        cmocka_unit_test(test_a_cached_blob_of_another_size_is_esize),
        cmocka_unit_test(test_concurrent_callers_fetch_a_missing_blob_once),
        cmocka_unit_test(test_an_abandoned_fetch_is_taken_over_by_one_waiter),
        cmocka_unit_test(test_a_waiter_stops_when_cancelled),
        cmocka_unit_test(test_concurrent_use_keeps_bytes_and_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
