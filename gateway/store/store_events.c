/* store_events.c — the job_events log as Server-Sent Events streams read it
 * (store.h): where it is settled up to, and ranges of it by id. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int gw_store_events_last(gw_store *s, int64_t *last)
{
    return store__int64(s, ST_EVENTS_LAST, NULL, last);
}

int gw_store_events_horizon(gw_store *s, int64_t *last, uint64_t *xmin, uint64_t *next)
{
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    int rc = -EIO;
    /* Two statements, not one: a statement's snapshot is taken when it
     * starts, before it would read the sequence. */
    PGresult *r = store__exec(c, ST_EVENTS_LAST, NULL, NULL, NULL, 0);
    if (r && PQntuples(r) == 1) {
        *last = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        r = store__exec(c, ST_EVENTS_SNAPSHOT, NULL, NULL, NULL, 0);
        if (r && PQntuples(r) == 1) {
            long age = strtol(PQgetvalue(r, 0, 2), NULL, 10);
            *xmin = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
            *next = strtoull(PQgetvalue(r, 0, 1), NULL, 10) + (uint64_t)age;
            rc = age >= 0 && age < INT32_MAX ? 0 : -EAGAIN;
        }
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

void gw_event_rows_free(gw_event_row *rows, int n)
{
    for (int i = 0; rows && i < n; i++)
        json_decref(rows[i].data);
    free(rows);
}

/* The rows of r, columns (id, tenant_id, job_id, state, kernel, data),
 * into *rows (calloc'd; *n counts those filled). 0 or -ENOMEM. */
static int rows_of(PGresult *r, gw_event_row **rows, int *n)
{
    int k = PQntuples(r);
    if (k > 0 && !(*rows = calloc((size_t)k, sizeof(gw_event_row))))
        return -ENOMEM;
    for (int i = 0; i < k; i++) {
        gw_event_row *e = &(*rows)[i];
        e->id = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        e->tenant_id = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        store__copy(r, i, 2, e->job_id, sizeof(e->job_id));
        store__copy(r, i, 3, e->state, sizeof(e->state));
        store__copy(r, i, 4, e->kernel, sizeof(e->kernel));
        *n = i + 1;
        if (!(e->data = store__json(r, i, 5)))
            return -ENOMEM;
    }
    return 0;
}

/* Runs statement st with values v and reads its rows (rows_of). */
static int query_rows(gw_store *s, int st, const char *const *v, gw_event_row **rows, int *n)
{
    *rows = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, st, v, NULL, NULL, 0);
    int rc = r ? rows_of(r, rows, n) : -EIO;
    PQclear(r);
    store__release(s, c);
    if (rc != 0) {
        gw_event_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

int gw_store_jobs_progress(gw_store *s, const char *node_id, const char *reports,
                           gw_event_row **rows, int *n)
{
    const char *v[2] = {reports, node_id};
    return query_rows(s, ST_JOBS_PROGRESS, v, rows, n);
}

int gw_store_events_read(gw_store *s, int64_t after, int64_t upto, int64_t tenant_id,
                         const char *job_id, int limit, gw_event_row **rows, int *n)
{
    char a[24], u[24], l[16], t[24];
    snprintf(a, sizeof(a), "%" PRId64, after);
    snprintf(u, sizeof(u), "%" PRId64, upto);
    snprintf(l, sizeof(l), "%d", limit);
    snprintf(t, sizeof(t), "%" PRId64, tenant_id);
    const char *v[4] = {a, u, l, job_id ? job_id : t};
    int st = job_id ? ST_EVENTS_JOB : tenant_id > 0 ? ST_EVENTS_TENANT : ST_EVENTS_READ;
    return query_rows(s, st, v, rows, n);
}

int gw_store_job_last_event(gw_store *s, const char *job_id, int64_t *id)
{
    const char *v[1] = {job_id};
    return store__int64(s, ST_EVENT_JOB_LAST, v, id);
}
