/* logfollow.c — followed task logs (logfollow.h). Each follower is a byte
 * queue feeding a live stream, and the offset of the part's log it has
 * queued up to. */
#include "logfollow.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "svc_bstore.h"
#include "svc_log.h"
#include "svc_util.h"

/* What other gateways took shows within this long. */
#define LOGFOLLOW_POLL_MS 500
/* A client this far behind is cut off (it reads the rest with Range). */
#define LOGFOLLOW_MAX_QUEUED ((size_t)16 << 20)
/* Most followers on one gateway. */
#define LOGFOLLOW_MAX 4096

typedef struct follower {
    struct follower *next;
    pthread_mutex_t mu;
    svc_stream *stream;
    char *buf;
    size_t off, len, cap;
    int refs;                 /* the stream's, the list's, the thread's while it looks (mu) */
    int closed, ended, cut;
    int dirty;                /* woken: look now */
    int64_t tenant_id;
    int64_t key_id;           /* the request's API key: re-checked as waits do */
    int revoked;              /* it was revoked: the stream ends saying so (f->mu) */
    char job_id[37];
    int part;
    int64_t have;             /* bytes of the attempt's log queued so far */
    int attempt;              /* that attempt (0: none seen yet) */
} follower;

struct gw_logfollow {
    gw_app *app;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    follower *list;
    int n, stop, woken, started;
};

static void follower_unref(follower *w)
{
    pthread_mutex_lock(&w->mu);
    int last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last) {
        pthread_mutex_destroy(&w->mu);
        free(w->buf);
        free(w);
    }
}

