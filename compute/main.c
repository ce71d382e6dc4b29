/* main.c — kowloon-compute: reads its options, picks the backend (CUDA
 * plugin or CPU), serves the node API, registers with the gateway and, on
 * SIGTERM or SIGINT, drains: no new runs, running ones get a grace period to
 * finish and be collected, then it deregisters and exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "backend.h"
#include "node.h"
#include "lease.h"
#include "metrics.h"
#include "register.h"
#include "runs.h"
#include "slurm.h"
#include "svc_client.h"
#include "svc_config.h"
#include "svc_http.h"
#include "svc_log.h"
#include "svc_util.h"

/* After the grace period, cancelled kernels get this long to stop. */
#define CN_CANCEL_WAIT_MS 5000
/* ... and their reports this long to be recorded before the node
 * deregisters, so that the gateway requeues them at once, saying why. */
#define CN_GIVE_BACK_WAIT_MS 3000

/* SIGTERM/SIGINT arrive on this pipe. Masks cannot steer them to main:
 * libraries start threads before main runs (OpenBLAS's pool does), and any
 * thread may take a process signal, so the handler only writes a byte. */
static int cn_sigpipe[2] = {-1, -1};

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
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
        return -errno;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* Waits up to timeout_ms (-1: for ever) for a signal; returns it, or 0. */
static int cn__signal_wait(int timeout_ms)
{
    struct pollfd p = {.fd = cn_sigpipe[0], .events = POLLIN};
    unsigned char c;

    if (poll(&p, 1, timeout_ms) <= 0 || read(cn_sigpipe[0], &c, 1) != 1)
        return 0;
    return c;
}

static svc_opt cn_opts[] = {
    {.flag = "gateway", .env = "KOWLOON_GATEWAY", .type = SVC_OPT_STRING,
     .def = "http://127.0.0.1:8080", .help = "gateway base URL"},
    {.flag = "listen", .env = "KOWLOON_LISTEN", .type = SVC_OPT_STRING,
     .def = "127.0.0.1:8081", .help = "HOST:PORT of the node API"},
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
     .help = "shared secret between gateway and nodes (required)"},
    {.flag = "plugin", .env = "KOWLOON_PLUGIN", .type = SVC_OPT_STRING,
     .help = "CUDA plugin (default <dir of executable>/../lib/kowloon-cuda.so)"},
    {.flag = "heartbeat-s", .env = "KOWLOON_HEARTBEAT_S", .type = SVC_OPT_INT, .def = "2",
     .min = 1, .max = 60, .help = "most seconds between heartbeats"},
    {.flag = "threads", .env = "KOWLOON_THREADS", .type = SVC_OPT_INT, .def = "0", .min = 0,
     .max = 4096, .help = "CPU kernel threads per run, 0 = all cores"},
    {.flag = "drain-grace-s", .env = "KOWLOON_DRAIN_GRACE_S", .type = SVC_OPT_INT,
     .def = "30", .min = 0, .max = 86400,
     .help = "on SIGTERM, how long running runs may take to finish"},
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
    snprintf(url, ulen, "http://%s:%d", host, port);
}

/* Waits for the runs that were in flight to finish and be collected, up to
 * grace_s; a second signal cuts it short. Then cancels what is left.
 * Returns how many kernels are still running despite being cancelled. */
static int cn__drain(cn_runs *runs, long grace_s)
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
    int stuck = left > 0 ? cn_runs_cancel_all(runs, CN_CANCEL_WAIT_MS) : 0;
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
    int sig, e, stuck = 0, rc = 1;

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
    const char *token = cn__opt("cluster-token");
    if (!token || !token[0]) {
        svc_error("--cluster-token (KOWLOON_CLUSTER_TOKEN) is required");
        return 2;
    }
    if (svc_client_global_init() < 0) {
        svc_error("HTTP client initialisation failed");
        return 1;
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

    /* Inputs by reference come from, and pushed outputs go to, the gateway
     * this node registers with. */
    if ((e = cn_blobcache_create((uint64_t)cn__num("input-cache-mb") << 20, &cache)) < 0) {
        svc_error("cannot create the input cache: %s", strerror(-e));
        goto cleanup;
    }
    cn_blobio_gateway gw_io = {.url = cn__opt("gateway"), .token = token};
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
    dist.token = token;
    dist.timeout_ms = (int)cn__num("dist-timeout-s") * 1000;
    cn_runs_opts ro = {.slots = (int)cn__num("slots"), .threads = (int)cn__num("threads"),
                       .backend = &backend, .blobio = &blobio, .cache = cache,
                       .metrics = node.metrics, .dist = &dist};
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
    node.url = cn__opt("advertise") && cn__opt("advertise")[0] ? cn__opt("advertise") : url;
    if (cn__opt("dist-host") && cn__opt("dist-host")[0])
        snprintf(dist.host, sizeof dist.host, "%s", cn__opt("dist-host"));
    else
        cn_rdv_host_of(node.url, dist.host, sizeof dist.host);
    if (cn_metrics_start(&node, cn__opt("nvml")) < 0) {
        svc_error("cannot start the node's metrics: out of memory");
        goto cleanup;
    }

    svc_server_opts so = {.listen = listen, .routes = cn_api_routes,
                          .max_body = (size_t)cn__num("max-body-mb") << 20,
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
    svc_info("signal received signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    __atomic_store_n(&node.draining, 1, __ATOMIC_RELEASE);
    cn_lease_drain(lease);      /* no new runs; finished ones are still reported */
    stuck = cn__drain(runs, cn__num("drain-grace-s"));
    rc = 0;
cleanup:
    cn_lease_stop_polls(lease);
    cn_register_stop(reg);      /* deregisters while the API still answers; the
                                   gateway then ends the lease poll at once */
    cn_lease_stop(lease);
    cn_runs_shutdown(runs);     /* ends long polls so the server can stop */
    svc_server_stop(server);
    cn_register_free(reg);      /* after the server: GET /readyz reads it */
    /* A kernel that ignores its cancel flag would block the join for ever,
     * and the plugin must stay loaded under it: leave both to the exit. */
    if (!stuck) {
        cn_runs_destroy(runs);
        cn_blobcache_destroy(cache);
        cn_blobio_share_close(&blobio);
        cn_backend_close(&backend);
        cn_metrics_stop(&node);
        svc_metrics_free(node.metrics);
    }
    if (rc == 0)
        svc_info("stopped");
    return rc;
}
