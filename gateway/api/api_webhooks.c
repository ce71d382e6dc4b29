/* api_webhooks.c — the webhook endpoints: a tenant's signing secret (read,
 * made on first use; rotated) and a job's deliveries with their attempts. */
#include <errno.h>
#include <string.h>

#include "api.h"
#include "reply.h"
#include "svc_util.h"

/* GET /v1/webhook-secret reads it (made now if the tenant has none);
 * POST /v1/webhook-secret replaces it: deliveries signed from then on use
 * the new one. */
static int secret_reply(svc_req *req, int rotate)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    char secret[64], created[32];
    int rc = gw_store_wh_secret(app->store, who.tenant_id, rotate, secret, created);
    if (rc)
        return gw_reply_store_error(req, rc, "tenant");
    svc_reply_header(req, "Cache-Control", "no-store");
    return svc_reply_json(req, 200, json_pack("{s:s, s:s}", "secret", secret, "created_at", created));
}

int gw_api_webhook_secret_get(svc_req *req)
{
    return secret_reply(req, 0);
}

int gw_api_webhook_secret_rotate(svc_req *req)
{
    return secret_reply(req, 1);
}

int gw_api_jobs_deliveries(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    gw_caller who = gw_req_caller(req);
    const char *id = gw_job_id_param(req);
    if (!id)
        return 0;
    json_t *out;
    int rc = gw_store_wh_list(app->store, who.tenant_id, id, &out);
    if (rc)
        return gw_reply_store_error(req, rc, "job");
    return svc_reply_json(req, 200, out);
}
