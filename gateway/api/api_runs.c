/* api_runs.c — the nodes' side of a run's travel (each node with its own
 * credential, for its own runs): the lease poll that hands runs and
 * cancels to a node, and the report of runs that ended, many per exchange
 * both ways. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "committer.h"
#include "lease.h"
#include "outcome.h"
#include "progress.h"
#include "scheduler.h"
#include "svc_log.h"
#include "svc_util.h"

/* Longest a node's poll is held. */
#define LEASE_WAIT_MAX_MS 60000
/* Most runs a poll may ask for, and most reports one exchange may carry. */
#define LEASE_RUNS_MAX 1024

/* The node the request's credential names (the path's {node}, checked
 * from the head); NULL after replying 500. */
static const char *node_param(svc_req *req)
{
    const char *id = gw_req_node(req);
    if (id)
        return id;
    svc_reply_error(req, 500, "internal", NULL, NULL, "the request has no authenticated node");
    return NULL;
}

/* An integer member of body in [lo, hi], or def when absent; -1 after
 * replying 400 naming it. */
static int int_member(svc_req *req, const json_t *body, const char *name, int lo, int hi, int def,
                      int *out)
{
    json_t *v = json_object_get(body, name);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        svc_reply_error(req, 400, "invalid_argument", name, NULL,
                        "%s must be an integer from %d to %d", name, lo, hi);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

/* "seq" of body (how many of the node's runs had ended when it sent
 * this), 0 when absent; -1 after replying 400. */
static int seq_member(svc_req *req, const json_t *body, uint64_t *out)
{
    json_t *v = json_object_get(body, "seq");
    *out = 0;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        svc_reply_error(req, 400, "invalid_argument", "seq", NULL,
                        "seq must be a non-negative integer");
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int gw_api_node_lease(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *id;
    int max, wait_ms;
    if (!(id = node_param(req)))
        return 0;
    const json_t *b = svc_req_json(req);
    uint64_t seq;
    if (int_member(req, b, "max", 0, LEASE_RUNS_MAX, 0, &max) != 0 ||
        int_member(req, b, "wait_ms", 0, LEASE_WAIT_MAX_MS, 10000, &wait_ms) != 0 ||
        seq_member(req, b, &seq) != 0)
        return 0;
    gw_leases_poll(app->leases, req, id, max, seq, wait_ms);
    return 0;
}

/* Reports of many nodes committed together: one thread, since a batch
 * waits only for the one before it; a batch of at most this many
 * exchanges (each up to LEASE_RUNS_MAX reports). */
#define RESULTS_COMMIT_THREADS 1
#define RESULTS_BATCH_MAX 64
/* While reports keep coming (a batch taken within RESULTS_BUSY_MS), the
 * thread gathers for RESULTS_LINGER_MS from the first waiting one: the
 * results statement costs PostgreSQL about 0.33 ms however many rows it
 * has, and 0.03 ms a row (a bench of the statement's writes alone: 0.36 ms
 * a row at one a statement, 0.12 at four, 0.05 at sixteen), and at the
 * 1,000-node ceiling it committed 2.7-3.3 rows a statement, 38 % of
 * PostgreSQL's statement time. A GPU is known free that much later. */
#define RESULTS_LINGER_MS 8
#define RESULTS_BUSY_MS 20

/* A node's exchange of reports whose successes wait for their batch's
 * commit (committer.h). */
typedef struct results_call {
    gw_commit_item item;      /* first: the committer hands this back */
    gw_app *app;
    svc_req *req;
    char id[37];
    json_t *results;          /* the request's, held */
    int *rcs;                 /* per report: gw_outcome_record's answer */
    int free_slots;
    uint64_t seq;
    gw_outcome_batch *batch;
} results_call;

/* Answers call's exchange, whose reports are all recorded (rcs), and
 * tells the scheduler and the lease what the node freed. */
static int results_answer(const results_call *call)
{
    json_t *recorded = json_array();
    size_t i;
    const json_t *r;
    int freed = 0;
    /* the jobs whose runs here ended: a job holds one part per node */
    const char **ended = calloc(json_array_size(call->results) + 1, sizeof(*ended));
    int *attempts = calloc(json_array_size(call->results) + 1, sizeof(*attempts));
    json_array_foreach(call->results, i, r) {
        int rc = call->rcs[i];
        const char *run_id = json_string_value(json_object_get(r, "run_id"));
        if (rc < 0)
            svc_warn("node %s: report %zu is not a run report (no job_id/attempt); dropped",
                     call->id, i);
        if (rc != 0 && run_id)
            json_array_append_new(recorded, json_string(run_id));
        if (rc == 1 && ended && attempts) {
            attempts[freed] = (int)json_integer_value(json_object_get(r, "attempt"));
            ended[freed++] = json_string_value(json_object_get(r, "job_id"));
        }
    }
    if (freed)
        gw_sched_runs_ended(call->app->sched, call->id, ended, attempts, freed);
    free(ended);
    free(attempts);
    gw_leases_set_room(call->app->leases, call->id, call->free_slots, call->seq);
    return svc_reply_json(call->req, 200, json_pack("{s:o}", "recorded", recorded));
}

static void results_call_free(results_call *call)
{
    json_decref(call->results);
    free(call->rcs);
    free(call);
}

int gw_api_node_results(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *id;
    int free_slots;
    if (!(id = node_param(req)))
        return 0;
    const json_t *b = svc_req_json(req);
    json_t *results = json_object_get(b, "results");
    uint64_t seq;
    if (int_member(req, b, "free", 0, LEASE_RUNS_MAX, 0, &free_slots) != 0 ||
        seq_member(req, b, &seq) != 0)
        return 0;
    if (!json_is_array(results) || json_array_size(results) > LEASE_RUNS_MAX)
        return svc_reply_error(req, 400, "invalid_argument", "results", NULL,
                               "results must be an array of at most %d run reports", LEASE_RUNS_MAX);
    const json_t *progress = json_object_get(b, "progress");
    if (gw_progress_check(req, progress, LEASE_RUNS_MAX) != 0)
        return 0;
    size_t k;
    const json_t *rep;
    json_array_foreach(results, k, rep) {
        static const char *const strings[] = {"run_id", "job_id", "state"};
        const char *bad = json_is_object(rep) ? NULL : "";
        for (int f = 0; !bad && f < 3; f++) {
            json_t *v = json_object_get(rep, strings[f]);
            if (v && !json_is_string(v))
                bad = strings[f];
        }
        json_t *att = json_object_get(rep, "attempt");
        if (!bad && att && !json_is_integer(att))
            bad = "attempt";
        if (bad) {
            char field[48];
            snprintf(field, sizeof field, "results[%zu]%s%s", k, *bad ? "." : "", bad);
            return svc_reply_error(req, 400, "invalid_argument", field, NULL,
                                   "%s: a run report is an object; run_id, job_id and state are "
                                   "strings, attempt an integer", field);
        }
    }
    /* Before the results: a run's last progress comes with its end, and
     * is kept only while the job is still running. */
    gw_progress_record(app, id, progress, results);
    int *rcs = calloc(json_array_size(results) + 1, sizeof(*rcs));
    results_call *call = rcs ? calloc(1, sizeof(*call)) : NULL;
    if (!call) {
        free(rcs);
        return svc_reply_error(req, 503, "unavailable", NULL, NULL, "out of memory; send again");
    }
    *call = (results_call){.app = app, .req = req, .results = json_incref(results), .rcs = rcs,
                           .free_slots = free_slots, .seq = seq};
    snprintf(call->id, sizeof(call->id), "%s", id);
    /* what cannot wait in a batch is recorded now; the successes wait for
     * results_commit, the request suspended until results_done answers */
    call->batch = gw_outcome_batch_prepare(app, id, results, call->rcs);
    int suspended = call->batch && svc_req_suspend(req) == 0;
    if (suspended && gw_committer_add(app->results, &call->item) == 0)
        return 0;
    if (call->batch) /* stopping, or cannot suspend: committed here, alone */
        gw_outcome_batch_finish(app, call->batch,
                                gw_outcome_batch_commit(app, &call->batch, 1));
    int rc = results_answer(call);
    if (suspended)
        svc_req_resume(req);
    results_call_free(call);
    return rc;
}

/* committer op: the successes of every exchange of the batch, of many
 * nodes, in one statement. */
static int results_commit(void *arg, gw_commit_item *const *items, int n)
{
    gw_outcome_batch *bs[RESULTS_BATCH_MAX];
    if (n > RESULTS_BATCH_MAX)
        return -E2BIG; /* not given (the committer's maximum): then one by one */
    for (int i = 0; i < n; i++)
        bs[i] = ((results_call *)items[i])->batch;
    if (n > 1)
        svc_debug("results: the successes of %d exchanges in one statement", n);
    return gw_outcome_batch_commit(arg, bs, n);
}

/* committer op: each report's outcome from the batch's, then the answer. */
static void results_done(void *arg, gw_commit_item *item)
{
    results_call *call = (results_call *)item;
    gw_outcome_batch_finish(arg, call->batch, item->rc);
    results_answer(call);
    svc_req_resume(call->req);
    results_call_free(call);
}

int gw_api_results_start(gw_app *app)
{
    static const gw_committer_ops ops = {.commit = results_commit, .done = results_done};
    app->results = gw_committer_start(&ops, app, RESULTS_COMMIT_THREADS, RESULTS_BATCH_MAX);
    if (app->results)
        gw_committer_linger(app->results, RESULTS_LINGER_MS, RESULTS_BUSY_MS);
    return app->results ? 0 : -ENOMEM;
}

void gw_api_results_stop(gw_app *app)
{
    gw_committer_stop(app->results);
    app->results = NULL;
}
