/* task.h — the task runner: runs one part of a task (the user's program in
 * an OCI container) from start to end on a run manager's worker thread:
 * the scratch directory and the files, the inputs mounted read-only from
 * the blob store's own files, a gang's rendezvous, the engine started
 * without a shell, stdout and stderr captured and capped, progress
 * followed, timeout and cancel (SIGTERM, a grace, SIGKILL), then the exit
 * code, an OOM kill, the outputs pushed as blobs, the log pushed as a
 * blob, and the container and scratch removed. The run manager (cn_runs.c)
 * maps the result onto the run object (contract §5 of
 * docs/tasks_contract.md). */
#ifndef CN_TASK_H
#define CN_TASK_H

#include <jansson.h>
#include <stdint.h>

#include "cn_args.h"
#include "blobfile.h"
#include "cn_blobio.h"
#include "logship.h"
#include "svc_err.h"
#include "task_cgroup.h"
#include "task_engine.h"
#include "task_fw.h"
#include "task_spec.h"

/* The result code of a part that failed for a reason of its own (res.code
 * says which); KL_ECANCELED is a stop the run manager asked for. */
#define CN_TASK_EFAILED SVC_E_TASK_FAILED

/* What every task on this node shares; main fills it (task_cfg_open). */
typedef struct cn_task_cfg {
    cn_engine engine;           /* kind NONE: tasks are refused */
    const char *node_name;      /* borrowed */
    const char *gateway;        /* borrowed: scopes the containers' labels */
    char tag[16];               /* 8 hex digits naming this node's containers,
                                   scratch, cgroups and firewall chain */
    char scratch_root[1024];    /* --task-scratch */
    char scratch[1024];         /* <--task-scratch>/<tag>: one directory a part */
    unsigned uid, gid;          /* the program's user */
    int grace_s;                /* SIGTERM to SIGKILL */
    cn_task_limits defaults;    /* what a run that says nothing gets */
    char images[1024];          /* --task-images patterns ("" : any) */
    int cg_v1;                  /* OOM through the node's own memory cgroups */
    char cg_root[256];          /* the v1 memory controller's mount */
    int firewall;               /* gang parts need the firewall chain */
    cn_task_fw fw;
    cn_blobfile *files;         /* inputs as files when the blob dir is not shared */
    cn_logship *ship;           /* may be NULL: no live logs */
    int poll_ms;                /* the run loop's tick */
    int64_t images_refresh_ms;  /* how old the image list may get */
    pthread_mutex_t cg_mu;
    char (*cg_busy)[256];       /* parts' cgroups a process still held (cg_mu) */
    int ncg_busy, cg_busy_cap;
    int port_lo, port_hi;       /* --task-master-ports */
    unsigned port_next;         /* the next one to try (atomic) */
} cn_task_cfg;

/* Options the node was started with (main's table). */
typedef struct cn_task_opts {
    const char *engine, *engine_cmd, *containers_conf;
    const char *node_name, *gateway, *node_url;
    const char *scratch;        /* NULL: $TMPDIR or /var/tmp, /kowloon-tasks */
    const char *images;
    const char *deny;           /* --task-deny, comma-separated */
    const char *firewall;       /* "iptables" or "off" */
    const char *master_ports;   /* "LO-HI"; NULL: CN_TASK_MASTER_PORTS */
    long uid, grace_s, memory_mb, pids, output_mb, log_mb, files_mb, images_refresh_s;
} cn_task_opts;

/* Where a gang's rank 0 puts MASTER_PORT unless told otherwise: PyTorch's
 * default port and the 499 after it, below Linux's ephemeral ports
 * (32768-60999), so that no outgoing connection of the host can hold the
 * port between its pick and the program's bind. */
#define CN_TASK_MASTER_PORTS "29500-29999"

/* "LO-HI" (or one port), 1024 <= LO <= HI <= 65535, into *lo and *hi. 0,
 * or -1. */
int cn_task_ports_parse(const char *s, int *lo, int *hi);

/* A port of cfg's range that nothing on this host is bound to now, for a
 * gang's MASTER_PORT: tried in turn from where the last pick stopped (a
 * random place at start), so that gangs starting together, and the nodes
 * sharing a host, get different ones. The port, or -1 when every port of
 * the range is taken. */
