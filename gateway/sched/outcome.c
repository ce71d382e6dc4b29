/* outcome.c — recording what nodes report (outcome.h). */
#include "outcome.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "events.h"
#include "lease.h"
#include "metrics.h"
#include "quota.h"
#include "rendezvous.h"
#include "svc_json.h"
#include "svc_sha256.h"
#include "gw_task.h"
#include "svc_log.h"
#include "svc_util.h"
#include "usage.h"
#include "waits.h"

/* The attempt of a multi-node job ended (or is ending): the nodes of its
 * parts still open are woken, so that their polls hand out the cancels at
 * once, and its rendezvous values are dropped. */
static void gang_ended(gw_app *app, const char *job_id, int attempt)
{
    char (*nodes)[37];
    int n;
    if (gw_store_gang_nodes(app->store, job_id, attempt, &nodes, &n) == 0) {
        for (int i = 0; i < n; i++)
            gw_leases_wake(app->leases, nodes[i], 0);
        free(nodes);
    }
    gw_rdv_forget(app, job_id, attempt);
}

/* gw_outcome_requeue with what the node reported of the run (backend and
 * usage_json, NULL when no node did), recorded if the job ends; min_wait_ms
 * (0: none) is the least back-off before it is placed again. */
static int requeue_after(gw_app *app, const char *node_id, const char *job_id, int attempt,
                         int uncounted, const char *code, const char *message, const char *backend,
                         const char *usage_json, int min_wait_ms)
{
    gw_backoff bo = {app->cfg.retry_base_ms, app->cfg.retry_max_s};
    /* the jitter takes up to half of the first back-off off */
    if (bo.base_ms < 2 * min_wait_ms)
        bo.base_ms = 2 * min_wait_ms;
    if ((int64_t)bo.max_s * 1000 < bo.base_ms)
        bo.max_s = (bo.base_ms + 999) / 1000;
    gw_requeued out;
    int rc = gw_store_job_requeue(app->store, job_id, attempt, uncounted, code, message, &bo,
                                  backend, usage_json, node_id, &out);
    if (rc == 0)
        gw_events_written(app->events);
    /* a multi-node job ends the attempt on every node, requeued as a whole */
    if (rc == 0 && out.q.nodes > 1)
        gang_ended(app, job_id, attempt);
    if (rc == 0 && out.requeued) {
        gw_queue_push_queued(app->queue, &out.q); /* wakes the scheduler */
    } else if (rc == 0) {
        gw_waits_job_changed(app->waits, job_id);   /* failed or cancelled */
    }
    return rc;
}

static int requeue(gw_app *app, const char *node_id, const char *job_id, int attempt,
                   int uncounted, const char *code, const char *message, const char *backend,
                   const char *usage_json)
{
    return requeue_after(app, node_id, job_id, attempt, uncounted, code, message, backend,
                         usage_json, 0);
}

int gw_outcome_requeue(gw_app *app, const char *job_id, int attempt, int uncounted, const char *code,
                    const char *message)
{
    return requeue(app, NULL, job_id, attempt, uncounted, code, message, NULL, NULL);
}

static int is_task(const json_t *report)
{
    const char *kind = json_string_value(json_object_get(report, "kind"));
    return kind && strcmp(kind, "task") == 0;
}

/* A task part ended (any state but refused): its exit code and log blob
 * are the job's, before its state is recorded. A record that finds the
 * run no longer current changes nothing; a failure is logged (the state
 * is still recorded: the log is worth less than the outcome). */
static void task_part_ended(gw_app *app, const char *node_id, const json_t *report,
                            const char *job_id, int attempt)
{
    const char *state = json_string_value(json_object_get(report, "state"));
    if (!state || strcmp(state, "refused") == 0)
        return;
    const json_t *ec = json_object_get(report, "exit_code"), *logs = json_object_get(report, "logs");
    const json_t *rank = json_object_get(report, "node_rank");
    int part = json_is_integer(rank) ? (int)json_integer_value(rank) : 0;
    int code = json_is_integer(ec) ? (int)json_integer_value(ec) : 0;
    const char *blob = json_string_value(json_object_get(logs, "blob"));
    if (blob && !svc_blob_id_valid(blob))
        blob = NULL;
    int rc = gw_store_task_ended(app->store, job_id, attempt, part < 0 || part > 63 ? 0 : part,
                                 json_is_integer(ec) ? &code : NULL, blob,
                                 json_integer_value(json_object_get(logs, "bytes")),
                                 json_integer_value(json_object_get(logs, "dropped")), node_id);
    if (rc != 0 && rc != -EAGAIN)
        svc_warn("job %s attempt %d: the end of task part %d could not be recorded (%s)", job_id,
                 attempt, part, strerror(-rc));
}

