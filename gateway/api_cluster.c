/* api_cluster.c — the node list and the kernel catalog as tenants see
 * them, health and readiness, the OpenAPI document, and the public
 * listener's route table. What nodes call is in api_nodes.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "kl.h"
#include "metrics.h"
#include "request.h"
#include "svc_log.h"
#include "svc_util.h"

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
    json_t *nodes, *capacity;
    if (gw_store_nodes_json(app->store, &nodes) != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    if (gw_store_capacity_json(app->store, &capacity) != 0) {
        json_decref(nodes);
        return gw_reply_unavailable(req, "PostgreSQL");
    }
    /* A tenant sees what it needs to choose resources: each node's backend,
     * GPUs, slots and state, and the free capacity per GPU model. Where
     * nodes live and what their hosts' files are called (url,
     * backend_reason), and each node's live load (running, gpu_state: what
     * other tenants' jobs are doing there), are for admins. */
    static const char *const admin_only[] = {"url", "backend_reason", "registered_at",
                                             "last_heartbeat", "running", "gpu_state", NULL};
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
        for (int f = 0; !who.admin && admin_only[f]; f++)
            json_object_del(n, admin_only[f]);
    return svc_reply_json(req, 200, json_pack("{s:o, s:o}", "nodes", nodes, "capacity", capacity));
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

/* The route table of the public listener; what nodes call is on the
 * cluster listener (api_nodes.c), and answers 404 here. access is checked
 * from the head before the body is read (gw_authorize); a tenant's or
 * admin's route that changes something is W (its rate limit is the key's
 * write bucket; reads have their own); reserved routes are served even on
 * a connection over the per-IP limit: health checks must not queue behind
 * clients on the same address. */
#define T GW_ACCESS_TENANT
#define A GW_ACCESS_ADMIN
#define W GW_ACCESS_WRITE
#define M GW_ACCESS_METRICS
#define P GW_ACCESS_PUBLIC
svc_route gw_routes[] = {
    {.method = "POST", .pattern = "/v1/jobs", .handler = gw_api_jobs_submit, .json_body = 1, .access = T | W,
     .body = gw_mpart_body, .body_type = "multipart/form-data", .json_fields = gw_job_fields},
    {.method = "GET", .pattern = "/v1/jobs", .handler = gw_api_jobs_list, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}", .handler = gw_api_jobs_get, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/result", .handler = gw_api_jobs_result, .access = T},
    {.method = "POST", .pattern = "/v1/jobs/{id}/cancel", .handler = gw_api_jobs_cancel, .access = T | W},
    {.method = "DELETE", .pattern = "/v1/jobs/{id}", .handler = gw_api_jobs_delete, .access = T | W},
    {.method = "GET", .pattern = "/v1/jobs/{id}/outputs/{name*}", .handler = gw_api_jobs_output, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/logs", .handler = gw_api_jobs_logs, .access = T},
    {.method = "GET", .pattern = "/v1/images", .handler = gw_api_images, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/events", .handler = gw_api_job_events, .access = T},
    {.method = "GET", .pattern = "/v1/events", .handler = gw_api_events, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/deliveries", .handler = gw_api_jobs_deliveries, .access = T},
    {.method = "GET", .pattern = "/v1/webhook-secret", .handler = gw_api_webhook_secret_get, .access = T},
    {.method = "POST", .pattern = "/v1/webhook-secret", .handler = gw_api_webhook_secret_rotate, .access = T | W},
    {.method = "POST", .pattern = "/v1/blobs", .handler = gw_api_blobs_upload, .access = T | W,
     .body = gw_api_blobs_body, .body_type = "application/octet-stream", .head = gw_api_blobs_head},
    {.method = "GET", .pattern = "/v1/blobs/{id}", .handler = gw_api_blobs_get, .access = T},
    {.method = "DELETE", .pattern = "/v1/blobs/{id}", .handler = gw_api_blobs_delete, .access = T | W},
    {.method = "GET", .pattern = "/v1/kernels", .handler = gw_api_kernels, .access = T},
    {.method = "GET", .pattern = "/v1/nodes", .handler = gw_api_nodes_list, .access = T},
    {.method = "GET", .pattern = "/v1/usage", .handler = gw_api_usage, .access = T},
    {.method = "GET", .pattern = "/v1/stats/history", .handler = gw_api_stats_history, .access = T},
    {.method = "GET", .pattern = "/healthz", .handler = gw_api_healthz, .access = P, .reserved = 1},
    {.method = "GET", .pattern = "/readyz", .handler = gw_api_readyz, .access = P, .reserved = 1},
    {.method = "GET", .pattern = "/openapi.yaml", .handler = gw_api_openapi, .access = P},
    {.method = "GET", .pattern = "/metrics", .handler = gw_api_metrics, .access = M, .reserved = 1},
    {.method = "GET", .pattern = "/", .handler = gw_api_ui_root, .access = P},
    {.method = "GET", .pattern = "/ui", .handler = gw_api_ui_slash, .access = P},
    {.method = "GET", .pattern = "/ui/", .handler = gw_api_ui_index, .access = P},
    {.method = "GET", .pattern = "/ui/{file}", .handler = gw_api_ui_file, .access = P},
    {.method = "GET", .pattern = "/ui/vendor/chart.js/{file}", .handler = gw_api_ui_chartjs, .access = P},
    {.method = "POST", .pattern = "/v1/tenants", .handler = gw_api_tenants_put, .json_body = 1, .access = A | W},
    {.method = "GET", .pattern = "/v1/tenants", .handler = gw_api_tenants_list, .access = A},
    {.method = "POST", .pattern = "/v1/keys", .handler = gw_api_keys_create, .json_body = 1, .access = A | W},
    {.method = "GET", .pattern = "/v1/keys", .handler = gw_api_keys_list, .access = A},
    {.method = "DELETE", .pattern = "/v1/keys/{id}", .handler = gw_api_keys_revoke, .access = A | W},
    {.method = "POST", .pattern = "/v1/nodes/{id}/drain", .handler = gw_api_node_drain, .access = A | W},
    {.method = "DELETE", .pattern = "/v1/nodes/{id}/drain", .handler = gw_api_node_undrain, .access = A | W},
    {.method = NULL},
};
#undef T
#undef A
#undef W
#undef M
#undef P

void gw_routes_set_blob_limit(size_t bytes)
{
    svc_route *tables[] = {gw_routes, gw_cluster_routes};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (svc_route *r = tables[t]; r->method != NULL; r++)
            if (r->body == gw_api_blobs_body || r->body == gw_mpart_body)
                r->max_body = bytes;
}
