/* main.c — kowloon-compute: reads its options, picks the backend (CUDA
 * plugin or CPU), serves the node API, registers with the gateway and, on
 * SIGTERM or SIGINT, drains: no new runs, running ones get a grace period to
 * finish and be collected, then it deregisters and exits 0. When the GPU is
 * lost (a sticky CUDA error), it drains the same way and exits
 * CN_EXIT_DEVICE_LOST for its supervisor to start it again. SIGHUP rereads
 * the node API's TLS certificate. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cn_api.h"
#include "cn_backend.h"
#include "cn_cred.h"
#include "cn_node.h"
#include "cn_lease.h"
#include "cn_metrics.h"
#include "cn_netif.h"
#include "cn_register.h"
#include "cn_runs.h"
#include "cn_slurm.h"
#include "svc_client.h"
#include "svc_config.h"
#include "svc_http.h"
#include "svc_log.h"
#include "svc_secret.h"
#include "svc_util.h"

/* After the grace period, cancelled kernels get this long to stop. */
#define CN_CANCEL_WAIT_MS 5000
/* ... and their reports this long to be recorded before the node
 * deregisters, so that the gateway requeues them at once, saying why. */
#define CN_GIVE_BACK_WAIT_MS 3000

/* The GPU was lost: CUDA's context is gone for the rest of the process
 * ("the process must be terminated and relaunched"), and no reset or
 * reload of the plugin inside it brings the device back. So the node
 * drains, deregisters and exits with this code (EX_TEMPFAIL), which its
 * supervisor (systemd Restart=on-failure, the Kubernetes DaemonSet,
 * compose's restart policy) answers with a fresh process. */
#define CN_EXIT_DEVICE_LOST 75
/* The byte the device-lost callback writes on the signal pipe: no signal
 * has that number. */
#define CN_WAKE_DEVICE_LOST 250
/* How long the node waits for the gateway to take a heartbeat that says
 * why it leaves, before it drains. */
#define CN_FAULT_BEAT_WAIT_MS 3000

/* SIGTERM/SIGINT/SIGHUP arrive on this pipe. Masks cannot steer them to
 * main: libraries start threads before main runs (OpenBLAS's pool does),
 * and any thread may take a process signal, so the handler only writes a
 * byte. */
static int cn_sigpipe[2] = {-1, -1};
/* --tls-cert/--tls-key of the node API (NULL: plain HTTP), and its files. */
static svc_tls *cn_tls;

static void cn__on_signal(int sig)
{
    int saved = errno;
    unsigned char c = (unsigned char)sig;
    if (write(cn_sigpipe[1], &c, 1) < 0) {
        /* the pipe is full: a signal is already pending, which is enough */
    }
    errno = saved;
}

