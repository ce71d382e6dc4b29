/* request.c — POST /v1/jobs body validation. Envelope problems (unknown
 * fields, wrong types, values out of range) are 400; problems with the
 * kernel call itself (unknown kernel, params, inputs and their shapes) are
 * 422, naming the field. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "svc_util.h"

/* What a 4 GiB blob of float32 holds. */
#define MAX_ELEMS KL_MAX_ELEMS

/* Reads an optional integer member into *out within [lo, hi]. */
static int int_member(const json_t *o, const char *name, const char *field, long lo, long hi,
                      int *out, gw_verr *e)
{
    json_t *v = json_object_get(o, name);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return gw_verr_set(e, 400, field, "%s must be an integer", field);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return gw_verr_set(e, 400, field, "%s must be between %ld and %ld", field, lo, hi);
    *out = (int)x;
    return 0;
}

int gw_label_key_valid(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 64)
        return 0;
    for (; *k; k++)
        if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
              *k == '_' || *k == '.' || *k == '-'))
            return 0;
    return 1;
}

static int labels_parse(const json_t *body, gw_job_req *r, gw_verr *e)
{
    json_t *l = json_object_get(body, "labels");
    if (!l) {
        r->labels = json_object();
        return 0;
    }
    if (!json_is_object(l))
        return gw_verr_set(e, 400, "labels", "labels must be an object of strings");
    if (json_object_size(l) > GW_MAX_LABELS)
        return gw_verr_set(e, 400, "labels", "at most %d labels", GW_MAX_LABELS);
    const char *k;
    json_t *v;
    json_object_foreach(l, k, v) {
        char field[64];
        snprintf(field, sizeof(field), "labels.%.50s", k);
        if (!gw_label_key_valid(k))
            return gw_verr_set(e, 400, field, "label keys are 1-64 characters of A-Z a-z 0-9 _ . -");
        if (!json_is_string(v) || svc_utf8_chars(json_string_value(v)) > 256)
            return gw_verr_set(e, 400, field, "%s must be a string of at most 256 characters", field);
    }
    r->labels = json_incref(l);
    return 0;
}

/* webhook (a URL, checked for its form and length here and for where it
 * leads by webhook_net.c) and webhook_events (states, no repeats; by
 * default the terminal ones). */
static int webhook_parse(const json_t *body, gw_job_req *r, gw_verr *e)
{
    static const char *const states[] = {"queued", "running", "succeeded", "failed", "cancelled",
                                         NULL};
    json_t *w = json_object_get(body, "webhook");
    json_t *ev = json_object_get(body, "webhook_events");
    if (!w) {
        if (ev)
            return gw_verr_set(e, 422, "webhook_events", "webhook_events needs a webhook");
        return 0;
    }
    if (!json_is_string(w))
        return gw_verr_set(e, 400, "webhook", "webhook must be a string (an http or https URL)");
    if (json_string_length(w) > GW_WEBHOOK_URL_MAX)
        return gw_verr_set(e, 422, "webhook", "webhook must be at most %d characters", GW_WEBHOOK_URL_MAX);
    if (strncmp(json_string_value(w), "http://", 7) != 0 &&
        strncmp(json_string_value(w), "https://", 8) != 0)
        return gw_verr_set(e, 422, "webhook", "webhook must be an http:// or https:// URL");
    if (!ev) {
        snprintf(r->webhook_events, sizeof r->webhook_events, "succeeded,failed,cancelled");
    } else {
        if (!json_is_array(ev) || json_array_size(ev) == 0)
            return gw_verr_set(e, 400, "webhook_events", "webhook_events must be a non-empty array of "
                        "states (queued, running, succeeded, failed, cancelled)");
        int seen[5] = {0};
        size_t i;
        json_t *x;
        json_array_foreach(ev, i, x) {
            const char *st = json_string_value(x);
            int k = 0;
            while (st && states[k] && strcmp(st, states[k]) != 0)
                k++;
            if (!st || !states[k] || seen[k]++)
                return gw_verr_set(e, 400, "webhook_events", "webhook_events holds each of queued, "
                            "running, succeeded, failed, cancelled at most once");
            size_t n = strlen(r->webhook_events);
            snprintf(r->webhook_events + n, sizeof r->webhook_events - n, "%s%s", n ? "," : "", st);
        }
    }
    if (!(r->webhook = strdup(json_string_value(w))))
        return gw_verr_set(e, 500, "webhook", "out of memory");
    return 0;
}

