/* task_spec.h — the "task" of a node run request (contract §2) decoded
 * and checked: the image, the command, the environment, the files, the
 * inputs, the limits and the network. What the gateway sends is checked
 * again here (svc_task.h), since the node is the last line before an
 * engine runs it. No I/O. */
#ifndef CN_TASK_SPEC_H
#define CN_TASK_SPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kl.h"
#include "svc_task.h"

#define CN_TASK_BLOB_ID 72

typedef enum {
    CN_TASK_NET_NONE = 0,     /* loopback only */
    CN_TASK_NET_EGRESS = 1,   /* the engine's default network (single node) */
    CN_TASK_NET_PEERS = 2,    /* the host's network, filtered (gang parts) */
} cn_task_net;

typedef struct cn_task_file {
    char path[SVC_TASK_PATH_MAX + 1];   /* relative to /kowloon/work */
    unsigned char *data;                /* inline bytes (owned), or NULL for a blob */
    size_t size;                        /* inline: bytes of data; blob: its size */
    char blob[CN_TASK_BLOB_ID];         /* "sha256:..." or "" */
} cn_task_file;

typedef struct cn_task_input {
    char name[SVC_TASK_INPUT_NAME_MAX + 1];
    char dtype[16];                     /* "" for plain bytes */
    int ndim;
    int64_t shape[8];
    char blob[CN_TASK_BLOB_ID];         /* a blob reference, or "" when inline */
    unsigned char *data;                /* inline bytes (owned) */
    uint64_t size;                      /* bytes */
    int npy;                            /* "format": "npy": shown as <name>.npy */
} cn_task_input;

/* Limits as sent; 0 means "the node's default" (task.h fills them in). */
typedef struct cn_task_limits {
    int64_t memory_bytes;
    double cpus;
    int64_t pids;
    int64_t output_bytes;
    int64_t log_bytes;
} cn_task_limits;

typedef struct cn_task_spec {
    char image[SVC_TASK_IMAGE_MAX + 1];
    int argc;
    char **argv;              /* argc strings, NULL-terminated (owned) */
    int nenv;
    char **env;               /* "NAME=VALUE" (owned) */
    char workdir[SVC_TASK_PATH_MAX + 1];
    int nfiles;
    cn_task_file *files;
    int ninputs;
    cn_task_input *inputs;
    cn_task_limits limits;
    cn_task_net network;
} cn_task_spec;

/* Decodes j (the "task" member). On 0 *out owns what it holds; on -1
 * *status is 400 (a wrong type, a missing member) or 422 (a value the
 * contract refuses), err names the field ("task.env.MASTER_PORT") and out
 * holds nothing. */
int cn_task_spec_decode(const json_t *j, cn_task_spec *out, int *status, kl_err *err);

/* Frees what s holds and clears it; NULL is a no-op. */
void cn_task_spec_free(cn_task_spec *s);

#endif
