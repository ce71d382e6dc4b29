/* cn_config.c — the node's options: one table entry each, bound to its
 * field of cn_config (cn_config.h), and what --slurm fills in. */
#include "cn_config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "svc_config.h"
#include "svc_log.h"

static svc_opt cn_opts[] = {
    {.flag = "gateway", .env = "KOWLOON_GATEWAY", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, gateway),
     .def = "http://127.0.0.1:8081",
     .help = "the gateway's cluster listener (its --cluster-listen), base URL"},
    {.flag = "listen", .env = "KOWLOON_LISTEN", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, listen),
     .def = "127.0.0.1:8091", .help = "HOST:PORT of the node API"},
    {.flag = "advertise", .env = "KOWLOON_ADVERTISE", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, advertise),
     .help = "URL the gateway uses to reach this node (default http://<listen>, "
             "the hostname when listening on all interfaces)"},
    {.flag = "slots", .env = "KOWLOON_SLOTS", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, slots), .def = "2", .min = 1,
     .max = 256, .help = "concurrent runs"},
    {.flag = "backend", .env = "KOWLOON_BACKEND", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, backend), .def = "auto",
     .help = "auto|cpu|cuda"},
    {.flag = "name", .env = "KOWLOON_NODE_NAME", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, name),
     .help = "node name (default hostname:port)"},
    {.flag = "cluster-token", .env = "KOWLOON_CLUSTER_TOKEN", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, cluster_token),
     .help = "the gateway's cluster token, to register with (required, here or in "
             "--cluster-token-file); callers of this node's API present it too"},
    {.flag = "cluster-token-file", .env = "KOWLOON_CLUSTER_TOKEN_FILE", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, cluster_token_file),
     .help = "file holding the cluster token (not readable by others), when --cluster-token is "
             "not given"},
    {.flag = "state-dir", .env = "KOWLOON_STATE_DIR", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, state_dir),
     .help = "directory (mode 0700) where the node keeps the credential the gateway gave it, "
             "in a file of mode 0600, so that a restart under the same name is known at once "
             "(default <exe>/../var/node; none: memory only)"},
    {.flag = "plugin", .env = "KOWLOON_PLUGIN", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, plugin),
     .help = "CUDA plugin (default <dir of executable>/../lib/kowloon-cuda.so)"},
    {.flag = "heartbeat-s", .env = "KOWLOON_HEARTBEAT_S", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, heartbeat_s), .def = "2",
     .min = 1, .max = 60, .help = "most seconds between heartbeats"},
    {.flag = "threads", .env = "KOWLOON_THREADS", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, threads), .def = "0", .min = 0,
     .max = 4096, .help = "CPU kernel threads per run, 0 = all cores"},
    {.flag = "drain-grace-s", .env = "KOWLOON_DRAIN_GRACE_S", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, drain_grace_s),
     .def = "30", .min = 0, .max = 86400,
     .help = "on SIGTERM, how long running runs may take to finish"},
    {.flag = "tls-ca", .env = "KOWLOON_TLS_CA", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, tls_ca),
     .help = "PEM CA certificates to check the gateway's HTTPS certificate against (its own "
             "CA, or its self-signed certificate); default: the system's"},
    {.flag = "tls-cert", .env = "KOWLOON_TLS_CERT", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, tls_cert),
     .help = "PEM certificate to serve the node API over HTTPS; with --tls-key; reread on "
             "SIGHUP"},
    {.flag = "tls-key", .env = "KOWLOON_TLS_KEY", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, tls_key),
     .help = "PEM private key of --tls-cert"},
    {.flag = "max-body-mb", .env = "KOWLOON_NODE_MAX_BODY_MB", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, max_body_mb),
     .def = "256", .min = 1, .max = 65536,
     .help = "largest POST /v1/runs body (base64 inputs are 4/3 of their bytes)"},
    {.flag = "input-cache-mb", .env = "KOWLOON_INPUT_CACHE_MB", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, input_cache_mb),
     .def = "1024", .min = 0, .max = 1048576,
     .help = "memory for input blobs kept by hash (LRU), 0 = no cache"},
    {.flag = "blob-dir", .env = "KOWLOON_NODE_BLOB_DIR", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, blob_dir), .def = "auto",
     .help = "the gateway's blob directory as this host sees it (same host, NFS, Lustre): "
             "inputs found there are mapped instead of fetched, outputs written there "
             "instead of pushed. auto: the directory the gateway announces, when this host "
             "sees it with the same store-id; none: everything over HTTP"},
    {.flag = "metrics-public", .env = "KOWLOON_METRICS_PUBLIC", .type = SVC_OPT_BOOL, .at = SVC_OPT_BOOL(cn_config, metrics_public), .def = "0",
     .help = "serve GET /metrics to anyone (default: the cluster token only)"},
    {.flag = "nvml", .env = "KOWLOON_NVML", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, nvml),
     .help = "NVIDIA management library for the GPU figures of /metrics (default "
             "libnvidia-ml.so.1 from the driver; none there: no GPU figures)"},
    {.flag = "dist-host", .env = "KOWLOON_DIST_HOST", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, dist_host),
     .help = "address the other nodes of a multi-node job reach this one on (Gloo TCP); "
             "default: the host of the advertised URL"},
    {.flag = "dist-timeout-s", .env = "KOWLOON_DIST_TIMEOUT_S", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, dist_timeout_s), .def = "30",
     .min = 1, .max = 3600,
     .help = "how long a multi-node run waits for its rendezvous, and for each collective, "
             "before it gives up (a peer is gone)"},
    {.flag = "slurm", .env = "KOWLOON_SLURM", .type = SVC_OPT_BOOL, .at = SVC_OPT_BOOL(cn_config, slurm), .def = "0",
     .help = "started by srun inside a Slurm allocation: the name (<host>-slurm<job>), slots, "
             "threads, GPUs and a free port on all interfaces come from the SLURM_* "
             "environment, unless given (deploy/slurm/)"},
    {.flag = "task-engine", .env = "KOWLOON_TASK_ENGINE", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_engine), .def = "auto",
     .help = "auto|podman|docker|none: the OCI engine that runs tasks (auto: podman when it "
             "answers, else none: tasks are refused)"},
    {.flag = "task-engine-cmd", .env = "KOWLOON_TASK_ENGINE_CMD", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_engine_cmd),
     .help = "the engine's executable (default: podman or docker in PATH)"},
    {.flag = "task-containers-conf", .env = "KOWLOON_TASK_CONTAINERS_CONF", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_containers_conf),
     .help = "a containers.conf podman gets as CONTAINERS_CONF (scripts/task-image.sh writes "
             "one for hosts where only runc and cgroupfs work)"},
    {.flag = "task-images", .env = "KOWLOON_TASK_IMAGES", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_images),
     .help = "comma-separated patterns (fnmatch) of the images this node runs (default: any "
             "the gateway allows)"},
    {.flag = "task-scratch", .env = "KOWLOON_TASK_SCRATCH", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_scratch),
     .help = "where each task part gets its directory (default $TMPDIR or /var/tmp, then "
             "/kowloon-tasks)"},
    {.flag = "task-uid", .env = "KOWLOON_TASK_UID", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_uid), .def = "65534", .min = 1,
     .max = 2147483647, .help = "the uid (and gid) a task's program runs as; never 0"},
    {.flag = "task-grace-s", .env = "KOWLOON_TASK_GRACE_S", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_grace_s), .def = "10",
     .min = 0, .max = 3600, .help = "from SIGTERM to SIGKILL when a task is cancelled or times out"},
    {.flag = "task-memory-mb", .env = "KOWLOON_TASK_MEMORY_MB", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_memory_mb), .def = "4096",
     .min = 16, .max = 1 << 30, .help = "memory of a task part that asks for none"},
    {.flag = "task-pids", .env = "KOWLOON_TASK_PIDS", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_pids), .def = "1024",
     .min = 16, .max = 1 << 22, .help = "processes and threads of a task part that asks for none"},
    {.flag = "task-output-mb", .env = "KOWLOON_TASK_OUTPUT_MB", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_output_mb), .def = "1024",
     .min = 0, .max = 1 << 30, .help = "bytes under /kowloon/out of a task part that asks for none"},
    {.flag = "task-log-mb", .env = "KOWLOON_TASK_LOG_MB", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_log_mb), .def = "64",
     .min = 1, .max = 1 << 20, .help = "log cap of a task part that asks for none"},
    {.flag = "task-blob-cache-mb", .env = "KOWLOON_TASK_BLOB_CACHE_MB", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_blob_cache_mb),
     .def = "10240", .min = 0, .max = 1 << 30,
     .help = "disk for task inputs kept as files when the blob directory is not shared"},
    {.flag = "task-images-refresh-s", .env = "KOWLOON_TASK_IMAGES_REFRESH_S", .type = SVC_OPT_INT, .at = SVC_OPT_INT(cn_config, task_images_refresh_s),
     .def = "60", .min = 1, .max = 86400,
     .help = "how often the engine's local images are listed again (sent with the next "
             "heartbeat when they changed)"},
    {.flag = "task-deny", .env = "KOWLOON_TASK_DENY", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_deny),
     .help = "comma-separated HOST:PORT, HOST or CIDR[:PORT] a gang part may not reach "
             "(PostgreSQL, Redis...); the gateway and this node's API always are"},
    {.flag = "task-firewall", .env = "KOWLOON_TASK_FIREWALL", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_firewall),
     .def = "iptables", .help = "iptables|off: how gang parts on the host network are kept off "
                                "the cluster's services (off: unfiltered)"},
    {.flag = "task-master-ports", .env = "KOWLOON_TASK_MASTER_PORTS", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, task_master_ports),
     .def = "29500-29999", .help = "LO-HI: the ports a gang's rank 0 picks MASTER_PORT from; "
                                   "keep them outside net.ipv4.ip_local_port_range"},
    {.flag = "log-level", .env = "KOWLOON_LOG_LEVEL", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(cn_config, log_level), .def = "info",
     .help = "debug|info|warn|error"},
    {.flag = NULL},
};

