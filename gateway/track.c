/* track.c — one thread per dispatched run: posts the run to its node,
 * long-polls it to the end, and records the outcome in PostgreSQL through
 * the fenced transitions of the store, so a late or duplicate report
 * changes nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "scheduler_int.h"
#include "svc_client.h"
#include "svc_log.h"
#include "svc_util.h"

/* A gateway-side deadline beyond the job's own timeout, which the node
 * enforces first; past it the node is presumed stuck. */
#define TIMEOUT_GRACE_S 15
#define POLL_WAIT_S 20
/* How often a followed run checks PostgreSQL for a cancel request that the
 * API could not deliver itself. */
#define CANCEL_CHECK_MS 5000

typedef struct tracker {
    gw_sched *s;
    gw_dispatch d;
    int fresh;
} tracker;

int sched__running_on(gw_sched *s, const char *node_id)
{
    int n = 0;
    for (int i = 0; i < s->ntracked; i++)
        n += strcmp(s->tracked[i].node_id, node_id) == 0;
    return n;
}

int sched__requeue(gw_sched *s, const char *job_id, int attempt, int uncounted,
                   const char *code, const char *message)
{
    gw_backoff bo = {s->app->cfg.retry_base_ms, s->app->cfg.retry_max_s};
    gw_requeued out;
    int rc = gw_store_job_requeue(s->app->store, job_id, attempt, uncounted, code, message, &bo, &out);
    if (rc == 0 && out.requeued) {
        gw_queue_push_queued(s->app->queue, &out.q);
        gw_sched_wake(s);
    }
    return rc;
}

static void node_avoid(gw_sched *s, const char *node_id, int ms)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nnodes; i++)
        if (strcmp(s->nodes[i].n.id, node_id) == 0)
            s->nodes[i].avoid_until_ms = svc_now_mono_ms() + ms;
    pthread_mutex_unlock(&s->mu);
}

static int node_up(gw_sched *s, const char *node_id)
{
    int up = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nnodes; i++)
        if (strcmp(s->nodes[i].n.id, node_id) == 0)
            up = s->nodes[i].n.up;
    pthread_mutex_unlock(&s->mu);
    return up;
}

static void untrack(gw_sched *s, const gw_dispatch *d)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ntracked; i++)
        if (strcmp(s->tracked[i].job_id, d->job_id) == 0 && s->tracked[i].attempt == d->attempt) {
            s->tracked[i] = s->tracked[--s->ntracked];
            break;
        }
    s->wake = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Posts the run. 0 when the node accepted it; otherwise the job has been
 * put back or failed here and the tracker ends. */
static int run_post(tracker *t, const char *url)
{
    gw_sched *s = t->s;
    gw_dispatch *d = &t->d;
    json_t *inputs = gw_blob_to_json(d->inputs_meta, d->inputs, d->inputs_len, 1);
    /* Inputs in the blob store go as references, which the node fetches
     * from the gateway as raw bytes (inputs of rows from before the blob
     * store go inline, in base64); outputs come back the same way. */
    json_t *body = json_pack("{s:s, s:i, s:s, s:O, s:o, s:i, s:s, s:i, s:b}", "job_id", d->job_id,
                             "attempt", d->attempt, "kernel", d->kernel, "params", d->params,
                             "inputs", inputs ? inputs : json_object(), "timeout_s", d->timeout_s,
                             "backend", d->backend, "gpus", d->gpus, "output_blobs", 1);
    svc_response r;
    int rc = svc_http_call("POST", url, s->app->cfg.cluster_token, body, 30000, &r);
    json_decref(body);
    free(d->inputs);   /* the node has them now; a long run need not hold them here */
    d->inputs = NULL;
    int ok = rc == 0 && (r.status == 200 || r.status == 202);
    if (!ok) {
        const char *why = rc ? r.error : json_string_value(json_object_get(
                                         json_object_get(r.json, "error"), "message"));
        svc_warn("dispatch of job %s attempt %d to %s failed: %s%s%d", d->job_id, d->attempt,
                 d->node_name, why ? why : "", rc ? "" : " status ", rc ? 0 : r.status);
        if (rc == 0 && r.status == 422) {
            gw_store_job_fail(s->app->store, d->job_id, d->attempt, "failed", "invalid_argument",
                              why ? why : "the node refused the job's arguments");
        } else {
            /* Unreachable, full or draining: the run never started and the
             * attempt is given back. Any other refusal (a wrong cluster
             * token, a node that cannot host the job) counts, so a job no
             * node will take ends failed instead of bouncing for ever. */
            int uncounted = rc != 0 || r.status == 503 || r.status == 429;
            node_avoid(s, d->node_id, rc ? 2000 : 500);
            sched__requeue(s, d->job_id, d->attempt, uncounted, "dispatch_failed",
                           why ? why : "dispatch failed");
        }
    }
    svc_response_clear(&r);
    return ok ? 0 : -EIO;
}

