/* test_gw_committer.c — the group commit of submits: batches up to their
 * maximum, every item answered exactly once, a failed batch retried item by
 * item, a lost connection failing the batch without retries. The commit is
 * a fake that records the batches it is given and can be held shut, so that
 * items pile up behind a batch in flight as they do under load. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "committer.h"

#define MAX_ITEMS 4096
#define MAX_CALLS 8192

typedef struct titem {
    gw_commit_item it;        /* first */
    int idx;
    int answered;             /* times ops.done saw it */
    int rc_at_committed;      /* its rc when ops.committed ran; 1 = not seen */
} titem;

typedef struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int hold;                 /* commits wait while set */
    int waiting;              /* commits waiting on hold */
    int ncalls;
    int sizes[MAX_CALLS];
    int poison;               /* the idx whose batch is refused (-EPROTO); -1 none */
    int lost;                 /* every batch of more than one fails with -EIO */
    int max_seen;
    int answered;             /* done calls in all */
    int order[MAX_ITEMS];     /* idx in the order answered */
} fake;

static int fake_commit(void *arg, gw_commit_item *const *items, int n)
{
    fake *f = arg;
    pthread_mutex_lock(&f->mu);
    f->waiting++;
    pthread_cond_broadcast(&f->cv);
    while (f->hold)
        pthread_cond_wait(&f->cv, &f->mu);
    f->waiting--;
    if (f->ncalls < MAX_CALLS)
        f->sizes[f->ncalls] = n;
    f->ncalls++;
    if (n > f->max_seen)
        f->max_seen = n;
    int rc = 0;
    for (int i = 0; i < n; i++)
        if (((titem *)items[i])->idx == f->poison)
            rc = -EPROTO;
    if (f->lost && n > 1)
        rc = -EIO;
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void fake_committed(void *arg, gw_commit_item *const *items, int n)
{
    (void)arg;
    for (int i = 0; i < n; i++)
        ((titem *)items[i])->rc_at_committed = items[i]->rc;
}

static void fake_done(void *arg, gw_commit_item *it)
{
    fake *f = arg;
    titem *t = (titem *)it;
    pthread_mutex_lock(&f->mu);
    t->answered++;
    if (f->answered < MAX_ITEMS)
        f->order[f->answered] = t->idx;
    f->answered++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static const gw_committer_ops ops = {fake_commit, fake_committed, fake_done};

static fake *fake_new(void)
{
    fake *f = calloc(1, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->poison = -1;
    return f;
}

static titem *items_new(int n)
{
    titem *t = calloc((size_t)n, sizeof(*t));
    for (int i = 0; i < n; i++) {
        t[i].idx = i;
        t[i].rc_at_committed = 1;
    }
    return t;
}

static void set_hold(fake *f, int hold)
{
    pthread_mutex_lock(&f->mu);
    f->hold = hold;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Waits until a commit is held in flight. */
static void wait_in_commit(fake *f)
{
    pthread_mutex_lock(&f->mu);
    while (f->waiting == 0)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

static void wait_answered(fake *f, int n)
{
    pthread_mutex_lock(&f->mu);
    while (f->answered < n)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

/* Through a committer of one worker and batches of batch_max, stopped
 * after: item 0 is committed alone at once; items 1..n-1 arrive while it is
 * in flight and go in batches of batch_max in order. */
static void run_behind_first(fake *f, int batch_max, titem *t, int n)
{
    gw_committer *c = gw_committer_start(&ops, f, 1, batch_max);
    assert_non_null(c);
    set_hold(f, 1);
    assert_int_equal(gw_committer_add(c, &t[0].it), 0);
    wait_in_commit(f);
    for (int i = 1; i < n; i++)
        assert_int_equal(gw_committer_add(c, &t[i].it), 0);
    set_hold(f, 0);
    wait_answered(f, n);
    gw_committer_stop(c);
}

static void test_waiting_submits_commit_in_batches_up_to_the_maximum(void **state)
{
    fake *f = fake_new();
    titem *t = items_new(21);
    run_behind_first(f, 8, t, 21);
    /* a lone submit waits for nothing; then everything waiting, 8 at most */
    assert_int_equal(f->ncalls, 4);
    assert_int_equal(f->sizes[0], 1);
    assert_int_equal(f->sizes[1], 8);
    assert_int_equal(f->sizes[2], 8);
    assert_int_equal(f->sizes[3], 4);
    for (int i = 0; i < 21; i++) {
        assert_int_equal(t[i].answered, 1);
        assert_int_equal(t[i].it.rc, 0);
        assert_int_equal(t[i].rc_at_committed, 0);
        assert_int_equal(f->order[i], i); /* answered in arrival order */
    }
    free(t);
    free(f);
}

static void test_a_failed_batch_is_retried_one_by_one_and_fails_only_its_bad_row(void **state)
{
    fake *f = fake_new();
    titem *t = items_new(10);
    f->poison = 5;
    run_behind_first(f, 16, t, 10);
    /* 1 alone, the batch of 9 refused, then each of the 9 alone */
    assert_int_equal(f->ncalls, 1 + 1 + 9);
    assert_int_equal(f->sizes[1], 9);
    for (int k = 2; k < f->ncalls; k++)
        assert_int_equal(f->sizes[k], 1);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(t[i].answered, 1);
        assert_int_equal(t[i].it.rc, i == 5 ? -EPROTO : 0);
        /* the queueing step already saw the final outcome */
        assert_int_equal(t[i].rc_at_committed, t[i].it.rc);
    }
    free(t);
    free(f);
}

static void test_a_lost_connection_fails_the_whole_batch_without_retries(void **state)
{
    fake *f = fake_new();
    titem *t = items_new(6);
    f->lost = 1;
    run_behind_first(f, 16, t, 6);
    assert_int_equal(f->ncalls, 2); /* the lone one, then the batch of 5: no retry */
    assert_int_equal(t[0].it.rc, 0);
    for (int i = 1; i < 6; i++) {
        assert_int_equal(t[i].answered, 1);
        assert_int_equal(t[i].it.rc, -EIO);
    }
    free(t);
    free(f);
}

static void test_stop_answers_every_submit_already_handed_over(void **state)
{
    fake *f = fake_new();
    titem *t = items_new(50);
    gw_committer *c = gw_committer_start(&ops, f, 2, 16);
    set_hold(f, 1);
    for (int i = 0; i < 50; i++)
        assert_int_equal(gw_committer_add(c, &t[i].it), 0);
    wait_in_commit(f);
    set_hold(f, 0);
    gw_committer_stop(c); /* returns once the queue is empty */
    assert_int_equal(f->answered, 50);
    for (int i = 0; i < 50; i++)
        assert_int_equal(t[i].answered, 1);
    free(t);
    free(f);
}

typedef struct producer {
    gw_committer *c;
    titem *t;
    int from, n;
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    for (int i = p->from; i < p->from + p->n; i++)
        if (gw_committer_add(p->c, &p->t[i].it) != 0)
            return (void *)1;
    return NULL;
}

static void test_concurrent_submits_on_two_committers_are_each_answered_once(void **state)
{
    enum { PRODUCERS = 4, EACH = 1000 };
    fake *f = fake_new();
    titem *t = items_new(PRODUCERS * EACH);
    gw_committer *c = gw_committer_start(&ops, f, 2, 64);
    pthread_t th[PRODUCERS];
    producer p[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        p[i] = (producer){c, t, i * EACH, EACH};
        pthread_create(&th[i], NULL, produce, &p[i]);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
    wait_answered(f, PRODUCERS * EACH);
    gw_committer_stop(c);
    assert_int_equal(f->answered, PRODUCERS * EACH);
    assert_true(f->max_seen <= 64);
    for (int i = 0; i < PRODUCERS * EACH; i++) {
        assert_int_equal(t[i].answered, 1);
        assert_int_equal(t[i].it.rc, 0);
    }
    free(t);
    free(f);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A committer that gathers for 300 ms while busy (a batch within 10 s). */
static gw_committer *lingering(fake *f, int batch_max)
{
    gw_committer *c = gw_committer_start(&ops, f, 1, batch_max);
    assert_non_null(c);
    gw_committer_linger(c, 300, 10000);
    return c;
}

static void test_a_busy_committer_gathers_what_arrives_within_its_linger(void **state)
{
    (void)state;
    fake *f = fake_new();
    titem *t = items_new(4);
    gw_committer *c = lingering(f, 64);
    /* a first batch makes it busy */
    assert_int_equal(gw_committer_add(c, &t[0].it), 0);
    wait_answered(f, 1);
    /* two items 30 ms apart: without the linger the first would be
     * committed alone as soon as it came */
    assert_int_equal(gw_committer_add(c, &t[1].it), 0);
    sleep_ms(30);
    assert_int_equal(gw_committer_add(c, &t[2].it), 0);
    wait_answered(f, 3);
    assert_int_equal(f->ncalls, 2);
    assert_int_equal(f->sizes[0], 1);
    assert_int_equal(f->sizes[1], 2);
    gw_committer_stop(c);
    free(t);
    free(f);
}

static void test_a_full_batch_or_a_quiet_spell_is_not_kept_waiting(void **state)
{
    (void)state;
    fake *f = fake_new();
    titem *t = items_new(8);
    gw_committer *c = gw_committer_start(&ops, f, 1, 3);
    assert_non_null(c);
    gw_committer_linger(c, 60000, 200);
    /* the first item of all: nothing before it, committed at once (the
     * linger is a minute: the test would wait it out otherwise) */
    assert_int_equal(gw_committer_add(c, &t[0].it), 0);
    wait_answered(f, 1);
    /* busy now: three items (a whole batch) go without waiting the minute */
    for (int i = 1; i <= 3; i++)
        assert_int_equal(gw_committer_add(c, &t[i].it), 0);
    wait_answered(f, 4);
    assert_int_equal(f->sizes[1], 3);
    /* after a quiet spell longer than busy_ms, a lone item goes at once */
    sleep_ms(400);
    assert_int_equal(gw_committer_add(c, &t[4].it), 0);
    wait_answered(f, 5);
    assert_int_equal(f->ncalls, 3);
    /* and stop does not wait the linger out either */
    assert_int_equal(gw_committer_add(c, &t[5].it), 0);
    gw_committer_stop(c);
    assert_int_equal(f->answered, 6);
    free(t);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waiting_submits_commit_in_batches_up_to_the_maximum),
        cmocka_unit_test(test_a_failed_batch_is_retried_one_by_one_and_fails_only_its_bad_row),
        cmocka_unit_test(test_a_lost_connection_fails_the_whole_batch_without_retries),
        cmocka_unit_test(test_stop_answers_every_submit_already_handed_over),
        cmocka_unit_test(test_concurrent_submits_on_two_committers_are_each_answered_once),
        cmocka_unit_test(test_a_busy_committer_gathers_what_arrives_within_its_linger),
        cmocka_unit_test(test_a_full_batch_or_a_quiet_spell_is_not_kept_waiting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
