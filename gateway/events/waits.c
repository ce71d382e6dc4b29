/* waits.c — requests waiting for a job to end (waits.h). Waiters sit on a
 * list; the thread takes those that need a look (woken, or past their
 * deadline) off it, reads their jobs without the lock, and answers those
 * that ended or ran out of time; the others go back. */
#include "waits.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "svc_log.h"
#include "svc_util.h"

/* How often the jobs of every waiter are looked at for ends recorded by
 * another gateway. */
#define WAITS_RECHECK_MS 250
/* Most waiters one look takes. */
#define WAITS_BATCH 256

typedef struct waiter {
    struct waiter *next;
    svc_req *req;
    int64_t tenant_id;
    int64_t key_id;                /* the request's API key: re-checked every key_check_ms */
    int revoked;                   /* it was revoked: answered 401 */
    char job_id[37];
    int wait_s, pending_status;
    int64_t deadline;              /* monotonic ms */
    int look;                      /* look now */
} waiter;

struct gw_waits {
    gw_app *app;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    waiter *list;
    int stop;
    pthread_t thread;
    int key_check_ms;              /* waiters' keys are re-checked this often */
};

int gw_waits_prefer(const char *prefer)
{
    if (!prefer)
        return -1;
    /* Preferences are comma-separated, each token[=value] with optional
     * ";"-parameters: "respond-async, wait=10". */
    for (const char *p = prefer; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (strncasecmp(p, "wait", 4) == 0) {
            const char *q = p + 4;
            while (*q == ' ' || *q == '\t')
                q++;
            if (*q == '=') {
                q++;
                while (*q == ' ' || *q == '\t' || *q == '"')
                    q++;
                if (isdigit((unsigned char)*q)) {
                    long v = strtol(q, NULL, 10);
                    return v > GW_WAIT_MAX_S ? GW_WAIT_MAX_S : (int)v;
                }
            }
        }
        p += strcspn(p, ",");
    }
    return -1;
}

/* 1 when the job object's state is an end. */
static int terminal(const json_t *job)
{
    const char *st = json_string_value(json_object_get(job, "state"));
    return st && (strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0 ||
                  strcmp(st, "cancelled") == 0);
}

/* Replies to req with job (stolen; NULL: PostgreSQL could not be asked):
 * 200 once it has ended, else pending_status (with Location for a 202). */
static void reply_job(svc_req *req, const char *job_id, int wait_s, int pending_status, json_t *job)
{
    char v[32];
    snprintf(v, sizeof(v), "wait=%d", wait_s);
    svc_reply_header(req, "Preference-Applied", v);
    if (!job) {
        gw_reply_unavailable(req, "PostgreSQL");
        return;
    }
    int status = terminal(job) ? 200 : pending_status;
    if (status == 202) {
        char loc[64];
        snprintf(loc, sizeof(loc), "/v1/jobs/%s", job_id);
        svc_reply_header(req, "Location", loc);
    }
    svc_reply_json(req, status, job);
}

/* Answers w's request with job (stolen, may be NULL), or 401 when its key
 * was revoked while it waited, resumes it and frees w. Not under mu. */
static void answer(waiter *w, json_t *job)
{
    if (w->revoked) {
        json_decref(job);
        svc_reply_header(w->req, "WWW-Authenticate", "Bearer realm=\"kowloon\"");
        svc_reply_error(w->req, 401, "unauthenticated", NULL, NULL,
                        "the API key was revoked while the request waited");
    } else {
        reply_job(w->req, w->job_id, w->wait_s, w->pending_status, job);
    }
    svc_req_resume(w->req);
    free(w);
}

/* Marks the waiters whose key was revoked, to be answered 401 at once.
 * One query for all; mu held on entry and exit (dropped around it). */
static void keys_check(gw_waits *ws)
{
    int n = 0;
    for (waiter *w = ws->list; w; w = w->next)
        n += w->key_id > 0;
    if (n == 0)
        return;
    int64_t *ids = calloc((size_t)n, sizeof *ids);
    int *active = calloc((size_t)n, sizeof *active);
    int k = 0;
    for (waiter *w = ws->list; ids && w && k < n; w = w->next)
        if (w->key_id > 0)
            ids[k++] = w->key_id;
    pthread_mutex_unlock(&ws->mu);
    int rc = ids && active ? gw_store_keys_active(ws->app->store, ids, k, active) : -ENOMEM;
    pthread_mutex_lock(&ws->mu);
    /* the list may have changed meanwhile: waiters are matched by key id */
    for (int i = 0; rc == 0 && i < k; i++) {
        if (active[i])
            continue;
        for (waiter *w = ws->list; w; w = w->next)
            if (w->key_id == ids[i])
                w->revoked = w->look = 1;
    }
    free(ids);
    free(active);
}

