/* cn_config.h — the node's options, each declared once in cn_config.c's
 * table (flag, environment variable, default, bounds, help) and bound there
 * to its field here: the rest of the node reads fields, never flag names.
 * Strings are borrowed from argv, the environment or the table (they
 * outlive main); NULL where an option without a default was not given. */
#ifndef CN_CONFIG_H
#define CN_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "cn_slurm.h"

typedef struct cn_config {
    /* the gateway and this node's API */
    const char *gateway;
    const char *listen;
    const char *advertise;
    const char *name;
    const char *cluster_token;
    const char *cluster_token_file;
    const char *state_dir;
    long heartbeat_s;
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
    long max_body_mb;
    int metrics_public;
    const char *log_level;
    /* kernels */
    long slots;
    const char *backend;
    const char *plugin;
    long threads;
    long drain_grace_s;
    long input_cache_mb;
    const char *blob_dir;
    const char *nvml;
    const char *dist_host;
    long dist_timeout_s;
    int slurm;
    /* tasks (compute/task/task_cfg.c) */
    const char *task_engine;
    const char *task_engine_cmd;
    const char *task_containers_conf;
    const char *task_images;
    const char *task_scratch;
    long task_uid;
    long task_grace_s;
    long task_memory_mb;
    long task_pids;
    long task_output_mb;
    long task_log_mb;
    long task_blob_cache_mb;
    long task_images_refresh_s;
    const char *task_deny;
    const char *task_firewall;
    const char *task_master_ports;
} cn_config;

/* Reads argv (flags) and the environment into c. 0; 1 for --help (nothing
 * else is read); -1 with a message in err (an unknown flag, a value out of
 * bounds). */
int cn_config_load(cn_config *c, int argc, char **argv, char *err, size_t errlen);
/* The options, one per line, for usage messages. */
void cn_config_usage(FILE *out);
/* --slurm: what the user did not set (name, slots, threads, listen,
 * state-dir) comes from the allocation s, read from the environment here,
 * and CUDA sees the allocation's GPUs and no other (none when it has
 * none). Call before the backend is chosen. 0, or -1 with err. */
int cn_config_slurm(cn_config *c, cn_slurm *s, char *err, size_t errlen);

#endif
