/* api_events.c — the event streams of the public API (events.h): GET
 * /v1/events (a tenant's jobs, with filters) and GET /v1/jobs/{id}/events
 * (one job, ending after its terminal event), as text/event-stream. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "events.h"
#include "svc_sse.h"
#include "svc_util.h"

/* The event id to resume after: the Last-Event-ID header, else the
 * last_event_id query parameter (an EventSource cannot set headers on its
 * first connection). 0, or -1 after replying 400. */
static int resume_after(svc_req *req, int64_t *after)
{
    const char *h = svc_req_header(req, "Last-Event-ID");
    const char *field = h ? "Last-Event-ID" : "last_event_id";
    if (gw_event_id_parse(h ? h : svc_req_query(req, "last_event_id"), after) == 0)
        return 0;
    svc_reply_error(req, 400, "invalid_argument", field, NULL,
                    "%s must be the id of an event (a non-negative integer)", field);
    return -1;
}

/* The duration_s query parameter: 0 when absent, else 1 to
 * GW_EVENTS_DURATION_MAX_S. 0, or -1 after replying 400. */
static int duration(svc_req *req, int *out)
{
    const char *q = svc_req_query(req, "duration_s");
    *out = 0;
    if (!q)
        return 0;
    size_t len = strlen(q);
    long v = len >= 1 && len <= 5 && strspn(q, "0123456789") == len ? strtol(q, NULL, 10) : 0;
    if (v < 1 || v > GW_EVENTS_DURATION_MAX_S) {
        svc_reply_error(req, 400, "invalid_argument", "duration_s", NULL,
                        "duration_s must be an integer from 1 to %d", GW_EVENTS_DURATION_MAX_S);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int gw_api_events(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    gw_event_filter f;
    const char *field = NULL;
    char msg[200];
    if (gw_event_filter_parse(&f, svc_req_query(req, "kernel"), svc_req_query(req, "label"),
                              svc_req_query(req, "state"), &field, msg, sizeof(msg)) != 0)
        return svc_reply_error(req, 400, "invalid_argument", field, NULL, "%s", msg);
    int64_t after;
    int duration_s;
    if (resume_after(req, &after) != 0 || duration(req, &duration_s) != 0)
        return 0;
    /* Not resuming: from the next event on, after every id drawn so far. */
    if (after < 0 && gw_store_events_last(app->store, &after) != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    gw_events_open(app->events, req, who.tenant_id, who.key_id, NULL, &f, after, duration_s);
    return 0;
}

int gw_api_job_events(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id = gw_job_id_param(req);
    if (!id)
        return 0;
    int64_t after;
    int duration_s;
    if (resume_after(req, &after) != 0 || duration(req, &duration_s) != 0)
        return 0;
    json_t *job;
    int rc = gw_store_job_get(app->store, who.tenant_id, id, &job);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such job");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    const char *state = json_string_value(json_object_get(job, "state"));
    int ended = state && (!strcmp(state, "succeeded") || !strcmp(state, "failed") ||
                          !strcmp(state, "cancelled"));
    json_decref(job);
    int64_t last = 0;
    if (ended && after >= 0 && gw_store_job_last_event(app->store, id, &last) != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    if (ended && after >= 0 && after >= last) {
        /* Resumed after the job's last event: nothing more will come. */
        svc_sse *c = svc_sse_open(req, 0);
        if (c) {
            svc_sse_end(c);
            svc_sse_release(c);
        }
        return 0;
    }
    gw_events_open(app->events, req, who.tenant_id, who.key_id, id, NULL, after, duration_s);
    return 0;
}
