/* api_blobs.c — the blob API: raw bytes in (streamed to the blob store while
 * they are hashed, never held whole, within the tenant's quota), raw bytes
 * out (sendfile, with Range), and a tenant's references. A tenant reads
 * only blobs it uploaded: the same bytes from two tenants are stored once,
 * but knowing a hash is not access — another tenant's blob answers 404
 * like one that does not exist. Likewise a node reads only the inputs of
 * runs it holds, and what it stores counts as an output of the one run it
 * names. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adopt.h"
#include "api.h"
#include "svc_bstore.h"
#include "quota.h"
#include "svc_sha256.h"
#include "svc_log.h"

/* Drops an upload the request did not finish (client gone, refused). */
static void upload_abort(void *arg)
{
    gw_reqctx *ctx = arg;
    svc_bwriter_abort(ctx->upload);
    ctx->upload = NULL;
}

/* Starts the request's upload; 0 or -errno. */
static int upload_begin(svc_req *req, gw_reqctx *ctx)
{
    gw_app *app = svc_req_app(req);
    if ((ctx->upload = svc_bstore_write_begin(app->blobs)) == NULL)
        return -errno;
    svc_req_on_free(req, upload_abort, ctx);
    return 0;
}

int gw_api_blobs_head(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_reqctx *ctx = gw_reqctx_of(req);
    if (ctx == NULL)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory"), -1;
    /* authorized from the head already (routes.c): ctx->who is the caller */
    if (gw_quota_read(req, ctx->who.tenant_id, &ctx->used, &ctx->room) != 0)
        return -1;
    ctx->quota_read = 1;
    const char *cl = svc_req_header(req, "Content-Length");
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (ctx->room != GW_QUOTA_NONE && n > ctx->room)
        return gw_reply_quota(req, app, ctx->used, "the upload has %llu bytes", n), -1;
    return 0;
}

int gw_api_blobs_body(svc_req *req, const char *data, size_t n)
{
    gw_reqctx *ctx = gw_reqctx_of(req);
    if (ctx == NULL)
        return -1;
    if (ctx->upload == NULL && (ctx->upload_err = upload_begin(req, ctx)) != 0)
        return -1;
    /* Past the room the head found (a chunked body, or one the quota
     * shrank under meanwhile): nothing more is written, what was is
     * dropped, and the rest of the body is not read. */
    if (ctx->quota_read && ctx->room != GW_QUOTA_NONE &&
        n > ctx->room - svc_bwriter_size(ctx->upload)) {
        upload_abort(ctx);
        ctx->upload_err = -EDQUOT;
        svc_req_cut_body(req);
        return -1;
    }
    ctx->upload_err = svc_bwriter_append(ctx->upload, data, n);
    return ctx->upload_err;
}

/* The {id} of the path when it is a blob id; NULL after replying 400. */
static const char *blob_id_param(svc_req *req)
{
    const char *id = svc_req_param(req, "id");
    if (svc_blob_id_valid(id))
        return id;
    svc_reply_error(req, 400, "invalid_argument", "id", NULL,
                    "a blob id is \"sha256:\" followed by 64 lowercase hex digits");
    return NULL;
}

static int reply_store_failure(svc_req *req, int rc)
{
    if (rc == -EIO)
        return gw_reply_unavailable(req, "PostgreSQL");
    return svc_reply_error(req, 500, "internal", NULL, NULL, "the blob could not be recorded (%d)", rc);
}

/* Commits the request's upload to the store: 0 with id and size, or -1
 * after replying (500, 507). */
static int upload_commit(svc_req *req, gw_reqctx *ctx, char id[SVC_BLOB_ID_LEN], uint64_t *size)
{
    if (ctx->upload == NULL && ctx->upload_err == 0)
        ctx->upload_err = upload_begin(req, ctx); /* an empty body is an empty blob */
    if (ctx->upload_err == 0)
        ctx->upload_err = svc_bwriter_commit(ctx->upload, id, size);
    if (ctx->upload_err == 0)
        return 0;
    svc_error("blobs: cannot store an upload: %s", strerror(-ctx->upload_err));
    svc_reply_error(req, ctx->upload_err == -ENOSPC ? 507 : 500,
                    ctx->upload_err == -ENOSPC ? "insufficient_storage" : "internal", NULL, NULL,
                    "the blob store could not take the bytes: %s", strerror(-ctx->upload_err));
    return -1;
}

/* After the blob is recorded: its bytes are put back if retention took an
 * older copy meanwhile. 0, or -1 after replying 500. */
