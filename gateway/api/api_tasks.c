/* api_tasks.c — what only tasks have: the live logs nodes ship (cluster
 * listener), a task's logs for its tenant (GET /v1/jobs/{id}/logs, whole,
 * ranged or followed), and the images tasks may name (GET /v1/images).
 * Live log bytes are kept in PostgreSQL by offset (store_tasks.c) and go
 * to the event streams as `event: log`; once a part ends, the log blob its
 * node stored is the part's log. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "svc_bstore.h"
#include "events.h"
#include "logfollow.h"
#include "svc_log.h"
#include "svc_task.h"
#include "svc_util.h"

/* Most entries of one logs report (a node sends one per part it runs). */
#define LOGS_RUNS_MAX 1024

int gw_api_node_logs(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *node_id = gw_req_node(req);
    json_t *runs = json_object_get(svc_req_json(req), "runs");
    if (!json_is_array(runs) || json_array_size(runs) > LOGS_RUNS_MAX)
        return svc_reply_error(req, 400, "invalid_argument", "runs", NULL,
                               "runs must be a list of at most %d {job_id, attempt, part, offset, "
                               "data_b64}", LOGS_RUNS_MAX);
    json_t *batch = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r) {
        const char *job = json_string_value(json_object_get(r, "job_id"));
        json_t *att = json_object_get(r, "attempt"), *part = json_object_get(r, "part");
        json_t *off = json_object_get(r, "offset"), *data = json_object_get(r, "data_b64");
        unsigned char *bytes = NULL;
        size_t nbytes = 0;
        int bad = !job || !svc_uuid_valid(job) || !json_is_integer(att) ||
                  json_integer_value(att) < 1 || json_integer_value(att) > 1000000 ||
                  (part && (!json_is_integer(part) || json_integer_value(part) < 0 ||
                            json_integer_value(part) > 63)) ||
                  !json_is_integer(off) || json_integer_value(off) < 0 || !json_is_string(data) ||
                  svc_b64_decode(json_string_value(data), json_string_length(data), &bytes,
                                 &nbytes) != 0;
        free(bytes);
        if (bad) {
            json_decref(batch);
            return svc_reply_error(req, 400, "invalid_argument", "runs", NULL,
                                   "runs[%zu] must be {job_id: uuid, attempt: 1-1000000, part: "
                                   "0-63, offset >= 0, data_b64: base64}", i);
        }
        json_array_append_new(batch, json_pack("{s:s, s:O, s:I, s:O, s:O}", "job_id", job,
                                               "attempt", att, "part",
                                               part ? json_integer_value(part) : 0, "off", off,
                                               "b64", data));
    }
    char *text = json_dumps(batch, JSON_COMPACT);
    json_decref(batch);
    if (!text)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    gw_event_row *rows = NULL;
    int n = 0;
    int rc = gw_store_task_logs_append(app->store, node_id, text,
                                       (int64_t)app->cfg.task_log_mb << 20, &rows, &n);
    free(text);
    if (rc == -ENOMEM)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    for (int k = 0; k < n; k++)
        gw_logfollow_wake(app->follow, rows[k].job_id);
    gw_events_live(app->events, rows, n, "log");
    return svc_reply_json(req, 200, json_object());
}

/* ?part=N of a logs request: 0-63, 0 when absent; -1 after replying 400. */
static int part_param(svc_req *req)
{
    const char *p = svc_req_query(req, "part");
    if (!p)
        return 0;
    char *end;
    long v = strtol(p, &end, 10);
    if (!*p || *end || v < 0 || v > 63) {
        svc_reply_error(req, 400, "invalid_argument", "part", NULL,
                        "part must be a gang part's node_rank, 0 to 63");
        return -1;
    }
    return (int)v;
}

