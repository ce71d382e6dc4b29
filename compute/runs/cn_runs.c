/* cn_runs.c — the run manager. One mutex guards every run's state; kernels run
 * outside it on the worker threads. A run's inputs are freed as soon as it
 * ends and its outputs are immutable from then on, so replies encode them
 * without the lock while a reference keeps the sweeper away. */
#include "cn_runs.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_log.h"
#include "svc_tensor.h"
#include "svc_util.h"

#define CN_BUCKETS 1024
#define CN_KEEP_DEFAULT_MS (15 * 60 * 1000)
/* A released run stays this long: the gateway records outcomes with an
 * asynchronous commit, and a PostgreSQL crash that loses one sends it back
 * to the node for the run once PostgreSQL has recovered. */
#define CN_RELEASE_GRACE_DEFAULT_MS (60 * 1000)
/* Draining waits for runs that ended this recently and were not collected
 * yet: the gateway's long poll is about to take them. Older ones it has
 * evidently given up on. */
#define CN_DRAIN_RECENT_MS 10000
/* Most ended runs one cn_runs_take_ended hands out. */
#define CN_TAKE_MAX 256

typedef enum { CN_QUEUED, CN_RUNNING, CN_SUCCEEDED, CN_FAILED, CN_CANCELLED } cn_state;

/* Who stopped a run decides how it ends: a shutdown is not the user's
 * cancel, so it ends as a retryable backend_error the gateway re-queues. */
typedef enum { CN_CANCEL_USER = 1, CN_CANCEL_SUPERSEDED = 2, CN_CANCEL_SHUTDOWN = 3 } cn_cancel_why;

/* Where a running run is: its inputs arrive, its kernel runs, its outputs
 * leave. Served in the run object, so that operators (and tests that stop
 * a node at a chosen moment) can see it. */
enum { CN_PHASE_INPUTS = 0, CN_PHASE_COMPUTE = 1, CN_PHASE_OUTPUTS = 2 };
static const char *const cn__phase_names[] = {"inputs", "compute", "outputs"};

/* Bucket bounds of run times, seconds: from 5 ms to an hour. */
static const double cn__run_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                        2.5,   5,    10,    30,   60,  300,  900, 3600};

static const char *const cn__state_names[] = {"queued", "running", "succeeded", "failed",
                                              "cancelled"};

typedef struct cn_run {
    char id[CN_RUN_ID_MAX];
    cn_run_req req;            /* owns the inputs until the run ends */
    const kl_kernel *kernel;
    cn_state state;
    int use_cuda;              /* planned at submit, corrected if the plugin says ENOTSUP */
    int gpu_ids[16];           /* rank r on gpu_ids[r] */
    int ngpu;
    volatile int cancel;       /* polled by the kernel via req.ka.args.cancel */
    int cancel_requested;      /* by whom: one of cn_cancel_why, 0 when not */
    int timed_out, timeout_logged;
    int collected;             /* a terminal answer went out */
    int released;              /* the gateway has recorded it: free it soon */
    int64_t released_mono;
    int watched;               /* draining waits for it */
    int lost_device;           /* the first run to see the device lost (KL_EDEVICE) */
    int64_t created_wall, started_wall, finished_wall;
    int64_t started_mono, deadline_mono, finished_mono;
    char err_code[32];
    char err_message[1024];    /* a task's says the end of its stderr */
    char err_field[64];
    kl_tensor outs[KL_MAX_IO]; /* owned; valid when state == CN_SUCCEEDED; with
                                  output_blobs only dtype and shape are left */
    char out_blobs[KL_MAX_IO][CN_BLOB_ID_SIZE]; /* pushed outputs' ids, or "" */
    kl_info info;              /* what the kernel said of the run; read once terminal */
    kl_progress_sink sink;     /* the kernel's progress reports (req.ka.args.progress) */
    struct cn_runs *mgr;       /* for the sink */
    kl_progress progress;      /* the latest report (mu) */
    int has_progress, progress_new; /* one came; one came since cn_runs_take_progress */
    int phase;                 /* CN_PHASE_*, while running; written by the worker */
    int64_t phase_ms[3];       /* inputs, compute, outputs: how long each took */
    int64_t cpu_ns;            /* CPU time of the kernel, all its threads (kl_cputime) */
    cn_rdv rdv;                /* a part of a multi-node job: its rendezvous */
    kl_dist dist;              /* ... and what the kernel is told (req.ka.args.dist) */
    const char *gpu_model;     /* the first GPU's name when it ran on CUDA; borrowed
                                  from the backend, which outlives every run */
    cn_task_result tres;       /* a task's end (req.task): set by the worker */
    json_t *tprogress;         /* a task's latest progress object (mu) */
    int refs;                  /* callers using it without the lock */
    struct cn_run *hnext;      /* hash chain */
    struct cn_run *prev, *next;/* every run, oldest first */
    struct cn_run *qnext;      /* queue */
    struct cn_run *enext;      /* ended, not yet taken for a report */
    int in_ended;              /* on that list */
} cn_run;

struct cn_runs {
    pthread_mutex_t mu;
    pthread_cond_t work;       /* a run was queued, or closing */
    pthread_cond_t done;       /* a run ended, or closing */
    pthread_cond_t tick;       /* the watchdog has something new to look at */
    int64_t watch_next;        /* monotonic ms the watchdog sleeps until: a
                                  change due later needs no wake (its walk
                                  is over every run kept, so waking it at
                                  each run start and release cost more than
                                  the runs of small jobs) */
    cn_run *buckets[CN_BUCKETS];
    cn_run *head, *tail;
    cn_run *qhead, *qtail;
    cn_run *ehead, *etail;     /* ended runs to report, oldest first */
    int active;                /* queued + running */
    uint64_t ended_total;      /* runs that have ended, ever */
    int running;
    int slots, threads;
    const cn_backend *backend;
    const cn_blobio *blobio;
    cn_blobcache *cache;
    const cn_dist_cfg *dist;
    cn_task_cfg *tasks;
    int64_t keep_ms, release_grace_ms;
    int draining, closing;
    int device_lost;           /* a run answered KL_EDEVICE: the GPU is gone */
    void (*on_device_lost)(void *ctx, const char *why);
    void *device_ctx;
    int progress_new;          /* a run has a report not taken yet */
    unsigned rr;               /* round robin over GPUs */
    pthread_t *workers;
    int nworkers;
    pthread_t watchdog;
    int watchdog_started;
    svc_metric *m_runs, *m_run_s;   /* NULL without cn_runs_opts.metrics */
};

