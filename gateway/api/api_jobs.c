/* api_jobs.c — the public job API: submit, read, list, result, cancel.
 * A job exists once its row is committed; only then is its id returned.
 * Every query is scoped by the caller's tenant, so another tenant's job
 * answers exactly like one that does not exist. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "blob.h"
#include "svc_bstore.h"
#include "committer.h"
#include "eta.h"
#include "idem.h"
#include "jobcache.h"
#include "events.h"
#include "lease.h"
#include "gw_limits.h"
#include "metrics.h"
#include "quota.h"
#include "waits.h"
#include "request.h"
#include "resolver.h"
#include "webhook_net.h"
#include "scheduler.h"
#include "gw_task.h"
#include "svc_client.h"
#include "svc_json.h"
#include "svc_log.h"
#include "svc_npy.h"
#include "svc_sha256.h"
#include "svc_tstream.h"
#include "svc_util.h"

/* An inline tensor (JSON data or b64) of at most this many bytes is kept
 * in its job's job_inputs row (an {"offset","nbytes"} entry into the row's
 * bytea), a larger one becomes a blob file. Small inputs are the common
 * case of small jobs: in the row they cost a few KiB more in the batch's one
 * statement and its one WAL flush, where a file costs a write, an fsync and
 * a directory entry per input (bench/: saxpy n=1024, two 4 KiB inputs,
 * submits/s in README's "inline vs blobs"). 64 KiB stays well below the
 * size where PostgreSQL's TOAST and the dispatch's base64 start to weigh,
 * and a job that wants its inputs cached on the node by hash can always
 * upload them as blobs. */
#define GW_INLINE_INPUT_MAX (64 * 1024)

/* How many committer threads commit submits, each with its own PostgreSQL
 * connection: two, so that one batch is being built and answered while the
 * other waits for its WAL flush. */
#define SUBMIT_COMMIT_THREADS 2
/* Most submits per batch: one statement and one Redis command each. */
#define SUBMIT_BATCH_MAX 256
/* Most blobs one job names: a kernel's inputs, a task's inputs and files. */
#define SUBMIT_BLOBS_MAX (GW_TASK_BLOBS_MAX > KL_MAX_IO ? GW_TASK_BLOBS_MAX : KL_MAX_IO)

/* One submit from validation to its answer: built by the handler, then
 * owned by the committer (its request suspended) until submit_done. */
typedef struct submit {
    gw_commit_item item;           /* first: the committer hands this back */
    svc_req *req;
    gw_app *app;
    gw_job_new row;                /* points into the fields below */
    gw_blob b;                     /* meta of every input, bytes of the inline ones */
    svc_bwriter *w[SUBMIT_BLOBS_MAX]; /* blob files written by this submit */
    int nw;
    char blob_id[SUBMIT_BLOBS_MAX][SVC_BLOB_ID_LEN];
    const char *blob_ids[SUBMIT_BLOBS_MAX];
    uint64_t blob_sizes[SUBMIT_BLOBS_MAX];
    char *params_s, *labels_s, *meta_s;
    char *task_s, *task_run_s;     /* a task's object as shown and as leased; NULL: a kernel */
    char *webhook;                 /* NULL: none */
    char webhook_host[256];        /* its host when a name: resolved before the commit */
    char webhook_events[64];
    char backend[8];
    json_t *job;                   /* the job object's members known at submit; the rest once committed */
    int wait_s;                    /* Prefer: wait=N: answer when the job ends (or N s) */
    int64_t key_id;                /* the caller's API key: a wait ends (401) once it is revoked */
    char idem_key[GW_IDEM_KEY_MAX + 1]; /* Idempotency-Key; "" when none */
    char idem_hash[65];
} submit;

/* Frees s (the writers must have been ended by submit_blobs_end). */
static void submit_free(submit *s)
{
    if (!s)
        return;
    gw_blob_free(&s->b);
    free(s->params_s);
    free(s->labels_s);
    free(s->meta_s);
    free(s->task_s);
    free(s->task_run_s);
    free(s->webhook);
    json_decref(s->job);
    free(s);
}

/* Ends the writers of a submit: closed (bytes put back if retention took
 * an older copy) once the job is recorded, else dropped. */
static void submit_blobs_end(submit *s, int recorded)
{
    for (int i = 0; i < s->nw; i++) {
        if (!recorded) {
            svc_bwriter_abort(s->w[i]);
        } else if (svc_bwriter_close(s->w[i]) != 0) {
            svc_error("blobs: an input recorded for a job could not be put back in the store");
        }
    }
    s->nw = 0;
}

/* Notes blob id of size bytes as one the job references. */
static void submit_blob_ref(submit *s, const char *id, uint64_t size)
{
    int k = s->row.nblobs++;
    snprintf(s->blob_id[k], sizeof s->blob_id[k], "%s", id);
    s->blob_ids[k] = s->blob_id[k];
    s->blob_sizes[k] = size;
}

/* The inline inputs of a submit that become blobs (larger than
 * GW_INLINE_INPUT_MAX) count toward the tenant's blob quota: those it
 * does not hold already (by their hash) must fit in what it has left,
 * checked before a byte is written. 0, or -1 after replying (413
 * quota_exceeded, 503). */
static int inputs_fit_quota(svc_req *req, int64_t tenant_id, const gw_job_req *jr)
{
    gw_app *app = svc_req_app(req);
    char idbuf[KL_MAX_IO][SVC_BLOB_ID_LEN];
    const char *ids[KL_MAX_IO];
    uint64_t sizes[KL_MAX_IO], need = 0, used = 0;
    int n = 0;
    if (gw_quota_bytes(app) == 0)
        return 0;
    for (int i = 0; i < jr->kernel->ninputs; i++) {
        const svc_tensor *t = &jr->ka.tensors[i];
        char hex[65];
        svc_sha256 *h;
        if (!jr->ka.args.inputs[i] || t->blob[0] != '\0' || t->nbytes <= GW_INLINE_INPUT_MAX)
            continue;
        int bad = !(h = svc_sha256_new()) || svc_sha256_update(h, t->data, t->nbytes) != 0;
        if (bad)
            svc_sha256_free(h);
        else
            bad = svc_sha256_final_hex(h, hex) != 0; /* frees h */
        if (bad)
            return svc_reply_error(req, 500, "internal", NULL, NULL, "cannot hash an input"), -1;
        snprintf(idbuf[n], sizeof idbuf[n], "sha256:%s", hex);
        ids[n] = idbuf[n];
        sizes[n++] = t->nbytes;
    }
    if (n == 0)
        return 0;
    if (gw_store_blobs_need(app->store, tenant_id, NULL, ids, sizes, n, &need, &used) != 0)
        return gw_reply_unavailable(req, "PostgreSQL"), -1;
    if (need > gw_quota_room(app, used))
        return gw_reply_quota(req, app, used, "the job's inline inputs over %d KiB are stored as "
                              "blobs and need %llu bytes more", GW_INLINE_INPUT_MAX >> 10,
                              (unsigned long long)need), -1;
    return 0;
}

/* The inputs of a submit: an inline tensor (data, b64) of at most
 * GW_INLINE_INPUT_MAX bytes is packed into s->b for the job's row; a larger
 * one is written to the blob store, its writer kept open until the job that
 * references it is recorded; a {"blob"} tensor must be one of the tenant's
 * with the size its shape implies. Each gets an entry in s->b.meta.
 * 0, or -1 after replying (422 naming the input, 503, 500/507). */