/* The outputs of a succeeded run into b: references to the blobs the node
 * pushed ({"blob"}), or, from a node that sends bytes inline, packed as
 * before. 0, or -EINVAL with msg naming the output. */
static int outputs_from_run(gw_blob *b, const json_t *outputs, char *msg, size_t msglen)
{
    const char *name;
    json_t *v;
    int refs = 0;
    json_object_foreach((json_t *)outputs, name, v)
        refs += json_object_get(v, "blob") != NULL;
    if (refs == 0)
        return gw_blob_from_json(b, outputs, msg, msglen);
    if (!b->meta && !(b->meta = json_array()))
        return -ENOMEM;
    json_object_foreach((json_t *)outputs, name, v) {
        svc_tensor t;
        char why[200];
        int bad = svc_tensor_from_json(v, 0, &t, why, sizeof(why)) != 0;
        if (bad || t.blob[0] == '\0') {
            snprintf(msg, msglen, "%s: %s", name, bad ? why : "not a blob reference");
            svc_tensor_free(&t);
            return -EINVAL;
        }
        int rc = gw_blob_add_ref(b, name, &t, t.blob);
        svc_tensor_free(&t);
        if (rc)
            return rc;
    }
    return 0;
}

/* Records a terminal run. Returns 1 once PostgreSQL has its outcome (or
 * has moved on from this attempt), 0 when it has not (the gateway stopped
 * first, or the store failed): then the node must keep the run. */
