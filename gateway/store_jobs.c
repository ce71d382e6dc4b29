/* store_jobs.c — jobs in PostgreSQL: insert, read, list, cancel, and the
 * fenced transitions the scheduler makes (claim, succeed, fail, requeue).
 * Every transition is one statement that also writes its job_events row. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "svc_log.h"

void gw_dispatch_clear(gw_dispatch *d)
{
    if (!d)
        return;
    json_decref(d->params);
    json_decref(d->inputs_meta);
    free(d->inputs);
    memset(d, 0, sizeof(*d));
}

/* One submit waiting for its group commit. */
struct store__insert {
    const gw_job_new *j;
    json_t *job;
    int64_t seq;
    int rc, done;
    store__insert *next;
};

#define BATCH_MAX 128

static int insert_one(store__conn *c, store__insert *in)
{
    const gw_job_new *j = in->j;
    char tenant[24], prio[8], timeout[16], attempts[8], gpus[8];
    snprintf(tenant, sizeof(tenant), "%lld", (long long)j->tenant_id);
    snprintf(prio, sizeof(prio), "%d", j->priority);
    snprintf(timeout, sizeof(timeout), "%d", j->timeout_s);
    snprintf(attempts, sizeof(attempts), "%d", j->max_attempts);
    snprintf(gpus, sizeof(gpus), "%d", j->gpus);
    const char *v[11] = {tenant, j->kernel, j->params_json, prio, timeout, attempts,
                         j->backend, gpus, j->labels_json, j->inputs_meta,
                         j->inputs_len ? (const char *)j->inputs_data : ""};
    int lens[11] = {0};
    int fmts[11] = {0};
    lens[10] = (int)j->inputs_len;
    fmts[10] = 1;
    if (!c->pg)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_INSERT, v, lens, fmts, 0);
    if (r && PQntuples(r) == 1) {
        in->job = store__json(r, 0, 0);
        in->seq = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    }
    PQclear(r);
    return in->job ? 0 : -EIO;
}


/* Commits a batch of submits in one transaction: one WAL flush for all.
 * If the batch fails on a live connection, each insert is retried on its
 * own so one bad row cannot fail the others; on a lost connection the
 * outcome is unknown and every caller answers 503. */
static void batch_commit(gw_store *s, store__insert *batch)
{
    store__conn *c = store__acquire(s);
    if (c && !batch->next) {
        /* Alone: the insert is one statement, atomic and committed by
         * itself; BEGIN and COMMIT would only add two round trips. */
        batch->rc = insert_one(c, batch);
        store__release(s, c);
        return;
    }
    int ok = c && store__command(c, "BEGIN") == 0;
    for (store__insert *in = batch; ok && in; in = in->next)
        ok = insert_one(c, in) == 0;
    if (ok)
        ok = store__command(c, "COMMIT") == 0;
    for (store__insert *in = batch; in; in = in->next) {
        if (ok) {
            in->rc = 0;
            continue;
        }
        json_decref(in->job);
        in->job = NULL;
        in->rc = -EIO;
    }
    if (!ok && c && c->pg) {
        store__command(c, "ROLLBACK");
        for (store__insert *in = batch; in; in = in->next)
            in->rc = insert_one(c, in);
    }
    store__release(s, c);
}

int gw_store_job_insert(gw_store *s, const gw_job_new *j, json_t **job, int64_t *seq)
{
    store__insert me = {.j = j, .rc = -EIO};
    pthread_mutex_lock(&s->batch_mu);
    if (s->pending_tail)
        s->pending_tail->next = &me;
    else
        s->pending = &me;
    s->pending_tail = &me;
    while (!me.done) {
        if (s->committing) {
            pthread_cond_wait(&s->batch_cv, &s->batch_mu);
            continue;
        }
        /* Nobody is committing: this caller commits what is queued,
         * its own insert among the first BATCH_MAX or a later round. */
        s->committing = 1;
        store__insert *batch = s->pending, *last = batch;
        for (int n = 1; n < BATCH_MAX && last->next; n++)
            last = last->next;
        s->pending = last->next;
        if (!s->pending)
            s->pending_tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&s->batch_mu);
        batch_commit(s, batch);
        pthread_mutex_lock(&s->batch_mu);
        for (store__insert *in = batch, *next; in; in = next) {
            next = in->next;
            in->done = 1;
        }
        s->committing = 0;
        pthread_cond_broadcast(&s->batch_cv);
    }
    pthread_mutex_unlock(&s->batch_mu);
    *job = me.job;
    *seq = me.seq;
    return me.rc;
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

/* Reads running jobs (statement id, with its parameters vals) into
 * dispatch records without inputs. */
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
        store__copy(r, i, 2, d->kernel, sizeof(d->kernel));
        d->timeout_s = atoi(PQgetvalue(r, i, 3));
        store__copy(r, i, 4, d->node_id, sizeof(d->node_id));
        store__copy(r, i, 5, d->node_url, sizeof(d->node_url));
        store__copy(r, i, 6, d->node_name, sizeof(d->node_name));
        d->priority = atoi(PQgetvalue(r, i, 7));
        d->seq = strtoll(PQgetvalue(r, i, 8), NULL, 10);
        store__copy(r, i, 9, d->backend, sizeof(d->backend));
        d->gpus = atoi(PQgetvalue(r, i, 10));
        d->ran_ms = strtoll(PQgetvalue(r, i, 11), NULL, 10);
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

