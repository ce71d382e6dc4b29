/* cn_node.h — what this compute node is: the identity and capacity it
 * registers with the gateway and serves at GET /v1/info. main() fills one
 * cn_node; the HTTP handlers (cn_api.c) and the registration thread
 * (cn_register.c) read it. */
#ifndef CN_NODE_H
#define CN_NODE_H

#include <jansson.h>

#include "cn_backend.h"
#include "cn_blobcache.h"
#include "cn_blobio.h"
#include "cn_runs.h"
#include "svc_metrics.h"

#define CN_VERSION "0.1.0"

typedef struct cn_node {
    const char *name;           /* borrowed: owned by main for the process' life */
    const char *url;            /* advertised URL the gateway calls */
    const char *token;          /* cluster token: registration, and the node API's callers */
    struct cn_cred *cred;       /* the node's own credential (cn_cred.h): every other call
                                   to the gateway */
    int slots;
    const cn_backend *backend;
    cn_runs *runs;
    cn_blobcache *cache;        /* input blobs by hash; its figures are in /v1/info */
    const cn_blobio_stats *blob_stats; /* inputs mapped, outputs written or pushed */
    cn_blobio *blobio;          /* the data path; the registration thread tells it the
                                   gateway's blob store */
    cn_share_mode share_mode;   /* --blob-dir */
    int draining;               /* set once by main on SIGTERM; read with __atomic */
    svc_metrics *metrics;       /* what GET /metrics serves; owned by main */
    int metrics_public;         /* --metrics-public: /metrics without the token */
    struct cn_nvml *nvml;       /* GPU figures (cn_nvml.h); NULL without NVML */
    struct cn_register *reg;    /* set once by main when registration starts; read
                                   with __atomic (GET /readyz) */
    /* Why the node is out of service for good (its GPU was lost): written
     * once (cn_node_fault_set), then read by anyone. */
    char fault[320];
    int fault_claimed;          /* __atomic: a writer has begun */
    int faulted;                /* __atomic: fault is written */
    cn_task_cfg *tasks;         /* the task engine; NULL until main has opened it */
} cn_node;

/* {"name","url","backend","backend_reason","gpus","slots","kernels",
 * "tasks"}: the registration body, which /v1/info extends. "tasks" is
 * {"engine","version","images","gang_network"} (contract §7), or
 * {"engine":"none","reason"}. New reference, NULL on ENOMEM. */
json_t *cn_node_describe(const cn_node *n);

/* What the heartbeat says of the host's devices, for placement:
 * {"gpus": [{index, memory_total, memory_free, util}] (where NVML answers;
 * index as CUDA numbers devices when CUDA_DEVICE_ORDER=PCI_BUS_ID),
 * "cpu": {cores, load1}}, and "fault" once the node lost its GPU (the
 * gateway then places nothing here). New reference, NULL on ENOMEM. */
json_t *cn_node_state(const cn_node *n);

/* 1 once main has begun draining. */
int cn_node_draining(const cn_node *n);

/* Records why the node is out of service (the first call only: later ones
 * return 0 and change nothing); 1 when this call set it. Quick and
 * lock-free, for a callback that runs under another module's lock. */
int cn_node_fault_set(cn_node *n, const char *why);
/* The fault recorded, or NULL while there is none. */
const char *cn_node_fault(const cn_node *n);

#endif