static int run_finish(tracker *t, json_t *run)
{
    gw_sched *s = t->s;
    gw_dispatch *d = &t->d;
    const char *state = json_string_value(json_object_get(run, "state"));
    json_t *err = json_object_get(run, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    code = code ? code : "kernel_error";
    msg = msg ? msg : "the run failed";
    int rc = 0;
    if (state && strcmp(state, "succeeded") == 0) {
        gw_blob b = {0};
        char why[256] = "out of memory";
        const char *backend = json_string_value(json_object_get(run, "backend"));
        if (outputs_from_run(&b, json_object_get(run, "outputs"), why, sizeof(why)) != 0) {
            rc = gw_store_job_fail(s->app->store, d->job_id, d->attempt, "failed", "bad_result", why);
        } else {
            char *meta = json_dumps(b.meta, JSON_COMPACT);
            json_t *info = json_object_get(run, "info");
            char *info_s = json_is_object(info) ? json_dumps(info, JSON_COMPACT) : NULL;
            /* PostgreSQL may be down for a while: the node keeps the run, so
             * retry until the result is stored or the attempt is stale. */
            while ((rc = gw_store_job_succeed(s->app->store, d->job_id, d->attempt,
                                              backend ? backend : "cpu", info_s ? info_s : "{}",
                                              meta, b.data, b.len)) == -EIO &&
                   !s->stop)
                svc_sleep_ms(1000);
            /* PostgreSQL refused the result itself (too large for one
             * value, say): retrying would not help, the job fails. */
            if (rc == -EPROTO)
                rc = gw_store_job_fail(s->app->store, d->job_id, d->attempt, "failed", "bad_result",
                                       "PostgreSQL refused to store the result (see the gateway log)");
            free(meta);
            free(info_s);
        }
        gw_blob_free(&b);
    } else if (state && strcmp(state, "cancelled") == 0 && strcmp(code, "timeout") != 0) {
        rc = sched__requeue(s, d->job_id, d->attempt, 0, "cancelled", "the node cancelled the run");
    } else if (strcmp(code, "backend_error") == 0) {
        rc = sched__requeue(s, d->job_id, d->attempt, 0, code, msg);
    } else {
        while ((rc = gw_store_job_fail(s->app->store, d->job_id, d->attempt, "failed", code, msg)) == -EIO &&
               !s->stop)
            svc_sleep_ms(1000);
    }
    if (rc == -EAGAIN)
        svc_info("job %s attempt %d: late report from %s ignored (attempt no longer current)",
                 d->job_id, d->attempt, d->node_name);
    else
        svc_debug("job %s attempt %d: %s on %s", d->job_id, d->attempt, state ? state : "?", d->node_name);
    return rc == 0 || rc == -EAGAIN;
}

/* Tells the node its finished run is recorded, so that it frees the
 * outputs now rather than keeping them for minutes. */
static void run_release(tracker *t)
{
    gw_dispatch *d = &t->d;
    char url[700];
    snprintf(url, sizeof(url), "%s/v1/runs/%s.%d/release", d->node_url, d->job_id, d->attempt);
    svc_response r;
    if (svc_http_call("POST", url, t->s->app->cfg.cluster_token, NULL, 5000, &r) != 0 ||
        (r.status != 200 && r.status != 404))
        svc_debug("job %s attempt %d: release on %s not confirmed (%s, status %d)", d->job_id,
                  d->attempt, d->node_name, r.error, r.status);
    svc_response_clear(&r);
}

/* A cancel asked for between the claim and the node's accepting the run
 * (or while no gateway followed it) found no run to stop: stop it now.
 * Returns 1 once the node has been asked. */
static int cancel_if_asked(tracker *t)
{
    gw_dispatch *d = &t->d;
    if (gw_store_job_cancel_asked(t->s->app->store, d->job_id, d->attempt) != 1)
        return 0;
    char url[700];
    snprintf(url, sizeof(url), "%s/v1/runs/%s.%d", d->node_url, d->job_id, d->attempt);
    svc_response r;
    int rc = svc_http_call("DELETE", url, t->s->app->cfg.cluster_token, NULL, 5000, &r);
    int ok = rc == 0 && (r.status == 200 || r.status == 404);
    svc_info("job %s attempt %d: cancel asked for; %s %s", d->job_id, d->attempt,
             ok ? "stop sent to" : "could not reach", d->node_name);
    svc_response_clear(&r);
    return ok;
}

static void *tracker_main(void *arg)
{
    tracker *t = arg;
    gw_sched *s = t->s;
    gw_dispatch *d = &t->d;
    char url[700];
    snprintf(url, sizeof(url), "%s/v1/runs", d->node_url);
    if (t->fresh && run_post(t, url) != 0)
        goto out;
    /* A run followed again after a restart keeps the deadline it started
     * with: ran_ms is how long ago it started, by PostgreSQL's clock. */
    int64_t deadline = svc_now_mono_ms() + (int64_t)(d->timeout_s + TIMEOUT_GRACE_S) * 1000;
    if (!t->fresh)
        deadline -= d->ran_ms;
    int failures = 0, cancel_sent = 0, last_look = 0;
    int64_t next_cancel_check = 0;
    while (!s->stop && s->leader) {
        int64_t now = svc_now_mono_ms();
        if (!cancel_sent && now >= next_cancel_check) {
            cancel_sent = cancel_if_asked(t);
            next_cancel_check = now + CANCEL_CHECK_MS;
        }
        int64_t left_ms = deadline - now;
        /* Past the deadline, one last look without waiting first: a run
         * that ended while no gateway followed it is collected, not failed. */
        if (left_ms <= 0 && !last_look) {
            last_look = 1;
            left_ms = 0;
        } else if (left_ms <= 0) {
            snprintf(url, sizeof(url), "%s/v1/runs/%s.%d", d->node_url, d->job_id, d->attempt);
            svc_response r;
            svc_http_call("DELETE", url, s->app->cfg.cluster_token, NULL, 5000, &r);
            svc_response_clear(&r);
            gw_store_job_fail(s->app->store, d->job_id, d->attempt, "failed", "timeout",
                              "no result from the node within timeout_s plus grace");
            break;
        }
        int64_t wait_ms = left_ms < POLL_WAIT_S * 1000 ? left_ms : POLL_WAIT_S * 1000;
        snprintf(url, sizeof(url), "%s/v1/runs/%s.%d?wait=%.3f", d->node_url, d->job_id,
                 d->attempt, (double)wait_ms / 1000);
        svc_response r;
        int rc = svc_http_call("GET", url, s->app->cfg.cluster_token, NULL, wait_ms + 10000, &r);
        if (rc == 0 && r.status == 200) {
            failures = 0;
            const char *state = json_string_value(json_object_get(r.json, "state"));
            if (state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
                          strcmp(state, "cancelled") == 0)) {
                int recorded = run_finish(t, r.json);
                svc_response_clear(&r);
                if (recorded)
                    run_release(t);
                break;
            }
        } else if (rc == 0 && r.status == 404) {
            /* The node no longer knows the run: it restarted. */
            svc_response_clear(&r);
            sched__requeue(s, d->job_id, d->attempt, 0, "node_lost",
                           "the node restarted and lost the run");
            break;
        } else {
            failures++;
            if (!node_up(s, d->node_id)) {
                /* The reaper re-queues the jobs of down nodes. */
                svc_response_clear(&r);
                break;
            }
            if (failures == 1)
                svc_warn("job %s: cannot poll node %s: %s (status %d); retrying", d->job_id,
                         d->node_name, rc ? r.error : "", r.status);
            svc_sleep_ms(500);
        }
        svc_response_clear(&r);
    }
out:
    untrack(s, d);
    gw_dispatch_clear(d);
    free(t);
    return NULL;
}

