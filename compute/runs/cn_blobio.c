/* cn_blobio.c — fetch inputs and push outputs as raw bytes (cn_blobio.h). Each
 * blob of a run moves on a thread of its own (a run has at most KL_MAX_IO),
 * so transfers and their SHA-256 overlap; the worker thread watches the
 * run's cancel flag and stops them all when it is raised or one fails. */
#include "cn_blobio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cn_cred.h"
#include "svc_log.h"
#include "svc_sha256.h"
#include "svc_tensor.h"
#include "svc_util.h"

#define CN_STALL_DEFAULT_MS 30000
#define CN_PUSH_TRIES 3
#define CN_PUSH_BACKOFF_MS 250   /* then 4x that before the third try */
#define CN_WATCH_MS 100
#define CN_ADOPT_TIMEOUT_MS 30000

static int (*cn__pin)(void *p, size_t n);
static void (*cn__unpin)(void *p);

void cn_blobio_set_pinning(int (*pin)(void *p, size_t n), void (*unpin)(void *p))
{
    cn__pin = pin && unpin ? pin : NULL;
    cn__unpin = pin && unpin ? unpin : NULL;
}

static void cn__count(uint64_t *counter, uint64_t n)
{
    __atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

/* ---- the gateway transport --------------------------------------------- */

static long cn__stall(const cn_blobio_gateway *g)
{
    return g->stall_ms > 0 ? g->stall_ms : CN_STALL_DEFAULT_MS;
}

/* The gateway's base URL, without a trailing slash, then the path that fmt
 * formats. */
static void cn__url(const cn_blobio_gateway *g, char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void cn__url(const cn_blobio_gateway *g, char *out, size_t n, const char *fmt, ...)
{
    size_t len = strlen(g->url);
    while (len > 0 && g->url[len - 1] == '/')
        len--;
    int w = snprintf(out, n, "%.*s", (int)len, g->url);
    if (w < 0 || (size_t)w >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + w, n - (size_t)w, fmt, ap);
    va_end(ap);
}

/* The message of a JSON error reply, or "". */
static const char *cn__reply_message(const svc_response *r)
{
    const char *m = json_string_value(json_object_get(json_object_get(r->json, "error"), "message"));
    return m ? m : "";
}

/* GETs blob id from the gateway into buf[0..size) with the node's
 * credential: whole (on_chunk sees each piece), or its bytes off.. when
 * ranged. svc_http_get_into's or svc_http_get_range_into's rc. */
static int cn__gw_get(const cn_blobio_gateway *g, const char *id, int ranged, uint64_t off, void *buf,
                      size_t size, svc_chunk_fn on_chunk, void *chunk_cls, const volatile int *cancel,
                      svc_response *r)
{
    char url[1024], cred[CN_CRED_SIZE];
    cn__url(g, url, sizeof url, "/v1/cluster/blobs/%s", id);
    cn_cred_get(g->cred, cred);
    int rc = ranged ? svc_http_get_range_into(url, cred, off, buf, size, cn__stall(g), cancel, r)
                    : svc_http_get_into(url, cred, buf, size, on_chunk, chunk_cls, cn__stall(g),
                                        cancel, r);
    memset(cred, 0, sizeof cred);
    return rc;
}

static int cn__gw_fetch(void *cls, const char *id, void *buf, size_t size, svc_chunk_fn on_chunk,
                        void *chunk_cls, const volatile int *cancel, int64_t *got, char *msg,
                        size_t msglen)
{
    svc_response r;
    int ret = CN_BLOBIO_EFAIL;

    *got = 0;
    int rc = cn__gw_get(cls, id, 0, 0, buf, size, on_chunk, chunk_cls, cancel, &r);
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

static int cn__gw_fetch_range(void *cls, const char *id, uint64_t off, void *buf, size_t size,
                              const volatile int *cancel, char *msg, size_t msglen)
{
    svc_response r;
    int ret = CN_BLOBIO_EFAIL;

    int rc = cn__gw_get(cls, id, 1, off, buf, size, NULL, NULL, cancel, &r);
    if (rc == SVC_XFER_ABORTED && cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
        ret = CN_BLOBIO_ECANCELED;
    else if (rc < 0)
        snprintf(msg, msglen, "cannot fetch bytes %llu.. of %s from the gateway: %s",
                 (unsigned long long)off, id, r.error);
    else if (r.status != 206 || (size_t)r.length != size)
        snprintf(msg, msglen, "fetching %zu bytes of %s from %llu: the gateway answered %d with "
                 "%lld bytes %s", size, id, (unsigned long long)off, r.status, (long long)r.length,
                 cn__reply_message(&r));
    else
        ret = 0;
    svc_response_clear(&r);
    return ret;
}

static int cn__gw_push(void *cls, const char *job_id, int attempt, const void *data, size_t n,
                       const volatile int *cancel, char id[CN_BLOB_ID_SIZE], char *msg,
                       size_t msglen)
{
    const cn_blobio_gateway *g = cls;
    char url[1024], cred[CN_CRED_SIZE];
    svc_response r;
    int ret = CN_BLOBIO_EFAIL;

    /* the gateway takes it as an output of this run only */
    cn__url(g, url, sizeof url, "/v1/cluster/blobs?job_id=%.40s&attempt=%d", job_id, attempt);
    cn_cred_get(g->cred, cred);
    int rc = svc_http_post_raw(url, cred, "application/octet-stream", data, n, cn__stall(g),
                               cancel, &r);
    memset(cred, 0, sizeof cred);
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

static int cn__gw_adopt(void *cls, const char *job_id, int attempt, const char *id, uint64_t size,
                        char *msg, size_t msglen)
{
    const cn_blobio_gateway *g = cls;
    char url[1024], cred[CN_CRED_SIZE];
    svc_response r;
    int ret = CN_BLOBIO_EFAIL;

    cn__url(g, url, sizeof url, "/v1/cluster/blobs/%s?job_id=%.40s&attempt=%d", id, job_id,
            attempt);
    json_t *body = json_pack("{s:I}", "size", (json_int_t)size);
    cn_cred_get(g->cred, cred);
    int rc = body ? svc_http_call("PUT", url, cred, body, CN_ADOPT_TIMEOUT_MS, &r) : -1;
    memset(cred, 0, sizeof cred);
    json_decref(body);
    if (!body) {
        snprintf(msg, msglen, "out of memory");
        return CN_BLOBIO_EFAIL;
    }
    if (rc < 0) {
        snprintf(msg, msglen, "cannot record an output with the gateway: %s", r.error);
    } else if (r.status == 404 || r.status == 422) {
        snprintf(msg, msglen, "the gateway does not see %s in its blob directory: %s", id,
                 cn__reply_message(&r));
        ret = CN_BLOBIO_ENOTSHARED;
    } else if (r.status != 201 && r.status != 200) {
        snprintf(msg, msglen, "recording an output: the gateway answered %d %s", r.status,
                 cn__reply_message(&r));
    } else {
        ret = 0;
    }
    svc_response_clear(&r);
    return ret;
}

/* ---- the shared blob directory ------------------------------------------ */

static svc_bstore *cn__shared(const cn_blobio *io)
{
    return io ? __atomic_load_n(&io->shared, __ATOMIC_ACQUIRE) : NULL;
}

svc_bstore *cn_blobio_shared(const cn_blobio *io)
{
    return cn__shared(io);
}

const char *cn_blobio_shared_dir(const cn_blobio *io)
{
    svc_bstore *s = cn__shared(io);
    return s ? svc_bstore_dir(s) : NULL;
}

/* Opens dir as a store and keeps it in io->opened; NULL with err. */
static svc_bstore *cn__store_open(cn_blobio *io, const char *dir, char *err, size_t errlen)
{
    for (int i = 0; i < io->nopened; i++)
        if (strcmp(svc_bstore_dir(io->opened[i]), dir) == 0)
            return io->opened[i];
    if (io->nopened == (int)(sizeof io->opened / sizeof io->opened[0])) {
        snprintf(err, errlen, "too many blob directories announced");
        return NULL;
    }
    svc_bstore *s = svc_bstore_open(dir, 0, err, errlen);
    if (s)
        io->opened[io->nopened++] = s;
    return s;
}

int cn_blobio_share_path(cn_blobio *io, const char *dir, char *err, size_t errlen)
{
    svc_bstore *s = cn__store_open(io, dir, err, errlen);
    if (!s)
        return -1;
    __atomic_store_n(&io->shared, s, __ATOMIC_RELEASE);
    svc_info("shared blob directory %s (store %s): inputs mapped from it, outputs written to it",
             dir, svc_bstore_id(s));
    return 0;
}

void cn_blobio_share_gateway(cn_blobio *io, cn_share_mode mode, const char *dir, const char *id)
{
    svc_bstore *cur = cn__shared(io), *next = NULL;
    char err[512] = "";

    if (mode == CN_SHARE_NONE)
        return;
    if (mode == CN_SHARE_PATH) {
        /* keep to the path given while it is the gateway's store */
        next = io->nopened > 0 && id && strcmp(svc_bstore_id(io->opened[0]), id) == 0
                   ? io->opened[0] : NULL;
        if (!next && cur)
            svc_warn("--blob-dir %s is not the gateway's blob store (it announces %s at %s): "
                     "inputs and outputs go over HTTP", svc_bstore_dir(io->opened[0]),
                     id ? id : "none", dir ? dir : "-");
    } else {
        if (dir && id)
            next = cn__store_open(io, dir, err, sizeof err);
        if (next && strcmp(svc_bstore_id(next), id) != 0) {
            snprintf(err, sizeof err, "%s here is another store (%s, not %s)", dir,
                     svc_bstore_id(next), id);
            next = NULL;
        }
        if (next != cur || !io->share_told) {
            if (next)
                svc_info("shared blob directory %s (store %s, the gateway's): inputs mapped "
                         "from it, outputs written to it", dir, id);
            else
                svc_info("the gateway's blob directory is not shared with this host (%s): "
                         "inputs and outputs go over HTTP", err[0] ? err : "none announced");
        }
        io->share_told = 1;
    }
    __atomic_store_n(&io->shared, next, __ATOMIC_RELEASE);
}

void cn_blobio_share_close(cn_blobio *io)
{
    __atomic_store_n(&io->shared, NULL, __ATOMIC_RELEASE);
    for (int i = 0; i < io->nopened; i++)
        svc_bstore_close(io->opened[i]);
    io->nopened = 0;
}

void cn_blobio_gateway_init(cn_blobio *io, cn_blobio_gateway *gw)
{
    *io = (cn_blobio){.fetch = cn__gw_fetch, .fetch_range = cn__gw_fetch_range,
                      .push = cn__gw_push, .adopt = cn__gw_adopt, .cls = gw};
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

    if (n == 1) {
        rcs[0] = fn(tasks[0], cancel);
        return;
    }
    pthread_mutex_init(&g.mu, NULL);
    svc_cond_init_mono(&g.done);
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

/* Runs a group of tasks (cn__run_all) and gives its result: the first real
 * failure in input order, with that task's kl_err (the first member of
 * every task struct) in *err (a task stopped because another failed
 * reports KL_ECANCELED, which says nothing), or KL_ECANCELED when the run
 * was cancelled. */
static int cn__run_group(cn__task_fn fn, void **tasks, int n, const volatile int *cancel,
                         kl_err *err)
{
    int rcs[KL_MAX_IO];
    cn__run_all(fn, tasks, n, rcs, cancel);
    if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
        return KL_ECANCELED;
    for (int i = 0; i < n; i++)
        if (rcs[i] != 0 && rcs[i] != KL_ECANCELED) {
            *err = *(const kl_err *)tasks[i];
            return rcs[i];
        }
    for (int i = 0; i < n; i++)
        if (rcs[i] != 0)
            return rcs[i];
    return 0;
}

/* ---- inputs ------------------------------------------------------------ */

typedef struct cn__fetch_task {
    kl_err err;           /* first: cn__run_group reads it through the task */
    const cn_blobio *io;
    cn_blobcache *cache;
    const char *name;     /* the input's name in the catalog */
    svc_tensor *t;        /* the reference; gets its data on success */
    kl_tensor *view;
    int64_t lo, hi;       /* rows of dim 0 to fetch by range; lo < 0: all */
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

/* svc_tensor release of a fetched input buffer. */
static void cn__host_release(void *data, size_t nbytes)
{
    (void)nbytes;
    kl_host_free(data);
}

/* svc_tensor release of a mapped input. */
static void cn__unmap(void *data, size_t nbytes)
{
    if (!data)
        return;
    if (cn__unpin)
        cn__unpin(data);  /* a mapping that was never pinned answers an error, ignored */
    munmap(data, nbytes);
}

/* Maps input ft from the shared directory. 1 when mapped (or refused with
 * ft->err: the return code in *rc), 0 when the directory has no such file
 * and the caller fetches it. */
static int cn__map_one(cn__fetch_task *ft, int *rc)
{
    const cn_blobio *io = ft->io;
    size_t size = ft->t->nbytes;
    uint64_t have = 0;
    int fd = -1;

    if (svc_bstore_open_read(cn__shared(io), ft->t->blob, &fd, &have) != 0)
        return 0;
    if (have != size) {
        close(fd);
        cn__size_error(ft, (int64_t)have, &ft->err);
        *rc = KL_EINVAL;
        return 1;
    }
    void *p = NULL;
    if (size > 0) {
        /* Private and writable: a kernel may write its inputs, and its
         * writes must never reach the store. No MAP_POPULATE, which on such
         * a mapping would copy every page; the page tables are filled for
         * reading instead, in one call rather than a fault per few pages
         * while the kernel runs (it halves saxpy's time on 256 MiB here).
         * Older kernels without it get read-ahead advice. */
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            svc_warn("blob %s: cannot map it from the shared directory (%s); fetching it",
                     ft->t->blob, strerror(errno));
            close(fd);
            return 0;
        }
#ifdef MADV_POPULATE_READ
        if (madvise(p, size, MADV_POPULATE_READ) != 0)
#endif
            madvise(p, size, MADV_WILLNEED);
        if (cn__pin)
            cn__pin(p, size);  /* failure leaves it pageable: slower to copy, still right */
    }
    close(fd);
    ft->t->data = p;
    ft->t->release = cn__unmap;
    ft->view->data = p;
    if (io->stats) {
        cn__count(&io->stats->mapped_inputs, 1);
        cn__count(&io->stats->mapped_bytes, size);
    }
    *rc = 0;
    return 1;
}

/* ft's rows [lo, hi) of dim 0 by range into a buffer of their size; the
 * view shows those rows, the reference keeps its whole shape. */
static int cn__fetch_rows(cn__fetch_task *ft, const volatile int *stop)
{
    int64_t n = ft->t->ndim > 0 ? ft->t->shape[0] : 0;
    char field[64], msg[256] = "";
    snprintf(field, sizeof field, "inputs.%s", ft->name);
    if (ft->hi > n || ft->lo > ft->hi) {
        kl_err_set(&ft->err, field, "%s has %lld rows; this node's are %lld..%lld", field,
                   (long long)n, (long long)ft->lo, (long long)ft->hi);
        return KL_EINVAL;
    }
    size_t row = n > 0 ? ft->t->nbytes / (size_t)n : 0, size = (size_t)(ft->hi - ft->lo) * row;
    void *buf = kl_host_alloc(size ? size : 1);
    if (!buf) {
        kl_err_set(&ft->err, field, "%s: cannot allocate %zu bytes", field, size);
        return KL_EBACKEND;
    }
    int f = size ? ft->io->fetch_range(ft->io->cls, ft->t->blob, (uint64_t)ft->lo * row, buf, size,
                                       stop, msg, sizeof msg)
                 : 0;
    if (f != 0) {
        kl_host_free(buf);
        if (f == CN_BLOBIO_ECANCELED)
            return KL_ECANCELED;
        kl_err_set(&ft->err, field, "%s: %s", field, msg);
        return KL_EBACKEND;
    }
    if (ft->cache)
        cn_blobcache_count_fetch(ft->cache, size);
    svc_info("input %s: rows %lld..%lld of %lld fetched by range (%zu of %zu bytes)", ft->name,
             (long long)ft->lo, (long long)ft->hi, (long long)n, size, ft->t->nbytes);
    ft->t->data = buf;
    ft->t->nbytes = size;   /* what the release frees */
    ft->t->release = cn__host_release;
    ft->view->data = buf;
    ft->view->shape[0] = ft->hi - ft->lo;
    return 0;
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
    if (cn__shared(ft->io) && cn__map_one(ft, &rc))
        return rc;
    if (ft->lo >= 0 && ft->io && ft->io->fetch_range)
        return cn__fetch_rows(ft, stop);
    void *buf = size ? kl_host_alloc(size) : NULL;
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
        ft->t->release = cn__host_release;
        ft->view->data = buf;
    } else {
        kl_host_free(buf);
    }
    return rc;
}

int cn_blobio_fetch_inputs(const cn_blobio *io, cn_blobcache *cache, svc_kargs *ka,
                           const volatile int *cancel, kl_err *err)
{
    return cn_blobio_fetch_inputs_rows(io, cache, ka, -1, -1, cancel, err);
}

int cn_blobio_fetch_inputs_rows(const cn_blobio *io, cn_blobcache *cache, svc_kargs *ka,
                                int64_t lo, int64_t hi, const volatile int *cancel, kl_err *err)
{
    cn__fetch_task fts[KL_MAX_IO];
    void *tasks[KL_MAX_IO];
    int n = 0;
    const kl_kernel *k = ka->args.kernel;

    for (int i = 0; i < KL_MAX_IO && i < k->ninputs; i++) {
        svc_tensor *t = &ka->tensors[i];
        if (!t->blob[0] || t->data)
            continue;
        int rows = lo >= 0 && k->inputs[i].shard;
        fts[n] = (cn__fetch_task){.io = io, .cache = cache, .name = k->inputs[i].name, .t = t,
                                  .view = &ka->views[i], .lo = rows ? lo : -1, .hi = rows ? hi : -1};
        tasks[n] = &fts[n];
        n++;
    }
    if (n == 0)
        return 0;
    int rc = cn__run_group(cn__fetch_one, tasks, n, cancel, err);
    if (rc != 0)
        for (int i = 0; i < n; i++) {
            if (fts[i].t->release)
                fts[i].t->release(fts[i].t->data, fts[i].t->nbytes);
            else
                free(fts[i].t->data);
            fts[i].t->data = NULL;
            fts[i].t->release = NULL;
            fts[i].view->data = NULL;
        }
    return rc;
}

/* ---- outputs ----------------------------------------------------------- */

typedef struct cn__push_task {
    kl_err err;           /* first: cn__run_group reads it through the task */
    const cn_blobio *io;
    const char *job_id;   /* the run the output is of */
    int attempt;
    const char *name;
    kl_tensor *out;       /* only out->data is read: nbytes from it */
    size_t nbytes;
    int borrowed;         /* the caller's buffer: not freed once pushed */
    char *id;             /* CN_BLOB_ID_SIZE bytes */
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

/* Writes output pt into the shared directory and has the gateway record
 * it: 0 with pt->id, CN_BLOBIO_ENOTSHARED (the caller pushes it instead),
 * CN_BLOBIO_ECANCELED, or CN_BLOBIO_EFAIL with msg. Whatever happens, no
 * half blob is left under a real name: the bytes are linked only once all
 * of them are written and fsynced. */
static int cn__write_one(cn__push_task *pt, svc_bstore *store, const volatile int *stop,
                         char *msg, size_t msglen)
{
    const cn_blobio *io = pt->io;
    const char *p = pt->out->data;
    size_t n = pt->nbytes;
    char id[SVC_BLOB_ID_LEN];
    uint64_t size = 0;
    int rc;

    svc_bwriter *w = svc_bstore_write_begin(store);
    if (!w) {
        snprintf(msg, msglen, "cannot write into the shared blob directory %s: %s",
                 svc_bstore_dir(store), strerror(errno));
        return CN_BLOBIO_ENOTSHARED;
    }
    /* hashed on a second thread while this one writes: the output is
     * whole in memory already */
    if ((rc = svc_bwriter_append_buffer(w, p, n, stop)) != 0) {
        svc_bwriter_abort(w);
        if (rc == -ECANCELED) {
            snprintf(msg, msglen, "writing an output was stopped");
            return CN_BLOBIO_ECANCELED;
        }
        snprintf(msg, msglen, "writing an output into %s: %s", svc_bstore_dir(store),
                 strerror(-rc));
        return CN_BLOBIO_EFAIL;
    }
    if ((rc = svc_bwriter_commit(w, id, &size)) != 0) {
        svc_bwriter_abort(w);
        snprintf(msg, msglen, "storing an output in %s: %s", svc_bstore_dir(store),
                 strerror(-rc));
        return CN_BLOBIO_EFAIL;
    }
    rc = io->adopt ? io->adopt(io->cls, pt->job_id, pt->attempt, id, size, msg, msglen)
                   : CN_BLOBIO_ENOTSHARED;
    if (rc != 0) {
        svc_bwriter_abort(w);  /* the bytes stay under their name; nobody records them */
        return rc;
    }
    /* Recorded: put the bytes back if a retention pass took an older copy
     * of the same blob meanwhile (as the gateway does for an upload). */
    if ((rc = svc_bwriter_close(w)) != 0) {
        snprintf(msg, msglen, "output %s recorded but its bytes could not be put back: %s", id,
                 strerror(-rc));
        return CN_BLOBIO_EFAIL;
    }
    snprintf(pt->id, CN_BLOB_ID_SIZE, "%s", id);
    return 0;
}

static int cn__push_one(void *arg, const volatile int *stop)
{
    cn__push_task *pt = arg;
    char msg[256] = "";
    int64_t backoff = CN_PUSH_BACKOFF_MS;
    svc_bstore *shared = cn__shared(pt->io);
    size_t n = pt->nbytes;

    if (!pt->io || !pt->io->push) {
        kl_err_set(&pt->err, NULL, "this node has no gateway to push outputs to");
        return KL_EBACKEND;
    }
    for (int attempt = 1;; attempt++) {
        int rc;
        if (shared) {
            rc = cn__write_one(pt, shared, stop, msg, sizeof msg);
            if (rc == CN_BLOBIO_ENOTSHARED) {
                /* the gateway does not see this directory: push instead */
                svc_warn("output %s: %s; pushing it over HTTP", pt->name, msg);
                shared = NULL;
                rc = pt->io->push(pt->io->cls, pt->job_id, pt->attempt, pt->out->data, n, stop,
                                  pt->id, msg, sizeof msg);
                if (rc == 0 && pt->io->stats) {
                    cn__count(&pt->io->stats->pushed_outputs, 1);
                    cn__count(&pt->io->stats->pushed_bytes, n);
                }
            } else if (rc == 0 && pt->io->stats) {
                cn__count(&pt->io->stats->written_outputs, 1);
                cn__count(&pt->io->stats->written_bytes, n);
            }
        } else {
            rc = pt->io->push(pt->io->cls, pt->job_id, pt->attempt, pt->out->data, n, stop, pt->id,
                              msg, sizeof msg);
            if (rc == 0 && pt->io->stats) {
                cn__count(&pt->io->stats->pushed_outputs, 1);
                cn__count(&pt->io->stats->pushed_bytes, n);
            }
        }
        if (rc == 0) {
            if (!pt->borrowed) {
                kl_host_free(pt->out->data);
                pt->out->data = NULL;
            }
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

int cn_blobio_push_outputs(const cn_blobio *io, const char *job_id, int attempt,
                           const kl_kernel *k, kl_tensor *outs, char ids[][CN_BLOB_ID_SIZE],
                           size_t min_bytes, const volatile int *cancel, kl_err *err)
{
    cn__push_task pts[KL_MAX_IO];
    void *tasks[KL_MAX_IO];
    int n = 0;

    for (int i = 0; i < KL_MAX_IO && i < k->noutputs; i++) {
        if (kl_tensor_bytes(&outs[i]) < min_bytes)
            continue;
        pts[n] = (cn__push_task){.io = io, .job_id = job_id, .attempt = attempt,
                                 .name = k->outputs[i].name, .out = &outs[i],
                                 .nbytes = kl_tensor_bytes(&outs[i]), .id = ids[i]};
        tasks[n] = &pts[n];
        n++;
    }
    if (n == 0)
        return 0;
    return cn__run_group(cn__push_one, tasks, n, cancel, err);
}

int cn_blobio_push_buffers(const cn_blobio *io, const char *job_id, int attempt, int n,
                           const char *const *names,
                           const void *const *data, const size_t *sizes,
                           char ids[][CN_BLOB_ID_SIZE], const volatile int *cancel, kl_err *err)
{
    /* at most KL_MAX_IO at a time: cn__run_all's slots */
    for (int base = 0; base < n; base += KL_MAX_IO) {
        cn__push_task pts[KL_MAX_IO];
        kl_tensor views[KL_MAX_IO];
        void *tasks[KL_MAX_IO];
        int k = n - base < KL_MAX_IO ? n - base : KL_MAX_IO;
        for (int i = 0; i < k; i++) {
            /* an empty buffer still needs an address for the transfer */
            views[i] = (kl_tensor){.data = sizes[base + i] ? (void *)data[base + i] : (void *)""};
            pts[i] = (cn__push_task){.io = io, .job_id = job_id, .attempt = attempt,
                                     .name = names[base + i], .out = &views[i],
                                     .nbytes = sizes[base + i], .borrowed = 1,
                                     .id = ids[base + i]};
            tasks[i] = &pts[i];
        }
        int rc = cn__run_group(cn__push_one, tasks, k, cancel, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}
