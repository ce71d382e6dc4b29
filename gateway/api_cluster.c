/* api_cluster.c — the cluster side of the API (node registration,
 * heartbeats, the node list), the kernel catalog, health and readiness, and
 * the OpenAPI document. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "blobstore.h"
#include "kl.h"
#include "lease.h"
#include "metrics.h"
#include "outcome.h"
#include "rendezvous.h"
#include "scheduler.h"
#include "svc_log.h"
#include "svc_util.h"

/* Longest run id: a UUID, a dot, an attempt number. */
#define GW_RUN_ID_MAX 48
/* How long a run may be leased and not yet listed by its node's heartbeat:
 * the heartbeat's list may have been taken just before the run arrived. */
#define UNHELD_GRACE_S 10

static const char *ptype_name(kl_param_type t)
{
    return t == KL_PARAM_ENUM ? "enum" : t == KL_PARAM_INT ? "integer" : "number";
}

static json_t *param_json(const kl_param_spec *p)
{
    json_t *o = json_pack("{s:s, s:s, s:b, s:s}", "name", p->name, "type", ptype_name(p->type),
                          "required", p->required, "description", p->doc ? p->doc : "");
    if (p->type == KL_PARAM_ENUM) {
        json_t *c = json_array();
        for (int i = 0; p->choices[i]; i++)
            json_array_append_new(c, json_string(p->choices[i]));
        json_object_set_new(o, "choices", c);
        if (!p->required)
            json_object_set_new(o, "default", json_string(p->choices[p->def_choice]));
    } else {
        json_object_set_new(o, "minimum", json_real(p->min));
        json_object_set_new(o, "maximum", json_real(p->max));
        if (!p->required)
            json_object_set_new(o, "default", json_real(p->def));
    }
    return o;
}

static json_t *io_json(const kl_io_spec *s, int input)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s}", "name", s->name, "dtype",
                          kl_dtype_name(s->dtype), "shape", s->shape_doc ? s->shape_doc : "",
                          "max_elements", (json_int_t)s->max_elems, "description",
                          s->doc ? s->doc : "");
    /* The spec has it on every tensor: outputs are never optional. */
    json_object_set_new(o, "optional", json_boolean(input && s->optional));
    return o;
}

