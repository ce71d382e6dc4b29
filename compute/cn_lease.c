/* cn_lease.c — the node's two exchanges with the gateway (cn_lease.h). The poller
 * holds one long poll open at a time; the reporter batches every run that
 * ended since its last report. A run leaves this node only when the gateway
 * has answered that it recorded it (or that the attempt is stale), so a
 * report lost on the way is sent again. */
#include "cn_lease.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cn_args.h"
#include "cn_cred.h"
#include "svc_client.h"
#include "svc_log.h"
#include "svc_util.h"

/* How long the gateway may hold a poll with nothing to hand out; a node
 * that leaves is answered at once (its deregistration wakes the poll). */
#define CN_LEASE_WAIT_MS 10000
#define CN_LEASE_TIMEOUT_MS (CN_LEASE_WAIT_MS + 15000)
#define CN_REPORT_TIMEOUT_MS 30000
/* Most runs one report carries. */
#define CN_REPORT_MAX 256
#define CN_BACKOFF_MIN_MS 200
/* Least time between two reports. Under load runs end one after another:
 * each sent alone would cost an exchange and a statement at the gateway;
 * waiting this long after the previous report gathers those that end
 * meanwhile, while a run ending on an idle node is reported at once. */
#define CN_REPORT_GAP_MS 2
#define CN_BACKOFF_MAX_MS 5000

struct cn_lease {
    char gateway[512];
    const cn_node *node;
    cn_register *reg;
    pthread_mutex_t mu;
    pthread_cond_t cond;       /* wakes the threads: stop, or a refusal to report */
    int stop, draining;
    int polls_stopped;         /* no new poll: the node is about to leave */
    json_t *refused;           /* reports of runs this node could not take (mu) */
    pthread_t poller, reporter;
    int poller_started, reporter_started;
};

/* Sleeps ms or until stop is asked (or, with on_refusal, a refusal is
 * waiting to be reported). Returns 1 when stopping. */
