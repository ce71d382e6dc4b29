/* store_jobs.c — jobs in PostgreSQL: insert, read, list, cancel, and the
 * fenced transitions the scheduler makes (claim, succeed, fail, requeue).
 * Every transition is one statement that also writes its job_events row. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "gw_task.h"
#include "svc_log.h"

void gw_dispatch_clear(gw_dispatch *d)
{
    if (!d)
        return;
    json_decref(d->params);
    json_decref(d->task);
    json_decref(d->inputs_meta);
    free(d->inputs);
    memset(d, 0, sizeof(*d));
}

/* A PostgreSQL array literal under construction: "{a,b,...}". */
typedef struct arr {
    char *p;
    size_t len, cap;
    int oom;
} arr;

/* Appends n bytes of s, growing the buffer; on ENOMEM marks a->oom and
 * appends nothing more. */
static void arr_put(arr *a, const char *s, size_t n)
{
    if (a->oom)
        return;
    if (a->len + n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap : 256;
        while (cap < a->len + n + 2)
            cap *= 2;
        char *p = realloc(a->p, cap);
        if (!p) {
            a->oom = 1;
            return;
        }
        a->p = p;
        a->cap = cap;
    }
    memcpy(a->p + a->len, s, n);
    a->len += n;
    a->p[a->len] = '\0';
}

/* Appends an element: numbers and UUIDs as they are, any other text
 * quoted, with '"' and '\' escaped as array literals want. */
static void arr_add(arr *a, const char *s, int quote)
{
    arr_put(a, a->len ? "," : "{", 1);
    if (!quote) {
        arr_put(a, s, strlen(s));
        return;
    }
    arr_put(a, "\"", 1);
    for (const char *run = s;;) {
        size_t n = strcspn(run, "\"\\");
        arr_put(a, run, n);
        if (!run[n])
            break;
        arr_put(a, "\\", 1);
        arr_put(a, run + n, 1);
        run += n + 1;
    }
    arr_put(a, "\"", 1);
}

/* Appends the integer v as an element. */
static void arr_addf(arr *a, long long v)
{
    char num[24];
    snprintf(num, sizeof num, "%lld", v);
    arr_add(a, num, 0);
}

/* The finished literal ("{}" when empty); NULL when out of memory. */
static const char *arr_end(arr *a)
{
    arr_put(a, a->len ? "}" : "{}", a->len ? 1 : 2);
    return a->oom ? NULL : a->p;
}

/* The statement's parameters: every array but $12 (the bytes). */
enum { P_ID, P_TENANT, P_KERNEL, P_PARAMS, P_PRIO, P_TIMEOUT, P_ATTEMPTS, P_BACKEND, P_GPUS,
       P_LABELS, P_META, P_DATA, P_OFF, P_LEN, P_BJOB, P_BID, P_BSIZE, P_IKEY, P_IHASH, P_WEBHOOK,
       P_WH_EVENTS, P_NODES, P_GPU_MEM, P_TASK, P_TASK_RUN, P__COUNT };

/* Appends job j to the arrays of ST_JOBS_INSERT (all but P_DATA); its
 * inline bytes start at off in the binary parameter. */
static void insert_row(arr *a, const gw_job_new *j, size_t off)
{
    arr_add(&a[P_ID], j->id, 0);
    arr_addf(&a[P_TENANT], j->tenant_id);
    arr_add(&a[P_KERNEL], j->kernel, 1);
    arr_add(&a[P_PARAMS], j->params_json, 1);
    arr_addf(&a[P_PRIO], j->priority);
    arr_addf(&a[P_TIMEOUT], j->timeout_s);
    arr_addf(&a[P_ATTEMPTS], j->max_attempts);
    arr_add(&a[P_BACKEND], j->backend, 1);
    arr_addf(&a[P_GPUS], j->gpus);
    arr_addf(&a[P_NODES], j->nodes > 0 ? j->nodes : 1);
    if (j->gpu_memory_gb > 0) {
        char gb[32];
        snprintf(gb, sizeof gb, "%.9g", j->gpu_memory_gb);
        arr_add(&a[P_GPU_MEM], gb, 0);
    } else {
        arr_add(&a[P_GPU_MEM], "NULL", 0);
    }
    arr_add(&a[P_LABELS], j->labels_json, 1);
    arr_add(&a[P_META], j->inputs_meta, 1);
    arr_addf(&a[P_OFF], (long long)off);
    arr_addf(&a[P_LEN], (long long)j->inputs_len);
    arr_add(&a[P_WEBHOOK], j->webhook ? j->webhook : "NULL", j->webhook != NULL);
    arr_add(&a[P_WH_EVENTS], j->webhook ? j->webhook_events : "NULL", j->webhook != NULL);
    arr_add(&a[P_IKEY], j->idem_key ? j->idem_key : "NULL", j->idem_key != NULL);
    arr_add(&a[P_IHASH], j->idem_key ? j->idem_hash : "NULL", 0);
    arr_add(&a[P_TASK], j->task_json ? j->task_json : "NULL", j->task_json != NULL);
    arr_add(&a[P_TASK_RUN], j->task_run_json ? j->task_run_json : "NULL",
            j->task_run_json != NULL);
    for (int b = 0; b < j->nblobs; b++) {
        arr_add(&a[P_BJOB], j->id, 0);
        arr_add(&a[P_BID], j->blob_ids[b], 1);
        arr_addf(&a[P_BSIZE], (long long)j->blob_sizes[b]);
    }
}

