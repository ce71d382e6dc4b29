/* task_argv.h — the command line that runs one task part in an OCI engine
 * (podman or docker: the same CLI, apart from how GPUs are named), and the
 * environment the program sees (contract §3, §4). Pure: strings in,
 * strings out; the runner (task.c) executes the result without a shell. */
#ifndef CN_TASK_ARGV_H
#define CN_TASK_ARGV_H

#include <stddef.h>
#include <stdint.h>

#include "task_spec.h"

typedef enum { CN_ENGINE_NONE = 0, CN_ENGINE_PODMAN = 1, CN_ENGINE_DOCKER = 2 } cn_engine_kind;

/* A growing NULL-terminated vector of owned strings. */
typedef struct cn_strv {
    char **v;
    int n, cap;
    int oom;          /* an append failed: the vector is incomplete */
} cn_strv;

/* Appends a copy of s (or the printf result); on failure sets sv->oom. */
void cn_strv_add(cn_strv *sv, const char *s);
void cn_strv_addf(cn_strv *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cn_strv_free(cn_strv *sv);

typedef struct cn_task_mount {
    const char *src;      /* a host path: no ':' or ',' (the -v syntax) */
    const char *dst;      /* a path in the container */
    int ro;
} cn_task_mount;

#define CN_TASK_MOUNTS_MAX (SVC_TASK_INPUTS_MAX * 2 + 8)

/* Everything the engine's command line says about one part. */
typedef struct cn_task_argv_in {
    cn_engine_kind kind;
    const char *engine;           /* the executable (argv[0]) */
    const char *name;             /* the container's name */
    const char *run_label;        /* kowloon.run */
    const char *node_label;       /* kowloon.node */
    const char *gateway_label;    /* kowloon.gateway: scopes orphans to one cluster */
    int uid, gid;
    int ngroups;
    unsigned groups[8];           /* --group-add: the groups that may read inputs */
    int64_t memory_bytes;         /* 0: no --memory (a cgroup parent holds the limit) */
    double cpus;                  /* 0: no --cpus */
    int64_t pids;
    const char *cgroup_parent;    /* NULL: the engine's default */
    cn_task_net network;
    int rm;                       /* --rm: the engine removes it once it exits (when
                                     the node needs nothing of it afterwards) */
    int64_t tmp_bytes;            /* size of the /tmp tmpfs */
    int nmounts;
    const cn_task_mount *mounts;
    const char *workdir;
    int ngpus;
    const int *gpus;              /* the host's device indices */
    int nenv;
    char *const *env;             /* "NAME=VALUE" */
    const char *image;
    int argc;
    char *const *argv;            /* the program and its arguments */
} cn_task_argv_in;

/* Fills out (empty on entry) with the engine's argv: `ENGINE run --name
 * ... IMAGE COMMAND...`. Returns 0, or -1 when a path cannot be written
 * in the -v syntax (why says which) or memory ran out; out is then freed. */
int cn_task_argv_build(const cn_task_argv_in *in, cn_strv *out, char *why, size_t whylen);

/* What Kowloon sets in a part's environment besides the tenant's. */
typedef struct cn_task_env_in {
    const char *job_id;
    int attempt;
    int node_rank, nnodes;        /* 0 and 1 outside a gang */
    int gpus;                     /* devices passed (0..n-1 inside) */
    const char *master_addr;      /* a gang's rank 0, or NULL */
    int master_port;
    const char *ifname;           /* a gang's: the interface its peers reach
                                     this node on, or NULL */
    const cn_task_spec *spec;     /* the tenant's env and the inputs */
} cn_task_env_in;

/* Fills out with "NAME=VALUE": the tenant's variables, then Kowloon's
 * (contract §3): KOWLOON_*, HOME, the inputs' paths, CUDA_VISIBLE_DEVICES
 * and, for gangs, what torchrun / torch.distributed env:// and
 * jax.distributed read, and the interface Gloo and NCCL are to use
 * (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME) unless the tenant set them.
 * 0, or -1 on ENOMEM (out freed). */
int cn_task_env_build(const cn_task_env_in *in, cn_strv *out);

/* The path of input in inside the container: /kowloon/in/<name>, with
 * ".npy" when it asked for npy. */
void cn_task_input_path(const cn_task_input *in, char *out, size_t len);

#endif
