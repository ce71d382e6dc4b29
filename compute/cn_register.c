/* cn_register.c — registration and heartbeat thread. A gateway that is down or
 * restarting is normal: the thread keeps trying, logging a problem once when
 * it starts or changes and once when it clears, never once per attempt.
 * Registration takes the cluster token and gives the node its credential
 * (cn_cred.h), which every later call carries; a node that registers again
 * presents the one it holds, which proves the name is its own. */
#include "cn_register.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cn_cred.h"
#include "svc_client.h"
#include "svc_log.h"
#include "svc_util.h"

#define CN_REGISTER_TIMEOUT_MS 5000
#define CN_HEARTBEAT_TIMEOUT_MS 3000
#define CN_BACKOFF_MIN_MS 500
#define CN_BACKOFF_MAX_MS 10000

struct cn_register {
    char gateway[512];           /* base URL without a trailing slash */
    int64_t interval_ms;         /* between heartbeats */
    const cn_node *node;
    pthread_mutex_t mu;
    pthread_cond_t cond;         /* wakes the thread early to stop */
    int stop;
    int kick;                    /* beat now (cn_register_beat_now) */
    uint64_t beats;              /* heartbeats the gateway took */
    pthread_t thread;
    /* Written by the thread under mu (read by cn_register_node_id), owned
     * by cn_register_stop after the thread ends. */
    int registered;
    char node_id[64];
    char problem[320];           /* key of the last problem logged; "" when all is well */
    unsigned tasks_gen;          /* the task images the gateway was last told of */
};

/* Sleeps ms or until stop is asked. Returns 1 when stopping. */
static int cn__sleep(cn_register *r, int64_t ms)
{
    int64_t deadline = svc_now_mono_ms() + ms;
    struct timespec ts = {.tv_sec = deadline / 1000, .tv_nsec = (long)(deadline % 1000) * 1000000L};
    int stop;

    pthread_mutex_lock(&r->mu);
    while (!r->stop && !r->kick && svc_now_mono_ms() < deadline)
        pthread_cond_timedwait(&r->cond, &r->mu, &ts);
    r->kick = 0;
    stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stop;
}

/* Logs text at WARN when the kind of problem (key) differs from the last
 * one logged, else at DEBUG: transport errors vary in their details ("after
 * 2 ms") and must not defeat the once-per-change rule. */
static void cn__problem(cn_register *r, const char *key, const char *text)
{
    if (strcmp(key, r->problem) != 0) {
        svc_warn("%s (retrying)", text);
        snprintf(r->problem, sizeof r->problem, "%s", key);
    } else {
        svc_debug("%s (still)", text);
    }
}

/* "register HTTP 503" or "register Couldn't connect to server". */
static void cn__problem_key(const char *what, const svc_response *resp, char *buf, size_t len)
{
    if (resp->status)
        snprintf(buf, len, "%s HTTP %d", what, resp->status);
    else
        snprintf(buf, len, "%s %.*s", what, (int)strcspn(resp->error, ":"), resp->error);
}

static void cn__problem_clear(cn_register *r)
{
    if (r->problem[0])
        svc_info("gateway reachable again gateway=%s", r->gateway);
    r->problem[0] = '\0';
}

/* "HTTP 401 unauthenticated: invalid cluster token" or the transport error. */
static void cn__describe(const svc_response *resp, char *buf, size_t len)
{
    const json_t *e = resp->json ? json_object_get(resp->json, "error") : NULL;
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));

    if (resp->status == 0)
        snprintf(buf, len, "%s", resp->error[0] ? resp->error : "no response");
    else
        snprintf(buf, len, "HTTP %d%s%s%s%s", resp->status, code ? " " : "", code ? code : "",
                 msg ? ": " : "", msg ? msg : "");
}

/* A node id goes into URL paths, so only URL-safe ids are accepted. */
static int cn__id_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n < 64 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_") == n;
}

/* POST /v1/cluster/nodes/register with the cluster token, presenting the
 * credential the node holds (if any). Returns 0 when registered. */
