/* auth.c — who is calling: tenants with API keys (only their SHA-256 is in
 * PostgreSQL; each key's requests pass its rate limit), nodes with the
 * cluster token (compared in constant time). */
#include <errno.h>
#include <string.h>

#include "api.h"
#include "limits.h"
#include "svc_util.h"

int gw_reply_unavailable(svc_req *req, const char *what)
{
    svc_reply_header(req, "Retry-After", "2");
    return svc_reply_error(req, 503, "unavailable", NULL, NULL,
                           "%s is unavailable; retry shortly", what);
}

int gw_auth_tenant(svc_req *req, gw_caller *who)
{
    gw_app *app = svc_req_app(req);
    const char *key = svc_req_bearer(req);
    memset(who, 0, sizeof(*who));
    if (!key || !*key) {
        svc_reply_error(req, 401, "unauthenticated", NULL, NULL,
                        "send an API key as 'Authorization: Bearer <key>'");
        return -1;
    }
    gw_key_auth ka;
    int rc = strlen(key) > 200 ? -ENOENT : gw_store_auth_key(app->store, key, &ka);
    if (rc == -EIO) {
        gw_reply_unavailable(req, "PostgreSQL");
        return -1;
    }
    if (rc != 0) {
        svc_reply_error(req, 401, "unauthenticated", NULL, NULL, "the API key is not valid or was revoked");
        return -1;
    }
    *who = (gw_caller){.tenant_id = ka.tenant_id, .admin = ka.admin, .key_id = ka.key_id,
                       .rate_rps = ka.rate_rps, .rate_burst = ka.rate_burst};
    return gw_limits_rate(req, who);
}

int gw_auth_cluster(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *token = svc_req_bearer(req);
    if (token && svc_secure_equal(token, app->cfg.cluster_token))
        return 0;
    svc_reply_error(req, 401, "unauthenticated", NULL, NULL, "a valid cluster token is required");
    return -1;
}
