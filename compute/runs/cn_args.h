/* cn_args.h — decodes a node run request (the body of POST /v1/runs): the run's
 * identity, timeout and placement, and through svc_kargs (shared with the
 * gateway, so both refuse the same things the same way) the kernel's params
 * and inputs as kl_args. No HTTP, no threads. */
#ifndef CN_ARGS_H
#define CN_ARGS_H

#include <jansson.h>

#include "kl.h"
#include "svc_kargs.h"
#include "task_spec.h"

#define CN_JOB_ID_MAX 64
#define CN_RUN_ID_MAX (CN_JOB_ID_MAX + 16)

/* What the gateway asked the run to use ("backend" in the request). */
typedef enum { CN_TARGET_ANY = 0, CN_TARGET_CPU = 1, CN_TARGET_CUDA = 2 } cn_target;

/* A decoded request. ka owns the decoded inputs (ka.args.inputs point into
 * ka.views, so a copy of the struct must re-point them); cn_run_req_clear
 * frees them. */
typedef struct cn_run_req {
    char job_id[CN_JOB_ID_MAX + 1];
    int attempt;
    char run_id[CN_RUN_ID_MAX];     /* "<job_id>.<attempt>" */
    int timeout_s;
    cn_target target;
    int gpus;
    int output_blobs;               /* push outputs as blobs, answer references */
    size_t output_blob_min;         /* ... those of at least this many bytes; smaller
                                       ones are answered inline */
    svc_kargs ka;                   /* ka.args.kernel is the catalog entry */
    /* One node's part of a multi-node job ("dist"): node_rank -1 when the
     * whole job runs here. The inputs marked shard arrive whole; this
     * node's rows are [shard_lo, shard_hi) of them. */
    int node_rank, nodes;
    int64_t shard_lo, shard_hi;
    int ngpu_ids, gpu_ids[16];      /* "gpu_ids": the scheduler's devices; 0: choose */
    /* A task ("task" instead of "kernel"): the user's program in a
     * container (task.h); ka is then empty. Owned. */
    cn_task_spec *task;
} cn_run_req;

/* Reads only job_id and attempt and writes the run id, so a repeated POST
 * is answered before its inputs are decoded again. Returns 0, or -1 with
 * *status (400) and err filled. */
int cn_run_req_ident(const json_t *body, cn_run_req *req, int *status, kl_err *err);

/* Decodes and checks the whole request (kl_args_check included). On 0 req
 * owns decoded inputs; on -1 *status is 400 (wrong type, missing field) or
 * 422 (unknown kernel, param, input; a value out of range; a shape or dtype
 * the kernel refuses), err names the field, and req holds nothing. A
 * request with "task" (contract §2 of docs/tasks_contract.md) decodes into
 * req->task instead of the kernel's arguments. */
int cn_run_req_decode(const json_t *body, cn_run_req *req, int *status, kl_err *err);

/* Frees decoded inputs and clears req; NULL is a no-op. */
void cn_run_req_clear(cn_run_req *req);

#endif