static unsigned cn__hash(const char *s)
{
    return svc_fnv1a(s) % CN_BUCKETS;
}

static cn_run *cn__find(cn_runs *m, const char *id)
{
    for (cn_run *r = m->buckets[cn__hash(id)]; r; r = r->hnext)
        if (strcmp(r->id, id) == 0)
            return r;
    return NULL;
}

static void cn__link(cn_runs *m, cn_run *r)
{
    unsigned h = cn__hash(r->id);
    r->hnext = m->buckets[h];
    m->buckets[h] = r;
    r->prev = m->tail;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
}

static void cn__unlink(cn_runs *m, cn_run *r)
{
    cn_run **pp = &m->buckets[cn__hash(r->id)];
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;
    if (r->prev)
        r->prev->next = r->next;
    else
        m->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        m->tail = r->prev;
}

static void cn__ended_remove(cn_runs *m, cn_run *r)
{
    cn_run *prev = NULL;
    for (cn_run *x = m->ehead; x; prev = x, x = x->enext) {
        if (x != r)
            continue;
        if (prev)
            prev->enext = r->enext;
        else
            m->ehead = r->enext;
        if (m->etail == r)
            m->etail = prev;
        r->in_ended = 0;
        return;
    }
}

static void cn__queue_remove(cn_runs *m, cn_run *r)
{
    cn_run **pp = &m->qhead, *last = NULL;
    while (*pp && *pp != r) {
        last = *pp;
        pp = &(*pp)->qnext;
    }
    if (!*pp)
        return;
    *pp = r->qnext;
    if (m->qtail == r)
        m->qtail = last;
    r->qnext = NULL;
}

/* What a run is called in logs and metrics: its kernel, or "task". */
static const char *cn__what(const cn_run *r)
{
    return r->kernel ? r->kernel->name : "task";
}

static void cn__run_free(cn_run *r)
{
    if (!r)
        return;
    cn_task_result_clear(&r->tres);
    json_decref(r->tprogress);
    for (int i = 0; i < KL_MAX_IO; i++)
        kl_tensor_free(&r->outs[i]);
    cn_run_req_clear(&r->req);
    free(r);
}

static int cn__terminal(const cn_run *r)
{
    return r->state >= CN_SUCCEEDED;
}

/* Waits on cond until deadline_mono (ms); the conditions use CLOCK_MONOTONIC. */
static void cn__wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_mono)
{
    struct timespec ts = {.tv_sec = deadline_mono / 1000,
                          .tv_nsec = (long)(deadline_mono % 1000) * 1000000L};
    pthread_cond_timedwait(cond, mu, &ts);
}

static void cn__set_error(cn_run *r, const char *code, const char *field, const char *message)
{
    snprintf(r->err_code, sizeof r->err_code, "%s", code);
    snprintf(r->err_field, sizeof r->err_field, "%s", field ? field : "");
    snprintf(r->err_message, sizeof r->err_message, "%s", message);
}

/* A cancelled kernel's error: a timeout, the node's shutdown (retryable),
 * or a cancel (state cancelled), saying which. */
static void cn__cancel_error(cn_run *r, int was_running)
{
    if (r->timed_out) {
        char t[96];
        snprintf(t, sizeof t, "run exceeded timeout_s=%d", r->req.timeout_s);
        cn__set_error(r, "timeout", NULL, t);
    } else if (r->cancel_requested == CN_CANCEL_SHUTDOWN) {
        cn__set_error(r, "backend_error", NULL, "node shut down before the run finished");
    } else {
        r->state = CN_CANCELLED;
        cn__set_error(r, "cancelled", NULL,
                      r->cancel_requested == CN_CANCEL_SUPERSEDED ? "superseded by a newer attempt of the job"
                      : was_running                              ? "cancelled while running"
                                                                 : "cancelled before it started");
    }
}

/* A lost device's error: the first run to see it fails for good (its own
 * kernel most likely faulted, and would again elsewhere); any other was
 * only there, and is given back (retryable). */
static void cn__device_error(cn_run *r, const char *field, const char *msg)
{
    if (r->lost_device) {
        cn__set_error(r, "device_error", field, msg ? msg : "the GPU was lost in this run");
    } else {
        char t[256];
        snprintf(t, sizeof t, "this node's GPU was lost while the run used it: %.200s",
                 msg ? msg : "a sticky device error");
        cn__set_error(r, "backend_error", field, t);
    }
}

/* r failed with rc (its kernel's or task's code) and err: state failed
 * (or cancelled), the contract's error code for rc, its outputs freed. */
static void cn__fail(cn_run *r, int rc, const kl_err *err, int was_running)
{
    const char *msg = err && err->message[0] ? err->message : NULL;
    const char *field = err && err->field[0] ? err->field : NULL;
    for (int i = 0; i < KL_MAX_IO; i++)
        kl_tensor_free(&r->outs[i]);
    r->state = CN_FAILED;
    switch (rc) {
    case CN_TASK_EFAILED:
        cn__set_error(r, r->tres.code, NULL, r->tres.message);
        break;
    case KL_EINVAL:
        cn__set_error(r, "invalid_argument", field, msg ? msg : "invalid argument");
        break;
    case KL_ECANCELED:
        cn__cancel_error(r, was_running);
        break;
    case KL_EBACKEND:
        cn__set_error(r, "backend_error", field, msg ? msg : "backend failure");
        break;
    case KL_EDEVICE:
        cn__device_error(r, field, msg);
        break;
    case KL_ETIMEDOUT:
        /* the gateway requeues the whole job on this code */
        cn__set_error(r, "peer_lost", field,
                      msg ? msg : "a peer of the multi-node run is gone (rendezvous or "
                                  "collective timed out)");
        break;
    default:
        cn__set_error(r, "kernel_error", field, msg ? msg : "kernel failed");
        break;
    }
}