int gw_api_jobs_logs(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id;
    if (!(id = gw_job_id_param(req)))
        return 0;
    int part = part_param(req);
    if (part < 0)
        return 0;
    const char *follow = svc_req_query(req, "follow");
    if (follow && strcmp(follow, "1") != 0 && strcmp(follow, "0") != 0 &&
        strcmp(follow, "true") != 0 && strcmp(follow, "false") != 0)
        return svc_reply_error(req, 400, "invalid_argument", "follow", NULL,
                               "follow must be 1 or 0");
    gw_task_log lg;
    int rc = gw_store_task_log_read(app->store, who.tenant_id, id, part, 0, &lg);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such job");
    if (rc == -ENOMEM)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    if (!lg.is_task) {
        free(lg.data);
        return svc_reply_error(req, 404, "not_found", NULL, NULL,
                               "job %s runs a kernel; only tasks have logs", id);
    }
    int ended = strcmp(lg.state, "queued") != 0 && strcmp(lg.state, "running") != 0;
    if (follow && (strcmp(follow, "1") == 0 || strcmp(follow, "true") == 0) && !ended && !lg.blob[0]) {
        free(lg.data);
        return gw_logfollow_open(app->follow, req, who.tenant_id, who.key_id, id, part);
    }
    svc_reply_header(req, "X-Kowloon-Job-State", lg.state);
    if (lg.blob[0]) {
        free(lg.data);
        int fd = -1;
        uint64_t size = 0;
        if (svc_bstore_open_read(app->blobs, lg.blob, &fd, &size) != 0) {
            svc_error("blobs: the log %s of job %s part %d is missing", lg.blob, id, part);
            return svc_reply_error(req, 500, "internal", NULL, NULL, "the log's bytes are missing");
        }
        return gw_reply_blob_range(req, lg.blob, "text/plain; charset=utf-8", fd, size);
    }
    uint64_t off = 0, len = lg.len;
    int ranged = gw_range_parse(svc_req_header(req, "Range"), lg.len, &off, &len);
    char buf[96];
    svc_reply_header(req, "Accept-Ranges", "bytes");
    if (ranged < 0) {
        free(lg.data);
        snprintf(buf, sizeof buf, "bytes */%zu", lg.len);
        svc_reply_header(req, "Content-Range", buf);
        return svc_reply_error(req, 416, "range_not_satisfiable", "Range", NULL,
                               "the log has %zu bytes so far", lg.len);
    }
    if (ranged) {
        snprintf(buf, sizeof buf, "bytes %" PRIu64 "-%" PRIu64 "/%zu", off, off + len - 1, lg.len);
        svc_reply_header(req, "Content-Range", buf);
    }
    rc = svc_reply_raw(req, ranged ? 206 : 200, "text/plain; charset=utf-8",
                       lg.data ? lg.data + off : (const unsigned char *)"", len);
    free(lg.data);
    return rc;
}

int gw_api_images(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    char *mine = NULL;
    int has = 0, egress = 0;
    json_t *images = NULL;
    if (gw_store_tenant_tasks(app->store, who.tenant_id, &mine, &has, &egress) != 0 ||
        gw_store_task_images(app->store, &images) != 0) {
        free(mine);
        return gw_reply_unavailable(req, "PostgreSQL");
    }
    const char *list = has ? mine : app->cfg.task_images;
    json_t *allowed = json_array(), *usable = json_array();
    char buf[4096];
    char *save = NULL;
    snprintf(buf, sizeof buf, "%s", list ? list : "");
    for (char *p = strtok_r(buf, ", ", &save); p; p = strtok_r(NULL, ", ", &save))
        json_array_append_new(allowed, json_string(p));
    size_t i;
    json_t *im;
    json_array_foreach(images, i, im)
        if (svc_task_image_allowed(list, json_string_value(json_object_get(im, "image"))))
            json_array_append(usable, im);
    json_decref(images);
    free(mine);
    return svc_reply_json(req, 200, json_pack("{s:o, s:o, s:b}", "allowed", allowed, "images",
                                              usable, "egress", egress));
}
