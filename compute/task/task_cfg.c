/* task_cfg.c — what every task of a node shares (task.h): the engine,
 * this node's tag, its scratch root, defaults and limits, the blob file
 * cache, the gang firewall; and the start-of-life sweep of what a killed
 * process of the same node left (containers by label, cgroups, scratch). */
#include "task.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_log.h"
#include "svc_util.h"
#include "task_io.h"

#define CN_TASK_CG_ROOT "/sys/fs/cgroup"

int cn_task_ports_parse(const char *s, int *lo, int *hi)
{
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s)
        return -1;
    if (*end == '-') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t)
            return -1;
    }
    if (*end || a < 1024 || b < a || b > 65535)
        return -1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

/* Whether nothing on this host is bound to TCP port (on any address). */
static int port_free(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

int cn_task_master_port(cn_task_cfg *cfg)
{
    unsigned n = (unsigned)(cfg->port_hi - cfg->port_lo + 1);
    for (unsigned i = 0; i < n; i++) {
        unsigned k = __atomic_fetch_add(&cfg->port_next, 1, __ATOMIC_RELAXED);
        int port = cfg->port_lo + (int)(k % n);
        if (port_free(port))
            return port;
    }
    return -1;
}

/* --task-master-ports into cfg, the picks starting at a random place; a
 * warning when the range shares ports with the kernel's ephemeral ones (an
 * outgoing connection could then hold a port between its pick and the
 * program's bind). 0, or -1 with err. */
static int ports_open(cn_task_cfg *cfg, const char *ports, char *err, size_t errlen)
{
    if (!ports)
        ports = CN_TASK_MASTER_PORTS;
    if (cn_task_ports_parse(ports, &cfg->port_lo, &cfg->port_hi) < 0) {
        snprintf(err, errlen, "--task-master-ports %s: LO-HI (or one port), 1024 <= LO <= HI "
                              "<= 65535", ports);
        return -1;
    }
    uint32_t start = 0;
    if (svc_random_bytes(&start, sizeof start) < 0)
        start = (uint32_t)getpid();
    cfg->port_next = start;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int elo, ehi;
    if (!f)
        return 0;
    if (fscanf(f, "%d %d", &elo, &ehi) == 2 && cfg->port_lo <= ehi && elo <= cfg->port_hi)
        svc_warn("tasks: --task-master-ports %d-%d overlaps the ephemeral ports %d-%d "
                 "(net.ipv4.ip_local_port_range): a gang's MASTER_PORT may be taken before "
                 "its program binds it", cfg->port_lo, cfg->port_hi, elo, ehi);
    fclose(f);
    return 0;
}

int cn_task_cfg_open(cn_task_cfg *cfg, const cn_task_opts *o, char *err, size_t errlen)
{
    char key[1200], dir[1100], why[512];
    memset(cfg, 0, sizeof *cfg);
    cfg->node_name = o->node_name;
    cfg->gateway = o->gateway;
    /* one name for this node's things on a host shared with other nodes
     * (and other clusters): its name and its gateway */
    snprintf(key, sizeof key, "%s\n%s", o->node_name, o->gateway);
    snprintf(cfg->tag, sizeof cfg->tag, "%08x", svc_fnv1a(key));
    cfg->uid = cfg->gid = (unsigned)o->uid;
    cfg->grace_s = (int)o->grace_s;
    cfg->poll_ms = 100;
    pthread_mutex_init(&cfg->cg_mu, NULL);
    cfg->images_refresh_ms = (o->images_refresh_s > 0 ? o->images_refresh_s : 60) * 1000;
    cfg->defaults = (cn_task_limits){.memory_bytes = (int64_t)o->memory_mb << 20,
                                     .pids = o->pids,
                                     .output_bytes = (int64_t)o->output_mb << 20,
                                     .log_bytes = (int64_t)o->log_mb << 20};
    snprintf(cfg->images, sizeof cfg->images, "%s", o->images ? o->images : "");
    cn_task_fw_init(&cfg->fw, cfg->tag, cfg->uid);
    cfg->firewall = !o->firewall || strcmp(o->firewall, "off") != 0;
    if (o->firewall && strcmp(o->firewall, "off") != 0 && strcmp(o->firewall, "iptables") != 0) {
        snprintf(err, errlen, "--task-firewall must be iptables or off");
        return -1;
    }
    if (ports_open(cfg, o->master_ports, err, errlen) < 0)
        return -1;
    if (cn_engine_open(&cfg->engine, o->engine, o->engine_cmd, o->containers_conf, err,
                       errlen) < 0)
        return -1;
    if (cfg->engine.kind == CN_ENGINE_NONE)
        return 0;

    const char *root = o->scratch && o->scratch[0] ? o->scratch : NULL;
    if (!root)
        snprintf(dir, sizeof dir, "%s/kowloon-tasks", getenv("TMPDIR") ? getenv("TMPDIR")
                                                                       : "/var/tmp");
    else
        snprintf(dir, sizeof dir, "%s", root);
    if (strpbrk(dir, ":,") || dir[0] != '/' || strlen(dir) > 1000) {
        snprintf(err, errlen, "--task-scratch %s: an absolute path of at most 1000 bytes without "
                              "':' or ',' (it is mounted into containers)", dir);
        return -1;
    }
    snprintf(cfg->scratch, sizeof cfg->scratch, "%.1000s/%.15s", dir, cfg->tag);
    /* what a killed process of this node left: containers, then cgroups
     * (empty once their containers are gone), then scratch */
    int orphans = cn_engine_remove_orphans(&cfg->engine, o->node_name, o->gateway);
    cfg->cg_v1 = strcmp(cfg->engine.cgroup_manager, "cgroupfs") == 0 &&
                 cn_task_cg_available(CN_TASK_CG_ROOT "/memory");
    snprintf(cfg->cg_root, sizeof cfg->cg_root, CN_TASK_CG_ROOT "/memory");
    char base[64];
    snprintf(base, sizeof base, "kowloon/%s", cfg->tag);
    if (cfg->cg_v1)
        cn_task_cg_sweep(CN_TASK_CG_ROOT, base);
    cn_task_tree_remove(cfg->scratch);
    int rc;
    /* made when the first part runs: a node that runs none leaves nothing */
    snprintf(cfg->scratch_root, sizeof cfg->scratch_root, "%s", dir);
    snprintf(key, sizeof key, "%s/blobs", cfg->scratch);
    if ((rc = cn_blobfile_open(key, (uint64_t)o->files_mb << 20, &cfg->files)) < 0) {
        snprintf(err, errlen, "the task blob cache %s: %s", key, strerror(-rc));
        return -1;
    }
    /* gang parts may not reach the gateway, nor this node's API */
    if (cfg->firewall) {
        if (cn_task_fw_add_url(&cfg->fw, o->gateway, why, sizeof why) < 0)
            svc_warn("task firewall: the gateway %s: %s", o->gateway, why);
        if (o->node_url && cn_task_fw_add_url(&cfg->fw, o->node_url, why, sizeof why) < 0)
            svc_warn("task firewall: the node's URL %s: %s", o->node_url, why);
        char list[2048];
        snprintf(list, sizeof list, "%s", o->deny ? o->deny : "");
        char *save = NULL;
        for (char *t = strtok_r(list, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
            if (cn_task_fw_add(&cfg->fw, t, why, sizeof why) < 0) {
                snprintf(err, errlen, "--task-deny: %s", why);
                return -1;
            }
    }
    svc_info("tasks: engine=%s scratch=%s uid=%u grace_s=%d oom=%s gang_network=%s "
             "master_ports=%d-%d orphans_removed=%d", cn_engine_name(&cfg->engine), cfg->scratch,
             cfg->uid, cfg->grace_s, cfg->cg_v1 ? "memory-cgroup-events" : "engine-inspect",
             cfg->firewall ? "host+iptables" : "host (unfiltered: --task-firewall off)",
             cfg->port_lo, cfg->port_hi, orphans > 0 ? orphans : 0);
    return 0;
}

void cn_task_cfg_cg_release(cn_task_cfg *cfg, const char *rel)
{
    pthread_mutex_lock(&cfg->cg_mu);
    /* those left earlier first: their monitor has long gone */
    for (int i = 0; i < cfg->ncg_busy;) {
        if (cn_task_cg_remove(CN_TASK_CG_ROOT, cfg->cg_busy[i]))
            memcpy(cfg->cg_busy[i], cfg->cg_busy[--cfg->ncg_busy], sizeof cfg->cg_busy[i]);
        else
            i++;
    }
    if (rel && rel[0] && !cn_task_cg_remove(CN_TASK_CG_ROOT, rel)) {
        if (cfg->ncg_busy == cfg->cg_busy_cap) {
            int cap = cfg->cg_busy_cap ? cfg->cg_busy_cap * 2 : 16;
            char (*b)[256] = realloc(cfg->cg_busy, (size_t)cap * sizeof *b);
            if (b) {
                cfg->cg_busy = b;
                cfg->cg_busy_cap = cap;
            }
        }
        if (cfg->ncg_busy < cfg->cg_busy_cap)
            snprintf(cfg->cg_busy[cfg->ncg_busy++], sizeof cfg->cg_busy[0], "%s", rel);
    }
    pthread_mutex_unlock(&cfg->cg_mu);
}

void cn_task_cfg_close(cn_task_cfg *cfg)
{
    /* the last parts' monitors exit within moments of their containers */
    for (int i = 0; i < 100; i++) {
        cn_task_cfg_cg_release(cfg, NULL);
        pthread_mutex_lock(&cfg->cg_mu);
        int left = cfg->ncg_busy;
        pthread_mutex_unlock(&cfg->cg_mu);
        if (!left)
            break;
        svc_sleep_ms(20);
    }
    free(cfg->cg_busy);
    cfg->cg_busy = NULL;
    pthread_mutex_destroy(&cfg->cg_mu);
    cn_task_fw_remove(&cfg->fw);
    pthread_mutex_destroy(&cfg->fw.mu);
    cn_blobfile_close(cfg->files);
    cfg->files = NULL;
    /* no run is left: this node's cgroups and scratch go (the parent
     * directories stay while another node on the host uses them) */
    if (cfg->cg_v1) {
        char base[64];
        snprintf(base, sizeof base, "kowloon/%s", cfg->tag);
        cn_task_cg_sweep(CN_TASK_CG_ROOT, base);
        cn_task_cg_unlink_top(CN_TASK_CG_ROOT, "kowloon");
    }
    if (cfg->scratch[0])
        cn_task_tree_remove(cfg->scratch);
    if (cfg->engine.images)
        cn_engine_close(&cfg->engine);
}

json_t *cn_task_cfg_describe(cn_task_cfg *cfg)
{
    json_t *d = cn_engine_describe(&cfg->engine);
    if (d && cfg->engine.kind != CN_ENGINE_NONE) {
        json_object_set_new(d, "gang_network", json_string(cfg->firewall ? "host+iptables"
                                                                         : "host"));
        if (cfg->images[0])
            json_object_set_new(d, "allowed", json_string(cfg->images));
    }
    return d;
}

unsigned cn_task_cfg_images_gen(cn_task_cfg *cfg)
{
    return cfg ? cn_engine_images_gen(&cfg->engine, cfg->images_refresh_ms) : 0;
}

/* 1 when image matches one of the comma-separated patterns (fnmatch), or
 * there are none. */
static int image_allowed(const char *patterns, const char *image)
{
    char list[1024];
    char *save = NULL;
    if (!patterns[0])
        return 1;
    snprintf(list, sizeof list, "%s", patterns);
    for (char *p = strtok_r(list, ", ", &save); p; p = strtok_r(NULL, ", ", &save))
        if (fnmatch(p, image, 0) == 0)
            return 1;
    return 0;
}

int cn_task_admit(cn_task_cfg *cfg, const cn_run_req *req, kl_err *err)
{
    if (!cfg || cfg->engine.kind == CN_ENGINE_NONE) {
        kl_err_set(err, "task", "this node runs no tasks: %s",
                   cfg ? cfg->engine.reason : "no engine");
        return -1;
    }
    if (!image_allowed(cfg->images, req->task->image)) {
        kl_err_set(err, "task.image", "this node runs only images matching %s", cfg->images);
        return -1;
    }
    if (req->node_rank >= 0 && req->nodes > 1 && cfg->firewall && cn_task_fw_ensure(&cfg->fw) < 0) {
        kl_err_set(err, "dist", "this node cannot keep a gang part off the cluster's services: "
                                "%s (--task-firewall off runs them unfiltered)", cfg->fw.why);
        return -1;
    }
    return 0;
}