static int upload_close(svc_req *req, gw_reqctx *ctx, const char *id)
{
    int rc = svc_bwriter_close(ctx->upload);
    ctx->upload = NULL;
    if (rc == 0)
        return 0;
    svc_error("blobs: %s recorded but its bytes could not be put back: %s", id, strerror(-rc));
    svc_reply_error(req, 500, "internal", NULL, NULL, "the blob store failed");
    return -1;
}

int gw_api_cluster_blobs_upload(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_reqctx *ctx = gw_reqctx_of(req);
    char id[SVC_BLOB_ID_LEN];
    uint64_t size = 0;
    if (ctx == NULL)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    if (upload_commit(req, ctx, id, &size) != 0)
        return 0;
    /* An output of the run the query names, which the node holds (checked
     * from the head), hashed as it streamed in: recorded with no tenant
     * reference; the fenced step that marks its job succeeded gives the job
     * and its tenant theirs, and an output of an attempt that lost the race
     * is swept. */
    int rc = gw_store_run_output(app->store, svc_req_query(req, "job_id"),
                                 atoi(svc_req_query(req, "attempt")), id, size, gw_req_node(req));
    if (rc != 0)
        return reply_store_failure(req, rc);
    if (upload_close(req, ctx, id) != 0)
        return 0;
    return svc_reply_json(req, 201, json_pack("{s:s, s:I}", "id", id, "size", (json_int_t)size));
}

int gw_api_cluster_blobs_adopt(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *id = blob_id_param(req);
    json_t *jsize = json_object_get(svc_req_json(req), "size");
    uint64_t size;
    if (!id)
        return 0;
    if (!json_is_integer(jsize) || json_integer_value(jsize) < 0)
        return svc_reply_error(req, 400, "invalid_argument", "size", NULL,
                               "the body is {\"size\": bytes of the blob}");
    /* The file is there, with the size the node wrote? A cheap answer
     * first: a node whose mount is not this gateway's pushes instead. */
    int rc = svc_bstore_stat(app->blobs, id, &size);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL,
                               "the blob store has no file for %s: does the node share this "
                               "gateway's blob directory?", id);
    if (rc != 0)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "cannot stat the blob: %s",
                               strerror(-rc));
    if (size != (uint64_t)json_integer_value(jsize))
        return svc_reply_error(req, 422, "invalid_argument", "size", NULL,
                               "the blob store's %s has %" PRIu64 " bytes, not %" PRIu64, id, size,
                               (uint64_t)json_integer_value(jsize));
    /* Whoever can write the directory can put any bytes under any name: the
     * file is hashed before it is recorded, off the HTTP threads. */
    if (gw_adopter_submit(app->adopter, req, id, size, svc_req_query(req, "job_id"),
                          atoi(svc_req_query(req, "attempt")), gw_req_node(req)) != 0) {
        svc_reply_header(req, "Retry-After", "1");
        return svc_reply_error(req, 503, "unavailable", NULL, NULL,
                               "too many blobs are being hashed; try again");
    }
    return 0;
}

static int reply_blob(svc_req *req, const char *id, int fd, uint64_t size);

int gw_api_cluster_blobs_get(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *id = blob_id_param(req);
    int fd;
    uint64_t size;
    if (!id)
        return 0;
    /* only an input of a run this node holds now: a node is not a key to
     * every tenant's blobs */
    int rc = gw_store_node_blob_get(app->store, gw_req_node(req), id, &size);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL,
                               "no such blob among the inputs of the runs this node holds");
    if (rc != 0)
        return reply_store_failure(req, rc);
    rc = svc_bstore_open_read(app->blobs, id, &fd, &size);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such blob");
    if (rc != 0)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "cannot open the blob: %s", strerror(-rc));
    /* a node's part of a multi-node job fetches only its rows (Range) */
    return reply_blob(req, id, fd, size);
}

int gw_api_blobs_upload(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_reqctx *ctx = gw_reqctx_of(req);
    char id[SVC_BLOB_ID_LEN];
    uint64_t size = 0;
    int created = 0, rc;
    if (ctx == NULL)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    if (ctx->upload_err == -EDQUOT)
        return gw_reply_quota(req, app, ctx->used, "the upload passed the tenant's quota and was "
                              "cut off; nothing of it was stored");
    if (upload_commit(req, ctx, id, &size) != 0)
        return 0;
    rc = gw_store_blob_record(app->store, ctx->who.tenant_id, id, size, gw_quota_bytes(app),
                              &created);
    uint64_t used = 0;
    if (rc == -EDQUOT && gw_store_tenant_blob_bytes(app->store, ctx->who.tenant_id, &used) == 0)
        return gw_reply_quota(req, app, used, "the blob has %llu bytes", (unsigned long long)size);
    if (rc == -EDQUOT)
        rc = -EIO;
    if (rc != 0)
        return reply_store_failure(req, rc);
    if (upload_close(req, ctx, id) != 0)
        return 0;
    char loc[96];
    snprintf(loc, sizeof loc, "/v1/blobs/%s", id);
    svc_reply_header(req, "Location", loc);
    return svc_reply_json(req, created ? 201 : 200,
                          json_pack("{s:s, s:I}", "id", id, "size", (json_int_t)size));
}

