/* task.c — one task part from start to end (task.h). The part's things on
 * the host live in one directory, <scratch>/<run id>[.p<rank>]:
 *   work/  -> /kowloon/work (rw, the task uid's; the tenant's files)
 *   out/   -> /kowloon/out  (rw, the task uid's; what it leaves: outputs)
 *   meta/  -> /kowloon/meta (rw, the task uid's; progress.jsonl)
 *   in/    -> /kowloon/in   (ro, root's: manifest.json, inline inputs and
 *                            .npy copies; each blob input is its own
 *                            read-only mount of the store's file on top)
 *   log                     (the node's: the output captured)
 * The engine runs attached, so its stdout and stderr are the program's. */
#include "task.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cn_proc.h"
#include "svc_log.h"
#include "svc_npy.h"
#include "svc_tensor.h"
#include "svc_util.h"
#include "task_argv.h"
#include "task_io.h"
#include "task_log.h"

#define CN_TASK_KILL_WAIT_MS 10000   /* after SIGKILL, before the engine CLI is killed */
#define CN_TASK_DRAIN_MS 500         /* pipes read after the engine exits */
#define CN_TASK_QUOTA_EVERY_MS 1000
#define CN_TASK_PROGRESS_EVERY_MS 200
#define CN_TASK_READ_MAX (1 << 20)   /* bytes read from the pipes per tick */
#define CN_TASK_RDV_KEY "task.master"

typedef struct part {
    const cn_task_run *run;
    cn_task_cfg *cfg;
    const cn_task_spec *spec;
    cn_task_result *res;
    char id[CN_RUN_ID_MAX + 16];
    char name[160];
    char dir[1200], work[1300], out[1300], meta[1300], in[1300], logpath[1300], progress[1400];
    cn_task_mount mounts[CN_TASK_MOUNTS_MAX];
    char (*paths)[4096];              /* mount sources and targets */
    int nmounts, npaths;
    unsigned groups[8];
    int ngroups;
    char pinned[SVC_TASK_INPUTS_MAX + SVC_TASK_FILES_MAX][CN_TASK_BLOB_ID];
    int npinned;
    cn_task_limits lim;
    cn_task_cg cg;
    cn_task_log log;
    int log_open;
    cn_logship_src *ship;
    char master_addr[256];
    int master_port;
    int gpus;
    int rm;                           /* the engine removes the container itself */
    int engine_left;                  /* ... unless its CLI was killed or failed */
} part;

static int cancelled(const part *p)
{
    return p->run->cancel && __atomic_load_n(p->run->cancel, __ATOMIC_ACQUIRE);
}

/* Fails the part with code and a message. Always CN_TASK_EFAILED. */
static int fail(part *p, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(part *p, const char *code, const char *fmt, ...)
{
    va_list ap;
    snprintf(p->res->code, sizeof p->res->code, "%s", code);
    va_start(ap, fmt);
    vsnprintf(p->res->message, sizeof p->res->message, fmt, ap);
    va_end(ap);
    p->res->rc = CN_TASK_EFAILED;
    return CN_TASK_EFAILED;
}

/* A kl_ code from a fetch into the part's result. */
static int fail_kl(part *p, int rc, const kl_err *err)
{
    if (rc == KL_ECANCELED) {
        p->res->rc = KL_ECANCELED;
        return KL_ECANCELED;
    }
    /* a blob of the wrong size is the request's fault; the rest may pass */
    return fail(p, rc == KL_EINVAL ? "invalid_argument" : "backend_error", "%s", err->message);
}

static const char *add_path(part *p, const char *fmt, const char *a, const char *b)
{
    char *dst = p->paths[p->npaths++];
    snprintf(dst, 4096, fmt, a, b);
    return dst;
}

static void add_mount(part *p, const char *src, const char *dst, int ro)
{
    p->mounts[p->nmounts++] = (cn_task_mount){.src = src, .dst = dst, .ro = ro};
}

/* Lets the task uid read the file at path through the mount: world
 * readable, its own, or through its group (--group-add). 0 or failure. */
static int readable(part *p, const char *path, const char *field)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fail(p, "backend_error", "%s: %s: %s", field, path, strerror(errno));
    if ((st.st_mode & S_IROTH) || (st.st_uid == p->cfg->uid && (st.st_mode & S_IRUSR)))
        return 0;
    if (!(st.st_mode & S_IRGRP))
        return fail(p, "engine_error", "%s: %s is not readable by the task's user", field, path);
    for (int i = 0; i < p->ngroups; i++)
        if (p->groups[i] == st.st_gid)
            return 0;
    if (p->ngroups == 8)
        return fail(p, "engine_error", "%s: the inputs belong to too many groups", field);
    p->groups[p->ngroups++] = st.st_gid;
    return 0;
}