/* Ends r (lock held): records state and error, frees its inputs, wakes long
 * polls. rc is the kernel's result; err its detail. */
static void cn__finish(cn_runs *m, cn_run *r, int rc, const kl_err *err)
{
    int was_running = r->state == CN_RUNNING;

    r->finished_wall = svc_now_wall_ms();
    r->finished_mono = svc_now_mono_ms();
    if (rc == 0)
        r->state = CN_SUCCEEDED;
    else
        cn__fail(r, rc, err, was_running);
    svc_kargs_free(&r->req.ka);  /* the inputs are not needed any more */
    if (was_running)
        m->running--;
    m->active--;
    m->ended_total++;
    svc_counter_add(svc_metric_with(m->m_runs, cn__what(r), cn__state_names[r->state]), 1);
    if (r->started_mono)
        svc_histogram_observe(svc_metric_with(m->m_run_s, cn__what(r)),
                              (double)(r->finished_mono - r->started_mono) / 1000.0);
    /* To be reported, unless nobody will ask (superseded). */
    if (!r->collected) {
        r->in_ended = 1;
        if (m->etail)
            m->etail->enext = r;
        else
            m->ehead = r;
        m->etail = r;
    }
    pthread_cond_broadcast(&m->done);
    if (r->state == CN_SUCCEEDED)
        svc_info("run succeeded run=%s kernel=%s backend=%s elapsed_ms=%lld", r->id,
                 cn__what(r), r->use_cuda ? "cuda" : "cpu",
                 (long long)(r->finished_mono - r->started_mono));
    else
        svc_info("run %s run=%s kernel=%s code=%s message=\"%s\"", cn__state_names[r->state],
                 r->id, cn__what(r), r->err_code, r->err_message);
}

/* Cancels r (lock held): a queued run ends now, a running one is flagged.
 * A finished run, or one already being cancelled, is left alone. */
static void cn__cancel(cn_runs *m, cn_run *r, cn_cancel_why why)
{
    if (cn__terminal(r) || r->cancel_requested)
        return;
    r->cancel_requested = (int)why;
    /* Nobody will come for a superseded run's result: neither heartbeats
     * nor draining should wait on it. */
    if (why == CN_CANCEL_SUPERSEDED)
        r->collected = 1;
    if (r->state == CN_QUEUED) {
        cn__queue_remove(m, r);
        cn__finish(m, r, KL_ECANCELED, NULL);
    } else {
        __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
        svc_info("run cancel requested run=%s why=%s", r->id,
                 why == CN_CANCEL_USER ? "user" : why == CN_CANCEL_SUPERSEDED ? "superseded"
                                                                             : "shutdown");
    }
}

static json_t *cn__time_json(int64_t ms)
{
    char buf[40];
    if (!ms)
        return json_null();
    svc_time_format(ms, buf, sizeof buf);
    return json_string(buf);
}

/* What an ended run used, as the gateway bills it: wall time on the node,
 * the kernel's CPU time over all its threads, and the GPUs it held. */
static json_t *cn__usage_json(const cn_run *r, int64_t elapsed_ms)
{
    int gpus = r->use_cuda ? (r->req.gpus > 0 ? r->req.gpus : 1) : 0;
    json_t *u = json_pack("{s:f, s:f, s:i}", "run_s", (double)elapsed_ms / 1000.0, "cpu_s",
                          (double)r->cpu_ns / 1e9, "gpus", gpus);
    if (u && gpus && r->gpu_model)
        json_object_set_new(u, "gpu_model", json_string(r->gpu_model));
    return u;
}

/* The kernel's report: kept as the run's latest, for the reporter to take
 * (cn_runs_take_progress); the kernel's thread only copies it. */
static void cn__progress(kl_progress_sink *sink, const kl_progress *p)
{
    cn_run *r = (cn_run *)((char *)sink - offsetof(cn_run, sink));
    cn_runs *m = r->mgr;
    pthread_mutex_lock(&m->mu);
    r->progress = *p;
    r->has_progress = r->progress_new = 1;
    m->progress_new = 1;
    pthread_mutex_unlock(&m->mu);
}

/* {"fraction", name: value...} of a report. New reference or NULL. */
static json_t *cn__progress_json(const kl_progress *p)
{
    json_t *o = json_pack("{s:f}", "fraction", p->fraction);
    for (int i = 0; o && i < p->n && i < KL_PROGRESS_MAX; i++)
        if (isfinite(p->kv[i].value))
            json_object_set_new(o, p->kv[i].key, json_real(p->kv[i].value));
    return o;
}

/* The members of an ended run's object (lock held): phases_ms, usage,
 * for a task exit_code and logs (contract §5), and info. */
static void cn__ended_json(json_t *j, const cn_run *r, int64_t elapsed)
{
    if (r->started_mono) {
        json_object_set_new(j, "phases_ms",
                            json_pack("{s:I, s:I, s:I}", "inputs", (json_int_t)r->phase_ms[0],
                                      "compute", (json_int_t)r->phase_ms[1], "outputs",
                                      (json_int_t)r->phase_ms[2]));
        json_object_set_new(j, "usage", cn__usage_json(r, elapsed));
    }
    if (r->req.task && r->started_mono) {
        json_object_set_new(j, "exit_code", r->tres.exit_code >= 0
                                                ? json_integer(r->tres.exit_code) : json_null());
        json_object_set_new(j, "logs", r->tres.logs ? json_deep_copy(r->tres.logs) : json_null());
    }
    json_t *info = json_object();
    for (int i = 0; info && i < r->info.n; i++)
        json_object_set_new(info, r->info.kv[i].key, json_string(r->info.kv[i].value));
    json_object_set_new(j, "info", info);
}

/* The run's error object, or JSON null. New reference or NULL. */
static json_t *cn__error_json(const cn_run *r)
{
    if (!r->err_code[0])
        return json_null();
    json_t *err = json_pack("{s:s, s:s}", "code", r->err_code, "message", r->err_message);
    if (err && r->err_field[0])
        json_object_set_new(err, "field", json_string(r->err_field));
    return err;
}