/* Reads ST_JOBS_INSERT's rows back into the jobs, matched by ordinality
 * (column 0): the idempotency outcome, and seq and created_ms of a job
 * inserted. 0, or -EIO on a row that names no job of the batch. */
static int insert_read_back(PGresult *r, gw_job_new *const *jobs, int n)
{
    for (int i = 0; i < n; i++) {
        long k = strtol(PQgetvalue(r, i, 0), NULL, 10);
        if (k < 1 || k > n)
            return -EIO;
        gw_job_new *j = jobs[k - 1];
        j->idem = GW_IDEM_NEW;
        if (PQgetisnull(r, i, 1)) {
            store__copy(r, i, 3, j->idem_job, sizeof j->idem_job);
            j->idem = strcmp(PQgetvalue(r, i, 4), "1") == 0 ? GW_IDEM_REPLAY : GW_IDEM_REUSED;
            continue;
        }
        j->seq = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        j->created_ms = strtoll(PQgetvalue(r, i, 2), NULL, 10);
    }
    return 0;
}

/* One ST_JOBS_INSERT for the whole batch (store.h): the arrays built
 * here, the inline bytes copied into one binary parameter, and each job's
 * seq and created_ms read back by ordinality. */
int gw_store_jobs_insert(gw_store *s, gw_job_new *const *jobs, int n)
{
    arr a[P__COUNT] = {{0}};
    size_t total = 0;
    for (int k = 0; k < n; k++)
        total += jobs[k]->inputs_len;
    unsigned char *data = malloc(total ? total : 1);
    size_t off = 0;
    for (int k = 0; k < n && data; k++) {
        const gw_job_new *j = jobs[k];
        insert_row(a, j, off);
        if (j->inputs_len)
            memcpy(data + off, j->inputs_data, j->inputs_len);
        off += j->inputs_len;
    }
    const char *v[P__COUNT];
    int lens[P__COUNT] = {0}, fmts[P__COUNT] = {0};
    int rc = data ? 0 : -ENOMEM;
    for (int i = 0; i < P__COUNT && !rc; i++)
        if (i != P_DATA && !(v[i] = arr_end(&a[i])))
            rc = -ENOMEM;
    if (total > INT32_MAX)
        rc = -EPROTO;
    v[P_DATA] = (const char *)data;
    lens[P_DATA] = (int)total;
    fmts[P_DATA] = 1;
    store__conn *c = rc ? NULL : store__acquire(s);
    if (!rc && !c)
        rc = -EIO;
    if (!rc) {
        PGresult *r = store__exec(c, ST_JOBS_INSERT, v, lens, fmts, 0);
        if (!r)
            rc = !c->pg ? -EIO : gw_store_sqlstate_transient(c->sqlstate) ? -EAGAIN : -EPROTO;
        else if (PQntuples(r) != n)
            rc = -EIO; /* cannot happen: the statement inserts every row or none */
        else
            rc = insert_read_back(r, jobs, n);
        PQclear(r);
        store__release(s, c);
    }
    for (int i = 0; i < P__COUNT; i++)
        free(a[i].p);
    free(data);
    return rc;
}

int gw_store_idem_sweep(gw_store *s, int limit, int *removed)
{
    char lim[24];
    snprintf(lim, sizeof lim, "%d", limit);
    const char *v[1] = {lim};
    *removed = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_IDEM_SWEEP, v, NULL, NULL, 0);
    int rc = r ? 0 : store__fail_rc(c);
    if (r)
        *removed = atoi(PQcmdTuples(r));
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_kernel_run_ms(gw_store *s, const char *kernel, int64_t *runs, int64_t *mean_ms)
{
    const char *v[1] = {kernel};
    PGresult *r;
    int rc = store__run_row(s, ST_KERNEL_RUN_MS, v, -EIO, &r);
    if (!rc) {
        *runs = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        *mean_ms = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
        PQclear(r);
    }
    return rc;
}

int gw_store_slots_up(gw_store *s, int64_t *slots)
{
    return store__int64(s, ST_SLOTS_UP, NULL, slots);
}

