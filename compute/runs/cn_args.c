/* cn_args.c — the node's request decoder: JSON in, kl_args out. Everything the
 * gateway sends is checked again here, since a node must never run a kernel
 * on arguments the library has not accepted. */
#include "cn_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Job ids become part of run ids and URL paths: keep them URL-safe. */
static int cn__job_id_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > CN_JOB_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

/* Reads an optional integer member into *out (def when absent or null).
 * Returns 0, or -1 with status/err set: 400 for a wrong type, 422 out of
 * [min, max]. */
static int cn__int_member(const json_t *body, const char *name, long def, long min, long max,
                          long *out, int *status, kl_err *err)
{
    const json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) {
        *status = 400;
        kl_err_set(err, name, "%s must be an integer", name);
        return -1;
    }
    json_int_t x = json_integer_value(v);
    if (x < min || x > max) {
        *status = 422;
        kl_err_set(err, name, "%s must be between %ld and %ld", name, min, max);
        return -1;
    }
    *out = (long)x;
    return 0;
}

int cn_run_req_ident(const json_t *body, cn_run_req *req, int *status, kl_err *err)
{
    long attempt;

    memset(req, 0, sizeof *req);
    const json_t *jid = json_object_get(body, "job_id");
    if (!json_is_string(jid) || !cn__job_id_valid(json_string_value(jid))) {
        *status = 400;
        kl_err_set(err, "job_id", "job_id must be 1 to %d characters of [A-Za-z0-9_-]",
                   CN_JOB_ID_MAX);
        return -1;
    }
    if (!json_object_get(body, "attempt")) {
        *status = 400;
        kl_err_set(err, "attempt", "attempt is required");
        return -1;
    }
    if (cn__int_member(body, "attempt", 1, 1, 1000000, &attempt, status, err) < 0)
        return -1;
    snprintf(req->job_id, sizeof req->job_id, "%s", json_string_value(jid));
    req->attempt = (int)attempt;
    snprintf(req->run_id, sizeof req->run_id, "%s.%d", req->job_id, req->attempt);
    return 0;
}

/* "dist" (a part of a multi-node job) and "gpu_ids", both optional. 0, or
 * -1 with status and err. A task's parts are one process tree per node
 * whatever its GPUs, so its "world" is not checked against them. */
static int cn__placement(const json_t *body, cn_run_req *req, int task, int *status, kl_err *err)
{
    const json_t *d = json_object_get(body, "dist");
    const json_t *ids = json_object_get(body, "gpu_ids");
    long nodes, rank, world, lo, hi;
    req->node_rank = -1;
    req->nodes = 1;
    if (ids && !json_is_null(ids)) {
        size_t i;
        const json_t *v;
        if (!json_is_array(ids) || json_array_size(ids) > 16) {
            *status = 400;
            kl_err_set(err, "gpu_ids", "gpu_ids must be an array of at most 16 device indices");
            return -1;
        }
        json_array_foreach(ids, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 15) {
                *status = 400;
                kl_err_set(err, "gpu_ids", "gpu_ids must be device indices from 0 to 15");
                return -1;
            }
            req->gpu_ids[req->ngpu_ids++] = (int)json_integer_value(v);
        }
    }
    if (!d || json_is_null(d))
        return 0;
    if (!json_is_object(d)) {
        *status = 400;
        kl_err_set(err, "dist", "dist must be an object");
        return -1;
    }
    if (!json_object_get(d, "nodes") || !json_object_get(d, "node_rank") ||
        (!task && !json_object_get(d, "world"))) {
        *status = 400;
        kl_err_set(err, "dist", "dist needs nodes (2-64), node_rank and world");
        return -1;
    }
    if (cn__int_member(d, "nodes", 0, 2, 64, &nodes, status, err) < 0 ||
        cn__int_member(d, "node_rank", -1, 0, nodes - 1, &rank, status, err) < 0 ||
        cn__int_member(d, "world", nodes, task ? 0 : nodes, 64 * 16, &world, status, err) < 0 ||
        cn__int_member(d, "shard_lo", 0, 0, KL_MAX_ELEMS, &lo, status, err) < 0 ||
        cn__int_member(d, "shard_hi", 0, lo, KL_MAX_ELEMS, &hi, status, err) < 0)
        return -1;
    if (!task && world != nodes * req->gpus) {
        *status = 422;
        kl_err_set(err, "dist", "dist.world must be nodes x gpus (%ld x %d)", nodes, req->gpus);
        return -1;
    }
    req->nodes = (int)nodes;
    req->node_rank = (int)rank;
    req->shard_lo = lo;
    req->shard_hi = hi;
    return 0;
}