static int cn__signals_install(void)
{
    struct sigaction sa;

    if (pipe2(cn_sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -errno;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cn__on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0 ||
        sigaction(SIGHUP, &sa, NULL) < 0)
        return -errno;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* The run manager's callback (cn_runs.h: under its lock, so it only notes
 * the reason and wakes main, which drains). */
static void cn__on_device_lost(void *ctx, const char *why)
{
    unsigned char c = CN_WAKE_DEVICE_LOST;
    if (cn_node_fault_set(ctx, why) && write(cn_sigpipe[1], &c, 1) < 0) {
        /* the pipe is full: main is being woken already */
    }
}

/* NCCL of a multi-node run must use the interface the other nodes reach
 * this one on; left to itself it may pick any (a container bridge). Set
 * before the first NCCL call, and only when the operator has not. */
static void cn__nccl_interface(const char *host)
{
    char ifn[64], v[80];
    const char *set = getenv("NCCL_SOCKET_IFNAME");

    if (set) {
        svc_info("nccl interface NCCL_SOCKET_IFNAME=%s (from the environment)", set);
        return;
    }
    int e = cn_netif_of(host, ifn, sizeof ifn);
    if (e < 0) {
        svc_warn("nccl interface: no interface of this host has the address of %s (%s); NCCL picks its own "
                 "unless NCCL_SOCKET_IFNAME is set", host, strerror(-e));
        return;
    }
    snprintf(v, sizeof v, "=%s", ifn); /* "=": this interface exactly, not a prefix */
    if (setenv("NCCL_SOCKET_IFNAME", v, 0) == 0)
        svc_info("nccl interface NCCL_SOCKET_IFNAME=%s (the interface of %s)", v, host);
}

/* Waits up to timeout_ms (-1: for ever) for SIGTERM or SIGINT; returns it,
 * or 0. A SIGHUP meanwhile rereads the TLS certificate (new handshakes get
 * it; open connections keep theirs) and the wait goes on. */
static int cn__signal_wait(int timeout_ms)
{
    struct pollfd p = {.fd = cn_sigpipe[0], .events = POLLIN};
    int64_t until = timeout_ms < 0 ? -1 : svc_now_mono_ms() + timeout_ms;
    unsigned char c;

    for (;;) {
        int64_t left = until < 0 ? -1 : until - svc_now_mono_ms();
        if (poll(&p, 1, left < 0 ? (until < 0 ? -1 : 0) : (int)left) <= 0 ||
            read(cn_sigpipe[0], &c, 1) != 1)
            return 0;
        if (c != SIGHUP)
            return c;
        char err[256];
        if (cn_tls == NULL)
            svc_info("SIGHUP: no --tls-cert to reread");
        else if (svc_tls_reload(cn_tls, err, sizeof err) != 0)
            svc_error("SIGHUP: keeping the certificate in use: %s", err);
        else
            svc_info("SIGHUP: certificate reread");
    }
}

static svc_opt cn_opts[] = {
    {.flag = "gateway", .env = "KOWLOON_GATEWAY", .type = SVC_OPT_STRING,
     .def = "http://127.0.0.1:8081",
     .help = "the gateway's cluster listener (its --cluster-listen), base URL"},
    {.flag = "listen", .env = "KOWLOON_LISTEN", .type = SVC_OPT_STRING,
     .def = "127.0.0.1:8091", .help = "HOST:PORT of the node API"},
    {.flag = "advertise", .env = "KOWLOON_ADVERTISE", .type = SVC_OPT_STRING,
     .help = "URL the gateway uses to reach this node (default http://<listen>, "
             "the hostname when listening on all interfaces)"},
    {.flag = "slots", .env = "KOWLOON_SLOTS", .type = SVC_OPT_INT, .def = "2", .min = 1,
     .max = 256, .help = "concurrent runs"},
    {.flag = "backend", .env = "KOWLOON_BACKEND", .type = SVC_OPT_STRING, .def = "auto",
     .help = "auto|cpu|cuda"},
    {.flag = "name", .env = "KOWLOON_NODE_NAME", .type = SVC_OPT_STRING,
     .help = "node name (default hostname:port)"},
    {.flag = "cluster-token", .env = "KOWLOON_CLUSTER_TOKEN", .type = SVC_OPT_STRING,
     .help = "the gateway's cluster token, to register with (required, here or in "
             "--cluster-token-file); callers of this node's API present it too"},
    {.flag = "cluster-token-file", .env = "KOWLOON_CLUSTER_TOKEN_FILE", .type = SVC_OPT_STRING,
     .help = "file holding the cluster token (not readable by others), when --cluster-token is "
             "not given"},
    {.flag = "state-dir", .env = "KOWLOON_STATE_DIR", .type = SVC_OPT_STRING,
     .help = "directory (mode 0700) where the node keeps the credential the gateway gave it, "
             "in a file of mode 0600, so that a restart under the same name is known at once "
             "(default <exe>/../var/node; none: memory only)"},
    {.flag = "plugin", .env = "KOWLOON_PLUGIN", .type = SVC_OPT_STRING,
     .help = "CUDA plugin (default <dir of executable>/../lib/kowloon-cuda.so)"},
    {.flag = "heartbeat-s", .env = "KOWLOON_HEARTBEAT_S", .type = SVC_OPT_INT, .def = "2",
     .min = 1, .max = 60, .help = "most seconds between heartbeats"},
    {.flag = "threads", .env = "KOWLOON_THREADS", .type = SVC_OPT_INT, .def = "0", .min = 0,
     .max = 4096, .help = "CPU kernel threads per run, 0 = all cores"},
    {.flag = "drain-grace-s", .env = "KOWLOON_DRAIN_GRACE_S", .type = SVC_OPT_INT,
     .def = "30", .min = 0, .max = 86400,
     .help = "on SIGTERM, how long running runs may take to finish"},
    {.flag = "tls-ca", .env = "KOWLOON_TLS_CA", .type = SVC_OPT_STRING,
     .help = "PEM CA certificates to check the gateway's HTTPS certificate against (its own "
             "CA, or its self-signed certificate); default: the system's"},
    {.flag = "tls-cert", .env = "KOWLOON_TLS_CERT", .type = SVC_OPT_STRING,
     .help = "PEM certificate to serve the node API over HTTPS; with --tls-key; reread on "
             "SIGHUP"},
    {.flag = "tls-key", .env = "KOWLOON_TLS_KEY", .type = SVC_OPT_STRING,
     .help = "PEM private key of --tls-cert"},
    {.flag = "max-body-mb", .env = "KOWLOON_NODE_MAX_BODY_MB", .type = SVC_OPT_INT,
     .def = "256", .min = 1, .max = 65536,
     .help = "largest POST /v1/runs body (base64 inputs are 4/3 of their bytes)"},
    {.flag = "input-cache-mb", .env = "KOWLOON_INPUT_CACHE_MB", .type = SVC_OPT_INT,
     .def = "1024", .min = 0, .max = 1048576,
     .help = "memory for input blobs kept by hash (LRU), 0 = no cache"},
    {.flag = "blob-dir", .env = "KOWLOON_NODE_BLOB_DIR", .type = SVC_OPT_STRING, .def = "auto",
     .help = "the gateway's blob directory as this host sees it (same host, NFS, Lustre): "
             "inputs found there are mapped instead of fetched, outputs written there "
             "instead of pushed. auto: the directory the gateway announces, when this host "
             "sees it with the same store-id; none: everything over HTTP"},
    {.flag = "metrics-public", .env = "KOWLOON_METRICS_PUBLIC", .type = SVC_OPT_BOOL, .def = "0",
     .help = "serve GET /metrics to anyone (default: the cluster token only)"},
    {.flag = "nvml", .env = "KOWLOON_NVML", .type = SVC_OPT_STRING,
     .help = "NVIDIA management library for the GPU figures of /metrics (default "
             "libnvidia-ml.so.1 from the driver; none there: no GPU figures)"},
    {.flag = "dist-host", .env = "KOWLOON_DIST_HOST", .type = SVC_OPT_STRING,
     .help = "address the other nodes of a multi-node job reach this one on (Gloo TCP); "
             "default: the host of the advertised URL"},
    {.flag = "dist-timeout-s", .env = "KOWLOON_DIST_TIMEOUT_S", .type = SVC_OPT_INT, .def = "30",
     .min = 1, .max = 3600,
     .help = "how long a multi-node run waits for its rendezvous, and for each collective, "
             "before it gives up (a peer is gone)"},
    {.flag = "slurm", .env = "KOWLOON_SLURM", .type = SVC_OPT_BOOL, .def = "0",
     .help = "started by srun inside a Slurm allocation: the name (<host>-slurm<job>), slots, "
             "threads, GPUs and a free port on all interfaces come from the SLURM_* "
             "environment, unless given (deploy/slurm/)"},
    {.flag = "task-engine", .env = "KOWLOON_TASK_ENGINE", .type = SVC_OPT_STRING, .def = "auto",
     .help = "auto|podman|docker|none: the OCI engine that runs tasks (auto: podman when it "
             "answers, else none: tasks are refused)"},
    {.flag = "task-engine-cmd", .env = "KOWLOON_TASK_ENGINE_CMD", .type = SVC_OPT_STRING,
     .help = "the engine's executable (default: podman or docker in PATH)"},
    {.flag = "task-containers-conf", .env = "KOWLOON_TASK_CONTAINERS_CONF", .type = SVC_OPT_STRING,
     .help = "a containers.conf podman gets as CONTAINERS_CONF (scripts/task-image.sh writes "
             "one for hosts where only runc and cgroupfs work)"},
    {.flag = "task-images", .env = "KOWLOON_TASK_IMAGES", .type = SVC_OPT_STRING,
     .help = "comma-separated patterns (fnmatch) of the images this node runs (default: any "
             "the gateway allows)"},
    {.flag = "task-scratch", .env = "KOWLOON_TASK_SCRATCH", .type = SVC_OPT_STRING,
     .help = "where each task part gets its directory (default $TMPDIR or /var/tmp, then "
             "/kowloon-tasks)"},
    {.flag = "task-uid", .env = "KOWLOON_TASK_UID", .type = SVC_OPT_INT, .def = "65534", .min = 1,
     .max = 2147483647, .help = "the uid (and gid) a task's program runs as; never 0"},
    {.flag = "task-grace-s", .env = "KOWLOON_TASK_GRACE_S", .type = SVC_OPT_INT, .def = "10",
     .min = 0, .max = 3600, .help = "from SIGTERM to SIGKILL when a task is cancelled or times out"},
    {.flag = "task-memory-mb", .env = "KOWLOON_TASK_MEMORY_MB", .type = SVC_OPT_INT, .def = "4096",
     .min = 16, .max = 1 << 30, .help = "memory of a task part that asks for none"},
    {.flag = "task-pids", .env = "KOWLOON_TASK_PIDS", .type = SVC_OPT_INT, .def = "1024",
     .min = 16, .max = 1 << 22, .help = "processes and threads of a task part that asks for none"},
    {.flag = "task-output-mb", .env = "KOWLOON_TASK_OUTPUT_MB", .type = SVC_OPT_INT, .def = "1024",
     .min = 0, .max = 1 << 30, .help = "bytes under /kowloon/out of a task part that asks for none"},
    {.flag = "task-log-mb", .env = "KOWLOON_TASK_LOG_MB", .type = SVC_OPT_INT, .def = "64",
     .min = 1, .max = 1 << 20, .help = "log cap of a task part that asks for none"},
    {.flag = "task-blob-cache-mb", .env = "KOWLOON_TASK_BLOB_CACHE_MB", .type = SVC_OPT_INT,
     .def = "10240", .min = 0, .max = 1 << 30,
     .help = "disk for task inputs kept as files when the blob directory is not shared"},
    {.flag = "task-images-refresh-s", .env = "KOWLOON_TASK_IMAGES_REFRESH_S", .type = SVC_OPT_INT,
     .def = "60", .min = 1, .max = 86400,
     .help = "how often the engine's local images are listed again (sent with the next "
             "heartbeat when they changed)"},
    {.flag = "task-deny", .env = "KOWLOON_TASK_DENY", .type = SVC_OPT_STRING,
     .help = "comma-separated HOST:PORT, HOST or CIDR[:PORT] a gang part may not reach "
             "(PostgreSQL, Redis...); the gateway and this node's API always are"},
    {.flag = "task-firewall", .env = "KOWLOON_TASK_FIREWALL", .type = SVC_OPT_STRING,
     .def = "iptables", .help = "iptables|off: how gang parts on the host network are kept off "
                                "the cluster's services (off: unfiltered)"},
    {.flag = "log-level", .env = "KOWLOON_LOG_LEVEL", .type = SVC_OPT_STRING, .def = "info",
     .help = "debug|info|warn|error"},
    {.flag = NULL},
};

static const char *cn__opt(const char *flag)
{
    return svc_config_get(cn_opts, flag)->str;
}

static long cn__num(const char *flag)
{
    return svc_config_get(cn_opts, flag)->num;
}

static const char *cn__getenv(const char *name)
{
    return getenv(name);
}

/* --slurm: what the user did not set comes from the allocation, and CUDA
 * sees the allocation's GPUs and no other (none when it has none). Call
 * before the backend is chosen. 0, or -1 with err. */
static int cn__slurm_apply(cn_slurm *s, char *err, size_t errlen)
{
    svc_opt *name = svc_config_get(cn_opts, "name"), *slots = svc_config_get(cn_opts, "slots");
    svc_opt *threads = svc_config_get(cn_opts, "threads");
    svc_opt *listen = svc_config_get(cn_opts, "listen");
    svc_opt *state = svc_config_get(cn_opts, "state-dir");

    if (cn_slurm_read(cn__getenv, s, err, errlen) < 0)
        return -1;
    if (!svc_config_given(name))
        name->str = s->name;
    if (!svc_config_given(slots))
        slots->num = cn_slurm_slots(s);
    if (!svc_config_given(threads))
        threads->num = cn_slurm_threads(s, (int)slots->num);
    /* Another allocation on this host may hold any fixed port; the gateway
     * learns the one bound, at the host's name. */
    if (!svc_config_given(listen))
        listen->str = "0.0.0.0:0";
    if (!svc_config_given(state))
        state->str = s->state_dir;
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
             name->str, s->cpus, s->ngpus, s->gpus, s->gpus_from ? s->gpus_from : "none set",
             getenv("CUDA_DEVICE_ORDER"), slots->num, threads->num);
    return 0;
}

