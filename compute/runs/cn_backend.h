/* cn_backend.h — which engine runs this node's kernels. The CUDA plugin
 * (kowloon-cuda.so) is dlopen'ed at start; when it is missing, its libraries
 * do not load or no device answers, the node runs on the CPU reference and
 * keeps the reason, which it logs, serves in /v1/info and registers with. */
#ifndef CN_BACKEND_H
#define CN_BACKEND_H

#include <jansson.h>

#include "kl_plugin.h"

typedef enum { CN_BACKEND_CPU = 0, CN_BACKEND_CUDA = 1 } cn_backend_kind;

typedef struct cn_backend {
    cn_backend_kind kind;
    char reason[512];   /* why this backend: "plugin X: no CUDA device: ..." */
    void *dl;           /* dlopen handle of the plugin; NULL on CPU */
    kl_plugin plugin;   /* entry points; valid only when kind == CN_BACKEND_CUDA */
} cn_backend;

/* Chooses the backend. mode is "auto", "cpu" or "cuda"; plugin_path is the
 * plugin to load (not touched when mode is "cpu").
 * Returns 0 with *b filled: CUDA, or CPU with the reason for it.
 * Returns -EINVAL for an unknown mode, and -ENODEV when mode is "cuda" and
 * the plugin cannot be used; b->reason says why in both cases and *b is left
 * a CPU backend with nothing to close. */
int cn_backend_open(cn_backend *b, const char *mode, const char *plugin_path);

/* Calls the plugin's close and unloads it; a CPU backend or NULL is a no-op. */
void cn_backend_close(cn_backend *b);

/* What the plugin found and set when it opened (kl_plugin.info); "" on
 * the CPU. */
const char *cn_backend_info(const cn_backend *b);

/* "cpu" or "cuda". */
const char *cn_backend_name(const cn_backend *b);

/* 1 when kernel can run on the GPU: the plugin is loaded and supports it. */
int cn_backend_supports(const cn_backend *b, const char *kernel);

/* Number of GPUs the plugin reported; 0 on CPU. */
int cn_backend_ngpus(const cn_backend *b);

/* [{"name", "memory_bytes"}] for the wire; new reference, NULL on ENOMEM. */
json_t *cn_backend_gpus_json(const cn_backend *b);

#endif