static int cn__lease_sleep(cn_lease *l, int64_t ms, int on_refusal)
{
    int64_t deadline = svc_now_mono_ms() + ms;
    struct timespec ts = {.tv_sec = deadline / 1000, .tv_nsec = (long)(deadline % 1000) * 1000000L};

    pthread_mutex_lock(&l->mu);
    while (!l->stop && !(on_refusal && json_array_size(l->refused) > 0) &&
           svc_now_mono_ms() < deadline)
        pthread_cond_timedwait(&l->cond, &l->mu, &ts);
    int stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

/* 1 once cn_lease_stop was called. */
static int cn__stopping(cn_lease *l)
{
    pthread_mutex_lock(&l->mu);
    int stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

/* Queues the report of a run this node did not take. retry: the gateway
 * places it again without counting the attempt (full, draining). */
static void cn__refuse(cn_lease *l, const char *job_id, int attempt, const char *code,
                       const char *message, int retry)
{
    char run_id[CN_RUN_ID_MAX];
    snprintf(run_id, sizeof run_id, "%s.%d", job_id, attempt);
    json_t *rep = json_pack("{s:s, s:s, s:i, s:s, s:{s:s, s:s}, s:b}", "run_id", run_id, "job_id",
                            job_id, "attempt", attempt, "state", "refused", "error", "code", code,
                            "message", message, "retry", retry);
    svc_warn("run refused run=%s code=%s message=\"%s\"", run_id, code, message);
    pthread_mutex_lock(&l->mu);
    if (!rep || json_array_append_new(l->refused, rep) < 0)
        svc_error("run %s: out of memory queueing its refusal; the gateway finds it lost", run_id);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
}

/* Starts one run the gateway handed out (the body of a node run request),
 * or reports why not. A run already here is left as it is. */
static void cn__take(cn_lease *l, const json_t *body)
{
    cn_runs *runs = l->node->runs;
    cn_run_req rq;
    kl_err err = {{0}, {0}};
    int status;
    json_t *have = NULL;

    if (cn_run_req_ident(body, &rq, &status, &err) < 0) {
        svc_error("lease: a run without a usable job_id/attempt was ignored: %s", err.message);
        return;
    }
    if (cn_runs_get(runs, rq.run_id, 0, 0, &have) == 0) {
        json_decref(have);
        return;
    }
    char job_id[CN_JOB_ID_MAX + 1];
    int attempt = rq.attempt;
    snprintf(job_id, sizeof job_id, "%s", rq.job_id);
    if (cn_run_req_decode(body, &rq, &status, &err) < 0) {
        cn__refuse(l, job_id, attempt, "invalid_argument", err.message, 0);
        return;
    }
    int rc = cn_runs_submit(runs, &rq, NULL, &err);
    cn_run_req_clear(&rq);
    switch (rc) {
    case CN_RUN_NEW:
    case CN_RUN_EXISTING:
        break;
    case CN_EOVERLOADED:
        cn__refuse(l, job_id, attempt, "overloaded", "every slot of the node is busy", 1);
        break;
    case CN_EDRAINING:
        cn__refuse(l, job_id, attempt, "draining", "the node is shutting down", 1);
        break;
    case CN_ENOTSUP:
        cn__refuse(l, job_id, attempt, "dispatch_failed", err.message, 0);
        break;
    default:
        cn__refuse(l, job_id, attempt, "overloaded", "the node is out of memory", 1);
        break;
    }
}

/* Cancels the runs named in cancels ([{job_id, attempt}]). */
static void cn__cancels(cn_lease *l, const json_t *cancels)
{
    size_t i;
    const json_t *c;
    json_array_foreach(cancels, i, c) {
        const char *job = json_string_value(json_object_get(c, "job_id"));
        json_int_t attempt = json_integer_value(json_object_get(c, "attempt"));
        if (!job)
            continue;
        char run_id[CN_RUN_ID_MAX];
        snprintf(run_id, sizeof run_id, "%s.%lld", job, (long long)attempt);
        json_t *run = NULL;
        if (cn_runs_cancel(l->node->runs, run_id, 0, &run) == 0)
            svc_info("run cancel from the gateway run=%s", run_id);
        json_decref(run);
    }
}

/* Logs a failed exchange at WARN when its kind (the status, or the
 * transport error's first words) differs from last, which it updates. */
static void cn__exchange_problem(const char *what, const svc_response *resp, char *last,
                                 size_t len)
{
    char key[320];
    const char *msg = json_string_value(
        json_object_get(json_object_get(resp->json, "error"), "message"));
    if (resp->status)
        snprintf(key, sizeof key, "%s HTTP %d", what, resp->status);
    else
        snprintf(key, sizeof key, "%s %.*s", what, (int)strcspn(resp->error, ":"), resp->error);
    if (strcmp(key, last) != 0) {
        if (resp->status)
            svc_warn("%s failed: HTTP %d: %s (retrying)", what, resp->status,
                     msg ? msg : "no reason given");
        else
            svc_warn("%s failed: %s (retrying)", what, resp->error);
        snprintf(last, len, "%s", key);
    }
}

/* 1 once no new poll may start. */
static int cn__polls_stopped(cn_lease *l)
{
    pthread_mutex_lock(&l->mu);
    int stop = l->stop || l->polls_stopped;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

/* The poller: one lease poll at a time, for as many runs as there are free
 * slots (none while draining); takes the runs and cancels each answer
 * brings, and backs off while the gateway does not answer. */
static void *cn__poller_main(void *arg)
{
    cn_lease *l = arg;
    int64_t backoff = CN_BACKOFF_MIN_MS;
    char problem[320] = "";

    while (!cn__polls_stopped(l)) {
        char id[64], url[700];
        if (!cn_register_node_id(l->reg, id)) {
            if (cn__lease_sleep(l, CN_BACKOFF_MIN_MS, 0))
                break;
            continue;
        }
        pthread_mutex_lock(&l->mu);
        int draining = l->draining;
        pthread_mutex_unlock(&l->mu);
        uint64_t seq;
        int max = cn_runs_free_slots(l->node->runs, &seq);
        /* seq lets the gateway tell a report sent meanwhile, with more
         * free slots, from an older one. */
        json_t *body = json_pack("{s:i, s:i, s:I}", "max", draining ? 0 : max, "wait_ms",
                                 CN_LEASE_WAIT_MS, "seq", (json_int_t)seq);
        snprintf(url, sizeof url, "%s/v1/cluster/nodes/%s/lease", l->gateway, id);
        svc_response resp;
        char cred[CN_CRED_SIZE];
        cn_cred_get(l->node->cred, cred);
        svc_http_call("POST", url, cred, body, CN_LEASE_TIMEOUT_MS, &resp);
        memset(cred, 0, sizeof cred);
        json_decref(body);
        if (resp.status == 200) {
            if (problem[0])
                svc_info("lease: gateway answers again gateway=%s", l->gateway);
            problem[0] = '\0';
            backoff = CN_BACKOFF_MIN_MS;
            size_t i;
            const json_t *run;
            json_array_foreach(json_object_get(resp.json, "runs"), i, run)
                cn__take(l, run);
            cn__cancels(l, json_object_get(resp.json, "cancel"));
            svc_response_clear(&resp);
            continue;
        }
        /* 404: the gateway forgot this node; the heartbeat registers again. */
        cn__exchange_problem("lease", &resp, problem, sizeof problem);
        svc_response_clear(&resp);
        if (cn__lease_sleep(l, backoff, 0))
            break;
        backoff = backoff * 2 > CN_BACKOFF_MAX_MS ? CN_BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

/* Removes from pending every report whose run_id is in recorded, releasing
 * the run; returns how many went. */
static int cn__settle(cn_lease *l, json_t *pending, const json_t *recorded)
{
    int gone = 0;
    for (size_t i = json_array_size(pending); i-- > 0;) {
        const char *rid = json_string_value(json_object_get(json_array_get(pending, i), "run_id"));
        size_t k;
        const json_t *r;
        int done = 0;
        json_array_foreach(recorded, k, r)
            if (rid && json_is_string(r) && strcmp(json_string_value(r), rid) == 0) {
                done = 1;
                break;
            }
        if (!done)
            continue;
        cn_runs_release(l->node->runs, rid);  /* CN_ENOENT for a refusal */
        json_array_remove(pending, i);
        gone++;
    }
    return gone;
}

/* The reporter: sends every run that ended (and every refusal) in batches,
 * forgetting each once the gateway lists it as recorded, and sending the
 * others again after a back-off. */
static void *cn__reporter_main(void *arg)
{
    cn_lease *l = arg;
    json_t *pending = json_array();
    int64_t backoff = CN_BACKOFF_MIN_MS, last_sent = 0;
    char problem[320] = "";

    while (pending && !cn__stopping(l)) {
        size_t room = CN_REPORT_MAX - json_array_size(pending);
        /* Idle, this waits 200 ms for runs to end: progress reports of
         * every run go along at most that often, in one exchange. */
        if (room > 0)
            cn_runs_take_ended(l->node->runs, json_array_size(pending) ? 0 : 200, (int)room,
                               pending);
        int64_t gap = last_sent + CN_REPORT_GAP_MS - svc_now_mono_ms();
        if (json_array_size(pending) > 0 && gap > 0 && json_array_size(pending) < CN_REPORT_MAX) {
            if (cn__lease_sleep(l, gap, 0))
                break;
            cn_runs_take_ended(l->node->runs, 0, CN_REPORT_MAX - (int)json_array_size(pending),
                               pending);
        }
        json_t *progress = json_array();
        if (progress)
            cn_runs_take_progress(l->node->runs, progress);
        pthread_mutex_lock(&l->mu);
        if (json_array_size(l->refused) > 0) {
            json_array_extend(pending, l->refused);
            json_array_clear(l->refused);
        }
        pthread_mutex_unlock(&l->mu);
        char id[64], url[700];
        if ((json_array_size(pending) == 0 && json_array_size(progress) == 0) ||
            !cn_register_node_id(l->reg, id)) {
            json_decref(progress);
            if (json_array_size(pending) == 0)
                continue;
            if (cn__lease_sleep(l, CN_BACKOFF_MIN_MS, 0))
                break;
            continue;
        }
        uint64_t seq;
        int free_slots = cn_runs_free_slots(l->node->runs, &seq);
        pthread_mutex_lock(&l->mu);
        if (l->draining)
            free_slots = 0;
        pthread_mutex_unlock(&l->mu);
        json_t *body = json_pack("{s:i, s:I, s:O}", "free", free_slots, "seq", (json_int_t)seq,
                                 "results", pending);
        /* Progress is sent once: the next report supersedes a lost one. */
        if (body && json_array_size(progress) > 0)
            json_object_set(body, "progress", progress);
        json_decref(progress);
        snprintf(url, sizeof url, "%s/v1/cluster/nodes/%s/results", l->gateway, id);
        svc_response resp;
        last_sent = svc_now_mono_ms();
        char cred[CN_CRED_SIZE];
        cn_cred_get(l->node->cred, cred);
        svc_http_call("POST", url, cred, body, CN_REPORT_TIMEOUT_MS, &resp);
        memset(cred, 0, sizeof cred);
        json_decref(body);
        int settled = resp.status == 200
                          ? cn__settle(l, pending, json_object_get(resp.json, "recorded"))
                          : 0;
        if (resp.status == 200 && json_array_size(pending) == 0) {
            if (problem[0])
                svc_info("report: gateway records results again gateway=%s", l->gateway);
            problem[0] = '\0';
            backoff = CN_BACKOFF_MIN_MS;
            svc_response_clear(&resp);
            continue;
        }
        /* Some or all could not be recorded (PostgreSQL away): again soon. */
        if (resp.status == 200)
            svc_debug("report: %d recorded, %zu kept for the next report", settled,
                      json_array_size(pending));
        else
            cn__exchange_problem("report", &resp, problem, sizeof problem);
        svc_response_clear(&resp);
        if (cn__lease_sleep(l, backoff, 0))
            break;
        backoff = backoff * 2 > CN_BACKOFF_MAX_MS ? CN_BACKOFF_MAX_MS : backoff * 2;
    }
    if (json_array_size(pending) > 0)
        svc_warn("report: stopping with %zu run(s) unreported; the gateway finds them lost",
                 json_array_size(pending));
    json_decref(pending);
    return NULL;
}

int cn_lease_start(const char *gateway, const cn_node *node, cn_register *reg, cn_lease **out)
{
    cn_lease *l;
    int rc;

    *out = NULL;
    if (!gateway || !node || !reg)
        return -EINVAL;
    if (!(l = calloc(1, sizeof *l)) || !(l->refused = json_array())) {
        free(l);
        return -ENOMEM;
    }
    snprintf(l->gateway, sizeof l->gateway, "%s", gateway);
    for (size_t n = strlen(l->gateway); n > 0 && l->gateway[n - 1] == '/'; n--)
        l->gateway[n - 1] = '\0';
    l->node = node;
    l->reg = reg;
    pthread_mutex_init(&l->mu, NULL);
    svc_cond_init_mono(&l->cond);
    if ((rc = -pthread_create(&l->reporter, NULL, cn__reporter_main, l)) == 0)
        l->reporter_started = 1;
    if (rc == 0 && (rc = -pthread_create(&l->poller, NULL, cn__poller_main, l)) == 0)
        l->poller_started = 1;
    if (rc < 0) {
        cn_lease_stop(l);
        return rc;
    }
    *out = l;
    return 0;
}

void cn_lease_drain(cn_lease *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->draining = 1;
    pthread_mutex_unlock(&l->mu);
}

void cn_lease_stop_polls(cn_lease *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->polls_stopped = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
}

void cn_lease_stop(cn_lease *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
    if (l->poller_started)
        pthread_join(l->poller, NULL);
    if (l->reporter_started)
        pthread_join(l->reporter, NULL);
    json_decref(l->refused);
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