/* "backend": any (or absent), cpu or cuda. 0, or -1 with err (a 400). */
static int cn__target(const json_t *body, cn_run_req *req, kl_err *err)
{
    const json_t *jb = json_object_get(body, "backend");
    const char *b = json_is_string(jb) ? json_string_value(jb) : NULL;
    if (!jb || json_is_null(jb) || (b && strcmp(b, "any") == 0))
        req->target = CN_TARGET_ANY;
    else if (b && strcmp(b, "cpu") == 0)
        req->target = CN_TARGET_CPU;
    else if (b && strcmp(b, "cuda") == 0)
        req->target = CN_TARGET_CUDA;
    else {
        kl_err_set(err, "backend", "backend must be any, cpu or cuda");
        return -1;
    }
    return 0;
}

/* timeout_s, gpus (a task may have no GPU at all; a kernel has at least
 * its rank), output_blobs and output_blob_min. 0, or -1 with *status and
 * err. */
static int cn__limits(const json_t *body, cn_run_req *req, int task, int *status, kl_err *err)
{
    long timeout_s, gpus, ob_min;
    if (cn__int_member(body, "timeout_s", 3600, 1, 86400 * 7, &timeout_s, status, err) < 0 ||
        cn__int_member(body, "gpus", task ? 0 : 1, task ? 0 : 1, 16, &gpus, status, err) < 0)
        return -1;
    req->timeout_s = (int)timeout_s;
    req->gpus = (int)gpus;
    const json_t *ob = json_object_get(body, "output_blobs");
    if (ob && !json_is_null(ob) && !json_is_boolean(ob)) {
        kl_err_set(err, "output_blobs", "output_blobs must be a boolean");
        return -1;
    }
    req->output_blobs = json_is_true(ob);
    if (cn__int_member(body, "output_blob_min", 0, 0, 1L << 40, &ob_min, status, err) < 0)
        return -1;
    req->output_blob_min = (size_t)ob_min;
    return 0;
}

/* A kernel run's params and inputs, bound to the kernel's catalog entry
 * (svc_kargs_bind). 0, or -1 with *status (400: not well-formed; 422: the
 * kernel refuses it) and err. */
static int cn__kernel(const json_t *body, const char *kernel, cn_run_req *req, int *status, kl_err *err)
{
    *status = 400;
    const json_t *params = json_object_get(body, "params");
    const json_t *inputs = json_object_get(body, "inputs");
    if (params && !json_is_null(params) && !json_is_object(params)) {
        kl_err_set(err, "params", "params must be an object");
        return -1;
    }
    if (inputs && !json_is_null(inputs) && !json_is_object(inputs)) {
        kl_err_set(err, "inputs", "inputs must be an object");
        return -1;
    }
    /* From here on the document is well-formed; what remains is whether the
     * kernel accepts it, which the contract answers with 422. */
    *status = 422;
    const kl_kernel *k = kl_kernel_find(kernel);
    if (!k) {
        kl_err_set(err, "kernel", "unknown kernel \"%s\"", kernel);
        return -1;
    }
    /* The per-input limits of the catalog are checked by kl_args_check; the
     * contract's global limit stops the codec before it allocates. */
    return svc_kargs_bind(k, json_is_null(params) ? NULL : params, json_is_null(inputs) ? NULL : inputs,
                          KL_MAX_ELEMS, req->gpus, &req->ka, err) < 0 ? -1 : 0;
}

/* A task run's spec (cn_task_spec_decode). 0, or -1 with *status and err. */
static int cn__task(const json_t *jt, cn_run_req *req, int *status, kl_err *err)
{
    if (!(req->task = calloc(1, sizeof *req->task))) {
        *status = 422;
        kl_err_set(err, "task", "out of memory");
        return -1;
    }
    return cn_task_spec_decode(jt, req->task, status, err) < 0 ? -1 : 0;
}

int cn_run_req_decode(const json_t *body, cn_run_req *req, int *status, kl_err *err)
{
    int rc = -1;

    if (cn_run_req_ident(body, req, status, err) < 0)
        return -1;

    *status = 400;
    const json_t *jk = json_object_get(body, "kernel");
    const json_t *jt = json_object_get(body, "task");
    int task = jt && !json_is_null(jt);
    if (task && jk && !json_is_null(jk)) {
        kl_err_set(err, "task", "a run has a kernel or a task, not both");
        goto cleanup;
    }
    if (!task && !json_is_string(jk)) {
        kl_err_set(err, "kernel", "kernel must be a string");
        goto cleanup;
    }
    if (cn__target(body, req, err) < 0 || cn__limits(body, req, task, status, err) < 0 ||
        cn__placement(body, req, task, status, err) < 0)
        goto cleanup;
    rc = task ? cn__task(jt, req, status, err) : cn__kernel(body, json_string_value(jk), req, status, err);
cleanup:
    if (rc < 0)
        cn_run_req_clear(req);
    return rc;
}

void cn_run_req_clear(cn_run_req *req)
{
    if (!req)
        return;
    svc_kargs_free(&req->ka);
    cn_task_spec_free(req->task);
    free(req->task);
    memset(req, 0, sizeof *req);
}
