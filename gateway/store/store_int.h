/* store_int.h — internals shared by the store's files (store.c: pool,
 * migrations, keys, nodes; store_jobs.c: jobs). Not for other modules. */
#ifndef GW_STORE_INT_H
#define GW_STORE_INT_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>

#include "store.h"

typedef struct store__conn {
    struct gw_store *store;  /* the pool it belongs to (its error count) */
    PGconn *pg;
    uint64_t prepared[2]; /* bit i of word i / 64: statement i is prepared on pg */
    int custom;          /* plan_cache_mode of pg: 1 auto, 0 force_generic_plan */
    int busy;
    char sqlstate[6];    /* of the last failed statement; "" when no answer came */
} store__conn;

struct gw_store {
    char *conninfo;
    int size;
    store__conn *conns;
    pthread_mutex_t mu;             /* guards conns[].busy */
    pthread_cond_t cv;
    /* Monotonic ms of the last time PostgreSQL could not be reached (0:
     * never); read without the lock, a stale value only delays expiry. */
    volatile int64_t last_failure_ms;
    /* gw_store_stats, counted where they happen */
    _Atomic uint64_t errors, connect_errors, waits, wait_ns;
    char *prices;                   /* the price table, JSON (gw_store_set_prices) */
};

/* Statement ids; the SQL lives in the table in store.c. */
enum {
    ST_KEY_CREATE, ST_KEY_REVOKE,
    ST_JOBS_INSERT, ST_JOB_GET, ST_JOB_FIELDS, ST_JOB_LIST, ST_JOB_RESULT, ST_JOB_CANCEL,
    ST_JOB_SUCCEED, ST_JOBS_SUCCEED_INLINE, ST_JOB_FAIL, ST_JOB_REQUEUE, ST_JOBS_QUEUED,
    ST_NODE_REGISTER, ST_NODE_HEARTBEAT, ST_NODE_REMOVE, ST_NODES_JSON, ST_NODES_LOAD,
    ST_NODES_EXPIRE, ST_JOBS_ON_DOWN, ST_BACKENDS_UP, ST_PING,
    /* tenants, keys and limits (store_tenants.c) */
    ST_AUTH_KEY, ST_TENANT_QUEUED, ST_TENANT_RUNNING_OK, ST_TENANT_UPSERT, ST_TENANTS_JSON,
    ST_KEY_ISSUE, ST_KEY_REVOKE_PREFIX, ST_NODE_DRAIN,
    ST_KEY_REVOKE_ID, ST_KEYS_LIST, ST_KEYS_ACTIVE, ST_CAPACITY,
    ST_BLOB_RECORD, ST_BLOB_GET, ST_BLOB_UNREF, ST_BLOB_SWEEP, ST_IDEM_SWEEP,
    /* quota and retention (store_blobs.c, store_retention.c) */
    ST_TENANT_BLOB_BYTES, ST_BLOBS_NEED, ST_JOB_DELETE, ST_JOBS_EXPIRE,
    ST_KERNEL_RUN_MS, ST_SLOTS_UP,
    ST_NODE_PARTS_CLOSE, ST_JOBS_GROWTH,
    ST_JOBS_CLAIM, ST_LEASE_TAKE, ST_RUNS_UNHAND, ST_NODES_WITH_WORK, ST_RUNS_UNHELD, ST_RUNS_OVERDUE, ST_RUNS_PLACED, ST_JOBS_PREEMPT, ST_JOBS_ENDED, ST_TENANTS_QUOTAS,
    ST_JOBS_ACTIVE_COUNTS, ST_USAGE, ST_STATS_HISTORY,
    /* webhooks (store_webhooks.c) */
    ST_WH_CLAIM, ST_WH_RECORD, ST_WH_SECRET_ENSURE, ST_WH_SECRET_ROTATE, ST_WH_LIST,
    ST_WH_RELEASE, ST_WH_TRIM,
    /* the event log (store_events.c) */
    ST_EVENTS_LAST, ST_EVENTS_SNAPSHOT, ST_EVENTS_READ, ST_EVENTS_TENANT, ST_EVENTS_JOB,
    ST_EVENT_JOB_LAST, ST_JOBS_PROGRESS,
    ST_GANG_ATTEMPT, ST_GANG_RANK_END, ST_GANG_NODES,
    /* what a node may touch (store_nodes.c) */
    ST_NODE_BY_CREDENTIAL, ST_NODES_BY_CREDENTIALS, ST_NODE_RUN_HELD, ST_NODE_GANG_MEMBER, ST_NODE_BLOB_GET, ST_RUN_OUTPUT,
    /* tasks (store_tasks.c) */
    ST_TENANT_TASKS, ST_TASK_ENDED, ST_TASK_LOGS_APPEND, ST_TASK_LOG_READ, ST_TASK_IMAGES,
    ST__COUNT
};

/* Borrows a connection (connecting when needed); NULL when PostgreSQL
 * cannot be reached. Give it back with store__release. */
store__conn *store__acquire(gw_store *s);
void store__release(gw_store *s, store__conn *c);
/* Executes statement id with text parameters (lens/fmts may be NULL) and
 * returns its result, or NULL after logging when it failed; a broken
 * connection is reset for the next user. binary asks for binary results. */
PGresult *store__exec(store__conn *c, int id, const char *const *vals, const int *lens,
                      const int *fmts, int binary);
/* The errno for the last failure of store__exec on c: -EIO when it may
 * pass if tried again (no connection, an outage, a deadlock), -EPROTO when
 * PostgreSQL refused the statement itself and would refuse it again. */
int store__fail_rc(const store__conn *c);
/* Runs statement id with text parameters on a pooled connection; on 0, *r
 * holds its result (caller clears it); -EIO. */
int store__run(gw_store *s, int id, const char *const *vals, PGresult **r);
/* store__run for a statement that answers one row: 0 with *r holding it
 * (caller clears), else *r NULL and -EIO when it failed, missing when it
 * answered no row or several. */
int store__run_row(gw_store *s, int id, const char *const *vals, int missing, PGresult **r);
/* store__run_row's row of one number: 0 with column 0 in *out, or -EIO
 * (failed, or not one row). */
int store__int64(gw_store *s, int id, const char *const *vals, int64_t *out);
/* store__run for a statement on a run: its parameters are (job_id, attempt,
 * node_id), the last left out of a statement that takes two. */
int store__run_attempt(gw_store *s, int id, const char *job_id, int attempt, const char *node_id,
                       PGresult **r);
/* Runs a parameterless command (BEGIN, COMMIT, ROLLBACK) on c; 0 or -EIO
 * after logging. */
int store__command(store__conn *c, const char *sql);
/* Copies column col of row into a NUL-terminated buffer of size len. */
void store__copy(const PGresult *r, int row, int col, char *out, size_t len);
/* Parses column col as JSON; NULL when NULL or not JSON. */
json_t *store__json(const PGresult *r, int row, int col);

#endif