/* The outputs of a succeeded run into b: each either a reference to a
 * blob the node wrote or pushed ({"blob"}) or bytes sent inline (small
 * outputs). 0, or -EINVAL with msg naming the output. */
static int outputs_from_run(gw_blob *b, const json_t *outputs, char *msg, size_t msglen)
{
    if (!json_is_object(outputs)) {
        snprintf(msg, msglen, "the report has no outputs object");
        return -EINVAL;
    }
    return gw_blob_from_json(b, outputs, msg, msglen);
}

/* The outputs in the blob store of a succeeded run belong to its job, and
 * so count toward its tenant's blob quota: 0 when those the tenant does
 * not hold already fit in what it has left (or there is no quota), -EDQUOT
 * with why saying how far they are over, -EIO. */
static int outputs_fit_quota(gw_app *app, const char *job_id, const json_t *meta, char *why,
                             size_t whylen)
{
    size_t cap = json_array_size(meta), i;
    uint64_t need = 0, used = 0;
    int n = 0, rc = 0;
    json_t *m;
    if (gw_quota_bytes(app) == 0 || cap == 0)
        return 0;
    const char **ids = calloc(cap, sizeof *ids);
    uint64_t *sizes = calloc(cap, sizeof *sizes);
    json_array_foreach(ids && sizes ? meta : NULL, i, m) {
        const char *id = json_string_value(json_object_get(m, "blob"));
        if (id) {
            ids[n] = id;
            sizes[n++] = (uint64_t)json_integer_value(json_object_get(m, "nbytes"));
        }
    }
    if (!ids || !sizes)
        rc = -EIO; /* reported again by the node */
    else if (n > 0)
        rc = gw_store_blobs_need(app->store, 0, job_id, ids, sizes, n, &need, &used);
    free(ids);
    free(sizes);
    if (rc != 0)
        return -EIO;
    if (need <= gw_quota_room(app, used))
        return 0;
    snprintf(why, whylen, "the outputs need %llu bytes of blob storage and the tenant has %llu "
             "left of its quota of %ld MiB: no output was kept (DELETE blobs and ended jobs it no "
             "longer needs, then run the job again)", (unsigned long long)need,
             (unsigned long long)gw_quota_room(app, used), app->cfg.blob_quota_mb);
    return -EDQUOT;
}

/* A succeeded run of node_id: its outputs, checked against the catalog
 * spec of the kernel the report names (the job must run that kernel), and
 * its info recorded with the job's success; or the job fails
 * quota_exceeded when its outputs would take its tenant past its blob
 * quota (nothing of them is recorded, and the blobs the node stored are
 * swept as nobody's). */
static int record_success(gw_app *app, const char *node_id, const char *job_id, int attempt,
                          const json_t *run, const char *backend, const char *usage)
{
    gw_blob b = {0};
    char why[256] = "out of memory";
    int task = is_task(run);
    const char *kernel = task ? "task" : json_string_value(json_object_get(run, "kernel"));
    int rc;
    /* a task's outputs are files (blobs), whatever their names */
    if (task ? gw_task_outputs_meta(json_object_get(run, "outputs"), &b.meta, why, sizeof why) != 0
             : (outputs_from_run(&b, json_object_get(run, "outputs"), why, sizeof(why)) != 0 ||
                gw_blob_check_outputs(b.meta, kernel, why, sizeof(why)) != 0)) {
        rc = gw_store_job_fail(app->store, job_id, attempt, "failed", "bad_result", why, backend,
                               usage, node_id);
    } else if ((rc = outputs_fit_quota(app, job_id, b.meta, why, sizeof why)) != 0) {
        if (rc == -EDQUOT)
            rc = gw_store_job_fail(app->store, job_id, attempt, "failed", "quota_exceeded", why,
                                   backend, usage, node_id);
    } else {
        char *meta = json_dumps(b.meta, JSON_COMPACT);
        json_t *info = json_object_get(run, "info");
        char *info_s = json_is_object(info) ? json_dumps(info, JSON_COMPACT) : NULL;
        rc = meta ? gw_store_job_succeed(app->store, job_id, attempt, node_id, kernel,
                                         backend ? backend : "cpu", info_s ? info_s : "{}", meta,
                                         b.data, b.len, usage)
                  : -EIO;
        /* PostgreSQL refused the result itself (too large for one value,
         * say, or a blob output the node never stored for this run):
         * trying again would not help, the job fails. */
        if (rc == -EPROTO)
            rc = gw_store_job_fail(app->store, job_id, attempt, "failed", "bad_result",
                                   "the result was refused: an output blob this node did not "
                                   "store for this run, or a value PostgreSQL cannot keep (see "
                                   "the gateway log)", backend, usage, node_id);
        free(meta);
        free(info_s);
    }
    gw_blob_free(&b);
    return rc;
}