static int cn__register_once(cn_register *r)
{
    char url[700], what[320], text[448], key[320], cred[CN_CRED_SIZE];
    svc_response resp;
    int rc = -1;
    unsigned gen = r->node->tasks ? cn_task_cfg_images_gen(r->node->tasks) : 0;
    json_t *body = cn_node_describe(r->node);
    int presented = cn_cred_get(r->node->cred, cred) == 0;

    memset(&resp, 0, sizeof resp);
    if (!body || (presented && json_object_set_new(body, "credential", json_string(cred)) != 0)) {
        cn__problem(r, "register ENOMEM", "register: out of memory");
        goto cleanup;
    }
    snprintf(url, sizeof url, "%s/v1/cluster/nodes/register", r->gateway);
    svc_http_call("POST", url, r->node->token, body, CN_REGISTER_TIMEOUT_MS, &resp);
    const char *id = json_string_value(json_object_get(resp.json, "id"));
    const char *given = json_string_value(json_object_get(resp.json, "credential"));
    if (resp.status != 200 || !cn__id_ok(id) || (!given && !presented)) {
        cn__describe(&resp, what, sizeof what);
        snprintf(text, sizeof text, "register with %.200s failed: %.140s%s", url, what,
                 resp.status != 200 ? ""
                 : !cn__id_ok(id)   ? " (no usable id in the reply)"
                                    : " (no credential in the reply)");
        cn__problem_key("register", &resp, key, sizeof key);
        cn__problem(r, key, text);
        goto cleanup;
    }
    /* A new credential replaces the one presented (the name was free: the
     * gateway forgot it, or it was this node's earlier life's); none in
     * the reply: the one presented proved the name is this node's. */
    int wrc = given ? cn_cred_set(r->node->cred, given) : 0;
    if (wrc == -EINVAL) {
        cn__problem(r, "register bad credential", "register: the gateway's credential is malformed");
        goto cleanup;
    }
    if (wrc < 0)
        svc_warn("cannot keep the node credential in %s: %s; it is kept in memory, and a "
                 "restart of this node will wait out the gateway's node timeout",
                 cn_cred_path(r->node->cred), strerror(-wrc));
    pthread_mutex_lock(&r->mu);
    snprintf(r->node_id, sizeof r->node_id, "%s", id);
    r->registered = 1;
    r->tasks_gen = gen;
    pthread_mutex_unlock(&r->mu);
    if (r->node->blobio) {
        const json_t *bs = json_object_get(resp.json, "blob_store");
        cn_blobio_share_gateway(r->node->blobio, r->node->share_mode,
                                json_string_value(json_object_get(bs, "dir")),
                                json_string_value(json_object_get(bs, "id")));
    }
    /* The gateway knows its node timeout; beating more often is always safe. */
    json_int_t hb = json_integer_value(json_object_get(resp.json, "heartbeat_s"));
    if (hb > 0 && hb * 1000 < r->interval_ms)
        r->interval_ms = hb * 1000;
    cn__problem_clear(r);
    svc_info("registered node=%s id=%s gateway=%s backend=%s heartbeat_ms=%lld credential=%s",
             r->node->name, r->node_id, r->gateway, cn_backend_name(r->node->backend),
             (long long)r->interval_ms, given ? "new" : "kept");
    rc = 0;
cleanup:
    memset(cred, 0, sizeof cred);
    json_decref(body);
    svc_response_clear(&resp);
    return rc;
}

/* POST /v1/cluster/nodes/{id}/heartbeat. A 404 means the gateway has
 * forgotten the node (it restarted without its registry), a 401 that the
 * credential no longer holds the name (the node was silent and another
 * process took it, or it was deregistered): register again. Other failures
 * are retried at the next beat. */
static void cn__heartbeat(cn_register *r)
{
    char url[700], what[320], text[448], key[320], cred[CN_CRED_SIZE];
    svc_response resp;
    int active;
    json_t *runs = json_array();

    memset(&resp, 0, sizeof resp);
    cn_runs_load(r->node->runs, &active, runs);
    json_t *body = json_pack("{s:i, s:i, s:o, s:b, s:o}", "running", active, "slots", r->node->slots,
                             "runs", runs, "draining", cn_node_draining(r->node), "state",
                             cn_node_state(r->node));
    if (!body) {
        cn__problem(r, "heartbeat ENOMEM", "heartbeat: out of memory");
        goto cleanup;
    }
    /* the task images again when they changed (listed at most once a minute) */
    unsigned gen = r->node->tasks ? cn_task_cfg_images_gen(r->node->tasks) : 0;
    if (gen != r->tasks_gen)
        json_object_set_new(body, "tasks", cn_task_cfg_describe(r->node->tasks));
    snprintf(url, sizeof url, "%s/v1/cluster/nodes/%s/heartbeat", r->gateway, r->node_id);
    cn_cred_get(r->node->cred, cred);
    svc_http_call("POST", url, cred, body, CN_HEARTBEAT_TIMEOUT_MS, &resp);
    memset(cred, 0, sizeof cred);
    if (resp.status == 200) {
        r->tasks_gen = gen;
        cn__problem_clear(r);
        pthread_mutex_lock(&r->mu);
        r->beats++;
        pthread_cond_broadcast(&r->cond); /* cn_register_beat_now */
        pthread_mutex_unlock(&r->mu);
        goto cleanup;
    }
    if (resp.status == 404 || resp.status == 401) {
        svc_warn("gateway %s node id=%s; registering again",
                 resp.status == 404 ? "does not know" : "no longer takes the credential of",
                 r->node_id);
        pthread_mutex_lock(&r->mu);
        r->registered = 0;
        pthread_mutex_unlock(&r->mu);
        goto cleanup;
    }
    cn__describe(&resp, what, sizeof what);
    snprintf(text, sizeof text, "heartbeat to %.200s failed: %.160s", r->gateway, what);
    cn__problem_key("heartbeat", &resp, key, sizeof key);
    cn__problem(r, key, text);
cleanup:
    json_decref(body);
    svc_response_clear(&resp);
}