/* resources.gpu_memory_gb: a number in (0, 1024] when given. */
static int gpu_memory_parse(const json_t *res, gw_job_req *r, gw_verr *e)
{
    json_t *m = json_object_get(res, "gpu_memory_gb");
    if (!m)
        return 0;
    if (!json_is_number(m))
        return gw_verr_set(e, 400, "resources.gpu_memory_gb", "resources.gpu_memory_gb must be a number");
    double gb = json_number_value(m);
    if (!(gb > 0 && gb <= 1024))
        return gw_verr_set(e, 422, "resources.gpu_memory_gb",
                    "resources.gpu_memory_gb must be more than 0 and at most 1024 (GB per GPU)");
    r->gpu_memory_gb = gb;
    return 0;
}

static int resources_parse(const json_t *body, gw_job_req *r, gw_verr *e)
{
    json_t *res = json_object_get(body, "resources");
    snprintf(r->backend, sizeof(r->backend), "any");
    r->gpus = 1;
    r->nodes = 1;
    if (!res)
        return 0;
    if (!json_is_object(res))
        return gw_verr_set(e, 400, "resources", "resources must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(res, k, v) {
        int task_only = strcmp(k, "memory_gb") == 0 || strcmp(k, "cpus") == 0;
        if (task_only && !r->task) {
            char field[40];
            snprintf(field, sizeof field, "resources.%s", k);
            return gw_verr_set(e, 422, field, "%s is for tasks (a kernel's memory and CPUs are its "
                        "node's)", field);
        }
        if (!task_only && strcmp(k, "backend") != 0 && strcmp(k, "gpus") != 0 &&
            strcmp(k, "nodes") != 0 && strcmp(k, "gpu_memory_gb") != 0)
            return gw_verr_set(e, 400, "resources", "resources.%.40s is not a known resource (backend, "
                        "gpus, nodes, gpu_memory_gb%s)", k, r->task ? ", memory_gb, cpus" : "");
    }
    static const struct { const char *name; double lo, hi; } per_node[] = {
        {"memory_gb", 0.015625, 65536}, {"cpus", 0.01, 1024}};
    for (int i = 0; i < 2; i++) {
        json_t *x = json_object_get(res, per_node[i].name);
        char field[40];
        snprintf(field, sizeof field, "resources.%s", per_node[i].name);
        if (!x)
            continue;
        if (!json_is_number(x))
            return gw_verr_set(e, 400, field, "%s must be a number", field);
        double d = json_number_value(x);
        if (!(d >= per_node[i].lo && d <= per_node[i].hi))
            return gw_verr_set(e, 422, field, "%s must be from %g to %g (per node)", field,
                        per_node[i].lo, per_node[i].hi);
        *(i == 0 ? &r->memory_gb : &r->cpus) = d;
    }
    json_t *b = json_object_get(res, "backend");
    if (b) {
        const char *s = json_string_value(b);
        if (!s || (strcmp(s, "any") && strcmp(s, "cpu") && strcmp(s, "cuda")))
            return gw_verr_set(e, 400, "resources.backend", "resources.backend must be any, cpu or cuda");
        snprintf(r->backend, sizeof(r->backend), "%s", s);
    }
    /* nodes' upper bound is the kernel's max_nodes (at most GW_MAX_NODES):
     * a request past it is a 422 that names the kernel (nodes_check). */
    /* a task may ask for no GPU (a CPU program on any node) */
    if (int_member(res, "gpus", "resources.gpus", 0, 16, &r->gpus, e) ||
        int_member(res, "nodes", "resources.nodes", INT32_MIN, INT32_MAX, &r->nodes, e))
        return -1;
    if (r->nodes < 1)
        return gw_verr_set(e, 400, "resources.nodes", "resources.nodes must be at least 1");
    if (r->gpus < 1 && !r->task)
        return gw_verr_set(e, 422, "resources.gpus", "resources.gpus must be at least 1 for a kernel "
                    "(0, no GPU, is for tasks)");
    return gpu_memory_parse(res, r, e);
}

/* resources.nodes against what the kernel can span (its catalog entry's
 * max_nodes; 0 or 1: one node only) and the cluster's bound. */
static int nodes_check(const gw_job_req *r, gw_verr *e)
{
    if (!r->kernel)
        return r->nodes <= GW_MAX_NODES ? 0 : gw_verr_set(e, 422, "resources.nodes", "resources.nodes is "
                                                   "%d; a task spans at most %d nodes", r->nodes,
                                                   GW_MAX_NODES);
    int max = r->kernel->max_nodes > 1 ? r->kernel->max_nodes : 1;
    if (max > GW_MAX_NODES)
        max = GW_MAX_NODES;
    if (r->nodes <= max)
        return 0;
    return gw_verr_set(e, 422, "resources.nodes", "resources.nodes is %d but kernel %s runs on at most %d "
                "node%s (max_nodes in GET /v1/kernels)", r->nodes, r->kernel->name, max,
                max == 1 ? "" : "s");
}