/* What follows the store's answer rc about a report: waiters woken, a
 * line logged, and the answer gw_outcome_record gives the node. */
static int recorded(gw_app *app, const char *node_id, const json_t *report, const char *job_id,
                    int attempt, const char *state, int rc)
{
    if (rc == 0) {
        gw_waits_job_changed(app->waits, job_id);
        gw_events_written(app->events);
        json_t *ms = json_object_get(report, "elapsed_ms");
        gw_metrics_reported(app->metrics, json_string_value(json_object_get(report, "kernel")),
                            state, json_is_integer(ms) ? (double)json_integer_value(ms) / 1000.0 : -1);
    }
    if (rc == -EAGAIN && !json_object_get(report, "node_rank")) {
        /* A single-node run whose job left its node (marked down) while it
         * ran: the part that held its devices there (ST_JOB_REQUEUE) ends
         * with this report, as a gang's part ends with its own. */
        char (*others)[37] = NULL;
        int n = 0;
        gw_store_gang_rank_end(app->store, job_id, attempt, 0, node_id,
                               strcmp(state, "succeeded") == 0 ? "succeeded" : "cancelled", &others, &n);
        free(others);
    }
    if (rc == -EAGAIN)
        svc_info("job %s attempt %d: report from node %s ignored (attempt no longer current, "
                 "or not on that node)", job_id, attempt, node_id);
    else if (rc == -EPERM)
        svc_warn("job %s attempt %d: report from node %s refused: it does not hold that part",
                 job_id, attempt, node_id);
    else if (rc == 0)
        svc_debug("job %s attempt %d: %s on %s", job_id, attempt, state, node_id);
    else if (rc == -EPROTO)
        svc_error("job %s attempt %d: PostgreSQL refused the report from %s; it is dropped",
                  job_id, attempt, node_id);
    else
        svc_warn("job %s attempt %d: the report from %s could not be recorded now (%s); the "
                 "node sends it again", job_id, attempt, node_id, strerror(-rc));
    return rc == 0 || rc == -EAGAIN || rc == -EPROTO || rc == -EPERM;
}

/* The report of node_rank's part of a multi-node job. Node_rank 0's
 * success is the job's (its outputs are the job's); another's only ends
 * its part. Any part that fails ends the attempt everywhere: the job is
 * requeued as a whole through the one requeue path (fencing, back-off,
 * attempts), or fails as a single-node job would. */
static int gang_record(gw_app *app, const char *node_id, const json_t *report, const char *job_id,
                       int attempt, int node_rank, const char *state, const char *code,
                       const char *msg, const char *backend, const char *usage)
{
    int ok = strcmp(state, "succeeded") == 0;
    const char *part = ok ? "succeeded"
                     : strcmp(state, "cancelled") == 0 || strcmp(state, "refused") == 0 ? "cancelled"
                                                                                         : "failed";
    char (*others)[37];
    int n, rc;
    if ((rc = gw_store_gang_rank_end(app->store, job_id, attempt, node_rank, node_id, part, &others,
                                     &n)) != 0)
        return rc;
    free(others);
    if (ok && node_rank > 0)
        return gw_store_gang_attempt(app->store, job_id, attempt) == 1 ? 0 : -EAGAIN;
    if (ok) {
        rc = record_success(app, node_id, job_id, attempt, report, backend, usage);
    } else if (strcmp(state, "refused") == 0 && strcmp(code, "invalid_argument") == 0) {
        rc = gw_store_job_fail(app->store, job_id, attempt, "failed", code, msg, backend, usage,
                               node_id);
    } else {
        char why[300];
        snprintf(why, sizeof why, "node_rank %d: %s", node_rank, msg);
        /* A part that failed most often lost a peer (a node killed: its
         * TCP reset is seen at once). The gang is placed again only after
         * twice the node timeout (the reaper's pass comes on top of one),
         * so that a dead node is known down by then and not chosen again. */
        int cancelled = strcmp(state, "cancelled") == 0, refused = strcmp(state, "refused") == 0;
        return requeue_after(app, node_id, job_id, attempt,
                             refused && json_is_true(json_object_get(report, "retry")),
                             cancelled ? "cancelled" : code, why, backend, usage,
                             cancelled || refused ? 0 : 2 * app->cfg.node_timeout_s * 1000);
    }
    if (rc == 0)
        gang_ended(app, job_id, attempt);
    return rc;
}

