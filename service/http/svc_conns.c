/* svc_conns.c — connections, their caps and deadlines (svc_conns.h). One
 * mutex guards the list; the watchdog wakes every WATCHDOG_MS, shuts down
 * what is past its deadline and logs one line per round. */
#include "svc_conns.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "svc_log.h"
#include "svc_util.h"

/* How often the watchdog looks for connections past their deadline. */
#define WATCHDOG_MS 250

enum { PHASE_HEAD, PHASE_BODY, PHASE_APP };

struct svc_conn {
    svc_conn *prev, *next;
    int fd;                  /* shut down, never closed, here */
    int phase;
    int over;                /* opened over its address's cap */
    int cut;                 /* shut down (at once, or by the watchdog) */
    int counted;             /* its address is capped (not a trusted proxy) */
    int64_t since;           /* the phase began (mono ms); BODY: the window */
    uint64_t window_bytes;   /* BODY: bytes in the current window */
    void *owner;             /* the table's opts.owner */
    char key[SVC_ADDR_TEXT]; /* svc_addr_limit_key of the peer */
};

struct svc_conns {
    svc_conns_opts o;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* wakes the watchdog to stop */
    svc_conn *list;
    unsigned n, nover, ncut;
    int stopping;
    pthread_t watchdog;
};

/* The deadline of c (mono ms), or -1 when it has none. */
static int64_t deadline_of(const svc_conns *t, const svc_conn *c)
{
    if (c->phase == PHASE_HEAD)
        return c->since + (c->over ? t->o.over_head_ms : t->o.head_ms);
    if (c->phase == PHASE_BODY)
        return c->since + t->o.body_ms;
    return -1;
}

static void shut(svc_conns *t, svc_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    c->cut = 1;
    t->ncut++;
}

static void *watchdog_main(void *arg)
{
    svc_conns *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        struct timespec ts = svc_deadline_ts(CLOCK_MONOTONIC, WATCHDOG_MS);
        int rc = 0;
        while (!t->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        int64_t now = svc_now_mono_ms();
        int heads = 0, bodies = 0;
        char key[SVC_ADDR_TEXT] = "";
        for (svc_conn *c = t->list; c != NULL && !t->stopping; c = c->next) {
            int64_t due = deadline_of(t, c);
            if (c->cut || due < 0 || now <= due)
                continue;
            if (c->phase == PHASE_BODY) {
                /* a window that brought its bytes opens the next one */
                uint64_t need = t->o.body_min_rate * (uint64_t)t->o.body_ms / 1000;
                if (t->o.body_min_rate > 0 && c->window_bytes >= need) {
                    c->since = now;
                    c->window_bytes = 0;
                    continue;
                }
                bodies++;
            } else {
                heads++;
            }
            if (heads + bodies == 1)
                memcpy(key, c->key, sizeof key);
            shut(t, c);
        }
        if (heads > 0)
            svc_info("http: closed %d connection%s (first from %s) that sent no complete "
                     "request head in time", heads, heads == 1 ? "" : "s", key);
        if (bodies > 0)
            svc_info("http: closed %d connection%s (first from %s) whose request body did not "
                     "come in time (%lld s windows of at least %llu bytes)", bodies,
                     bodies == 1 ? "" : "s", key, (long long)(t->o.body_ms / 1000),
                     (unsigned long long)(t->o.body_min_rate * (uint64_t)t->o.body_ms / 1000));
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

svc_conns *svc_conns_new(const svc_conns_opts *o, char *err, size_t errlen)
{
    svc_conns *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->o = *o;
    pthread_mutex_init(&t->mu, NULL);
    svc_cond_init_mono(&t->cv);
    int e = pthread_create(&t->watchdog, NULL, watchdog_main, t);
    if (e != 0) {
        snprintf(err, errlen, "cannot start the connection watchdog: %s", strerror(e));
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void svc_conns_free(svc_conns *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->watchdog, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

svc_conn *svc_conns_open(svc_conns *t, int fd, const char *peer)
{
    svc_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->fd = fd;
    c->owner = t->o.owner;
    c->since = svc_now_mono_ms();
    svc_addr_key_of(peer, c->key, sizeof c->key);
    svc_addr a;
    c->counted = t->o.per_ip > 0 && !(svc_addr_parse(peer, strlen(peer), &a) == 0 &&
                                      svc_cidrs_match(t->o.uncounted, &a));
    pthread_mutex_lock(&t->mu);
    if (t->n - t->ncut >= t->o.max_conns) {
        /* Full: shut at once. MHD's own limit is set higher, as a pool
         * thread at its share of it would stop accepting and leave new
         * connections waiting in the backlog instead. */
        shut(t, c);
    } else if (c->counted) {
        unsigned same = 0, same_over = 0;
        for (const svc_conn *o = t->list; o != NULL; o = o->next)
            if (!o->cut && strcmp(o->key, c->key) == 0) {
                same++;
                same_over += o->over;
            }
        if (same >= t->o.per_ip) {
            /* Over the cap: a health check or a node's call may still come
             * (reserved routes), within a small allowance per address and
             * a bounded share in all, so that no address can hold the
             * server's threads with them. */
            if (same_over >= t->o.over_per_ip || t->nover >= t->o.over_share) {
                shut(t, c);
            } else {
                c->over = 1;
                t->nover++;
            }
        }
    }
    t->n++;
    c->next = t->list;
    if (t->list != NULL)
        t->list->prev = c;
    t->list = c;
    pthread_mutex_unlock(&t->mu);
    return c;
}

void svc_conns_close(svc_conns *t, svc_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->list = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    t->n--;
    t->nover -= (unsigned)c->over;
    t->ncut -= (unsigned)c->cut;
    pthread_mutex_unlock(&t->mu);
    free(c);
}

void *svc_conns_owner(const svc_conn *c)
{
    return c != NULL ? c->owner : NULL;
}

int svc_conns_over(svc_conns *t, const svc_conn *c)
{
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&t->mu);
    int over = c->over;
    pthread_mutex_unlock(&t->mu);
    return over;
}

static void phase_set(svc_conns *t, svc_conn *c, int phase)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    c->phase = phase;
    c->since = svc_now_mono_ms();
    c->window_bytes = 0;
    pthread_mutex_unlock(&t->mu);
}

void svc_conns_head(svc_conns *t, svc_conn *c) { phase_set(t, c, PHASE_BODY); }
void svc_conns_app(svc_conns *t, svc_conn *c) { phase_set(t, c, PHASE_APP); }
void svc_conns_idle(svc_conns *t, svc_conn *c) { phase_set(t, c, PHASE_HEAD); }

void svc_conns_body(svc_conns *t, svc_conn *c, size_t n)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    c->window_bytes += n;
    pthread_mutex_unlock(&t->mu);
}

void svc_conns_stats_get(svc_conns *t, svc_conns_stats *out)
{
    pthread_mutex_lock(&t->mu);
    *out = (svc_conns_stats){.open = t->n, .over = t->nover, .cut = t->ncut};
    pthread_mutex_unlock(&t->mu);
}
