/* cn_node.c — the node's self-description, shared by registration and
 * GET /v1/info so the two can never disagree. */
#include "cn_node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cn_nvml.h"

json_t *cn_node_describe(const cn_node *n)
{
    int count;
    const kl_kernel *const *cat = kl_catalog(&count);
    json_t *kernels = json_array();

    for (int i = 0; kernels && i < count; i++)
        if (json_array_append_new(kernels, json_string(cat[i]->name)) < 0) {
            json_decref(kernels);
            kernels = NULL;
        }
    /* json_pack's "o" steals even on failure, so nothing leaks here. */
    json_t *tasks = n->tasks ? cn_task_cfg_describe(n->tasks)
                             : json_pack("{s:s, s:s}", "engine", "none", "reason", "not set up");
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:i, s:o, s:o}", "name", n->name, "url", n->url,
                     "backend", cn_backend_name(n->backend), "backend_reason",
                     n->backend->reason, "gpus", cn_backend_gpus_json(n->backend), "slots",
                     n->slots, "kernels", kernels, "tasks", tasks ? tasks : json_null());
}

/* The NVML devices CUDA numbers 0, 1, ... in this process: with
 * CUDA_VISIBLE_DEVICES, the ones it names (an NVML index, or a GPU-/MIG-
 * UUID), in its order; without, all. NVML sees every device of the host
 * whatever the variable says (Slurm and container runtimes set it). Fills
 * map[cuda index] = NVML index; returns how many. */
static int visible_devices(cn_nvml *nvml, int *map, int max)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    int count = cn_nvml_count(nvml), n = 0;
    if (!env) {
        for (int i = 0; i < count && n < max; i++)
            map[n++] = i;
        return n;
    }
    char list[1024];
    snprintf(list, sizeof list, "%s", env);
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < count && found < 0; i++) {
            cn_gpu_stats g;
            if (cn_nvml_read(nvml, i, &g) == 0 && (strcmp(g.index, tok) == 0 || strcmp(g.uuid, tok) == 0))
                found = i;
        }
        if (found < 0)
            break;   /* CUDA stops at the first entry it cannot use */
        map[n++] = found;
    }
    return n;
}

json_t *cn_node_state(const cn_node *n)
{
    json_t *gpus = json_array();
    int map[16], nvis = n->nvml ? visible_devices(n->nvml, map, 16) : 0;
    for (int i = 0; gpus && i < nvis; i++) {
        cn_gpu_stats g;
        if (cn_nvml_read(n->nvml, map[i], &g) != 0)
            continue;
        json_t *d = json_pack("{s:i, s:s}", "index", i, "model", g.name);
        if (g.mem_total >= 0)
            json_object_set_new(d, "memory_total", json_integer((json_int_t)g.mem_total));
        if (g.mem_total >= 0 && g.mem_used >= 0)
            json_object_set_new(d, "memory_free", json_integer((json_int_t)(g.mem_total - g.mem_used)));
        if (g.utilization >= 0)
            json_object_set_new(d, "util", json_integer((json_int_t)(g.utilization * 100 + 0.5)));
        json_array_append_new(gpus, d);
    }
    double load[1] = {0};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    json_t *cpu = json_pack("{s:I}", "cores", (json_int_t)(cores > 0 ? cores : 1));
    if (cpu && getloadavg(load, 1) == 1)
        json_object_set_new(cpu, "load1", json_real(load[0]));
    json_t *st = json_pack("{s:o, s:o}", "gpus", gpus ? gpus : json_array(), "cpu", cpu ? cpu : json_object());
    if (st && cn_node_fault(n))
        json_object_set_new(st, "fault", json_string(cn_node_fault(n)));
    return st;
}

int cn_node_draining(const cn_node *n)
{
    return __atomic_load_n(&n->draining, __ATOMIC_ACQUIRE);
}

int cn_node_fault_set(cn_node *n, const char *why)
{
    if (__atomic_exchange_n(&n->fault_claimed, 1, __ATOMIC_ACQ_REL))
        return 0;
    snprintf(n->fault, sizeof n->fault, "%s", why);
    __atomic_store_n(&n->faulted, 1, __ATOMIC_RELEASE);
    return 1;
}

const char *cn_node_fault(const cn_node *n)
{
    return __atomic_load_n(&n->faulted, __ATOMIC_ACQUIRE) ? n->fault : NULL;
}