int gw_api_kernels(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who;
    if (gw_auth_tenant(req, &who) != 0)
        return 0;
    json_t *backends = NULL;
    if (gw_store_backends_up(app->store, &backends) != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    int n;
    const kl_kernel *const *cat = kl_catalog(&n);
    json_t *list = json_array();
    for (int i = 0; i < n; i++) {
        const kl_kernel *k = cat[i];
        json_t *params = json_array(), *inputs = json_array(), *outputs = json_array();
        for (int j = 0; j < k->nparams; j++)
            json_array_append_new(params, param_json(&k->params[j]));
        for (int j = 0; j < k->ninputs; j++)
            json_array_append_new(inputs, io_json(&k->inputs[j], 1));
        for (int j = 0; j < k->noutputs; j++)
            json_array_append_new(outputs, io_json(&k->outputs[j], 0));
        json_array_append_new(list, json_pack("{s:s, s:s, s:o, s:o, s:o, s:O, s:i}", "name", k->name,
                                              "description", k->doc ? k->doc : "", "params", params,
                                              "inputs", inputs, "outputs", outputs,
                                              "backends", backends, "max_nodes",
                                              k->max_nodes > 1 ? k->max_nodes : 1));
    }
    json_decref(backends);
    return svc_reply_json(req, 200, json_pack("{s:o}", "kernels", list));
}

int gw_api_nodes_list(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who;
    if (gw_auth_tenant(req, &who) != 0)
        return 0;
    json_t *nodes;
    if (gw_store_nodes_json(app->store, &nodes) != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    /* A tenant sees what it needs to choose resources (backend, GPUs, free
     * slots, state); where nodes live and what their hosts' files are
     * called (url, backend_reason) is for admins. */
    static const char *const admin_only[] = {"url", "backend_reason", "registered_at",
                                             "last_heartbeat", NULL};
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
        for (int f = 0; !who.admin && admin_only[f]; f++)
            json_object_del(n, admin_only[f]);
    return svc_reply_json(req, 200, json_pack("{s:o}", "nodes", nodes));
}

/* The gpus of a registration, checked and reduced to what GET /v1/nodes
 * shows ({name, memory_bytes}); NULL after replying 400. */
static json_t *node_gpus(svc_req *req, json_t *gpus)
{
    if (gpus && !json_is_array(gpus)) {
        svc_reply_error(req, 400, "invalid_argument", "gpus", NULL, "gpus must be an array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g) {
        json_t *name = json_object_get(g, "name"), *mem = json_object_get(g, "memory_bytes");
        if (!json_is_string(name) || !json_is_integer(mem) || json_integer_value(mem) < 0) {
            json_decref(out);
            svc_reply_error(req, 400, "invalid_argument", "gpus", NULL,
                            "gpus[%zu] must be {\"name\": string, \"memory_bytes\": integer >= 0}", i);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:O, s:O}", "name", name, "memory_bytes", mem));
    }
    return out;
}

int gw_api_node_register(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    if (gw_auth_cluster(req) != 0)
        return 0;
    json_t *b = svc_req_json(req);
    const char *name = json_string_value(json_object_get(b, "name"));
    const char *url = json_string_value(json_object_get(b, "url"));
    const char *backend = json_string_value(json_object_get(b, "backend"));
    json_t *jreason = json_object_get(b, "backend_reason");
    const char *reason = json_string_value(jreason);
    json_t *kernels = json_object_get(b, "kernels");
    json_t *slots = json_object_get(b, "slots");
    if (!name || !*name || svc_utf8_chars(name) > 120)
        return svc_reply_error(req, 400, "invalid_argument", "name", NULL, "name: 1-120 characters");
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
        strlen(url) > 500)
        return svc_reply_error(req, 400, "invalid_argument", "url", NULL, "url must be an http(s) URL of at most 500 bytes");
    if (!backend || (strcmp(backend, "cpu") && strcmp(backend, "cuda")))
        return svc_reply_error(req, 400, "invalid_argument", "backend", NULL, "backend must be cpu or cuda");
    if (jreason && !reason)
        return svc_reply_error(req, 400, "invalid_argument", "backend_reason", NULL,
                               "backend_reason must be a string");
    if (!json_is_integer(slots) || json_integer_value(slots) < 1 || json_integer_value(slots) > 1024)
        return svc_reply_error(req, 400, "invalid_argument", "slots", NULL, "slots must be 1-1024");
    size_t i;
    json_t *k;
    int kernels_ok = json_is_array(kernels);
    json_array_foreach(kernels, i, k)
        kernels_ok &= json_is_string(k);
    if (!kernels_ok)
        return svc_reply_error(req, 400, "invalid_argument", "kernels", NULL,
                               "kernels must be an array of kernel names");
    json_t *gpus = node_gpus(req, json_object_get(b, "gpus"));
    if (!gpus)
        return 0;
    char *gpus_s = json_dumps(gpus, JSON_COMPACT);
    char *kernels_s = json_dumps(kernels, JSON_COMPACT);
    json_decref(gpus);
    char id[37];
    int rc = gpus_s && kernels_s ? gw_store_node_register(app->store, name, url, backend,
                                                          reason ? reason : "", gpus_s,
                                                          (int)json_integer_value(slots), kernels_s, id)
                                 : -ENOMEM;
    free(gpus_s);
    free(kernels_s);
    if (rc == -ENOMEM)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    svc_info("node registered: %s at %s backend=%s slots=%d%s%s", name, url, backend,
             (int)json_integer_value(slots), reason && *reason ? " reason=" : "", reason ? reason : "");
    gw_leases_forget(app->leases, id);
    gw_sched_nodes_changed(app->sched);
    /* A node on a host that sees the blob directory under this path, with
     * this identity, maps inputs from it and writes outputs to it. */
    return svc_reply_json(req, 200, json_pack("{s:s, s:i, s:{s:s, s:s}}", "id", id, "heartbeat_s",
                                              app->cfg.heartbeat_s, "blob_store", "dir",
                                              gw_bstore_dir(app->blobs), "id",
                                              gw_bstore_id(app->blobs)));
}

/* Runs leased to node id a while ago that its heartbeat does not list
 * (runs: its run ids) never reached it, or it restarted and lost them: they
 * go back to the queue, counted like a node lost. */
static void requeue_unheld(gw_app *app, const char *id, const json_t *runs)
{
    size_t n = json_array_size(runs), cap = n * (GW_RUN_ID_MAX + 1) + 3, len = 0;
    char *held = malloc(cap);
    if (!held)
        return;
    held[len++] = '{';
    size_t i;
    const json_t *r;
    json_array_foreach(runs, i, r) {
        /* A run id is "<uuid>.<attempt>": nothing to quote in an array literal. */
        const char *rid = json_string_value(r);
        if (strlen(rid) > GW_RUN_ID_MAX || strspn(rid, "0123456789abcdef-.") != strlen(rid))
            continue;
        len += (size_t)snprintf(held + len, cap - len, "%s%s", len > 1 ? "," : "", rid);
    }
    snprintf(held + len, cap - len, "}");
    gw_dispatch *lost;
    int nlost;
    if (gw_store_runs_unheld(app->store, id, held, UNHELD_GRACE_S, &lost, &nlost) == 0) {
        for (int k = 0; k < nlost; k++) {
            svc_warn("job %s attempt %d: node %s does not hold the run leased to it; re-queued",
                     lost[k].job_id, lost[k].attempt, lost[k].node_name);
            gw_outcome_requeue(app, lost[k].job_id, lost[k].attempt, 0, "node_lost",
                            "the node lost the run (it restarted, or never received it)");
        }
        gw_dispatch_free(lost, nlost);
    }
    free(held);
}

/* 1 when v is absent or a number within [lo, hi]. */
static int number_in(const json_t *v, double lo, double hi)
{
    return !v || json_is_null(v) || (json_is_number(v) && json_number_value(v) >= lo && json_number_value(v) <= hi);
}

/* A heartbeat's device state: {gpus: [{index, memory_total, memory_free,
 * util}], cpu: {cores, load1}}, every member optional. 0 or -1. */
static int node_state_check(const json_t *state)
{
    const json_t *gpus = json_object_get(state, "gpus"), *cpu = json_object_get(state, "cpu"), *d;
    size_t i;
    if (!json_is_object(state) || (gpus && (!json_is_array(gpus) || json_array_size(gpus) > 16)) ||
        (cpu && !json_is_object(cpu)))
        return -1;
    json_array_foreach(gpus, i, d)
        if (!json_is_object(d) || !json_is_integer(json_object_get(d, "index")) ||
            !number_in(json_object_get(d, "index"), 0, 15) ||
            !number_in(json_object_get(d, "memory_total"), 0, 1e15) ||
            !number_in(json_object_get(d, "memory_free"), 0, 1e15) ||
            !number_in(json_object_get(d, "util"), 0, 100) ||
            (json_object_get(d, "model") && !json_is_string(json_object_get(d, "model"))))
            return -1;
    if (cpu && (!number_in(json_object_get(cpu, "cores"), 0, 1e6) ||
                !number_in(json_object_get(cpu, "load1"), 0, 1e6)))
        return -1;
    return 0;
}

int gw_api_node_heartbeat(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    if (gw_auth_cluster(req) != 0)
        return 0;
    const char *id = svc_req_param(req, "id");
    json_t *b = svc_req_json(req);
    json_t *running = json_object_get(b, "running"), *slots = json_object_get(b, "slots");
    json_t *runs = json_object_get(b, "runs"), *draining = json_object_get(b, "draining"), *r;
    size_t i;
    int runs_ok = json_is_array(runs);
    json_array_foreach(runs, i, r)
        runs_ok &= json_is_string(r);
    if (!json_is_integer(running) || json_integer_value(running) < 0 ||
        json_integer_value(running) > 1024 || !json_is_integer(slots) ||
        json_integer_value(slots) < 0 || json_integer_value(slots) > 1024 || !runs_ok ||
        (draining && !json_is_boolean(draining)))
        return svc_reply_error(req, 400, "invalid_argument", NULL, NULL,
                               "a heartbeat is {running: 0-1024, slots: 0-1024, runs: [strings], "
                               "draining: boolean (optional)}");
    if (!svc_uuid_valid(id))
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "unknown node; register again");
    json_t *state = json_object_get(b, "state");
    if (state && node_state_check(state) != 0)
        return svc_reply_error(req, 400, "invalid_argument", "state", NULL,
                               "state is {gpus: [{index: 0-15, model, memory_total, memory_free: "
                               "bytes, util: 0-100}] (at most 16), cpu: {cores, load1}}");
    char *state_text = state ? json_dumps(state, JSON_COMPACT) : NULL;
    int rc = gw_store_node_heartbeat(app->store, id, (int)json_integer_value(running), state_text);
    free(state_text);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "unknown node; register again");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    requeue_unheld(app, id, runs);
    return svc_reply_json(req, 200, json_object());
}