static ssize_t follower_fill(void *cls, char *out, size_t max)
{
    follower *w = cls;
    pthread_mutex_lock(&w->mu);
    ssize_t n;
    if (w->cut) {
        n = -1;
    } else if (w->off < w->len) {
        size_t k = w->len - w->off < max ? w->len - w->off : max;
        memcpy(out, w->buf + w->off, k);
        w->off += k;
        if (w->off == w->len)
            w->off = w->len = 0;
        n = (ssize_t)k;
    } else {
        n = w->ended ? 0 : SVC_STREAM_LATER;
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

static void follower_gone(void *cls)
{
    follower *w = cls;
    pthread_mutex_lock(&w->mu);
    w->closed = 1;
    pthread_mutex_unlock(&w->mu);
    follower_unref(w);
}

/* Queues n bytes (end: and then the body's end); 0, or -1 once closed. */
static int follower_put(follower *w, const void *data, size_t n, int end)
{
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    if (w->closed || w->ended) {
        rc = -1;
    } else if (w->len - w->off + n > LOGFOLLOW_MAX_QUEUED) {
        w->cut = w->closed = 1;
        rc = -1;
    } else if (n > 0) {
        if (w->len + n > w->cap) {
            if (w->off > 0) {
                memmove(w->buf, w->buf + w->off, w->len - w->off);
                w->len -= w->off;
                w->off = 0;
            }
            size_t cap = w->cap ? w->cap : 4096;
            while (cap < w->len + n)
                cap *= 2;
            char *b = cap != w->cap ? realloc(w->buf, cap) : w->buf;
            if (!b) {
                w->cut = w->closed = 1;
                rc = -1;
            } else {
                w->buf = b;
                w->cap = cap;
            }
        }
        if (rc == 0) {
            memcpy(w->buf + w->len, data, n);
            w->len += n;
            w->have += (int64_t)n;
        }
    }
    if (rc == 0 && end)
        w->ended = 1;
    pthread_mutex_unlock(&w->mu);
    svc_stream_wake(w->stream);
    return rc;
}

/* The rest of an ended part's log, from its blob. */
static void follower_finish_from_blob(gw_logfollow *f, follower *w, const char *blob)
{
    int fd = -1;
    uint64_t size = 0;
    if (svc_bstore_open_read(f->app->blobs, blob, &fd, &size) != 0) {
        svc_error("blobs: the log %s of job %s is missing", blob, w->job_id);
        follower_put(w, NULL, 0, 1);
        return;
    }
    char buf[65536];
    uint64_t at = (uint64_t)w->have;
    while (at < size) {
        ssize_t k = pread(fd, buf, sizeof buf, (off_t)at);
        if (k <= 0 || follower_put(w, buf, (size_t)k, 0) != 0)
            break;
        at += (uint64_t)k;
    }
    close(fd);
    follower_put(w, NULL, 0, 1);
}

/* Brings w up to date; 1 when it is over (ended or closed). */
static int follower_look(gw_logfollow *f, follower *w, int revoked)
{
    if (revoked) {
        static const char line[] = "[kowloon] the API key of this stream was revoked: it ends here\n";
        follower_put(w, line, sizeof line - 1, 1);
        return 1;
    }
    pthread_mutex_lock(&w->mu);
    int closed = w->closed;
    int64_t from = w->have;
    pthread_mutex_unlock(&w->mu);
    if (closed)
        return 1;
    gw_task_log lg;
    int rc = gw_store_task_log_read(f->app->store, w->tenant_id, w->job_id, w->part, from, &lg);
    if (rc == -ENOENT) { /* deleted meanwhile */
        follower_put(w, NULL, 0, 1);
        return 1;
    }
    if (rc != 0)
        return 0; /* the next round tries again */
    if (w->attempt && lg.attempt != w->attempt) {
        /* the job was placed again: its new attempt's log follows, from
         * its first byte, after a line that says so */
        char line[96];
        int n = snprintf(line, sizeof line, "[kowloon] attempt %d\n", lg.attempt);
        free(lg.data);
        if (follower_put(w, line, (size_t)n, 0) != 0)
            return 1;
        pthread_mutex_lock(&w->mu);
        w->have = 0;
        pthread_mutex_unlock(&w->mu);
        w->attempt = lg.attempt;
        rc = gw_store_task_log_read(f->app->store, w->tenant_id, w->job_id, w->part, 0, &lg);
        if (rc != 0)
            return rc == -ENOENT ? (follower_put(w, NULL, 0, 1), 1) : 0;
    }
    w->attempt = lg.attempt;
    int over = 0;
    if (lg.blob[0]) {
        follower_finish_from_blob(f, w, lg.blob);
        over = 1;
    } else {
        int ended = strcmp(lg.state, "queued") != 0 && strcmp(lg.state, "running") != 0;
        if ((lg.len && follower_put(w, lg.data, lg.len, 0) != 0) || ended) {
            follower_put(w, NULL, 0, 1);
            over = 1;
        }
    }
    free(lg.data);
    return over;
}

/* Marks the followers whose API key was revoked (one query for all, as
 * for held waits: a revoked key's streams end within the key cache's
 * period). f->mu held on entry and exit, dropped around the query. */
static void keys_check(gw_logfollow *f)
{
    static int64_t ids[LOGFOLLOW_MAX];   /* the follow thread's alone */
    static int active[LOGFOLLOW_MAX];
    int n = 0;
    for (follower *w = f->list; w && n < LOGFOLLOW_MAX; w = w->next)
        if (w->key_id > 0 && !w->revoked)
            ids[n++] = w->key_id;
    if (n == 0)
        return;
    pthread_mutex_unlock(&f->mu);
    int rc = gw_store_keys_active(f->app->store, ids, n, active);
    pthread_mutex_lock(&f->mu);
    for (int i = 0; rc == 0 && i < n; i++) {
        if (active[i])
            continue;
        for (follower *w = f->list; w; w = w->next)
            if (w->key_id == ids[i]) {
                w->revoked = w->dirty = 1;
                f->woken = 1;
            }
    }
}

static void *follow_main(void *arg)
{
    gw_logfollow *f = arg;
    int64_t next_keys = 0;
    int key_ms = f->app->cfg.key_cache_ms > 0 ? (int)f->app->cfg.key_cache_ms : 250;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        if (svc_now_mono_ms() >= next_keys) {
            keys_check(f);
            next_keys = svc_now_mono_ms() + key_ms;
        }
        if (!f->woken) {
            struct timespec ts = svc_deadline_ts(CLOCK_REALTIME, LOGFOLLOW_POLL_MS);
            pthread_cond_timedwait(&f->cv, &f->mu, &ts);
        }
        int all = !f->woken; /* a timed round looks at every follower */
        f->woken = 0;
        follower *todo[LOGFOLLOW_MAX];
        int revoked[LOGFOLLOW_MAX];
        int n = 0;
        for (follower *w = f->list; w && n < LOGFOLLOW_MAX; w = w->next) {
            if (all || w->dirty) {
                w->dirty = 0;
                pthread_mutex_lock(&w->mu);
                w->refs++;
                pthread_mutex_unlock(&w->mu);
                revoked[n] = w->revoked;
                todo[n++] = w;
            }
        }
        pthread_mutex_unlock(&f->mu);
        for (int i = 0; i < n; i++) {
            if (follower_look(f, todo[i], revoked[i])) {
                pthread_mutex_lock(&f->mu);
                for (follower **p = &f->list; *p; p = &(*p)->next) {
                    if (*p == todo[i]) {
                        *p = todo[i]->next;
                        f->n--;
                        svc_stream_release(todo[i]->stream);
                        follower_unref(todo[i]); /* the list's */
                        break;
                    }
                }
                pthread_mutex_unlock(&f->mu);
            }
            follower_unref(todo[i]);
        }
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

gw_logfollow *gw_logfollow_start(gw_app *app)
{
    gw_logfollow *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->app = app;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, follow_main, f) != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    f->started = 1;
    return f;
}

void gw_logfollow_stop(gw_logfollow *f)
{
    if (!f || !f->started)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    f->started = 0;
    pthread_mutex_lock(&f->mu);
    follower *w = f->list;
    f->list = NULL;
    f->n = 0;
    pthread_mutex_unlock(&f->mu);
    while (w) {
        follower *next = w->next;
        follower_put(w, NULL, 0, 1);
        svc_stream_release(w->stream);
        follower_unref(w);
        w = next;
    }
}

void gw_logfollow_free(gw_logfollow *f)
{
    if (!f)
        return;
    gw_logfollow_stop(f);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

int gw_logfollow_open(gw_logfollow *f, svc_req *req, int64_t tenant_id, int64_t key_id,
                      const char *job_id, int part)
{
    if (!f)
        return gw_reply_unavailable(req, "this gateway (shutting down)");
    follower *w = calloc(1, sizeof *w);
    if (!w)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    w->refs = 2; /* the stream's, the list's */
    w->tenant_id = tenant_id;
    w->key_id = key_id;
    w->part = part;
    snprintf(w->job_id, sizeof w->job_id, "%s", job_id);
    pthread_mutex_lock(&f->mu);
    int full = f->stop || f->n >= LOGFOLLOW_MAX;
    pthread_mutex_unlock(&f->mu);
    if (full) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return gw_reply_unavailable(req, "log following (too many followers on this gateway)");
    }
    svc_reply_header(req, "Cache-Control", "no-cache");
    svc_reply_header(req, "X-Accel-Buffering", "no");
    w->stream = svc_reply_stream_live(req, 200, "text/plain; charset=utf-8", follower_fill, w,
                                      follower_gone);
    if (!w->stream) { /* follower_gone ran */
        follower_unref(w);
        return 0;
    }
    pthread_mutex_lock(&f->mu);
    w->dirty = 1;
    w->next = f->list;
    f->list = w;
    f->n++;
    f->woken = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

void gw_logfollow_wake(gw_logfollow *f, const char *job_id)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    for (follower *w = f->list; w; w = w->next)
        if (strcmp(w->job_id, job_id) == 0) {
            w->dirty = 1;
            f->woken = 1;
        }
    if (f->woken)
        pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}
