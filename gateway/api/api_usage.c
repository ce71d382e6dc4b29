/* api_usage.c — GET /v1/usage: what a tenant's ended jobs used and cost,
 * in all and grouped by kernel, UTC day or a label's value (deleted jobs
 * included), and the blob storage it holds now against its quota. The
 * caller's own tenant; an admin key may name another with tenant=. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "gw_limits.h"
#include "quota.h"
#include "svc_util.h"
#include "usage.h"

int gw_api_usage(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *tenant;
    if (gw_tenant_arg(req, &who, "usage", &tenant) != 0)
        return 0;
    gw_usage_query q;
    const char *field;
    char msg[160];
    if (gw_usage_query_parse(svc_req_query(req, "from"), svc_req_query(req, "to"),
                             svc_req_query(req, "group_by"), svc_now_wall_ms(), &q, &field, msg,
                             sizeof(msg)) != 0)
        return svc_reply_error(req, 400, "invalid_argument", field, NULL, "%s", msg);
    char name[129], from[40], to[40];
    json_t *totals, *groups;
    uint64_t blob_bytes = 0;
    int rc = gw_store_usage(app->store, who.tenant_id, tenant, q.from_ms, q.to_ms, q.group,
                            q.label_key[0] ? q.label_key : NULL, name, &totals, &groups, &blob_bytes);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", "tenant", NULL, "no such tenant");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    svc_time_format(q.from_ms, from, sizeof(from));
    svc_time_format(q.to_ms, to, sizeof(to));
    const char *group_by = svc_req_query(req, "group_by");
    json_t *currency = json_object_get(app->prices, "currency");
    /* storage is now, not over [from, to): what counts toward the quota */
    uint64_t quota = gw_quota_bytes(app);
    json_t *storage = json_pack("{s:I, s:o}", "blob_bytes", (json_int_t)blob_bytes, "quota_bytes",
                                quota ? json_integer((json_int_t)quota) : json_null());
    return svc_reply_json(req, 200, json_pack("{s:s, s:s, s:s, s:o, s:O, s:o, s:o, s:o}", "tenant",
                                              name, "from", from, "to", to, "group_by",
                                              group_by ? json_string(group_by) : json_null(),
                                              "currency", currency ? currency : json_null(),
                                              "totals", totals, "groups", groups,
                                              "storage", storage));
}
