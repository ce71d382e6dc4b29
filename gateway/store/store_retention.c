/* store_retention.c — deleting ended jobs in PostgreSQL: one at its
 * tenant's request (DELETE /v1/jobs/{id}) and a page at a time past the
 * retention period (blob_gc.c). The SQL is store.c's (JOBS_DELETE). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int gw_store_job_delete(gw_store *s, int64_t tenant_id, const char *id, char was[16])
{
    char tenant[24];
    snprintf(tenant, sizeof tenant, "%" PRId64, tenant_id);
    const char *v[2] = {id, tenant};
    PGresult *r = NULL;
    was[0] = '\0';
    int rc = store__run(s, ST_JOB_DELETE, v, &r);
    if (rc == 0 && PQntuples(r) == 0)
        rc = -ENOENT;
    if (rc == 0) {
        store__copy(r, 0, 0, was, 16);
        if (atoi(PQgetvalue(r, 0, 1)) == 0)
            rc = -EAGAIN;
    }
    PQclear(r);
    return rc;
}

int gw_store_jobs_expire(gw_store *s, int days, int limit, int *deleted, int *tenants)
{
    char d[16], l[16];
    snprintf(d, sizeof d, "%d", days);
    snprintf(l, sizeof l, "%d", limit);
    const char *v[2] = {d, l};
    PGresult *r = NULL;
    *deleted = *tenants = 0;
    int rc = store__run(s, ST_JOBS_EXPIRE, v, &r);
    if (rc == 0 && PQntuples(r) != 1)
        rc = -EIO;
    if (rc == 0) {
        *deleted = atoi(PQgetvalue(r, 0, 0));
        *tenants = atoi(PQgetvalue(r, 0, 1));
    }
    PQclear(r);
    return rc;
}