int gw_outcome_record(gw_app *app, const char *node_id, const json_t *report)
{
    const char *job_id = json_string_value(json_object_get(report, "job_id"));
    json_t *att = json_object_get(report, "attempt");
    if (!job_id || !svc_uuid_valid(job_id) || !json_is_integer(att))
        return -1;
    int attempt = (int)json_integer_value(att);
    const char *state = json_string_value(json_object_get(report, "state"));
    json_t *err = json_object_get(report, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    code = code ? code : "kernel_error";
    msg = msg ? msg : "the run failed";
    state = state ? state : "";
    const char *backend = gw_usage_backend(report);
    char *usage = gw_usage_from_report(report);
    int rc;
    if (is_task(report))
        task_part_ended(app, node_id, report, job_id, attempt);
    json_t *rank = json_object_get(report, "node_rank");
    if (json_is_integer(rank) && json_integer_value(rank) >= 0 && json_integer_value(rank) < 64) {
        rc = gang_record(app, node_id, report, job_id, attempt, (int)json_integer_value(rank), state,
                         code, msg, backend, usage);
    } else if (strcmp(state, "succeeded") == 0) {
        rc = record_success(app, node_id, job_id, attempt, report, backend, usage);
    } else if (strcmp(state, "refused") == 0) {
        /* The node did not take the run. Full or draining: the attempt is
         * given back and the job placed again. Arguments the node refuses
         * fail the job; any other refusal (a node that cannot host it)
         * counts, so a job no node takes ends failed instead of bouncing. */
        if (strcmp(code, "invalid_argument") == 0)
            rc = gw_store_job_fail(app->store, job_id, attempt, "failed", code, msg, backend, usage,
                                   node_id);
        else
            rc = requeue(app, node_id, job_id, attempt,
                         json_is_true(json_object_get(report, "retry")), "dispatch_failed", msg,
                         backend, usage);
    } else if (strcmp(state, "cancelled") == 0 && strcmp(code, "timeout") != 0) {
        rc = requeue(app, node_id, job_id, attempt, 0, "cancelled", "the node cancelled the run",
                     backend, usage);
    } else if (strcmp(code, "backend_error") == 0 || strcmp(code, "peer_lost") == 0 ||
               strcmp(code, "engine_error") == 0) {
        rc = requeue(app, node_id, job_id, attempt, 0, code, msg, backend, usage);
    } else {
        rc = gw_store_job_fail(app->store, job_id, attempt, "failed", code, msg, backend, usage,
                               node_id);
    }
    free(usage);
    return recorded(app, node_id, report, job_id, attempt, state, rc);
}

/* One report that goes into the batch: its decoded outputs, and the JSON
 * texts the statement's arrays point into. */
typedef struct batched {
    size_t i;   /* in the report array */
    gw_blob b;
    char *meta, *info, *usage, *u1, *u2;
} batched;

/* Decodes report rep of node_id (kept by the caller) into *e and row when
 * it is a succeeded run whose outputs are all inline; 0, or -1 (e left
 * empty) for any other report. */
static int batch_entry(const gw_app *app, const char *node_id, const json_t *rep, batched *e,
                       gw_success *row)
{
    const char *job_id = json_string_value(json_object_get(rep, "job_id"));
    const char *state = json_string_value(json_object_get(rep, "state"));
    const char *backend = gw_usage_backend(rep);
    json_t *att = json_object_get(rep, "attempt"), *info = json_object_get(rep, "info");
    char why[128];
    /* a part of a multi-node job is recorded with its gang (gang_record) */
    if (!job_id || !svc_uuid_valid(job_id) || !json_is_integer(att) || !state ||
        strcmp(state, "succeeded") != 0 || json_object_get(rep, "node_rank") || is_task(rep))
        return -1;
    const char *kernel = json_string_value(json_object_get(rep, "kernel"));
    if (outputs_from_run(&e->b, json_object_get(rep, "outputs"), why, sizeof(why)) == 0 &&
        gw_blob_check_outputs(e->b.meta, kernel, why, sizeof(why)) == 0 &&
        (e->meta = svc_json_dump(e->b.meta, NULL)) && !strstr(e->meta, "\"blob\"") &&
        (!json_is_object(info) || (e->info = svc_json_dump(info, NULL)))) {
        e->usage = gw_usage_from_report(rep);
        gw_usage_fragments(rep, backend, e->b.len, app->prices, &e->u1, &e->u2);
        *row = (gw_success){job_id, (int)json_integer_value(att), backend ? backend : "cpu",
                            e->info ? e->info : "{}", e->meta, e->usage, e->u1, e->u2,
                            e->b.data, e->b.len, 0, kernel, node_id};
        return 0;
    }
    gw_blob_free(&e->b);
    free(e->meta);
    free(e->info);
    memset(e, 0, sizeof(*e));
    return -1;
}

/* The succeeded runs of one exchange that go to PostgreSQL in one
 * statement, with the exchanges of other nodes waiting beside them. */
struct gw_outcome_batch {
    char node_id[37];
    const json_t *reports;
    int *out;
    int nb;
    gw_success *rows;
    batched *es;
};

gw_outcome_batch *gw_outcome_batch_prepare(gw_app *app, const char *node_id, const json_t *reports,
                                           int *out)
{
    size_t n = json_array_size(reports);
    gw_outcome_batch *b = calloc(1, sizeof(*b));
    gw_success *rows = calloc(n ? n : 1, sizeof(*rows));
    batched *es = calloc(n ? n : 1, sizeof(*es));
    int nb = 0;
    if (b)
        snprintf(b->node_id, sizeof(b->node_id), "%s", node_id);
    /* Succeeded runs with small outputs only go together in one statement;
     * anything else (a failure, a blob output, a report that does not
     * decode) is recorded on its own, as is everything without memory. */
    for (size_t i = 0; i < n; i++) {
        const json_t *rep = json_array_get(reports, i);
        if (b && rows && es && batch_entry(app, b->node_id, rep, &es[nb], &rows[nb]) == 0) {
            es[nb++].i = i;
        } else {
            out[i] = gw_outcome_record(app, node_id, rep);
        }
    }
    if (!nb) {
        free(rows);
        free(es);
        free(b);
        return NULL;
    }
    b->reports = reports;
    b->out = out;
    b->nb = nb;
    b->rows = rows;
    b->es = es;
    return b;
}

int gw_outcome_batch_commit(gw_app *app, gw_outcome_batch *const *bs, int n)
{
    if (n == 1)
        return gw_store_jobs_succeed_inline(app->store, bs[0]->rows, bs[0]->nb);
    int total = 0;
    for (int k = 0; k < n; k++)
        total += bs[k]->nb;
    gw_success *rows = malloc(sizeof(*rows) * (size_t)total);
    if (!rows)
        return -ENOMEM;
    for (int k = 0, at = 0; k < n; at += bs[k]->nb, k++)
        memcpy(rows + at, bs[k]->rows, sizeof(*rows) * (size_t)bs[k]->nb);
    int rc = gw_store_jobs_succeed_inline(app->store, rows, total);
    for (int k = 0, at = 0; k < n; at += bs[k]->nb, k++)
        for (int j = 0; j < bs[k]->nb; j++)
            bs[k]->rows[j].recorded = rows[at + j].recorded;
    free(rows);
    return rc;
}

void gw_outcome_batch_finish(gw_app *app, gw_outcome_batch *b, int rc)
{
    for (int k = 0; k < b->nb; k++) {
        const json_t *rep = json_array_get(b->reports, b->es[k].i);
        /* PostgreSQL refused the batch (one result too large for a value,
         * say): each on its own, so that only that one fails. */
        if (rc == -EPROTO)
            b->out[b->es[k].i] = gw_outcome_record(app, b->node_id, rep);
        else
            b->out[b->es[k].i] = recorded(app, b->node_id, rep, b->rows[k].job_id,
                                          b->rows[k].attempt, "succeeded",
                                          rc ? rc : b->rows[k].recorded ? 0 : -EAGAIN);
        gw_blob_free(&b->es[k].b);
        free(b->es[k].meta);
        free(b->es[k].info);
        free(b->es[k].usage);
        free(b->es[k].u1);
        free(b->es[k].u2);
    }
    free(b->rows);
    free(b->es);
    free(b);
}
