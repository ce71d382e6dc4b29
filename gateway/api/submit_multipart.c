/* submit_multipart.c — POST /v1/jobs as multipart/form-data: JSON and raw
 * tensor bytes in one request, without base64. The part named "job" holds
 * the job's JSON; every other part is a tensor's little-endian bytes,
 * streamed to the blob store as it arrives and recorded as one of the
 * tenant's blobs, and an input names its part: {"dtype","shape","part":"x"}.
 * The body is never held whole: only the job part is buffered (up to the
 * JSON body limit). Tensor parts count toward the tenant's blob quota as
 * they stream: past the room it had when the first one began, the body is
 * cut off and nothing of the part is kept. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "svc_bstore.h"
#include "quota.h"
#include "request.h"
#include "svc_json.h"
#include "svc_log.h"
#include "svc_multipart.h"

#define MP_MAX_PARTS 33 /* the job and up to 32 tensors */
#define JOB_PART "job"

typedef struct mp_part {
    char name[64];
    char id[SVC_BLOB_ID_LEN];
    int used;
} mp_part;

struct gw_mpart {
    svc_req *req;
    svc_multipart *mp;
    int in_job;              /* the current part is the job JSON */
    int seen_job;
    char *json;
    size_t json_len, json_max;
    svc_bwriter *w;           /* the current tensor part */
    mp_part part[MP_MAX_PARTS];
    int nparts;
    int room_read;           /* used and room were read (the first tensor part) */
    uint64_t used, room;     /* the tenant's blob bytes then, and what it may add */
    uint64_t streamed;       /* tensor bytes so far */
    int status;              /* the first failure: its reply */
    char code[32], err[256];
};

static int mp_fail(gw_mpart *m, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int mp_fail(gw_mpart *m, int status, const char *code, const char *fmt, ...)
{
    if (m->status == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->err, sizeof m->err, fmt, ap);
        va_end(ap);
        m->status = status;
        snprintf(m->code, sizeof m->code, "%s", code);
    }
    return -1;
}

static void mp_free(void *arg)
{
    gw_mpart *m = arg;
    svc_multipart_free(m->mp);
    svc_bwriter_abort(m->w);
    free(m->json);
    free(m);
}

static int on_begin(void *cls, const char *name, const char *filename, const char *ctype)
{
    gw_mpart *m = cls;
    gw_app *app = svc_req_app(m->req);
    (void)filename;
    if (strcmp(name, JOB_PART) == 0) {
        if (m->seen_job)
            return mp_fail(m, 400, "invalid_argument", "more than one part named \"job\"");
        if (ctype != NULL && strncasecmp(ctype, "application/json", 16) != 0)
            return mp_fail(m, 415, "unsupported_media_type",
                           "the \"job\" part must be application/json, not %.64s", ctype);
        m->in_job = m->seen_job = 1;
        return 0;
    }
    if (strlen(name) >= sizeof m->part[0].name)
        return mp_fail(m, 400, "invalid_argument", "part names are at most 63 bytes");
    for (int i = 0; i < m->nparts; i++)
        if (strcmp(m->part[i].name, name) == 0)
            return mp_fail(m, 400, "invalid_argument", "more than one part named \"%s\"", name);
    if (m->nparts == MP_MAX_PARTS - 1)
        return mp_fail(m, 400, "invalid_argument", "at most %d tensor parts", MP_MAX_PARTS - 1);
    snprintf(m->part[m->nparts].name, sizeof m->part[0].name, "%s", name);
    if (!m->room_read) {
        gw_reqctx *ctx = svc_req_user(m->req);
        m->used = 0;
        if (gw_quota_bytes(app) != 0 &&
            gw_store_tenant_blob_bytes(app->store, ctx->who.tenant_id, &m->used) != 0)
            return mp_fail(m, 503, "unavailable", "PostgreSQL is unavailable; retry shortly");
        m->room = gw_quota_room(app, m->used);
        m->room_read = 1;
    }
    if ((m->w = svc_bstore_write_begin(app->blobs)) == NULL)
        return mp_fail(m, 500, "internal", "the blob store cannot take part %s: %s", name,
                       strerror(errno));
    return 0;
}

