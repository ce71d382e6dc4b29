/* quota.c — the blob quota's figures and its one reply (quota.h). */
#include "quota.h"

#include <stdarg.h>
#include <stdio.h>

#include "reply.h"

uint64_t gw_quota_bytes(const gw_app *app)
{
    return (uint64_t)app->cfg.blob_quota_mb << 20;
}

uint64_t gw_quota_room(const gw_app *app, uint64_t used)
{
    uint64_t q = gw_quota_bytes(app);
    if (q == 0)
        return GW_QUOTA_NONE;
    return used < q ? q - used : 0;
}

int gw_quota_read(svc_req *req, int64_t tenant_id, uint64_t *used, uint64_t *room)
{
    gw_app *app = svc_req_app(req);
    *used = 0;
    if (gw_quota_bytes(app) != 0 && gw_store_tenant_blob_bytes(app->store, tenant_id, used) != 0) {
        gw_reply_unavailable(req, "PostgreSQL");
        return -1;
    }
    *room = gw_quota_room(app, *used);
    return 0;
}

int gw_reply_quota(svc_req *req, const gw_app *app, uint64_t used, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint64_t room = gw_quota_room(app, used);
    return svc_reply_error(req, 413, "quota_exceeded", NULL,
                           json_pack("{s:I, s:I, s:I}", "quota_bytes",
                                     (json_int_t)gw_quota_bytes(app), "used_bytes", (json_int_t)used,
                                     "remaining_bytes", (json_int_t)(room == GW_QUOTA_NONE ? 0 : room)),
                           "%s (the tenant's blob quota is %ld MiB, %llu bytes of it left; DELETE "
                           "blobs and ended jobs it no longer needs)",
                           msg, app->cfg.blob_quota_mb, (unsigned long long)room);
}
