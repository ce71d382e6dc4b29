/* test_kl_hcache.c — the handle cache of the CUDA plugin (kl_hcache.h)
 * with a fake create and destroy: one handle per (thread, device), made on
 * first use and never again, a failed create cached as nothing, every
 * handle destroyed once when the cache goes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl.h"
#include "kl_hcache.h"

typedef struct fake {
    pthread_mutex_t mu;
    int created, destroyed;
    int fail_next;          /* the next create fails */
    int devs_destroyed[8];  /* per device */
} fake;

typedef struct handle {
    int dev;
    pthread_t owner;
} handle;

static int fake_create(void *ctx, int dev, void **h, char *err, size_t errlen)
{
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    int fail = f->fail_next;
    f->fail_next = 0;
    if (!fail)
        f->created++;
    pthread_mutex_unlock(&f->mu);
    if (fail) {
        snprintf(err, errlen, "cublasCreate: not initialized");
        return KL_EBACKEND;
    }
    handle *x = malloc(sizeof *x);
    x->dev = dev;
    x->owner = pthread_self();
    *h = x;
    return 0;
}

static void fake_destroy(void *ctx, int dev, void *h)
{
    fake *f = ctx;
    assert_int_equal(((handle *)h)->dev, dev);
    pthread_mutex_lock(&f->mu);
    f->destroyed++;
    f->devs_destroyed[dev]++;
    pthread_mutex_unlock(&f->mu);
    free(h);
}

static kl_hcache *cache_of(fake *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    kl_hcache_ops ops = {.create = fake_create, .destroy = fake_destroy, .ctx = f};
    kl_hcache *c = kl_hcache_new(&ops);
    assert_non_null(c);
    return c;
}

static void test_a_thread_gets_the_same_handle_for_a_device_every_time(void **state)
{
    (void)state;
    fake f;
    kl_hcache *c = cache_of(&f);
    char err[64];
    void *h0 = NULL, *h1 = NULL, *again = NULL;
    assert_int_equal(kl_hcache_get(c, 0, &h0, err, sizeof err), 0);
    assert_int_equal(kl_hcache_get(c, 1, &h1, err, sizeof err), 0);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(kl_hcache_get(c, 0, &again, err, sizeof err), 0);
        assert_ptr_equal(again, h0);
    }
    assert_ptr_not_equal(h0, h1);
    assert_int_equal(((handle *)h1)->dev, 1);
    assert_int_equal(f.created, 2);
    assert_int_equal(kl_hcache_count(c), 2);
    kl_hcache_free(c);
    assert_int_equal(f.destroyed, 2);
}

typedef struct worker {
    kl_hcache *c;
    void *h[2][2]; /* [device][call] */
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    char err[64];
    for (int call = 0; call < 2; call++)
        for (int dev = 0; dev < 2; dev++)
            assert_int_equal(kl_hcache_get(w->c, dev, &w->h[dev][call], err, sizeof err), 0);
    return NULL;
}

static void test_each_thread_has_its_own_handle_per_device(void **state)
{
    (void)state;
    fake f;
    kl_hcache *c = cache_of(&f);
    worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    /* 4 threads x 2 devices, each made once and found again */
    assert_int_equal(f.created, 8);
    assert_int_equal(kl_hcache_count(c), 8);
    for (int i = 0; i < 4; i++)
        for (int dev = 0; dev < 2; dev++) {
            assert_ptr_equal(w[i].h[dev][0], w[i].h[dev][1]);
            assert_int_equal(((handle *)w[i].h[dev][0])->dev, dev);
            assert_true(pthread_equal(((handle *)w[i].h[dev][0])->owner, t[i]));
            for (int j = 0; j < i; j++)
                assert_ptr_not_equal(w[i].h[dev][0], w[j].h[dev][0]);
        }
    kl_hcache_free(c);
    assert_int_equal(f.destroyed, 8);
    assert_int_equal(f.devs_destroyed[0], 4);
    assert_int_equal(f.devs_destroyed[1], 4);
}

static void test_a_failed_create_caches_nothing_and_the_next_call_tries_again(void **state)
{
    (void)state;
    fake f;
    kl_hcache *c = cache_of(&f);
    char err[64] = "";
    void *h = (void *)&f;
    f.fail_next = 1;
    assert_int_equal(kl_hcache_get(c, 0, &h, err, sizeof err), KL_EBACKEND);
    assert_null(h);
    assert_string_equal(err, "cublasCreate: not initialized");
    assert_int_equal(kl_hcache_count(c), 0);
    assert_int_equal(kl_hcache_get(c, 0, &h, err, sizeof err), 0);
    assert_non_null(h);
    assert_int_equal(f.created, 1);
    kl_hcache_free(c);
    assert_int_equal(f.destroyed, 1);
}

static void test_free_of_null_and_missing_ops(void **state)
{
    (void)state;
    kl_hcache_free(NULL);
    kl_hcache_ops none = {0};
    assert_null(kl_hcache_new(&none));
    assert_null(kl_hcache_new(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_thread_gets_the_same_handle_for_a_device_every_time),
        cmocka_unit_test(test_each_thread_has_its_own_handle_per_device),
        cmocka_unit_test(test_a_failed_create_caches_nothing_and_the_next_call_tries_again),
        cmocka_unit_test(test_free_of_null_and_missing_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
