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

/* The path's job, attempt and key. That the attempt is the running one of
 * a multi-node job, and that the calling node holds a part of it, was
 * checked from the head (auth_cluster.c, GW_ACCESS_GANG). 0, or -1 after
 * replying 400. */
static int rdv_args(svc_req *req, const char **job_id, int *attempt, const char **key)
{
    *job_id = svc_req_param(req, "id");
    *attempt = atoi(svc_req_param(req, "attempt"));
    *key = svc_req_param(req, "key");
    if (!*key || !key_valid(*key)) {
        svc_reply_error(req, 400, "invalid_argument", "key", NULL,
                        "key must be 1-200 characters of A-Z a-z 0-9 _ . - ~");
        return -1;
    }
    return 0;
}

static void rdv_value_free(void *arg)
{
    gw_reqctx *ctx = arg;
    free(ctx->rdv);
    ctx->rdv = NULL;
}

/* What rdv_len says of a value the request could not keep (no memory). */
#define RDV_LOST ((size_t)-1)

int gw_rdv_body(svc_req *req, const char *data, size_t n)
{
    gw_reqctx *ctx = gw_reqctx_of(req);
    if (ctx == NULL)
        return -1;
    /* the route's max_body keeps the whole value within GW_RDV_VALUE_MAX */
    if (ctx->rdv == NULL) {
        if ((ctx->rdv = malloc(GW_RDV_VALUE_MAX)) == NULL) {
            ctx->rdv_len = RDV_LOST;
            return -1;
        }
        svc_req_on_free(req, rdv_value_free, ctx);
    }
    if (n > GW_RDV_VALUE_MAX - ctx->rdv_len)
        return -1;
    memcpy(ctx->rdv + ctx->rdv_len, data, n);
    ctx->rdv_len += n;
    return 0;
}

int gw_api_rendezvous_put(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_reqctx *ctx = svc_req_user(req);
    const char *job_id, *key;
    int attempt;
    if (ctx && ctx->rdv_len == RDV_LOST)
        return svc_reply_error(req, 503, "unavailable", NULL, NULL, "out of memory; send again");
    size_t len = ctx ? ctx->rdv_len : 0;
    const char *body = ctx ? ctx->rdv : NULL;
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