int gw_api_node_remove(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    if (gw_auth_cluster(req) != 0)
        return 0;
    const char *id = svc_req_param(req, "id");
    int rc = svc_uuid_valid(id) ? gw_store_node_remove(app->store, id) : -ENOENT;
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "unknown node");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    svc_info("node %s deregistered", id);
    gw_leases_end(app->leases, id);
    gw_sched_nodes_changed(app->sched);
    return svc_reply_json(req, 200, json_object());
}

int gw_api_healthz(svc_req *req)
{
    return svc_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

int gw_api_readyz(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    int pg = gw_store_ping(app->store) == 0;
    int rd = gw_queue_ping(app->queue) == 0;
    int ready = pg && rd && !app->draining;
    if (!ready)
        svc_reply_header(req, "Retry-After", "2");
    return svc_reply_json(req, ready ? 200 : 503,
                          json_pack("{s:s, s:s, s:s, s:b}", "status", ready ? "ready" : "unavailable",
                                    "postgres", pg ? "ok" : "down", "redis", rd ? "ok" : "down",
                                    "draining", app->draining));
}

int gw_api_openapi(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    if (!app->openapi)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "openapi.yaml was not found at start");
    return svc_reply_raw(req, 200, "application/yaml", app->openapi, app->openapi_len);
}

