/* task_engine.h — the node's OCI engine (podman or docker, which share
 * the CLI Kowloon uses): found and asked its version at start, its local
 * images listed (what the node announces it can run), containers of this
 * node left by a process that died (kill -9) found by label and removed,
 * and the small engine calls a run needs (kill with a signal, remove,
 * inspect, does an image exist). The engine runs with an environment of
 * its own: nothing of the node's (its cluster token) reaches it. */
#ifndef CN_TASK_ENGINE_H
#define CN_TASK_ENGINE_H

#include <jansson.h>
#include <pthread.h>
#include <sys/types.h>

#include "task_argv.h"

#define CN_ENGINE_IMAGES_MAX 256

typedef struct cn_engine {
    cn_engine_kind kind;          /* CN_ENGINE_NONE: tasks are refused */
    char cmd[1024];               /* the engine's executable */
    char version[64];
    char cgroup_manager[32];      /* "cgroupfs", "systemd", or "" when unknown */
    char reason[512];             /* why there is none, when there is none */
    char **envp;                  /* the engine's environment (owned) */
    pthread_mutex_t mu;
    json_t *images;               /* local images, "repo:tag" (mu) */
    unsigned images_gen;          /* bumped when the list changes (mu) */
    int64_t images_at;            /* monotonic ms of the last listing (mu) */
} cn_engine;

/* Opens the engine which ("podman", "docker", "none", or "auto": podman
 * when it answers, else none) at cmd (NULL: found in PATH), with conf as
 * CONTAINERS_CONF (NULL: the environment's). An engine that does not
 * answer leaves kind NONE with reason set: -1 when it was asked for by
 * name (err says why), 0 for auto. */
int cn_engine_open(cn_engine *e, const char *which, const char *cmd, const char *conf,
                   char *err, size_t errlen);
void cn_engine_close(cn_engine *e);

/* "podman", "docker" or "none". */
const char *cn_engine_name(const cn_engine *e);

/* Lists the local images again. 0 or -1. */
int cn_engine_images_refresh(cn_engine *e);
/* The generation of the image list, listed again first when the last
 * listing is older than max_age_ms: a heartbeat sends the list when this
 * changed (an operator loaded an image). */
unsigned cn_engine_images_gen(cn_engine *e, int64_t max_age_ms);

/* {"engine", "version", "images": [...]} or {"engine": "none", "reason"}.
 * New reference or NULL. */
json_t *cn_engine_describe(cn_engine *e);

/* Runs the engine with args (after its executable; NULL-terminated) as
 * cn_proc_run does. */
int cn_engine_exec(const cn_engine *e, const char *const *args, int timeout_ms, char *out,
                   size_t outlen);

/* Removes every container labelled kowloon.node=node and
 * kowloon.gateway=gateway (what a node killed before it could remove its
 * containers left), logging each. Returns how many, or -1. */
int cn_engine_remove_orphans(cn_engine *e, const char *node, const char *gateway);

/* engine kill --signal sig NAME. 0 or -1. */
int cn_engine_kill(const cn_engine *e, const char *name, const char *sig);
/* engine rm -f NAME. 0 (also when there was none) or -1. */
int cn_engine_rm(const cn_engine *e, const char *name);
/* State.OOMKilled of NAME: 1, 0, or -1 when unknown. */
int cn_engine_oom_killed(const cn_engine *e, const char *name);
/* 1 when the engine has image, 0 when not, -1 when it cannot say. */
int cn_engine_image_exists(const cn_engine *e, const char *image);

#endif
