/* api_info.c — the node list and the kernel catalog as tenants see them,
 * health and readiness, the OpenAPI document and the metrics. What nodes
 * call is in api_nodes.c; every route is in routes.c. */
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
    gw_caller who = gw_req_caller(req);
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