static int on_data(void *cls, const char *data, size_t n)
{
    gw_mpart *m = cls;
    if (m->in_job) {
        if (n > m->json_max - m->json_len)
            return mp_fail(m, 413, "payload_too_large", "the \"job\" part is over %zu bytes",
                           m->json_max);
        char *p = realloc(m->json, m->json_len + n + 1);
        if (p == NULL)
            return mp_fail(m, 500, "internal", "out of memory");
        memcpy(p + m->json_len, data, n);
        m->json = p;
        m->json_len += n;
        return 0;
    }
    if (m->room != GW_QUOTA_NONE && n > m->room - m->streamed) {
        svc_bwriter_abort(m->w);
        m->w = NULL;
        svc_req_cut_body(m->req);
        return mp_fail(m, 413, "quota_exceeded", "part %s passed the tenant's blob quota and was "
                       "cut off", m->part[m->nparts].name);
    }
    m->streamed += n;
    int rc = svc_bwriter_append(m->w, data, n);
    return rc == 0 ? 0 : mp_fail(m, rc == -ENOSPC ? 507 : 500, rc == -ENOSPC ? "insufficient_storage" : "internal",
                                 "the blob store cannot take part %s: %s", m->part[m->nparts].name,
                                 strerror(-rc));
}

/* A tensor part is complete: stored, recorded as the tenant's blob (within
 * its quota) and named by its id. */
static int on_end(void *cls)
{
    gw_mpart *m = cls;
    gw_app *app = svc_req_app(m->req);
    if (m->in_job) {
        m->in_job = 0;
        return 0;
    }
    mp_part *p = &m->part[m->nparts];
    uint64_t size;
    gw_reqctx *ctx = svc_req_user(m->req);
    int created, rc = svc_bwriter_commit(m->w, p->id, &size);
    if (rc != 0)
        return mp_fail(m, rc == -ENOSPC ? 507 : 500, rc == -ENOSPC ? "insufficient_storage" : "internal",
                       "the blob store cannot take part %s: %s", p->name, strerror(-rc));
    rc = gw_store_blob_record(app->store, ctx->who.tenant_id, p->id, size, gw_quota_bytes(app),
                              &created);
    if (rc == -EDQUOT && gw_store_tenant_blob_bytes(app->store, ctx->who.tenant_id, &m->used) == 0)
        return mp_fail(m, 413, "quota_exceeded", "part %s has %llu bytes", p->name,
                       (unsigned long long)size);
    if (rc != 0)
        return mp_fail(m, 503, "unavailable", "PostgreSQL is unavailable; retry shortly");
    rc = svc_bwriter_close(m->w);
    m->w = NULL;
    if (rc != 0)
        return mp_fail(m, 500, "internal", "the blob store failed on part %s", p->name);
    m->nparts++;
    return 0;
}

int gw_mpart_body(svc_req *req, const char *data, size_t n)
{
    gw_reqctx *ctx = gw_reqctx_of(req);
    if (ctx == NULL)
        return -1;
    gw_mpart *m = ctx->mpart;
    if (m == NULL) {
        static const svc_multipart_cb cb = {on_begin, on_data, on_end};
        gw_app *app = svc_req_app(req);
        const char *why = NULL;
        if ((m = ctx->mpart = calloc(1, sizeof *m)) == NULL)
            return -1;
        svc_req_on_free(req, mp_free, m);
        m->req = req;
        m->json_max = (size_t)app->cfg.max_json_body_mb << 20;
        m->mp = svc_multipart_new(svc_req_header(req, "Content-Type"), &cb, m, MP_MAX_PARTS, 0, &why);
        if (m->mp == NULL)
            return mp_fail(m, 400, "invalid_argument", "%s", why ? why : "not a multipart body");
    }
    if (m->status != 0 || svc_multipart_feed(m->mp, data, n) == 0)
        return m->status != 0 ? -1 : 0;
    return mp_fail(m, 400, "invalid_argument", "%s", svc_multipart_error(m->mp));
}

