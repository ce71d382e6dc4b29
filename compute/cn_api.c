/* cn_api.c — the node's HTTP handlers. Each checks the cluster token, turns the
 * request into a run manager call and the result into one reply; every error
 * goes through svc_reply_error so it has the contract's shape. */
#include "cn_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cn_node.h"
#include "cn_register.h"
#include "svc_util.h"

#define CN_WAIT_MAX_S 60

int cn_api_authorize(svc_req *req, int access)
{
    const cn_node *n = svc_req_app(req);
    const char *tok = svc_req_bearer(req);

    if (access == CN_ACCESS_METRICS && n->metrics_public)
        return 0;
    if (tok && svc_secure_equal(tok, n->token))
        return 0;
    svc_reply_header(req, "WWW-Authenticate", "Bearer realm=\"kowloon-node\"");
    svc_reply_error(req, 401, "unauthenticated", NULL, NULL,
                    tok ? "invalid cluster token" : "missing Authorization: Bearer <cluster token>");
    return -1;
}

/* ?wait=S (seconds, 0..60, fractions allowed) into *ms. Returns 0, or -1
 * after replying 400. */
static int cn__wait_ms(svc_req *req, int64_t *ms)
{
    const char *s = svc_req_query(req, "wait");
    char *end;

    *ms = 0;
    if (!s)
        return 0;
    double w = strtod(s, &end);
    if (end == s || *end || !isfinite(w) || w < 0 || w > CN_WAIT_MAX_S) {
        svc_reply_error(req, 400, "invalid_argument", "wait", NULL,
                        "wait must be a number of seconds between 0 and %d", CN_WAIT_MAX_S);
        return -1;
    }
    *ms = (int64_t)(w * 1000);
    return 0;
}

static int cn__reply_kl_err(svc_req *req, int status, const kl_err *err)
{
    return svc_reply_error(req, status, "invalid_argument", err->field[0] ? err->field : NULL,
                           NULL, "%s", err->message[0] ? err->message : "invalid request");
}

/* A run manager lookup result: 200 with the run, or 404 / 500. */
static int cn__reply_run(svc_req *req, int rc, json_t *run)
{
    if (rc == 0)
        return svc_reply_json(req, 200, run);
    if (rc == CN_ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no run %s on this node",
                               svc_req_param(req, "id"));
    return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
}

static int cn__healthz(svc_req *req)
{
    return svc_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

/* Readiness, distinct from liveness: a node is ready once the gateway has
 * it registered, and no longer once it drains, so a rolling restart (a
 * Kubernetes DaemonSet) moves to the next host only when this one serves. */
static int cn__readyz(svc_req *req)
{
    const cn_node *n = svc_req_app(req);
    cn_register *reg = __atomic_load_n(&n->reg, __ATOMIC_ACQUIRE);
    char id[64];
    int ready = reg && cn_register_node_id(reg, id) && !cn_node_draining(n);

    if (!ready)
        svc_reply_header(req, "Retry-After", "2");
    return svc_reply_json(req, ready ? 200 : 503,
                          json_pack("{s:s, s:b}", "status", ready ? "ready" : "unavailable",
                                    "draining", cn_node_draining(n)));
}

static int cn__info(svc_req *req)
{
    const cn_node *n = svc_req_app(req);
    int active;

    cn_runs_load(n->runs, &active, NULL);
    json_t *j = cn_node_describe(n);
    if (!j)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    json_object_set_new(j, "running", json_integer(active));
    json_object_set_new(j, "draining", json_boolean(cn_node_draining(n)));
    json_object_set_new(j, "fault", cn_node_fault(n) ? json_string(cn_node_fault(n)) : json_null());
    json_object_set_new(j, "backend_info", json_string(cn_backend_info(n->backend)));
    json_object_set_new(j, "version", json_string(CN_VERSION));
    if (n->cache) {
        cn_blobcache_stats s;
        cn_blobcache_stats_get(n->cache, &s);
        json_object_set_new(
            j, "input_cache",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "budget_bytes",
                      (json_int_t)s.budget_bytes, "used_bytes", (json_int_t)s.used_bytes,
                      "entries", (json_int_t)s.entries, "hits", (json_int_t)s.hits, "misses",
                      (json_int_t)s.misses, "fetched_bytes", (json_int_t)s.fetched_bytes,
                      "served_bytes", (json_int_t)s.served_bytes));
    }
    if (n->blob_stats) {
        cn_blobio_stats b;
        __atomic_load(&n->blob_stats->mapped_inputs, &b.mapped_inputs, __ATOMIC_RELAXED);
        __atomic_load(&n->blob_stats->mapped_bytes, &b.mapped_bytes, __ATOMIC_RELAXED);
        __atomic_load(&n->blob_stats->written_outputs, &b.written_outputs, __ATOMIC_RELAXED);
        __atomic_load(&n->blob_stats->written_bytes, &b.written_bytes, __ATOMIC_RELAXED);
        __atomic_load(&n->blob_stats->pushed_outputs, &b.pushed_outputs, __ATOMIC_RELAXED);
        __atomic_load(&n->blob_stats->pushed_bytes, &b.pushed_bytes, __ATOMIC_RELAXED);
        json_object_set_new(
            j, "blob_io",
            json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:I}", "shared_dir",
                      cn_blobio_shared_dir(n->blobio) ? json_string(cn_blobio_shared_dir(n->blobio))
                                                       : json_null(),
                      "mapped_inputs",
                      (json_int_t)b.mapped_inputs, "mapped_bytes", (json_int_t)b.mapped_bytes,
                      "written_outputs", (json_int_t)b.written_outputs, "written_bytes",
                      (json_int_t)b.written_bytes, "pushed_outputs", (json_int_t)b.pushed_outputs,
                      "pushed_bytes", (json_int_t)b.pushed_bytes));
    }
    return svc_reply_json(req, 200, j);
}