int gw_store_job_get(gw_store *s, int64_t tenant_id, const char *id, json_t **job)
{
    char tenant[24];
    snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
    const char *v[2] = {id, tenant};
    *job = NULL;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_GET, v, NULL, NULL, 0);
    int rc = !r ? -EIO : PQntuples(r) == 0 ? -ENOENT : 0;
    if (!rc && !(*job = store__json(r, 0, 0)))
        rc = -EIO;
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_jobs_analyze_if_grown(gw_store *s, int64_t min_rows, int64_t running,
                                   int64_t *changed, int64_t *expected)
{
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOBS_GROWTH, NULL, NULL, NULL, 0);
    int rc = r && PQntuples(r) == 1 ? 0 : -EIO;
    int64_t mods = rc ? 0 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    int64_t counted = rc ? 0 : strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    int64_t planned = rc ? 0 : strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    PQclear(r);
    *changed = mods;
    *expected = planned;
    int grown = min_rows > 0 && mods >= min_rows && mods >= counted;
    int running_off = gw_store_running_misplanned(running, planned);
    if (!rc && (grown || running_off))
        rc = store__command(c, "ANALYZE jobs") == 0 ? (grown ? 1 : 2) : -EIO;
    store__release(s, c);
    return rc;
}

int gw_store_running_misplanned(int64_t running, int64_t planned)
{
    return running >= GW_STORE_RUNNING_MISPLANNED_MIN && running > 4 * planned;
}

int gw_store_job_fields(gw_store *s, json_t **names)
{
    PGresult *r;
    *names = NULL;
    if (store__run(s, ST_JOB_FIELDS, NULL, &r) != 0)
        return -EIO;
    json_t *a = PQntuples(r) == 1 ? store__json(r, 0, 0) : NULL;
    PQclear(r);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
        if (!json_is_string(v))
            break;
    if (!json_is_array(a) || json_array_size(a) == 0 || i < json_array_size(a)) {
        json_decref(a);
        return -EIO;
    }
    *names = a;
    return 0;
}