static int inputs_prepare(svc_req *req, int64_t tenant_id, const gw_job_req *jr, submit *s)
{
    gw_app *app = svc_req_app(req);
    if (inputs_fit_quota(req, tenant_id, jr) != 0)
        return -1;
    for (int i = 0; i < jr->kernel->ninputs; i++) {
        const svc_tensor *t = &jr->ka.tensors[i];
        const char *name = jr->kernel->inputs[i].name;
        char id[SVC_BLOB_ID_LEN];
        uint64_t size = 0;
        int rc;
        if (!jr->ka.args.inputs[i])
            continue;
        if (t->blob[0] == '\0' && t->nbytes <= GW_INLINE_INPUT_MAX) {
            if (gw_blob_add(&s->b, name, t) != 0) {
                svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
                return -1;
            }
            continue;
        }
        if (t->blob[0] != '\0') {
            rc = gw_store_blob_get(app->store, tenant_id, t->blob, &size);
            if (rc == -EIO)
                return gw_reply_unavailable(req, "PostgreSQL"), -1;
            if (rc == 0 && size != t->nbytes)
                rc = -EMSGSIZE;
            if (rc != 0) {
                char field[64];
                snprintf(field, sizeof field, "inputs.%s", name);
                if (rc == -EMSGSIZE)
                    svc_reply_error(req, 422, "invalid_argument", field, NULL,
                                    "%s: blob %s has %llu bytes; its shape of %s needs %zu", field,
                                    t->blob, (unsigned long long)size, svc_dtype_name(t->dtype),
                                    t->nbytes);
                else
                    svc_reply_error(req, 422, "invalid_argument", field, NULL,
                                    "%s: no such blob %s (upload it with POST /v1/blobs)", field, t->blob);
                return -1;
            }
            snprintf(id, sizeof id, "%s", t->blob);
        } else {
            svc_bwriter *w = svc_bstore_write_begin(app->blobs);
            rc = w ? svc_bwriter_append(w, t->data, t->nbytes) : -errno;
            if (w)
                s->w[s->nw++] = w;
            if (rc == 0)
                rc = svc_bwriter_commit(w, id, &size);
            if (rc != 0) {
                svc_error("blobs: cannot store input %s of a submit: %s", name, strerror(-rc));
                svc_reply_error(req, rc == -ENOSPC ? 507 : 500,
                                rc == -ENOSPC ? "insufficient_storage" : "internal", NULL, NULL,
                                "the blob store could not take input %s: %s", name, strerror(-rc));
                return -1;
            }
        }
        if (gw_blob_add_ref(&s->b, name, t, id) != 0) {
            svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
            return -1;
        }
        submit_blob_ref(s, id, t->nbytes);
    }
    if (!s->b.meta && !(s->b.meta = json_array())) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return -1;
    }
    return 0;
}

/* A task's blobs (task.h): those it names must be the tenant's, of the
 * size their shape needs (a file's or a plain input's: any, written into
 * its entry); its large inline inputs are written to the blob store
 * (counted toward the tenant's quota first, as a kernel's), their writers
 * kept open until the job is recorded. Every blob is referenced by the job.
 * 0, or -1 after replying (422 naming the field, 413, 503, 500/507). */
static int task_blobs_prepare(svc_req *req, int64_t tenant_id, gw_task_req *t, submit *s)
{
    gw_app *app = svc_req_app(req);
    for (int i = 0; i < t->nblobs; i++) {
        gw_task_blob *b = &t->blobs[i];
        uint64_t size = 0;
        int rc = gw_store_blob_get(app->store, tenant_id, b->id, &size);
        if (rc == -EIO)
            return gw_reply_unavailable(req, "PostgreSQL"), -1;
        if (rc != 0)
            return svc_reply_error(req, 422, "invalid_argument", b->field, NULL,
                                   "%s: no such blob %s (upload it with POST /v1/blobs)", b->field,
                                   b->id), -1;
        if (b->size >= 0 && size != (uint64_t)b->size)
            return svc_reply_error(req, 422, "invalid_argument", b->field, NULL,
                                   "%s: blob %s has %llu bytes; its dtype and shape need %lld",
                                   b->field, b->id, (unsigned long long)size, (long long)b->size), -1;
        json_object_set_new(b->entry, "size", json_integer((json_int_t)size));
        submit_blob_ref(s, b->id, size);
    }
    if (t->nbig > 0 && gw_quota_bytes(app) > 0) {
        char idbuf[SVC_TASK_INPUTS_MAX][SVC_BLOB_ID_LEN];
        const char *ids[SVC_TASK_INPUTS_MAX];
        uint64_t sizes[SVC_TASK_INPUTS_MAX], need = 0, used = 0;
        for (int i = 0; i < t->nbig; i++) {
            char hex[65];
            svc_sha256 *h = svc_sha256_new();
            int bad = !h || svc_sha256_update(h, t->big[i].data, t->big[i].len) != 0;
            if (bad)
                svc_sha256_free(h);
            else
                bad = svc_sha256_final_hex(h, hex) != 0;
            if (bad)
                return svc_reply_error(req, 500, "internal", NULL, NULL, "cannot hash an input"), -1;
            snprintf(idbuf[i], sizeof idbuf[i], "sha256:%s", hex);
            ids[i] = idbuf[i];
            sizes[i] = t->big[i].len;
        }
        if (gw_store_blobs_need(app->store, tenant_id, NULL, ids, sizes, t->nbig, &need, &used) != 0)
            return gw_reply_unavailable(req, "PostgreSQL"), -1;
        if (need > gw_quota_room(app, used))
            return gw_reply_quota(req, app, used, "the task's inline inputs over %d KiB are stored "
                                  "as blobs and need %llu bytes more", GW_TASK_INLINE_INPUT_MAX >> 10,
                                  (unsigned long long)need), -1;
    }
    for (int i = 0; i < t->nbig; i++) {
        char id[SVC_BLOB_ID_LEN];
        uint64_t size = 0;
        svc_bwriter *w = svc_bstore_write_begin(app->blobs);
        int rc = w ? svc_bwriter_append(w, t->big[i].data, t->big[i].len) : -errno;
        if (w)
            s->w[s->nw++] = w;
        if (rc == 0)
            rc = svc_bwriter_commit(w, id, &size);
        if (rc != 0) {
            svc_error("blobs: cannot store %s of a submit: %s", t->big[i].field, strerror(-rc));
            return svc_reply_error(req, rc == -ENOSPC ? 507 : 500,
                                   rc == -ENOSPC ? "insufficient_storage" : "internal", NULL, NULL,
                                   "the blob store could not take %s: %s", t->big[i].field,
                                   strerror(-rc)), -1;
        }
        json_object_set_new(t->big[i].entry, "blob", json_string(id));
        json_object_set_new(t->big[i].entry, "size", json_integer((json_int_t)size));
        submit_blob_ref(s, id, size);
    }
    /* the job's input list says what the task reads ({name, nbytes}, no
     * bytes: those are in its lease form), so that its usage counts
     * bytes_in as a kernel's does */
    if (!(s->b.meta = json_array()))
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory"), -1;
    static const char *const lists[] = {"inputs", "files"};
    for (int l = 0; l < 2; l++) {
        const char *name;
        json_t *e;
        json_object_foreach(json_object_get(t->run, lists[l]), name, e) {
            const json_t *size = json_object_get(e, "size"), *b64 = json_object_get(e, "b64");
            json_int_t n = size ? json_integer_value(size)
                                : (json_int_t)svc_b64_decoded_len(json_string_value(b64),
                                                                  json_string_length(b64));
            char entry[320];
            snprintf(entry, sizeof entry, "%s.%s", lists[l], name);
            if (json_array_append_new(s->b.meta, json_pack("{s:s, s:I}", "name", entry, "nbytes",
                                                           n)) != 0)
                return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory"), -1;
        }
    }
    return 0;
}

/* The tenant may run this task: its image matches the tenant's patterns
 * (or, where the tenant has none, --task-images), and it asks egress only
 * where the tenant is allowed it. 0, or -1 after replying 422/503. */
