/* blobio.c — fetch inputs and push outputs as raw bytes (blobio.h). Each
 * blob of a run moves on a thread of its own (a run has at most KL_MAX_IO),
 * so transfers and their SHA-256 overlap; the worker thread watches the
 * run's cancel flag and stops them all when it is raised or one fails. */
#include "blobio.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_log.h"
#include "svc_sha256.h"
#include "svc_tensor.h"
#include "svc_util.h"

#define CN_STALL_DEFAULT_MS 30000
#define CN_PUSH_TRIES 3
#define CN_PUSH_BACKOFF_MS 250   /* then 4x that before the third try */
#define CN_WATCH_MS 100

/* ---- the gateway transport --------------------------------------------- */

static long cn__stall(const cn_blobio_gateway *g)
{
    return g->stall_ms > 0 ? g->stall_ms : CN_STALL_DEFAULT_MS;
}

/* "{base}{path}" without a doubled slash. */
static void cn__url(char *out, size_t n, const char *base, const char *path)
{
    size_t len = strlen(base);
    while (len > 0 && base[len - 1] == '/')
        len--;
    snprintf(out, n, "%.*s%s", (int)len, base, path);
}

/* The message of a JSON error reply, or "". */
static const char *cn__reply_message(const svc_response *r)
{
    const char *m = json_string_value(json_object_get(json_object_get(r->json, "error"), "message"));
    return m ? m : "";
}

static int cn__gw_fetch(void *cls, const char *id, void *buf, size_t size, svc_chunk_fn on_chunk,
                        void *chunk_cls, const volatile int *cancel, int64_t *got, char *msg,
                        size_t msglen)
{
    const cn_blobio_gateway *g = cls;
    char url[1024], path[128];
    svc_response r;
    int ret = CN_BLOBIO_EFAIL;

    *got = 0;
    snprintf(path, sizeof path, "/v1/cluster/blobs/%s", id);
    cn__url(url, sizeof url, g->url, path);
    int rc = svc_http_get_into(url, g->token, buf, size, on_chunk, chunk_cls, cn__stall(g), cancel,
                               &r);
    if (rc == SVC_XFER_TOOBIG) {
        *got = r.length;
        ret = CN_BLOBIO_ESIZE;
    } else if (rc == SVC_XFER_ABORTED) {
        snprintf(msg, msglen, "fetching %s was stopped", id);
        ret = cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE) ? CN_BLOBIO_ECANCELED
                                                                  : CN_BLOBIO_EFAIL;
    } else if (rc < 0) {
        snprintf(msg, msglen, "cannot fetch %s from the gateway: %s", id, r.error);
    } else if (r.status == 404) {
        snprintf(msg, msglen, "the gateway has no blob %s", id);
    } else if (r.status != 200) {
        snprintf(msg, msglen, "fetching %s: the gateway answered %d %s", id, r.status,
                 cn__reply_message(&r));
    } else {
        *got = r.length;
        ret = (size_t)r.length == size ? 0 : CN_BLOBIO_ESIZE;
    }
    svc_response_clear(&r);
    return ret;
}

static int cn__gw_push(void *cls, const void *data, size_t n, const volatile int *cancel,
                       char id[CN_BLOB_ID_SIZE], char *msg, size_t msglen)
{
    const cn_blobio_gateway *g = cls;
    char url[1024];
    svc_response r;
    int ret = CN_BLOBIO_EFAIL;

    cn__url(url, sizeof url, g->url, "/v1/cluster/blobs");
    int rc = svc_http_post_raw(url, g->token, "application/octet-stream", data, n, cn__stall(g),
                               cancel, &r);
    const char *got = json_string_value(json_object_get(r.json, "id"));
    json_int_t size = json_integer_value(json_object_get(r.json, "size"));
    if (rc == SVC_XFER_ABORTED) {
        snprintf(msg, msglen, "pushing an output was stopped");
        ret = CN_BLOBIO_ECANCELED;
    } else if (rc < 0) {
        snprintf(msg, msglen, "cannot push an output to the gateway: %s", r.error);
    } else if (r.status != 201 && r.status != 200) {
        snprintf(msg, msglen, "pushing an output: the gateway answered %d %s", r.status,
                 cn__reply_message(&r));
    } else if (!svc_blob_id_valid(got) || size != (json_int_t)n) {
        snprintf(msg, msglen, "pushing an output: the gateway's reply has no blob id of %zu bytes",
                 n);
    } else {
        snprintf(id, CN_BLOB_ID_SIZE, "%s", got);
        ret = 0;
    }
    svc_response_clear(&r);
    return ret;
}