static int cn__metrics(svc_req *req)
{
    const cn_node *n = svc_req_app(req);
    return svc_reply_metrics(req, n->metrics);
}

static int cn__run_create(svc_req *req)
{
    const cn_node *n = svc_req_app(req);
    const json_t *body = svc_req_json(req);
    cn_run_req rq;
    kl_err err = {{0}, {0}};
    json_t *run = NULL;
    int status, rc;

    /* A repeated POST (the gateway retrying after a lost reply) is answered
     * from the run it already made, before the inputs are decoded again. */
    if (cn_run_req_ident(body, &rq, &status, &err) < 0)
        return cn__reply_kl_err(req, status, &err);
    if (cn_runs_get(n->runs, rq.run_id, 0, 0, &run) == 0)
        return svc_reply_json(req, 200, run);
    if (cn_run_req_decode(body, &rq, &status, &err) < 0)
        return cn__reply_kl_err(req, status, &err);

    char location[CN_RUN_ID_MAX + 16];
    snprintf(location, sizeof location, "/v1/runs/%s", rq.run_id);
    rc = cn_runs_submit(n->runs, &rq, &run, &err);
    cn_run_req_clear(&rq);  /* holds nothing when the manager took it */
    switch (rc) {
    case CN_RUN_NEW:
        if (!run)
            run = json_pack("{s:s, s:s}", "run_id", location + 9, "state", "queued");
        svc_reply_header(req, "Location", location);
        return svc_reply_json(req, 202, run);
    case CN_RUN_EXISTING:
        return svc_reply_json(req, 200, run);
    case CN_EOVERLOADED:
        svc_reply_header(req, "Retry-After", "1");
        return svc_reply_error(req, 503, "overloaded", NULL, NULL, "all %d slots are busy",
                               n->slots);
    case CN_EDRAINING:
        svc_reply_header(req, "Retry-After", "1");
        return svc_reply_error(req, 503, "draining", NULL, NULL,
                               "node is shutting down and takes no new runs");
    case CN_ENOTSUP:
        /* The arguments are fine; this node is the wrong place for them
         * (no CUDA, too few GPUs). 409 lets the gateway place the job
         * elsewhere, where a 422 would fail it for good. */
        return svc_reply_error(req, 409, "conflict", err.field[0] ? err.field : NULL, NULL, "%s",
                               err.message);
    default:
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    }
}

/* Answers with the path's run (cancelled first when cancel is set) once it
 * ended or the ?wait= seconds passed. */
static int cn__run_answer(svc_req *req, int cancel)
{
    const cn_node *n = svc_req_app(req);
    const char *id = svc_req_param(req, "id");
    json_t *run = NULL;
    int64_t wait_ms;

    if (cn__wait_ms(req, &wait_ms) < 0)
        return 0;
    int rc = cancel ? cn_runs_cancel(n->runs, id, wait_ms, &run)
                    : cn_runs_get(n->runs, id, wait_ms, 1, &run);
    return cn__reply_run(req, rc, run);
}

static int cn__run_get(svc_req *req)
{
    return cn__run_answer(req, 0);
}

static int cn__run_cancel(svc_req *req)
{
    return cn__run_answer(req, 1);
}

static int cn__run_release(svc_req *req)
{
    const cn_node *n = svc_req_app(req);

    const char *id = svc_req_param(req, "id");
    int rc = cn_runs_release(n->runs, id);
    if (rc == CN_EBUSY)
        return svc_reply_error(req, 409, "conflict", NULL, NULL, "run %s has not finished", id);
    if (rc == CN_ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no run %s on this node", id);
    return svc_reply_json(req, 200, json_pack("{s:s, s:b}", "id", id, "released", 1));
}

const svc_route cn_api_routes[] = {
    {.method = "GET", .pattern = "/healthz", .handler = cn__healthz, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/readyz", .handler = cn__readyz, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/v1/info", .handler = cn__info, .access = 1},
    {.method = "GET", .pattern = "/metrics", .handler = cn__metrics, .access = CN_ACCESS_METRICS},
    {.method = "POST", .pattern = "/v1/runs", .handler = cn__run_create, .json_body = 1, .access = 1},
    {.method = "GET", .pattern = "/v1/runs/{id}", .handler = cn__run_get, .access = 1},
    {.method = "DELETE", .pattern = "/v1/runs/{id}", .handler = cn__run_cancel, .access = 1},
    {.method = "POST", .pattern = "/v1/runs/{id}/release", .handler = cn__run_release, .access = 1},
    {.method = NULL},
};