/* The job as it is now, for a request that cannot wait. */
static json_t *job_now(gw_waits *ws, int64_t tenant_id, const char *job_id)
{
    json_t *job = NULL;
    return gw_store_job_get(ws->app->store, tenant_id, job_id, &job) == 0 ? job : NULL;
}

/* The ids of up to max waiters' jobs, for one query. mu held. */
static int collect_ids(gw_waits *ws, char (*ids)[37], int max)
{
    int n = 0;
    for (waiter *w = ws->list; w && n < max; w = w->next)
        memcpy(ids[n++], w->job_id, 37);
    return n;
}

/* Ends recorded elsewhere: one query for the jobs of the waiters (up to
 * WAITS_BATCH * 4), marking those whose job ended to be looked at. mu held
 * on entry and exit (dropped around the query). */
static void ends_check(gw_waits *ws)
{
    static char ids[WAITS_BATCH * 4][37];   /* only the wait thread uses it */
    int n = collect_ids(ws, ids, WAITS_BATCH * 4);
    pthread_mutex_unlock(&ws->mu);
    int *ended = calloc((size_t)n, sizeof(int));
    int rc = ended ? gw_store_jobs_ended(ws->app->store, (const char (*)[37])ids, n, ended) : -ENOMEM;
    pthread_mutex_lock(&ws->mu);
    for (waiter *w = ws->list; rc == 0 && w; w = w->next)
        for (int i = 0; i < n; i++)
            if (ended[i] && strcmp(ids[i], w->job_id) == 0)
                w->look = 1;
    free(ended);
}

/* Takes off the list, into due, up to WAITS_BATCH waiters that need a look
 * (marked, past their deadline, or all at a stop); returns how many. *next
 * is lowered to the earliest deadline of those left. mu held. */
static int take_due(gw_waits *ws, waiter **due, int64_t now, int64_t *next)
{
    int nd = 0;
    for (waiter **pp = &ws->list; *pp && nd < WAITS_BATCH;) {
        waiter *w = *pp;
        if (w->look || w->deadline <= now || ws->stop) {
            *pp = w->next;
            due[nd++] = w;
            continue;
        }
        if (w->deadline < *next)
            *next = w->deadline;
        pp = &w->next;
    }
    return nd;
}

/* Looks at one waiter taken off the list: answers it (and frees it) when its
 * key was revoked, its job ended or is gone, or its time ran out (or the
 * thread stops); else puts it back on the list. Not under mu on entry. */
static void look_at(gw_waits *ws, waiter *w, int stopping)
{
    if (w->revoked) {
        answer(w, NULL);
        return;
    }
    json_t *job = NULL;
    int rc = gw_store_job_get(ws->app->store, w->tenant_id, w->job_id, &job);
    int out_of_time = svc_now_mono_ms() >= w->deadline || stopping;
    if ((rc == 0 && terminal(job)) || out_of_time) {
        answer(w, rc == 0 ? job : NULL);
        return;
    }
    if (rc == -ENOENT) {
        /* ended and deleted (DELETE /v1/jobs/{id}) before we looked */
        svc_reply_error(w->req, 404, "not_found", NULL, NULL, "no such job");
        svc_req_resume(w->req);
        free(w);
        return;
    }
    /* Woken by a change that was not its end (a re-queue), or
     * PostgreSQL did not answer: it waits on. */
    json_decref(job);
    w->look = 0;
    pthread_mutex_lock(&ws->mu);
    w->next = ws->list;
    ws->list = w;
    pthread_mutex_unlock(&ws->mu);
}

/* The wait thread: looks for the ends of the waiters' jobs (one query
 * every WAITS_RECHECK_MS), answers the waiters whose job ended or whose time
 * ran out, and at a stop answers every one with its job as it is. */