/* Replaces {"part": name} in each input of the job with {"blob": id}; 0,
 * or -1 after replying 422 naming the input or the part. */
static int resolve_parts(svc_req *req, gw_mpart *m, json_t *job)
{
    const char *key;
    json_t *in;
    json_object_foreach(json_object_get(job, "inputs"), key, in) {
        json_t *part = json_object_get(in, "part");
        if (part == NULL)
            continue;
        const char *pn = json_string_value(part);
        int i = 0;
        while (pn != NULL && i < m->nparts && strcmp(m->part[i].name, pn) != 0)
            i++;
        char field[64];
        snprintf(field, sizeof field, "inputs.%.50s", key);
        if (pn == NULL || i == m->nparts)
            return svc_reply_error(req, 422, "invalid_argument", field, NULL,
                                   "%s names part %.64s, which the body does not have", field,
                                   pn ? pn : "(not a string)"), -1;
        m->part[i].used = 1;
        json_object_del(in, "part");
        json_object_set_new(in, "blob", json_string(m->part[i].id));
    }
    for (int i = 0; i < m->nparts; i++)
        if (!m->part[i].used)
            return svc_reply_error(req, 422, "invalid_argument", "inputs", NULL,
                                   "part %s is not named by any input ({\"part\": \"%s\"})",
                                   m->part[i].name, m->part[i].name), -1;
    return 0;
}

json_t *gw_mpart_job(svc_req *req)
{
    gw_reqctx *ctx = gw_reqctx_of(req);
    gw_mpart *m = ctx ? ctx->mpart : NULL;
    if (m == NULL) {
        svc_reply_error(req, 400, "invalid_argument", NULL, NULL,
                        "the multipart body is empty; it needs a part named \"job\"");
        return NULL;
    }
    if (m->status == 0 && svc_multipart_finish(m->mp) != 0)
        mp_fail(m, 400, "invalid_argument", "%s", svc_multipart_error(m->mp));
    if (m->status == 0 && !m->seen_job)
        mp_fail(m, 400, "invalid_argument", "a multipart submit needs a part named \"job\" "
                "holding the job's JSON");
    if (m->status != 0) {
        if (m->status == 503)
            svc_reply_header(req, "Retry-After", "2");
        if (strcmp(m->code, "quota_exceeded") == 0)
            gw_reply_quota(req, svc_req_app(req), m->used, "%s", m->err);
        else
            svc_reply_error(req, m->status, m->code, NULL, NULL, "%s", m->err);
        return NULL;
    }
    /* The job part is held to what a JSON body is held to (svc_http.h),
     * before any value of it is built; an array is no job. */
    const char *text = m->json ? m->json : "";
    size_t lead = 0;
    while (lead < m->json_len && strchr(" \t\r\n", text[lead]) != NULL)
        lead++;
    json_error_t jerr;
    svc_json_limits lim = {.fields = gw_job_fields};
    svc_json_over over = SVC_JSON_WITHIN;
    int array = lead < m->json_len && text[lead] == '[';
    json_t *job = array ? NULL : svc_json_parse_limits(text, m->json_len, &lim, &jerr, &over);
    if (over == SVC_JSON_OVER_FIELD) {
        svc_reply_error(req, 400, "invalid_argument", jerr.source, NULL, "the \"job\" part: %s",
                        jerr.text);
        return NULL;
    }
    if (over != SVC_JSON_WITHIN) {
        svc_reply_error(req, 413, "payload_too_large", NULL, NULL, "the \"job\" part: %s",
                        jerr.text);
        return NULL;
    }
    if (job == NULL || !json_is_object(job)) {
        json_decref(job);
        svc_reply_error(req, 400, "invalid_json", NULL, NULL, "the \"job\" part: %s",
                        job != NULL || array ? "must be a JSON object" : jerr.text);
        return NULL;
    }
    if (resolve_parts(req, m, job) != 0) {
        json_decref(job);
        return NULL;
    }
    return job;
}
