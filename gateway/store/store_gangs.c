/* store_gangs.c — the PostgreSQL side of multi-node jobs beyond claim and
 * lease (store_jobs.c): the attempt a rendezvous belongs to, and the end of
 * each node's part. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int gw_store_gang_attempt(gw_store *s, const char *job_id, int attempt)
{
    PGresult *r;
    if (store__run_attempt(s, ST_GANG_ATTEMPT, job_id, attempt, NULL, &r) != 0)
        return -EIO;
    int rc = PQntuples(r) == 0 ? -ENOENT : strcmp(PQgetvalue(r, 0, 0), "1") == 0;
    PQclear(r);
    return rc;
}

/* The node ids of r's column col into *nodes (malloc'd) and *n; NULLs
 * are skipped. */
static int node_list(PGresult *r, int col, char (**nodes)[37], int *n)
{
    int rows = PQntuples(r);
    *nodes = NULL;
    *n = 0;
    if (rows == 0)
        return 0;
    if (!(*nodes = calloc((size_t)rows, sizeof(**nodes))))
        return -ENOMEM;
    for (int i = 0; i < rows; i++)
        if (!PQgetisnull(r, i, col))
            store__copy(r, i, col, (*nodes)[(*n)++], sizeof((*nodes)[0]));
    return 0;
}

int gw_store_gang_rank_end(gw_store *s, const char *job_id, int attempt, int node_rank,
                           const char *node_id, const char *state, char (**others)[37], int *n)
{
    char att[16], rank[16];
    snprintf(att, sizeof att, "%d", attempt);
    snprintf(rank, sizeof rank, "%d", node_rank);
    const char *v[5] = {job_id, att, rank, state, node_id};
    PGresult *r;
    *others = NULL;
    *n = 0;
    if (store__run(s, ST_GANG_RANK_END, v, &r) != 0)
        return -EIO;
    int rc = PQntuples(r) > 0 && strcmp(PQgetvalue(r, 0, 0), "1") == 0 ? node_list(r, 1, others, n)
                                                                         : -EPERM;
    PQclear(r);
    return rc;
}

int gw_store_gang_nodes(gw_store *s, const char *job_id, int attempt, char (**nodes)[37], int *n)
{
    PGresult *r;
    *nodes = NULL;
    *n = 0;
    if (store__run_attempt(s, ST_GANG_NODES, job_id, attempt, NULL, &r) != 0)
        return -EIO;
    int rc = node_list(r, 0, nodes, n);
    PQclear(r);
    return rc;
}