static void *waits_main(void *arg)
{
    gw_waits *ws = arg;
    int64_t next_recheck = 0, next_keys = 0;
    pthread_mutex_lock(&ws->mu);
    while (!ws->stop || ws->list) {
        int64_t now = svc_now_mono_ms();
        if (ws->list && now >= next_keys && !ws->stop) {
            keys_check(ws);
            now = svc_now_mono_ms();
            next_keys = now + ws->key_check_ms;
        }
        if (ws->list && now >= next_recheck && !ws->stop) {
            ends_check(ws);
            next_recheck = svc_now_mono_ms() + WAITS_RECHECK_MS;
            now = svc_now_mono_ms();
        }
        waiter *due[WAITS_BATCH];
        int64_t next = ws->list ? (next_recheck < next_keys ? next_recheck : next_keys) : now + 1000;
        int nd = take_due(ws, due, now, &next);
        if (nd == 0) {
            struct timespec ts = {.tv_sec = next / 1000, .tv_nsec = (long)(next % 1000) * 1000000L};
            pthread_cond_timedwait(&ws->cv, &ws->mu, &ts);
            continue;
        }
        int stopping = ws->stop;
        pthread_mutex_unlock(&ws->mu);
        for (int i = 0; i < nd; i++)
            look_at(ws, due[i], stopping);
        pthread_mutex_lock(&ws->mu);
    }
    pthread_mutex_unlock(&ws->mu);
    return NULL;
}

gw_waits *gw_waits_start(gw_app *app)
{
    gw_waits *ws = calloc(1, sizeof(*ws));
    if (!ws)
        return NULL;
    ws->app = app;
    ws->key_check_ms = app->cfg.key_cache_ms > 0 ? app->cfg.key_cache_ms : 250;
    pthread_mutex_init(&ws->mu, NULL);
    svc_cond_init_mono(&ws->cv);
    if (pthread_create(&ws->thread, NULL, waits_main, ws) != 0) {
        pthread_cond_destroy(&ws->cv);
        pthread_mutex_destroy(&ws->mu);
        free(ws);
        return NULL;
    }
    return ws;
}

void gw_waits_stop(gw_waits *ws)
{
    if (!ws)
        return;
    pthread_mutex_lock(&ws->mu);
    int was = ws->stop;
    ws->stop = 1;
    pthread_cond_signal(&ws->cv);
    pthread_mutex_unlock(&ws->mu);
    if (!was)
        pthread_join(ws->thread, NULL);
}

void gw_waits_free(gw_waits *ws)
{
    if (!ws)
        return;
    gw_waits_stop(ws);
    pthread_cond_destroy(&ws->cv);
    pthread_mutex_destroy(&ws->mu);
    free(ws);
}

void gw_waits_add(gw_waits *ws, svc_req *req, int suspended, int64_t tenant_id, int64_t key_id,
                  const char *job_id, int wait_s, int pending_status)
{
    if (!suspended && svc_req_suspend(req) != 0) {
        /* The server stops: the job as it is, now. */
        reply_job(req, job_id, 0, pending_status, job_now(ws, tenant_id, job_id));
        return;
    }
    waiter *w = calloc(1, sizeof(*w));
    if (!w) {
        reply_job(req, job_id, 0, pending_status, job_now(ws, tenant_id, job_id));
        svc_req_resume(req);
        return;
    }
    w->req = req;
    w->tenant_id = tenant_id;
    w->key_id = key_id;
    snprintf(w->job_id, sizeof(w->job_id), "%s", job_id);
    w->wait_s = wait_s;
    w->pending_status = pending_status;
    w->deadline = svc_now_mono_ms() + (int64_t)wait_s * 1000;
    w->look = 1;   /* it may have ended before it was added */
    pthread_mutex_lock(&ws->mu);
    int stopped = ws->stop;
    if (!stopped) {
        w->next = ws->list;
        ws->list = w;
        pthread_cond_signal(&ws->cv);
    }
    pthread_mutex_unlock(&ws->mu);
    if (stopped)
        answer(w, job_now(ws, tenant_id, job_id));
}

void gw_waits_job_changed(gw_waits *ws, const char *job_id)
{
    if (!ws)
        return;
    pthread_mutex_lock(&ws->mu);
    int hit = 0;
    for (waiter *w = ws->list; w; w = w->next)
        if (strcmp(w->job_id, job_id) == 0)
            w->look = hit = 1;
    if (hit)
        pthread_cond_signal(&ws->cv);
    pthread_mutex_unlock(&ws->mu);
}