/* Parses a single "bytes=a-b" / "bytes=a-" / "bytes=-n" range of a blob of
 * size bytes into [*off, *off + *len). Returns 1 for a range, 0 when the
 * header is absent or not one this server serves partially (several
 * ranges, another unit: the whole blob goes out, as RFC 9110 allows), -1
 * when it cannot be satisfied (416). */
int gw_range_parse(const char *h, uint64_t size, uint64_t *off, uint64_t *len)
{
    if (h == NULL || strncmp(h, "bytes=", 6) != 0 || strchr(h, ',') != NULL)
        return 0;
    const char *p = h + 6;
    char *end;
    if (*p == '-') {
        if (p[1] < '0' || p[1] > '9')
            return 0;
        uint64_t n = strtoull(p + 1, &end, 10);
        if (*end != '\0')
            return 0;
        if (n == 0 || size == 0)
            return -1;
        *len = n < size ? n : size;
        *off = size - *len;
        return 1;
    }
    if (*p < '0' || *p > '9')
        return 0;
    uint64_t a = strtoull(p, &end, 10), b = size ? size - 1 : 0;
    if (*end != '-')
        return 0;
    if (end[1] != '\0') {
        if (end[1] < '0' || end[1] > '9')
            return 0;
        b = strtoull(end + 1, &end, 10);
        if (*end != '\0' || b < a)
            return 0;
    }
    if (a >= size)
        return -1;
    if (b >= size)
        b = size - 1;
    *off = a;
    *len = b - a + 1;
    return 1;
}

static int reply_blob(svc_req *req, const char *id, int fd, uint64_t size)
{
    return gw_reply_blob_range(req, id, "application/octet-stream", fd, size);
}

int gw_reply_blob_range(svc_req *req, const char *id, const char *ctype, int fd, uint64_t size)
{
    uint64_t off = 0, len = size;
    char buf[128];
    snprintf(buf, sizeof buf, "\"%s\"", id);
    svc_reply_header(req, "ETag", buf);
    svc_reply_header(req, "Accept-Ranges", "bytes");
    svc_reply_header(req, "Cache-Control", "private, max-age=31536000, immutable");
    int ranged = gw_range_parse(svc_req_header(req, "Range"), size, &off, &len);
    if (ranged < 0) {
        close(fd);
        snprintf(buf, sizeof buf, "bytes */%" PRIu64, size);
        svc_reply_header(req, "Content-Range", buf);
        return svc_reply_error(req, 416, "range_not_satisfiable", "Range", NULL,
                               "the blob has %" PRIu64 " bytes", size);
    }
    if (ranged) {
        snprintf(buf, sizeof buf, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, off, off + len - 1, size);
        svc_reply_header(req, "Content-Range", buf);
    }
    return svc_reply_fd(req, ranged ? 206 : 200, ctype, fd, off, len);
}

int gw_api_blobs_get(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id;
    uint64_t size;
    int fd = -1;
    if (!(id = blob_id_param(req)))
        return 0;
    int rc = gw_store_blob_get(app->store, who.tenant_id, id, &size);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such blob");
    if (rc != 0)
        return reply_store_failure(req, rc);
    if ((rc = svc_bstore_open_read(app->blobs, id, &fd, &size)) != 0) {
        svc_error("blobs: %s is recorded but its bytes cannot be opened: %s", id, strerror(-rc));
        return svc_reply_error(req, 500, "internal", NULL, NULL, "the blob's bytes are missing");
    }
    return reply_blob(req, id, fd, size);
}

int gw_api_blobs_delete(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id;
    if (!(id = blob_id_param(req)))
        return 0;
    int rc = gw_store_blob_unref(app->store, who.tenant_id, id);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such blob");
    if (rc != 0)
        return reply_store_failure(req, rc);
    return svc_reply_json(req, 200, json_pack("{s:s, s:b}", "id", id, "deleted", 1));
}
