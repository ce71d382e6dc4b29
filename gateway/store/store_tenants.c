/* store_tenants.c — tenants, keys and limits in PostgreSQL: authentication
 * with the tenant's rate limits, the quota counts, the admin API's tenant
 * and key statements, and node drain. The SQL is in store.c's table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* Keys and their prefixes are printable ASCII: anything else matches no
 * key, and is not sent (bytes that are not UTF-8 fail the statement). */
static int printable_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
            return 0;
    return 1;
}

int gw_store_auth_key(gw_store *s, const char *key, gw_key_auth *out)
{
    if (!printable_ascii(key))
        return -ENOENT;
    const char *v[1] = {key};
    PGresult *r;
    int rc = store__run_row(s, ST_AUTH_KEY, v, -ENOENT, &r);
    if (rc == 0) {
        out->tenant_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        out->admin = PQgetvalue(r, 0, 1)[0] == 't';
        out->key_id = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
        out->rate_rps = atoi(PQgetvalue(r, 0, 3));
        out->rate_burst = atoi(PQgetvalue(r, 0, 4));
        out->max_queued = atoi(PQgetvalue(r, 0, 5));
        out->jobs_deleted = strtoll(PQgetvalue(r, 0, 6), NULL, 10);
    }
    PQclear(r);
    return rc;
}

int gw_store_tenant_queued(gw_store *s, int64_t tenant_id, int limit, int64_t *queued)
{
    char t[24], l[16];
    snprintf(t, sizeof(t), "%lld", (long long)tenant_id);
    snprintf(l, sizeof(l), "%d", limit);
    const char *v[2] = {t, l};
    return store__int64(s, ST_TENANT_QUEUED, v, queued);
}

int gw_store_tenant_running_ok(gw_store *s, const char *job_id, int def, int *ok)
{
    char d[16];
    snprintf(d, sizeof(d), "%d", def);
    const char *v[2] = {job_id, d};
    PGresult *r;
    *ok = 1;
    int rc = store__run(s, ST_TENANT_RUNNING_OK, v, &r);
    if (rc)
        return rc;
    if (PQntuples(r) == 1)
        *ok = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return 0;
}

int gw_store_tenant_upsert(gw_store *s, const char *name, const gw_store_limit lim[4], double weight,
                           const gw_store_task_settings *task, int *created, json_t **tenant)
{
    char val[4][16], w[32];
    snprintf(w, sizeof w, "%.9g", weight);
    const char *v[13] = {name};
    v[9] = weight > 0 ? w : NULL;
    v[10] = task && task->images_set ? "true" : "false";
    v[11] = task && task->images_set ? task->images_json : NULL;
    v[12] = task && task->egress >= 0 ? (task->egress ? "true" : "false") : NULL;
    for (int i = 0; i < 4; i++) {
        snprintf(val[i], sizeof(val[i]), "%d", lim[i].value);
        v[1 + 2 * i] = lim[i].value >= 0 ? val[i] : NULL;
        v[2 + 2 * i] = lim[i].set ? "true" : "false";
    }
    PGresult *r;
    *tenant = NULL;
    int rc = store__run(s, ST_TENANT_UPSERT, v, &r);
    if (rc)
        return rc;
    if (PQntuples(r) == 1) {
        *created = atoi(PQgetvalue(r, 0, 0));
        *tenant = store__json(r, 0, 1);
    }
    PQclear(r);
    return *tenant ? 0 : -EIO;
}

int gw_store_tenants_json(gw_store *s, json_t **tenants)
{
    PGresult *r;
    *tenants = NULL;
    int rc = store__run(s, ST_TENANTS_JSON, NULL, &r);
    if (rc)
        return rc;
    if (PQntuples(r) == 1)
        *tenants = store__json(r, 0, 0);
    PQclear(r);
    return *tenants ? 0 : -EIO;
}

int gw_store_key_issue(gw_store *s, const char *tenant, int admin, const char *key,
                       char prefix[16], char created_at[32], int64_t *id)
{
    const char *v[3] = {tenant, key, admin ? "true" : "false"};
    PGresult *r;
    int rc = store__run_row(s, ST_KEY_ISSUE, v, -ENOENT, &r);
    if (rc == 0) {
        store__copy(r, 0, 0, prefix, 16);
        store__copy(r, 0, 1, created_at, 32);
        *id = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    }
    PQclear(r);
    return rc;
}

int gw_store_key_revoke_id(gw_store *s, int64_t id, char prefix[16])
{
    char i[24];
    snprintf(i, sizeof i, "%lld", (long long)id);
    const char *v[1] = {i};
    PGresult *r;
    int rc = store__run_row(s, ST_KEY_REVOKE_ID, v, -ENOENT, &r);
    if (rc == 0)
        store__copy(r, 0, 0, prefix, 16);
    PQclear(r);
    return rc;
}

int gw_store_keys_list(gw_store *s, const char *tenant, json_t **keys)
{
    const char *v[1] = {tenant};
    PGresult *r;
    *keys = NULL;
    int rc = store__run(s, ST_KEYS_LIST, v, &r);
    if (rc)
        return rc;
    if (PQntuples(r) == 1)
        *keys = store__json(r, 0, 0);
    PQclear(r);
    return *keys ? 0 : -EIO;
}

int gw_store_keys_active(gw_store *s, const int64_t *ids, int n, int *active)
{
    char *a = malloc((size_t)n * 21 + 3), *p = a;
    if (!a)
        return -ENOMEM;
    *p++ = '{';
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%lld", i ? "," : "", (long long)ids[i]);
    strcpy(p, "}");
    const char *v[1] = {a};
    PGresult *r;
    int rc = store__run(s, ST_KEYS_ACTIVE, v, &r);
    free(a);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++)
        active[i] = 0;
    for (int row = 0; row < PQntuples(r); row++) {
        int64_t id = strtoll(PQgetvalue(r, row, 0), NULL, 10);
        for (int i = 0; i < n; i++)
            if (ids[i] == id)
                active[i] = 1;
    }
    PQclear(r);
    return 0;
}

int gw_store_key_revoke_prefix(gw_store *s, const char *prefix, int64_t *id)
{
    if (!printable_ascii(prefix))
        return -ENOENT;
    const char *v[1] = {prefix};
    PGresult *r;
    int rc = store__run(s, ST_KEY_REVOKE_PREFIX, v, &r);
    if (rc)
        return rc;
    long matched = PQntuples(r) == 1 ? atol(PQgetvalue(r, 0, 0)) : 0;
    long revoked = PQntuples(r) == 1 ? atol(PQgetvalue(r, 0, 1)) : 0;
    if (revoked == 1)
        *id = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    PQclear(r);
    return revoked == 1 ? 0 : matched > 1 ? -EEXIST : -ENOENT;
}

int gw_store_node_drain(gw_store *s, const char *id, int draining, json_t **node)
{
    const char *v[2] = {id, draining ? "true" : "false"};
    PGresult *r;
    *node = NULL;
    int rc = store__run_row(s, ST_NODE_DRAIN, v, -ENOENT, &r);
    if (rc == 0 && !(*node = store__json(r, 0, 0)))
        rc = -EIO;
    PQclear(r);
    return rc;
}