int gw_api_metrics(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    return svc_reply_metrics(req, gw_metrics_registry(app->metrics));
}

/* The route table. access is checked from the head before the body is
 * read (gw_authorize); a tenant's or admin's route that changes something
 * is W (its rate limit is the key's write bucket; reads have their own);
 * reserved routes are served even on a connection over the per-IP limit:
 * health checks and nodes must not queue behind clients on the same
 * address. */
#define T GW_ACCESS_TENANT
#define A GW_ACCESS_ADMIN
#define C GW_ACCESS_CLUSTER
#define W GW_ACCESS_WRITE
#define M GW_ACCESS_METRICS
svc_route gw_routes[] = {
    {.method = "POST", .pattern = "/v1/jobs", .handler = gw_api_jobs_submit, .json_body = 1, .access = T | W,
     .body = gw_mpart_body, .body_type = "multipart/form-data"},
    {.method = "GET", .pattern = "/v1/jobs", .handler = gw_api_jobs_list, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}", .handler = gw_api_jobs_get, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/result", .handler = gw_api_jobs_result, .access = T},
    {.method = "POST", .pattern = "/v1/jobs/{id}/cancel", .handler = gw_api_jobs_cancel, .access = T | W},
    {.method = "GET", .pattern = "/v1/jobs/{id}/outputs/{name}", .handler = gw_api_jobs_output, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/events", .handler = gw_api_job_events, .access = T},
    {.method = "GET", .pattern = "/v1/events", .handler = gw_api_events, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/deliveries", .handler = gw_api_jobs_deliveries, .access = T},
    {.method = "GET", .pattern = "/v1/webhook-secret", .handler = gw_api_webhook_secret_get, .access = T},
    {.method = "POST", .pattern = "/v1/webhook-secret", .handler = gw_api_webhook_secret_rotate, .access = T | W},
    {.method = "POST", .pattern = "/v1/blobs", .handler = gw_api_blobs_upload, .access = T | W,
     .body = gw_api_blobs_body, .body_type = "application/octet-stream"},
    {.method = "GET", .pattern = "/v1/blobs/{id}", .handler = gw_api_blobs_get, .access = T},
    {.method = "DELETE", .pattern = "/v1/blobs/{id}", .handler = gw_api_blobs_delete, .access = T | W},
    {.method = "GET", .pattern = "/v1/kernels", .handler = gw_api_kernels, .access = T},
    {.method = "GET", .pattern = "/v1/nodes", .handler = gw_api_nodes_list, .access = T},
    {.method = "GET", .pattern = "/v1/usage", .handler = gw_api_usage, .access = T},
    {.method = "GET", .pattern = "/v1/stats/history", .handler = gw_api_stats_history, .access = T},
    {.method = "POST", .pattern = "/v1/nodes/register", .handler = gw_api_node_register,
     .json_body = 1, .access = C, .reserved = 1},
    {.method = "POST", .pattern = "/v1/nodes/{id}/heartbeat", .handler = gw_api_node_heartbeat,
     .json_body = 1, .access = C, .reserved = 1},
    {.method = "DELETE", .pattern = "/v1/nodes/{id}", .handler = gw_api_node_remove, .access = C,
     .reserved = 1},
    {.method = "POST", .pattern = "/v1/cluster/blobs", .handler = gw_api_cluster_blobs_upload,
     .access = C, .reserved = 1, .body = gw_api_blobs_body, .body_type = "application/octet-stream"},
    {.method = "GET", .pattern = "/v1/cluster/blobs/{id}", .handler = gw_api_cluster_blobs_get,
     .access = C, .reserved = 1},
    {.method = "PUT", .pattern = "/v1/cluster/blobs/{id}", .handler = gw_api_cluster_blobs_adopt,
     .json_body = 1, .access = C, .reserved = 1},
    {.method = "POST", .pattern = "/v1/cluster/nodes/{id}/lease", .handler = gw_api_node_lease,
     .json_body = 1, .access = C, .reserved = 1},
    {.method = "POST", .pattern = "/v1/cluster/nodes/{id}/results", .handler = gw_api_node_results,
     .json_body = 1, .access = C, .reserved = 1},
    {.method = "PUT", .pattern = "/v1/cluster/rendezvous/{id}/{attempt}/{key}",
     .handler = gw_api_rendezvous_put, .access = C, .reserved = 1},
    {.method = "GET", .pattern = "/v1/cluster/rendezvous/{id}/{attempt}/{key}",
     .handler = gw_api_rendezvous_get, .access = C, .reserved = 1},
    {.method = "GET", .pattern = "/healthz", .handler = gw_api_healthz, .reserved = 1},
    {.method = "GET", .pattern = "/readyz", .handler = gw_api_readyz, .reserved = 1},
    {.method = "GET", .pattern = "/openapi.yaml", .handler = gw_api_openapi},
    {.method = "GET", .pattern = "/metrics", .handler = gw_api_metrics, .access = M, .reserved = 1},
    {.method = "GET", .pattern = "/", .handler = gw_api_ui_root},
    {.method = "GET", .pattern = "/ui", .handler = gw_api_ui_slash},
    {.method = "GET", .pattern = "/ui/", .handler = gw_api_ui_index},
    {.method = "GET", .pattern = "/ui/{file}", .handler = gw_api_ui_file},
    {.method = "GET", .pattern = "/ui/vendor/chart.js/{file}", .handler = gw_api_ui_chartjs},
    {.method = "POST", .pattern = "/v1/tenants", .handler = gw_api_tenants_put, .json_body = 1, .access = A | W},
    {.method = "GET", .pattern = "/v1/tenants", .handler = gw_api_tenants_list, .access = A},
    {.method = "POST", .pattern = "/v1/keys", .handler = gw_api_keys_create, .json_body = 1, .access = A | W},
    {.method = "DELETE", .pattern = "/v1/keys/{prefix}", .handler = gw_api_keys_revoke, .access = A | W},
    {.method = "POST", .pattern = "/v1/nodes/{id}/drain", .handler = gw_api_node_drain, .access = A | W},
    {.method = "DELETE", .pattern = "/v1/nodes/{id}/drain", .handler = gw_api_node_undrain, .access = A | W},
    {.method = NULL},
};
#undef T
#undef A
#undef C
#undef W
#undef M

void gw_routes_set_blob_limit(size_t bytes)
{
    for (svc_route *r = gw_routes; r->method != NULL; r++)
        if (r->body != NULL)
            r->max_body = bytes;
}
