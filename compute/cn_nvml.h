/* cn_nvml.h — what the GPUs of this host are doing, from NVIDIA's management
 * library. libnvidia-ml.so.1 comes with the driver, not the toolkit, so it
 * is loaded with dlopen at start, like the CUDA plugin: on a host without
 * it (or without a GPU) the node simply has no GPU figures. */
#ifndef CN_NVML_H
#define CN_NVML_H

#include <stddef.h>
#include <stdint.h>

typedef struct cn_nvml cn_nvml;

/* One GPU as last read; a figure NVML did not give is negative. */
typedef struct cn_gpu_stats {
    char index[12];
    char name[96];
    char uuid[96];
    double utilization;       /* 0..1: time a kernel ran over the last sample period */
    double mem_utilization;   /* 0..1: time memory was read or written */
    double mem_used, mem_total; /* bytes */
    double temperature_c;
    double power_w;
} cn_gpu_stats;

/* Loads the library at path (NULL: "libnvidia-ml.so.1") and initialises
 * it. NULL when it is not there, does not initialise, or sees no GPU; why
 * is in why (may be NULL). */
cn_nvml *cn_nvml_open(const char *path, char *why, size_t whylen);
/* Shuts NVML down and unloads it. NULL is a no-op. */
void cn_nvml_close(cn_nvml *n);
/* Devices NVML reported at open. */
int cn_nvml_count(const cn_nvml *n);
/* Reads device i (0 <= i < cn_nvml_count) into *out: 0, or -1 when NVML
 * does not answer for it now. Thread-safe. */
int cn_nvml_read(cn_nvml *n, int i, cn_gpu_stats *out);

#endif
