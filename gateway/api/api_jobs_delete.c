/* api_jobs_delete.c — DELETE /v1/jobs/{id}: a tenant deletes one of its own
 * ended jobs, with its events, inputs, results, webhook deliveries and
 * blob references (what the retention pass does past --job-retention-days,
 * blob_gc.c). Bytes no other job or tenant holds are swept afterwards by
 * the blob retention; the job's usage stays counted in GET /v1/usage. One
 * job's rows are few (its events and attempts), so the statement runs
 * here; a page of many jobs runs on the retention thread. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>

#include "api.h"
#include "jobcache.h"

int gw_api_jobs_delete(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id;
    if (!(id = gw_job_id_param(req)))
        return 0;
    char was[16], lower[37];
    int rc = gw_store_job_delete(app->store, who.tenant_id, id, was);
    if (rc == -EAGAIN)
        return svc_reply_error(req, 409, "conflict", NULL, json_pack("{s:s}", "state", was),
                               "the job is %s; only an ended job can be deleted (cancel it first)",
                               was);
    if (rc)
        return gw_reply_store_error(req, rc, "job");
    /* This gateway stops answering it at once; the others once their key
     * lookup sees the tenant's count of deleted jobs move (jobcache.h). */
    snprintf(lower, sizeof lower, "%s", id);
    for (char *p = lower; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    gw_jobcache_drop(app->jobs, id);
    gw_jobcache_drop(app->jobs, lower);
    return svc_reply_json(req, 200, json_pack("{s:s, s:b}", "id", lower, "deleted", 1));
}