static int task_allowed(svc_req *req, int64_t tenant_id, const gw_task_req *t)
{
    gw_app *app = svc_req_app(req);
    char *images = NULL;
    int egress = 0, has = 0;
    if (gw_store_tenant_tasks(app->store, tenant_id, &images, &has, &egress) != 0)
        return gw_reply_unavailable(req, "PostgreSQL"), -1;
    const char *list = has ? images : app->cfg.task_images;
    int ok = svc_task_image_allowed(list, t->image);
    if (!ok) {
        svc_reply_error(req, 422, "invalid_argument", "task.image", NULL,
                        "image %.255s is not allowed for this tenant%s%s (GET /v1/images lists what "
                        "is)", t->image, list && *list ? "; allowed: " : "; no image is allowed yet",
                        list && *list ? list : "");
    } else if (t->egress && !egress) {
        ok = 0;
        svc_reply_error(req, 422, "invalid_argument", "task.network", NULL,
                        "network egress is not allowed for this tenant (an operator allows it with "
                        "POST /v1/tenants {\"task_egress\": true})");
    }
    free(images);
    return ok ? 0 : -1;
}

/* jsonb's order of object keys: shorter first, then bytewise. */
static int jsonb_key_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t lx = strlen(x), ly = strlen(y);
    return lx != ly ? (lx < ly ? -1 : 1) : memcmp(x, y, lx);
}

/* A copy of labels with its keys in the order PostgreSQL's jsonb prints
 * them, so the 202's job reads exactly like a later GET. New reference. */
static json_t *labels_as_stored(json_t *labels)
{
    const char *keys[GW_MAX_LABELS];
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v) {
        if (n == GW_MAX_LABELS)
            return json_deep_copy(labels);
        keys[n++] = k;
    }
    qsort(keys, n, sizeof keys[0], jsonb_key_cmp);
    json_t *o = json_object();
    for (size_t i = 0; o && i < n; i++)
        json_object_set(o, keys[i], json_object_get(labels, keys[i]));
    return o;
}

/* resources as the job object echoes them: nodes always, gpu_memory_gb
 * (and a task's memory_gb, cpus) when given. New reference, NULL on
 * ENOMEM. */
static json_t *resources_json(const gw_job_req *jr)
{
    json_t *o = json_pack("{s:s, s:i, s:i}", "backend", jr->backend, "gpus", jr->gpus, "nodes",
                          jr->nodes);
    int bad = !o;
    if (!bad && jr->gpu_memory_gb > 0)
        bad = json_object_set_new(o, "gpu_memory_gb", json_real(jr->gpu_memory_gb)) != 0;
    if (!bad && jr->task && jr->memory_gb > 0)
        bad = json_object_set_new(o, "memory_gb",
                                  json_real((double)llround(jr->memory_gb * 1073741824.0) /
                                            1073741824.0)) != 0;
    if (!bad && jr->task && jr->cpus > 0)
        bad = json_object_set_new(o, "cpus", json_real(jr->cpus)) != 0;
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The members of a queued job's object that kowloon_job_json
 * (sql/objects.sql) writes; submit_done adds the timestamps and "error" once
 * PostgreSQL has given created_at, and puts them in the order that
 * kowloon_job_json declares (app->job_fields). New reference, NULL on
 * ENOMEM. */
static json_t *job_json_queued(const submit *s, const gw_job_req *jr, json_t *params,
                               json_t *task)
{
    char logs[64];
    snprintf(logs, sizeof logs, "/v1/jobs/%s/logs", s->row.id);
    return json_pack("{s:s, s:s, s:s, s:o, s:O, s:O, s:o, s:i, s:o, s:i, s:i, s:i, s:i, s:b, s:n, s:n,"
                     " s:n, s:{}, s:n, s:n, s:n, s:o}",
                     "id", s->row.id, "state", "queued", "kind", task ? "task" : "kernel",
                     "kernel", task ? json_null() : json_string(jr->kernel->name),
                     "task", task ? task : json_null(), "params", params ? params : json_null(),
                     "labels", labels_as_stored(jr->labels),
                     "priority", jr->priority, "resources", resources_json(jr),
                     "timeout_s", jr->timeout_s, "max_attempts", jr->max_attempts,
                     "attempts", 0, "preemptions", 0, "cancel_requested", 0, "node", "placement", "backend", "info",
                     "progress", "usage", "exit_code", "logs",
                     task ? json_string(logs) : json_null());
}

/* committer op: one statement for the whole batch. */
static int submit_commit(void *arg, gw_commit_item *const *items, int n)
{
    gw_app *app = arg;
    gw_job_new *rows[n];
    for (int i = 0; i < n; i++)
        rows[i] = &((submit *)items[i])->row;
    int rc = gw_store_jobs_insert(app->store, rows, n);
    if (rc == 0)
        gw_events_written(app->events);
    return rc;
}

/* committer op: the batch's committed jobs go to the ready queue in one
 * Redis command, and the scheduler is woken once. */
static void submit_committed(void *arg, gw_commit_item *const *items, int n)
{
    gw_app *app = arg;
    gw_queued q[n];
    int nq = 0, added = 0;
    for (int i = 0; i < n; i++) {
        const submit *s = (const submit *)items[i];
        if (items[i]->rc != 0 || s->row.idem != GW_IDEM_NEW)
            continue;
        gw_metrics_submitted(app->metrics, s->row.kernel);
        q[nq] = (gw_queued){.seq = s->row.seq, .priority = s->row.priority, .gpus = s->row.gpus,
                            .nodes = s->row.nodes, .gpu_mem_mb = gw_gpu_mem_mb(s->row.gpu_memory_gb),
                            .timeout_s = s->row.timeout_s, .tenant_id = s->row.tenant_id,
                            .image = s->row.image_key};
        memcpy(q[nq].id, s->row.id, sizeof q[nq].id);
        snprintf(q[nq].backend, sizeof q[nq].backend, "%s", s->row.backend);
        nq++;
    }
    if (nq == 0)
        return;
    /* Committed: the jobs are safe. If Redis fails now the reconciler
     * enqueues them from PostgreSQL within a few seconds. */
    if (gw_queue_push_missing(app->queue, q, nq, &added) != 0)
        svc_warn("%d job(s) committed but not enqueued (Redis): the reconciler will enqueue them", nq);
    gw_sched_wake(app->sched);
}

/* A submit whose Idempotency-Key names the job of an earlier request with
 * the same fingerprint: that job as it is now, 202 while it has not ended
 * (the first answer's status, with its Location), 200 once it has; Prefer:
 * wait holds the answer as for a new job. Idempotent-Replayed says so.
 * Replays are rare (a client's retry), so the job is read here, on the
 * committer's thread, rather than returned by every batch's statement. */
static void submit_replay(submit *s)
{
    svc_req *req = s->req;
    const char *id = s->row.idem_job;
    svc_reply_header(req, "Idempotent-Replayed", "true");
    json_t *job;
    int rc = gw_store_job_get(s->app->store, s->row.tenant_id, id, &job);
    if (rc == 0 && s->wait_s > 0) {
        json_decref(job);
        gw_waits_add(s->app->waits, req, 1, s->row.tenant_id, s->key_id, id, s->wait_s, 202);
        return;
    }
    if (rc == -ENOENT) {
        svc_reply_error(req, 409, "conflict", "Idempotency-Key", json_pack("{s:s}", "job_id", id),
                        "the job this Idempotency-Key made (%s) was deleted; send a new key for a "
                        "new job", id);
    } else if (rc != 0) {
        gw_reply_store_error(req, rc, "job");
    } else {
        const char *st = json_string_value(json_object_get(job, "state"));
        int pending = st && (strcmp(st, "queued") == 0 || strcmp(st, "running") == 0);
        char loc[64];
        snprintf(loc, sizeof(loc), "/v1/jobs/%s", id);
        svc_reply_header(req, "Location", loc);
        if (s->wait_s == 0)
            svc_reply_header(req, "Preference-Applied", "wait=0");
        svc_reply_json(req, pending ? 202 : 200, job);
    }
    svc_req_resume(req);
}

/* committer op: answers the submit (202 with the job, the job its
 * Idempotency-Key names, or an error) and gives the request back to the
 * server; frees s. */
static void submit_done(void *arg, gw_commit_item *it)
{
    (void)arg;
    submit *s = (submit *)it;
    svc_req *req = s->req;
    int idem = it->rc == 0 ? s->row.idem : GW_IDEM_NEW;
    submit_blobs_end(s, it->rc == 0 && idem == GW_IDEM_NEW);
    if (idem == GW_IDEM_REPLAY) {
        submit_replay(s);
        submit_free(s);
        return;
    }
    if (idem == GW_IDEM_REUSED) {
        svc_reply_error(req, 422, "idempotency_key_reused", "Idempotency-Key",
                        json_pack("{s:s}", "job_id", s->row.idem_job),
                        "this Idempotency-Key was used within the last 24 hours for another "
                        "request (job %s); send a new key for a new job", s->row.idem_job);
        svc_req_resume(req);
        submit_free(s);
        return;
    }
    if (it->rc == 0 && s->wait_s > 0) {
        /* Prefer: wait=N: the request, still suspended, waits for the job's
         * end (or N seconds: then this 202, as it would have been). */
        gw_waits_add(s->app->waits, req, 1, s->row.tenant_id, s->key_id, s->row.id, s->wait_s,
                     202);
        submit_free(s);
        return;
    }
    if (it->rc == 0 && s->wait_s == 0)
        svc_reply_header(req, "Preference-Applied", "wait=0");
    if (it->rc == 0) {
        char ts[32], loc[64];
        svc_time_format(s->row.created_ms, ts, sizeof ts);
        json_object_set_new(s->job, "created_at", json_string(ts));
        json_object_set_new(s->job, "started_at", json_null());
        json_object_set_new(s->job, "finished_at", json_null());
        json_object_set_new(s->job, "error", json_null());
        json_t *job = svc_json_ordered(s->job, s->app->job_fields);
        if (job) {
            snprintf(loc, sizeof(loc), "/v1/jobs/%s", s->row.id);
            svc_reply_header(req, "Location", loc);
            svc_reply_json(req, 202, job);
        } else {
            svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        }
    } else if (it->rc == -EIO || it->rc == -EAGAIN) {
        gw_reply_unavailable(req, "PostgreSQL");
    } else if (it->rc == -ENOMEM) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    } else {
        svc_reply_error(req, 500, "internal", NULL, NULL,
                        "PostgreSQL refused to record the job (%d); see the gateway's log", it->rc);
    }
    svc_req_resume(req);
    submit_free(s);
}