int cn_task_master_port(cn_task_cfg *cfg);

/* Opens the engine, removes this node's orphaned containers, cgroups and
 * scratch, and fills cfg. 0 (an absent engine, when not asked for by
 * name, is no error: tasks are refused), or -1 with err. */
int cn_task_cfg_open(cn_task_cfg *cfg, const cn_task_opts *o, char *err, size_t errlen);
/* Removes a part's cgroups rel now, or later when a process still holds
 * them (retried at each part's end and at close). */
void cn_task_cfg_cg_release(cn_task_cfg *cfg, const char *rel);

/* Removes the firewall chain and closes what cfg holds. */
void cn_task_cfg_close(cn_task_cfg *cfg);

/* {"engine", "version", "images"} for registration and /v1/info, with the
 * isolation a gang part gets. New reference or NULL. */
json_t *cn_task_cfg_describe(cn_task_cfg *cfg);

/* The generation of the engine's image list (cn_engine_images_gen, at
 * most images_refresh_ms old): registration and heartbeats send the list
 * again when it changed. 0 without an engine. */
unsigned cn_task_cfg_images_gen(cn_task_cfg *cfg);

/* Whether this node can run req's task: 0, or -1 with err (field and
 * why) — no engine, an image outside --task-images, a gang without its
 * firewall. */
int cn_task_admit(cn_task_cfg *cfg, const cn_run_req *req, kl_err *err);

/* One part to run. */
typedef struct cn_task_run {
    cn_task_cfg *cfg;
    const cn_run_req *req;      /* job, attempt, gang place, task */
    const int *gpu_ids;         /* the host's devices to pass */
    int ngpu;
    const volatile int *cancel; /* raised: stop the part (why is the caller's) */
    const cn_blobio *blobio;    /* inputs and outputs */
    kl_store *rdv;              /* a gang's rendezvous, or NULL */
    const char *dist_host;      /* the address peers reach this node on */
    const char *dist_ifname;    /* the interface that has it, or "" */
    int rdv_timeout_ms;
    /* Called on the worker's thread with each new progress object (a new
     * reference the callee takes). */
    void (*on_progress)(void *cls, json_t *progress);
    void *cls;
    int *phase;                 /* 0 inputs, 1 compute, 2 outputs (__atomic) */
} cn_task_run;

typedef struct cn_task_result {
    int rc;                     /* 0, KL_ECANCELED, or CN_TASK_EFAILED */
    int exit_code;              /* the program's, -1 when it has none */
    char code[32];              /* with CN_TASK_EFAILED: contract §5's code */
    char message[1024];
    json_t *outputs;            /* on success: {name: {"blob","bytes"[,"npy"]}} */
    json_t *logs;               /* {"blob","bytes","dropped"} or NULL */
    int64_t phase_ms[3];
    int64_t cpu_ns;             /* not measured for tasks: 0 */
} cn_task_result;

/* How a part ended, as the runner saw it. */
enum { CN_TASK_STOP_NONE = 0, CN_TASK_STOP_CANCEL = 1, CN_TASK_STOP_QUOTA = 2 };
typedef struct cn_task_end {
    int stop;              /* CN_TASK_STOP_*: the node stopped it, and why */
    int status;            /* the engine's exit status (the program's, or 125+) */
    int oom;               /* the kernel (or the engine) said: out of memory */
    int engine_error;      /* 125 with the engine's own error on stderr */
    int image_missing;     /* ... and the engine has no such image */
} cn_task_end;

/* Contract §5's code for e: NULL when the part succeeded (its outputs
 * are collected next), "cancelled" when it was stopped on request (the
 * run manager tells timeout, cancel and shutdown apart), else
 * "output_quota", "oom", "image_not_found", "engine_error" or
 * "task_failed". Pure. */
const char *cn_task_end_code(const cn_task_end *e);

/* Runs the part. Never fails without filling res. The caller frees
 * res->outputs and res->logs. */
void cn_task_execute(const cn_task_run *run, cn_task_result *res);

/* Releases what res holds. */
void cn_task_result_clear(cn_task_result *res);

#endif