int gw_store_job_succeed(gw_store *s, const char *job_id, int attempt, const char *backend,
                         const char *info_json, const char *meta_json, const void *data, size_t len)
{
    char att[16];
    snprintf(att, sizeof(att), "%d", attempt);
    const char *v[6] = {job_id, att, backend, meta_json, len ? (const char *)data : "", info_json};
    int lens[6] = {0, 0, 0, 0, (int)len, 0};
    int fmts[6] = {0, 0, 0, 0, 1, 0};
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_SUCCEED, v, lens, fmts, 0);
    int rc = !r ? store__fail_rc(c) : PQntuples(r) == 0 ? -EAGAIN : 0;
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_job_fail(gw_store *s, const char *job_id, int attempt, const char *state,
                      const char *code, const char *message)
{
    char att[16];
    snprintf(att, sizeof(att), "%d", attempt);
    const char *v[5] = {job_id, att, state, code, message};
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOB_FAIL, v, NULL, NULL, 0);
    int rc = !r ? store__fail_rc(c) : PQntuples(r) == 0 ? -EAGAIN : 0;
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_job_requeue(gw_store *s, const char *job_id, int attempt, int uncounted,
                         const char *code, const char *message, const gw_backoff *bo,
                         gw_requeued *out)
{
    char att[16], base[24], max[24];
    snprintf(att, sizeof(att), "%d", attempt);
    snprintf(base, sizeof(base), "%d", bo->base_ms);
    snprintf(max, sizeof(max), "%lld", (long long)bo->max_s * 1000);
    const char *v[7] = {job_id, att, uncounted ? "1" : "0", code, message, base, max};
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
        *n = i + 1;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_jobs_claim(gw_store *s, gw_claim *claims, int n)
{
    if (n <= 0)
        return 0;
    /* '{id,id,...}': uuids need no quoting in an array literal. */
    size_t cap = (size_t)n * 38 + 3;
    char *jobs = malloc(cap), *nodes = malloc(cap);
    int rc = jobs && nodes ? 0 : -ENOMEM;
    for (int i = 0, jl = 0, nl = 0; !rc && i < n; i++) {
        claims[i].claimed = 0;
        jl += snprintf(jobs + jl, cap - (size_t)jl, "%c%s", i ? ',' : '{', claims[i].job_id);
        nl += snprintf(nodes + nl, cap - (size_t)nl, "%c%s", i ? ',' : '{', claims[i].node_id);
        if (i == n - 1) {
            snprintf(jobs + jl, cap - (size_t)jl, "}");
            snprintf(nodes + nl, cap - (size_t)nl, "}");
        }
    }
    store__conn *c = rc ? NULL : store__acquire(s);
    if (!rc && !c)
        rc = -EIO;
    if (!rc) {
        const char *v[2] = {jobs, nodes};
        PGresult *r = store__exec(c, ST_JOBS_CLAIM, v, NULL, NULL, 0);
        if (!r)
            rc = store__fail_rc(c);
        for (int k = 0; r && k < PQntuples(r); k++)
            for (int i = 0; i < n; i++)
                if (strcmp(claims[i].job_id, PQgetvalue(r, k, 0)) == 0)
                    claims[i].claimed = 1;
        PQclear(r);
        store__release(s, c);
    }
    free(jobs);
    free(nodes);
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
        if (!run)
            continue;
        store__copy(r, i, 3, d->kernel, sizeof(d->kernel));
        d->params = store__json(r, i, 4);
        store__copy(r, i, 5, buf, sizeof(buf));
        d->timeout_s = atoi(buf);
        store__copy(r, i, 6, buf, sizeof(buf));
        d->gpus = atoi(buf);
        store__copy(r, i, 7, d->backend, sizeof(d->backend));
        d->inputs_meta = store__json(r, i, 8);
        d->inputs_len = (size_t)PQgetlength(r, i, 9);
        d->inputs = malloc(d->inputs_len ? d->inputs_len : 1);
        if (!d->params || !d->inputs_meta || !d->inputs)
            rc = -ENOMEM;
        else
            memcpy(d->inputs, PQgetvalue(r, i, 9), d->inputs_len);
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

void gw_dispatch_free(gw_dispatch *list, int n)
{
    for (int i = 0; list && i < n; i++)
        gw_dispatch_clear(&list[i]);
    free(list);
}

int gw_store_runs_unheld(gw_store *s, const char *node_id, const char *held, int grace_s,
                         gw_dispatch **out, int *n)
{
    char grace[16];
    snprintf(grace, sizeof(grace), "%d", grace_s);
    const char *v[3] = {node_id, held, grace};
    return load_running_p(s, ST_RUNS_UNHELD, v, out, n);
}

int gw_store_runs_overdue(gw_store *s, int grace_s, gw_dispatch **out, int *n)
{
    char grace[16];
    snprintf(grace, sizeof(grace), "%d", grace_s);
    const char *v[1] = {grace};
    return load_running_p(s, ST_RUNS_OVERDUE, v, out, n);
}

int gw_store_running_counts(gw_store *s, gw_node_count **out, int *n)
{
    *out = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_RUNNING_COUNTS, NULL, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    int rows = r ? PQntuples(r) : 0;
    if (rows > 0 && !(*out = calloc((size_t)rows, sizeof(gw_node_count))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++) {
        store__copy(r, i, 0, (*out)[i].node_id, sizeof((*out)[i].node_id));
        (*out)[i].running = atoi(PQgetvalue(r, i, 1));
        *n = i + 1;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}