void cn_blobio_gateway_init(cn_blobio *io, cn_blobio_gateway *gw)
{
    *io = (cn_blobio){.fetch = cn__gw_fetch, .push = cn__gw_push, .cls = gw};
}

/* ---- a run's transfers in parallel --------------------------------------- */

typedef int (*cn__task_fn)(void *task, const volatile int *stop);

typedef struct cn__group {
    pthread_mutex_t mu;
    pthread_cond_t done;
    int left;
    volatile int stop;    /* raised on the run's cancel or a task's failure */
    cn__task_fn fn;
} cn__group;

typedef struct cn__slot {
    cn__group *g;
    void *task;
    int rc;
    pthread_t th;
    int started;
} cn__slot;

static void *cn__slot_main(void *arg)
{
    cn__slot *s = arg;
    s->rc = s->g->fn(s->task, &s->g->stop);
    pthread_mutex_lock(&s->g->mu);
    if (s->rc != 0)
        __atomic_store_n(&s->g->stop, 1, __ATOMIC_RELEASE);
    s->g->left--;
    pthread_cond_signal(&s->g->done);
    pthread_mutex_unlock(&s->g->mu);
    return NULL;
}

/* Runs fn on every task, each on a thread, and waits for all; rcs[i] gets
 * task i's result. A raised *cancel, or a failure, raises every task's stop
 * flag. One task runs on the calling thread with cancel itself. */
static void cn__run_all(cn__task_fn fn, void **tasks, int n, int *rcs, const volatile int *cancel)
{
    cn__slot slots[KL_MAX_IO];
    cn__group g = {.fn = fn};
    pthread_condattr_t ca;

    if (n == 1) {
        rcs[0] = fn(tasks[0], cancel);
        return;
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.done, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&g.mu);
    for (int i = 0; i < n; i++) {
        slots[i] = (cn__slot){.g = &g, .task = tasks[i]};
        g.left++;
        if (pthread_create(&slots[i].th, NULL, cn__slot_main, &slots[i]) == 0) {
            slots[i].started = 1;
        } else {
            /* No thread to spare: this one goes on the caller's. */
            pthread_mutex_unlock(&g.mu);
            cn__slot_main(&slots[i]);
            pthread_mutex_lock(&g.mu);
        }
    }
    while (g.left > 0) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
            __atomic_store_n(&g.stop, 1, __ATOMIC_RELEASE);
        int64_t until = svc_now_mono_ms() + CN_WATCH_MS;
        struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (long)(until % 1000) * 1000000L};
        pthread_cond_timedwait(&g.done, &g.mu, &ts);
    }
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < n; i++) {
        if (slots[i].started)
            pthread_join(slots[i].th, NULL);
        rcs[i] = slots[i].rc;
    }
    pthread_cond_destroy(&g.done);
    pthread_mutex_destroy(&g.mu);
}

/* The result of a group: the first real failure in input order (a task
 * stopped because another failed reports KL_ECANCELED, which says
 * nothing), or KL_ECANCELED when the run was cancelled. errs[i] go with it. */
static int cn__group_result(const int *rcs, const kl_err *errs, int n, const volatile int *cancel,
                            kl_err *err)
{
    if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
        return KL_ECANCELED;
    for (int i = 0; i < n; i++)
        if (rcs[i] != 0 && rcs[i] != KL_ECANCELED) {
            *err = errs[i];
            return rcs[i];
        }
    for (int i = 0; i < n; i++)
        if (rcs[i] != 0)
            return rcs[i];
    return 0;
}

/* ---- inputs ------------------------------------------------------------ */

typedef struct cn__fetch_task {
    const cn_blobio *io;
    cn_blobcache *cache;
    const char *name;     /* the input's name in the catalog */
    svc_tensor *t;        /* the reference; gets its data on success */
    kl_tensor *view;
    kl_err err;
} cn__fetch_task;

