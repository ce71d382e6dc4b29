/* cn_metrics.h — what a node serves at GET /metrics besides its HTTP series
 * and its runs (cn_runs.c): its slots, CPU load and cores, and per GPU the
 * utilisation, memory, temperature and power NVML reports (none where NVML
 * is absent: no error). */
#ifndef CN_METRICS_H
#define CN_METRICS_H

#include "cn_node.h"

/* Adds the node's collector to n->metrics and loads NVML from nvml_path
 * (NULL or "": the driver's libnvidia-ml.so.1), logging why there are no GPU
 * figures when it cannot. 0 or -ENOMEM. */
int cn_metrics_start(cn_node *n, const char *nvml_path);
/* Unloads NVML; the registry stays n's owner's to free. */
void cn_metrics_stop(cn_node *n);

#endif
