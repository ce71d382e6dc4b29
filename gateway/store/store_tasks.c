/* store_tasks.c — what PostgreSQL keeps of tasks besides the job row
 * (sql/023_tasks.sql): the tenant's image patterns, a part's end (exit
 * code, log blob), the live log chunks nodes ship, and the images nodes
 * have. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "svc_util.h"

/* A JSON string of bytes b: valid UTF-8 sequences as they are, any other
 * byte as U+FFFD (a log is bytes; an event is JSON). NULL on ENOMEM. */
static json_t *lossy_string(const unsigned char *b, size_t n)
{
    char *out = malloc(n * 3 + 1);
    size_t k = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        unsigned char c = b[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + len <= n && c != 0;
        for (size_t j = 1; ok && j < len; j++)
            ok = (b[i + j] & 0xc0) == 0x80;
        if (ok && len == 2)
            ok = c >= 0xc2;
        if (ok && len == 3) {
            unsigned cp = ((c & 0x0fu) << 12) | ((b[i + 1] & 0x3fu) << 6) | (b[i + 2] & 0x3fu);
            ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
        }
        if (ok && len == 4) {
            unsigned cp = ((c & 0x07u) << 18) | ((b[i + 1] & 0x3fu) << 12) |
                          ((b[i + 2] & 0x3fu) << 6) | (b[i + 3] & 0x3fu);
            ok = cp >= 0x10000 && cp <= 0x10ffff;
        }
        if (ok) {
            memcpy(out + k, b + i, len);
            k += len;
            i += len;
        } else {
            memcpy(out + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    json_t *j = json_stringn(out, k);
    free(out);
    return j;
}

int gw_store_tenant_tasks(gw_store *s, int64_t tenant_id, char **images, int *has, int *egress)
{
    char tenant[24];
    snprintf(tenant, sizeof tenant, "%" PRId64, tenant_id);
    const char *v[1] = {tenant};
    PGresult *r = NULL;
    *images = NULL;
    *has = *egress = 0;
    int rc = store__run(s, ST_TENANT_TASKS, v, &r);
    if (rc == 0 && PQntuples(r) == 1) {
        *has = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
        *egress = strcmp(PQgetvalue(r, 0, 2), "t") == 0;
        if (*has && !(*images = strdup(PQgetvalue(r, 0, 0))))
            rc = -ENOMEM;
    }
    PQclear(r);
    return rc;
}

int gw_store_task_ended(gw_store *s, const char *job_id, int attempt, int part,
                        const int *exit_code, const char *log_blob, int64_t log_bytes,
                        int64_t dropped, const char *node_id)
{
    char att[16], prt[16], code[16], bytes[24], drop[24];
    snprintf(att, sizeof att, "%d", attempt);
    snprintf(prt, sizeof prt, "%d", part);
    snprintf(code, sizeof code, "%d", exit_code ? *exit_code : 0);
    snprintf(bytes, sizeof bytes, "%" PRId64, log_bytes);
    snprintf(drop, sizeof drop, "%" PRId64, dropped);
    const char *v[8] = {job_id, att, exit_code ? code : NULL, prt, log_blob, bytes, drop, node_id};
    PGresult *r = NULL;
    int rc = store__run(s, ST_TASK_ENDED, v, &r);
    if (rc == 0 && PQntuples(r) == 0)
        rc = -EAGAIN;
    PQclear(r);
    return rc;
}

int gw_store_task_logs_append(gw_store *s, const char *node_id, const char *batch_json,
                              int64_t cap, gw_event_row **rows, int *n)
{
    char caps[24];
    snprintf(caps, sizeof caps, "%" PRId64, cap);
    const char *v[3] = {batch_json, node_id, caps};
    PGresult *r = NULL;
    *rows = NULL;
    *n = 0;
    int rc = store__run(s, ST_TASK_LOGS_APPEND, v, &r);
    int m = rc == 0 ? PQntuples(r) : 0;
    if (m > 0 && !(*rows = calloc((size_t)m, sizeof **rows)))
        rc = -ENOMEM;
    for (int i = 0; rc == 0 && i < m; i++) {
        gw_event_row *e = &(*rows)[i];
        unsigned char *text = NULL;
        size_t tlen = 0;
        const char *b64 = PQgetvalue(r, i, 4);
        store__copy(r, i, 0, e->job_id, sizeof e->job_id);
        snprintf(e->state, sizeof e->state, "running");
        store__copy(r, i, 6, e->kernel, sizeof e->kernel);
        e->tenant_id = strtoll(PQgetvalue(r, i, 5), NULL, 10);
        /* PostgreSQL's base64 breaks lines every 76 characters */
        char *flat = malloc(strlen(b64) + 1);
        size_t k = 0;
        for (const char *p = b64; flat && *p; p++)
            if (*p != '\n')
                flat[k++] = *p;
        if (flat && svc_b64_decode(flat, k, &text, &tlen) == 0) {
            json_t *labels = json_loads(PQgetvalue(r, i, 7), 0, NULL);
            /* the text as the stream carries it: bytes that are not UTF-8
             * become U+FFFD, so that an event is always JSON */
            json_t *str = lossy_string(text, tlen);
            e->data = json_pack("{s:s, s:i, s:i, s:I, s:o, s:s, s:o}", "job_id", e->job_id,
                                "attempt", atoi(PQgetvalue(r, i, 1)), "part",
                                atoi(PQgetvalue(r, i, 2)), "offset",
                                (json_int_t)strtoll(PQgetvalue(r, i, 3), NULL, 10), "text", str,
                                "kernel", e->kernel, "labels", labels ? labels : json_object());
        }
        free(flat);
        free(text);
        if (!e->data)
            rc = -ENOMEM;
        *n = i + 1;
    }
    PQclear(r);
    if (rc != 0) {
        gw_event_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

int gw_store_task_log_read(gw_store *s, int64_t tenant_id, const char *job_id, int part,
                           int64_t from, gw_task_log *out)
{
    char tenant[24], prt[16], frm[24];
    snprintf(tenant, sizeof tenant, "%" PRId64, tenant_id);
    snprintf(prt, sizeof prt, "%d", part);
    snprintf(frm, sizeof frm, "%" PRId64, from);
    const char *v[4] = {job_id, tenant, prt, frm};
    PGresult *r = NULL;
    memset(out, 0, sizeof *out);
    int rc = store__run(s, ST_TASK_LOG_READ, v, &r);
    if (rc == 0 && PQntuples(r) == 0)
        rc = -ENOENT;
    if (rc == 0) {
        store__copy(r, 0, 0, out->state, sizeof out->state);
        out->is_task = strcmp(PQgetvalue(r, 0, 1), "task") == 0;
        out->attempt = atoi(PQgetvalue(r, 0, 5));
        if (!PQgetisnull(r, 0, 2))
            store__copy(r, 0, 2, out->blob, sizeof out->blob);
        out->start = -1;
    }
    size_t cap = 0;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        if (PQgetisnull(r, i, 3))
            continue;
        int64_t off = strtoll(PQgetvalue(r, i, 3), NULL, 10);
        size_t len = 0;
        unsigned char *d = PQunescapeBytea((const unsigned char *)PQgetvalue(r, i, 4), &len);
        if (!d) {
            rc = -ENOMEM;
            break;
        }
        if (out->start < 0)
            out->start = off;
        /* the first chunk may begin before from */
        size_t skip = off < from ? (size_t)(from - off) : 0;
        if (skip > len)
            skip = len;
        if (out->start < from)
            out->start = from;
        if (out->len + len - skip > cap) {
            size_t ncap = (out->len + len - skip) * 2 + 1;
            unsigned char *p = realloc(out->data, ncap);
            if (!p) {
                PQfreemem(d);
                rc = -ENOMEM;
                break;
            }
            out->data = p;
            cap = ncap;
        }
        memcpy(out->data + out->len, d + skip, len - skip);
        out->len += len - skip;
        PQfreemem(d);
    }
    if (rc == 0 && out->start < 0)
        out->start = from;
    PQclear(r);
    if (rc != 0) {
        free(out->data);
        out->data = NULL;
        out->len = 0;
    }
    return rc;
}

int gw_store_task_images(gw_store *s, json_t **images)
{
    PGresult *r = NULL;
    *images = NULL;
    int rc = store__run(s, ST_TASK_IMAGES, NULL, &r);
    json_t *out = rc == 0 ? json_array() : NULL;
    if (rc == 0 && !out)
        rc = -ENOMEM;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++)
        if (json_array_append_new(out, json_pack("{s:s, s:i}", "image", PQgetvalue(r, i, 0),
                                                 "nodes", atoi(PQgetvalue(r, i, 1)))) != 0)
            rc = -ENOMEM;
    PQclear(r);
    if (rc == 0)
        *images = out;
    else
        json_decref(out);
    return rc;
}
