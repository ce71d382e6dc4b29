/* task.h — a task request (POST /v1/jobs with "task", issue 18) checked
 * and turned into what the job keeps: the object the job shows ("task":
 * image, command, env, workdir, network) and the object a node leases
 * (docs/tasks_contract.md section 2: inline files and small inputs in
 * base64, the rest blob references, limits in bytes). The names are
 * checked by service/data/svc_task.h, the same rules the node applies. No I/O:
 * the blobs it names and the large inline inputs it holds are the caller's
 * to look up and to store (api_jobs.c); the unit tests drive it alone. */
#ifndef GW_TASK_H
#define GW_TASK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_verr.h"
#include "svc_task.h"

/* An inline input of more bytes than this becomes a blob at submit (as a
 * kernel's, api_jobs.c's GW_INLINE_INPUT_MAX); smaller ones travel in the
 * lease. */
#define GW_TASK_INLINE_INPUT_MAX (64 * 1024)
#define GW_TASK_BLOBS_MAX (SVC_TASK_INPUTS_MAX + SVC_TASK_FILES_MAX)

/* A blob the request names: the caller checks it is the tenant's and has
 * size bytes (-1: any, a file or an input of plain bytes), then sets the
 * lease entry's "size". */
typedef struct gw_task_blob {
    char field[160];
    char id[80];
    int64_t size;
    json_t *entry;            /* borrowed from run */
} gw_task_blob;

/* An inline input over GW_TASK_INLINE_INPUT_MAX: the caller stores its
 * bytes as a blob and sets the entry's "blob" and "size". */
typedef struct gw_task_big {
    char field[160];
    unsigned char *data;      /* owned */
    size_t len;
    json_t *entry;            /* borrowed from run */
} gw_task_big;

/* What the job needs besides the task object: resources.memory_gb and
 * resources.cpus (0: not given), and the gateway's caps. */
typedef struct gw_task_limits {
    double memory_gb, cpus;
    int64_t max_output_bytes; /* --max-output-mb: output_quota_mb's ceiling and default */
    int64_t log_bytes;        /* --task-log-mb */
} gw_task_limits;

typedef struct gw_task_req {
    json_t *echo;             /* {image, command, env, workdir, network}, owned */
    json_t *run;              /* the lease form, owned */
    char image[SVC_TASK_IMAGE_MAX + 1];
    int egress;               /* network "egress" asked */
    int nblobs, nbig;
    gw_task_blob blobs[GW_TASK_BLOBS_MAX];
    gw_task_big big[SVC_TASK_INPUTS_MAX];
} gw_task_req;

/* Checks task (the request's "task" member) and builds *out (release with
 * gw_task_req_free, also after a failure). 0, or -1 with *err. */
int gw_task_parse(const json_t *task, const gw_task_limits *lim, gw_task_req *out,
                  gw_verr *err);
void gw_task_req_free(gw_task_req *t);

/* A task's outputs as a node reports them ({path: {"blob", "bytes",
 * "npy"?}}, contract section 5) as the job's result keeps them: a list of
 * {"name", "blob", "nbytes", "file": true, "npy"?}. New array in *meta, or
 * -1 with why naming the output that is not right. */
#define GW_TASK_OUTPUTS_MAX 1024
int gw_task_outputs_meta(const json_t *outputs, json_t **meta, char *why, size_t whylen);
/* 1 when result entry m is a task's output file (not a tensor). */
int gw_task_output_is_file(const json_t *m);

/* The scheduler's key of an image (FNV-1a of the reference, never 0: 0
 * stands for "not a task" in the ready queue). */
uint32_t gw_task_image_key(const char *image);

#endif
