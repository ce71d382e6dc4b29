/* kl_plugin.h — the contract between a compute node and the CUDA plugin
 * (lib/kowloon-cuda.so). The node dlopens the plugin and calls the one
 * exported symbol, KL_PLUGIN_SYMBOL, which fills a table of entry points.
 * The node never links against CUDA itself, so one binary serves GPU and
 * CPU hosts. */
#ifndef KL_PLUGIN_H
#define KL_PLUGIN_H

#include "kl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 3: kl_args carries progress; 4: run takes the devices by index, and
 * kl_args carries dist (a multi-node run's place); 5: the version is its
 * own symbol, read before anything else, run may answer KL_EDEVICE, and
 * the table carries what opening found (info); 6: the KL_E* codes are
 * negative errno values (KL_EINVAL is -EINVAL, no longer -1) */
#define KL_PLUGIN_ABI 6
#define KL_PLUGIN_SYMBOL "kl_cuda_plugin_open"
/* int (void): the plugin's KL_PLUGIN_ABI. The node reads it first and
 * calls nothing else of a plugin whose version is not its own: a table of
 * another layout would be filled past its end. A plugin without it is of
 * ABI 4 or older. */
#define KL_PLUGIN_ABI_SYMBOL "kl_cuda_plugin_abi"
typedef int (*kl_plugin_abi_fn)(void);

typedef struct kl_gpu_info {
    char name[128];
    uint64_t memory_bytes;
    int cc_major, cc_minor;
} kl_gpu_info;

typedef struct kl_plugin {
    int abi;                 /* KL_PLUGIN_ABI */
    int ngpus;
    kl_gpu_info gpus[16];
    /* 1 when the plugin implements `kernel` on CUDA. */
    int (*supports)(const char *kernel);
    /* Runs on the GPUs gpu_ids[0..ngpus) (distinct device indices; rank r
     * on gpu_ids[r]). Same contract as kl_kernel.run_cpu, plus KL_EDEVICE:
     * a sticky device error (err says which); from then on every run
     * answers KL_EDEVICE at once, and only a new process gets the device
     * back. */
    int (*run)(const kl_args *args, const int *gpu_ids, int ngpus, kl_tensor *outs, kl_err *err);
    /* Waits for the device work the plugin still holds (cancelled runs'
     * streams), then frees what it caches (cuBLAS handles, pinned buffers).
     * No run may be in progress. */
    void (*close)(void);
    /* Page-locked host memory (cudaHostAlloc), which copies to and from the
     * device run from at full speed and asynchronously: the node takes the
     * buffers it fetches inputs into, and kernels their outputs, from here
     * (kl_host_allocator_set). Small buffers, or any the driver cannot pin,
     * come from malloc; host_free tells them apart and takes NULL. Not
     * zeroed. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* Pins memory the node has mapped (a blob file of the shared blob
     * directory, MAP_PRIVATE) for the device to read (cudaHostRegister,
     * read-only); 0 or a negative code, after which the memory is as
     * usable as before, only pageable. host_unregister undoes it before
     * the mapping goes. */
    int (*host_register)(void *p, size_t bytes);
    void (*host_unregister)(void *p);
    /* What opening found and set, one line for the node's log and
     * /v1/info: module loading, the time each device's context took to
     * create, the memory pool's release threshold, the pinned pool's
     * bounds ("GPU 0 context 412 ms, modules eager; ..."). */
    char info[512];
} kl_plugin;

/* Exported by the plugin. Returns 0 and fills *p when at least one device
 * answers; otherwise a negative code and `why` says what failed (driver
 * missing, no device, ...). */
typedef int (*kl_plugin_open_fn)(kl_plugin *p, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
