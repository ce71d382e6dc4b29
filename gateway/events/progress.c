/* progress.c — running jobs' progress from nodes' reports (progress.h). */
#include "progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "svc_log.h"
#include "svc_util.h"

/* NULL when p is a progress object, else what is wrong with it. A
 * kernel's always says its fraction; a task's is what the program wrote
 * ({"epoch": 3, "loss": 0.41}), so fraction is checked only when present. */
static const char *progress_problem(const json_t *p)
{
    if (!json_is_object(p) || json_object_size(p) > GW_PROGRESS_MEMBERS)
        return "an object of at most 16 members";
    const json_t *f = json_object_get(p, "fraction");
    if (f && (!json_is_number(f) || !(json_number_value(f) >= 0 && json_number_value(f) <= 1)))
        return "an object whose fraction, when it has one, is a number from 0 to 1";
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)p, k, v)
        if (!json_is_number(v) || strlen(k) > 64)
            return "an object of numbers named by at most 64 characters";
    return NULL;
}

int gw_progress_check(svc_req *req, const json_t *progress, size_t max)
{
    if (!progress)
        return 0;
    if (!json_is_array(progress) || json_array_size(progress) > max) {
        svc_reply_error(req, 400, "invalid_argument", "progress", NULL,
                        "progress must be an array of at most %zu reports", max);
        return -1;
    }
    size_t i;
    const json_t *r;
    json_array_foreach(progress, i, r) {
        const char *job = json_string_value(json_object_get(r, "job_id"));
        const json_t *att = json_object_get(r, "attempt");
        const char *why = NULL, *member = "";
        if (!json_is_object(r))
            why = "a report is an object";
        else if (!job || !svc_uuid_valid(job))
            why = "job_id must be a job's id", member = ".job_id";
        else if (!json_is_integer(att) || json_integer_value(att) < 1)
            why = "attempt must be a positive integer", member = ".attempt";
        else if ((why = progress_problem(json_object_get(r, "progress"))))
            member = ".progress";
        if (why) {
            char field[48];
            snprintf(field, sizeof(field), "progress[%zu]%s", i, member);
            svc_reply_error(req, 400, "invalid_argument", field, NULL, "%s: %s", field, why);
            return -1;
        }
    }
    return 0;
}

/* Adds r's {job_id, attempt, progress} to by_job (keyed by job id; a
 * later one replaces an earlier) when r carries a valid one. */
static void progress_add(json_t *by_job, const json_t *r)
{
    const char *job = json_string_value(json_object_get(r, "job_id"));
    const json_t *att = json_object_get(r, "attempt"), *p = json_object_get(r, "progress");
    if (!job || !svc_uuid_valid(job) || !json_is_integer(att) || progress_problem(p))
        return;
    json_object_set_new(by_job, job, json_pack("{s:s, s:O, s:O}", "id", job, "attempt", att,
                                               "progress", p));
}

void gw_progress_record(gw_app *app, const char *node_id, const json_t *progress,
                        const json_t *results)
{
    json_t *by_job = json_object();
    size_t i;
    const json_t *r;
    json_array_foreach(progress, i, r)
        progress_add(by_job, r);
    json_array_foreach(results, i, r)
        progress_add(by_job, r);
    if (json_object_size(by_job) == 0) {
        json_decref(by_job);
        return;
    }
    json_t *reports = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(by_job, k, v)
        json_array_append(reports, v);
    size_t n_reports = json_array_size(reports);
    char *text = json_dumps(reports, JSON_COMPACT);
    json_decref(reports);
    json_decref(by_job);
    gw_event_row *rows = NULL;
    int n = 0;
    int rc = text ? gw_store_jobs_progress(app->store, node_id, text, &rows, &n) : -ENOMEM;
    free(text);
    if (rc != 0) {
        svc_warn("progress: %zu report(s) not recorded (%d)", n_reports, rc);
        return;
    }
    gw_events_progress(app->events, rows, n);
}