static int cn__hash_chunk(void *cls, const void *data, size_t n)
{
    return svc_sha256_update(cls, data, n);
}

/* "has 100 bytes but shape [2, 3] of float32 needs 24" into err. */
static void cn__size_error(const cn__fetch_task *ft, int64_t actual, kl_err *err)
{
    char shape[160] = "", has[48];
    size_t len = 0;
    for (int d = 0; d < ft->t->ndim && len < sizeof shape; d++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? ", " : "",
                                (long long)ft->t->shape[d]);
    if (actual >= 0)
        snprintf(has, sizeof has, "%lld bytes", (long long)actual);
    else
        snprintf(has, sizeof has, "more than %zu bytes", ft->t->nbytes);
    kl_err_set(err, NULL, "inputs.%s: blob %s has %s but shape [%s] of %s needs %zu bytes",
               ft->name, ft->t->blob, has, shape, svc_dtype_name(ft->t->dtype), ft->t->nbytes);
    snprintf(err->field, sizeof err->field, "inputs.%s", ft->name);
}

static int cn__fetch_one(void *arg, const volatile int *stop)
{
    cn__fetch_task *ft = arg;
    size_t size = ft->t->nbytes;
    const char *id = ft->t->blob;
    char field[64], msg[256] = "", hex[65];
    cn_blobcache_claim *claim = NULL;
    uint64_t cached_size = 0;
    int64_t got = 0;
    int rc = KL_EBACKEND;

    snprintf(field, sizeof field, "inputs.%s", ft->name);
    void *buf = size ? malloc(size) : NULL;
    if (size && !buf) {
        kl_err_set(&ft->err, field, "%s: cannot allocate %zu bytes", field, size);
        return KL_EBACKEND;
    }
    if (ft->cache) {
        int c = cn_blobcache_get(ft->cache, id, buf, size, stop, &claim, &cached_size);
        if (c == CN_BLOB_HIT) {
            rc = 0;
            goto cleanup;
        }
        if (c == CN_BLOB_ESIZE) {
            cn__size_error(ft, (int64_t)cached_size, &ft->err);
            rc = KL_EINVAL;
            goto cleanup;
        }
        if (c == CN_BLOB_ECANCELED) {
            rc = KL_ECANCELED;
            goto cleanup;
        }
    }
    if (!ft->io || !ft->io->fetch) {
        kl_err_set(&ft->err, field, "%s: this node has no gateway to fetch %s from", field, id);
        goto cleanup;
    }
    svc_sha256 *h = svc_sha256_new();
    if (!h) {
        kl_err_set(&ft->err, field, "%s: out of memory", field);
        goto cleanup;
    }
    int f = ft->io->fetch(ft->io->cls, id, buf, size, cn__hash_chunk, h, stop, &got, msg,
                          sizeof msg);
    if (ft->cache && got > 0)
        cn_blobcache_count_fetch(ft->cache, (uint64_t)(got < (int64_t)size ? got : (int64_t)size));
    if (f != 0) {
        svc_sha256_free(h);
        if (f == CN_BLOBIO_ESIZE) {
            cn__size_error(ft, got, &ft->err);
            rc = KL_EINVAL;
        } else if (f == CN_BLOBIO_ECANCELED) {
            rc = KL_ECANCELED;
        } else {
            kl_err_set(&ft->err, field, "%s: %s", field, msg);
        }
        goto cleanup;
    }
    if (svc_sha256_final_hex(h, hex) < 0 || strcmp(hex, id + 7) != 0) {
        kl_err_set(&ft->err, field, "%s: the bytes fetched for %s hash to sha256:%s", field, id,
                   hex);
        goto cleanup;
    }
    rc = 0;
cleanup:
    if (claim) {
        if (rc == 0)
            cn_blobcache_fill(ft->cache, claim, buf);
        else
            cn_blobcache_abandon(ft->cache, claim);
    }
    if (rc == 0) {
        ft->t->data = buf;
        ft->view->data = buf;
    } else {
        free(buf);
    }
    return rc;
}