const char *const gw_job_fields[] = {"kernel", "task", "params", "inputs", "priority", "timeout_s",
                                     "max_attempts", "resources", "labels", "webhook",
                                     "webhook_events", NULL};

/* Every member of body is a field of a job request. */
static int fields_known(const json_t *body, gw_verr *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v) {
        int ok = 0;
        for (int i = 0; gw_job_fields[i] && !ok; i++)
            ok = strcmp(k, gw_job_fields[i]) == 0;
        if (!ok) {
            char field[64];
            snprintf(field, sizeof(field), "%.60s", k);
            return gw_verr_set(e, 400, field, "%s is not a field of a job request", field);
        }
    }
    return 0;
}

/* A kernel call or a task, not both (r->task set when a task). */
static int kind_check(const json_t *body, gw_job_req *r, gw_verr *e)
{
    json_t *kv = json_object_get(body, "kernel");
    r->task = json_object_get(body, "task");
    /* well-formed members that do not go together: 422, as a kernel call
     * that does not fit its kernel */
    if (kv && r->task)
        return gw_verr_set(e, 422, "task", "a job runs a kernel or a task, not both");
    if (r->task && (json_object_get(body, "params") || json_object_get(body, "inputs")))
        return gw_verr_set(e, 422, json_object_get(body, "params") ? "params" : "inputs",
                    "a task's inputs go in task.inputs; params and inputs are a kernel's");
    if (!kv && !r->task)
        return gw_verr_set(e, 400, "kernel", "kernel (a catalog kernel) or task (an image and a "
                    "command) is required");
    if (kv && !json_is_string(kv))
        return gw_verr_set(e, 400, "kernel", "kernel must be a string");
    return 0;
}

int gw_job_req_parse(const json_t *body, gw_job_req *r, gw_verr *e)
{
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    if (fields_known(body, e) != 0 || kind_check(body, r, e) != 0)
        return -1;
    r->priority = 5;
    r->timeout_s = 3600;
    r->max_attempts = 3;
    json_t *kv = json_object_get(body, "kernel");
    if (int_member(body, "priority", "priority", 0, 9, &r->priority, e) ||
        int_member(body, "timeout_s", "timeout_s", 1, 86400, &r->timeout_s, e) ||
        int_member(body, "max_attempts", "max_attempts", 1, 10, &r->max_attempts, e) ||
        resources_parse(body, r, e) || labels_parse(body, r, e) || webhook_parse(body, r, e))
        goto bad;
    if (r->task)
        return nodes_check(r, e) == 0 ? 0 : (gw_job_req_free(r), -1);
    r->kernel = kl_kernel_find(json_string_value(kv));
    if (!r->kernel) {
        gw_verr_set(e, 422, "kernel", "unknown kernel '%.100s'; GET /v1/kernels lists them",
             json_string_value(kv));
        goto bad;
    }
    if (nodes_check(r, e))
        goto bad;
    json_t *params = json_object_get(body, "params");
    json_t *inputs = json_object_get(body, "inputs");
    if ((params && !json_is_object(params)) || (inputs && !json_is_object(inputs))) {
        gw_verr_set(e, 400, params && !json_is_object(params) ? "params" : "inputs",
             "%s must be an object", params && !json_is_object(params) ? "params" : "inputs");
        goto bad;
    }
    kl_err ke = {{0}, {0}};
    if (svc_kargs_bind(r->kernel, params, inputs, MAX_ELEMS, r->gpus, &r->ka, &ke) != 0) {
        gw_verr_set(e, 422, ke.field, "%s", ke.message);
        goto bad;
    }
    return 0;
bad:
    gw_job_req_free(r);
    return -1;
}

int gw_job_req_check_output(const gw_job_req *r, int64_t max_bytes, gw_verr *e)
{
    if (!r->kernel)
        return 0; /* a task's output quota is its own (task.h) */
    const char *field = NULL;
    int64_t bytes = kl_output_bytes(&r->ka.args, &field);
    if (bytes <= max_bytes)
        return 0;
    return gw_verr_set(e, 422, field ? field : "kernel",
                "the outputs of this %s job would take %lld bytes (%.1f MiB, sized by %s); this gateway "
                "allows at most %lld MiB per job (--max-output-mb)",
                r->kernel->name, (long long)bytes, (double)bytes / (1 << 20), field ? field : "the kernel",
                (long long)(max_bytes >> 20));
}

void gw_job_req_free(gw_job_req *r)
{
    if (!r)
        return;
    svc_kargs_free(&r->ka);
    json_decref(r->labels);
    r->labels = NULL;
    free(r->webhook);
    r->webhook = NULL;
}
