/* committer.c — group commit of submits (committer.h): a FIFO of items
 * handed over by the handlers and a few threads that each take what waits,
 * up to a batch, commit it, and answer it. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "committer.h"
#include "svc_log.h"
#include "svc_util.h"

struct gw_committer {
    gw_committer_ops ops;
    void *arg;
    int batch_max;
    int linger_ms, busy_ms;      /* gw_committer_linger; 0: none */
    pthread_mutex_t mu;          /* guards head, tail, waiting, stopping, last_take_ms */
    pthread_cond_t cv;           /* CLOCK_MONOTONIC */
    gw_commit_item *head, *tail;
    int waiting;                 /* items in the FIFO */
    int64_t last_take_ms;        /* when the last batch was taken */
    int stopping;
    int nthreads;
    pthread_t *threads;
};

/* Commits one batch and answers every item of it exactly once. */
static void batch_run(gw_committer *c, gw_commit_item **batch, int n)
{
    int rc = c->ops.commit(c->arg, batch, n);
    if (rc != 0 && rc != -EIO && n > 1) {
        /* Refused as a whole on a live connection: nothing of it is
         * recorded. Alone, each item gets its own answer. */
        svc_warn("group commit: a batch of %d failed (%d); committing them one by one", n, rc);
        for (int i = 0; i < n; i++)
            batch[i]->rc = c->ops.commit(c->arg, &batch[i], 1);
    } else {
        for (int i = 0; i < n; i++)
            batch[i]->rc = rc;
    }
    if (c->ops.committed)
        c->ops.committed(c->arg, batch, n);
    for (int i = 0; i < n; i++)
        c->ops.done(c->arg, batch[i]);
}

/* While batches follow each other, waits (mu held) until the head item
 * has waited linger_ms, max items wait, or the committer stops. */
static void linger(gw_committer *c, int max)
{
    int64_t now = svc_now_mono_ms();
    if (c->linger_ms <= 0 || now - c->last_take_ms >= c->busy_ms)
        return;
    int64_t until = c->head->at_ms + c->linger_ms;
    struct timespec ts = svc_deadline_ts(CLOCK_MONOTONIC, until - now);
    while (!c->stopping && c->waiting < max && svc_now_mono_ms() < until)
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/* A committer thread: takes everything waiting (up to batch_max) while no
 * batch of its own is in flight, after lingering for more while busy
 * (gw_committer_linger); leaves once stopping and nothing waits. */
static void *committer_main(void *arg)
{
    gw_committer *c = arg;
    gw_commit_item *one[1];
    gw_commit_item **batch = malloc(sizeof(*batch) * (size_t)c->batch_max);
    int max = c->batch_max;
    if (!batch) {
        batch = one; /* out of memory: commit one at a time rather than not at all */
        max = 1;
    }
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->stopping)
            pthread_cond_wait(&c->cv, &c->mu);
        if (!c->head)
            break;
        linger(c, max);
        int n = 0;
        while (c->head && n < max) {
            batch[n] = c->head;
            c->head = c->head->next;
            batch[n++]->next = NULL;
        }
        if (!c->head)
            c->tail = NULL;
        c->waiting -= n;
        c->last_take_ms = svc_now_mono_ms();
        pthread_mutex_unlock(&c->mu);
        batch_run(c, batch, n);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    if (batch != one)
        free(batch);
    return NULL;
}

/* Starts the threads (committer.h); a committer with fewer threads than
 * asked, but at least one, still works. */
gw_committer *gw_committer_start(const gw_committer_ops *ops, void *arg, int threads,
                                 int batch_max)
{
    if (!ops || !ops->commit || !ops->done || threads < 1 || batch_max < 1)
        return NULL;
    gw_committer *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ops = *ops;
    c->arg = arg;
    c->batch_max = batch_max;
    c->threads = calloc((size_t)threads, sizeof(*c->threads));
    pthread_mutex_init(&c->mu, NULL);
    svc_cond_init_mono(&c->cv);
    for (; c->threads && c->nthreads < threads; c->nthreads++)
        if (pthread_create(&c->threads[c->nthreads], NULL, committer_main, c) != 0)
            break;
    if (c->nthreads == 0) {
        svc_error("submits: cannot start a committer thread");
        gw_committer_stop(c);
        return NULL;
    }
    return c;
}

/* Appends item to the FIFO and wakes one thread (committer.h). */
int gw_committer_add(gw_committer *c, gw_commit_item *item)
{
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->mu);
        return -ESHUTDOWN;
    }
    item->next = NULL;
    item->at_ms = svc_now_mono_ms();
    if (c->tail)
        c->tail->next = item;
    else
        c->head = item;
    c->tail = item;
    c->waiting++;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void gw_committer_linger(gw_committer *c, int linger_ms, int busy_ms)
{
    pthread_mutex_lock(&c->mu);
    c->linger_ms = linger_ms > 0 ? linger_ms : 0;
    c->busy_ms = busy_ms > 0 ? busy_ms : 0;
    pthread_mutex_unlock(&c->mu);
}

/* Stops after the threads have emptied the FIFO (committer.h). */
void gw_committer_stop(gw_committer *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->nthreads; i++)
        pthread_join(c->threads[i], NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->threads);
    free(c);
}