/* The path of blob id on this host: the shared store's file, or the
 * node's cached file (fetched once, pinned for the part). */
static int blob_file(part *p, const char *id, uint64_t size, const char *field, char *path,
                     size_t len)
{
    kl_err err = {{0}, {0}};
    uint64_t have = 0;
    svc_bstore *store = cn_blobio_shared(p->run->blobio);
    if (store && svc_bstore_path(store, id, path, len, &have) == 0) {
        if (have != size)
            return fail(p, "invalid_argument", "%s: blob %s has %llu bytes, not %llu", field, id,
                        (unsigned long long)have, (unsigned long long)size);
        return 0;
    }
    if (!p->cfg->files)
        return fail(p, "backend_error", "%s: this node has no blob cache", field);
    int rc = cn_blobfile_get(p->cfg->files, p->run->blobio, id, size, field, p->run->cancel, path,
                             len, &err);
    if (rc != 0)
        return fail_kl(p, rc, &err);
    snprintf(p->pinned[p->npinned++], CN_TASK_BLOB_ID, "%s", id);
    return 0;
}

static int mkdirs(part *p)
{
    const cn_task_cfg *c = p->cfg;
    int rc;
    cn_task_tree_remove(p->dir);   /* a leftover of a killed node of this name */
    /* the operator's directory is made when missing, never changed */
    if (mkdir(c->scratch_root, 0711) != 0 && errno != EEXIST)
        return fail(p, "engine_error", "cannot make the scratch directory %s: %s",
                    c->scratch_root, strerror(errno));
    if ((rc = cn_task_mkdir(c->scratch, 0711, getuid(), getgid())) < 0 ||
        (rc = cn_task_mkdir(p->dir, 0711, getuid(), getgid())) < 0 ||
        (rc = cn_task_mkdir(p->work, 0700, c->uid, c->gid)) < 0 ||
        (rc = cn_task_mkdir(p->out, 0700, c->uid, c->gid)) < 0 ||
        (rc = cn_task_mkdir(p->meta, 0700, c->uid, c->gid)) < 0 ||
        (rc = cn_task_mkdir(p->in, 0755, getuid(), getgid())) < 0)
        return fail(p, "engine_error", "cannot make the scratch directory %s: %s", p->dir,
                    strerror(-rc));
    return 0;
}