int sched__track(gw_sched *s, gw_dispatch *d, int fresh)
{
    int rc = 0;
    tracker *t = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ntracked; i++)
        if (strcmp(s->tracked[i].job_id, d->job_id) == 0 && s->tracked[i].attempt == d->attempt)
            rc = -EEXIST;
    if (!rc && s->ntracked == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        sched__run *p = realloc(s->tracked, sizeof(*p) * (size_t)cap);
        if (p) {
            s->tracked = p;
            s->cap = cap;
        } else {
            rc = -ENOMEM;
        }
    }
    if (!rc && !(t = calloc(1, sizeof(*t))))
        rc = -ENOMEM;
    if (!rc) {
        sched__run *run = &s->tracked[s->ntracked++];
        memcpy(run->job_id, d->job_id, sizeof(run->job_id));
        memcpy(run->node_id, d->node_id, sizeof(run->node_id));
        run->attempt = d->attempt;
        t->s = s;
        t->d = *d;
        t->fresh = fresh;
        memset(d, 0, sizeof(*d));
    }
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        gw_dispatch_clear(d);
        return rc;
    }
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    if (pthread_create(&th, &attr, tracker_main, t) != 0) {
        pthread_attr_destroy(&attr);
        untrack(s, &t->d);
        gw_dispatch_clear(&t->d);
        free(t);
        return -EAGAIN;
    }
    pthread_attr_destroy(&attr);
    return 0;
}
