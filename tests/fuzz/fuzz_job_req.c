/* fuzz_job_req.c — libFuzzer harness for the POST /v1/jobs body parser and
 * validator (gateway/api/request.c: envelope, then svc_kargs_bind against the
 * kernel catalog and the tensor codec).
 *
 * The input is the raw request body. It is loaded the way svc_http.c loads
 * it (JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, objects only) and handed to
 * gw_job_req_parse. Beyond "no crash, no leak, no undefined behaviour", an
 * accepted request must keep what the submit handler and the node rely on:
 *   - the envelope is within its documented ranges;
 *   - kl_args_check still passes and every required input is bound;
 *   - the stored form survives: the params as svc_kargs_params_json dumps
 *     them and the inputs packed with gw_blob_add and read back with
 *     gw_blob_to_json bind again on the node's side (svc_kargs_bind) to the
 *     same bytes. A job the gateway accepts must never be one the node
 *     refuses as invalid input.
 * A task request (task, no kernel) is accepted here with its envelope only:
 * its spec is gw_task_parse's, the submit handler's next step.
 * A refused request must name a status (400 or 422) and a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "blob.h"
#include "request.h"
#include "svc_kargs.h"
#include "svc_tensor.h"

#define FUZZ_MAX_ELEMS (1LL << 28)   /* as gateway/api/request.c */

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_job_req: invariant broken: %s\n", what);
        abort();
    }
}

/* The node's view of an accepted job: params and inputs as they were stored,
 * through text, bound again. */
static void rebind(const gw_job_req *r)
{
    const kl_kernel *k = r->kernel;
    json_t *params = svc_kargs_params_json(&r->ka.args);
    check(params != NULL, "svc_kargs_params_json returned NULL");
    char *params_s = json_dumps(params, JSON_COMPACT);
    check(params_s != NULL, "params do not dump");
    json_decref(params);

    gw_blob blob = {0};
    for (int i = 0; i < k->ninputs; i++)
        if (r->ka.args.inputs[i])
            check(gw_blob_add(&blob, k->inputs[i].name, &r->ka.tensors[i]) == 0, "gw_blob_add failed");
    if (!blob.meta)
        blob.meta = json_array();
    char *meta_s = json_dumps(blob.meta, JSON_COMPACT);
    check(meta_s != NULL, "input metadata does not dump");

    json_t *meta = json_loads(meta_s, 0, NULL);
    check(meta != NULL, "input metadata does not load back");
    /* The gateway reads the packed inputs back from PostgreSQL into a
     * buffer that is never NULL (store_jobs.c: malloc(len ? len : 1)). */
    static const unsigned char none[1];
    json_t *inputs_j = gw_blob_to_json(meta, blob.data ? blob.data : none, blob.len, 1);
    check(inputs_j != NULL, "gw_blob_to_json refused what gw_blob_add packed");
    char *inputs_s = json_dumps(inputs_j, JSON_COMPACT);
    check(inputs_s != NULL, "inputs do not dump");
    json_decref(inputs_j);
    json_decref(meta);

    json_t *p2 = json_loads(params_s, 0, NULL);
    json_t *i2 = json_loads(inputs_s, 0, NULL);
    check(p2 && i2, "stored params or inputs do not load back");
    svc_kargs ka;
    kl_err ke = {{0}, {0}};
    int rc = svc_kargs_bind(k, p2, i2, KL_MAX_ELEMS, r->gpus, &ka, &ke); /* as compute/runs/cn_args.c */
    if (rc != 0)
        fprintf(stderr, "rebind: %s: %s\nparams %s\n", ke.field, ke.message, params_s);
    check(rc == 0, "the node would refuse a job the gateway accepted");
    for (int i = 0; i < k->nparams; i++) {
        const kl_value *a = &r->ka.args.params[i], *b = &ka.args.params[i];
        if (k->params[i].type == KL_PARAM_ENUM)
            check(a->choice == b->choice, "an enum param changed on the way to the node");
        else
            check(a->num == b->num, "a numeric param changed on the way to the node");
    }
    for (int i = 0; i < k->ninputs; i++) {
        const svc_tensor *x = &r->ka.tensors[i], *y = &ka.tensors[i];
        check((r->ka.args.inputs[i] == NULL) == (ka.args.inputs[i] == NULL), "an input appeared or vanished");
        check(x->dtype == y->dtype && x->ndim == y->ndim && x->nbytes == y->nbytes,
              "an input changed dtype, rank or size on the way to the node");
        check(memcmp(x->shape, y->shape, sizeof(x->shape)) == 0, "an input changed shape");
        check(x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0, "an input changed bytes");
    }
    svc_kargs_free(&ka);
    json_decref(p2);
    json_decref(i2);
    free(params_s);
    free(meta_s);
    free(inputs_s);
    gw_blob_free(&blob);
}

/* What any accepted request, a kernel call or a task, keeps. */
static void envelope_ok(const gw_job_req *r)
{
    check(r->priority >= 0 && r->priority <= 9, "priority out of range");
    check(r->timeout_s >= 1 && r->timeout_s <= 86400, "timeout_s out of range");
    check(r->max_attempts >= 1 && r->max_attempts <= 10, "max_attempts out of range");
    check(r->gpus >= 1 && r->gpus <= 16, "gpus out of range");
    check(!strcmp(r->backend, "any") || !strcmp(r->backend, "cpu") || !strcmp(r->backend, "cuda"),
          "backend is not any, cpu or cuda");
    check(json_is_object(r->labels) && json_object_size(r->labels) <= GW_MAX_LABELS, "labels");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!body)
        return 0;
    if (!json_is_object(body)) {   /* svc_http.c answers 400 before the handler */
        json_decref(body);
        return 0;
    }
    gw_job_req r;
    gw_verr e;
    int rc = gw_job_req_parse(body, &r, &e);
    if (rc != 0) {
        check(rc == -1, "gw_job_req_parse returned neither 0 nor -1");
        check(e.status == 400 || e.status == 422, "a refusal is neither 400 nor 422");
        check(e.message[0] != '\0', "a refusal has no message");
        check(memchr(e.field, '\0', sizeof e.field) && memchr(e.message, '\0', sizeof e.message),
              "error text is not terminated");
        json_decref(body);
        return 0;
    }
    envelope_ok(&r);
    if (r.task) { /* its spec is gw_task_parse's, next in the submit handler (test_gw_task.c) */
        check(r.kernel == NULL && json_object_get(body, "kernel") == NULL, "a task that also names a kernel");
        gw_job_req_free(&r);
        json_decref(body);
        return 0;
    }
    check(r.kernel != NULL, "accepted without a kernel or a task");
    check(r.ka.args.kernel == r.kernel, "args name another kernel");
    kl_err ke = {{0}, {0}};
    check(kl_args_check(&r.ka.args, &ke) == 0, "accepted args fail kl_args_check");
    for (int i = 0; i < r.kernel->ninputs; i++) {
        const svc_tensor *t = &r.ka.tensors[i];
        if (!r.ka.args.inputs[i]) {
            check(r.kernel->inputs[i].optional, "a required input is missing");
            continue;
        }
        check(svc_tensor_elems(t) <= FUZZ_MAX_ELEMS, "an input is over the element limit");
        check(t->nbytes == (size_t)svc_tensor_elems(t) * svc_dtype_size(t->dtype), "nbytes disagrees with shape");
        check((t->nbytes == 0) == (t->data == NULL), "data and nbytes disagree");
        check(r.ka.args.inputs[i]->data == t->data, "the view does not point at the decoded data");
    }
    rebind(&r);
    gw_job_req_free(&r);
    json_decref(body);
    return 0;
}
