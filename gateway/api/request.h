/* request.h — validation of a job submission (POST /v1/jobs) before
 * anything is written: the envelope (priority, timeout_s, max_attempts,
 * resources, labels) and the kernel call (params and inputs, checked against
 * the catalog). */
#ifndef GW_REQUEST_H
#define GW_REQUEST_H

#include <jansson.h>

#include "gw_verr.h"
#include "svc_kargs.h"

typedef struct gw_job_req {
    const kl_kernel *kernel;  /* NULL for a task */
    const json_t *task;       /* the request's "task" (borrowed from the body); NULL: a kernel job */
    svc_kargs ka;             /* decoded inputs, resolved params */
    int priority, timeout_s, max_attempts, gpus;
    int nodes;                /* resources.nodes: nodes the job spans (gpus is per node) */
    double gpu_memory_gb;     /* resources.gpu_memory_gb; 0: not given */
    double memory_gb, cpus;   /* a task's resources.memory_gb and cpus per node; 0: not given */
    char backend[8];          /* any | cpu | cuda */
    json_t *labels;           /* object, owned */
    char *webhook;            /* URL, owned; NULL: none (its address is checked apart) */
    char webhook_events[64];  /* the states to deliver, comma-separated */
} gw_job_req;

#define GW_MAX_LABELS 32
/* resources.nodes: the most nodes one job may span */
#define GW_MAX_NODES 64
#define GW_WEBHOOK_URL_MAX 2048

/* The members a job request may have, NULL-terminated: the route's
 * json_fields (a body with another is refused before its value is parsed)
 * and gw_job_req_parse's own check. */
extern const char *const gw_job_fields[];

/* Parses and validates body: the envelope, and the kernel call or (a
 * task) nothing of the task itself, which task.h checks. 0 with *req
 * filled (release with gw_job_req_free; req->task borrows from body), or
 * -1 with *err. */
int gw_job_req_parse(const json_t *body, gw_job_req *req, gw_verr *err);
/* Refuses (422 naming the input or param that sizes them, -1 with *err) a
 * parsed job whose outputs would take more than max_bytes; 0 otherwise. */
int gw_job_req_check_output(const gw_job_req *req, int64_t max_bytes, gw_verr *err);
void gw_job_req_free(gw_job_req *req);

/* 1 when k is a label key jobs may carry: 1-64 characters of A-Z a-z 0-9
 * _ . - */
int gw_label_key_valid(const char *k);

#endif