/* The run object without outputs (lock held). New reference or NULL. */
static json_t *cn__run_json(const cn_run *r)
{
    int64_t elapsed = 0;
    json_t *err = cn__error_json(r);

    if (r->state == CN_RUNNING)
        elapsed = svc_now_mono_ms() - r->started_mono;
    else if (cn__terminal(r) && r->started_mono)
        elapsed = r->finished_mono - r->started_mono;
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:o, s:o, s:o, s:I, s:o}",
                          "run_id", r->id, "job_id", r->req.job_id, "attempt", r->req.attempt,
                          r->kernel ? "kernel" : "kind", cn__what(r),
                          "state", cn__state_names[r->state],
                          "backend", r->use_cuda ? "cuda" : "cpu",
                          "created_at", cn__time_json(r->created_wall),
                          "started_at", cn__time_json(r->started_wall),
                          "finished_at", cn__time_json(r->finished_wall),
                          "elapsed_ms", (json_int_t)elapsed, "error", err);
    if (!j)
        return NULL;
    if (r->state == CN_RUNNING)
        json_object_set_new(
            j, "phase", json_string(cn__phase_names[__atomic_load_n(&r->phase, __ATOMIC_ACQUIRE)]));
    if (r->req.node_rank >= 0)
        json_object_set_new(j, "node_rank", json_integer(r->req.node_rank));
    if (r->has_progress)
        json_object_set_new(j, "progress", cn__progress_json(&r->progress));
    if (r->tprogress)
        json_object_set_new(j, "progress", json_deep_copy(r->tprogress));
    if (r->cancel_requested && !cn__terminal(r))
        json_object_set_new(j, "cancel_requested", json_true());
    if (r->released)
        json_object_set_new(j, "released", json_true());
    if (cn__terminal(r))
        cn__ended_json(j, r, elapsed);
    return j;
}

/* {name: tensor in base64, or blob reference once pushed} for a succeeded
 * run. outs are immutable once the run has ended, so this runs without the
 * lock. New reference or NULL. */