/* The live log shipper's node id: the registration's, once there is one. */
static int cn__node_id(void *cls, char id[64])
{
    const cn_node *n = cls;
    cn_register *reg = __atomic_load_n(&n->reg, __ATOMIC_ACQUIRE);
    return reg && cn_register_node_id(reg, id);
}

/* Fills the default name (hostname:port) and advertised URL from the listen
 * address and the port actually bound. A wildcard host is no address to
 * call back, so the hostname stands in for it. */
static void cn__identity(const char *listen, int port, char *name, size_t nlen, char *url,
                         size_t ulen)
{
    char host[256] = "", hostname[256] = "localhost";
    const char *colon = strrchr(listen, ':');

    gethostname(hostname, sizeof hostname - 1);
    if (colon)
        snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    if (!host[0] || strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0 ||
        strcmp(host, "[::]") == 0)
        snprintf(host, sizeof host, "%s", hostname);
    snprintf(name, nlen, "%s:%d", hostname, port);
    snprintf(url, ulen, "%s://%s:%d", cn_tls != NULL ? "https" : "http", host, port);
}

/* Waits for the runs that were in flight to finish and be collected, up to
 * grace_s; a second signal cuts it short. Then cancels what is left and
 * gives them cancel_ms to stop. Returns how many kernels are still running
 * despite being cancelled. */
