/* store_nodes.c — the PostgreSQL side of what a node may touch: the node a
 * credential names, the runs it holds, the blobs it may read and the
 * outputs it stored (the SQL is in store.c's table). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* 64 hex digits and a comma */
#define HASH_ITEM 65

int gw_store_node_by_credential(gw_store *s, const char *hash_hex, char id[37], char *name,
                                size_t namelen)
{
    const char *v[1] = {hash_hex};
    PGresult *r;
    int rc = store__run_row(s, ST_NODE_BY_CREDENTIAL, v, -ENOENT, &r);
    if (rc == 0) {
        store__copy(r, 0, 0, id, 37);
        store__copy(r, 0, 1, name, namelen);
    }
    PQclear(r);
    return rc;
}

int gw_store_nodes_by_credentials(gw_store *s, const char *const *hash_hex, int n,
                                  void (*each)(void *arg, const char *hash_hex, const char *id,
                                               const char *name),
                                  void *arg)
{
    /* "{h1,h2,...}": hex digits need no quoting */
    char *a = malloc((size_t)n * HASH_ITEM + 3), *p = a;
    if (a == NULL)
        return -ENOMEM;
    *p++ = '{';
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%.64s", i ? "," : "", hash_hex[i]);
    strcpy(p, "}");
    const char *v[1] = {a};
    PGresult *r;
    int rc = store__run(s, ST_NODES_BY_CREDENTIALS, v, &r);
    free(a);
    if (rc)
        return rc;
    for (int row = 0; row < PQntuples(r); row++)
        each(arg, PQgetvalue(r, row, 0), PQgetvalue(r, row, 1), PQgetvalue(r, row, 2));
    PQclear(r);
    return 0;
}

int gw_store_node_run_held(gw_store *s, const char *node_id, const char *job_id, int attempt)
{
    PGresult *r;
    if (store__run_attempt(s, ST_NODE_RUN_HELD, job_id, attempt, node_id, &r) != 0)
        return -EIO;
    int held = PQntuples(r) > 0;
    PQclear(r);
    return held;
}

int gw_store_node_gang_member(gw_store *s, const char *node_id, const char *job_id, int attempt)
{
    PGresult *r;
    if (store__run_attempt(s, ST_NODE_GANG_MEMBER, job_id, attempt, node_id, &r) != 0)
        return -EIO;
    int rc = PQntuples(r) == 0                       ? -ENOENT
             : strcmp(PQgetvalue(r, 0, 1), "1") != 0 ? -EPERM
                                                     : strcmp(PQgetvalue(r, 0, 0), "1") == 0;
    PQclear(r);
    return rc;
}

int gw_store_node_blob_get(gw_store *s, const char *node_id, const char *id, uint64_t *size)
{
    const char *v[2] = {node_id, id};
    PGresult *r;
    if (store__run(s, ST_NODE_BLOB_GET, v, &r) != 0)
        return -EIO;
    int rc = PQntuples(r) > 0 ? 0 : -ENOENT;
    if (rc == 0)
        *size = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return rc;
}

int gw_store_run_output(gw_store *s, const char *job_id, int attempt, const char *id,
                        uint64_t size, const char *node_id)
{
    char att[16], sz[24];
    snprintf(att, sizeof att, "%d", attempt);
    snprintf(sz, sizeof sz, "%" PRIu64, size);
    const char *v[5] = {job_id, att, id, sz, node_id};
    PGresult *r;
    if (store__run(s, ST_RUN_OUTPUT, v, &r) != 0)
        return -EIO;
    PQclear(r);
    return 0;
}