static json_t *cn__outputs_json(const cn_run *r)
{
    const kl_kernel *k = r->kernel;
    if (!k)   /* a task: {name: {"blob", "bytes"[, "npy"]}} as the runner made them */
        return r->tres.outputs ? json_deep_copy(r->tres.outputs) : json_object();
    json_t *o = json_object();

    /* a multi-node job's outputs come from node_rank 0 alone */
    for (int i = 0; o && r->req.node_rank <= 0 && i < k->noutputs; i++) {
        const kl_tensor *t = &r->outs[i];
        /* A view: svc_tensor borrows the kernel's buffer and is not freed. */
        svc_tensor v = {.dtype = (svc_dtype)t->dtype, .ndim = t->ndim, .data = t->data,
                        .nbytes = kl_tensor_bytes(t)};
        memcpy(v.shape, t->shape, sizeof v.shape);
        memcpy(v.blob, r->out_blobs[i], sizeof v.blob);
        json_t *tj = svc_tensor_to_json(&v, 1);
        if (!tj || json_object_set_new(o, k->outputs[i].name, tj) < 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

/* Runs r's kernel on the worker thread, without the lock. Returns the
 * kernel's code; *ran_cuda says where it ran. */
static int cn__execute(cn_runs *m, cn_run *r, int *ran_cuda, kl_err *err)
{
    int rc;

    *ran_cuda = 0;
    if (r->use_cuda) {
        rc = m->backend->plugin.run(&r->req.ka.args, r->gpu_ids, r->ngpu, r->outs, err);
        if (rc != KL_ENOTSUP) {
            *ran_cuda = 1;
            return rc;
        }
        /* The plugin declined these particular arguments: the CPU reference
         * gives the same answer. */
        for (int i = 0; i < KL_MAX_IO; i++)
            kl_tensor_free(&r->outs[i]);
        memset(err, 0, sizeof *err);
    }
    return kl_run_cpu(&r->req.ka.args, r->outs, err);
}

/* Cuts r's inputs marked shard down to this node's rows [shard_lo,
 * shard_hi) of a multi-node job (inline and mapped ones arrive whole;
 * those fetched over HTTP came as those rows by range) and says so in
 * r->dist. 0, or KL_EINVAL with err when the rows are not there. */
static int cn__shard(cn_run *r, kl_err *err)
{
    const kl_kernel *k = r->kernel;
    for (int i = 0; r->req.node_rank >= 0 && i < k->ninputs; i++) {
        kl_tensor *v = &r->req.ka.views[i];
        if (!k->inputs[i].shard || !r->req.ka.args.inputs[i] || v->ndim < 1)
            continue;
        int64_t n = r->req.ka.tensors[i].shape[0];
        r->dist.shard_lo = r->req.shard_lo;
        r->dist.shard_total = n;
        if (v->shape[0] != n)
            continue;   /* fetched as this node's rows already (by range) */
        if (r->req.shard_hi > n) {
            kl_err_set(err, "dist", "dist.shard_hi=%lld but inputs.%s has %lld rows",
                       (long long)r->req.shard_hi, k->inputs[i].name, (long long)n);
            return KL_EINVAL;
        }
        size_t row = n > 0 ? kl_tensor_bytes(v) / (size_t)n : 0;
        v->data = (char *)v->data + (size_t)r->req.shard_lo * row;
        v->shape[0] = r->req.shard_hi - r->req.shard_lo;
    }
    if (r->req.node_rank >= 0)
        svc_info("dist run=%s node_rank=%d nodes=%d shard_rows=%lld..%lld", r->id, r->req.node_rank,
                 r->req.nodes, (long long)r->req.shard_lo, (long long)r->req.shard_hi);
    return 0;
}

/* Bytes of r's inputs that are blob references (read without the lock: the
 * worker owns a running run's inputs). */
static size_t cn__blob_input_bytes(const cn_run *r)
{
    size_t n = 0;
    for (int i = 0; i < KL_MAX_IO; i++)
        if (r->req.ka.tensors[i].blob[0])
            n += r->req.ka.tensors[i].nbytes;
    return n;
}

/* A task's progress object (a reference the run takes), from the task
 * runner on the worker's thread. */
static void cn__task_progress(void *cls, json_t *progress)
{
    cn_run *r = cls;
    cn_runs *m = r->mgr;
    pthread_mutex_lock(&m->mu);
    json_decref(r->tprogress);
    r->tprogress = progress;
    r->progress_new = 1;
    m->progress_new = 1;
    pthread_mutex_unlock(&m->mu);
}

/* Runs a task's part on the worker thread (lock not held on entry; held
 * on return, as the kernel path leaves it): the runner does the inputs,
 * the program and the outputs, then the run ends as it says. */
static void cn__run_task(cn_runs *m, cn_run *r)
{
    cn_task_run run = {.cfg = m->tasks, .req = &r->req, .gpu_ids = r->gpu_ids,
                       .ngpu = r->use_cuda ? r->ngpu : 0, .cancel = &r->cancel,
                       .blobio = m->blobio, .rdv = r->req.node_rank >= 0 ? &r->rdv.store : NULL,
                       .dist_host = m->dist ? m->dist->host : "127.0.0.1",
                       .dist_ifname = m->dist ? m->dist->ifname : "",
                       .rdv_timeout_ms = m->dist ? m->dist->timeout_ms : 30000,
                       .on_progress = cn__task_progress, .cls = r, .phase = &r->phase};
    cn_task_result res;
    cn_task_execute(&run, &res);
    /* the files and inputs are not needed any more (the run stays a task) */
    cn_task_spec_free(r->req.task);
    pthread_mutex_lock(&m->mu);
    r->tres = res;
    if (r->use_cuda && r->gpu_ids[0] < m->backend->plugin.ngpus)
        r->gpu_model = m->backend->plugin.gpus[r->gpu_ids[0]].name;
    memcpy(r->phase_ms, res.phase_ms, sizeof r->phase_ms);
    cn__finish(m, r, res.rc, NULL);
    r->refs--;
}

static void *cn__worker(void *arg)
{
    cn_runs *m = arg;

    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->closing && !m->qhead)
            pthread_cond_wait(&m->work, &m->mu);
        if (m->closing)
            break;
        cn_run *r = m->qhead;
        m->qhead = r->qnext;
        if (!m->qhead)
            m->qtail = NULL;
        r->qnext = NULL;
        r->state = CN_RUNNING;
        r->started_wall = svc_now_wall_ms();
        r->started_mono = svc_now_mono_ms();
        r->deadline_mono = r->started_mono + (int64_t)r->req.timeout_s * 1000;
        r->refs++;
        m->running++;
        if (r->deadline_mono < m->watch_next)
            pthread_cond_signal(&m->tick);
        svc_info("run started run=%s kernel=%s backend=%s", r->id, cn__what(r),
                 r->use_cuda ? "cuda" : "cpu");
        pthread_mutex_unlock(&m->mu);
        if (r->req.task) {
            cn__run_task(m, r);
            continue;
        }

        /* Inputs by reference arrive first, then the kernel, then (when
         * asked) the outputs leave as blobs; the cancel flag and the
         * deadline cover all three. */
        kl_err err;
        int ran_cuda = r->use_cuda;
        memset(&err, 0, sizeof err);
        size_t ref_bytes = cn__blob_input_bytes(r);
        int64_t t0 = svc_now_mono_ms(), t1, t2, t3;
        int rc = cn_blobio_fetch_inputs_rows(m->blobio, m->cache, &r->req.ka,
                                             r->req.node_rank >= 0 ? r->req.shard_lo : -1,
                                             r->req.shard_hi, &r->cancel, &err);
        if (rc == 0)
            rc = cn__shard(r, &err);
        t1 = svc_now_mono_ms();
        if (rc == 0 && ref_bytes > 0)
            svc_info("inputs ready run=%s bytes=%zu ms=%lld", r->id, ref_bytes,
                     (long long)(t1 - t0));
        __atomic_store_n(&r->phase, CN_PHASE_COMPUTE, __ATOMIC_RELEASE);
        kl_cputime cpu;
        kl_cputime_start(&cpu);
        if (rc == 0)
            rc = cn__execute(m, r, &ran_cuda, &err);
        int64_t cpu_ns = kl_cputime_stop(&cpu);
        t2 = svc_now_mono_ms();
        __atomic_store_n(&r->phase, CN_PHASE_OUTPUTS, __ATOMIC_RELEASE);
        if (rc == 0 && r->req.output_blobs && r->req.node_rank <= 0)
            rc = cn_blobio_push_outputs(m->blobio, r->req.job_id, r->req.attempt, r->kernel,
                                        r->outs, r->out_blobs, r->req.output_blob_min,
                                        &r->cancel, &err);
        t3 = svc_now_mono_ms();
        if (rc == 0 && r->req.output_blobs)
            svc_info("outputs stored run=%s ms=%lld", r->id, (long long)(t3 - t2));

        pthread_mutex_lock(&m->mu);
        const int first_loss = rc == KL_EDEVICE && !m->device_lost;
        if (first_loss)
            m->device_lost = r->lost_device = 1;
        r->use_cuda = ran_cuda;
        r->cpu_ns = cpu_ns;
        if (ran_cuda && r->gpu_ids[0] < m->backend->plugin.ngpus)
            r->gpu_model = m->backend->plugin.gpus[r->gpu_ids[0]].name;
        r->phase_ms[0] = t1 - t0;
        r->phase_ms[1] = t2 - t1;
        r->phase_ms[2] = t3 - t2;
        cn__finish(m, r, rc, &err);
        if (first_loss) {
            svc_error("device lost run=%s kernel=%s why=\"%s\"", r->id, r->kernel->name, err.message);
            if (m->on_device_lost)
                m->on_device_lost(m->device_ctx, err.message);
        }
        r->refs--;
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Raises the cancel flag of runs past their deadline and frees finished runs
 * kept long enough. Sleeps until the next deadline or a second at most. */
static void *cn__watchdog(void *arg)
{
    cn_runs *m = arg;

    pthread_mutex_lock(&m->mu);
    while (!m->closing) {
        int64_t now = svc_now_mono_ms();
        int64_t next = now + 1000;
        cn_run *r = m->head;
        while (r) {
            cn_run *after = r->next;
            if (r->state == CN_RUNNING) {
                if (now >= r->deadline_mono) {
                    if (!r->timed_out) {
                        r->timed_out = 1;
                        __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
                        svc_warn("run timed out run=%s timeout_s=%d", r->id, r->req.timeout_s);
                    } else if (!r->timeout_logged && now >= r->deadline_mono + 10000) {
                        r->timeout_logged = 1;
                        svc_warn("run ignores its cancel flag run=%s kernel=%s", r->id,
                                 cn__what(r));
                    }
                } else if (r->deadline_mono < next) {
                    next = r->deadline_mono;
                }
            } else if (cn__terminal(r) && r->refs == 0 &&
                       ((r->released && now - r->released_mono >= m->release_grace_ms) ||
                        now - r->finished_mono >= m->keep_ms)) {
                cn__unlink(m, r);
                if (r->in_ended)  /* kept keep_ms and never taken: nobody reports here */
                    cn__ended_remove(m, r);
                svc_debug("run freed run=%s", r->id);
                cn__run_free(r);
            }
            r = after;
        }
        m->watch_next = next;
        cn__wait_until(&m->tick, &m->mu, next);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

int cn_runs_create(const cn_runs_opts *opts, cn_runs **out)
{
    int rc = -ENOMEM, inited = 0;
    cn_runs *m = NULL;

    *out = NULL;
    if (!opts || opts->slots < 1 || !opts->backend)
        return -EINVAL;
    if (!(m = calloc(1, sizeof *m)))
        goto cleanup;
    /* Deadlines come from svc_now_mono_ms, so the waits must use that clock. */
    pthread_mutex_init(&m->mu, NULL);
    svc_cond_init_mono(&m->work);
    svc_cond_init_mono(&m->done);
    svc_cond_init_mono(&m->tick);
    inited = 1;
    m->slots = opts->slots;
    m->threads = opts->threads;
    m->backend = opts->backend;
    m->blobio = opts->blobio;
    m->cache = opts->cache;
    m->dist = opts->dist;
    m->on_device_lost = opts->on_device_lost;
    m->device_ctx = opts->device_ctx;
    m->tasks = opts->tasks;
    m->m_runs = svc_metric_counter(opts->metrics, "kowloon_node_runs_total",
                                   "runs this node ended, by kernel and state",
                                   (const char *[]){"kernel", "state", NULL});
    m->m_run_s = svc_metric_histogram(opts->metrics, "kowloon_node_run_seconds",
                                      "run time from start to end on this node (inputs, "
                                      "compute, outputs), seconds",
                                      (const char *[]){"kernel", NULL}, cn__run_bounds,
                                      (int)(sizeof cn__run_bounds / sizeof *cn__run_bounds));
    m->keep_ms = opts->keep_ms > 0 ? opts->keep_ms : CN_KEEP_DEFAULT_MS;
    m->release_grace_ms = opts->release_grace_ms > 0 ? opts->release_grace_ms
                                                     : CN_RELEASE_GRACE_DEFAULT_MS;
    rc = -ENOMEM;
    if (!(m->workers = calloc((size_t)opts->slots, sizeof *m->workers)))
        goto cleanup;
    for (int i = 0; i < opts->slots; i++) {
        if ((rc = -pthread_create(&m->workers[i], NULL, cn__worker, m)) < 0)
            goto cleanup;
        m->nworkers++;
    }
    if ((rc = -pthread_create(&m->watchdog, NULL, cn__watchdog, m)) < 0)
        goto cleanup;
    m->watchdog_started = 1;
    *out = m;
    m = NULL;
    rc = 0;
cleanup:
    if (m && inited)
        cn_runs_destroy(m);  /* joins whatever threads started */
    else
        free(m);
    return rc;
}

void cn_runs_shutdown(cn_runs *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    if (!m->closing) {
        m->closing = 1;
        m->draining = 1;
        for (cn_run *r = m->head; r; r = r->next)
            cn__cancel(m, r, CN_CANCEL_SHUTDOWN);
    }
    pthread_cond_broadcast(&m->work);
    pthread_cond_broadcast(&m->done);
    pthread_cond_broadcast(&m->tick);
    pthread_mutex_unlock(&m->mu);
}

void cn_runs_destroy(cn_runs *m)
{
    if (!m)
        return;
    cn_runs_shutdown(m);
    for (int i = 0; i < m->nworkers; i++)
        pthread_join(m->workers[i], NULL);
    if (m->watchdog_started)
        pthread_join(m->watchdog, NULL);
    cn_run *r = m->head;
    while (r) {
        cn_run *after = r->next;
        cn__run_free(r);
        r = after;
    }
    pthread_cond_destroy(&m->work);
    pthread_cond_destroy(&m->done);
    pthread_cond_destroy(&m->tick);
    pthread_mutex_destroy(&m->mu);
    free(m->workers);
    free(m);
}

/* Whether this node can take req now (not draining; CUDA and enough GPUs
 * where it needs them), and *use_cuda: whether it runs on the GPUs. */
static int cn__enqueue_target(cn_runs *m, const cn_run_req *req, kl_err *err, int *use_cuda)
{
    const char *kname = req->task ? "task" : req->ka.args.kernel->name;
    if (m->draining)
        return CN_EDRAINING;
    if (req->target == CN_TARGET_CUDA && m->backend->kind != CN_BACKEND_CUDA) {
        kl_err_set(err, "backend", "this node has no CUDA backend: %s", m->backend->reason);
        return CN_ENOTSUP;
    }
    /* A task gets GPUs when it asks for some and the node has them; what
     * runs in its container is its own business. */
    *use_cuda = req->target != CN_TARGET_CPU &&
                (req->task ? req->gpus > 0 && m->backend->kind == CN_BACKEND_CUDA
                           : cn_backend_supports(m->backend, kname));
    int ngpus = cn_backend_ngpus(m->backend);
    if (*use_cuda && req->gpus > ngpus) {
        kl_err_set(err, "gpus", "gpus=%d but this node has %d", req->gpus, ngpus);
        return CN_ENOTSUP;
    }
    return 0;
}

/* A newer attempt of the same job means the gateway has moved on: the
 * older one's result would be discarded, so stop spending a slot on it. */
static void cn__supersede(cn_runs *m, const cn_run_req *req)
{
    for (int a = 1; a < req->attempt; a++) {
        char older[CN_RUN_ID_MAX];
        snprintf(older, sizeof older, "%s.%d", req->job_id, a);
        cn_run *o = cn__find(m, older);
        if (o && !cn__terminal(o)) {
            svc_info("run superseded run=%s by=%s", o->id, req->run_id);
            cn__cancel(m, o, CN_CANCEL_SUPERSEDED);
        }
    }
}

/* Whether this node takes the task (its engine) and the multi-node part. */
static int cn__enqueue_part(cn_runs *m, cn_run_req *req, kl_err *err)
{
    if (req->task && cn_task_admit(m->tasks, req, err) < 0)
        return CN_ENOTSUP;
    if (req->task && req->node_rank >= 0 && !m->dist) {
        kl_err_set(err, "dist", "this node takes no part in multi-node jobs");
        return CN_ENOTSUP;
    }
    if (!req->task && req->node_rank >= 0 &&
        (!m->dist || req->ka.args.kernel->max_nodes < req->nodes)) {
        kl_err_set(err, "dist", m->dist ? "kernel %s runs on at most %d node(s)"
                                        : "this node takes no part in multi-node jobs",
                   req->ka.args.kernel->name, req->ka.args.kernel->max_nodes);
        return CN_ENOTSUP;
    }
    return 0;
}

/* A new run taking req over (its input pointers follow the tensors; req is
 * left zeroed), on its devices and, for a part of a multi-node job, its
 * rendezvous. NULL on ENOMEM (req untouched). */
static cn_run *cn__run_new(cn_runs *m, cn_run_req *req, int use_cuda)
{
    cn_run *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->req = *req;
    for (int i = 0; i < KL_MAX_IO; i++)
        if (req->ka.args.inputs[i])
            r->req.ka.args.inputs[i] = &r->req.ka.views[i];
    memset(req, 0, sizeof *req);
    r->kernel = r->req.ka.args.kernel;
    snprintf(r->id, sizeof r->id, "%s", r->req.run_id);
    r->req.ka.args.cancel = &r->cancel;
    r->req.ka.args.threads = m->threads;
    r->req.ka.args.ranks = r->req.gpus;
    r->req.ka.args.info = &r->info;
    r->mgr = m;
    r->sink.report = cn__progress;
    r->req.ka.args.progress = &r->sink;
    r->use_cuda = use_cuda;
    if (use_cuda) {
        int ngpus = cn_backend_ngpus(m->backend);
        r->ngpu = r->req.gpus > 0 ? r->req.gpus : 1;
        int given = r->req.ngpu_ids == r->ngpu;
        for (int i = 0; given && i < r->ngpu; i++)
            given = r->req.gpu_ids[i] < ngpus;
        /* the scheduler's devices when it chose them, else consecutive
         * devices from a round-robin first one */
        const int first = given ? 0 : (int)(m->rr++ % (unsigned)(ngpus - r->ngpu + 1));
        for (int i = 0; i < r->ngpu; i++)
            r->gpu_ids[i] = given ? r->req.gpu_ids[i] : first + i;
    }
    if (r->req.node_rank >= 0) {
        cn_rdv_init(&r->rdv, m->dist, r->req.job_id, r->req.attempt, &r->cancel);
        r->dist = (kl_dist){.nodes = r->req.nodes, .node_rank = r->req.node_rank,
                            .local_ranks = r->req.gpus, .store = &r->rdv.store,
                            .host = m->dist->host, .timeout_ms = m->dist->timeout_ms};
        r->req.ka.args.dist = &r->dist;
    }
    return r;
}

/* Admits req as a new queued run (lock held). Returns CN_RUN_NEW with *out,
 * or a negative code; see cn_runs_submit. */
static int cn__enqueue(cn_runs *m, cn_run_req *req, kl_err *err, cn_run **out)
{
    const char *kname = req->task ? "task" : req->ka.args.kernel->name;
    int use_cuda = 0, rc;
    cn_run *r;

    if ((rc = cn__enqueue_target(m, req, err, &use_cuda)) < 0)
        return rc;
    cn__supersede(m, req);
    if ((rc = cn__enqueue_part(m, req, err)) < 0)
        return rc;
    if (m->active >= m->slots)
        return CN_EOVERLOADED;
    if (!(r = cn__run_new(m, req, use_cuda)))
        return CN_ENOMEM;
    r->state = CN_QUEUED;
    r->created_wall = svc_now_wall_ms();
    cn__link(m, r);
    if (m->qtail)
        m->qtail->qnext = r;
    else
        m->qhead = r;
    m->qtail = r;
    m->active++;
    pthread_cond_signal(&m->work);
    svc_info("run queued run=%s kernel=%s backend=%s timeout_s=%d", r->id, kname,
             use_cuda ? "cuda" : "cpu", r->req.timeout_s);
    *out = r;
    return CN_RUN_NEW;
}

int cn_runs_submit(cn_runs *m, cn_run_req *req, json_t **run_json, kl_err *err)
{
    cn_run *r;
    int rc;

    if (run_json)
        *run_json = NULL;
    pthread_mutex_lock(&m->mu);
    if ((r = cn__find(m, req->run_id)))
        rc = CN_RUN_EXISTING;
    else
        rc = cn__enqueue(m, req, err, &r);
    /* On NEW the run is accepted even if this reply object cannot be built;
     * the caller sees *run_json NULL. */
    if (rc >= 0 && run_json)
        *run_json = cn__run_json(r);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cn_runs_get(cn_runs *m, const char *run_id, int64_t wait_ms, int outputs, json_t **out)
{
    json_t *j = NULL, *outs = NULL;
    int rc = CN_ENOENT, terminal;

    *out = NULL;
    pthread_mutex_lock(&m->mu);
    cn_run *r = cn__find(m, run_id);
    if (!r)
        goto cleanup;
    r->refs++;
    int64_t deadline = svc_now_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    while (!cn__terminal(r) && !m->closing && svc_now_mono_ms() < deadline)
        cn__wait_until(&m->done, &m->mu, deadline);
    terminal = cn__terminal(r);
    j = cn__run_json(r);
    int with_outputs = outputs && r->state == CN_SUCCEEDED;
    pthread_mutex_unlock(&m->mu);

    if (with_outputs && j) {
        outs = cn__outputs_json(r);
        if (!outs || json_object_set_new(j, "outputs", outs) < 0) {
            json_decref(j);
            j = NULL;
        }
    }

    pthread_mutex_lock(&m->mu);
    r->refs--;
    rc = j ? 0 : CN_ENOMEM;
    /* Collected: the gateway has seen how the run ended, with its outputs. */
    if (j && terminal && outputs)
        r->collected = 1;
cleanup:
    pthread_mutex_unlock(&m->mu);
    *out = j;
    return rc;
}

int cn_runs_take_ended(cn_runs *m, int64_t wait_ms, int max, json_t *out)
{
    cn_run *taken[CN_TAKE_MAX];
    int n = 0;

    if (max > CN_TAKE_MAX)
        max = CN_TAKE_MAX;
    pthread_mutex_lock(&m->mu);
    int64_t deadline = svc_now_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    while (!m->ehead && !m->closing && svc_now_mono_ms() < deadline)
        cn__wait_until(&m->done, &m->mu, deadline);
    while (m->ehead && n < max) {
        cn_run *r = m->ehead;
        m->ehead = r->enext;
        if (!m->ehead)
            m->etail = NULL;
        r->enext = NULL;
        r->in_ended = 0;
        r->refs++;        /* the sweeper keeps away until the object is built */
        taken[n++] = r;
    }
    json_t *base[CN_TAKE_MAX];
    for (int i = 0; i < n; i++)
        base[i] = cn__run_json(taken[i]);
    pthread_mutex_unlock(&m->mu);

    /* Ended runs do not change any more: outputs are encoded unlocked. */
    for (int i = 0; i < n; i++) {
        json_t *j = base[i];
        if (j && taken[i]->state == CN_SUCCEEDED) {
            json_t *outs = cn__outputs_json(taken[i]);
            if (!outs || json_object_set_new(j, "outputs", outs) < 0) {
                json_decref(j);
                j = NULL;
            }
        }
        if (!j || json_array_append_new(out, j) < 0)
            svc_error("run %s: out of memory building its report; it is reported as lost",
                      taken[i]->id);
    }
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < n; i++)
        taken[i]->refs--;
    pthread_mutex_unlock(&m->mu);
    return n;
}

int cn_runs_take_progress(cn_runs *m, json_t *out)
{
    int n = 0;
    pthread_mutex_lock(&m->mu);
    for (cn_run *r = m->head; r && m->progress_new; r = r->next) {
        if (!r->progress_new)
            continue;
        r->progress_new = 0;
        json_t *p = r->tprogress ? json_deep_copy(r->tprogress) : cn__progress_json(&r->progress);
        if (p && json_array_append_new(out, json_pack("{s:s, s:i, s:o}", "job_id", r->req.job_id,
                                                      "attempt", r->req.attempt, "progress", p)) == 0)
            n++;
    }
    m->progress_new = 0;
    pthread_mutex_unlock(&m->mu);
    return n;
}

int cn_runs_free_slots(cn_runs *m, uint64_t *ended)
{
    pthread_mutex_lock(&m->mu);
    int n = m->draining ? 0 : m->slots - m->active;
    if (ended)
        *ended = m->ended_total;
    pthread_mutex_unlock(&m->mu);
    return n > 0 ? n : 0;
}

int cn_runs_cancel(cn_runs *m, const char *run_id, int64_t wait_ms, json_t **out)
{
    pthread_mutex_lock(&m->mu);
    cn_run *r = cn__find(m, run_id);
    if (r)
        cn__cancel(m, r, CN_CANCEL_USER);
    pthread_mutex_unlock(&m->mu);
    /* The run cannot be swept in between: it is unfinished, or it finished
     * moments ago and is kept for minutes. */
    if (!r) {
        *out = NULL;
        return CN_ENOENT;
    }
    return cn_runs_get(m, run_id, wait_ms, 1, out);
}

int cn_runs_release(cn_runs *m, const char *run_id)
{
    pthread_mutex_lock(&m->mu);
    cn_run *r = cn__find(m, run_id);
    int rc = !r ? CN_ENOENT : !cn__terminal(r) ? CN_EBUSY : 0;
    if (rc == 0 && !r->released) {
        r->collected = 1;
        r->released = 1;
        r->released_mono = svc_now_mono_ms();
        if (r->released_mono + m->release_grace_ms < m->watch_next)
            pthread_cond_signal(&m->tick);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void cn_runs_load(cn_runs *m, int *active, json_t *ids)
{
    pthread_mutex_lock(&m->mu);
    *active = m->active;
    for (cn_run *r = m->head; ids && r; r = r->next)
        if (!cn__terminal(r) || !r->collected)
            json_array_append_new(ids, json_string(r->id));
    pthread_mutex_unlock(&m->mu);
}

int cn_runs_drain(cn_runs *m)
{
    int64_t now = svc_now_mono_ms();

    pthread_mutex_lock(&m->mu);
    m->draining = 1;
    for (cn_run *r = m->head; r; r = r->next)
        r->watched = !cn__terminal(r) ||
                     (!r->collected && now - r->finished_mono < CN_DRAIN_RECENT_MS);
    pthread_mutex_unlock(&m->mu);
    return cn_runs_unsettled(m);
}

int cn_runs_unsettled(cn_runs *m)
{
    int n = 0;

    pthread_mutex_lock(&m->mu);
    for (cn_run *r = m->head; r; r = r->next)
        n += r->watched && !(cn__terminal(r) && r->collected);
    pthread_mutex_unlock(&m->mu);
    return n;
}

int cn_runs_cancel_all(cn_runs *m, int64_t wait_ms)
{
    int left;

    pthread_mutex_lock(&m->mu);
    for (cn_run *r = m->head; r; r = r->next)
        cn__cancel(m, r, CN_CANCEL_SHUTDOWN);
    int64_t deadline = svc_now_mono_ms() + wait_ms;
    while (m->running > 0 && svc_now_mono_ms() < deadline)
        cn__wait_until(&m->done, &m->mu, deadline);
    left = m->running;
    pthread_mutex_unlock(&m->mu);
    return left;
}