static int place_files(part *p)
{
    char src[4096], field[300];
    int dirfd = open(p->work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (dirfd < 0)
        return fail(p, "engine_error", "%s: %s", p->work, strerror(errno));
    for (int i = 0; rc == 0 && i < p->spec->nfiles; i++) {
        const cn_task_file *f = &p->spec->files[i];
        int e;
        snprintf(field, sizeof field, "task.files.%s", f->path);
        if (f->blob[0]) {
            if ((rc = blob_file(p, f->blob, f->size, field, src, sizeof src)) != 0)
                break;
            /* the working directory is writable: the program gets a copy */
            e = cn_task_file_copy(dirfd, f->path, src, p->cfg->uid, p->cfg->gid);
        } else {
            e = cn_task_file_write(dirfd, f->path, f->data, f->size, p->cfg->uid, p->cfg->gid);
        }
        if (e < 0)
            rc = fail(p, "engine_error", "%s: cannot place it: %s", field, strerror(-e));
    }
    close(dirfd);
    return rc;
}

/* Inputs and the manifest. */
static int place_inputs(part *p)
{
    char src[4096], field[128], ipath[128], host[1500];
    json_t *man = json_object();
    int rc = 0;
    for (int i = 0; rc == 0 && i < p->spec->ninputs; i++) {
        const cn_task_input *in = &p->spec->inputs[i];
        snprintf(field, sizeof field, "task.inputs.%s", in->name);
        cn_task_input_path(in, ipath, sizeof ipath);
        snprintf(host, sizeof host, "%s/%s%s", p->in, in->name, in->npy ? ".npy" : "");
        int e = 0;
        if (in->blob[0] && (rc = blob_file(p, in->blob, in->size, field, src, sizeof src)) != 0)
            break;
        if (in->npy) {
            /* a header and the bytes cannot be one mount: a copy, asked for */
            e = cn_task_npy_write(host, svc_task_dtype_descr(in->dtype), in->ndim, in->shape,
                                  in->blob[0] ? src : NULL, in->data, (size_t)in->size);
        } else if (in->blob[0]) {
            /* the store's file itself, read-only, over an empty mount point */
            int fd = open(host, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            e = fd < 0 ? -errno : 0;
            if (fd >= 0)
                close(fd);
            if (e == 0 && (rc = readable(p, src, field)) != 0)
                break;
            add_mount(p, add_path(p, "%s%s", src, ""), add_path(p, "%s%s", ipath, ""), 1);
        } else {
            int dfd = open(p->in, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            e = dfd < 0 ? -errno
                        : cn_task_file_write(dfd, in->name, in->data, (size_t)in->size, getuid(),
                                             getgid());
            if (dfd >= 0)
                close(dfd);
        }
        if (e < 0) {
            rc = fail(p, "engine_error", "%s: cannot place it: %s", field, strerror(-e));
            break;
        }
        json_t *m = json_pack("{s:s, s:s, s:I}", "path", ipath, "format", in->npy ? "npy" : "raw",
                              "bytes", (json_int_t)in->size);
        if (m && in->dtype[0]) {
            json_object_set_new(m, "dtype", json_string(in->dtype));
            json_object_set_new(m, "shape", svc_shape_to_json(in->ndim, in->shape));
        }
        if (m && in->blob[0])
            json_object_set_new(m, "blob", json_string(in->blob));
        json_object_set_new(man, in->name, m);
    }
    if (rc == 0) {
        snprintf(host, sizeof host, "%s/manifest.json", p->in);
        if (!man || json_dump_file(man, host, JSON_INDENT(1) | JSON_SORT_KEYS) != 0)
            rc = fail(p, "engine_error", "cannot write %s", host);
        else
            chmod(host, 0644);
    }
    json_decref(man);
    return rc;
}

/* A gang: rank 0 reserves a port on its address and publishes both; the
 * others read them. */
static int rendezvous(part *p)
{
    const cn_task_run *run = p->run;
    const cn_run_req *req = run->req;
    kl_store *st = run->rdv;
    void *data = NULL;
    size_t len = 0;
    int rc;
    if (!st)
        return fail(p, "engine_error", "a gang part without a rendezvous");
    if (req->node_rank == 0) {
        /* the port is free now and the program binds it moments later: the
         * bet torchrun makes for its own store, made safer by a range no
         * outgoing connection takes (CN_TASK_MASTER_PORTS) */
        int port = cn_task_master_port(p->cfg);
        if (port < 0)
            return fail(p, "engine_error", "every port of --task-master-ports %d-%d is taken",
                        p->cfg->port_lo, p->cfg->port_hi);
        snprintf(p->master_addr, sizeof p->master_addr, "%s", run->dist_host);
        p->master_port = port;
        char *v = NULL;
        json_t *j = json_pack("{s:s, s:i}", "addr", p->master_addr, "port", p->master_port);
        v = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        rc = v ? st->set(st->ctx, CN_TASK_RDV_KEY, v, strlen(v)) : KL_ENOMEM;
        free(v);
    } else {
        rc = st->get(st->ctx, CN_TASK_RDV_KEY, &data, &len, run->rdv_timeout_ms);
        if (rc == 0) {
            json_t *j = json_loadb(data, len, 0, NULL);
            const char *addr = json_string_value(json_object_get(j, "addr"));
            json_int_t port = json_integer_value(json_object_get(j, "port"));
            if (addr && port > 0 && port < 65536) {
                snprintf(p->master_addr, sizeof p->master_addr, "%s", addr);
                p->master_port = (int)port;
            } else {
                rc = KL_EINVAL;
            }
            json_decref(j);
            free(data);
        }
    }
    if (rc == KL_ECANCELED) {
        p->res->rc = KL_ECANCELED;
        return KL_ECANCELED;
    }
    if (rc == KL_ETIMEDOUT)
        return fail(p, "peer_lost", "rank 0 of the gang did not publish MASTER_ADDR within %d ms",
                    run->rdv_timeout_ms);
    if (rc != 0)
        return fail(p, "peer_lost", "the gang's rendezvous failed (%d)", rc);
    return 0;
}

/* The engine's command line for the part. */
static int build_argv(part *p, cn_strv *argv)
{
    const cn_task_cfg *c = p->cfg;
    const cn_run_req *req = p->run->req;
    cn_strv env = {0};
    char why[512];
    int gang = req->node_rank >= 0 && req->nodes > 1;
    cn_task_env_in ei = {.job_id = req->job_id, .attempt = req->attempt,
                         .node_rank = req->node_rank > 0 ? req->node_rank : 0,
                         .nnodes = req->node_rank >= 0 ? req->nodes : 1, .gpus = p->gpus,
                         .master_addr = p->master_addr[0] ? p->master_addr : NULL,
                         .master_port = p->master_port, .ifname = p->run->dist_ifname, .spec = p->spec};
    if (cn_task_env_build(&ei, &env) < 0)
        return fail(p, "engine_error", "out of memory");
    char run_label[CN_RUN_ID_MAX + 16];
    snprintf(run_label, sizeof run_label, "%s", p->id);
    cn_task_argv_in in = {
        .kind = c->engine.kind, .engine = c->engine.cmd, .name = p->name, .run_label = run_label,
        .node_label = c->node_name, .gateway_label = c->gateway, .uid = (int)c->uid,
        .gid = (int)c->gid, .ngroups = p->ngroups, .memory_bytes = c->cg_v1 ? 0 : p->lim.memory_bytes,
        .cpus = p->lim.cpus, .pids = p->lim.pids,
        .cgroup_parent = p->cg.rel[0] ? p->cg.rel : NULL,
        .network = gang ? CN_TASK_NET_PEERS : p->spec->network == CN_TASK_NET_PEERS
                                                  ? CN_TASK_NET_NONE : p->spec->network,
        .rm = p->rm, .tmp_bytes = p->lim.memory_bytes, .nmounts = p->nmounts,
        .mounts = p->mounts, .workdir = p->spec->workdir, .ngpus = p->gpus,
        .gpus = p->run->gpu_ids, .nenv = env.n, .env = env.v, .image = p->spec->image,
        .argc = p->spec->argc, .argv = p->spec->argv};
    memcpy(in.groups, p->groups, sizeof in.groups);
    int rc = cn_task_argv_build(&in, argv, why, sizeof why);
    cn_strv_free(&env);
    return rc < 0 ? fail(p, "engine_error", "%s", why) : 0;
}

/* Reads what a pipe has (up to a bound a tick) into the log; closes it at
 * its end. */
static void drain(part *p, int *fd, int from_stderr)
{
    char buf[65536];
    size_t total = 0;
    while (*fd >= 0 && total < CN_TASK_READ_MAX) {
        ssize_t r = read(*fd, buf, sizeof buf);
        if (r > 0) {
            int first = p->log.size == 0;
            cn_task_log_write(&p->log, from_stderr, buf, (size_t)r);
            if (first && p->ship)
                cn_logship_kick(p->cfg->ship);   /* the first line goes at once */
            total += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EINTR))
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        close(*fd);
        *fd = -1;
    }
}

static void progress(part *p, cn_task_progress *pr)
{
    json_t *latest = NULL;
    if (cn_task_progress_poll(pr, p->progress, &latest) && latest && p->run->on_progress)
        p->run->on_progress(p->run->cls, json_incref(latest));
    json_decref(latest);
}

/* How far stopping a part has gone: stage 0 running, 1 SIGTERM sent (or
 * tried: kill_ok 0 when the container did not exist yet), 2 SIGKILL sent,
 * 3 the engine's CLI killed; stage_at when the stage began (monotonic ms). */
typedef struct stopping {
    int stage, kill_ok;
    int64_t stage_at;
} stopping;

/* Waits up to poll_ms for output on the pipes still open; once both have
 * closed, sleeps instead (a few ms at first: the engine exits next, usually
 * at once). *closed_at: when they were first seen closed. */
static void supervise_wait(const part *p, int ofd, int efd, int64_t *closed_at)
{
    struct pollfd pf[2];
    int n = 0;
    if (ofd >= 0)
        pf[n++] = (struct pollfd){.fd = ofd, .events = POLLIN};
    if (efd >= 0)
        pf[n++] = (struct pollfd){.fd = efd, .events = POLLIN};
    if (n > 0) {
        poll(pf, (nfds_t)n, p->cfg->poll_ms);
        return;
    }
    if (!*closed_at)
        *closed_at = svc_now_mono_ms();
    svc_sleep_ms(svc_now_mono_ms() - *closed_at < 200 ? 5 : p->cfg->poll_ms);
}

/* One look, at now, at whether the running engine (pid) must stop: its
 * output quota (looked at every CN_TASK_QUOTA_EVERY_MS, *next_quota) or a
 * cancel sets *why; then SIGTERM, SIGKILL after grace_s, and the engine's
 * CLI killed when even that did not end it, each step when due. */
static void supervise_stop(part *p, pid_t pid, int64_t now, int64_t *next_quota, stopping *st,
                           int *why)
{
    const cn_task_cfg *c = p->cfg;
    if (st->stage == 0 && now >= *next_quota) {
        *next_quota = now + CN_TASK_QUOTA_EVERY_MS;
        if (cn_task_outputs_scan(p->out, p->lim.output_bytes, NULL, NULL, NULL, NULL) ==
            CN_TASK_EQUOTA)
            *why = CN_TASK_STOP_QUOTA;
    }
    if (st->stage == 0 && *why == CN_TASK_STOP_NONE && cancelled(p))
        *why = CN_TASK_STOP_CANCEL;
    if (st->stage == 0 && *why != CN_TASK_STOP_NONE) {
        st->stage = 1;
        st->stage_at = now;
        st->kill_ok = cn_engine_kill(&c->engine, p->name, "TERM") == 0;
        cn_task_log_note(&p->log, "%s: SIGTERM sent; SIGKILL in %d s",
                         *why == CN_TASK_STOP_QUOTA ? "output quota exceeded" : "stopping",
                         c->grace_s);
    } else if (st->stage == 1 && !st->kill_ok && now - st->stage_at < (int64_t)c->grace_s * 1000) {
        /* asked to stop before the container existed: again */
        st->kill_ok = cn_engine_kill(&c->engine, p->name, "TERM") == 0;
    } else if (st->stage == 1 && now - st->stage_at >= (int64_t)c->grace_s * 1000) {
        st->stage = 2;
        st->stage_at = now;
        cn_engine_kill(&c->engine, p->name, "KILL");
        cn_task_log_note(&p->log, "the program did not stop within %d s of SIGTERM: "
                                  "SIGKILL sent", c->grace_s);
    } else if (st->stage == 2 && now - st->stage_at >= CN_TASK_KILL_WAIT_MS) {
        st->stage = 3;
        kill(pid, SIGKILL);   /* the engine's CLI itself is stuck */
        p->engine_left = 1;
    }
}

/* Starts the engine and follows the part until it ends. Returns 0 with
 * *status (the engine's exit status) and *why (STOP_*), or a failure. */
static int supervise(part *p, cn_strv *argv, int *status, int *why)
{
    const cn_task_cfg *c = p->cfg;
    pid_t pid;
    int ofd = -1, efd = -1, wstatus = 0, reaped = 0;
    stopping st = {0};
    cn_task_progress pr;
    memset(&pr, 0, sizeof pr);
    *why = CN_TASK_STOP_NONE;
    int rc = cn_proc_spawn(argv->v, c->engine.envp, p->dir, &pid, &ofd, &efd);
    if (rc < 0)
        return fail(p, "engine_error", "cannot start %s: %s", c->engine.cmd, strerror(-rc));
    int64_t now = svc_now_mono_ms(), reaped_at = 0, closed_at = 0;
    int64_t next_quota = now + CN_TASK_QUOTA_EVERY_MS, next_progress = now;
    for (;;) {
        supervise_wait(p, ofd, efd, &closed_at);
        drain(p, &ofd, 0);
        drain(p, &efd, 1);
        now = svc_now_mono_ms();
        if (!reaped && waitpid(pid, &wstatus, WNOHANG) == pid) {
            reaped = 1;
            reaped_at = now;
        }
        /* the engine is gone; what it handed on may still hold the pipes
         * open a moment (its monitor process) */
        if (reaped && ((ofd < 0 && efd < 0) || now - reaped_at >= CN_TASK_DRAIN_MS))
            break;
        if (now >= next_progress) {
            progress(p, &pr);
            next_progress = now + CN_TASK_PROGRESS_EVERY_MS;
        }
        if (reaped)
            continue;
        supervise_stop(p, pid, now, &next_quota, &st, why);
    }
    if (ofd >= 0)
        close(ofd);
    if (efd >= 0)
        close(efd);
    progress(p, &pr);
    if (pr.bad > 0)
        cn_task_log_note(&p->log, "%llu progress line(s) were not JSON objects and were skipped",
                         (unsigned long long)pr.bad);
    *status = cn_proc_status(wstatus);
    return 0;
}

static void unmap_all(void **maps, const size_t *sizes, int n)
{
    for (int i = 0; i < n; i++)
        if (maps[i] && sizes[i])
            munmap(maps[i], sizes[i]);
}

/* {"dtype", "shape"} of an .npy output whose header parses, else NULL. */
static json_t *npy_info(const char *name, const void *data, size_t n)
{
    size_t len = strlen(name), hl;
    svc_dtype dt;
    int ndim;
    int64_t shape[8];
    if (len < 4 || strcmp(name + len - 4, ".npy") != 0 ||
        svc_npy_parse_header(data, n < 65536 ? n : 65536, &dt, &ndim, shape, &hl) != 0)
        return NULL;
    return json_pack("{s:s, s:o}", "dtype", svc_dtype_name(dt), "shape",
                     svc_shape_to_json(ndim, shape));
}

/* Pushes what out/ holds and fills res->outputs. */
static int collect_outputs(part *p)
{
    cn_task_outfile *files = NULL;
    int n = 0, skipped = 0, rc = 0;
    int64_t total = 0;
    int s = cn_task_outputs_scan(p->out, p->lim.output_bytes, &files, &n, &total, &skipped);
    if (s == CN_TASK_EQUOTA)
        return fail(p, "output_quota", "the program left more than %lld bytes (or %d files) "
                                       "under /kowloon/out; no output is kept",
                    (long long)p->lim.output_bytes, CN_TASK_OUTPUTS_MAX);
    if (s < 0)
        return fail(p, "engine_error", "cannot read %s: %s", p->out, strerror(-s));
    if (skipped > 0)
        cn_task_log_note(&p->log, "%d entries under /kowloon/out are not regular files (symlinks, "
                                  "FIFOs...) and are not outputs", skipped);
    void **maps = calloc((size_t)n + 1, sizeof *maps);
    size_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
    const char **names = calloc((size_t)n + 1, sizeof *names);
    char (*ids)[CN_BLOB_ID_SIZE] = calloc((size_t)n + 1, sizeof *ids);
    if (!maps || !sizes || !names || !ids) {
        rc = fail(p, "engine_error", "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        char path[5500];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", p->out, files[i].name);
        names[i] = files[i].name;
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            if (fd >= 0)
                close(fd);
            rc = fail(p, "engine_error", "output %s changed while it was read", files[i].name);
            goto cleanup;
        }
        sizes[i] = (size_t)st.st_size;
        if (sizes[i] > 0)
            maps[i] = mmap(NULL, sizes[i], PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (maps[i] == MAP_FAILED) {
            maps[i] = NULL;
            rc = fail(p, "engine_error", "cannot map output %s: %s", files[i].name,
                      strerror(errno));
            goto cleanup;
        }
    }
    kl_err err = {{0}, {0}};
    int prc = cn_blobio_push_buffers(p->run->blobio, p->run->req->job_id, p->run->req->attempt, n,
                                     names, (const void *const *)maps, sizes,
                                     ids, p->run->cancel, &err);
    if (prc != 0) {
        rc = fail_kl(p, prc == KL_EINVAL ? KL_EBACKEND : prc, &err);
        goto cleanup;
    }
    json_t *outs = json_object();
    for (int i = 0; outs && i < n; i++) {
        json_t *o = json_pack("{s:s, s:I}", "blob", ids[i], "bytes", (json_int_t)sizes[i]);
        json_t *npy = o ? npy_info(names[i], maps[i], sizes[i]) : NULL;
        if (npy)
            json_object_set_new(o, "npy", npy);
        json_object_set_new(outs, names[i], o);
    }
    p->res->outputs = outs;
    svc_info("task outputs run=%s files=%d bytes=%lld", p->id, n, (long long)total);
cleanup:
    if (maps && sizes)
        unmap_all(maps, sizes, n);
    free(maps);
    free(sizes);
    free(names);
    free(ids);
    free(files);
    return rc;
}

/* The whole log as a blob, whatever became of the part. */
static void push_log(part *p)
{
    char id[1][CN_BLOB_ID_SIZE];
    struct stat st;
    kl_err err = {{0}, {0}};
    int fd = open(p->logpath, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return;
    }
    size_t n = (size_t)st.st_size;
    void *map = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (map == MAP_FAILED)
        return;
    const char *name = "log";
    const void *data = map;
    /* not the run's cancel flag: a cancelled part's log is kept too */
    int rc = cn_blobio_push_buffers(p->run->blobio, p->run->req->job_id, p->run->req->attempt, 1,
                                    &name, &data, &n, id, NULL, &err);
    if (map)
        munmap(map, n);
    if (rc != 0) {
        svc_warn("task log not stored run=%s: %s", p->id, err.message);
        return;
    }
    p->res->logs = json_pack("{s:s, s:I, s:I}", "blob", id[0], "bytes", (json_int_t)n, "dropped",
                             (json_int_t)p->log.dropped);
}

const char *cn_task_end_code(const cn_task_end *e)
{
    if (e->stop == CN_TASK_STOP_QUOTA)
        return "output_quota";
    if (e->stop == CN_TASK_STOP_CANCEL)
        return "cancelled";
    if (e->status == 0)
        return NULL;   /* an OOM kill of a helper it survived is its own affair */
    if (e->oom)
        return "oom";
    if (e->engine_error)
        return e->image_missing ? "image_not_found" : "engine_error";
    return "task_failed";
}

/* What the engine's exit says, once the part was not stopped: 0 when it
 * succeeded, else CN_TASK_EFAILED with the reason in res. */
static int classify(part *p, int status)
{
    const cn_task_cfg *c = p->cfg;
    char tail[700];
    cn_task_end e = {.status = status};
    p->res->exit_code = status;
    e.oom = cn_task_cg_oom(&p->cg);
    if (!e.oom && !c->cg_v1 && status == 137)
        e.oom = cn_engine_oom_killed(&c->engine, p->name) == 1;
    cn_task_log_tail(&p->log, 5, tail, sizeof tail);
    /* 125: the engine could not run it (or the program itself said 125) */
    e.engine_error = status == 125 && strstr(tail, "rror") != NULL;
    if (e.engine_error && !e.oom) {
        e.image_missing = cn_engine_image_exists(&c->engine, p->spec->image) == 0;
        p->res->exit_code = -1;
    }
    const char *code = cn_task_end_code(&e);
    if (!code)
        return 0;
    if (strcmp(code, "oom") == 0)
        return fail(p, code, "the program ran out of memory: its limit is %lld bytes (killed, "
                             "exit code %d)", (long long)p->lim.memory_bytes, status);
    if (strcmp(code, "image_not_found") == 0) {
        cn_engine_images_refresh((cn_engine *)&c->engine);
        return fail(p, code, "image %s is not on this node (the node never pulls images; the "
                             "operator loads them)", p->spec->image);
    }
    if (strcmp(code, "engine_error") == 0)
        return fail(p, code, "%s could not run the container: %s", cn_engine_name(&c->engine),
                    tail);
    return fail(p, code, "the program exited with code %d%s%s", status,
                tail[0] ? "; the end of its stderr:\n" : "", tail);
}

static void cleanup(part *p)
{
    if (!p->rm || p->engine_left)
        cn_engine_rm(&p->cfg->engine, p->name);
    /* the engine's monitor may still sit in them a moment: later, then */
    if (!cn_task_cg_destroy(&p->cg, "/sys/fs/cgroup"))
        cn_task_cfg_cg_release(p->cfg, p->cg.rel);
    else
        cn_task_cfg_cg_release(p->cfg, NULL);
    if (p->log_open)
        cn_task_log_close(&p->log);
    if (p->ship && p->cfg->ship)
        cn_logship_end(p->cfg->ship, p->ship, __atomic_load_n(&p->log.size, __ATOMIC_ACQUIRE));
    for (int i = 0; i < p->npinned; i++)
        cn_blobfile_unpin(p->cfg->files, p->pinned[i]);
    int rc = cn_task_tree_remove(p->dir);
    if (rc < 0)
        svc_warn("task scratch %s not removed: %s", p->dir, strerror(-rc));
    free(p->paths);
}

/* Sets up p for run (res, zeroed, is where its result goes): its id, its
 * container's name, the paths of its directory and its limits (the node's
 * defaults where the task gives none). */
static void part_init(part *p, const cn_task_run *run, cn_task_result *res)
{
    cn_task_cfg *c = run->cfg;
    const cn_run_req *req = run->req;
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    memset(p, 0, sizeof *p);
    p->run = run;
    p->cfg = c;
    p->spec = req->task;
    p->res = res;
    p->cg.efd = p->cg.ofd = -1;
    p->gpus = run->ngpu;
    if (req->node_rank >= 0)
        snprintf(p->id, sizeof p->id, "%s.p%d", req->run_id, req->node_rank);
    else
        snprintf(p->id, sizeof p->id, "%s", req->run_id);
    snprintf(p->name, sizeof p->name, "kowloon-%.15s-%.95s", c->tag, p->id);
    snprintf(p->dir, sizeof p->dir, "%.1023s/%.95s", c->scratch, p->id);
    snprintf(p->work, sizeof p->work, "%.1199s/work", p->dir);
    snprintf(p->out, sizeof p->out, "%.1199s/out", p->dir);
    snprintf(p->meta, sizeof p->meta, "%.1199s/meta", p->dir);
    snprintf(p->in, sizeof p->in, "%.1199s/in", p->dir);
    snprintf(p->logpath, sizeof p->logpath, "%.1199s/log", p->dir);
    snprintf(p->progress, sizeof p->progress, "%.1299s/progress.jsonl", p->meta);
    p->lim = p->spec->limits;
    if (!p->lim.memory_bytes)
        p->lim.memory_bytes = c->defaults.memory_bytes;
    if (!p->lim.pids)
        p->lim.pids = c->defaults.pids;
    if (!p->lim.output_bytes)
        p->lim.output_bytes = c->defaults.output_bytes;
    if (!p->lim.log_bytes)
        p->lim.log_bytes = c->defaults.log_bytes;
}

/* Opens the part's log and, when the node ships logs, adds it to the
 * shipper. 0, or a failure. */
static int part_log_open(part *p)
{
    cn_task_cfg *c = p->cfg;
    const cn_run_req *req = p->run->req;
    int rc = cn_task_log_open(&p->log, p->logpath, p->lim.log_bytes);
    if (rc < 0)
        return fail(p, "engine_error", "cannot create the log %s: %s", p->logpath, strerror(-rc));
    p->log_open = 1;
    if (c->ship) {
        /* the shipper reads through a descriptor of its own */
        int rfd = open(p->logpath, O_RDONLY | O_CLOEXEC);
        if (rfd >= 0) {
            p->ship = cn_logship_add(c->ship, req->job_id, req->attempt,
                                     req->node_rank > 0 ? req->node_rank : 0, rfd, &p->log.size);
            close(rfd);
        }
    }
    return 0;
}

/* Everything before the engine starts: the part's directory, log, files,
 * inputs and mounts, the gang's rendezvous, the memory cgroup (cgroup v1)
 * and the engine's command line (argv). 0, or nonzero when the part ends
 * here (failed, or cancelled: res->rc KL_ECANCELED). */
static int part_prepare(part *p, cn_strv *argv)
{
    cn_task_cfg *c = p->cfg;
    const cn_run_req *req = p->run->req;
    int rc;
    if (!(p->paths = calloc(CN_TASK_MOUNTS_MAX * 2, sizeof *p->paths)))
        return fail(p, "engine_error", "out of memory");
    __atomic_store_n(p->run->phase, 0, __ATOMIC_RELEASE);
    if ((rc = mkdirs(p)) != 0 || (rc = part_log_open(p)) != 0)
        return rc;
    if (place_files(p) != 0 || place_inputs(p) != 0)
        return -1;
    add_mount(p, p->in, "/kowloon/in", 1);
    add_mount(p, p->work, "/kowloon/work", 0);
    add_mount(p, p->out, "/kowloon/out", 0);
    add_mount(p, p->meta, "/kowloon/meta", 0);
    if (cancelled(p)) {
        p->res->rc = KL_ECANCELED;
        return -1;
    }
    if (req->node_rank >= 0 && req->nodes > 1 && rendezvous(p) != 0)
        return -1;
    if (c->cg_v1) {
        char base[64];
        snprintf(base, sizeof base, "kowloon/%s", c->tag);
        if ((rc = cn_task_cg_create(&p->cg, c->cg_root, base, p->id, p->lim.memory_bytes)) < 0)
            return fail(p, "engine_error", "cannot make the memory cgroup of the part: %s",
                        strerror(-rc));
    }
    /* The node tells an OOM kill itself on cgroup v1 (the eventfd): then
     * nothing of the exited container is needed and the engine removes it,
     * as a bare `run --rm` would. Elsewhere the node asks the engine
     * (inspect) and removes it afterwards. */
    p->rm = c->cg_v1;
    return build_argv(p, argv) != 0 ? -1 : 0;
}

/* Logs (debug) the engine's command line as an operator would type it
 * (it is never run by a shell). */
static void log_argv(const part *p, const cn_strv *argv)
{
    if (!svc_log_enabled(SVC_LOG_DEBUG))
        return;
    char line[8192];
    size_t n = 0;
    for (int i = 0; i < argv->n && n < sizeof line - 1; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s'%s'", i ? " " : "", argv->v[i]);
    svc_debug("task engine command run=%s: %s", p->id, line);
}

/* The part's end once the engine exited with status, stopped for why
 * (STOP_*): the failure or cancel in res, else (rank 0 or a single part)
 * its outputs. */
static void part_judge(part *p, int status, int why)
{
    if (why == CN_TASK_STOP_QUOTA) {
        fail(p, "output_quota", "the program wrote more than %lld bytes under /kowloon/out; it "
                                "was stopped and no output is kept",
             (long long)p->lim.output_bytes);
    } else if (why == CN_TASK_STOP_CANCEL) {
        p->res->rc = KL_ECANCELED;
    } else if (classify(p, status) == 0 && p->run->req->node_rank <= 0) {
        /* a gang's outputs are rank 0's, as a kernel's */
        collect_outputs(p);
    }
}

void cn_task_execute(const cn_task_run *run, cn_task_result *res)
{
    part pt, *p = &pt;
    cn_strv argv = {0};
    int status = 0, why = CN_TASK_STOP_NONE;

    part_init(p, run, res);
    int64_t t0 = svc_now_mono_ms(), t1 = t0, t2 = t0;
    if (part_prepare(p, &argv) != 0)
        goto done;
    t1 = svc_now_mono_ms();
    __atomic_store_n(run->phase, 1, __ATOMIC_RELEASE);
    svc_info("task started run=%s image=%s container=%s gpus=%d", p->id, p->spec->image, p->name,
             p->gpus);
    log_argv(p, &argv);
    if (supervise(p, &argv, &status, &why) != 0)
        goto done;
    if (status == 125)
        p->engine_left = 1;   /* the engine failed: whatever it made goes by hand */
    t2 = svc_now_mono_ms();
    __atomic_store_n(run->phase, 2, __ATOMIC_RELEASE);
    part_judge(p, status, why);
done:
    if (!t2 || t2 < t1)
        t2 = svc_now_mono_ms();
    if (p->log_open) {
        cn_task_log_close(&p->log);
        push_log(p);
    }
    cleanup(p);
    cn_strv_free(&argv);
    int64_t t3 = svc_now_mono_ms();
    res->phase_ms[0] = t1 - t0;
    res->phase_ms[1] = t2 - t1;
    res->phase_ms[2] = t3 - t2;
}

void cn_task_result_clear(cn_task_result *res)
{
    json_decref(res->outputs);
    json_decref(res->logs);
    res->outputs = res->logs = NULL;
}