static void *cn__register_main(void *arg)
{
    cn_register *r = arg;
    int64_t backoff = CN_BACKOFF_MIN_MS;
    unsigned jitter;

    for (;;) {
        if (!r->registered) {
            if (cn__register_once(r) < 0) {
                /* Jitter keeps a restarted fleet from knocking in step. */
                if (svc_random_bytes(&jitter, sizeof jitter) < 0)
                    jitter = 0;
                if (cn__sleep(r, backoff + (int64_t)(jitter % (unsigned)(backoff / 4 + 1))))
                    break;
                backoff = backoff * 2 > CN_BACKOFF_MAX_MS ? CN_BACKOFF_MAX_MS : backoff * 2;
                continue;
            }
            backoff = CN_BACKOFF_MIN_MS;
        }
        /* The first beat right after registering tells a gateway that saw
         * this node restart which of its runs survived. */
        cn__heartbeat(r);
        if (cn__sleep(r, r->registered ? r->interval_ms : 0))
            break;
    }
    return NULL;
}

int cn_register_node_id(cn_register *r, char id[64])
{
    pthread_mutex_lock(&r->mu);
    int ok = r->registered;
    if (ok)
        memcpy(id, r->node_id, 64);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

int cn_register_start(const char *gateway, int heartbeat_s, const cn_node *node,
                      cn_register **out)
{
    cn_register *r;
    int rc;

    *out = NULL;
    if (!gateway || !node || heartbeat_s < 1)
        return -EINVAL;
    if (!(r = calloc(1, sizeof *r)))
        return -ENOMEM;
    snprintf(r->gateway, sizeof r->gateway, "%s", gateway);
    for (size_t n = strlen(r->gateway); n > 0 && r->gateway[n - 1] == '/'; n--)
        r->gateway[n - 1] = '\0';
    r->interval_ms = (int64_t)heartbeat_s * 1000;
    r->node = node;
    pthread_mutex_init(&r->mu, NULL);
    svc_cond_init_mono(&r->cond);
    if ((rc = -pthread_create(&r->thread, NULL, cn__register_main, r)) < 0) {
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int cn_register_beat_now(cn_register *r, int64_t wait_ms)
{
    int64_t deadline = svc_now_mono_ms() + wait_ms;
    struct timespec ts = {.tv_sec = deadline / 1000, .tv_nsec = (long)(deadline % 1000) * 1000000L};
    int took;

    if (!r)
        return 0;
    pthread_mutex_lock(&r->mu);
    /* the beat under way may have read the state before the change */
    uint64_t want = r->beats + 2;
    r->kick = 1;
    pthread_cond_broadcast(&r->cond);
    while (!r->stop && r->beats < want && svc_now_mono_ms() < deadline) {
        if (r->beats == want - 1 && !r->kick) {
            r->kick = 1; /* the second beat: at once too */
            pthread_cond_broadcast(&r->cond);
        }
        pthread_cond_timedwait(&r->cond, &r->mu, &ts);
    }
    took = r->beats >= want;
    pthread_mutex_unlock(&r->mu);
    return took;
}

void cn_register_stop(cn_register *r)
{
    char url[700], what[320];
    svc_response resp;

    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);

    if (r->registered) {
        char cred[CN_CRED_SIZE];
        memset(&resp, 0, sizeof resp);
        snprintf(url, sizeof url, "%s/v1/cluster/nodes/%s", r->gateway, r->node_id);
        cn_cred_get(r->node->cred, cred);
        svc_http_call("DELETE", url, cred, NULL, CN_HEARTBEAT_TIMEOUT_MS, &resp);
        memset(cred, 0, sizeof cred);
        if (resp.status == 200 || resp.status == 204 || resp.status == 404 || resp.status == 401) {
            /* the name is free now: the credential is worth nothing */
            cn_cred_clear(r->node->cred);
            svc_info("deregistered id=%s", r->node_id);
        } else {
            cn__describe(&resp, what, sizeof what);
            svc_warn("deregister %s failed: %s", url, what);
        }
        svc_response_clear(&resp);
        pthread_mutex_lock(&r->mu);
        r->registered = 0;
        pthread_mutex_unlock(&r->mu);
    }
}

void cn_register_free(cn_register *r)
{
    if (!r)
        return;
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
