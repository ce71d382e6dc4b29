/* api_admin.c — what only an admin key may do: create and update tenants
 * and their limits, list them, issue and revoke API keys, and drain a node
 * (the scheduler places nothing new on it). Any other key gets 403. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "keycache.h"
#include "gw_limits.h"
#include "scheduler.h"
#include "svc_log.h"
#include "svc_util.h"

int gw_api_tenants_put(svc_req *req)
{
    gw_caller who = gw_req_caller(req);
    gw_app *app = svc_req_app(req);
    gw_tenant_body tb;
    char field[32], msg[160];
    if (gw_tenant_body_parse(svc_req_json(req), &tb, field, msg, sizeof(msg)) != 0) {
        free(tb.task_images_json);
        return svc_reply_error(req, 400, "invalid_argument", field, NULL, "%s", msg);
    }
    int created = 0;
    json_t *tenant;
    gw_store_task_settings task = {tb.task_images_set, tb.task_images_json, tb.task_egress};
    int rc = gw_store_tenant_upsert(app->store, tb.name, tb.lim, tb.weight, &task, &created, &tenant);
    free(tb.task_images_json);
    if (rc != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    /* New limits apply here at once; other gateways see them when their
     * cached key answers expire (keycache.h). */
    gw_keycache_clear(app->keys);
    gw_sched_tenants_changed(app->sched);
    svc_info("tenant %s %s by admin key %lld", tb.name, created ? "created" : "updated",
             (long long)who.key_id);
    return svc_reply_json(req, created ? 201 : 200, tenant);
}

int gw_api_tenants_list(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    json_t *tenants;
    if (gw_store_tenants_json(app->store, &tenants) != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    return svc_reply_json(req, 200, json_pack("{s:o}", "tenants", tenants));
}

int gw_api_keys_create(svc_req *req)
{
    gw_caller who = gw_req_caller(req);
    gw_app *app = svc_req_app(req);
    json_t *b = svc_req_json(req);
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) {
        if (strcmp(k, "tenant") != 0 && strcmp(k, "admin") != 0)
            return svc_reply_error(req, 400, "invalid_argument", k, NULL, "unknown field \"%.64s\"", k);
    }
    const char *tenant = json_string_value(json_object_get(b, "tenant"));
    json_t *admin = json_object_get(b, "admin");
    if (!gw_tenant_name_valid(tenant))
        return svc_reply_error(req, 400, "invalid_argument", "tenant", NULL,
                               "tenant must be a tenant's name: 1-128 characters, no control characters");
    if (admin && !json_is_boolean(admin))
        return svc_reply_error(req, 400, "invalid_argument", "admin", NULL, "admin must be a boolean");
    char hex[41], key[48], prefix[16], created_at[32];
    int64_t id = 0;
    if (svc_random_hex(hex, 20) != 0)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "no randomness for a key");
    snprintf(key, sizeof(key), "kl_%s", hex);
    int rc = gw_store_key_issue(app->store, tenant, json_is_true(admin), key, prefix, created_at, &id);
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", "tenant", NULL,
                               "no such tenant; create it with POST /v1/tenants");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    svc_info("key %lld (%s) issued for tenant %s%s by admin key %lld", (long long)id, prefix,
             tenant, json_is_true(admin) ? " (admin)" : "", (long long)who.key_id);
    return svc_reply_json(req, 201, json_pack("{s:s, s:I, s:s, s:s, s:b, s:s}", "key", key,
                                              "id", (json_int_t)id, "prefix", prefix,
                                              "tenant", tenant, "admin", json_is_true(admin),
                                              "created_at", created_at));
}

int gw_api_keys_list(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *tenant = svc_req_query(req, "tenant");
    if (tenant && !gw_tenant_name_valid(tenant))
        return svc_reply_error(req, 400, "invalid_argument", "tenant", NULL,
                               "tenant must be a tenant's name: 1-128 characters, no control characters");
    json_t *keys;
    if (gw_store_keys_list(app->store, tenant, &keys) != 0)
        return gw_reply_unavailable(req, "PostgreSQL");
    return svc_reply_json(req, 200, json_pack("{s:o}", "keys", keys));
}

/* DELETE /v1/keys/{id}: {id} is the key's id, or a key prefix (kl_ and 8
 * characters), which revokes only when exactly one active key has it: 11
 * characters hold 32 random bits, so two keys of a large installation may
 * share one, and the id is what names a key for sure. */
int gw_api_keys_revoke(svc_req *req)
{
    gw_caller who = gw_req_caller(req);
    gw_app *app = svc_req_app(req);
    const char *ref = svc_req_param(req, "id");
    size_t len = ref ? strlen(ref) : 0;
    int64_t id = 0;
    char prefix[16] = "";
    int rc;
    if (len >= 1 && len <= 18 && strspn(ref, "0123456789") == len) {
        id = strtoll(ref, NULL, 10);
        rc = gw_store_key_revoke_id(app->store, id, prefix);
    } else {
        rc = len && len <= 64 ? gw_store_key_revoke_prefix(app->store, ref, &id) : -ENOENT;
        if (rc == 0)
            snprintf(prefix, sizeof prefix, "%s", ref);
    }
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no active key has this id or prefix");
    if (rc == -EEXIST)
        return svc_reply_error(req, 409, "conflict", NULL, NULL,
                               "several active keys share this prefix; none was revoked (revoke "
                               "by id: GET /v1/keys lists them)");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    gw_keycache_clear(app->keys);   /* here at once; elsewhere within the cache's TTL */
    svc_info("key %lld (%s) revoked by admin key %lld", (long long)id, prefix, (long long)who.key_id);
    return svc_reply_json(req, 200, json_pack("{s:I, s:s, s:b}", "id", (json_int_t)id, "prefix",
                                              prefix, "revoked", 1));
}

static int node_set_draining(svc_req *req, int draining)
{
    gw_caller who = gw_req_caller(req);
    gw_app *app = svc_req_app(req);
    const char *id = svc_req_param(req, "id");
    json_t *node = NULL;
    int rc = svc_uuid_valid(id) ? gw_store_node_drain(app->store, id, draining, &node) : -ENOENT;
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such node");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    svc_info("node %s %s by admin key %lld", json_string_value(json_object_get(node, "name")),
             draining ? "draining: no new runs are placed on it" : "no longer draining",
             (long long)who.key_id);
    gw_sched_nodes_changed(app->sched);
    return svc_reply_json(req, 200, node);
}

int gw_api_node_drain(svc_req *req)
{
    return node_set_draining(req, 1);
}

int gw_api_node_undrain(svc_req *req)
{
    return node_set_draining(req, 0);
}