int cn_blobio_fetch_inputs(const cn_blobio *io, cn_blobcache *cache, svc_kargs *ka,
                           const volatile int *cancel, kl_err *err)
{
    cn__fetch_task fts[KL_MAX_IO];
    void *tasks[KL_MAX_IO];
    int rcs[KL_MAX_IO], n = 0;
    const kl_kernel *k = ka->args.kernel;

    for (int i = 0; i < KL_MAX_IO && i < k->ninputs; i++) {
        svc_tensor *t = &ka->tensors[i];
        if (!t->blob[0] || t->data)
            continue;
        fts[n] = (cn__fetch_task){.io = io, .cache = cache, .name = k->inputs[i].name, .t = t,
                                  .view = &ka->views[i]};
        tasks[n] = &fts[n];
        n++;
    }
    if (n == 0)
        return 0;
    cn__run_all(cn__fetch_one, tasks, n, rcs, cancel);
    kl_err errs[KL_MAX_IO];
    for (int i = 0; i < n; i++)
        errs[i] = fts[i].err;
    int rc = cn__group_result(rcs, errs, n, cancel, err);
    if (rc != 0)
        for (int i = 0; i < n; i++) {
            free(fts[i].t->data);
            fts[i].t->data = NULL;
            fts[i].view->data = NULL;
        }
    return rc;
}

/* ---- outputs ----------------------------------------------------------- */

typedef struct cn__push_task {
    const cn_blobio *io;
    const char *name;
    kl_tensor *out;
    char *id;             /* CN_BLOB_ID_SIZE bytes */
    kl_err err;
} cn__push_task;

/* Sleeps ms unless *stop is raised first; 1 when it was. */
static int cn__nap(int64_t ms, const volatile int *stop)
{
    int64_t until = svc_now_mono_ms() + ms;
    while (svc_now_mono_ms() < until) {
        if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE))
            return 1;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE);
}

static int cn__push_one(void *arg, const volatile int *stop)
{
    cn__push_task *pt = arg;
    char msg[256] = "";
    int64_t backoff = CN_PUSH_BACKOFF_MS;

    if (!pt->io || !pt->io->push) {
        kl_err_set(&pt->err, NULL, "this node has no gateway to push outputs to");
        return KL_EBACKEND;
    }
    for (int attempt = 1;; attempt++) {
        int rc = pt->io->push(pt->io->cls, pt->out->data, kl_tensor_bytes(pt->out), stop, pt->id,
                              msg, sizeof msg);
        if (rc == 0) {
            free(pt->out->data);
            pt->out->data = NULL;
            return 0;
        }
        if (rc == CN_BLOBIO_ECANCELED)
            return KL_ECANCELED;
        svc_warn("output push failed output=%s attempt=%d message=\"%s\"", pt->name, attempt, msg);
        if (attempt == CN_PUSH_TRIES) {
            kl_err_set(&pt->err, NULL, "outputs.%s: %s (after %d tries)", pt->name, msg, attempt);
            return KL_EBACKEND;
        }
        if (cn__nap(backoff, stop))
            return KL_ECANCELED;
        backoff *= 4;
    }
}

int cn_blobio_push_outputs(const cn_blobio *io, const kl_kernel *k, kl_tensor *outs,
                           char ids[][CN_BLOB_ID_SIZE], size_t min_bytes,
                           const volatile int *cancel, kl_err *err)
{
    cn__push_task pts[KL_MAX_IO];
    void *tasks[KL_MAX_IO];
    int rcs[KL_MAX_IO], n = 0;

    for (int i = 0; i < KL_MAX_IO && i < k->noutputs; i++) {
        if (kl_tensor_bytes(&outs[i]) < min_bytes)
            continue;
        pts[n] = (cn__push_task){.io = io, .name = k->outputs[i].name, .out = &outs[i],
                                 .id = ids[i]};
        tasks[n] = &pts[n];
        n++;
    }
    if (n == 0)
        return 0;
    cn__run_all(cn__push_one, tasks, n, rcs, cancel);
    kl_err errs[KL_MAX_IO];
    for (int i = 0; i < n; i++)
        errs[i] = pts[i].err;
    return cn__group_result(rcs, errs, n, cancel, err);
}
