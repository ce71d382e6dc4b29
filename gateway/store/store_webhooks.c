/* store_webhooks.c — webhooks in PostgreSQL: claiming due deliveries
 * (fairly between tenants), recording attempts, trimming ended ones,
 * tenants' secrets and a job's delivery log. The outbox
 * itself is filled by a trigger (sql/013_webhooks.sql); the SQL is in
 * store.c's table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "svc_util.h"

void gw_wh_deliveries_free(gw_wh_delivery *d, int n)
{
    for (int i = 0; d && i < n; i++) {
        free(d[i].url);
        free(d[i].payload);
    }
    free(d);
}

/* ids as a PostgreSQL array literal ("{1,2}") into a malloc'd string. */
static char *int_array(const int64_t *ids, const int *ns, int n)
{
    char *out = malloc((size_t)n * 21 + 3), *p = out;
    if (!out)
        return NULL;
    *p++ = '{';
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%lld", i ? "," : "", ids ? (long long)ids[i] : (long long)ns[i]);
    *p++ = '}';
    *p = '\0';
    return out;
}

int gw_store_wh_claim(gw_store *s, int max, int lease_s, int tenant_cap, const int64_t *busy_ids,
                      const int *busy_n, int nbusy, gw_wh_delivery **out, int *n)
{
    char m[16], l[16], cap[16];
    snprintf(m, sizeof m, "%d", max);
    snprintf(l, sizeof l, "%d", lease_s);
    snprintf(cap, sizeof cap, "%d", tenant_cap);
    char *tids = int_array(busy_ids, NULL, nbusy), *tns = int_array(NULL, busy_n, nbusy);
    const char *v[5] = {m, l, cap, tids, tns};
    PGresult *r = NULL;
    *out = NULL;
    *n = 0;
    int rc = tids && tns ? store__run(s, ST_WH_CLAIM, v, &r) : -ENOMEM;
    free(tids);
    free(tns);
    if (rc)
        return rc;
    int rows = PQntuples(r);
    gw_wh_delivery *d = rows ? calloc((size_t)rows, sizeof *d) : NULL;
    if (rows && !d)
        rc = -ENOMEM;
    for (int i = 0; i < rows && !rc; i++) {
        d[i].id = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        d[i].tenant_id = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        d[i].attempts = atoi(PQgetvalue(r, i, 2));
        d[i].url = strdup(PQgetvalue(r, i, 3));
        d[i].payload = strdup(PQgetvalue(r, i, 4));
        store__copy(r, i, 5, d[i].secret, sizeof d[i].secret);
        if (!d[i].url || !d[i].payload)
            rc = -ENOMEM;
    }
    PQclear(r);
    if (rc) {
        /* the claimed ones come due again when their lease lapses */
        gw_wh_deliveries_free(d, rows);
        return rc;
    }
    *out = d;
    *n = rows;
    return 0;
}

int gw_store_wh_release(gw_store *s, const int64_t *ids, int n)
{
    if (n <= 0)
        return 0;
    char *a = int_array(ids, NULL, n);
    const char *v[1] = {a};
    PGresult *r;
    int rc = a ? store__run(s, ST_WH_RELEASE, v, &r) : -ENOMEM;
    free(a);
    if (rc == 0)
        PQclear(r);
    return rc;
}

int gw_store_wh_trim(gw_store *s, int retention_s, int max, int *deleted)
{
    char age[16], m[16];
    snprintf(age, sizeof age, "%d", retention_s);
    snprintf(m, sizeof m, "%d", max);
    const char *v[2] = {age, m};
    PGresult *r;
    *deleted = 0;
    int rc = store__run(s, ST_WH_TRIM, v, &r);
    if (rc)
        return rc;
    *deleted = atoi(PQcmdTuples(r));
    PQclear(r);
    return 0;
}

int gw_store_wh_record(gw_store *s, int64_t id, int status, const char *error, int duration_ms,
                       int delivered, int64_t retry_ms, int max_age_s, char *state)
{
    char i[24], st[16], dur[16], retry[32], age[16];
    snprintf(i, sizeof i, "%lld", (long long)id);
    snprintf(st, sizeof st, "%d", status);
    snprintf(dur, sizeof dur, "%d", duration_ms);
    snprintf(retry, sizeof retry, "%.3f", (double)retry_ms / 1000.0);
    snprintf(age, sizeof age, "%d", max_age_s);
    const char *v[7] = {i, status ? st : NULL, error, dur, retry, age, delivered ? "true" : "false"};
    PGresult *r;
    state[0] = '\0';
    int rc = store__run(s, ST_WH_RECORD, v, &r);
    if (rc)
        return rc;
    if (PQntuples(r) == 1)
        store__copy(r, 0, 0, state, 12);
    PQclear(r);
    return 0;
}

/* A new secret: "whsec_" and the base64 of 32 random bytes (what Standard
 * Webhooks libraries take as they are). */
static int secret_new(char out[64])
{
    unsigned char raw[32];
    if (svc_random_bytes(raw, sizeof raw) != 0)
        return -EIO;
    memcpy(out, "whsec_", 6);
    out[6 + svc_b64_encode_to(raw, sizeof raw, out + 6)] = '\0';
    return 0;
}

int gw_store_wh_secret(gw_store *s, int64_t tenant_id, int rotate, char *secret, char *created)
{
    char t[24], cand[64];
    snprintf(t, sizeof t, "%lld", (long long)tenant_id);
    int rc = secret_new(cand);
    if (rc)
        return rc;
    const char *v[2] = {t, cand};
    PGresult *r;
    rc = store__run_row(s, rotate ? ST_WH_SECRET_ROTATE : ST_WH_SECRET_ENSURE, v, -EIO, &r);
    if (rc == 0) {
        store__copy(r, 0, 0, secret, 64);
        store__copy(r, 0, 1, created, 32);
    }
    PQclear(r);
    return rc;
}

int gw_store_wh_list(gw_store *s, int64_t tenant_id, const char *job_id, json_t **out)
{
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)tenant_id);
    const char *v[2] = {job_id, t};
    PGresult *r;
    *out = NULL;
    int rc = store__run(s, ST_WH_LIST, v, &r);
    if (rc)
        return rc;
    if (PQntuples(r) == 0)
        rc = -ENOENT;
    else if (!(*out = store__json(r, 0, 0)))
        rc = -EIO;
    PQclear(r);
    return rc;
}