/* Starts app->committer with the three ops above (api.h). */
int gw_api_jobs_start(gw_app *app)
{
    static const gw_committer_ops ops = {
        .commit = submit_commit, .committed = submit_committed, .done = submit_done};
    app->committer = gw_committer_start(&ops, app, SUBMIT_COMMIT_THREADS, SUBMIT_BATCH_MAX);
    return app->committer ? 0 : -ENOMEM;
}

/* Answers what is still queued, then stops the committer (api.h). */
void gw_api_jobs_stop(gw_app *app)
{
    gw_committer_stop(app->committer);
    app->committer = NULL;
}

/* Fills s's row and job object from a validated request (t: its task,
 * NULL for a kernel job); 0 or -ENOMEM. */
static int submit_build(submit *s, const gw_caller *who, const gw_job_req *jr, const gw_task_req *t)
{
    json_t *params = t ? NULL : svc_kargs_params_json(&jr->ka.args);
    s->params_s = t ? strdup("null") : params ? json_dumps(params, JSON_COMPACT) : NULL;
    s->labels_s = json_dumps(jr->labels, JSON_COMPACT);
    s->meta_s = json_dumps(s->b.meta, JSON_COMPACT);
    snprintf(s->backend, sizeof s->backend, "%s", jr->backend);
    int rc = s->params_s && s->labels_s && s->meta_s && svc_uuid_v4(s->row.id) == 0 ? 0 : -ENOMEM;
    if (t && !rc) {
        s->task_s = json_dumps(t->echo, JSON_COMPACT);
        s->task_run_s = json_dumps(t->run, JSON_COMPACT);
        rc = s->task_s && s->task_run_s ? 0 : -ENOMEM;
        s->row.task_json = s->task_s;
        s->row.task_run_json = s->task_run_s;
        s->row.image_key = gw_task_image_key(t->image);
    }
    s->row.tenant_id = who->tenant_id;
    s->row.kernel = t ? "task" : jr->kernel->name;
    s->row.params_json = s->params_s;
    s->row.priority = jr->priority;
    s->row.timeout_s = jr->timeout_s;
    s->row.max_attempts = jr->max_attempts;
    s->row.gpus = jr->gpus;
    s->row.nodes = jr->nodes;
    s->row.gpu_memory_gb = jr->gpu_memory_gb;
    s->row.backend = s->backend;
    s->row.labels_json = s->labels_s;
    s->row.inputs_meta = s->meta_s;
    s->row.inputs_data = s->b.data;
    s->row.inputs_len = s->b.len;
    s->row.blob_ids = s->blob_ids;
    s->row.blob_sizes = s->blob_sizes;
    if (jr->webhook && !rc) {
        s->webhook = strdup(jr->webhook);
        snprintf(s->webhook_events, sizeof s->webhook_events, "%s", jr->webhook_events);
        s->row.webhook = s->webhook;
        s->row.webhook_events = s->webhook_events;
        rc = s->webhook ? 0 : -ENOMEM;
    }
    if (!rc && s->idem_key[0]) {
        s->row.idem_key = s->idem_key;
        s->row.idem_hash = s->idem_hash;
        if (gw_idem_fingerprint(&s->row, s->idem_hash) != 0)
            rc = -ENOMEM;
    }
    if (!rc && !(s->job = job_json_queued(s, jr, params, t ? json_deep_copy(t->echo) : NULL)))
        rc = -ENOMEM;
    json_decref(params);
    return rc;
}

/* gw_resolve's answer for a suspended submit whose webhook names a host:
 * every address allowed hands it to the committer, anything else answers
 * 422 naming the webhook (503 when the gateway stops) and drops what the
 * submit wrote. Runs on the resolver's thread; owns s. */
static void submit_resolved(void *arg, int rc, const struct sockaddr *const *addrs, int n)
{
    submit *s = arg;
    svc_req *req = s->req;
    const char *host = s->webhook_host;
    char msg[400];
    if (rc == 0 && gw_whnet_addrs_check(s->app->whnet, host, addrs, n, msg, sizeof msg) == 0) {
        if (gw_committer_add(s->app->committer, &s->item) == 0)
            return; /* the committer's now */
        gw_reply_unavailable(req, "this gateway (shutting down)");
    } else if (rc == 0) {
        svc_reply_error(req, 422, "invalid_argument", "webhook", NULL, "%s", msg);
    } else if (rc == -ENOENT) {
        svc_reply_error(req, 422, "invalid_argument", "webhook", NULL,
                        "webhook host %.100s does not resolve", host);
    } else if (rc == -ETIMEDOUT) {
        svc_reply_error(req, 422, "invalid_argument", "webhook", NULL,
                        "webhook host %.100s did not resolve within %ld ms", host,
                        s->app->cfg.webhook_dns_timeout_ms);
    } else if (rc == -ESHUTDOWN) {
        gw_reply_unavailable(req, "this gateway (shutting down)");
    } else {
        svc_reply_error(req, 422, "invalid_argument", "webhook", NULL,
                        "webhook host %.100s could not be resolved (name server error)", host);
    }
    svc_req_resume(req);
    submit_blobs_end(s, 0);
    submit_free(s);
}

