/* cn_backend.c — loads the CUDA plugin with dlopen and falls back to the CPU,
 * keeping the reason. The node never links CUDA: one binary serves GPU and
 * CPU hosts, and the plugin's libraries are resolved only here. */
#include "cn_backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Makes b a CPU backend whose reason is the formatted text. */
static void __attribute__((format(printf, 2, 3))) cn__backend_cpu(cn_backend *b, const char *fmt, ...)
{
    va_list ap;

    memset(&b->plugin, 0, sizeof b->plugin);
    b->kind = CN_BACKEND_CPU;
    b->dl = NULL;
    va_start(ap, fmt);
    vsnprintf(b->reason, sizeof b->reason, fmt, ap);
    va_end(ap);
}

/* Tries the plugin at path. Returns 0 with b a CUDA backend, or -1 with b a
 * CPU backend whose reason says what failed. */
static int cn__backend_load(cn_backend *b, const char *path)
{
    char why[256] = "";
    void *dl = NULL;
    kl_plugin p;
    int rc = -1;

    /* dlerror() for a missing file is "...: cannot open shared object file";
     * checking first gives a plainer message for the most common case. */
    if (access(path, F_OK) != 0) {
        cn__backend_cpu(b, "plugin %s: %s", path, strerror(errno));
        goto cleanup;
    }
    dlerror();
    dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        cn__backend_cpu(b, "plugin %s: %s", path, e ? e : "dlopen failed");
        goto cleanup;
    }
    /* The version first, before anything of the plugin runs: a table of
     * another layout would be filled past the end of ours. POSIX allows
     * converting a dlsym result to a function pointer; the memcpy keeps
     * -Wpedantic quiet about object-to-function casts. */
    dlerror();
    void *abi_sym = dlsym(dl, KL_PLUGIN_ABI_SYMBOL);
    if (!abi_sym) {
        cn__backend_cpu(b, "plugin %s: unusable: it has no %s (built for ABI 4 or older); this node needs ABI %d",
                        path, KL_PLUGIN_ABI_SYMBOL, KL_PLUGIN_ABI);
        goto cleanup;
    }
    kl_plugin_abi_fn abi_fn;
    memcpy(&abi_fn, &abi_sym, sizeof abi_fn);
    int abi = abi_fn();
    if (abi != KL_PLUGIN_ABI) {
        cn__backend_cpu(b, "plugin %s: unusable: it is built for ABI %d; this node needs ABI %d", path, abi,
                        KL_PLUGIN_ABI);
        goto cleanup;
    }
    dlerror();
    void *sym = dlsym(dl, KL_PLUGIN_SYMBOL);
    if (!sym) {
        const char *e = dlerror();
        cn__backend_cpu(b, "plugin %s: %s", path, e ? e : "symbol " KL_PLUGIN_SYMBOL " not found");
        goto cleanup;
    }
    kl_plugin_open_fn open_fn;
    memcpy(&open_fn, &sym, sizeof open_fn);

    memset(&p, 0, sizeof p);
    int orc = open_fn(&p, why, sizeof why);
    if (orc < 0) {
        cn__backend_cpu(b, "plugin %s: no CUDA device: %s", path, why[0] ? why : "open failed");
        goto cleanup;
    }
    if (p.abi != KL_PLUGIN_ABI || !p.supports || !p.run || p.ngpus < 1) {
        if (p.close)
            p.close();
        kl_host_allocator_set(NULL, NULL); /* in case the plugin set ours */
        snprintf(why, sizeof why, "its table says ABI %d with %d GPU(s); the node needs ABI %d and a GPU",
                 p.abi, p.ngpus, KL_PLUGIN_ABI);
        cn__backend_cpu(b, "plugin %s: unusable: %s", path, why);
        goto cleanup;
    }
    if (p.ngpus > (int)(sizeof p.gpus / sizeof p.gpus[0]))
        p.ngpus = (int)(sizeof p.gpus / sizeof p.gpus[0]);

    b->kind = CN_BACKEND_CUDA;
    b->plugin = p;
    /* Buffers the node fetches inputs into and kernels write outputs to
     * are page-locked from now on (kl_plugin.h). */
    if (p.host_alloc && p.host_free)
        kl_host_allocator_set(p.host_alloc, p.host_free);
    b->dl = dl;
    dl = NULL;  /* owned by b now */
    snprintf(b->reason, sizeof b->reason, "plugin %s: %d GPU(s), first %.*s", path, p.ngpus,
             (int)sizeof p.gpus[0].name, p.gpus[0].name);
    /* the plugin's own text: make sure it ends */
    b->plugin.info[sizeof b->plugin.info - 1] = '\0';
    rc = 0;
cleanup:
    if (dl)
        dlclose(dl);
    return rc;
}

int cn_backend_open(cn_backend *b, const char *mode, const char *plugin_path)
{
    if (!mode || strcmp(mode, "cpu") == 0) {
        cn__backend_cpu(b, "backend cpu requested");
        return 0;
    }
    if (strcmp(mode, "auto") != 0 && strcmp(mode, "cuda") != 0) {
        cn__backend_cpu(b, "unknown backend \"%s\" (auto, cpu or cuda)", mode);
        return -EINVAL;
    }
    if (!plugin_path || !plugin_path[0]) {
        cn__backend_cpu(b, "no plugin path given");
        return strcmp(mode, "cuda") == 0 ? -ENODEV : 0;
    }
    if (cn__backend_load(b, plugin_path) < 0)
        return strcmp(mode, "cuda") == 0 ? -ENODEV : 0;
    return 0;
}

void cn_backend_close(cn_backend *b)
{
    if (!b || b->kind != CN_BACKEND_CUDA)
        return;
    if (b->plugin.close)
        b->plugin.close();
    kl_host_allocator_set(NULL, NULL);
    if (b->dl)
        dlclose(b->dl);
    b->dl = NULL;
    memset(&b->plugin, 0, sizeof b->plugin);
    b->kind = CN_BACKEND_CPU;
}

const char *cn_backend_info(const cn_backend *b)
{
    return b->kind == CN_BACKEND_CUDA ? b->plugin.info : "";
}

const char *cn_backend_name(const cn_backend *b)
{
    return b->kind == CN_BACKEND_CUDA ? "cuda" : "cpu";
}

int cn_backend_supports(const cn_backend *b, const char *kernel)
{
    return b->kind == CN_BACKEND_CUDA && b->plugin.supports(kernel) == 1;
}

int cn_backend_ngpus(const cn_backend *b)
{
    return b->kind == CN_BACKEND_CUDA ? b->plugin.ngpus : 0;
}

json_t *cn_backend_gpus_json(const cn_backend *b)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (int i = 0; i < cn_backend_ngpus(b); i++) {
        json_t *g = json_pack("{s:s, s:I}", "name", b->plugin.gpus[i].name, "memory_bytes",
                              (json_int_t)b->plugin.gpus[i].memory_bytes);
        if (!g || json_array_append_new(arr, g) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}
