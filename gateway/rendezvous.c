/* rendezvous.c — the control-plane rendezvous of multi-node jobs
 * (rendezvous.h). Node_rank 0 puts NCCL's unique id here, and Gloo's store
 * lives here on CPU nodes; a stale attempt is refused (409), so a rank of
 * an attempt that ended can never join the next one. */
#include "rendezvous.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"
#include "redis.h"
#include "reply.h"

/* Longest wait_ms a GET may ask for. */
#define RDV_WAIT_MAX_MS 10000

/* 1 when k is a key the store accepts: 1-200 of A-Z a-z 0-9 _ . - ~ (the
 * node escapes any other byte as ~XX). */
static int key_valid(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 200)
        return 0;
    for (; *k; k++)
        if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
              *k == '_' || *k == '.' || *k == '-' || *k == '~'))
            return 0;
    return 1;
}

static void hash_name(char *out, size_t n, const char *job_id, int attempt)
{
    snprintf(out, n, "kowloon:rdv:%s:%d", job_id, attempt);
}

/* The path's job, attempt and key checked, and the attempt the running
 * one; 0, or -1 after replying (400, 404, 409, 503). */
static int rdv_args(svc_req *req, const char **job_id, int *attempt, const char **key)
{
    gw_app *app = svc_req_app(req);
    const char *a = svc_req_param(req, "attempt");
    char *end = NULL;
    long att = a ? strtol(a, &end, 10) : 0;
    *key = svc_req_param(req, "key");
    if (gw_auth_cluster(req) != 0 || !(*job_id = gw_job_id_param(req)))
        return -1;
    if (!a || !*a || *end || att < 1 || att > 1000000) {
        svc_reply_error(req, 400, "invalid_argument", "attempt", NULL,
                        "attempt must be an integer from 1 to 1000000");
        return -1;
    }
    if (!*key || !key_valid(*key)) {
        svc_reply_error(req, 400, "invalid_argument", "key", NULL,
                        "key must be 1-200 characters of A-Z a-z 0-9 _ . - ~");
        return -1;
    }
    *attempt = (int)att;
    int cur = gw_store_gang_attempt(app->store, *job_id, *attempt);
    if (cur == -ENOENT) {
        svc_reply_error(req, 404, "not_found", NULL, NULL, "no multi-node job %s", *job_id);
        return -1;
    }
    if (cur < 0) {
        gw_reply_unavailable(req, "PostgreSQL");
        return -1;
    }
    if (cur == 0) {
        svc_reply_error(req, 409, "attempt_stale", "attempt", NULL,
                        "attempt %d of job %s is not the running attempt", *attempt, *job_id);
        return -1;
    }
    return 0;
}

int gw_api_rendezvous_put(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *job_id, *key;
    int attempt;
    size_t len = 0;
    const char *body = svc_req_body(req, &len);
    if (len > GW_RDV_VALUE_MAX)
        return svc_reply_error(req, 413, "payload_too_large", NULL, NULL,
                               "a rendezvous value is at most %d bytes", GW_RDV_VALUE_MAX);
    if (rdv_args(req, &job_id, &attempt, &key) != 0)
        return 0;
    char hash[96], ttl[16];
    hash_name(hash, sizeof hash, job_id, attempt);
    snprintf(ttl, sizeof ttl, "%d", GW_RDV_TTL_S);
    const char *set[4] = {"HSET", hash, key, body ? body : ""};
    size_t lens[4] = {4, strlen(hash), strlen(key), len};
    const char *exp[3] = {"EXPIRE", hash, ttl};
    struct gw_redis *r = gw_queue_redis(app->queue);
    redisReply *a = gw_redis_argv(r, 4, set, lens);
    redisReply *b = a && a->type != REDIS_REPLY_ERROR ? gw_redis_argv(r, 3, exp, NULL) : NULL;
    int ok = b && b->type != REDIS_REPLY_ERROR;
    if (a)
        freeReplyObject(a);
    if (b)
        freeReplyObject(b);
    if (!ok)
        return gw_reply_unavailable(req, "Redis");
    return svc_reply_json(req, 200, json_pack("{s:s, s:i, s:s}", "job_id", job_id, "attempt",
                                              attempt, "key", key));
}

int gw_api_rendezvous_get(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *job_id, *key;
    int attempt;
    const char *w = svc_req_query(req, "wait_ms");
    char *end = NULL;
    long wait_ms = w ? strtol(w, &end, 10) : 0;
    if (w && (!*w || *end || wait_ms < 0 || wait_ms > RDV_WAIT_MAX_MS))
        return svc_reply_error(req, 400, "invalid_argument", "wait_ms", NULL,
                               "wait_ms must be an integer from 0 to %d", RDV_WAIT_MAX_MS);
    if (rdv_args(req, &job_id, &attempt, &key) != 0)
        return 0;
    char hash[96];
    hash_name(hash, sizeof hash, job_id, attempt);
    const char *get[3] = {"HGET", hash, key};
    redisReply *a = gw_redis_argv(gw_queue_redis(app->queue), 3, get, NULL);
    if (!a || a->type == REDIS_REPLY_ERROR) {
        if (a)
            freeReplyObject(a);
        return gw_reply_unavailable(req, "Redis");
    }
    /* Not set yet: answered at once (wait_ms is accepted, not held); the
     * node asks again with a back-off of 2 ms doubling to 50 ms. */
    int rc = a->type == REDIS_REPLY_STRING
                 ? svc_reply_raw(req, 200, "application/octet-stream", a->str, a->len)
                 : svc_reply_error(req, 404, "not_found", "key", NULL, "%s is not set (yet)", key);
    freeReplyObject(a);
    return rc;
}

void gw_rdv_forget(gw_app *app, const char *job_id, int attempt)
{
    char hash[96];
    hash_name(hash, sizeof hash, job_id, attempt);
    const char *del[2] = {"DEL", hash};
    redisReply *a = gw_redis_argv(gw_queue_redis(app->queue), 2, del, NULL);
    if (a)
        freeReplyObject(a);
}
