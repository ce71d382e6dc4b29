/* store_blobs.c — blob records in PostgreSQL: which blobs exist, which
 * tenant may read which, what each tenant is charged for (its quota), and
 * the retention sweep of blobs nobody references. The bytes are the blob
 * store's (service/svc_bstore.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int gw_store_blob_record(gw_store *s, int64_t tenant_id, const char *id, uint64_t size,
                         uint64_t quota, int *created)
{
    char tenant[24], sz[24], q[24];
    snprintf(tenant, sizeof tenant, "%" PRId64, tenant_id);
    snprintf(sz, sizeof sz, "%" PRIu64, size);
    snprintf(q, sizeof q, "%" PRIu64, quota);
    const char *v[4] = {tenant, id, sz, q};
    *created = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_BLOB_RECORD, v, NULL, NULL, 0);
    int rc = r ? 0 : store__fail_rc(c);
    if (r && PQntuples(r) == 1) {
        int had = atoi(PQgetvalue(r, 0, 0));
        *created = atoi(PQgetvalue(r, 0, 1)) > 0;
        if (tenant_id != 0 && !had && !*created)
            rc = -EDQUOT;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

/* Runs statement stmt on ($1 tenant, $2 blob id): 0 with *r (the caller
 * clears it; it stays NULL on failure), or -EIO / -EPROTO. */
static int tenant_blob_exec(gw_store *s, int stmt, int64_t tenant_id, const char *id, PGresult **r)
{
    char tenant[24];
    snprintf(tenant, sizeof tenant, "%" PRId64, tenant_id);
    const char *v[2] = {tenant, id};
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    *r = store__exec(c, stmt, v, NULL, NULL, 0);
    int rc = *r ? 0 : store__fail_rc(c);
    store__release(s, c);
    return rc;
}

int gw_store_blob_get(gw_store *s, int64_t tenant_id, const char *id, uint64_t *size)
{
    PGresult *r = NULL;
    int rc = tenant_blob_exec(s, ST_BLOB_GET, tenant_id, id, &r);
    if (rc == 0 && PQntuples(r) != 1)
        rc = -ENOENT;
    if (rc == 0)
        *size = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return rc;
}

int gw_store_blob_unref(gw_store *s, int64_t tenant_id, const char *id)
{
    PGresult *r = NULL;
    int rc = tenant_blob_exec(s, ST_BLOB_UNREF, tenant_id, id, &r);
    if (rc == 0 && atoi(PQcmdTuples(r)) != 1)
        rc = -ENOENT;
    PQclear(r);
    return rc;
}

int gw_store_blob_sweep(gw_store *s, int retention_s, int limit,
                        int (*remove)(const char *id, void *arg), void *arg, int *removed)
{
    char ret[24], lim[24];
    snprintf(ret, sizeof ret, "%d", retention_s);
    snprintf(lim, sizeof lim, "%d", limit);
    const char *v[2] = {ret, lim};
    *removed = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    /* The rows stay locked until the files are gone: an upload of the same
     * bytes waits on them, records the blob anew, then finds its file
     * missing and puts it back (svc_bwriter_close). */
    int rc = store__command(c, "BEGIN");
    PGresult *r = rc ? NULL : store__exec(c, ST_BLOB_SWEEP, v, NULL, NULL, 0);
    if (!rc && !r)
        rc = store__fail_rc(c);
    for (int i = 0; r && i < PQntuples(r); i++) {
        int e = remove(PQgetvalue(r, i, 0), arg);
        if (e != 0 && e != -ENOENT) {
            rc = e; /* the row comes back with the rollback; tried again later */
            break;
        }
        (*removed)++;
    }
    PQclear(r);
    if (c->pg)
        rc = rc ? (store__command(c, "ROLLBACK"), rc) : store__command(c, "COMMIT");
    if (rc)
        *removed = 0;
    store__release(s, c);
    return rc;
}

int gw_store_tenant_blob_bytes(gw_store *s, int64_t tenant_id, uint64_t *bytes)
{
    char tenant[24];
    snprintf(tenant, sizeof tenant, "%" PRId64, tenant_id);
    const char *v[1] = {tenant};
    PGresult *r = NULL;
    int rc = store__run(s, ST_TENANT_BLOB_BYTES, v, &r);
    if (rc == 0 && PQntuples(r) != 1)
        rc = -EIO;
    if (rc == 0)
        *bytes = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return rc;
}

int gw_store_blobs_need(gw_store *s, int64_t tenant_id, const char *job_id,
                        const char *const *ids, const uint64_t *sizes, int n, uint64_t *need,
                        uint64_t *used)
{
    char tenant[24];
    json_t *list = json_array();
    for (int i = 0; list && i < n; i++)
        if (json_array_append_new(list, json_pack("{s:s, s:I}", "i", ids[i], "n",
                                                  (json_int_t)sizes[i])) != 0) {
            json_decref(list);
            list = NULL;
        }
    char *text = list ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    if (!text)
        return -ENOMEM;
    snprintf(tenant, sizeof tenant, "%" PRId64, tenant_id);
    const char *v[3] = {tenant_id ? tenant : NULL, tenant_id ? NULL : job_id, text};
    PGresult *r = NULL;
    int rc = store__run(s, ST_BLOBS_NEED, v, &r);
    if (rc == 0 && PQntuples(r) != 1)
        rc = -EIO;
    if (rc == 0) {
        *need = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
        *used = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    }
    PQclear(r);
    free(text);
    return rc;
}