int gw_store_job_list(gw_store *s, int64_t tenant_id, const gw_job_filter *f,
                      json_t **jobs, int64_t *next_seq)
{
    char tenant[24], before[24], limit[16];
    snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
    snprintf(before, sizeof(before), "%lld", (long long)f->before_seq);
    /* One row more than asked tells whether another page follows. */
    snprintf(limit, sizeof(limit), "%d", f->limit + 1);
    const char *v[6] = {tenant, f->state, f->kernel, f->label_json,
                        f->before_seq > 0 ? before : NULL, limit};
    *jobs = NULL;
    *next_seq = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_LIST, v, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    if (!rc) {
        int rows = PQntuples(r);
        *jobs = json_array();
        /* A row that cannot be read fails the page: dropping it would
         * hide the job behind a short page with a next_cursor. */
        for (int i = 0; !rc && i < rows && i < f->limit; i++)
            if (json_array_append_new(*jobs, store__json(r, i, 0)) != 0)
                rc = -EPROTO;
        if (rc) {
            json_decref(*jobs);
            *jobs = NULL;
        }
        if (!rc && rows > f->limit)
            *next_seq = strtoll(PQgetvalue(r, f->limit - 1, 1), NULL, 10);
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_job_result(gw_store *s, int64_t tenant_id, const char *id, char state[16],
                        json_t **meta, unsigned char **data, size_t *len, json_t **info)
{
    *info = NULL;
    char tenant[24];
    snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
    const char *v[2] = {id, tenant};
    *meta = NULL;
    *data = NULL;
    *len = 0;
    state[0] = '\0';
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_RESULT, v, NULL, NULL, 1);
    int rc = !r ? -EIO : PQntuples(r) == 0 ? -ENOENT : 0;
    if (!rc) {
        store__copy(r, 0, 0, state, 16);
        if (strcmp(state, "succeeded") != 0 || PQgetisnull(r, 0, 1)) {
            rc = -EAGAIN;
        } else {
            *meta = store__json(r, 0, 1);
            *len = (size_t)PQgetlength(r, 0, 2);
            *data = malloc(*len ? *len : 1);
            *info = store__json(r, 0, 3);
            if (!*meta || !*data) {
                rc = -ENOMEM;
            } else {
                memcpy(*data, PQgetvalue(r, 0, 2), *len);
            }
        }
    }
    if (rc && rc != -EAGAIN) {
        json_decref(*info);
        *info = NULL;
        json_decref(*meta);
        free(*data);
        *meta = NULL;
        *data = NULL;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_job_cancel(gw_store *s, int64_t tenant_id, const char *id, char was[16],
                        char node_id[37], json_t **job)
{
    char tenant[24];
    snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
    const char *v[2] = {id, tenant};
    *job = NULL;
    was[0] = '\0';
    node_id[0] = '\0';
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_CANCEL, v, NULL, NULL, 0);
    int rc = !r ? -EIO : PQntuples(r) == 0 ? -ENOENT : 0;
    if (!rc) {
        store__copy(r, 0, 0, was, 16);
        store__copy(r, 0, 2, node_id, 37);
        *job = store__json(r, 0, 1);
        if (!*job)
            rc = -EAGAIN;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

/* Reads running jobs (statement id, with its parameters vals: rows of id,
 * attempt, node name) into records of job_id, attempt and node_name. */
static int load_running_p(gw_store *s, int id, const char *const *vals, gw_dispatch **out, int *n)
{
    *out = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, id, vals, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    int rows = r ? PQntuples(r) : 0;
    if (rows > 0 && !(*out = calloc((size_t)rows, sizeof(gw_dispatch))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++) {
        gw_dispatch *d = &(*out)[i];
        store__copy(r, i, 0, d->job_id, sizeof(d->job_id));
        d->attempt = atoi(PQgetvalue(r, i, 1));
        store__copy(r, i, 2, d->node_name, sizeof(d->node_name));
        *n = i + 1;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_jobs_on_down_nodes(gw_store *s, gw_dispatch **out, int *n)
{
    return load_running_p(s, ST_JOBS_ON_DOWN, NULL, out, n);
}

int gw_store_job_succeed(gw_store *s, const char *job_id, int attempt, const char *node_id,
                         const char *kernel, const char *backend, const char *info_json,
                         const char *meta_json, const void *data, size_t len,
                         const char *usage_json)
{
    /* Entries naming a blob carry "blob" (as a key): without one, the
     * lighter statement does. */
    if (!strstr(meta_json, "\"blob\"")) {
        gw_success one = {job_id, attempt, backend, info_json, meta_json, usage_json, NULL, NULL,
                          data, len, 0, kernel, node_id};
        int rc = gw_store_jobs_succeed_inline(s, &one, 1);
        return rc ? rc : one.recorded ? 0 : -EAGAIN;
    }
    char att[16];
    snprintf(att, sizeof(att), "%d", attempt);
    const char *v[10] = {job_id, att, backend, meta_json, len ? (const char *)data : "", info_json,
                         usage_json, s->prices, node_id, kernel};
    int lens[10] = {0, 0, 0, 0, (int)len, 0, 0, 0, 0, 0};
    int fmts[10] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_SUCCEED, v, lens, fmts, 0);
    int rc = !r ? store__fail_rc(c) : PQntuples(r) == 0 ? -EAGAIN : 0;
    PQclear(r);
    store__release(s, c);
    return rc;
}

/* ST_JOBS_SUCCEED_INLINE's parameters: arrays but $6 (the bytes) and $10
 * (the price table). */
enum { S_ID, S_ATT, S_BACKEND, S_INFO, S_META, S_DATA, S_OFF, S_LEN, S_USAGE, S_PRICES, S_U1, S_U2,
       S_NODE, S_KERNEL, S__COUNT };

/* Appends report g to the arrays of ST_JOBS_SUCCEED_INLINE (all but
 * S_DATA and S_PRICES); its bytes start at off in the binary parameter. */
static void succeed_row(arr *a, const gw_success *g, size_t off)
{
    arr_add(&a[S_ID], g->job_id, 0);
    arr_addf(&a[S_ATT], g->attempt);
    arr_add(&a[S_BACKEND], g->backend, 1);
    arr_add(&a[S_INFO], g->info_json, 1);
    arr_add(&a[S_META], g->meta_json, 1);
    arr_addf(&a[S_OFF], (long long)off);
    arr_addf(&a[S_LEN], (long long)g->len);
    /* an unquoted NULL is SQL's NULL: no measurement from the node */
    arr_add(&a[S_USAGE], g->usage_json ? g->usage_json : "NULL", g->usage_json != NULL);
    arr_add(&a[S_U1], g->usage_u1 && g->usage_u2 ? g->usage_u1 : "NULL", g->usage_u1 && g->usage_u2);
    arr_add(&a[S_U2], g->usage_u1 && g->usage_u2 ? g->usage_u2 : "NULL", g->usage_u1 && g->usage_u2);
    arr_add(&a[S_KERNEL], g->kernel ? g->kernel : "", 1);
    arr_add(&a[S_NODE], g->node_id, 0);
}

/* Marks recorded the rows that ST_JOBS_SUCCEED_INLINE returned (by their
 * place in the arrays): the attempts that were current; the rest were late
 * or duplicate reports. A report sent twice by its node (two requests in
 * one batch) is recorded once: the row the update used. */
static void succeed_mark_recorded(PGresult *r, gw_success *rows, int n)
{
    for (int i = 0; r && i < PQntuples(r); i++) {
        long k = strtol(PQgetvalue(r, i, 0), NULL, 10);
        if (k >= 1 && k <= n)
            rows[k - 1].recorded = 1;
    }
}

int gw_store_jobs_succeed_inline(gw_store *s, gw_success *rows, int n)
{
    arr a[S__COUNT] = {{0}};
    size_t total = 0;
    for (int k = 0; k < n; k++) {
        rows[k].recorded = 0;
        total += rows[k].len;
    }
    unsigned char *data = malloc(total ? total : 1);
    size_t off = 0;
    for (int k = 0; k < n && data; k++) {
        const gw_success *g = &rows[k];
        succeed_row(a, g, off);
        if (g->len)
            memcpy(data + off, g->data, g->len);
        off += g->len;
    }
    const char *v[S__COUNT];
    int lens[S__COUNT] = {0}, fmts[S__COUNT] = {0};
    int rc = data ? 0 : -ENOMEM;
    for (int i = 0; i < S__COUNT && !rc; i++)
        if (i != S_DATA && i != S_PRICES && !(v[i] = arr_end(&a[i])))
            rc = -ENOMEM;
    v[S_PRICES] = s->prices;
    if (total > INT32_MAX)
        rc = -EPROTO;
    v[S_DATA] = (const char *)data;
    lens[S_DATA] = (int)total;
    fmts[S_DATA] = 1;
    store__conn *c = rc ? NULL : store__acquire(s);
    if (!rc && !c)
        rc = -EIO;
    if (!rc) {
        PGresult *r = store__exec(c, ST_JOBS_SUCCEED_INLINE, v, lens, fmts, 0);
        if (!r)
            rc = store__fail_rc(c);
        succeed_mark_recorded(r, rows, n);
        PQclear(r);
        store__release(s, c);
    }
    for (int i = 0; i < S__COUNT; i++)
        free(a[i].p);
    free(data);
    return rc;
}

int gw_store_job_fail(gw_store *s, const char *job_id, int attempt, const char *state,
                      const char *code, const char *message, const char *backend,
                      const char *usage_json, const char *node_id)
{
    char att[16];
    snprintf(att, sizeof(att), "%d", attempt);
    const char *v[9] = {job_id, att, state, code, message, usage_json, backend, s->prices, node_id};
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_FAIL, v, NULL, NULL, 0);
    int rc = !r ? store__fail_rc(c) : PQntuples(r) == 0 ? -EAGAIN : 0;
    PQclear(r);
    store__release(s, c);
    return rc;
}

/* nodes, gpu_mem_mb and timeout_s of a queued row, from column col on. */
static void queued_resources(PGresult *r, int row, int col, gw_queued *q)
{
    q->nodes = atoi(PQgetvalue(r, row, col));
    q->gpu_mem_mb = atoi(PQgetvalue(r, row, col + 1));
    q->timeout_s = atoi(PQgetvalue(r, row, col + 2));
    q->image = PQgetisnull(r, row, col + 3) ? 0 : gw_task_image_key(PQgetvalue(r, row, col + 3));
}

int gw_store_job_requeue(gw_store *s, const char *job_id, int attempt, int uncounted,
                         const char *code, const char *message, const gw_backoff *bo,
                         const char *backend, const char *usage_json, const char *node_id,
                         gw_requeued *out)
{
    char att[16], base[24], max[24];
    snprintf(att, sizeof(att), "%d", attempt);
    snprintf(base, sizeof(base), "%d", bo->base_ms);
    snprintf(max, sizeof(max), "%lld", (long long)bo->max_s * 1000);
    const char *v[11] = {job_id, att, uncounted ? "1" : "0", code, message, base, max,
                         usage_json, backend, s->prices, node_id};
    memset(out, 0, sizeof(*out));
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_REQUEUE, v, NULL, NULL, 0);
    int rc = !r ? store__fail_rc(c) : PQntuples(r) == 0 ? -EAGAIN : 0;
    if (!rc) {
        out->requeued = strcmp(PQgetvalue(r, 0, 0), "queued") == 0;
        snprintf(out->q.id, sizeof(out->q.id), "%s", job_id);
        out->q.seq = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
        out->q.priority = atoi(PQgetvalue(r, 0, 2));
        store__copy(r, 0, 3, out->q.backend, sizeof(out->q.backend));
        out->q.gpus = atoi(PQgetvalue(r, 0, 4));
        out->q.not_before_ms = strtoll(PQgetvalue(r, 0, 5), NULL, 10);
        out->q.tenant_id = strtoll(PQgetvalue(r, 0, 6), NULL, 10);
        queued_resources(r, 0, 7, &out->q);
        svc_info("job %s attempt %d: %s (%s: %s)", job_id, attempt, PQgetvalue(r, 0, 0), code, message);
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_jobs_queued(gw_store *s, int64_t after_seq, int limit, gw_queued **out, int *n)
{
    char after[24], lim[16];
    snprintf(after, sizeof(after), "%lld", (long long)after_seq);
    snprintf(lim, sizeof(lim), "%d", limit);
    const char *v[2] = {after, lim};
    *out = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOBS_QUEUED, v, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    int rows = r ? PQntuples(r) : 0;
    if (rows > 0 && !(*out = calloc((size_t)rows, sizeof(gw_queued))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++) {
        gw_queued *q = &(*out)[i];
        store__copy(r, i, 0, q->id, sizeof(q->id));
        q->seq = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        q->priority = atoi(PQgetvalue(r, i, 2));
        store__copy(r, i, 3, q->backend, sizeof(q->backend));
        q->gpus = atoi(PQgetvalue(r, i, 4));
        q->not_before_ms = strtoll(PQgetvalue(r, i, 5), NULL, 10);
        q->tenant_id = strtoll(PQgetvalue(r, i, 6), NULL, 10);
        queued_resources(r, i, 7, q);
        *n = i + 1;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

/* The PostgreSQL array literal "{id,id,...}" of n UUIDs (they need no
 * quoting), the i-th at first + i * stride. malloc'd; NULL on ENOMEM. */
static char *uuid_array(const char *first, size_t stride, int n)
{
    size_t cap = (size_t)n * 38 + 3, len = 0;
    char *arr = malloc(cap);
    if (!arr)
        return NULL;
    arr[len++] = '{';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(arr + len, cap - len, "%s%s", i ? "," : "", first + (size_t)i * stride);
    snprintf(arr + len, cap - len, "}");
    return arr;
}

/* Appends the devices ids[0..n) as one element "{0,1}" of a text array,
 * NULL when there are none. */
static void arr_add_ids(arr *a, const int *ids, int n)
{
    if (n <= 0) {
        arr_add(a, "NULL", 0);
        return;
    }
    char buf[16 * 12 + 3];
    size_t len = 0;
    buf[len++] = '{';
    for (int i = 0; i < n && i < 16; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", i ? "," : "", ids[i]);
    snprintf(buf + len, sizeof buf - len, "}");
    arr_add(a, buf, 1);
}

/* Parses a PostgreSQL int[] text ("{1,2}") into ids; returns how many. */
static int int_array_parse(const char *text, int *ids, int max)
{
    int n = 0;
    for (const char *p = text; p && *p && n < max;) {
        while (*p && (*p < '0' || *p > '9'))
            p++;
        if (!*p)
            break;
        ids[n++] = (int)strtol(p, (char **)&p, 10);
    }
    return n;
}

/* The devices of a text "{0,1}" (NULL: none) into ids; their count. */
static int ids_parse(PGresult *r, int row, int col, int *ids, int max)
{
    return PQgetisnull(r, row, col) ? 0 : int_array_parse(PQgetvalue(r, row, col), ids, max);
}

/* A run's lease record from row's columns at, at + 1, ...: kernel, params,
 * timeout_s, gpus, backend, inputs meta and bytes, devices, task (the
 * claim's handed runs and ST_LEASE_TAKE's runs, in binary results: text
 * columns are their bytes). 0 or -ENOMEM. */
static int run_from_row(PGresult *r, int row, int at, gw_dispatch *d)
{
    char buf[32];
    d->ngpu_ids = ids_parse(r, row, at + 7, d->gpu_ids, 16);
    store__copy(r, row, at, d->kernel, sizeof(d->kernel));
    d->task = store__json(r, row, at + 8);
    d->params = d->task ? json_object() : store__json(r, row, at + 1);
    store__copy(r, row, at + 2, buf, sizeof(buf));
    d->timeout_s = atoi(buf);
    store__copy(r, row, at + 3, buf, sizeof(buf));
    d->gpus = atoi(buf);
    store__copy(r, row, at + 4, d->backend, sizeof(d->backend));
    d->inputs_meta = store__json(r, row, at + 5);
    d->inputs_len = (size_t)PQgetlength(r, row, at + 6);
    d->inputs = malloc(d->inputs_len ? d->inputs_len : 1);
    if (!d->params || !d->inputs_meta || !d->inputs)
        return -ENOMEM;
    memcpy(d->inputs, PQgetvalue(r, row, at + 6), d->inputs_len);
    return 0;
}

/* The lease record of handed claim cl (row of r), or NULL (logged): the
 * run is leased all the same, and the lease thread takes it back at once
 * (gw_leases_hand). */
static gw_dispatch *handed_run(PGresult *r, int row, const gw_claim *cl)
{
    gw_dispatch *d = calloc(1, sizeof(*d));
    if (d) {
        snprintf(d->job_id, sizeof(d->job_id), "%s", cl->job_id);
        snprintf(d->node_id, sizeof(d->node_id), "%s", cl->node_id);
        d->attempt = atoi(PQgetvalue(r, row, 1));
        d->node_rank = -1;
        d->nodes = 1;
    }
    if (d && !PQgetisnull(r, row, 9) && run_from_row(r, row, 4, d) == 0)
        return d;
    svc_error("claim: job %s was leased to node %s and its run could not be read", cl->job_id,
              cl->node_id);
    gw_dispatch_free(d, 1);
    return NULL;
}

enum { C_ID, C_NODE, C_GPUS, C_GJOB, C_GRANK, C_GNODE, C_GGPUS, C_HAND, C__COUNT };

int gw_store_jobs_claim(gw_store *s, gw_claim *claims, int n)
{
    if (n <= 0)
        return 0;
    arr a[C__COUNT] = {{0}};
    for (int i = 0; i < n; i++) {
        const gw_claim *cl = &claims[i];
        claims[i].claimed = 0;
        claims[i].run = NULL;
        arr_add(&a[C_ID], cl->job_id, 0);
        arr_add(&a[C_HAND], cl->hand && cl->nnodes <= 1 ? "t" : "f", 0);
        arr_add(&a[C_NODE], cl->node_id, 0);
        arr_add_ids(&a[C_GPUS], cl->gpu_ids, cl->ngpu);
        for (int g = 0; cl->nnodes > 1 && cl->gang && g < cl->nnodes; g++) {
            arr_add(&a[C_GJOB], cl->job_id, 0);
            arr_addf(&a[C_GRANK], g);
            arr_add(&a[C_GNODE], cl->gang[g].node_id, 0);
            arr_add_ids(&a[C_GGPUS], cl->gang[g].gpu_ids, cl->gang[g].ngpu);
        }
    }
    const char *v[C__COUNT];
    int rc = 0;
    for (int i = 0; i < C__COUNT && !rc; i++)
        if (!(v[i] = arr_end(&a[i])))
            rc = -ENOMEM;
    store__conn *c = rc ? NULL : store__acquire(s);
    if (!rc && !c)
        rc = -EIO;
    if (!rc) {
        PGresult *r = store__exec(c, ST_JOBS_CLAIM, v, NULL, NULL, 1);
        if (!r)
            rc = store__fail_rc(c);
        for (int k = 0; r && k < PQntuples(r); k++)
            for (int i = 0; i < n; i++)
                if (strcmp(claims[i].job_id, PQgetvalue(r, k, 0)) == 0) {
                    claims[i].claimed = 1;
                    store__copy(r, k, 4, claims[i].kernel, sizeof(claims[i].kernel));
                    claims[i].attempt = atoi(PQgetvalue(r, k, 1));
                    claims[i].first_wait_s = atof(PQgetvalue(r, k, 2));
                    if (strcmp(PQgetvalue(r, k, 3), "true") == 0)
                        claims[i].run = handed_run(r, k, &claims[i]);
                }
        PQclear(r);
        store__release(s, c);
    }
    for (int i = 0; i < C__COUNT; i++)
        free(a[i].p);
    return rc;
}

int gw_store_lease_take(gw_store *s, const char *node_id, int max, gw_dispatch **runs,
                        int *nruns, gw_dispatch **cancels, int *ncancels)
{
    char maxs[16];
    snprintf(maxs, sizeof(maxs), "%d", max > 0 ? max : 0);
    const char *v[2] = {node_id, maxs};
    *runs = *cancels = NULL;
    *nruns = *ncancels = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_LEASE_TAKE, v, NULL, NULL, 1);
    int rc = r ? 0 : store__fail_rc(c);
    int rows = r ? PQntuples(r) : 0;
    if (rows > 0 && (!(*runs = calloc((size_t)rows, sizeof(gw_dispatch))) ||
                     !(*cancels = calloc((size_t)rows, sizeof(gw_dispatch)))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++) {
        int run = strcmp(PQgetvalue(r, i, 0), "run") == 0;
        gw_dispatch *d = run ? &(*runs)[(*nruns)++] : &(*cancels)[(*ncancels)++];
        char buf[32];
        snprintf(d->node_id, sizeof(d->node_id), "%s", node_id);
        store__copy(r, i, 1, d->job_id, sizeof(d->job_id));
        store__copy(r, i, 2, buf, sizeof(buf));
        d->attempt = atoi(buf);
        d->node_rank = -1;
        if (!run)
            continue;
        if (!PQgetisnull(r, i, 3))
            d->node_rank = atoi(PQgetvalue(r, i, 3));
        d->nodes = atoi(PQgetvalue(r, i, 4));
        rc = run_from_row(r, i, 5, d);
    }
    PQclear(r);
    store__release(s, c);
    if (rc) {
        /* The runs taken are leased already: the node's heartbeat shows they
         * never arrived, and they are put back (see gw_store_runs_unheld). */
        gw_dispatch_free(*runs, *nruns);
        free(*cancels);
        *runs = *cancels = NULL;
        *nruns = *ncancels = 0;
    }
    return rc;
}

int gw_store_runs_unhand(gw_store *s, const char (*jobs)[37], const int *attempts, int n)
{
    if (n <= 0)
        return 0;
    arr ids = {0}, atts = {0};
    for (int i = 0; i < n; i++) {
        arr_add(&ids, jobs[i], 0);
        arr_addf(&atts, attempts[i]);
    }
    const char *v[2] = {arr_end(&ids), arr_end(&atts)};
    int rc = v[0] && v[1] ? 0 : -ENOMEM;
    store__conn *c = rc ? NULL : store__acquire(s);
    if (!rc && !c)
        rc = -EIO;
    if (!rc) {
        PGresult *r = store__exec(c, ST_RUNS_UNHAND, v, NULL, NULL, 0);
        if (!r)
            rc = store__fail_rc(c);
        PQclear(r);
        store__release(s, c);
    }
    free(ids.p);
    free(atts.p);
    return rc;
}

void gw_dispatch_free(gw_dispatch *list, int n)
{
    for (int i = 0; list && i < n; i++)
        gw_dispatch_clear(&list[i]);
    free(list);
}

int gw_store_runs_unheld(gw_store *s, const char *beats, int grace_s, gw_dispatch **out, int *n)
{
    char grace[16];
    snprintf(grace, sizeof(grace), "%d", grace_s);
    const char *v[2] = {beats, grace};
    return load_running_p(s, ST_RUNS_UNHELD, v, out, n);
}

int gw_store_runs_overdue(gw_store *s, int grace_s, gw_dispatch **out, int *n)
{
    char grace[16];
    snprintf(grace, sizeof(grace), "%d", grace_s);
    const char *v[1] = {grace};
    return load_running_p(s, ST_RUNS_OVERDUE, v, out, n);
}

int gw_store_runs_placed(gw_store *s, gw_run_place **out, int *n)
{
    *out = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_RUNS_PLACED, NULL, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    int rows = r ? PQntuples(r) : 0;
    if (rows > 0 && !(*out = calloc((size_t)rows, sizeof(gw_run_place))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++) {
        gw_run_place *p = &(*out)[i];
        store__copy(r, i, 0, p->node_id, sizeof(p->node_id));
        p->ngpu = int_array_parse(PQgetvalue(r, i, 1), p->gpu_ids, 16);
        p->end_ms = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        store__copy(r, i, 3, p->job_id, sizeof(p->job_id));
        p->tenant_id = strtoll(PQgetvalue(r, i, 4), NULL, 10);
        p->live = atoi(PQgetvalue(r, i, 5));
        p->attempt = atoi(PQgetvalue(r, i, 6));
        p->start_ms = strtoll(PQgetvalue(r, i, 7), NULL, 10);
        p->stop = atoi(PQgetvalue(r, i, 8));
        *n = i + 1;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

/* Statement id over the uuid array ids (its first parameter; with, when
 * not NULL, n more uuids as its second), which returns ids: hit[i] = 1
 * for each ids[i] among them. 0, -EIO, -ENOMEM. */
static int ids_matching(gw_store *s, int id, const char (*ids)[37], const char (*with)[37], int n,
                        int *hit)
{
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        hit[i] = 0;
    char *arr = uuid_array(ids[0], sizeof(ids[0]), n),
         *arr2 = with ? uuid_array(with[0], sizeof(with[0]), n) : NULL;
    if (!arr || (with && !arr2)) {
        free(arr);
        free(arr2);
        return -ENOMEM;
    }
    const char *v[2] = {arr, arr2};
    store__conn *c = store__acquire(s);
    int rc = c ? 0 : -EIO;
    PGresult *r = c ? store__exec(c, id, v, NULL, NULL, 0) : NULL;
    if (c && !r)
        rc = -EIO;
    for (int k = 0; r && k < PQntuples(r); k++)
        for (int i = 0; i < n; i++)
            if (strcmp(ids[i], PQgetvalue(r, k, 0)) == 0)
                hit[i] = 1;
    PQclear(r);
    if (c)
        store__release(s, c);
    free(arr);
    free(arr2);
    return rc;
}

int gw_store_jobs_preempt(gw_store *s, const char (*jobs)[37], const char (*nodes)[37], int n,
                          int *marked)
{
    return ids_matching(s, ST_JOBS_PREEMPT, jobs, nodes, n, marked);
}

int gw_store_jobs_ended(gw_store *s, const char (*ids)[37], int n, int *ended)
{
    return ids_matching(s, ST_JOBS_ENDED, ids, NULL, n, ended);
}

int gw_store_nodes_with_work(gw_store *s, const char (*ids)[37], int n, int *has)
{
    return ids_matching(s, ST_NODES_WITH_WORK, ids, NULL, n, has);
}

int gw_store_tenants_quotas(gw_store *s, int def, gw_tenant_run **out, int *n)
{
    char d[16];
    snprintf(d, sizeof(d), "%d", def);
    const char *v[1] = {d};
    *out = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_TENANTS_QUOTAS, v, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    int rows = r ? PQntuples(r) : 0;
    if (rows > 0 && !(*out = calloc((size_t)rows, sizeof(gw_tenant_run))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++) {
        (*out)[i].tenant_id = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        (*out)[i].limit = atoi(PQgetvalue(r, i, 1));
        (*out)[i].weight = strtod(PQgetvalue(r, i, 2), NULL);
        *n = i + 1;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_usage(gw_store *s, int64_t tenant_id, const char *tenant_name, int64_t from_ms,
                   int64_t to_ms, const char *group, const char *label_key, char tenant[129],
                   json_t **totals, json_t **groups, uint64_t *blob_bytes)
{
    char id[24], from[24], to[24];
    snprintf(id, sizeof(id), "%lld", (long long)tenant_id);
    snprintf(from, sizeof(from), "%lld", (long long)from_ms);
    snprintf(to, sizeof(to), "%lld", (long long)to_ms);
    const char *v[6] = {id, tenant_name, from, to, group, label_key};
    *totals = *groups = NULL;
    tenant[0] = '\0';
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_USAGE, v, NULL, NULL, 0);
    int rc = !r ? -EIO : PQntuples(r) == 0 ? -ENOENT : 0;
    if (!rc) {
        store__copy(r, 0, 0, tenant, 129);
        *totals = store__json(r, 0, 1);
        *groups = store__json(r, 0, 2);
        *blob_bytes = strtoull(PQgetvalue(r, 0, 3), NULL, 10);
        if (!*totals || !*groups)
            rc = -EIO;
    }
    if (rc) {
        json_decref(*totals);
        json_decref(*groups);
        *totals = *groups = NULL;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}
