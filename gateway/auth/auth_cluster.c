/* auth_cluster.c — who may call the cluster listener. The cluster token
 * registers a node and opens nothing else; registration gives the node a
 * credential of its own (nodecred.h), and every later call carries it. A
 * call may name only its own node in its path, and touch only runs that
 * node holds: the job and attempt its query or path names are checked here,
 * from the head, before a byte of the body is read. Failed attempts count
 * against the caller's address as on the public listener. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "metrics.h"
#include "nodecred.h"
#include "reply.h"
#include "svc_log.h"
#include "svc_util.h"

/* gw_reply_unauthenticated on the cluster listener. */
static int unauthenticated(svc_req *req, const char *msg)
{
    return gw_reply_unauthenticated(req, "Bearer realm=\"kowloon-cluster\"", msg);
}

static int has_cluster_token(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *token = svc_req_bearer(req);
    return token && svc_secure_equal(token, app->cfg.cluster_token);
}

/* The node whose credential the request carries, into ctx; 0, or -1 after
 * replying 401, 403 or 503. */
static int auth_node(svc_req *req, gw_reqctx *ctx)
{
    gw_app *app = svc_req_app(req);
    const char *cred = svc_req_bearer(req);
    char hex[GW_NODECRED_HASH_SIZE];
    if (!gw_nodecred_valid(cred) || gw_nodecred_hash(cred, hex) != 0)
        return unauthenticated(req, has_cluster_token(req)
                                        ? "the cluster token only registers a node; send the "
                                          "credential the registration gave it"
                                        : "send the node's credential as 'Authorization: Bearer "
                                          "<credential>' (it comes with the registration)");
    int64_t asked = svc_now_mono_ms();
    if (gw_nodecreds_get(app->nodecreds, hex, asked, ctx->node_id, ctx->node_name,
                         sizeof ctx->node_name) != 0) {
        gw_metrics_node_auth(app->metrics, "request", 1);
        int rc = gw_store_node_by_credential(app->store, hex, ctx->node_id, ctx->node_name,
                                             sizeof ctx->node_name);
        if (rc == -ENOENT)
            return unauthenticated(req, "the node credential is not valid (the node left, or its "
                                        "name was registered anew); register again");
        if (rc != 0) {
            gw_reply_unavailable(req, "PostgreSQL");
            return -1;
        }
        gw_nodecreds_put(app->nodecreds, hex, ctx->node_id, ctx->node_name, asked);
    }
    const char *named = svc_req_param(req, "node");
    if (named && strcmp(named, ctx->node_id) != 0) {
        svc_reply_error(req, 403, "forbidden", "node", NULL,
                        "this credential is node %s's; a node may act only as itself", ctx->node_id);
        ctx->node_id[0] = '\0';
        return -1;
    }
    return 0;
}

/* The attempt in text a (the path's or the query's), 1..1000000; -1 after
 * replying 400 naming field. */
static int attempt_of(svc_req *req, const char *a, const char *field)
{
    char *end = NULL;
    long att = a ? strtol(a, &end, 10) : 0;
    if (!a || !*a || *end || att < 1 || att > 1000000) {
        svc_reply_error(req, 400, "invalid_argument", field, NULL,
                        "%s must be an integer from 1 to 1000000", field);
        return -1;
    }
    return (int)att;
}

/* GW_ACCESS_RUN: ?job_id=&attempt= name a run the node holds now. */
static int check_run(svc_req *req, const gw_reqctx *ctx)
{
    gw_app *app = svc_req_app(req);
    const char *job = svc_req_query(req, "job_id");
    if (!job || !svc_uuid_valid(job)) {
        svc_reply_error(req, 400, "invalid_argument", "job_id", NULL,
                        "job_id must be the id of the run's job (the blob is one of its outputs)");
        return -1;
    }
    int attempt = attempt_of(req, svc_req_query(req, "attempt"), "attempt");
    if (attempt < 0)
        return -1;
    int held = gw_store_node_run_held(app->store, ctx->node_id, job, attempt);
    if (held < 0) {
        gw_reply_unavailable(req, "PostgreSQL");
        return -1;
    }
    if (!held) {
        svc_reply_error(req, 403, "forbidden", "job_id", NULL,
                        "attempt %d of job %s is not running on this node", attempt, job);
        return -1;
    }
    return 0;
}

