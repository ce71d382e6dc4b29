/* store_stats.c — a tenant's queue history for GET /v1/stats/history, in
 * one statement (ST_STATS_HISTORY in store.c, where its plan is told). */
#include <errno.h>
#include <stdio.h>

#include "store_int.h"

int gw_store_stats_history(gw_store *s, int64_t tenant_id, const char *tenant_name, int minutes,
                           char tenant[129], json_t **now, json_t **buckets)
{
    char id[24], mins[16];
    snprintf(id, sizeof(id), "%lld", (long long)tenant_id);
    snprintf(mins, sizeof(mins), "%d", minutes);
    const char *v[3] = {id, tenant_name, mins};
    *now = *buckets = NULL;
    tenant[0] = '\0';
    PGresult *r;
    if (store__run(s, ST_STATS_HISTORY, v, &r) != 0)
        return -EIO;
    int rc = PQntuples(r) == 0 ? -ENOENT : 0;
    if (!rc) {
        store__copy(r, 0, 0, tenant, 129);
        *now = store__json(r, 0, 1);
        *buckets = store__json(r, 0, 2);
        if (!*now || !*buckets)
            rc = -EIO;
    }
    if (rc) {
        json_decref(*now);
        json_decref(*buckets);
        *now = *buckets = NULL;
    }
    PQclear(r);
    return rc;
}
