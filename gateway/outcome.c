/* outcome.c — recording what nodes report (outcome.h). */
#include "outcome.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "events.h"
#include "scheduler.h"
#include "svc_log.h"
#include "svc_util.h"
#include "waits.h"

int gw_outcome_requeue(gw_app *app, const char *job_id, int attempt, int uncounted, const char *code,
                    const char *message)
{
    gw_backoff bo = {app->cfg.retry_base_ms, app->cfg.retry_max_s};
    gw_requeued out;
    int rc = gw_store_job_requeue(app->store, job_id, attempt, uncounted, code, message, &bo, &out);
    if (rc == 0)
        gw_events_written(app->events);
    if (rc == 0 && out.requeued) {
        gw_queue_push_queued(app->queue, &out.q);
        gw_sched_wake(app->sched);
    } else if (rc == 0) {
        gw_waits_job_changed(app->waits, job_id);   /* failed or cancelled */
    }
    return rc;
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

/* A succeeded run: its outputs and info recorded with the job's success. */
static int record_success(gw_app *app, const char *job_id, int attempt, const json_t *run)
{
    gw_blob b = {0};
    char why[256] = "out of memory";
    const char *backend = json_string_value(json_object_get(run, "backend"));
    int rc;
    if (outputs_from_run(&b, json_object_get(run, "outputs"), why, sizeof(why)) != 0) {
        rc = gw_store_job_fail(app->store, job_id, attempt, "failed", "bad_result", why);
    } else {
        char *meta = json_dumps(b.meta, JSON_COMPACT);
        json_t *info = json_object_get(run, "info");
        char *info_s = json_is_object(info) ? json_dumps(info, JSON_COMPACT) : NULL;
        rc = meta ? gw_store_job_succeed(app->store, job_id, attempt, backend ? backend : "cpu",
                                         info_s ? info_s : "{}", meta, b.data, b.len)
                  : -EIO;
        /* PostgreSQL refused the result itself (too large for one value,
         * say): trying again would not help, the job fails. */
        if (rc == -EPROTO)
            rc = gw_store_job_fail(app->store, job_id, attempt, "failed", "bad_result",
                                   "PostgreSQL refused to store the result (see the gateway log)");
        free(meta);
        free(info_s);
    }
    gw_blob_free(&b);
    return rc;
}

int gw_outcome_record(gw_app *app, const char *node_name, const json_t *report)
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
    int rc;
    if (strcmp(state, "succeeded") == 0) {
        rc = record_success(app, job_id, attempt, report);
    } else if (strcmp(state, "refused") == 0) {
        /* The node did not take the run. Full or draining: the attempt is
         * given back and the job placed again. Arguments the node refuses
         * fail the job; any other refusal (a node that cannot host it)
         * counts, so a job no node takes ends failed instead of bouncing. */
        if (strcmp(code, "invalid_argument") == 0)
            rc = gw_store_job_fail(app->store, job_id, attempt, "failed", code, msg);
        else
            rc = gw_outcome_requeue(app, job_id, attempt, json_is_true(json_object_get(report, "retry")),
                                 "dispatch_failed", msg);
    } else if (strcmp(state, "cancelled") == 0 && strcmp(code, "timeout") != 0) {
        rc = gw_outcome_requeue(app, job_id, attempt, 0, "cancelled", "the node cancelled the run");
    } else if (strcmp(code, "backend_error") == 0) {
        rc = gw_outcome_requeue(app, job_id, attempt, 0, code, msg);
    } else {
        rc = gw_store_job_fail(app->store, job_id, attempt, "failed", code, msg);
    }
    if (rc == 0) {
        gw_waits_job_changed(app->waits, job_id);
        gw_events_written(app->events);
    }
    if (rc == -EAGAIN)
        svc_info("job %s attempt %d: late report from %s ignored (attempt no longer current)",
                 job_id, attempt, node_name);
    else if (rc == 0)
        svc_debug("job %s attempt %d: %s on %s", job_id, attempt, state, node_name);
    else if (rc == -EPROTO)
        svc_error("job %s attempt %d: PostgreSQL refused the report from %s; it is dropped",
                  job_id, attempt, node_name);
    else
        svc_warn("job %s attempt %d: the report from %s could not be recorded now (%s); the "
                 "node sends it again", job_id, attempt, node_name, strerror(-rc));
    return rc == 0 || rc == -EAGAIN || rc == -EPROTO;
}
