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
#include "cn_config.h"
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

/* The interface the other nodes reach this one on (dist->host), found
 * once: gang parts' Gloo and NCCL are told it (compute/task), and so is
 * NCCL of this node's own multi-node runs (nccl), which left to itself may
 * pick any (a container bridge): set before the first NCCL call, and only
 * when the operator has not. */
static void cn__dist_interface(cn_dist_cfg *dist, int nccl)
{
    char v[80];
    int e = cn_netif_of(dist->host, dist->ifname, sizeof dist->ifname);
    if (e < 0) {
        dist->ifname[0] = '\0';
        svc_warn("dist interface: no interface of this host has the address of %s (%s); NCCL and "
                 "Gloo pick their own unless NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME are set",
                 dist->host, strerror(-e));
    }
    if (!nccl)
        return;
    const char *set = getenv("NCCL_SOCKET_IFNAME");
    if (set) {
        svc_info("nccl interface NCCL_SOCKET_IFNAME=%s (from the environment)", set);
        return;
    }
    if (!dist->ifname[0])
        return;
    snprintf(v, sizeof v, "=%s", dist->ifname); /* "=": this interface exactly, not a prefix */
    if (setenv("NCCL_SOCKET_IFNAME", v, 0) == 0)
        svc_info("nccl interface NCCL_SOCKET_IFNAME=%s (the interface of %s)", v, dist->host);
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

/* Everything the node starts, and stops in reverse order. Static: the
 * threads it starts read parts of it until the process ends. */
typedef struct cn_daemon {
    cn_config cfg;
    char token[512];            /* the cluster token, in this process' memory only */
    char name[320], url[320];   /* the default name and advertised URL */
    char exe_dir[1024], plugin[1200], state_dir[1100];
    cn_backend backend;
    cn_node node;
    cn_runs *runs;
    cn_blobcache *cache;
    cn_blobio_stats blob_stats;
    cn_blobio blobio;
    cn_blobio_gateway gw_io;
    cn_dist_cfg dist;
    cn_cred *cred;
    svc_server *server;
    cn_register *reg;
    cn_lease *lease;
    cn_task_cfg tasks;
    int tasks_open;
    cn_logship_http ship_http;
    cn_logship_sink ship_sink;
    cn_logship *ship;
} cn_daemon;

/* The cluster token from --cluster-token or --cluster-token-file, kept from
 * here on in this process's memory only: nothing it starts inherits it
 * through its environment, and the initial environment block, which
 * /proc/<pid>/environ shows to any process of this user, no longer holds
 * it either. 0, or -1 after logging why. */
static int cn__token(cn_daemon *d)
{
    char err[512];
    const char *token = d->cfg.cluster_token, *file = d->cfg.cluster_token_file;

    if ((!token || !token[0]) && file && file[0]) {
        if (svc_secret_read(file, d->token, sizeof d->token, err, sizeof err) != 0) {
            svc_error("--cluster-token-file: %s", err);
            return -1;
        }
        token = d->token;
    }
    if (!token || !token[0]) {
        svc_error("--cluster-token (KOWLOON_CLUSTER_TOKEN) or --cluster-token-file is required");
        return -1;
    }
    if (token != d->token)
        snprintf(d->token, sizeof d->token, "%s", token);
    d->cfg.cluster_token = NULL;
    char *in_env = getenv("KOWLOON_CLUSTER_TOKEN");
    if (in_env)
        memset(in_env, 0, strlen(in_env));
    unsetenv("KOWLOON_CLUSTER_TOKEN");
    return 0;
}

/* Options, logging, --slurm, the token, the HTTP client and TLS, signals:
 * what must hold before anything starts. 0, or the exit code (after
 * logging why): 0 for --help, 2 for a bad option, 1 otherwise. */
static int cn__configure(cn_daemon *d, int argc, char **argv, int *exit_code)
{
    char err[512];
    int prc = cn_config_load(&d->cfg, argc, argv, err, sizeof err), e;

    *exit_code = 2;
    if (prc == 1) {
        printf("usage: kowloon-compute [flags]\n");
        cn_config_usage(stdout);
        return *exit_code = 0, -1;
    }
    if (prc < 0) {
        fprintf(stderr, "kowloon-compute: %s\n", err);
        cn_config_usage(stderr);
        return -1;
    }
    int level = svc_log_level_parse(d->cfg.log_level);
    if (level < 0) {
        fprintf(stderr, "kowloon-compute: --log-level must be debug, info, warn or error\n");
        return -1;
    }
    svc_log_init("compute", level);
    static cn_slurm slurm;
    if (d->cfg.slurm && cn_config_slurm(&d->cfg, &slurm, err, sizeof err) < 0) {
        svc_error("--slurm: %s", err);
        return -1;
    }
    if (cn__token(d) < 0)
        return -1;
    if (svc_client_global_init() < 0) {
        svc_error("HTTP client initialisation failed");
        return *exit_code = 1, -1;
    }
    svc_client_set_ca_file(d->cfg.tls_ca);
    if (((d->cfg.tls_cert && *d->cfg.tls_cert) || (d->cfg.tls_key && *d->cfg.tls_key)) &&
        !(cn_tls = svc_tls_new(d->cfg.tls_cert, d->cfg.tls_key, err, sizeof err))) {
        svc_error("--tls-cert/--tls-key: %s", err);
        return -1;
    }
    if ((e = cn__signals_install()) < 0) {
        svc_error("cannot install signal handlers: %s", strerror(-e));
        return *exit_code = 1, -1;
    }
    return 0;
}

/* The backend (CUDA plugin or CPU), the input cache, the data path and the
 * metrics registry. 0, or the exit code (1, or 2 for a bad option). */
static int cn__start_backend(cn_daemon *d)
{
    char err[512];
    int e;

    if (d->cfg.plugin && d->cfg.plugin[0])
        snprintf(d->plugin, sizeof d->plugin, "%s", d->cfg.plugin);
    else if (svc_exe_dir(d->exe_dir, sizeof d->exe_dir) == 0)
        snprintf(d->plugin, sizeof d->plugin, "%s/../lib/kowloon-cuda.so", d->exe_dir);
    else
        snprintf(d->plugin, sizeof d->plugin, "lib/kowloon-cuda.so");
    int brc = cn_backend_open(&d->backend, d->cfg.backend, d->plugin);
    if (brc == -EINVAL) {
        svc_error("--backend: %s", d->backend.reason);
        return 2;
    }
    if (brc < 0) {
        svc_error("backend cuda requested but unavailable: %s", d->backend.reason);
        return 1;
    }
    svc_info("backend chosen backend=%s gpus=%d reason=\"%s\"", cn_backend_name(&d->backend),
             cn_backend_ngpus(&d->backend), d->backend.reason);
    if (d->backend.kind == CN_BACKEND_CUDA)
        svc_info("backend info=\"%s\"", cn_backend_info(&d->backend));

    /* Inputs by reference come from, and pushed outputs go to, the gateway
     * this node registers with. */
    if ((e = cn_blobcache_create((uint64_t)d->cfg.input_cache_mb << 20, &d->cache)) < 0) {
        svc_error("cannot create the input cache: %s", strerror(-e));
        return 1;
    }
    d->gw_io.url = d->cfg.gateway;
    cn_blobio_gateway_init(&d->blobio, &d->gw_io);
    d->blobio.stats = &d->blob_stats;
    const char *bdir = d->cfg.blob_dir;
    d->node.share_mode = !bdir || !bdir[0] || strcmp(bdir, "auto") == 0 ? CN_SHARE_AUTO
                         : strcmp(bdir, "none") == 0                     ? CN_SHARE_NONE
                                                                         : CN_SHARE_PATH;
    /* the gateway creates the store; a node only uses one that exists */
    if (d->node.share_mode == CN_SHARE_PATH &&
        cn_blobio_share_path(&d->blobio, bdir, err, sizeof err) < 0) {
        svc_error("--blob-dir: %s", err);
        return 2;
    }
    if (!(d->node.metrics = svc_metrics_new()) || svc_metrics_add_process(d->node.metrics) != 0) {
        svc_error("cannot create the metrics registry: out of memory");
        return 1;
    }
    d->node.metrics_public = d->cfg.metrics_public;
    if (d->backend.kind == CN_BACKEND_CUDA && d->backend.plugin.host_register)
        cn_blobio_set_pinning(d->backend.plugin.host_register, d->backend.plugin.host_unregister);
    return 0;
}

/* The run manager, and the node's identity: its name, its credential
 * (under that name), its advertised URL and the host multi-node runs meet
 * it on. 0 or 1. */
static int cn__start_runs(cn_daemon *d)
{
    char err[512];
    cn_node *node = &d->node;

    /* the host is filled below, once the advertised URL is known, before
     * any run can arrive */
    d->dist.gateway = d->cfg.gateway;
    d->dist.timeout_ms = (int)d->cfg.dist_timeout_s * 1000;
    cn_runs_opts ro = {.slots = (int)d->cfg.slots, .threads = (int)d->cfg.threads,
                       .backend = &d->backend, .blobio = &d->blobio, .cache = d->cache,
                       .metrics = node->metrics, .dist = &d->dist, .tasks = &d->tasks,
                       .on_device_lost = cn__on_device_lost, .device_ctx = node};
    int e = cn_runs_create(&ro, &d->runs);
    if (e < 0) {
        svc_error("cannot start the run manager: %s", strerror(-e));
        return 1;
    }
    node->token = d->token;
    node->slots = ro.slots;
    node->backend = &d->backend;
    node->runs = d->runs;
    node->cache = d->cache;
    node->blob_stats = &d->blob_stats;
    node->blobio = &d->blobio;
    /* With a fixed port the identity is known before the first request can
     * arrive; with port 0 nobody can call before the port is logged. */
    const char *lport = strrchr(d->cfg.listen, ':');
    cn__identity(d->cfg.listen, lport ? atoi(lport + 1) : 0, d->name, sizeof d->name, d->url,
                 sizeof d->url);
    node->name = d->cfg.name && d->cfg.name[0] ? d->cfg.name : d->name;
    const char *sdir = d->cfg.state_dir;
    if (sdir && strcmp(sdir, "none") == 0)
        sdir = "";
    else if ((!sdir || !sdir[0]) && svc_exe_dir(d->exe_dir, sizeof d->exe_dir) == 0) {
        snprintf(d->state_dir, sizeof d->state_dir, "%s/../var/node", d->exe_dir);
        sdir = d->state_dir;
    }
    /* Every call after registration carries the node's own credential. */
    if (cn_cred_open(sdir, node->name, &d->cred, err, sizeof err) < 0) {
        svc_error("cannot keep the node credential: out of memory");
        return 1;
    }
    if (err[0])
        svc_warn("%s", err);
    node->cred = d->cred;
    d->gw_io.cred = d->cred;
    d->dist.cred = d->cred;
    node->url = d->cfg.advertise && d->cfg.advertise[0] ? d->cfg.advertise : d->url;
    if (d->cfg.dist_host && d->cfg.dist_host[0])
        snprintf(d->dist.host, sizeof d->dist.host, "%s", d->cfg.dist_host);
    else
        cn_rdv_host_of(node->url, d->dist.host, sizeof d->dist.host);
    cn__dist_interface(&d->dist, d->backend.kind == CN_BACKEND_CUDA);
    if (cn_metrics_start(node, d->cfg.nvml) < 0) {
        svc_error("cannot start the node's metrics: out of memory");
        return 1;
    }
    return 0;
}

/* The node API. 0 or 1. */
static int cn__start_server(cn_daemon *d)
{
    char err[512];
    const char *listen = d->cfg.listen, *lport = strrchr(listen, ':');
    svc_server_opts so = {.listen = listen, .routes = cn_api_routes,
                          .max_body = (size_t)d->cfg.max_body_mb << 20,
                          /* runs carry their inputs inline: a JSON body may
                           * take the whole limit (depth and values are held) */
                          .max_json_body = (size_t)d->cfg.max_body_mb << 20,
                          .tls = cn_tls,
                          /* long polls hold a request for up to 60 s */
                          .conn_timeout_s = 120, .max_header = 16 << 10,
                          .authorize = cn_api_authorize, .app = &d->node,
                          .metrics = d->node.metrics};
    if (!(d->server = svc_server_start(&so, err, sizeof err))) {
        svc_error("%s", err);
        return 1;
    }
    if (!lport || atoi(lport + 1) == 0)
        cn__identity(listen, svc_server_port(d->server), d->name, sizeof d->name, d->url,
                     sizeof d->url);
    svc_info("listening listen=%s port=%d name=%s url=%s slots=%d", listen,
             svc_server_port(d->server), d->node.name, d->node.url, d->node.slots);
    return 0;
}

/* Tasks, once the node's name is final: it labels the containers, and the
 * containers a killed process of this name left are removed now. Then the
 * live log shipper. 0, or the exit code (1, or 2 for a bad option). */
static int cn__start_tasks(cn_daemon *d)
{
    char err[512];
    const cn_config *c = &d->cfg;
    cn_task_opts to = {
        .engine = c->task_engine, .engine_cmd = c->task_engine_cmd,
        .containers_conf = c->task_containers_conf, .node_name = d->node.name,
        .gateway = c->gateway, .node_url = d->node.url, .scratch = c->task_scratch,
        .images = c->task_images, .deny = c->task_deny, .firewall = c->task_firewall,
        .master_ports = c->task_master_ports,
        .uid = c->task_uid, .grace_s = c->task_grace_s, .memory_mb = c->task_memory_mb,
        .pids = c->task_pids, .output_mb = c->task_output_mb, .log_mb = c->task_log_mb,
        .files_mb = c->task_blob_cache_mb, .images_refresh_s = c->task_images_refresh_s};
    if (cn_task_cfg_open(&d->tasks, &to, err, sizeof err) < 0) {
        svc_error("%s", err);
        return 2;
    }
    d->tasks_open = 1;
    d->node.tasks = &d->tasks;
    d->ship_http = (cn_logship_http){.gateway = c->gateway, .cred = d->node.cred,
                                     .node_id = cn__node_id, .node_cls = &d->node};
    cn_logship_http_init(&d->ship_sink, &d->ship_http);
    int e;
    if (d->tasks.engine.kind != CN_ENGINE_NONE &&
        (e = cn_logship_start(&d->ship_sink, NULL, &d->ship)) < 0) {
        svc_error("cannot start the log shipper: %s", strerror(-e));
        return 1;
    }
    d->tasks.ship = d->ship;
    return 0;
}

/* Registration, heartbeats and the lease threads. 0 or 1. */
static int cn__start_cluster(cn_daemon *d)
{
    int e = cn_register_start(d->cfg.gateway, (int)d->cfg.heartbeat_s, &d->node, &d->reg);
    if (e < 0) {
        svc_error("cannot start the registration thread: %s", strerror(-e));
        return 1;
    }
    __atomic_store_n(&d->node.reg, d->reg, __ATOMIC_RELEASE);
    if ((e = cn_lease_start(d->cfg.gateway, &d->node, d->reg, &d->lease)) < 0) {
        svc_error("cannot start the lease threads: %s", strerror(-e));
        return 1;
    }
    return 0;
}

/* Serves until SIGTERM/SIGINT or the GPU is lost, then drains. Returns the
 * exit code; *stuck: how many kernels ignored their cancel flag. */
static int cn__serve(cn_daemon *d, int *stuck)
{
    int sig;

    while ((sig = cn__signal_wait(-1)) == 0)
        ;
    if (sig == CN_WAKE_DEVICE_LOST)
        svc_error("GPU lost: the node takes itself out of service, drains and exits %d for its supervisor "
                  "to restart it why=\"%s\"", CN_EXIT_DEVICE_LOST, cn_node_fault(&d->node));
    else
        svc_info("signal received signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    __atomic_store_n(&d->node.draining, 1, __ATOMIC_RELEASE);
    cn_lease_drain(d->lease);   /* no new runs; finished ones are still reported */
    /* The gateway learns why before the node leaves: GET /v1/nodes keeps
     * the fault after the node is down. */
    if (sig == CN_WAKE_DEVICE_LOST && !cn_register_beat_now(d->reg, CN_FAULT_BEAT_WAIT_MS))
        svc_warn("the gateway took no heartbeat with the fault in %d ms", CN_FAULT_BEAT_WAIT_MS);
    /* a task stops within its grace (SIGTERM, then SIGKILL): wait for that */
    int64_t cancel_ms = CN_CANCEL_WAIT_MS;
    if (d->tasks.engine.kind != CN_ENGINE_NONE && (d->cfg.task_grace_s + 3) * 1000 > cancel_ms)
        cancel_ms = (d->cfg.task_grace_s + 3) * 1000;
    *stuck = cn__drain(d->runs, d->cfg.drain_grace_s, cancel_ms);
    return sig == CN_WAKE_DEVICE_LOST ? CN_EXIT_DEVICE_LOST : 0;
}

/* Stops what started, in reverse; rc is the exit code to come. */
static void cn__stop(cn_daemon *d, int rc, int stuck)
{
    cn_lease_stop_polls(d->lease);
    cn_register_stop(d->reg);   /* deregisters while the API still answers; the
                                   gateway then ends the lease poll at once */
    cn_lease_stop(d->lease);
    cn_runs_shutdown(d->runs);  /* ends long polls so the server can stop */
    svc_server_stop(d->server);
    svc_tls_free(cn_tls);
    cn_register_free(d->reg);   /* after the server: GET /readyz reads it */
    /* A kernel that ignores its cancel flag would block the join for ever,
     * and the plugin must stay loaded under it: leave both to the exit. */
    if (stuck)
        return;
    cn_runs_destroy(d->runs);
    cn_logship_stop(d->ship);
    if (d->tasks_open)
        cn_task_cfg_close(&d->tasks);
    cn_blobcache_destroy(d->cache);
    cn_blobio_share_close(&d->blobio);
    /* With the device lost, every call into it fails: the exit frees it */
    if (rc != CN_EXIT_DEVICE_LOST)
        cn_backend_close(&d->backend);
    cn_metrics_stop(&d->node);
    svc_metrics_free(d->node.metrics);
    cn_cred_free(d->cred);
}

int main(int argc, char **argv)
{
    static cn_daemon d = {.backend = {.kind = CN_BACKEND_CPU}};
    int rc, stuck = 0;

    if (cn__configure(&d, argc, argv, &rc) < 0)
        return rc;
    if ((rc = cn__start_backend(&d)) == 0 && (rc = cn__start_runs(&d)) == 0 &&
        (rc = cn__start_server(&d)) == 0 && (rc = cn__start_tasks(&d)) == 0 &&
        (rc = cn__start_cluster(&d)) == 0)
        rc = cn__serve(&d, &stuck);
    cn__stop(&d, rc, stuck);
    if (rc == 0)
        svc_info("stopped");
    else if (rc == CN_EXIT_DEVICE_LOST)
        svc_info("stopped: exit %d, to be started again with a fresh device context", rc);
    return rc;
}