static int cn__drain(cn_runs *runs, long grace_s, int64_t cancel_ms)
{
    int64_t started = svc_now_mono_ms(), deadline = started + grace_s * 1000;
    int left = cn_runs_drain(runs);

    svc_info("draining runs=%d grace_s=%ld", left, grace_s);
    while (left > 0) {
        int64_t wait = deadline - svc_now_mono_ms();
        if (wait <= 0) {
            svc_warn("grace period over; cancelling unfinished runs runs=%d", left);
            break;
        }
        /* One kill can arrive twice (timeout(1) signals the child and its
         * group), so only a signal a second later means "hurry". */
        if (cn__signal_wait(wait > 200 ? 200 : (int)wait) > 0 &&
            svc_now_mono_ms() - started >= 1000) {
            svc_warn("second signal; cancelling unfinished runs runs=%d", left);
            break;
        }
        left = cn_runs_unsettled(runs);
    }
    int stuck = left > 0 ? cn_runs_cancel_all(runs, cancel_ms) : 0;
    if (stuck > 0) {
        svc_warn("kernels ignore their cancel flag; exiting without them runs=%d", stuck);
        return stuck;
    }
    /* The runs cut short are given back: their reports (the node shut
     * down) make the gateway requeue each job at once as a new attempt,
     * which fences out anything this node might still send. A report not
     * recorded in time is covered by the deregistration: the gateway then
     * requeues what still ran here as lost. */
    int64_t give_back = svc_now_mono_ms() + CN_GIVE_BACK_WAIT_MS;
    while (left > 0 && (left = cn_runs_unsettled(runs)) > 0 && svc_now_mono_ms() < give_back)
        cn__signal_wait(50);
    if (left > 0)
        svc_warn("runs given back without a recorded report runs=%d", left);
    return 0;
}

