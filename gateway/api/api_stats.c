/* api_stats.c — GET /v1/stats/history: a tenant's queue depth and
 * throughput per minute over the last hour (or minutes=), for the
 * dashboard. The caller's own tenant; an admin key may name another with
 * tenant=. Answers are kept --stats-cache-ms (5 s) per tenant and window (stats.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "gw_limits.h"
#include "stats.h"
#include "svc_util.h"

int gw_api_stats_history(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *tenant;
    if (gw_tenant_arg(req, &who, "history", &tenant) != 0)
        return 0;
    int minutes;
    if (gw_stats_minutes_parse(svc_req_query(req, "minutes"), &minutes) != 0)
        return svc_reply_error(req, 400, "invalid_argument", "minutes", NULL,
                               "minutes must be an integer from 1 to %d", GW_STATS_MINUTES_MAX);
    /* by name for tenant=, else by the caller's tenant id: one tenant may
     * be cached under both, which costs a query, not a wrong answer */
    char key[160];
    if (tenant)
        snprintf(key, sizeof(key), "n:%d:%s", minutes, tenant);
    else
        snprintf(key, sizeof(key), "i:%d:%lld", minutes, (long long)who.tenant_id);
    int64_t now_ms = svc_now_mono_ms();
    size_t len;
    char *body = gw_stats_get(app->stats, key, now_ms, &len);
    if (body) {
        int rc = svc_reply_raw(req, 200, "application/json", body, len);
        free(body);
        return rc;
    }
    char name[129];
    json_t *now, *buckets;
    int rc = gw_store_stats_history(app->store, who.tenant_id, tenant, minutes, name, &now, &buckets);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", "tenant", NULL, "no such tenant");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    json_t *reply = json_pack("{s:s, s:i, s:o, s:o}", "tenant", name, "minutes", minutes, "now", now,
                              "buckets", buckets);
    body = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
    json_decref(reply);
    if (body == NULL)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
    len = strlen(body);
    gw_stats_put(app->stats, key, body, len, now_ms);
    rc = svc_reply_raw(req, 200, "application/json", body, len);
    free(body);
    return rc;
}