int cn_config_load(cn_config *c, int argc, char **argv, char *err, size_t errlen)
{
    int rc = svc_config_parse(cn_opts, argc, argv, 1, NULL, 0, NULL, err, errlen);
    if (rc == 0)
        svc_config_bind(cn_opts, c);
    return rc;
}

void cn_config_usage(FILE *out)
{
    svc_config_usage(cn_opts, out);
}

static const char *cn__getenv(const char *name)
{
    return getenv(name);
}

#define CN_GIVEN(field, kind) svc_config_given(svc_config_at(cn_opts, SVC_OPT_##kind(cn_config, field)))

int cn_config_slurm(cn_config *c, cn_slurm *s, char *err, size_t errlen)
{
    if (cn_slurm_read(cn__getenv, s, err, errlen) < 0)
        return -1;
    if (!CN_GIVEN(name, STR))
        c->name = s->name;
    if (!CN_GIVEN(slots, INT))
        c->slots = cn_slurm_slots(s);
    if (!CN_GIVEN(threads, INT))
        c->threads = cn_slurm_threads(s, (int)c->slots);
    /* Another allocation on this host may hold any fixed port; the gateway
     * learns the one bound, at the host's name. */
    if (!CN_GIVEN(listen, STR))
        c->listen = "0.0.0.0:0";
    if (!CN_GIVEN(state_dir, STR))
        c->state_dir = s->state_dir;
    /* Slurm numbers GPUs as nvidia-smi does, by PCI bus; CUDA's own order
     * (fastest first) may differ, and index 2 would be another job's GPU. */
    if (((!s->gpus_from || strcmp(s->gpus_from, "CUDA_VISIBLE_DEVICES") != 0) &&
         setenv("CUDA_VISIBLE_DEVICES", s->gpus, 1) < 0) ||
        setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0) < 0) {
        snprintf(err, errlen, "cannot set the CUDA environment: %s", strerror(errno));
        return -1;
    }
    svc_info("slurm allocation job=%s host=%s name=%s cpus=%d gpus=%d cuda_visible_devices=\"%s\" "
             "(from %s) cuda_device_order=%s slots=%ld threads=%ld", s->job_id, s->host,
             c->name, s->cpus, s->ngpus, s->gpus, s->gpus_from ? s->gpus_from : "none set",
             getenv("CUDA_DEVICE_ORDER"), c->slots, c->threads);
    return 0;
}