int main(int argc, char **argv)
{
    char err[512], exe_dir[1024], plugin[1200], name[320], url[320];
    cn_backend backend = {.kind = CN_BACKEND_CPU};
    cn_node node = {0};
    cn_runs *runs = NULL;
    cn_blobcache *cache = NULL;
    static cn_blobio_stats blob_stats;
    static cn_blobio blobio;
    svc_server *server = NULL;
    cn_register *reg = NULL;
    cn_lease *lease = NULL;
    static cn_task_cfg tasks;
    cn_logship *ship = NULL;
    int sig, e, stuck = 0, rc = 1, tasks_open = 0;

    int prc = svc_config_parse(cn_opts, argc, argv, 1, NULL, 0, NULL, err, sizeof err);
    if (prc == 1) {
        printf("usage: kowloon-compute [flags]\n");
        svc_config_usage(cn_opts, stdout);
        return 0;
    }
    if (prc < 0) {
        fprintf(stderr, "kowloon-compute: %s\n", err);
        svc_config_usage(cn_opts, stderr);
        return 2;
    }
    int level = svc_log_level_parse(cn__opt("log-level"));
    if (level < 0) {
        fprintf(stderr, "kowloon-compute: --log-level must be debug, info, warn or error\n");
        return 2;
    }
    svc_log_init("compute", level);
    cn_slurm slurm;
    if (cn__num("slurm") && cn__slurm_apply(&slurm, err, sizeof err) < 0) {
        svc_error("--slurm: %s", err);
        return 2;
    }
    static char token_buf[512];
    const char *token = cn__opt("cluster-token");
    const char *token_file = cn__opt("cluster-token-file");
    if ((!token || !token[0]) && token_file && token_file[0]) {
        if (svc_secret_read(token_file, token_buf, sizeof token_buf, err, sizeof err) != 0) {
            svc_error("--cluster-token-file: %s", err);
            return 2;
        }
        token = token_buf;
    }
    if (!token || !token[0]) {
        svc_error("--cluster-token (KOWLOON_CLUSTER_TOKEN) or --cluster-token-file is required");
        return 2;
    }
    /* Kept from here on in this process's memory only: nothing it starts
     * inherits the token through its environment, and the initial
     * environment block, which /proc/<pid>/environ shows to any process of
     * this user, no longer holds it either. */
    if (token != token_buf) {
        snprintf(token_buf, sizeof token_buf, "%s", token);
        token = token_buf;
    }
    char *in_env = getenv("KOWLOON_CLUSTER_TOKEN");
    if (in_env)
        memset(in_env, 0, strlen(in_env));
    unsetenv("KOWLOON_CLUSTER_TOKEN");
    if (svc_client_global_init() < 0) {
        svc_error("HTTP client initialisation failed");
        return 1;
    }
    svc_client_set_ca_file(cn__opt("tls-ca"));
    if (((cn__opt("tls-cert") && *cn__opt("tls-cert")) || (cn__opt("tls-key") && *cn__opt("tls-key"))) &&
        !(cn_tls = svc_tls_new(cn__opt("tls-cert"), cn__opt("tls-key"), err, sizeof err))) {
        svc_error("--tls-cert/--tls-key: %s", err);
        return 2;
    }

    if ((e = cn__signals_install()) < 0) {
        svc_error("cannot install signal handlers: %s", strerror(-e));
        return 1;
    }

    if (cn__opt("plugin") && cn__opt("plugin")[0])
        snprintf(plugin, sizeof plugin, "%s", cn__opt("plugin"));
    else if (svc_exe_dir(exe_dir, sizeof exe_dir) == 0)
        snprintf(plugin, sizeof plugin, "%s/../lib/kowloon-cuda.so", exe_dir);
    else
        snprintf(plugin, sizeof plugin, "lib/kowloon-cuda.so");
    int brc = cn_backend_open(&backend, cn__opt("backend"), plugin);
    if (brc == -EINVAL) {
        svc_error("--backend: %s", backend.reason);
        rc = 2;
        goto cleanup;
    }
    if (brc < 0) {
        svc_error("backend cuda requested but unavailable: %s", backend.reason);
        goto cleanup;
    }
    svc_info("backend chosen backend=%s gpus=%d reason=\"%s\"", cn_backend_name(&backend),
             cn_backend_ngpus(&backend), backend.reason);
    if (backend.kind == CN_BACKEND_CUDA)
        svc_info("backend info=\"%s\"", cn_backend_info(&backend));

    /* Inputs by reference come from, and pushed outputs go to, the gateway
     * this node registers with. */
    if ((e = cn_blobcache_create((uint64_t)cn__num("input-cache-mb") << 20, &cache)) < 0) {
        svc_error("cannot create the input cache: %s", strerror(-e));
        goto cleanup;
    }
    /* Every call after registration carries the node's own credential; the
     * name it is kept under is known once the listen port is (below). */
    static cn_cred *cred;
    cn_blobio_gateway gw_io = {.url = cn__opt("gateway")};
    cn_blobio_gateway_init(&blobio, &gw_io);
    blobio.stats = &blob_stats;
    const char *bdir = cn__opt("blob-dir");
    node.share_mode = !bdir || !bdir[0] || strcmp(bdir, "auto") == 0 ? CN_SHARE_AUTO
                      : strcmp(bdir, "none") == 0                     ? CN_SHARE_NONE
                                                                      : CN_SHARE_PATH;
    /* the gateway creates the store; a node only uses one that exists */
    if (node.share_mode == CN_SHARE_PATH &&
        cn_blobio_share_path(&blobio, bdir, err, sizeof err) < 0) {
        svc_error("--blob-dir: %s", err);
        rc = 2;
        goto cleanup;
    }
    if (!(node.metrics = svc_metrics_new()) || svc_metrics_add_process(node.metrics) != 0) {
        svc_error("cannot create the metrics registry: out of memory");
        goto cleanup;
    }
    node.metrics_public = (int)cn__num("metrics-public");
    if (backend.kind == CN_BACKEND_CUDA && backend.plugin.host_register)
        cn_blobio_set_pinning(backend.plugin.host_register, backend.plugin.host_unregister);
    /* the host is filled below, once the advertised URL is known, before
     * any run can arrive */
    static cn_dist_cfg dist;
    dist.gateway = cn__opt("gateway");
    dist.timeout_ms = (int)cn__num("dist-timeout-s") * 1000;
    cn_runs_opts ro = {.slots = (int)cn__num("slots"), .threads = (int)cn__num("threads"),
                       .backend = &backend, .blobio = &blobio, .cache = cache,
                       .metrics = node.metrics, .dist = &dist, .tasks = &tasks,
                       .on_device_lost = cn__on_device_lost, .device_ctx = &node};
    e = cn_runs_create(&ro, &runs);
    if (e < 0) {
        svc_error("cannot start the run manager: %s", strerror(-e));
        goto cleanup;
    }

    node.token = token;
    node.slots = ro.slots;
    node.backend = &backend;
    node.runs = runs;
    node.cache = cache;
    node.blob_stats = &blob_stats;
    node.blobio = &blobio;
    /* With a fixed port the identity is known before the first request can
     * arrive; with port 0 nobody can call before the port is logged. */
    const char *listen = cn__opt("listen");
    const char *lport = strrchr(listen, ':');
    cn__identity(listen, lport ? atoi(lport + 1) : 0, name, sizeof name, url, sizeof url);
    node.name = cn__opt("name") && cn__opt("name")[0] ? cn__opt("name") : name;
    char state_dir[1100];
    const char *sdir = cn__opt("state-dir");
    if (sdir && strcmp(sdir, "none") == 0)
        sdir = "";
    else if ((!sdir || !sdir[0]) && svc_exe_dir(exe_dir, sizeof exe_dir) == 0) {
        snprintf(state_dir, sizeof state_dir, "%s/../var/node", exe_dir);
        sdir = state_dir;
    }
    if (cn_cred_open(sdir, node.name, &cred, err, sizeof err) < 0) {
        svc_error("cannot keep the node credential: out of memory");
        goto cleanup;
    }
    if (err[0])
        svc_warn("%s", err);
    node.cred = cred;
    gw_io.cred = cred;
    dist.cred = cred;
    node.url = cn__opt("advertise") && cn__opt("advertise")[0] ? cn__opt("advertise") : url;
    if (cn__opt("dist-host") && cn__opt("dist-host")[0])
        snprintf(dist.host, sizeof dist.host, "%s", cn__opt("dist-host"));
    else
        cn_rdv_host_of(node.url, dist.host, sizeof dist.host);
    if (backend.kind == CN_BACKEND_CUDA)
        cn__nccl_interface(dist.host);
    if (cn_metrics_start(&node, cn__opt("nvml")) < 0) {
        svc_error("cannot start the node's metrics: out of memory");
        goto cleanup;
    }

    svc_server_opts so = {.listen = listen, .routes = cn_api_routes,
                          .max_body = (size_t)cn__num("max-body-mb") << 20,
                          /* runs carry their inputs inline: a JSON body may
                           * take the whole limit (depth and values are held) */
                          .max_json_body = (size_t)cn__num("max-body-mb") << 20,
                          .tls = cn_tls,
                          /* long polls hold a request for up to 60 s */
                          .conn_timeout_s = 120, .max_header = 16 << 10,
                          .authorize = cn_api_authorize, .app = &node,
                          .metrics = node.metrics};
    if (!(server = svc_server_start(&so, err, sizeof err))) {
        svc_error("%s", err);
        goto cleanup;
    }
    if (!lport || atoi(lport + 1) == 0)
        cn__identity(listen, svc_server_port(server), name, sizeof name, url, sizeof url);
    svc_info("listening listen=%s port=%d name=%s url=%s slots=%d", listen,
             svc_server_port(server), node.name, node.url, node.slots);

    /* Tasks, once the node's name is final: it labels the containers, and
     * the containers a killed process of this name left are removed now. */
    cn_task_opts to = {
        .engine = cn__opt("task-engine"), .engine_cmd = cn__opt("task-engine-cmd"),
        .containers_conf = cn__opt("task-containers-conf"), .node_name = node.name,
        .gateway = cn__opt("gateway"), .node_url = node.url, .scratch = cn__opt("task-scratch"),
        .images = cn__opt("task-images"), .deny = cn__opt("task-deny"),
        .firewall = cn__opt("task-firewall"), .uid = cn__num("task-uid"),
        .grace_s = cn__num("task-grace-s"), .memory_mb = cn__num("task-memory-mb"),
        .pids = cn__num("task-pids"), .output_mb = cn__num("task-output-mb"),
        .log_mb = cn__num("task-log-mb"), .files_mb = cn__num("task-blob-cache-mb"),
        .images_refresh_s = cn__num("task-images-refresh-s")};
    if (cn_task_cfg_open(&tasks, &to, err, sizeof err) < 0) {
        svc_error("%s", err);
        rc = 2;
        goto cleanup;
    }
    tasks_open = 1;
    node.tasks = &tasks;
    static cn_logship_http ship_http;
    ship_http = (cn_logship_http){.gateway = cn__opt("gateway"), .cred = node.cred,
                                  .node_id = cn__node_id, .node_cls = &node};
    cn_logship_sink ship_sink;
    cn_logship_http_init(&ship_sink, &ship_http);
    if (tasks.engine.kind != CN_ENGINE_NONE &&
        (e = cn_logship_start(&ship_sink, NULL, &ship)) < 0) {
        svc_error("cannot start the log shipper: %s", strerror(-e));
        goto cleanup;
    }
    tasks.ship = ship;

    if ((e = cn_register_start(cn__opt("gateway"), (int)cn__num("heartbeat-s"), &node, &reg)) < 0) {
        svc_error("cannot start the registration thread: %s", strerror(-e));
        goto cleanup;
    }
    __atomic_store_n(&node.reg, reg, __ATOMIC_RELEASE);

    if ((e = cn_lease_start(cn__opt("gateway"), &node, reg, &lease)) < 0) {
        svc_error("cannot start the lease threads: %s", strerror(-e));
        goto cleanup;
    }

    while ((sig = cn__signal_wait(-1)) == 0)
        ;
    if (sig == CN_WAKE_DEVICE_LOST)
        svc_error("GPU lost: the node takes itself out of service, drains and exits %d for its supervisor "
                  "to restart it why=\"%s\"", CN_EXIT_DEVICE_LOST, cn_node_fault(&node));
    else
        svc_info("signal received signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    __atomic_store_n(&node.draining, 1, __ATOMIC_RELEASE);
    cn_lease_drain(lease);      /* no new runs; finished ones are still reported */
    /* The gateway learns why before the node leaves: GET /v1/nodes keeps
     * the fault after the node is down. */
    if (sig == CN_WAKE_DEVICE_LOST && !cn_register_beat_now(reg, CN_FAULT_BEAT_WAIT_MS))
        svc_warn("the gateway took no heartbeat with the fault in %d ms", CN_FAULT_BEAT_WAIT_MS);
    /* a task stops within its grace (SIGTERM, then SIGKILL): wait for that */
    int64_t cancel_ms = CN_CANCEL_WAIT_MS;
    if (tasks.engine.kind != CN_ENGINE_NONE && (cn__num("task-grace-s") + 3) * 1000 > cancel_ms)
        cancel_ms = (cn__num("task-grace-s") + 3) * 1000;
    stuck = cn__drain(runs, cn__num("drain-grace-s"), cancel_ms);
    rc = sig == CN_WAKE_DEVICE_LOST ? CN_EXIT_DEVICE_LOST : 0;
cleanup:
    cn_lease_stop_polls(lease);
    cn_register_stop(reg);      /* deregisters while the API still answers; the
                                   gateway then ends the lease poll at once */
    cn_lease_stop(lease);
    cn_runs_shutdown(runs);     /* ends long polls so the server can stop */
    svc_server_stop(server);
    svc_tls_free(cn_tls);
    cn_register_free(reg);      /* after the server: GET /readyz reads it */
    /* A kernel that ignores its cancel flag would block the join for ever,
     * and the plugin must stay loaded under it: leave both to the exit. */
    if (!stuck) {
        cn_runs_destroy(runs);
        cn_logship_stop(ship);
        if (tasks_open)
            cn_task_cfg_close(&tasks);
        cn_blobcache_destroy(cache);
        cn_blobio_share_close(&blobio);
        /* With the device lost, every call into it fails: the exit frees it */
        if (rc != CN_EXIT_DEVICE_LOST)
            cn_backend_close(&backend);
        cn_metrics_stop(&node);
        svc_metrics_free(node.metrics);
        cn_cred_free(cred);
    }
    if (rc == 0)
        svc_info("stopped");
    else if (rc == CN_EXIT_DEVICE_LOST)
        svc_info("stopped: exit %d, to be started again with a fresh device context", rc);
    return rc;
}