/* The task of a parsed request, checked (task.h) and allowed for the
 * tenant: a new gw_task_req (the caller's: gw_task_req_free, free), or
 * NULL after replying. */
static gw_task_req *task_prepare(svc_req *req, const gw_job_req *jr, int64_t tenant_id)
{
    gw_app *app = svc_req_app(req);
    gw_task_limits lim = {.memory_gb = jr->memory_gb, .cpus = jr->cpus,
                          .max_output_bytes = (int64_t)app->cfg.max_output_mb << 20,
                          .log_bytes = (int64_t)app->cfg.task_log_mb << 20};
    gw_verr te;
    gw_task_req *t = malloc(sizeof *t);
    if (!t) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return NULL;
    }
    if (gw_task_parse(jr->task, &lim, t, &te) != 0)
        gw_reply_verr(req, &te);
    else if (task_allowed(req, tenant_id, t) == 0)
        return t;
    gw_task_req_free(t);
    free(t);
    return NULL;
}

/* POST /v1/jobs: validates, prepares the row and its inputs, suspends the
 * request and hands it to the committer, which answers it (submit_done);
 * a webhook host that is a name is resolved first (submit_resolved),
 * while the request stays suspended: no lookup ever waits on this thread.
 * Whatever fails before the hand-over is answered here. */
/* The answer to a submit whose webhook host could not be handed to the
 * resolver (rc from gw_resolve). */
static void resolve_refused(svc_req *req, gw_app *app, int rc)
{
    if (rc == -EINVAL)
        svc_reply_error(req, 422, "invalid_argument", "webhook", NULL,
                        "webhook host must be at most 253 characters");
    else if (rc == -EDQUOT)
        gw_reply_too_many(req, "rate_limited", 1,
                          "this tenant has %d webhook host lookups in flight, the most it "
                          "may; retry once they end (each within %ld ms)",
                          GW_RESOLVE_PER_TENANT, app->cfg.webhook_dns_timeout_ms);
    else if (rc == -EAGAIN)
        gw_reply_unavailable(req, "webhook host lookup (too many at once)");
    else
        gw_reply_unavailable(req, "this gateway (shutting down)");
}

int gw_api_jobs_submit(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    if (app->draining)
        return gw_reply_unavailable(req, "this gateway (shutting down)");
    if (gw_limits_admit_submit(req, &who) != 0)
        return 0;
    char idem_key[GW_IDEM_KEY_MAX + 1] = "";
    if (gw_idem_key_parse(svc_req_header(req, "Idempotency-Key"), idem_key) < 0)
        return svc_reply_error(req, 400, "invalid_argument", "Idempotency-Key", NULL,
                               "Idempotency-Key must be 1-%d printable ASCII characters, bare or "
                               "as a quoted string", GW_IDEM_KEY_MAX);
    gw_job_req jr;
    gw_verr ve;
    json_t *body = svc_req_streamed(req) ? gw_mpart_job(req) : json_incref(svc_req_json(req));
    if (body == NULL)
        return 0;
    /* body lives on while jr.task borrows from it */
    if (gw_job_req_parse(body, &jr, &ve) != 0) {
        json_decref(body);
        return gw_reply_verr(req, &ve);
    }
    gw_task_req *task = NULL;
    submit *s = NULL;
    if (gw_job_req_check_output(&jr, (int64_t)app->cfg.max_output_mb << 20, &ve) != 0) {
        gw_reply_verr(req, &ve);
        goto refused;
    }
    if (jr.task && !(task = task_prepare(req, &jr, who.tenant_id)))
        goto refused;
    /* The webhook's form, and its address when an IP literal; a name is
     * resolved below, off this thread. */
    char host[256] = "";
    int resolve = jr.webhook ? gw_whnet_url_check(app->whnet, jr.webhook, host, sizeof host,
                                                  ve.message, sizeof ve.message) : 0;
    if (resolve < 0) {
        svc_reply_error(req, 422, "invalid_argument", "webhook", NULL, "%s", ve.message);
        goto refused;
    }
    if (!(s = calloc(1, sizeof(*s)))) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        goto refused;
    }
    s->app = app;
    s->key_id = who.key_id;
    s->wait_s = gw_waits_prefer(svc_req_header(req, "Prefer"));
    memcpy(s->idem_key, idem_key, sizeof idem_key);
    int rc = task ? task_blobs_prepare(req, who.tenant_id, task, s)
                  : inputs_prepare(req, who.tenant_id, &jr, s);
    if (rc == 0 && submit_build(s, &who, &jr, task) != 0) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        rc = -1;
    }
    gw_job_req_free(&jr);
    gw_task_req_free(task);
    free(task);
    json_decref(body);
    /* Suspended before it is handed over, so the committer can never
     * answer a request that is not suspended yet. */
    if (rc == 0 && svc_req_suspend(req) != 0) {
        gw_reply_unavailable(req, "this gateway (shutting down)");
        rc = -1;
    }
    if (rc == 0) {
        s->req = req;
        if (resolve) {
            snprintf(s->webhook_host, sizeof s->webhook_host, "%s", host);
            rc = gw_resolve(app->resolver, host, who.tenant_id, submit_resolved, s);
            if (rc == 0)
                return 0; /* req and s are submit_resolved's now */
            resolve_refused(req, app, rc);
        } else if (gw_committer_add(app->committer, &s->item) == 0) {
            return 0; /* req and s are the committer's now */
        } else {
            gw_reply_unavailable(req, "this gateway (shutting down)");
        }
        svc_req_resume(req);
    }
    submit_blobs_end(s, 0);
    submit_free(s);
    return 0;
refused:
    gw_job_req_free(&jr);
    gw_task_req_free(task);
    free(task);
    json_decref(body);
    return 0;
}

/* job (stolen) with "queue" (stolen; NULL: none) right after its
 * "state", where a reader looks for how a queued job stands. Returns the
 * job to reply with; job itself when queue is NULL or memory ran out. */
static json_t *with_queue(json_t *job, json_t *queue)
{
    json_t *o = queue ? json_object() : NULL;
    const char *k;
    json_t *v;
    json_object_foreach(job, k, v) {
        if (o && json_object_set(o, k, v) == 0 && strcmp(k, "state") == 0)
            json_object_set(o, "queue", queue);
    }
    json_decref(queue);
    if (!o || json_object_size(o) != json_object_size(job) + 1) {
        json_decref(o);
        return job;
    }
    json_decref(job);
    return o;
}

int gw_api_jobs_get(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id;
    if (!(id = gw_job_id_param(req)))
        return 0;
    /* Prefer: wait=N holds the answer (suspended) until the job ends. */
    int wait_s = gw_waits_prefer(svc_req_header(req, "Prefer"));
    size_t len;
    char *text = gw_jobcache_get(app->jobs, who.tenant_id, who.jobs_deleted, id, &len);
    json_t *job = NULL;
    if (!text) {
        int rc = gw_store_job_get(app->store, who.tenant_id, id, &job);
        if (rc)
            return gw_reply_store_error(req, rc, "job");
        const char *st = json_string_value(json_object_get(job, "state"));
        if (wait_s > 0 && st && (strcmp(st, "queued") == 0 || strcmp(st, "running") == 0)) {
            json_decref(job);
            gw_waits_add(app->waits, req, 0, who.tenant_id, who.key_id, id, wait_s, 200);
            return 0;
        }
        /* An ended job no longer changes: its answer is kept (jobcache.h). */
        if (st && strcmp(st, "queued") != 0 && strcmp(st, "running") != 0 &&
            (text = svc_json_dump(job, NULL))) {
            len = strlen(text);
            gw_jobcache_put(app->jobs, who.tenant_id, who.jobs_deleted, id, text, len);
        }
    }
    if (wait_s >= 0) {
        char v[32];
        snprintf(v, sizeof(v), "wait=%d", wait_s);
        svc_reply_header(req, "Preference-Applied", v);
    }
    if (!text) {
        const char *st = json_string_value(json_object_get(job, "state"));
        if (st && strcmp(st, "queued") == 0)
            job = with_queue(job, gw_eta_queue(app, who.tenant_id, job));
        return svc_reply_json(req, 200, job);
    }
    json_decref(job);
    svc_reply_raw(req, 200, "application/json", text, len);
    free(text);
    return 0;
}