/* GW_ACCESS_GANG: the path's {id} and {attempt}, the running attempt of a
 * multi-node job of which the node holds a part. */
static int check_gang(svc_req *req, const gw_reqctx *ctx)
{
    gw_app *app = svc_req_app(req);
    const char *job = gw_job_id_param(req);
    if (!job)
        return -1;
    int attempt = attempt_of(req, svc_req_param(req, "attempt"), "attempt");
    if (attempt < 0)
        return -1;
    int rc = gw_store_node_gang_member(app->store, ctx->node_id, job, attempt);
    if (rc == -ENOENT) {
        svc_reply_error(req, 404, "not_found", NULL, NULL, "no multi-node job %s", job);
        return -1;
    }
    if (rc == -EPERM) {
        svc_reply_error(req, 403, "forbidden", NULL, NULL,
                        "this node holds no part of job %s", job);
        return -1;
    }
    if (rc < 0) {
        gw_reply_unavailable(req, "PostgreSQL");
        return -1;
    }
    if (rc == 0) {
        svc_reply_error(req, 409, "attempt_stale", "attempt", NULL,
                        "attempt %d of job %s is not the running attempt", attempt, job);
        return -1;
    }
    return 0;
}

int gw_authorize_cluster(svc_req *req, int access)
{
    gw_app *app = svc_req_app(req);
    gw_reqctx *ctx;
    if (gw_authfail_refuse(req) != 0)
        return -1;
    switch (GW_ACCESS_ROLE(access)) {
    case GW_ACCESS_CLUSTER:
        return has_cluster_token(req) ? 0 : unauthenticated(req, "a valid cluster token is required");
    case GW_ACCESS_METRICS:
        /* Prometheus scrapes here with the cluster token, as it scrapes the nodes */
        return app->cfg.metrics_public || has_cluster_token(req)
                   ? 0
                   : unauthenticated(req, "a valid cluster token is required");
    case GW_ACCESS_NODE:
        if ((ctx = gw_reqctx_of(req)) == NULL) {
            svc_reply_error(req, 503, "unavailable", NULL, NULL, "out of memory; try again");
            return -1;
        }
        if (auth_node(req, ctx) != 0)
            return -1;
        if ((access & GW_ACCESS_RUN) && check_run(req, ctx) != 0)
            return -1;
        if ((access & GW_ACCESS_GANG) && check_gang(req, ctx) != 0)
            return -1;
        return 0;
    }
    /* a role this listener does not serve: nobody may call it */
    svc_reply_error(req, 403, "forbidden", NULL, NULL, "not served on the cluster listener");
    return -1;
}

const char *gw_req_node(svc_req *req)
{
    gw_reqctx *ctx = svc_req_user(req);
    return ctx != NULL && ctx->node_id[0] ? ctx->node_id : NULL;
}

/* ---- the credential cache's batch refresh (nodecred.h) ---------------- */

typedef struct refresh_call {
    gw_nodecreds *c;
    int64_t asked_ms;
} refresh_call;

static void refreshed(void *arg, const char *hex, const char *id, const char *name)
{
    const refresh_call *rc = arg;
    gw_nodecreds_refreshed(rc->c, hex, id, name, rc->asked_ms);
}

/* Statements of at most this many hashes (a few tens of KB of text). */
#define REFRESH_BATCH 512

static int refresh_lookup(void *arg, gw_nodecreds *c, const char *const *hex, int n, int64_t asked_ms)
{
    gw_app *app = arg;
    refresh_call call = {c, asked_ms};
    for (int i = 0; i < n; i += REFRESH_BATCH) {
        int k = n - i < REFRESH_BATCH ? n - i : REFRESH_BATCH;
        gw_metrics_node_auth(app->metrics, "refresh", k);
        int rc = gw_store_nodes_by_credentials(app->store, hex + i, k, refreshed, &call);
        if (rc != 0)
            return rc; /* the answers expire; each node's next call looks its own up */
    }
    return 0;
}

int gw_nodecreds_refresh_serve(gw_app *app)
{
    return gw_nodecreds_refresh_start(app->nodecreds, refresh_lookup, app);
}
