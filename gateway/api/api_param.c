/* api_param.c — the path parameters that several resources' handlers
 * read the same way (a job's {id}), apart from any one resource's file so
 * that the handlers and the cluster listener's checks share them without
 * depending on each other. */
#include <ctype.h>

#include "api.h"
#include "svc_util.h"

/* The {id} of the path when it is a UUID, lower-cased as PostgreSQL
 * writes a uuid (so the stream of a job named in capitals matches its
 * events, and its cache entry is the one of any other spelling); NULL
 * after replying 404 (or 500 on ENOMEM). */
const char *gw_job_id_param(svc_req *req)
{
    const char *id = svc_req_param(req, "id");
    if (!id || !svc_uuid_valid(id)) {
        svc_reply_error(req, 404, "not_found", NULL, NULL, "no such job");
        return NULL;
    }
    gw_reqctx *ctx = gw_reqctx_of(req);
    if (!ctx) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return NULL;
    }
    for (int i = 0; i < 36; i++)
        ctx->job_id[i] = (char)tolower((unsigned char)id[i]);
    ctx->job_id[36] = '\0';
    return ctx->job_id;
}