/* A label filter "key:value": the key as labels allow it, the value at most
 * 256 characters (the HTTP layer has refused query values that are not
 * UTF-8). Returns the filter as a JSON object text, or NULL. */
static char *label_filter(const char *label)
{
    char key[65];
    const char *value;
    if (gw_label_parse(label, key, &value) != 0)
        return NULL;
    json_t *o = json_pack("{s:s}", key, value);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

int gw_api_jobs_list(svc_req *req)
{
    static const char *const states[] = {"queued", "running", "succeeded", "failed", "cancelled", NULL};
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    gw_job_filter f = {.limit = 100};
    f.state = svc_req_query(req, "state");
    f.kernel = svc_req_query(req, "kernel");
    const char *limit = svc_req_query(req, "limit");
    const char *cursor = svc_req_query(req, "cursor");
    const char *label = svc_req_query(req, "label");
    if (f.state) {
        int ok = 0;
        for (int i = 0; states[i] && !ok; i++)
            ok = strcmp(f.state, states[i]) == 0;
        if (!ok)
            return svc_reply_error(req, 400, "invalid_argument", "state", NULL,
                                   "state must be queued, running, succeeded, failed or cancelled");
    }
    if (limit) {
        char *end;
        long n = strtol(limit, &end, 10);
        if (*end || end == limit || *limit < '0' || *limit > '9' || n < 1 || n > 1000)
            return svc_reply_error(req, 400, "invalid_argument", "limit", NULL,
                                   "limit must be an integer from 1 to 1000");
        f.limit = (int)n;
    }
    if (cursor) {
        /* next_cursor values are job sequence numbers: 1-18 digits. */
        size_t len = strlen(cursor);
        if (len < 1 || len > 18 || strspn(cursor, "0123456789") != len || cursor[0] == '0')
            return svc_reply_error(req, 400, "invalid_argument", "cursor", NULL,
                                   "cursor must be a next_cursor value from a previous page");
        f.before_seq = strtoll(cursor, NULL, 10);
    }
    char *label_json = NULL;
    if (label) {
        if (!(label_json = label_filter(label)))
            return svc_reply_error(req, 400, "invalid_argument", "label", NULL,
                                   "label must be key:value, the key 1-64 characters of "
                                   "A-Z a-z 0-9 _ . -, the value at most 256 characters of UTF-8");
        f.label_json = label_json;
    }
    json_t *jobs;
    int64_t next = 0;
    int rc = gw_store_job_list(app->store, who.tenant_id, &f, &jobs, &next);
    free(label_json);
    if (rc)
        return gw_reply_store_error(req, rc, "job");
    char next_s[24];
    snprintf(next_s, sizeof(next_s), "%lld", (long long)next);
    return svc_reply_json(req, 200, json_pack("{s:o, s:o}", "jobs", jobs, "next_cursor",
                                              next ? json_string(next_s) : json_null()));
}

/* A task's output file as GET /v1/jobs/{id}/result shows it: {"bytes",
 * "url"} (the outputs route, its name URL-encoded), "npy" when the node
 * read an .npy header, "blob" with ?encoding=blob. New reference. */
static json_t *task_output_json(const json_t *m, const char *job_id, int as_blob)
{
    const char *name = json_string_value(json_object_get(m, "name"));
    char url[1024];
    int n = snprintf(url, sizeof url, "/v1/jobs/%s/outputs/", job_id);
    for (const char *p = name; p && *p && n < (int)sizeof url - 4; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
            url[n++] = (char)c;
        else
            n += snprintf(url + n, sizeof url - (size_t)n, "%%%02X", c);
    }
    url[n] = '\0';
    json_t *o = json_pack("{s:O, s:s}", "bytes", json_object_get(m, "nbytes"), "url", url);
    if (o && json_object_get(m, "npy"))
        json_object_set(o, "npy", json_object_get(m, "npy"));
    if (o && as_blob)
        json_object_set(o, "blob", json_object_get(m, "blob"));
    return o;
}

/* Maps a blob's bytes read-only for the stream s (which unmaps them) and
 * points t at them. 0, -EINVAL when the store's file does not have
 * t->nbytes (a corrupt store), or -errno. */
static int map_blob(svc_bstore *store, svc_tstream *s, svc_tensor *t)
{
    int fd;
    uint64_t size;
    int rc = svc_bstore_open_read(store, t->blob, &fd, &size);
    if (rc != 0) {
        svc_error("blobs: output %s of a stored result cannot be opened: %s", t->blob, strerror(-rc));
        return -EINVAL;
    }
    if (size != t->nbytes) {
        close(fd);
        svc_error("blobs: %s has %llu bytes, its result says %zu", t->blob,
                  (unsigned long long)size, t->nbytes);
        return -EINVAL;
    }
    if (size == 0) {
        close(fd);
        return 0;
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return -errno;
    madvise(p, size, MADV_SEQUENTIAL);
    t->data = p;
    return svc_tstream_own_mapping(s, p, size);
}

/* Appends {"name":{"dtype","shape","data"|"b64"|"blob"},...} for the
 * tensors of a stored result to s, which borrows data; outputs in the blob
 * store are mapped (as_blobs: named by their ids; every output must be a
 * blob then, see inline_outputs_to_blobs). 0, -EINVAL when meta does
 * not fit data (a corrupt row), or -ENOMEM. */
static int outputs_stream(svc_bstore *store, svc_tstream *s, const json_t *meta,
                          const unsigned char *data, size_t len, int b64, int as_blobs,
                          const char *job_id)
{
    size_t i;
    json_t *m;
    int rc = svc_tstream_text(s, "{", 1);
    json_array_foreach(meta, i, m) {
        svc_tensor t;
        const char *name;
        if (rc == 0 && gw_task_output_is_file(m)) {
            /* a task's file: where to download it, never its bytes inline */
            json_t *f = task_output_json(m, job_id, as_blobs);
            char *text = f ? json_dumps(f, JSON_COMPACT) : NULL;
            char *key = svc_json_dump(json_object_get(m, "name"), NULL);
            json_decref(f);
            rc = text && key ? svc_tstream_text(s, ",", i ? 1 : 0) : -ENOMEM;
            if (!rc)
                rc = svc_tstream_text(s, key, strlen(key));
            if (!rc)
                rc = svc_tstream_text(s, ":", 1);
            if (!rc)
                rc = svc_tstream_text(s, text, strlen(text));
            free(text);
            free(key);
            if (rc)
                break;
            continue;
        }
        if (rc == 0 && gw_blob_view(m, data, len, &t, &name) != 0)
            rc = -EINVAL;
        if (rc == 0 && t.blob[0] != '\0' && !as_blobs)
            rc = map_blob(store, s, &t);
        if (rc)
            break;
        json_t *key = json_string(name);
        char *text = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
        json_decref(key);
        rc = !text ? -ENOMEM : svc_tstream_text(s, ",", i ? 1 : 0);
        if (!rc)
            rc = svc_tstream_text(s, text, strlen(text));
        if (!rc)
            rc = svc_tstream_text(s, ":", 1);
        if (!rc && as_blobs) {
            json_t *ref = svc_tensor_to_json(&t, 0);
            char *rt = ref ? json_dumps(ref, JSON_COMPACT) : NULL;
            rc = rt ? svc_tstream_text(s, rt, strlen(rt)) : -ENOMEM;
            json_decref(ref);
            free(rt);
        } else if (!rc) {
            rc = svc_tstream_tensor(s, &t, b64);
        }
        free(text);
    }
    return rc ? rc : svc_tstream_text(s, "}", 1);
}

/* For ?encoding=blob: every output becomes one of the tenant's own blobs,
 * which it may GET or name in later jobs and which outlives the job (until
 * DELETE /v1/blobs): an output in the blob store is recorded as the
 * tenant's (it holds those bytes through the job already: they cost no
 * quota); one kept inline in the result row (a small one) is written to
 * the blob store first, and its entry in meta names the blob from then on.
 * 0, or -errno (-EDQUOT past the tenant's blob quota, -EIO, -ENOSPC). */
static int inline_outputs_to_blobs(gw_app *app, int64_t tenant_id, json_t *meta,
                                   const unsigned char *data, size_t len)
{
    size_t i;
    json_t *m;
    json_array_foreach(meta, i, m) {
        svc_tensor t;
        const char *name;
        int created = 0, rc;
        if (gw_task_output_is_file(m)) {
            rc = gw_store_blob_record(app->store, tenant_id, json_string_value(json_object_get(m, "blob")),
                                      (uint64_t)json_integer_value(json_object_get(m, "nbytes")),
                                      gw_quota_bytes(app), &created);
            if (rc)
                return rc;
            continue;
        }
        if (gw_blob_view(m, data, len, &t, &name) != 0)
            return -EINVAL;
        if (t.blob[0] != '\0') {
            rc = gw_store_blob_record(app->store, tenant_id, t.blob, t.nbytes, gw_quota_bytes(app),
                                      &created);
            if (rc)
                return rc;
            continue;
        }
        char id[SVC_BLOB_ID_LEN];
        uint64_t size = 0;
        svc_bwriter *w = svc_bstore_write_begin(app->blobs);
        rc = w ? svc_bwriter_append(w, t.data, t.nbytes) : -errno;
        if (rc == 0)
            rc = svc_bwriter_commit(w, id, &size);
        if (rc == 0)
            rc = gw_store_blob_record(app->store, tenant_id, id, size, gw_quota_bytes(app),
                                      &created);
        if (rc == 0 && svc_bwriter_close(w) != 0)
            rc = -EIO;
        else if (rc != 0 && w)
            svc_bwriter_abort(w);
        if (rc == 0 && (json_object_set_new(m, "blob", json_string(id)) < 0 ||
                        json_object_del(m, "offset") < 0))
            rc = -ENOMEM;
        if (rc)
            return rc;
    }
    return 0;
}

int gw_api_jobs_result(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id;
    if (!(id = gw_job_id_param(req)))
        return 0;
    const char *enc = svc_req_query(req, "encoding");
    if (enc && strcmp(enc, "json") != 0 && strcmp(enc, "b64") != 0 && strcmp(enc, "blob") != 0)
        return svc_reply_error(req, 400, "invalid_argument", "encoding", NULL,
                               "encoding must be json, b64 or blob");
    char state[16];
    json_t *meta;
    unsigned char *data;
    size_t len;
    json_t *info;
    int rc = gw_store_job_result(app->store, who.tenant_id, id, state, &meta, &data, &len, &info);
    if (rc == -EAGAIN)
        return svc_reply_error(req, 409, "conflict", NULL, json_pack("{s:s}", "state", state),
                               "the job is %s; a result exists only once it has succeeded", state);
    if (rc)
        return gw_reply_store_error(req, rc, "job");
    if (enc && strcmp(enc, "blob") == 0 &&
        (rc = inline_outputs_to_blobs(app, who.tenant_id, meta, data, len)) != 0) {
        json_decref(meta);
        json_decref(info);
        free(data);
        uint64_t used = 0;
        if (rc == -EDQUOT && gw_store_tenant_blob_bytes(app->store, who.tenant_id, &used) == 0)
            return gw_reply_quota(req, app, used,
                                  "the outputs as blobs would take the tenant past its blob quota");
        if (rc == -EDQUOT)
            rc = -EIO;
        if (rc == -EIO)
            return gw_reply_unavailable(req, "PostgreSQL");
        return svc_reply_error(req, rc == -ENOSPC ? 507 : 500,
                               rc == -ENOSPC ? "insufficient_storage" : "internal", NULL, NULL,
                               "the outputs could not be stored as blobs: %s", strerror(-rc));
    }
    /* Streamed: the text of a large result is never whole in memory; the
     * stored bytes are, owned by the stream from here on. Field order as
     * before: id, outputs, info. */
    svc_tstream *doc = svc_tstream_new();
    char *info_s = info ? json_dumps(info, JSON_COMPACT) : strdup("{}");
    char head[96];
    int n = snprintf(head, sizeof(head), "{\"id\":\"%s\",\"outputs\":", id);
    if (!doc) {
        free(data);
        rc = -ENOMEM;
    } else {
        rc = svc_tstream_own(doc, data);
    }
    if (!rc && !info_s)
        rc = -ENOMEM;
    if (!rc)
        rc = svc_tstream_text(doc, head, (size_t)n);
    if (!rc)
        rc = outputs_stream(app->blobs, doc, meta, data, len, enc && strcmp(enc, "b64") == 0,
                            enc && strcmp(enc, "blob") == 0, id);
    if (!rc)
        rc = svc_tstream_text(doc, ",\"info\":", 8);
    if (!rc)
        rc = svc_tstream_text(doc, info_s, strlen(info_s));
    if (!rc)
        rc = svc_tstream_text(doc, "}", 1);
    json_decref(meta);
    json_decref(info);
    free(info_s);
    if (rc) {
        svc_tstream_free(doc);
        if (rc == -EINVAL)
            return svc_reply_error(req, 500, "internal", NULL, NULL, "the stored result is corrupt");
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    }
    return svc_reply_stream(req, 200, "application/json", svc_tstream_read, doc, svc_tstream_free);
}

/* A .npy reply: the header, then the blob's bytes read from its file. */
typedef struct npy_stream {
    char head[512];
    size_t head_len, head_pos;
    int fd;
    uint64_t off, left;
} npy_stream;

static ssize_t npy_read(void *cls, char *buf, size_t max)
{
    npy_stream *n = cls;
    if (n->head_pos < n->head_len) {
        size_t k = n->head_len - n->head_pos < max ? n->head_len - n->head_pos : max;
        memcpy(buf, n->head + n->head_pos, k);
        n->head_pos += k;
        return (ssize_t)k;
    }
    if (n->left == 0)
        return 0;
    ssize_t k = pread(n->fd, buf, n->left < max ? (size_t)n->left : max, (off_t)n->off);
    if (k <= 0)
        return -1; /* the file shrank or failed: abort, the client sees a short body */
    n->off += (uint64_t)k;
    n->left -= (uint64_t)k;
    return k;
}

static void npy_free(void *cls)
{
    npy_stream *n = cls;
    if (n->fd >= 0)
        close(n->fd);
    free(n);
}

/* "2048,2048" for the X-Kowloon-Shape header ("" for a scalar). */
static void shape_header(const svc_tensor *t, char *out, size_t len)
{
    size_t off = 0;
    out[0] = '\0';
    for (int d = 0; d < t->ndim && off < len; d++)
        off += (size_t)snprintf(out + off, len - off, "%s%lld", d ? "," : "", (long long)t->shape[d]);
}

/* GET /v1/jobs/{id}/outputs/{name} of a task's file m: its bytes as the
 * program left them (Range as for any output); ?format=npy only for an
 * .npy file, which is sent as it is. */
static int task_output_reply(svc_req *req, gw_app *app, const char *id, const json_t *m,
                             const char *format, int npy)
{
    const char *name = json_string_value(json_object_get(m, "name"));
    const char *blob = json_string_value(json_object_get(m, "blob"));
    uint64_t want = (uint64_t)json_integer_value(json_object_get(m, "nbytes")), size = 0;
    size_t nl = strlen(name);
    int is_npy = nl > 4 && strcmp(name + nl - 4, ".npy") == 0;
    if (npy && format && !is_npy)
        return svc_reply_error(req, 422, "invalid_argument", "format", NULL,
                               "output %.200s is a file the task wrote, not an .npy file: download "
                               "it raw", name);
    int fd = -1;
    if (svc_bstore_open_read(app->blobs, blob, &fd, &size) != 0 || size != want) {
        if (fd >= 0)
            close(fd);
        svc_error("blobs: output %s of job %s is missing or has the wrong size", blob, id);
        return svc_reply_error(req, 500, "internal", NULL, NULL, "the output's bytes are missing");
    }
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    char hdr[256];
    svc_reply_header(req, "Content-Disposition", svc_content_disposition(base, hdr, sizeof hdr));
    return gw_reply_blob_range(req, blob, is_npy ? "application/x-npy" : "application/octet-stream",
                               fd, size);
}

/* A kernel output's bytes from the blob store, raw or behind an .npy
 * header. */
static int tensor_blob_reply(svc_req *req, gw_app *app, const char *id, const svc_tensor *t,
                             int npy)
{
    int fd = -1;
    uint64_t size = 0;
    if (svc_bstore_open_read(app->blobs, t->blob, &fd, &size) != 0 || size != t->nbytes) {
        if (fd >= 0)
            close(fd);
        svc_error("blobs: output %s of job %s is missing or has the wrong size", t->blob, id);
        return svc_reply_error(req, 500, "internal", NULL, NULL, "the output's bytes are missing");
    }
    if (!npy)
        return svc_reply_fd(req, 200, "application/octet-stream", fd, 0, size);
    npy_stream *n = calloc(1, sizeof *n);
    if (n)
        *n = (npy_stream){.fd = fd, .left = size};
    if (n && (n->head_len = svc_npy_header(t->dtype, t->ndim, t->shape, n->head, sizeof n->head)) > 0)
        return svc_reply_stream(req, 200, "application/x-npy", npy_read, n, npy_free);
    if (n)
        npy_free(n);
    else
        close(fd);
    return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
}

/* A kernel's output t (named want): its dtype, shape and file name in the
 * headers, then its bytes from the row (a result from before the blob
 * store) or from the blob store. */
static int tensor_output_reply(svc_req *req, gw_app *app, const char *id, const char *want,
                               const svc_tensor *t, int npy)
{
    char hdr[256];
    svc_reply_header(req, "X-Kowloon-Dtype", svc_dtype_name(t->dtype));
    shape_header(t, hdr, sizeof hdr);
    svc_reply_header(req, "X-Kowloon-Shape", hdr);
    char file[160];
    snprintf(file, sizeof file, "%s.%s", want, npy ? "npy" : "bin");
    svc_reply_header(req, "Content-Disposition", svc_content_disposition(file, hdr, sizeof hdr));
    if (t->blob[0] != '\0')
        return tensor_blob_reply(req, app, id, t, npy);
    char head[512];
    size_t hl = npy ? svc_npy_header(t->dtype, t->ndim, t->shape, head, sizeof head) : 0;
    unsigned char *body = malloc(hl + t->nbytes + 1);
    if (!body)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    memcpy(body, head, hl);
    memcpy(body + hl, t->data, t->nbytes);
    int rc = svc_reply_raw(req, 200, npy ? "application/x-npy" : "application/octet-stream", body,
                           hl + t->nbytes);
    free(body);
    return rc;
}

int gw_api_jobs_output(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id, *want = svc_req_param(req, "name");
    if (!(id = gw_job_id_param(req)))
        return 0;
    const char *format = svc_req_query(req, "format");
    const char *accept = svc_req_header(req, "Accept");
    if (format && strcmp(format, "raw") != 0 && strcmp(format, "npy") != 0)
        return svc_reply_error(req, 400, "invalid_argument", "format", NULL, "format must be raw or npy");
    int npy = format ? strcmp(format, "npy") == 0 : accept && strstr(accept, "application/x-npy") != NULL;
    char state[16];
    json_t *meta, *info;
    unsigned char *data;
    size_t len;
    int rc = gw_store_job_result(app->store, who.tenant_id, id, state, &meta, &data, &len, &info);
    if (rc == -EAGAIN)
        return svc_reply_error(req, 409, "conflict", NULL, json_pack("{s:s}", "state", state),
                               "the job is %s; outputs exist only once it has succeeded", state);
    if (rc)
        return gw_reply_store_error(req, rc, "job");
    json_decref(info);
    svc_tensor t;
    const char *name = NULL;
    size_t i;
    json_t *m;
    int found = 0, bad = 0;
    json_array_foreach(meta, i, m) {
        if (gw_task_output_is_file(m)) {
            if (strcmp(json_string_value(json_object_get(m, "name")), want) == 0) {
                rc = task_output_reply(req, app, id, m, format, npy);
                json_decref(meta);
                free(data);
                return rc;
            }
            continue;
        }
        if (gw_blob_view(m, data, len, &t, &name) != 0) {
            bad = 1;
            break;
        }
        if (strcmp(name, want) == 0) {
            found = 1;
            break;
        }
    }
    if (bad)
        rc = svc_reply_error(req, 500, "internal", NULL, NULL, "the stored result is corrupt");
    else if (!found)
        rc = svc_reply_error(req, 404, "not_found", "name", NULL, "job %s has no output named %.64s",
                             id, want);
    else
        rc = tensor_output_reply(req, app, id, want, &t, npy);
    json_decref(meta);
    free(data);
    return rc;
}

int gw_api_jobs_cancel(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id;
    if (!(id = gw_job_id_param(req)))
        return 0;
    char was[16], node_id[37];
    json_t *job;
    int rc = gw_store_job_cancel(app->store, who.tenant_id, id, was, node_id, &job);
    if (rc == -EAGAIN)
        return svc_reply_error(req, 409, "conflict", NULL, json_pack("{s:s}", "state", was),
                               "the job is already %s", was);
    if (rc)
        return gw_reply_store_error(req, rc, "job");
    gw_waits_job_changed(app->waits, id);
    gw_events_written(app->events);
    if (strcmp(was, "running") == 0) {
        /* The node's lease poll hands it the cancel; it reports the run
         * ended cancelled. If the node is lost first, the job ends
         * cancelled instead of being re-queued. */
        if (node_id[0])
            gw_leases_wake(app->leases, node_id, 0);
        /* and every node of a multi-node job */
        char (*nodes)[37];
        int n;
        if (json_integer_value(json_object_get(json_object_get(job, "resources"), "nodes")) > 1 &&
            gw_store_gang_nodes(app->store, id, (int)json_integer_value(json_object_get(job, "attempts")),
                                &nodes, &n) == 0) {
            for (int i = 0; i < n; i++)
                gw_leases_wake(app->leases, nodes[i], 0);
            free(nodes);
        }
    } else {
        gw_queued e;
        gw_queued_from_job(job, who.tenant_id, &e);
        gw_queue_drop_job(app->queue, &e);
    }
    return svc_reply_json(req, 200, job);
}
