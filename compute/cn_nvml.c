/* cn_nvml.c — NVIDIA's management library through dlopen (cn_nvml.h). The few
 * entry points used are declared here with the types of NVIDIA's nvml.h (stable
 * since CUDA 6: an enum return code, an opaque device handle, plain structs
 * of unsigned integers), so the node builds without the driver's headers. */
#include "cn_nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_TEMPERATURE_GPU 0
#define NVML_NAME_LEN 96

typedef int nvml_ret;
typedef struct nvml_device *nvml_device;
typedef struct {
    unsigned int gpu, memory;          /* percent */
} nvml_utilization;
typedef struct {
    unsigned long long total, free, used;  /* bytes */
} nvml_memory;

struct cn_nvml {
    void *dl;
    int count;
    nvml_ret (*shutdown)(void);
    nvml_ret (*handle)(unsigned int, nvml_device *);
    nvml_ret (*name)(nvml_device, char *, unsigned int);
    nvml_ret (*uuid)(nvml_device, char *, unsigned int);
    nvml_ret (*util)(nvml_device, nvml_utilization *);
    nvml_ret (*memory)(nvml_device, nvml_memory *);
    nvml_ret (*temperature)(nvml_device, int, unsigned int *);  /* optional */
    nvml_ret (*power)(nvml_device, unsigned int *);             /* optional, mW */
};

static void *sym(void *dl, const char *name, int *missing)
{
    void *p = dlsym(dl, name);
    if (p == NULL)
        *missing = 1;
    return p;
}

cn_nvml *cn_nvml_open(const char *path, char *why, size_t whylen)
{
    char dummy[1];
    if (why == NULL || whylen == 0) {
        why = dummy;
        whylen = sizeof dummy;
    }
    path = path != NULL && path[0] ? path : "libnvidia-ml.so.1";
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        const char *e = dlerror();
        snprintf(why, whylen, "%s: %s", path, e ? e : "dlopen failed");
        return NULL;
    }
    cn_nvml *n = calloc(1, sizeof *n);
    int missing = 0;
    nvml_ret (*init)(void) = NULL;
    nvml_ret (*count)(unsigned int *) = NULL;
    if (n != NULL) {
        n->dl = dl;
        *(void **)&init = sym(dl, "nvmlInit_v2", &missing);
        *(void **)&count = sym(dl, "nvmlDeviceGetCount_v2", &missing);
        *(void **)&n->shutdown = sym(dl, "nvmlShutdown", &missing);
        *(void **)&n->handle = sym(dl, "nvmlDeviceGetHandleByIndex_v2", &missing);
        *(void **)&n->name = sym(dl, "nvmlDeviceGetName", &missing);
        *(void **)&n->uuid = sym(dl, "nvmlDeviceGetUUID", &missing);
        *(void **)&n->util = sym(dl, "nvmlDeviceGetUtilizationRates", &missing);
        *(void **)&n->memory = sym(dl, "nvmlDeviceGetMemoryInfo", &missing);
        int optional = 0;
        *(void **)&n->temperature = sym(dl, "nvmlDeviceGetTemperature", &optional);
        *(void **)&n->power = sym(dl, "nvmlDeviceGetPowerUsage", &optional);
    }
    unsigned int devices = 0;
    int rc = -1;
    if (n == NULL)
        snprintf(why, whylen, "out of memory");
    else if (missing)
        snprintf(why, whylen, "%s lacks an NVML entry point", path);
    else if ((rc = init()) != NVML_SUCCESS)
        snprintf(why, whylen, "%s: nvmlInit failed (error %d)", path, rc);
    else if (count(&devices) != NVML_SUCCESS || devices == 0)
        snprintf(why, whylen, "%s: no GPU", path);
    if (n != NULL && rc == NVML_SUCCESS && devices > 0) {
        n->count = (int)devices;
        return n;
    }
    if (rc == NVML_SUCCESS)
        n->shutdown();
    free(n);
    dlclose(dl);
    return NULL;
}

void cn_nvml_close(cn_nvml *n)
{
    if (n == NULL)
        return;
    n->shutdown();
    dlclose(n->dl);
    free(n);
}

int cn_nvml_count(const cn_nvml *n)
{
    return n != NULL ? n->count : 0;
}

int cn_nvml_read(cn_nvml *n, int i, cn_gpu_stats *out)
{
    nvml_device dev;
    nvml_utilization u;
    nvml_memory mem;
    unsigned int v;
    if (n == NULL || i < 0 || i >= n->count || n->handle((unsigned int)i, &dev) != NVML_SUCCESS)
        return -1;
    *out = (cn_gpu_stats){.utilization = -1, .mem_utilization = -1, .mem_used = -1,
                          .mem_total = -1, .temperature_c = -1, .power_w = -1};
    snprintf(out->index, sizeof out->index, "%d", i);
    if (n->name(dev, out->name, sizeof out->name) != NVML_SUCCESS)
        snprintf(out->name, sizeof out->name, "unknown");
    if (n->uuid(dev, out->uuid, sizeof out->uuid) != NVML_SUCCESS)
        out->uuid[0] = '\0';
    out->name[sizeof out->name - 1] = out->uuid[sizeof out->uuid - 1] = '\0';
    if (n->util(dev, &u) == NVML_SUCCESS) {
        out->utilization = u.gpu / 100.0;
        out->mem_utilization = u.memory / 100.0;
    }
    if (n->memory(dev, &mem) == NVML_SUCCESS) {
        out->mem_used = (double)mem.used;
        out->mem_total = (double)mem.total;
    }
    if (n->temperature && n->temperature(dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
        out->temperature_c = v;
    if (n->power && n->power(dev, &v) == NVML_SUCCESS)
        out->power_w = v / 1000.0;
    return 0;
}
