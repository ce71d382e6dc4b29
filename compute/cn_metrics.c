/* cn_metrics.c — the node's own series (cn_metrics.h), read when scraped: the
 * run manager's load, /proc/loadavg, the online cores and NVML's figures
 * cost a few microseconds each, so nothing is kept between scrapes. */
#include "cn_metrics.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include "cn_nvml.h"
#include "svc_log.h"

/* GPUs read per scrape: more than any one host carries (8 to 16). */
#define MAX_GPUS 32

/* One gauge sample without labels, with its HELP and TYPE. */
static void gauge(svc_mwriter *w, const char *name, const char *help, double v)
{
    svc_mwriter_family(w, name, help, SVC_METRIC_GAUGE);
    svc_mwriter_sample(w, name, NULL, NULL, v);
}

static void write_gpus(svc_mwriter *w, cn_nvml *nvml)
{
    cn_gpu_stats g[MAX_GPUS];
    int n = 0;
    for (int i = 0; i < cn_nvml_count(nvml) && n < MAX_GPUS; i++)
        n += cn_nvml_read(nvml, i, &g[n]) == 0;
    static const struct {
        const char *name, *help;
        size_t off;
    } fam[] = {
        {"kowloon_gpu_utilization_ratio", "time a kernel ran on the GPU over NVML's last sample "
         "period, 0-1", offsetof(cn_gpu_stats, utilization)},
        {"kowloon_gpu_memory_utilization_ratio", "time GPU memory was read or written over "
         "NVML's last sample period, 0-1", offsetof(cn_gpu_stats, mem_utilization)},
        {"kowloon_gpu_memory_used_bytes", "GPU memory in use, bytes",
         offsetof(cn_gpu_stats, mem_used)},
        {"kowloon_gpu_memory_total_bytes", "GPU memory in all, bytes",
         offsetof(cn_gpu_stats, mem_total)},
        {"kowloon_gpu_temperature_celsius", "GPU temperature, degrees Celsius",
         offsetof(cn_gpu_stats, temperature_c)},
        {"kowloon_gpu_power_watts", "GPU power draw, watts", offsetof(cn_gpu_stats, power_w)},
    };
    const char *names[] = {"gpu", "name", "uuid", NULL};
    for (size_t f = 0; n > 0 && f < sizeof fam / sizeof *fam; f++) {
        svc_mwriter_family(w, fam[f].name, fam[f].help, SVC_METRIC_GAUGE);
        for (int i = 0; i < n; i++) {
            double v = *(const double *)((const char *)&g[i] + fam[f].off);
            if (v >= 0)
                svc_mwriter_sample(w, fam[f].name, names,
                                   (const char *[]){g[i].index, g[i].name, g[i].uuid}, v);
        }
    }
}

static void collect_node(svc_mwriter *w, void *arg)
{
    const cn_node *n = arg;
    int active = 0;
    cn_runs_load(n->runs, &active, NULL);
    svc_mwriter_family(w, "kowloon_node_info", "this node: its name, backend and version (1)",
                       SVC_METRIC_GAUGE);
    svc_mwriter_sample(w, "kowloon_node_info", (const char *[]){"node", "backend", "version", NULL},
                       (const char *[]){n->name, cn_backend_name(n->backend), CN_VERSION}, 1);
    gauge(w, "kowloon_node_slots", "runs this node holds at once (--slots)", n->slots);
    gauge(w, "kowloon_node_slots_busy", "slots held by runs queued or running here", active);
    gauge(w, "kowloon_node_draining", "1 once the node is draining (takes no new runs)",
          cn_node_draining(n));
    gauge(w, "kowloon_node_cpu_cores", "online CPU cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
    double load[3];
    FILE *f = fopen("/proc/loadavg", "r");
    int ok = f != NULL && fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) == 3;
    if (f != NULL)
        fclose(f);
    if (ok) {
        gauge(w, "kowloon_node_load1", "CPU load average over 1 minute (/proc/loadavg)", load[0]);
        gauge(w, "kowloon_node_load5", "CPU load average over 5 minutes", load[1]);
        gauge(w, "kowloon_node_load15", "CPU load average over 15 minutes", load[2]);
    }
    write_gpus(w, n->nvml);
}

int cn_metrics_start(cn_node *n, const char *nvml_path)
{
    char why[512];
    if ((n->nvml = cn_nvml_open(nvml_path, why, sizeof why)) != NULL)
        svc_info("metrics: NVML reports gpus=%d", cn_nvml_count(n->nvml));
    else
        svc_info("metrics: no GPU figures (%s)", why);
    return svc_metrics_add_collector(n->metrics, collect_node, n) == 0 ? 0 : -ENOMEM;
}

void cn_metrics_stop(cn_node *n)
{
    cn_nvml_close(n->nvml);
    n->nvml = NULL;
}
