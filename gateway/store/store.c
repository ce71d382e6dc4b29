/* store.c — the PostgreSQL side of the gateway: the connection pool, the
 * table of prepared statements (all SQL of the gateway is here), migrations,
 * API keys and nodes. Jobs are in store_jobs.c. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "gw_task.h"
#include "svc_log.h"
#include "svc_util.h"

/* Transitions after the submit need not wait for their WAL flush: if a
 * crash of PostgreSQL loses one, the job falls back to its earlier state
 * and is placed or re-attached again, and a re-posted run is idempotent on
 * the node. Only a submit's commit is a promise to the client. The setting
 * is local to the statement's own transaction. */
/* A job found by its id is checked for being running with this expression
 * rather than with state = 'running': that form would let the planner walk
 * a partial index of running jobs (which it takes for tiny whenever its
 * statistics were gathered while few ran) instead of the primary key, and
 * the cost of a result would grow with the number of running jobs. */
#define RUNNING_BY_ID "(state || '') = 'running'"
/* The jobs row t is held by node n (a uuid parameter): its run, or a part
 * of its current attempt (a multi-node job), is on that node. What a node
 * reports is recorded only for runs it holds. */
#define HELD_BY(t, n)                                                                            \
    "(" t ".node_id = " n "::uuid OR EXISTS (SELECT 1 FROM job_ranks hr WHERE hr.job_id = " t    \
    ".id AND hr.attempt = " t ".attempts AND hr.node_id = " n "::uuid))"
/* The jobs row t is a multi-node task whose current attempt has ended, and
 * node n held a part of it: that part may still be finishing (the job ends
 * with node_rank 0's report, another part's log can come a moment later).
 * Its log, and nothing else of it, is still taken: the live bytes, the log
 * blob and its record (the job object does not change). */
#define LATE_PART_OF(t, n)                                                                       \
    "(" t ".kind = 'task' AND " t ".nodes > 1 AND (" t ".state || '') IN " ENDED_STATES           \
    " AND EXISTS (SELECT 1 FROM job_ranks lr WHERE lr.job_id = " t ".id AND "                      \
    "lr.attempt = " t ".attempts AND lr.node_id = " n "::uuid))"
/* The job_ranks row r is a part of an attempt of job j that has ended (the
 * job requeued, ended, or moved on to a later attempt): its node may still
 * run it until it lets go (ST_RUNS_PLACED, ST_CAPACITY, ST_RUNS_UNHELD,
 * ST_NODE_PARTS_CLOSE). */
#define ENDED_PART(r, j) "(" r ".attempt < " j ".attempts OR (" j ".state || '') <> 'running')"
/* A single-node run leased to a node that has not left, ended or taken
 * from it by the gateway's own decision (the node argument `by` NULL: its
 * node was marked down, does not list it, or sent no result within
 * timeout + grace), may go on there: a node marked down may be alive (its
 * heartbeats starved, or cut off a while), and may be up again already (a
 * late heartbeat). It becomes a part (node_rank 0) that holds its devices
 * while the node is up, is cancelled there, and is closed when the node
 * reports it, stops listing it (ST_RUNS_UNHELD), registers again or
 * leaves, as a gang's part is. `run` selects the run as it was: id,
 * attempt, node_id, node_name, gpu_ids, leased_at, nodes. The statement's
 * FOR UPDATE sees a lease that committed meanwhile: a run leased while its
 * node was being judged is not missed. */
#define LEFT_RUN_PART(by, run)                                                                   \
    " l AS (INSERT INTO job_ranks (job_id, attempt, node_rank, node_id, node_name, gpu_ids, leased_at)" \
    "       SELECT lr.id, lr.attempt, 0, lr.node_id, lr.node_name, coalesce(lr.gpu_ids, '{}'), lr.leased_at" \
    "       FROM (" run ") lr JOIN nodes n ON n.id = lr.node_id"                                   \
    "       WHERE " by "::uuid IS NULL AND lr.nodes = 1 AND lr.leased_at IS NOT NULL"             \
    "         AND n.credential_hash IS NOT NULL"                                                   \
    "       ON CONFLICT DO NOTHING)"
#define ASYNC_COMMIT "cfg AS (SELECT set_config('synchronous_commit', 'off', true) AS v)"
/* An Idempotency-Key names its job for 24 hours (the draft's suggestion,
 * and what Stripe keeps); past that, a submit may take the key over and
 * the retention pass removes it. x is the job_idempotency row. */
#define IDEM_TTL "interval '24 hours'"
#define IDEM_EXPIRED "x.created_at < now() - " IDEM_TTL
/* A job that ends after running records its usage (012_usage.sql): the
 * statements that end one take the node's measurements, where it ran and
 * the price table as their last parameters. */
#define USAGE_SUCCEED "usage = kowloon_usage(jobs, clock_timestamp(), $7::jsonb, $3, $4::jsonb, $8::jsonb)"

/* The blob bytes tenant t is charged for (021_quota_retention.sql). */
#define TENANT_BLOB_BYTES(t) \
    "coalesce((SELECT blob_bytes FROM tenant_totals WHERE tenant_id = " t "), 0)"
/* Deletes the ended jobs listed in CTE x (id) and everything of theirs:
 * their usage moves to usage_records (GET /v1/usage keeps counting it),
 * their blob references go first, explicitly, so that the triggers of
 * 021_quota_retention.sql uncount them in one pass (the cascade would run
 * once per job, taking tenants' locks out of order); events, inputs,
 * results, webhook deliveries and gang parts go with the job (ON DELETE
 * CASCADE); each tenant's jobs_deleted row grows by its count, which tells
 * every gateway's job cache (jobcache.h). dj lists the jobs deleted. An
 * Idempotency-Key naming a deleted job stays until its 24 hours are
 * over: a retry then answers 409 (api_jobs.c). */
#define JOBS_DELETE                                                                              \
    " ua AS (INSERT INTO usage_records (job_id, tenant_id, kernel, labels, finished_at, usage)"  \
    "        SELECT j.id, j.tenant_id, j.kernel, j.labels, j.finished_at, j.usage FROM jobs j, x"  \
    "        WHERE j.id = x.id AND j.usage IS NOT NULL ON CONFLICT DO NOTHING),"                  \
    " rb AS (DELETE FROM job_blob_refs r USING x WHERE r.job_id = x.id),"                        \
    /* no foreign key cascades to these (026_light_job_writes.sql) */                           \
    " de AS (DELETE FROM job_events e USING x WHERE e.job_id = x.id),"                           \
    " di AS (DELETE FROM job_inputs i USING x WHERE i.job_id = x.id),"                           \
    " dr AS (DELETE FROM job_results r USING x WHERE r.job_id = x.id),"                          \
    " dj AS (DELETE FROM jobs j USING x WHERE j.id = x.id RETURNING j.id, j.tenant_id),"         \
    " tc AS (INSERT INTO jobs_deleted AS t (tenant_id, jobs)"                                    \
    "        SELECT tenant_id, count(*) FROM dj GROUP BY tenant_id ORDER BY tenant_id"           \
    "        ON CONFLICT (tenant_id) DO UPDATE SET jobs = t.jobs + EXCLUDED.jobs)"
#define ENDED_STATES "('succeeded', 'failed', 'cancelled')"

/* gw_gpu_mem_mb (store.h) of a jobs row's gpu_memory_gb */
#define GPU_MEM_MB_SQL "coalesce(ceil(gpu_memory_gb::float8 * 1024), 0)::int"

/* The sums of a group of GET /v1/usage, in the order the answer shows them. */
#define USAGE_SUMS "'jobs', jobs, 'queue_s', queue_s, 'run_s', run_s, 'gpu_s', gpu_s," \
    " 'cpu_s', cpu_s, 'bytes_in', bytes_in, 'bytes_out', bytes_out, 'cost', cost"

/* store__conn.prepared has one bit per statement. */
_Static_assert(ST__COUNT <= 128, "more statements than bits in store__conn.prepared");

/* custom: planned for each execution's parameter values (plan_cache_mode
 * auto), for the statements whose best plan depends on them (which filters
 * of a listing are set). Every other statement runs its generic plan,
 * made once per connection: PostgreSQL would otherwise plan the statements
 * over arrays afresh at every execution (their custom plans know the
 * arrays' lengths, so look cheaper), inlining the SQL functions each time —
 * a third of its CPU per job, more than executing them. */
static const struct { const char *sql; int nparams; int custom; } stmts[ST__COUNT] = {
[ST_KEY_CREATE] = {
    "WITH t AS (INSERT INTO tenants (name) VALUES ($1)"
    "           ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id)"
    " INSERT INTO api_keys (tenant_id, key_hash, key_prefix, admin)"
    " SELECT id, sha256(convert_to($2, 'UTF8')), left($2, 11), $3::boolean FROM t", 3},
[ST_KEY_REVOKE] = {"UPDATE api_keys SET revoked_at = now()"
                   " WHERE key_hash = sha256(convert_to($1, 'UTF8')) AND revoked_at IS NULL", 1},
[ST_JOBS_INSERT] = {
    /* A batch of submits in one statement: row k of every array is job k;
     * $12 is the inline input bytes of all of them back to back, job k's
     * at $13[k] for $14[k] bytes; ($15, $16, $17) lists (job, blob, size)
     * for inputs in the blob store, recorded or touched and referenced by
     * the job so that retention keeps them; $18[k] is job k's
     * Idempotency-Key (NULL: none) and $19[k] its request's fingerprint
     * (hex); $20[k] and $21[k] its webhook and the events it gets
     * (comma-separated), NULL for a job without one; $22[k] and $23[k]
     * its resources.nodes and gpu_memory_gb (NULL: not given); $24[k] and
     * $25[k] a task's object as shown and as leased (NULL: a kernel job).
     * The ids come from the gateway, so the reply maps rows back by
     * ordinality; seq follows that order. A row whose key already names a
     * job inserts nothing: the reply gives that job's id and whether the
     * fingerprints match (seq NULL). */
    "WITH r AS (SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[],"
    "             $5::int[], $6::int[], $7::int[], $8::text[], $9::int[], $10::text[],"
    "             $11::text[], $13::int[], $14::int[], $18::text[], $19::text[], $20::text[],"
    "             $21::text[], $22::int[], $23::real[], $24::text[], $25::text[])"
    "           WITH ORDINALITY AS r(id, tenant_id, kernel, params, priority, timeout_s,"
    "             max_attempts, backend_req, gpus, labels, meta, off, len, ikey, ihash, webhook,"
    "             wh_events, nodes, gpu_memory_gb, task, task_run, n)),"
    /* The first row of a (tenant, key) claims it; a key older than the
     * TTL is taken over. DO UPDATE rather than DO NOTHING: a key that a
     * concurrent batch committed after this statement's snapshot is waited
     * for and still returned with its job. Sorted, so that two batches
     * lock keys in one order. */
    " k AS (INSERT INTO job_idempotency AS x (tenant_id, key, body_hash, job_id)"
    "       SELECT DISTINCT ON (tenant_id, ikey) tenant_id, ikey, decode(ihash, 'hex'), id FROM r"
    "       WHERE ikey IS NOT NULL ORDER BY tenant_id, ikey, n"
    "       ON CONFLICT (tenant_id, key) DO UPDATE SET"
    "         job_id = CASE WHEN " IDEM_EXPIRED " THEN EXCLUDED.job_id ELSE x.job_id END,"
    "         body_hash = CASE WHEN " IDEM_EXPIRED " THEN EXCLUDED.body_hash ELSE x.body_hash END,"
    "         created_at = CASE WHEN " IDEM_EXPIRED " THEN now() ELSE x.created_at END"
    "       RETURNING tenant_id, key, job_id, body_hash),"
    " rk AS (SELECT r.*, coalesce(k.job_id, r.id) AS job_id,"
    "               k.body_hash IS NULL OR k.body_hash = decode(r.ihash, 'hex') AS same"
    "        FROM r LEFT JOIN k ON k.tenant_id = r.tenant_id AND k.key = r.ikey),"
    " f AS (SELECT * FROM rk WHERE job_id = id),"
    " j AS (INSERT INTO jobs (id, tenant_id, kernel, params, priority, timeout_s, max_attempts,"
    "                         backend_req, gpus, labels, state, webhook, webhook_events, nodes,"
    "                         gpu_memory_gb, kind, task, task_run)"
    "       SELECT id, tenant_id, kernel, params::json, priority, timeout_s, max_attempts,"
    "              backend_req, gpus, labels::jsonb, 'queued',"
    "              webhook, string_to_array(wh_events, ','), nodes, gpu_memory_gb,"
    "              CASE WHEN task IS NULL THEN 'kernel' ELSE 'task' END, task::json,"
    "              task_run::jsonb FROM f ORDER BY n"
    "       RETURNING id, seq, created_at),"
    " i AS (INSERT INTO job_inputs (job_id, meta, data)"
    "       SELECT id, meta::jsonb, substring($12::bytea FROM off + 1 FOR len) FROM f),"
    " rb AS (SELECT * FROM unnest($15::uuid[], $16::text[], $17::bigint[]) AS rb(job_id, blob_id, size)"
    "        WHERE job_id IN (SELECT id FROM f)),"
    /* sorted, so that two batches touching the same blobs lock them in one order */
    " bl AS (INSERT INTO blobs (id, size) SELECT DISTINCT ON (blob_id) blob_id, size FROM rb"
    "        ORDER BY blob_id ON CONFLICT (id) DO UPDATE SET last_used_at = now()),"
    " br AS (INSERT INTO job_blob_refs (job_id, blob_id, tenant_id)"
    "        SELECT DISTINCT rb.job_id, rb.blob_id, f.tenant_id FROM rb JOIN f ON f.id = rb.job_id),"
    " e AS (INSERT INTO job_events (job_id, state, attempt) SELECT id, 'queued', 0 FROM f ORDER BY n)"
    " SELECT rk.n, j.seq, floor(extract(epoch FROM j.created_at) * 1000)::bigint, rk.job_id::text,"
    "        rk.same::int"
    " FROM rk LEFT JOIN j ON j.id = rk.id", 25},
[ST_JOB_GET] = {"SELECT kowloon_job_json(j)::text FROM jobs j"
                " WHERE j.id = $1::uuid AND j.tenant_id = $2", 2},
/* the job object's members in kowloon_job_json's order: a job of NULLs
 * has them all */
[ST_JOB_FIELDS] = {"SELECT json_agg(k ORDER BY n)::text"
                   " FROM json_object_keys(kowloon_job_json(NULL::jobs)) WITH ORDINALITY AS x(k, n)", 0},
[ST_JOB_LIST] = {
    "SELECT kowloon_job_json(j)::text, j.seq FROM jobs j WHERE j.tenant_id = $1"
    " AND ($2::text IS NULL OR j.state = $2) AND ($3::text IS NULL OR j.kernel = $3)"
    " AND ($4::jsonb IS NULL OR j.labels @> $4::jsonb) AND ($5::bigint IS NULL OR j.seq < $5)"
    " ORDER BY j.seq DESC LIMIT $6", 6, 1},
[ST_JOB_RESULT] = {"SELECT j.state, r.meta::text, r.data, j.info::text FROM jobs j"
                   " LEFT JOIN job_results r ON r.job_id = j.id"
                   " WHERE j.id = $1::uuid AND j.tenant_id = $2", 2},
[ST_JOB_CANCEL] = {
    "WITH old AS (SELECT id, state, attempts, node_id FROM jobs"
    "             WHERE id = $1::uuid AND tenant_id = $2 FOR UPDATE),"
    " upd AS (UPDATE jobs j SET cancel_requested = true,"
    "           state = CASE WHEN old.state = 'queued' THEN 'cancelled' ELSE j.state END,"
    "           finished_at = CASE WHEN old.state = 'queued' THEN clock_timestamp() END"
    "         FROM old WHERE j.id = old.id AND old.state IN ('queued', 'running') RETURNING j.*),"
    " ev AS (INSERT INTO job_events (job_id, state, attempt, detail)"
    "        SELECT id, 'cancelled', attempts, 'cancelled while queued' FROM upd"
    "        WHERE state = 'cancelled')"
    " SELECT old.state, CASE WHEN upd.id IS NOT NULL THEN kowloon_job_json(upd::jobs)::text END,"
    "        old.node_id::text"
    " FROM old LEFT JOIN upd ON true", 2},
[ST_JOB_SUCCEED] = {
    "WITH " ASYNC_COMMIT ","
    " j AS (UPDATE jobs SET state = 'succeeded', finished_at = clock_timestamp(), backend = $3,"
    "             info = $6::jsonb, " USAGE_SUCCEED
    /* only from the node the run is on ($9; node_rank 0's of a
     * multi-node job), for the kernel the job runs ($10, whose catalog
     * spec the outputs were checked against) */
    "           FROM cfg WHERE id = $1::uuid AND attempts = $2 AND " RUNNING_BY_ID
    "             AND node_id = $9::uuid AND kernel = $10"
    "           RETURNING id, attempts, node_name, tenant_id),"
    " r AS (INSERT INTO job_results (job_id, attempt, meta, data)"
    "       SELECT id, attempts, $4::jsonb, $5::bytea FROM j),"
    /* the outputs' blobs (pushed or adopted by the node, owned by nobody so
     * far) now belong to the job: they count toward its tenant's quota and
     * live as long as the job (021_quota_retention.sql); the tenant makes
     * one its own blob with ?encoding=blob. An output naming a blob that
     * is not recorded with the size its shape needs, or that the node did
     * not store for this attempt (run_outputs: a blob it never had, another
     * tenant's say), gets a NULL reference,
     * which the NOT NULL of job_blob_refs refuses: the statement fails, the
     * job fails bad_result, nothing commits. */
    " ob AS (SELECT DISTINCT m->>'blob' AS id, (m->>'nbytes')::bigint AS nbytes"
    "        FROM jsonb_array_elements($4::jsonb) m, j WHERE m ? 'blob'),"
    " ot AS (UPDATE blobs SET last_used_at = now() WHERE id IN (SELECT id FROM ob)),"
    " oj AS (INSERT INTO job_blob_refs (job_id, blob_id, tenant_id)"
    "        SELECT j.id, CASE WHEN b.size = ob.nbytes AND EXISTS (SELECT 1 FROM run_outputs o"
    "                            WHERE o.job_id = j.id AND o.attempt = j.attempts AND o.blob_id = ob.id)"
    "                          THEN ob.id END, j.tenant_id"
    "        FROM j, ob LEFT JOIN blobs b ON b.id = ob.id"
    "        ON CONFLICT DO NOTHING),"
    " ro AS (DELETE FROM run_outputs WHERE job_id IN (SELECT id FROM j)),"
    " e AS (INSERT INTO job_events (job_id, state, attempt, node_name)"
    "       SELECT id, 'succeeded', attempts, node_name FROM j)"
    " SELECT id FROM j", 10},
/* ST_JOB_SUCCEED for many results whose outputs are all inline (small):
 * no blob to hand over, so none of the blob CTEs, and one statement for
 * the reports of many nodes (each row's node in $13). The bytes of every
 * result are one parameter ($6), each row's its slice (off, len); the
 * price table is $10. Returns the rows recorded by their place in the
 * arrays (from 1): of a row given twice, the one the update used. */
[ST_JOBS_SUCCEED_INLINE] = {
    "WITH " ASYNC_COMMIT ","
    /* MATERIALIZED: read once per job in the nested loop below (as the claim's x) */
    " x AS MATERIALIZED (SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[],"
    "         $7::int[], $8::int[], $9::text[], $11::text[], $12::text[], $13::uuid[], $14::text[])"
    "       WITH ORDINALITY AS x(id, attempt, backend, info, meta, off, len, usage, u1, u2, node, kernel, k)),"
    " j AS (UPDATE jobs SET state = 'succeeded', finished_at = clock_timestamp(), backend = x.backend,"
    "             info = x.info::jsonb,"
    /* the gateway wrote the usage around queue_s and bytes_in (u1, u2:
     * gw_usage_fragments), else kowloon_usage works it out */
    "             usage = CASE WHEN x.u1 IS NULL"
    "               THEN kowloon_usage(jobs, clock_timestamp(), x.usage::jsonb, x.backend,"
    "                                  x.meta::jsonb, $10::jsonb)"
    "               ELSE ('{\"queue_s\":' || round(greatest(extract(epoch FROM"
    "                       jobs.started_at - jobs.created_at), 0)::numeric, 3)::text"
    "                     || ',' || x.u1 || ',\"bytes_in\":' || (SELECT coalesce(sum((e->>'nbytes')::bigint), 0)"
    "                       FROM job_inputs i, jsonb_array_elements(i.meta) e WHERE i.job_id = jobs.id)::text"
    "                     || ',' || x.u2 || '}')::json END"
    "           FROM x, cfg WHERE jobs.id = ANY ($1::uuid[]) AND jobs.id = x.id"
    "             AND jobs.attempts = x.attempt AND " RUNNING_BY_ID
    /* from the node the run is on, of the kernel its outputs were checked for */
    "             AND jobs.node_id = x.node AND jobs.kernel = x.kernel"
    "           RETURNING jobs.id, jobs.attempts, jobs.node_name, x.meta, x.off, x.len, x.k),"
    " r AS (INSERT INTO job_results (job_id, attempt, meta, data)"
    "       SELECT id, attempts, meta::jsonb, substring($6::bytea FROM off + 1 FOR len) FROM j),"
    " e AS (INSERT INTO job_events (job_id, state, attempt, node_name)"
    "       SELECT id, 'succeeded', attempts, node_name FROM j)"
    " SELECT k FROM j", 14},
[ST_JOB_FAIL] = {
    "WITH " ASYNC_COMMIT ","
    " j AS (UPDATE jobs SET state = $3, finished_at = clock_timestamp(),"
    "             error_code = $4, error_message = $5,"
    "             usage = kowloon_usage(jobs, clock_timestamp(), $6::jsonb, $7, NULL, $8::jsonb)"
    "           FROM cfg WHERE id = $1::uuid AND attempts = $2 AND " RUNNING_BY_ID
    /* a node's report ($9) counts only for a run it holds; NULL: the gateway's own decision */
    "             AND ($9::uuid IS NULL OR " HELD_BY("jobs", "$9") ")"
    "           RETURNING id, attempts, node_id, node_name, gpu_ids, leased_at, nodes, state),"
    " e AS (INSERT INTO job_events (job_id, state, attempt, node_name, detail)"
    "       SELECT id, state, attempts, node_name, coalesce($4, 'cancel requested') FROM j),"
    /* failed by the gateway (no result within timeout + grace): the node
     * may still run it */
    LEFT_RUN_PART("$9", "SELECT id, attempts AS attempt, node_id, node_name, gpu_ids, leased_at, nodes FROM j")
    " SELECT id FROM j", 9},
[ST_JOB_REQUEUE] = {
    /* A counted retry waits min(base * 2^(attempts-1), max) scaled by a
     * random factor in [0.5, 1) ("equal jitter"); an attempt given back
     * (the run never started) is placed again at once, as is one the
     * scheduler preempted (027_preempt.sql), which does not count. */
    "WITH cur AS (SELECT id, node_id AS was_node, node_name AS was_name, gpu_ids AS was_gpus,"
    "                    leased_at AS was_leased, nodes AS was_nodes, preempt AS was_preempt,"
    "                    CASE WHEN cancel_requested THEN 'cancelled'"
    "                             WHEN preempt OR attempts - preemptions - $3::int < max_attempts"
    "                             THEN 'queued'"
    "                             ELSE 'failed' END AS next,"
    "                    CASE WHEN $3::int = 1 OR preempt THEN NULL"
    "                         ELSE clock_timestamp() + make_interval(secs => least($6::float8 * 2 ^ (attempts - 1),"
    "                              $7::float8) * (0.5 + random() / 2) / 1000) END AS not_before"
    "             FROM jobs WHERE id = $1::uuid AND attempts = $2 AND " RUNNING_BY_ID
    /* a node's report ($11) counts only for a run it holds; NULL: the gateway's own decision */
    "               AND ($11::uuid IS NULL OR " HELD_BY("jobs", "$11") ")"
    "             FOR UPDATE),"
    " j AS (UPDATE jobs SET state = cur.next, attempts = attempts - $3::int, preempt = false,"
    "         preemptions = preemptions + (cur.was_preempt AND cur.next = 'queued')::int,"
    "         not_before = CASE WHEN cur.next = 'queued' THEN cur.not_before END,"
    "         node_id = CASE WHEN cur.next = 'queued' THEN NULL ELSE node_id END,"
    "         node_name = CASE WHEN cur.next = 'queued' THEN NULL ELSE node_name END,"
    "         started_at = CASE WHEN cur.next = 'queued' THEN NULL ELSE started_at END,"
    "         error_code = CASE WHEN cur.next = 'failed' THEN $4 END,"
    "         error_message = CASE WHEN cur.next = 'failed' THEN $5 END,"
    "         finished_at = CASE WHEN cur.next <> 'queued' THEN clock_timestamp() END,"
    "         usage = CASE WHEN cur.next <> 'queued' THEN"
    "           kowloon_usage(jobs, clock_timestamp(), $8::jsonb, $9, NULL, $10::jsonb) END"
    "       FROM cur WHERE jobs.id = cur.id"
    "       RETURNING jobs.id, jobs.state, jobs.attempts, jobs.seq, jobs.priority,"
    "                 jobs.backend_req, jobs.gpus, jobs.node_name, jobs.not_before, jobs.tenant_id,"
    "                 jobs.nodes, jobs.gpu_memory_gb, jobs.timeout_s, jobs.task->>'image' AS image),"
    " e AS (INSERT INTO job_events (job_id, state, attempt, node_name, detail)"
    "       SELECT j.id, j.state, j.attempts, j.node_name,"
    "              CASE WHEN cur.was_preempt AND j.state = 'queued'"
    "                   THEN 'preempted: the scheduler stopped the run for a larger job of its"
    " tenant (not counted against max_attempts)'"
    "                   ELSE $4 || ': ' || $5 END FROM j JOIN cur ON cur.id = j.id),"
    LEFT_RUN_PART("$11", "SELECT id, $2::int AS attempt, was_node AS node_id, was_name AS node_name,"
                         " was_gpus AS gpu_ids, was_leased AS leased_at, was_nodes AS nodes FROM cur")
    " SELECT state, seq, priority, backend_req, gpus,"
    "        coalesce((extract(epoch FROM not_before) * 1000)::bigint, 0), tenant_id,"
    "        nodes, " GPU_MEM_MB_SQL ", timeout_s, image FROM j", 11},
[ST_JOBS_QUEUED] = {"SELECT id::text, seq, priority, backend_req, gpus,"
                    "       coalesce((extract(epoch FROM not_before) * 1000)::bigint, 0), tenant_id,"
                    "       nodes, " GPU_MEM_MB_SQL ", timeout_s, task->>'image'"
                    " FROM jobs WHERE state = 'queued' AND seq > $1 ORDER BY seq LIMIT $2", 2},
/* $8: the SHA-256 (hex) of the credential the node presents (NULL: none),
 * $9 of a new one. A name whose holder lives (up, heartbeats within $10 s)
 * is taken only by that holder, which keeps its credential; any other
 * registration of it changes nothing and returns no row (409). A name free
 * (new, down, silent, deregistered) gets the new credential. */
[ST_NODE_REGISTER] = {
    "INSERT INTO nodes AS n (name, url, backend, backend_reason, gpus, slots, kernels,"
    "                        credential_hash, tasks)"
    " VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7::jsonb, decode($9, 'hex'), $11::jsonb)"
    " ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url, backend = EXCLUDED.backend,"
    "   tasks = EXCLUDED.tasks,"
    "   backend_reason = EXCLUDED.backend_reason, gpus = EXCLUDED.gpus, slots = EXCLUDED.slots,"
    "   kernels = EXCLUDED.kernels, state = 'up', running = 0, registered_at = now(),"
    "   last_heartbeat = now(),"
    "   credential_hash = CASE WHEN n.credential_hash = decode($8, 'hex') THEN n.credential_hash"
    "                          ELSE EXCLUDED.credential_hash END"
    " WHERE n.credential_hash IS NULL OR n.credential_hash = decode($8, 'hex') OR n.state = 'down'"
    "    OR n.last_heartbeat < now() - make_interval(secs => $10::int)"
    " RETURNING id::text, (credential_hash = decode($9, 'hex'))::int", 11},
/* many nodes' heartbeats in one statement: $1 is [{id, running, state?, tasks?}] */
[ST_NODE_HEARTBEAT] = {"UPDATE nodes n SET last_heartbeat = now(), running = (b->>'running')::int,"
                       " state = 'up', gpu_state = coalesce(b->'state', n.gpu_state),"
                       " tasks = coalesce(b->'tasks', n.tasks)"
                       " FROM jsonb_array_elements($1::jsonb) b"
                       " WHERE n.id = (b->>'id')::uuid RETURNING n.id::text", 1},
/* a node that left frees its name at once: its credential stops working */
[ST_NODE_REMOVE] = {"UPDATE nodes SET state = 'down', running = 0, credential_hash = NULL"
                    " WHERE id = $1::uuid RETURNING id", 1},
[ST_NODES_JSON] = {
    "SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'name', name, 'url', url,"
    "  'backend', backend, 'backend_reason', backend_reason, 'gpus', gpus, 'slots', slots,"
    "  'running', running, 'kernels', kernels, 'state', state, 'draining', draining,"
    "  'gpu_state', gpu_state, 'tasks', tasks,"
    "  'registered_at', kowloon_ts(registered_at), 'last_heartbeat', kowloon_ts(last_heartbeat))"
    "  ORDER BY name), '[]')::text FROM nodes", 0},
/* What a tenant sees of the cluster (GET /v1/nodes): per GPU model, the
 * GPUs of the nodes up and not draining and how many no run holds; per
 * CPU-only backend, the slots and how many are free. A run holds the
 * devices the scheduler gave it (gpu_ids), or, where the node chose them,
 * its count of GPUs, taken from the node's lowest free indices. No node
 * is named and no device's live load shown: those are other tenants'
 * activity. */
[ST_CAPACITY] = {
    "WITH n AS (SELECT id, backend, gpus, slots, running FROM nodes"
    "           WHERE state = 'up' AND NOT draining),"
    " runs AS (SELECT node_id, gpu_ids, gpus AS k FROM jobs"
    "          WHERE state = 'running' AND node_id IS NOT NULL AND nodes = 1"
    "          UNION ALL"
    /* the parts of the running attempts, and (as ST_RUNS_PLACED) the
     * leased parts of ended attempts their nodes still hold */
    "          SELECT r.node_id, r.gpu_ids, cardinality(r.gpu_ids) FROM job_ranks r"
    "          JOIN jobs j ON j.id = r.job_id"
    "          WHERE r.ended_at IS NULL AND ((j.attempts = r.attempt AND j.state = 'running')"
    "                OR (r.leased_at IS NOT NULL AND " ENDED_PART("r", "j") "))),"
    " dev AS (SELECT n.id, d.ord::int - 1 AS idx, coalesce(d.v->>'name', 'GPU') AS model,"
    "                (d.v->>'memory_bytes')::bigint AS mem"
    "         FROM n CROSS JOIN LATERAL jsonb_array_elements(n.gpus) WITH ORDINALITY d(v, ord)"
    "         WHERE n.backend = 'cuda'),"
    " pinned AS (SELECT DISTINCT node_id, unnest(gpu_ids) AS idx FROM runs WHERE gpu_ids IS NOT NULL),"
    " unpinned AS (SELECT node_id, sum(k) AS k FROM runs WHERE gpu_ids IS NULL GROUP BY node_id),"
    " unheld AS (SELECT d.id, d.model, row_number() OVER (PARTITION BY d.id ORDER BY d.idx) AS rn"
    "            FROM dev d WHERE NOT EXISTS (SELECT 1 FROM pinned p"
    "                                         WHERE p.node_id = d.id AND p.idx = d.idx)),"
    " free AS (SELECT f.model FROM unheld f LEFT JOIN unpinned u ON u.node_id = f.id"
    "          WHERE f.rn > coalesce(u.k, 0)),"
    " c AS (SELECT 'cuda' AS backend, d.model AS gpu_model, max(d.mem) AS gpu_memory_bytes,"
    "              count(DISTINCT d.id) AS nodes, count(*) AS gpus,"
    "              (SELECT count(*) FROM free f WHERE f.model = d.model) AS free_gpus,"
    "              NULL::bigint AS slots, NULL::bigint AS free_slots"
    "       FROM dev d GROUP BY d.model"
    "       UNION ALL"
    "       SELECT backend, NULL, NULL, count(*), NULL, NULL, sum(slots),"
    "              sum(greatest(slots - running, 0))"
    "       FROM n WHERE backend = 'cpu' GROUP BY backend)"
    " SELECT coalesce(json_agg(json_strip_nulls(row_to_json(c)) ORDER BY c.backend, c.gpu_model),"
    "                 '[]')::text FROM c", 0},
[ST_NODES_LOAD] = {
    "SELECT id::text, name, url, backend, slots, jsonb_array_length(gpus), (state = 'up')::int,"
    "       (draining OR coalesce(gpu_state ? 'fault', false))::int, gpus::text,"
    "       coalesce(gpu_state, 'null')::text, coalesce(tasks, 'null')::text FROM nodes"
    /* Only nodes that are up matter to placement and to trackers (a node
     * missing from the table counts as down); the freshest first. */
    " WHERE state = 'up' ORDER BY last_heartbeat DESC", 0},
[ST_NODES_EXPIRE] = {"UPDATE nodes SET state = 'down', running = 0 WHERE state = 'up'"
                     " AND last_heartbeat < now() - make_interval(secs => $1::int) RETURNING name", 1},
/* Running jobs with a part on a node that is down: node_rank 0 (or the
 * whole job) there, or, for a multi-node job, any of its current parts.
 * Read from the nodes that are down (materialized, so that the planner
 * cannot start from the running jobs instead: with the jobs table's
 * statistics behind a busy queue it did, and probed a node for every
 * running job, 0.5 s a reap at 1,000 nodes, a fifth of PostgreSQL's time). */
[ST_JOBS_ON_DOWN] = {
    "WITH d AS MATERIALIZED (SELECT id, name FROM nodes WHERE state = 'down')"
    " SELECT j.id::text, j.attempts, d.name"
    " FROM d JOIN jobs j ON j.node_id = d.id AND j.state = 'running'"
    " UNION"
    " SELECT j.id::text, j.attempts, d.name"
    " FROM d JOIN job_ranks r ON r.node_id = d.id AND r.ended_at IS NULL"
    " JOIN jobs j ON j.id = r.job_id AND j.attempts = r.attempt"
    " WHERE (j.state || '') = 'running'"
    " LIMIT 256", 0},
[ST_BACKENDS_UP] = {"SELECT coalesce(jsonb_agg(DISTINCT backend), '[]')::text FROM nodes"
                    " WHERE state = 'up'", 0},
[ST_PING] = {"SELECT 1", 0},
[ST_AUTH_KEY] = {
    "SELECT k.tenant_id, k.admin, k.id, coalesce(t.rate_rps, -1), coalesce(t.rate_burst, -1),"
    "       coalesce(t.max_queued, -1), coalesce(d.jobs, 0)"
    " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id"
    " LEFT JOIN jobs_deleted d ON d.tenant_id = k.tenant_id"
    " WHERE k.key_hash = sha256(convert_to($1, 'UTF8')) AND k.revoked_at IS NULL", 1},
/* Quota counts stop at the limit, so a long queue costs no more than the
 * quota's worth of index entries (jobs_tenant_active). */
[ST_TENANT_QUEUED] = {
    "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE tenant_id = $1 AND state = 'queued'"
    " LIMIT $2::int) x", 2},
[ST_TENANT_RUNNING_OK] = {
    "SELECT q.lim = 0 OR (SELECT count(*) FROM (SELECT 1 FROM jobs r"
    "         WHERE r.tenant_id = q.tenant_id AND r.state = 'running' LIMIT q.lim) x) < q.lim"
    " FROM (SELECT j.tenant_id, coalesce(t.max_running, $2::int) AS lim"
    "       FROM jobs j JOIN tenants t ON t.id = j.tenant_id WHERE j.id = $1::uuid) q", 2},
[ST_TENANT_UPSERT] = {
    /* $11: task_images given ($12: a JSON list, NULL: back to the
     * gateway's --task-images); $13: task_egress (NULL: unchanged) */
    "INSERT INTO tenants AS t (name, rate_rps, rate_burst, max_queued, max_running, weight,"
    "                          task_images, task_egress)"
    " VALUES ($1, $2::int, $4::int, $6::int, $8::int, coalesce($10::real, 1),"
    "         CASE WHEN $12::json IS NULL THEN NULL"
    "              ELSE ARRAY(SELECT json_array_elements_text($12::json)) END,"
    "         coalesce($13::boolean, false))"
    " ON CONFLICT (name) DO UPDATE SET"
    "   rate_rps = CASE WHEN $3::boolean THEN EXCLUDED.rate_rps ELSE t.rate_rps END,"
    "   rate_burst = CASE WHEN $5::boolean THEN EXCLUDED.rate_burst ELSE t.rate_burst END,"
    "   max_queued = CASE WHEN $7::boolean THEN EXCLUDED.max_queued ELSE t.max_queued END,"
    "   max_running = CASE WHEN $9::boolean THEN EXCLUDED.max_running ELSE t.max_running END,"
    "   weight = CASE WHEN $10::real IS NOT NULL THEN EXCLUDED.weight ELSE t.weight END,"
    "   task_images = CASE WHEN $11::boolean THEN EXCLUDED.task_images ELSE t.task_images END,"
    "   task_egress = CASE WHEN $13::boolean IS NOT NULL THEN EXCLUDED.task_egress"
    "                      ELSE t.task_egress END"
    " RETURNING (t.xmax = 0)::int, kowloon_tenant_json(t)::text", 13},
[ST_TENANTS_JSON] = {"SELECT coalesce(jsonb_agg(kowloon_tenant_json(t) ORDER BY t.name), '[]')::text"
                     " FROM tenants t", 0},
[ST_KEY_ISSUE] = {
    "INSERT INTO api_keys (tenant_id, key_hash, key_prefix, admin)"
    " SELECT id, sha256(convert_to($2, 'UTF8')), left($2, 11), $3::boolean FROM tenants"
    " WHERE name = $1 RETURNING key_prefix, kowloon_ts(created_at), id", 3},
/* Revokes only when the prefix names exactly one active key. */
[ST_KEY_REVOKE_PREFIX] = {
    "WITH m AS (SELECT id FROM api_keys WHERE key_prefix = $1 AND revoked_at IS NULL FOR UPDATE),"
    " u AS (UPDATE api_keys SET revoked_at = now() WHERE id IN (SELECT id FROM m)"
    "       AND (SELECT count(*) FROM m) = 1 RETURNING id)"
    " SELECT (SELECT count(*) FROM m), (SELECT count(*) FROM u), (SELECT min(id) FROM u)", 1},
[ST_KEY_REVOKE_ID] = {"UPDATE api_keys SET revoked_at = now() WHERE id = $1::bigint"
                     " AND revoked_at IS NULL RETURNING key_prefix", 1},
/* Keys as the admin API lists them ($1: one tenant's; NULL: all). */
[ST_KEYS_LIST] = {
    "SELECT coalesce(json_agg(json_build_object('id', k.id, 'prefix', k.key_prefix,"
    "  'tenant', t.name, 'admin', k.admin, 'created_at', kowloon_ts(k.created_at),"
    "  'revoked_at', kowloon_ts(k.revoked_at)) ORDER BY k.id), '[]')::text"
    " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE $1::text IS NULL OR t.name = $1", 1},
/* Which of the keys $1 (ids) are still active: what held streams and
 * waits re-check (events.c, waits.c). */
[ST_KEYS_ACTIVE] = {"SELECT id FROM api_keys WHERE id = ANY ($1::bigint[]) AND revoked_at IS NULL", 1},
[ST_NODE_DRAIN] = {
    "UPDATE nodes SET draining = $2::boolean WHERE id = $1::uuid"
    " RETURNING jsonb_build_object('id', id, 'name', name, 'state', state,"
    "                              'draining', draining)::text", 2},
[ST_BLOB_RECORD] = {
    /* The tenant's reference is added only within its byte quota ($4, 0:
     * none): free when it holds the blob already (through a job, say);
     * had says whether it had its own reference. The quota is checked
     * against the committed count, so uploads of one tenant at the same
     * instant may pass it together by what they add. */
    "WITH had AS (SELECT EXISTS (SELECT 1 FROM blob_refs WHERE tenant_id = $1 AND blob_id = $2) AS v),"
    " held AS (SELECT EXISTS (SELECT 1 FROM blob_usage WHERE tenant_id = $1 AND blob_id = $2) AS v),"
    " b AS (INSERT INTO blobs (id, size) VALUES ($2, $3) ON CONFLICT (id)"
    "       DO UPDATE SET last_used_at = now() RETURNING id),"
    " used AS (SELECT " TENANT_BLOB_BYTES("$1") " AS v),"
    " r AS (INSERT INTO blob_refs (tenant_id, blob_id) SELECT $1, b.id FROM b, used, had, held"
    "       WHERE $1 <> 0 AND NOT had.v AND ($4::bigint = 0 OR held.v OR used.v + $3 <= $4::bigint)"
    "       ON CONFLICT DO NOTHING RETURNING blob_id)"
    " SELECT had.v::int, (SELECT count(*) FROM r), used.v FROM had, used", 4},
[ST_TENANT_BLOB_BYTES] = {"SELECT " TENANT_BLOB_BYTES("$1"), 1},
/* Bytes the blobs $3 ([{"i": id, "n": size}]) would add to the tenant's
 * (by id $1, else the tenant of job $2): those of the ones it does not
 * hold yet, each once; and what it holds now. */
[ST_BLOBS_NEED] = {
    "WITH t AS (SELECT coalesce($1::bigint, (SELECT tenant_id FROM jobs WHERE id = $2::uuid)) AS id),"
    " x AS (SELECT DISTINCT ON (i) i, n FROM jsonb_to_recordset($3::jsonb) AS x(i text, n bigint))"
    " SELECT coalesce((SELECT sum(x.n) FROM x WHERE NOT EXISTS (SELECT 1 FROM blob_usage u"
    "                   WHERE u.tenant_id = t.id AND u.blob_id = x.i)), 0),"
    "        " TENANT_BLOB_BYTES("t.id") " FROM t", 3},
[ST_BLOB_GET] = {"UPDATE blobs b SET last_used_at = now() FROM blob_refs r"
                 " WHERE r.tenant_id = $1 AND r.blob_id = $2 AND b.id = r.blob_id RETURNING b.size", 2},
[ST_BLOB_UNREF] = {"DELETE FROM blob_refs WHERE tenant_id = $1 AND blob_id = $2", 2},
[ST_BLOB_SWEEP] = {
    "DELETE FROM blobs WHERE id IN (SELECT b.id FROM blobs b"
    "  WHERE b.last_used_at < now() - make_interval(secs => $1::float8)"
    "    AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.blob_id = b.id)"
    "    AND NOT EXISTS (SELECT 1 FROM job_blob_refs r WHERE r.blob_id = b.id)"
    "  LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id", 2},
/* DELETE /v1/jobs/{id}: job $1 of tenant $2 when it has ended; its state
 * either way (no row: no such job of this tenant), and whether it went. */
[ST_JOB_DELETE] = {
    "WITH j AS (SELECT id, state FROM jobs WHERE id = $1::uuid AND tenant_id = $2 FOR UPDATE),"
    " x AS (SELECT id FROM j WHERE state IN " ENDED_STATES "),"
    JOBS_DELETE
    " SELECT j.state, (SELECT count(*) FROM dj) FROM j", 2},
/* The retention pass: up to $2 jobs that ended more than $1 days ago,
 * oldest first (jobs_ended); jobs another gateway is deleting are
 * skipped. The tenants whose jobs went, for the log. */
[ST_JOBS_EXPIRE] = {
    "WITH x AS (SELECT id FROM jobs WHERE state IN " ENDED_STATES
    "             AND finished_at < now() - make_interval(days => $1::int)"
    "           ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED),"
    JOBS_DELETE
    " SELECT count(*), count(DISTINCT tenant_id) FROM dj", 2},
/* Idempotency-Keys past their TTL, a batch at a time (retention pass). */
[ST_IDEM_SWEEP] = {
    "DELETE FROM job_idempotency x WHERE (tenant_id, key) IN (SELECT tenant_id, key"
    "  FROM job_idempotency x WHERE " IDEM_EXPIRED " ORDER BY created_at LIMIT $1)", 1},
/* A queued job's ETA (eta.c): the mean run time of the kernel's succeeded
 * jobs among the last 2000 submitted (a bounded walk of the seq index
 * backwards, whatever the kernel), and the slots of the nodes that take
 * work. */
[ST_KERNEL_RUN_MS] = {
    "SELECT count(*), coalesce(avg(extract(epoch FROM finished_at - started_at) * 1000), 0)::bigint"
    " FROM (SELECT kernel, state, started_at, finished_at FROM jobs ORDER BY seq DESC LIMIT 2000) r"
    " WHERE kernel = $1 AND state = 'succeeded' AND started_at IS NOT NULL", 1},
[ST_SLOTS_UP] = {"SELECT coalesce(sum(slots), 0) FROM nodes WHERE state = 'up' AND NOT draining", 0},
/* runs on nodes (store_jobs.c): claimed in batches, taken by the node's lease poll */
[ST_JOBS_CLAIM] = {
    /* $3[k]: the devices of job k's (node_rank 0's) run, "{0,1}", NULL
     * where the node chooses. ($4, $5, $6, $7) list every node_rank of the
     * multi-node jobs among them (job, node_rank, node, devices): their
     * job_ranks rows come with the claim, so a gang is claimed whole or
     * not at all. $8[k]: job k's run is handed to its node's poll held by
     * this gateway (lease.c): leased now, and its lease record returned. */
    "WITH " ASYNC_COMMIT ","
    /* MATERIALIZED: the jobs found by = ANY are joined to x in a nested
     * loop, which read x once per job; inlined, each read was the unnest
     * again (a third of the statement at 64 jobs, auto_explain) */
    " x AS MATERIALIZED (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $8::bool[])"
    "                      AS x(id, node, gpus, hand)),"
    " j AS (UPDATE jobs SET state = 'running', attempts = jobs.attempts + 1, node_id = n.id,"
    "         node_name = n.name, started_at = clock_timestamp(), error_code = NULL,"
    "         error_message = NULL, leased_at = CASE WHEN x.hand THEN clock_timestamp() END,"
    "         cancel_sent = false, gpu_ids = x.gpus::int[]"
    "       FROM x JOIN nodes n ON n.id = x.node, cfg"
    /* = ANY: found by the primary key, not by a walk over the queued jobs */
    "       WHERE jobs.id = ANY ($1::uuid[]) AND jobs.id = x.id AND (jobs.state || '') = 'queued'"
    "         AND (jobs.not_before IS NULL OR jobs.not_before <= clock_timestamp())"
    "       RETURNING jobs.id, jobs.attempts, jobs.node_name, jobs.kernel, jobs.params,"
    "         jobs.timeout_s, jobs.gpus, jobs.backend_req, jobs.gpu_ids, jobs.task_run, x.hand,"
    "         extract(epoch FROM jobs.started_at - jobs.created_at) AS waited),"
    " g AS (INSERT INTO job_ranks (job_id, attempt, node_rank, node_id, node_name, gpu_ids)"
    "       SELECT g.id, j.attempts, g.node_rank, n.id, n.name, coalesce(g.gpus::int[], '{}')"
    "       FROM unnest($4::uuid[], $5::int[], $6::uuid[], $7::text[]) AS g(id, node_rank, node, gpus)"
    "       JOIN j ON j.id = g.id JOIN nodes n ON n.id = g.node),"
    " e AS (INSERT INTO job_events (job_id, state, attempt, node_name)"
    "       SELECT id, 'running', attempts, node_name FROM j)"
    /* the queue wait of a first attempt, for /metrics (metrics.h); a
     * handed run's lease record (as ST_LEASE_TAKE's), in binary for the
     * bytes */
    " SELECT j.id::text, j.attempts::text, (CASE WHEN attempts = 1 THEN waited ELSE -1 END)::text,"
    "        j.hand::text, j.kernel, j.params::text, j.timeout_s::text, j.gpus::text,"
    "        j.backend_req, i.meta::text, i.data, j.gpu_ids::text, j.task_run::text"
    " FROM j LEFT JOIN job_inputs i ON j.hand AND i.job_id = j.id", 8},
/* A node's poll: its single-node runs not taken yet ($2 at most) and the
 * cancels of its leased ones; then its parts of multi-node jobs (one
 * probe of job_ranks_node_open, empty for a node that has none): parts of
 * the current attempt not taken yet, cancels for taken parts whose
 * attempt ended or whose job is to be cancelled, and parts never taken of
 * an attempt that ended are closed. Columns: kind, job, attempt,
 * node_rank (NULL: a single-node run), nodes, then the run's lease record
 * (store_jobs.c's run_from_row: kernel, params, timeout_s, gpus, backend,
 * inputs meta and bytes, devices, task). */
[ST_LEASE_TAKE] = {
    "WITH " ASYNC_COMMIT ","
    " t AS (SELECT id FROM jobs WHERE node_id = $1::uuid AND state = 'running'"
    "         AND leased_at IS NULL AND nodes = 1 ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED),"
    " j AS (UPDATE jobs SET leased_at = clock_timestamp() FROM t, cfg WHERE jobs.id = t.id"
    "       RETURNING jobs.*),"
    " c AS (UPDATE jobs SET cancel_sent = true FROM cfg WHERE jobs.node_id = $1::uuid"
    "         AND jobs.state = 'running' AND (jobs.cancel_requested OR jobs.preempt)"
    "         AND NOT jobs.cancel_sent"
    "         AND jobs.leased_at IS NOT NULL RETURNING jobs.id, jobs.attempts),"
    " o AS (SELECT r.job_id, r.attempt, r.node_rank, r.leased_at, r.cancel_sent,"
    "              x.attempts = r.attempt AND (x.state || '') = 'running' AS live,"
    /* the job succeeded with this attempt (node_rank 0's report): the
     * other parts are ending by themselves, their collective done */
    "              x.attempts = r.attempt AND x.state = 'succeeded' AS done,"
    "              x.cancel_requested, x.seq"
    "       FROM job_ranks r JOIN jobs x ON x.id = r.job_id"
    "       WHERE r.node_id = $1::uuid AND r.ended_at IS NULL),"
    " gt AS (SELECT r.job_id, r.attempt, r.node_rank FROM job_ranks r JOIN o"
    "          ON o.job_id = r.job_id AND o.attempt = r.attempt AND o.node_rank = r.node_rank"
    "        WHERE o.live AND o.leased_at IS NULL ORDER BY o.seq, o.node_rank LIMIT $2"
    "        FOR UPDATE OF r SKIP LOCKED),"
    " g AS (UPDATE job_ranks r SET leased_at = clock_timestamp() FROM gt, cfg"
    "       WHERE r.job_id = gt.job_id AND r.attempt = gt.attempt AND r.node_rank = gt.node_rank"
    "       RETURNING r.job_id, r.attempt, r.node_rank, r.gpu_ids),"
    " gc AS (UPDATE job_ranks r SET cancel_sent = true FROM o, cfg"
    "        WHERE r.job_id = o.job_id AND r.attempt = o.attempt AND r.node_rank = o.node_rank"
    "          AND o.leased_at IS NOT NULL AND NOT o.cancel_sent AND NOT o.done"
    "          AND (NOT o.live OR o.cancel_requested)"
    "        RETURNING r.job_id, r.attempt),"
    " gx AS (UPDATE job_ranks r SET ended_at = clock_timestamp(), state = 'cancelled' FROM o, cfg"
    "        WHERE r.job_id = o.job_id AND r.attempt = o.attempt AND r.node_rank = o.node_rank"
    "          AND o.leased_at IS NULL AND NOT o.live)"
    " SELECT 'run', j.id::text, j.attempts::text, NULL, '1', j.kernel, j.params::text,"
    "        j.timeout_s::text, j.gpus::text, j.backend_req, i.meta::text, i.data,"
    "        j.gpu_ids::text, j.task_run::text"
    " FROM j JOIN job_inputs i ON i.job_id = j.id"
    " UNION ALL SELECT 'run', x.id::text, g.attempt::text, g.node_rank::text, x.nodes::text,"
    "        x.kernel, x.params::text, x.timeout_s::text, x.gpus::text, x.backend_req,"
    "        i.meta::text, i.data, g.gpu_ids::text, x.task_run::text"
    " FROM g JOIN jobs x ON x.id = g.job_id JOIN job_inputs i ON i.job_id = g.job_id"
    " UNION ALL SELECT 'cancel', c.id::text, c.attempts::text, NULL, NULL, NULL, NULL, NULL,"
    "        NULL, NULL, NULL, NULL, NULL, NULL FROM c"
    " UNION ALL SELECT 'cancel', gc.job_id::text, gc.attempt::text, NULL, NULL, NULL, NULL, NULL,"
    "        NULL, NULL, NULL, NULL, NULL, NULL FROM gc", 2},
/* Runs handed to a node's poll at their claim ($1, $2: job and attempt)
 * that no poll took: taken back to claimed, not leased, for the next lease
 * look of their node on any gateway (a cancel asked meanwhile is handed
 * out again after the run). */
[ST_RUNS_UNHAND] = {
    "WITH " ASYNC_COMMIT
    " UPDATE jobs SET leased_at = NULL, cancel_sent = false"
    " FROM unnest($1::uuid[], $2::int[]) AS x(id, attempt), cfg"
    " WHERE jobs.id = x.id AND jobs.attempts = x.attempt AND (jobs.state || '') = 'running'"
    "   AND jobs.leased_at IS NOT NULL", 2},
/* Which of the nodes $1 a lease look would give something now (the lease
 * thread's periodic probe, one statement for every poll it holds): a
 * single-node run claimed and not taken, a cancel not handed out, a part
 * of a multi-node job not taken, or a taken part to cancel (its attempt
 * ended, not with success, or its job is to be cancelled). The same
 * conditions as ST_LEASE_TAKE's t, c, gt, gc and gx. */
[ST_NODES_WITH_WORK] = {
    "SELECT DISTINCT w.node_id::text FROM ("
    " SELECT node_id FROM jobs WHERE node_id = ANY ($1::uuid[]) AND state = 'running'"
    "   AND ((nodes = 1 AND leased_at IS NULL)"
    "        OR ((cancel_requested OR preempt) AND NOT cancel_sent AND leased_at IS NOT NULL))"
    " UNION ALL"
    " SELECT r.node_id FROM job_ranks r JOIN jobs x ON x.id = r.job_id"
    " WHERE r.node_id = ANY ($1::uuid[]) AND r.ended_at IS NULL"
    "   AND (r.leased_at IS NULL"
    "        OR (NOT r.cancel_sent AND NOT (x.attempts = r.attempt AND x.state = 'succeeded')"
    "            AND (NOT (x.attempts = r.attempt AND x.state = 'running') OR x.cancel_requested)))"
    ") w", 1},
/* Runs leased a while ago ($2 s) that their node's heartbeat does not
 * list, for every node of a batch of heartbeats at once: $1 is [{id: node,
 * held: ["<job>.<attempt>", ...]}]. The parts of ended attempts leased
 * there as long ago that the node no longer lists are closed on the way:
 * the node holds nothing of them, so their devices are free. */
[ST_RUNS_UNHELD] = {
    "WITH " ASYNC_COMMIT ","
    " b AS (SELECT (e->>'id')::uuid AS node,"
    "                  ARRAY(SELECT jsonb_array_elements_text(e->'held')) AS held"
    "           FROM jsonb_array_elements($1::jsonb) e),"
    " gone AS (UPDATE job_ranks r SET ended_at = clock_timestamp(), state = 'cancelled'"
    "          FROM b, jobs j, cfg"
    "          WHERE r.node_id = b.node AND r.ended_at IS NULL AND j.id = r.job_id"
    "            AND r.leased_at < clock_timestamp() - make_interval(secs => $2::float8)"
    "            AND " ENDED_PART("r", "j")
    "            AND NOT ((r.job_id::text || '.' || r.attempt) = ANY (b.held)))"
    " SELECT j.id::text, j.attempts, j.node_name"
    " FROM b JOIN jobs j ON j.node_id = b.node AND j.state = 'running'"
    " WHERE j.leased_at < clock_timestamp() - make_interval(secs => $2::float8)"
    "   AND NOT ((j.id::text || '.' || j.attempts) = ANY (b.held))", 2},
/* Runs past their timeout_s and the grace $1. The bound on started_at
 * alone (timeout_s is never negative) lets jobs_running_started skip the
 * runs that started within the grace: at 1,000 nodes of short jobs that
 * was every run, read once a second. now(), not clock_timestamp(): an
 * index bound must not be volatile. The statement's start is a moment
 * earlier, less than any timeout_s (at least 1 s), so no run past its
 * timeout falls outside the bound. */
[ST_RUNS_OVERDUE] = {
    "SELECT j.id::text, j.attempts, j.node_name"
    " FROM jobs j WHERE j.state = 'running'"
    "   AND j.started_at < now() - make_interval(secs => $1::float8)"
    "   AND j.started_at + make_interval(secs => j.timeout_s + $1::float8) < clock_timestamp()"
    " ORDER BY j.started_at LIMIT 64", 1},
[ST_JOBS_ENDED] = {
    "SELECT id::text FROM jobs WHERE id = ANY ($1::uuid[])"
    " AND state IN ('succeeded', 'failed', 'cancelled')", 1},
/* Each tenant's running quota and its fair-share weight. Its running
 * jobs are counted in ST_RUNS_PLACED's rows: a count here read every
 * running job's row each second (a twentieth of PostgreSQL's time at
 * 1,000 nodes, the rows seldom all-visible for an index-only count). */
[ST_TENANTS_QUOTAS] = {"SELECT id, coalesce(max_running, $1::int), weight FROM tenants", 1},
/* GET /v1/usage: the tenant ($1 by id, or $2 by name when given), jobs
 * that ended in [$3, $4) (epoch ms), their sums in all and per group
 * ($5: kernel, day (UTC) or label, whose key is $6). One pass: the
 * grouping sets give the totals row (total = 1) with the groups. */
[ST_USAGE] = {
    "WITH t AS (SELECT id, name FROM tenants"
    "           WHERE CASE WHEN $2::text IS NULL THEN id = $1::bigint ELSE name = $2 END),"
    /* the jobs there are, and those deleted since (usage_records) */
    " e AS (SELECT j.kernel, j.labels, j.finished_at, j.usage FROM jobs j JOIN t ON j.tenant_id = t.id"
    "       WHERE j.usage IS NOT NULL AND j.finished_at >= to_timestamp($3::float8 / 1000)"
    "         AND j.finished_at < to_timestamp($4::float8 / 1000)"
    "       UNION ALL"
    "       SELECT d.kernel, d.labels, d.finished_at, d.usage FROM usage_records d JOIN t ON d.tenant_id = t.id"
    "       WHERE d.finished_at >= to_timestamp($3::float8 / 1000)"
    "         AND d.finished_at < to_timestamp($4::float8 / 1000)),"
    " u AS (SELECT CASE $5::text WHEN 'kernel' THEN e.kernel"
    "                WHEN 'day' THEN to_char(e.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
    "                WHEN 'label' THEN e.labels->>$6::text END AS key, e.usage AS u FROM e),"
    " g AS (SELECT GROUPING(key) AS total, key, count(*) AS jobs,"
    "         coalesce(round(sum((u->>'queue_s')::numeric), 3), 0) AS queue_s,"
    "         coalesce(round(sum((u->>'run_s')::numeric), 3), 0) AS run_s,"
    "         coalesce(round(sum((u->>'gpu_s')::numeric), 3), 0) AS gpu_s,"
    "         coalesce(round(sum((u->>'cpu_s')::numeric), 6), 0) AS cpu_s,"
    "         coalesce(sum((u->>'bytes_in')::bigint), 0) AS bytes_in,"
    "         coalesce(sum((u->>'bytes_out')::bigint), 0) AS bytes_out,"
    "         coalesce(round(sum((u->>'cost')::numeric), 9), 0) AS cost"
    "       FROM u GROUP BY GROUPING SETS ((key), ()))"
    " SELECT t.name,"
    "   (SELECT json_build_object(" USAGE_SUMS ") FROM g WHERE total = 1)::text,"
    "   (SELECT coalesce(json_agg(json_build_object('key', key, " USAGE_SUMS ")"
    "                             ORDER BY key NULLS LAST), '[]') FROM g"
    "    WHERE total = 0 AND $5 IS NOT NULL)::text,"
    "   " TENANT_BLOB_BYTES("t.id")
    " FROM t", 6},
/* The first minute of GET /v1/stats/history's window of $3 minutes. Written
 * out where it is used (not a CTE) so that the statement's custom plans
 * (custom = 1) see a value they can estimate from created_at's and
 * finished_at's statistics: a generic plan guesses a third of the
 * tenant's jobs, costs enough for JIT and took 700 ms compiling it. */
#define HIST_T0 "(date_trunc('minute', now()) - ($3::int - 1) * interval '1 minute')"
/* GET /v1/stats/history: the tenant ($1 by id, or $2 by name), $3 one-
 * minute buckets ending with the current one. rel is every job that can
 * have an event in the window, found through three bounded index paths
 * (never a scan of the tenant's whole history):
 *   - active now: jobs_tenant_active (tenant_id, state);
 *   - ran and ended in the window: jobs_usage (tenant_id, finished_at);
 *   - created in the window: those after the last job of any tenant
 *     created before the window (jobs_seq_key walked backwards, LIMIT 1),
 *     read as a seq range on jobs_seq_key or jobs_tenant_seq. Both read
 *     at most the jobs of all tenants created in the window. A bound from
 *     the tenant's own last job before the window would read less for a
 *     busy tenant, but for one idle for a week a week of everyone's jobs
 *     (the planner takes jobs_seq_key for a seq range whose bound it
 *     cannot see). EXPLAIN ANALYZE, 300,000 jobs of 31 tenants, 3,600 in
 *     the last hour: 3 ms, 3,600 rows, for a busy or an idle tenant; with
 *     the tenant's own bound an idle one read all 300,000 (60 ms).
 * A job queued before the window and cancelled in it without running has
 * none of these (no usage, not active): it is missed, and earlier buckets
 * show one queued job fewer. Each job gives up to three events (created,
 * started, finished, from the last attempt: a requeue clears started_at),
 * each a change of the queued and running counts; the counts at a bucket's
 * end are the current ones minus the changes of the later buckets. */
[ST_STATS_HISTORY] = {
    "WITH t AS (SELECT id, name FROM tenants"
    "           WHERE CASE WHEN $2::text IS NULL THEN id = $1::bigint ELSE name = $2 END),"
    " rel AS (SELECT j.id, j.created_at, j.started_at, j.finished_at FROM jobs j, t"
    "         WHERE j.tenant_id = t.id AND j.state IN ('queued', 'running')"
    "         UNION"
    "         SELECT j.id, j.created_at, j.started_at, j.finished_at FROM jobs j, t"
    "         WHERE j.tenant_id = t.id AND j.usage IS NOT NULL AND j.finished_at >= " HIST_T0
    "         UNION"
    "         SELECT j.id, j.created_at, j.started_at, j.finished_at FROM jobs j, t"
    "         WHERE j.tenant_id = t.id"
    "           AND j.seq > coalesce((SELECT p.seq FROM jobs p WHERE p.created_at < " HIST_T0
    "                                 ORDER BY p.seq DESC LIMIT 1), 0)),"
    " ev AS (SELECT date_trunc('minute', e.at) AS m, e.sub, e.st, e.fin, e.dq, e.dr"
    "        FROM (SELECT created_at AS at, 1 AS sub, 0 AS st, 0 AS fin, 1 AS dq, 0 AS dr FROM rel"
    "              UNION ALL SELECT started_at, 0, 1, 0, -1, 1 FROM rel WHERE started_at IS NOT NULL"
    "              UNION ALL SELECT finished_at, 0, 0, 1, CASE WHEN started_at IS NULL THEN -1 ELSE 0 END,"
    "                               CASE WHEN started_at IS NULL THEN 0 ELSE -1 END"
    "                        FROM rel WHERE finished_at IS NOT NULL) e"
    "        WHERE e.at >= " HIST_T0 "),"
    " b AS (SELECT g.m, coalesce(sum(ev.sub), 0) AS sub, coalesce(sum(ev.st), 0) AS st,"
    "         coalesce(sum(ev.fin), 0) AS fin, coalesce(sum(ev.dq), 0) AS dq, coalesce(sum(ev.dr), 0) AS dr"
    "       FROM generate_series(" HIST_T0 ", date_trunc('minute', now()), interval '1 minute') AS g(m)"
    "       LEFT JOIN ev ON ev.m = g.m GROUP BY g.m),"
    " s AS (SELECT m, sub, st, fin,"
    "         coalesce(sum(dq) OVER (ORDER BY m DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS dq_after,"
    "         coalesce(sum(dr) OVER (ORDER BY m DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS dr_after"
    "       FROM b),"
    " n AS (SELECT count(*) FILTER (WHERE j.state = 'queued') AS q,"
    "              count(*) FILTER (WHERE j.state = 'running') AS r"
    "       FROM jobs j, t WHERE j.tenant_id = t.id AND j.state IN ('queued', 'running'))"
    " SELECT t.name, json_build_object('queued', n.q, 'running', n.r)::text,"
    "   (SELECT json_agg(json_build_object("
    "        't', to_char(s.m AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
    "        'submitted', s.sub, 'started', s.st, 'finished', s.fin,"
    "        'queued', greatest(n.q - s.dq_after, 0), 'running', greatest(n.r - s.dr_after, 0))"
    "      ORDER BY s.m)"
    "    FROM s)::text"
    " FROM t, n", 3, 1},
/* webhooks (store_webhooks.c). A claim moves the deliveries' next_at past
 * the attempt ($2 s), so other gateways skip them while this one delivers
 * and take them over if it dies; the lock is held only by the claim. */
[ST_WH_CLAIM] = {
    /* The tenants with pending deliveries, one index probe each (a skip
     * scan of webhook_deliveries_tenant_due, sql/022), however long one
     * tenant's backlog; then each tenant's oldest due ones up to its room
     * under the cap $3 ($4/$5: the tenants this gateway has deliveries in
     * flight for, and how many), ranked by their place in their tenant's
     * turn: the $1 claimed take every tenant's first before anyone's
     * second. */
    "WITH RECURSIVE t AS ("
    "   (SELECT tenant_id FROM webhook_deliveries WHERE state = 'pending'"
    "    ORDER BY tenant_id LIMIT 1)"
    "   UNION ALL"
    "   SELECT (SELECT w.tenant_id FROM webhook_deliveries w WHERE w.state = 'pending'"
    "             AND w.tenant_id > t.tenant_id ORDER BY w.tenant_id LIMIT 1)"
    "   FROM t WHERE t.tenant_id IS NOT NULL),"
    " busy AS (SELECT * FROM unnest($4::bigint[], $5::int[]) AS b(tenant_id, n)),"
    " cand AS (SELECT x.id, x.next_at, x.k + coalesce(b.n, 0) AS k"
    "          FROM t LEFT JOIN busy b ON b.tenant_id = t.tenant_id"
    "          CROSS JOIN LATERAL (SELECT w.id, w.next_at,"
    "                 row_number() OVER (ORDER BY w.next_at, w.id) AS k"
    "               FROM webhook_deliveries w WHERE w.tenant_id = t.tenant_id"
    "                 AND w.state = 'pending' AND w.next_at <= clock_timestamp()"
    "               ORDER BY w.next_at, w.id"
    "               LIMIT greatest($3::int - coalesce(b.n, 0), 0)) x"
    "          WHERE t.tenant_id IS NOT NULL),"
    " c AS (SELECT w.id FROM webhook_deliveries w"
    "       WHERE w.id IN (SELECT id FROM cand ORDER BY k, next_at LIMIT $1)"
    "         AND w.state = 'pending' AND w.next_at <= clock_timestamp()"
    "       FOR UPDATE SKIP LOCKED),"
    " d AS (UPDATE webhook_deliveries w SET next_at = clock_timestamp() + make_interval(secs => $2::float8)"
    "       FROM c WHERE w.id = c.id RETURNING w.id, w.tenant_id, w.attempts, w.url, w.payload)"
    " SELECT d.id, d.tenant_id, d.attempts, d.url, d.payload, s.secret"
    " FROM d LEFT JOIN webhook_secrets s ON s.tenant_id = d.tenant_id", 5},
/* One attempt: its row, and the delivery delivered, retried $5 s later, or
 * failed when that retry would come after its $6 s of life. */
[ST_WH_RECORD] = {
    "WITH d AS (SELECT id, attempts + 1 AS n, created_at FROM webhook_deliveries"
    "           WHERE id = $1 AND state = 'pending' FOR UPDATE),"
    " a AS (INSERT INTO webhook_attempts (delivery_id, n, at, status, error, duration_ms)"
    "       SELECT id, n, clock_timestamp() - make_interval(secs => $4::int / 1000.0), $2::int,"
    "              $3, $4::int FROM d),"
    " s AS (SELECT d.id, d.n, CASE WHEN $7::boolean THEN 'delivered'"
    "         WHEN clock_timestamp() + make_interval(secs => $5::float8)"
    "              > d.created_at + make_interval(secs => $6::float8) THEN 'failed'"
    "         ELSE 'pending' END AS state FROM d),"
    " u AS (UPDATE webhook_deliveries w SET attempts = s.n, state = s.state,"
    "         next_at = clock_timestamp() + make_interval(secs => $5::float8),"
    "         finished_at = CASE WHEN s.state <> 'pending' THEN clock_timestamp() END"
    "       FROM s WHERE w.id = s.id RETURNING w.state)"
    " SELECT state FROM u", 7},
/* The tenant's secret, $2 becoming it when the tenant has none. */
[ST_WH_SECRET_ENSURE] = {
    "WITH i AS (INSERT INTO webhook_secrets (tenant_id, secret) VALUES ($1, $2)"
    "           ON CONFLICT (tenant_id) DO NOTHING RETURNING secret, created_at)"
    " SELECT secret, kowloon_ts(created_at) FROM i"
    " UNION ALL SELECT secret, kowloon_ts(created_at) FROM webhook_secrets"
    " WHERE tenant_id = $1 AND NOT EXISTS (SELECT 1 FROM i)", 2},
[ST_WH_SECRET_ROTATE] = {
    "INSERT INTO webhook_secrets (tenant_id, secret) VALUES ($1, $2)"
    " ON CONFLICT (tenant_id) DO UPDATE SET secret = EXCLUDED.secret, created_at = now()"
    " RETURNING secret, kowloon_ts(created_at)", 2},
/* Claims given back unused (a gateway stopping): due again at once. */
[ST_WH_RELEASE] = {"UPDATE webhook_deliveries SET next_at = clock_timestamp()"
                   " WHERE id = ANY ($1::bigint[]) AND state = 'pending'", 1},
/* Ended deliveries (delivered, or failed for good) older than $1 s go,
 * with their attempts, $2 at most a statement. */
[ST_WH_TRIM] = {
    "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries"
    " WHERE state <> 'pending' AND finished_at < clock_timestamp() - make_interval(secs => $1::float8)"
    " ORDER BY finished_at LIMIT $2)", 2},
[ST_WH_LIST] = {
    "SELECT json_build_object('job_id', j.id, 'webhook', j.webhook,"
    "  'webhook_events', to_json(j.webhook_events),"
    "  'deliveries', coalesce((SELECT json_agg(json_build_object("
    "      'id', 'msg_' || d.id, 'event', d.event, 'event_id', d.event_id, 'state', d.state,"
    "      'created_at', kowloon_ts(d.created_at),"
    "      'next_attempt_at', CASE WHEN d.state = 'pending' THEN kowloon_ts(d.next_at) END,"
    "      'finished_at', kowloon_ts(d.finished_at),"
    "      'attempts', (SELECT coalesce(json_agg(json_build_object('n', a.n, 'at', kowloon_ts(a.at),"
    "                     'status', a.status, 'error', a.error, 'duration_ms', a.duration_ms)"
    "                   ORDER BY a.n), '[]') FROM webhook_attempts a WHERE a.delivery_id = d.id)"
    "    ) ORDER BY d.id) FROM webhook_deliveries d WHERE d.job_id = j.id), '[]'))::text"
    " FROM jobs j WHERE j.id = $1::uuid AND j.tenant_id = $2", 2},
/* --fair-preempt: the runs of jobs $1 on nodes $2 (single-node, running
 * there, neither cancelled nor preempted already) are to stop; the
 * node's next lease poll carries the cancel (ST_LEASE_TAKE) and its
 * report queues the job again (ST_JOB_REQUEUE). The jobs marked. */
[ST_JOBS_PREEMPT] = {
    "WITH " ASYNC_COMMIT
    " UPDATE jobs SET preempt = true FROM unnest($1::uuid[], $2::uuid[]) AS x(id, node), cfg"
    " WHERE jobs.id = x.id AND jobs.node_id = x.node AND (jobs.state || '') = 'running'"
    "   AND jobs.nodes = 1 AND NOT jobs.cancel_requested AND NOT jobs.preempt"
    " RETURNING jobs.id::text", 2},
/* Every run on a node (a single-node job, or one node's part of a gang):
 * its devices, when its timeout_s ends it at the latest (epoch ms), its
 * job and tenant, 1 when its job runs with it (the tenants' running
 * counts: a gang's parts count once, a part of an attempt that ended not
 * at all), its attempt, and for a single-node run when it started (epoch
 * ms) and 1, or 2 while preemption stops it (a part: 0 and 0). */
[ST_RUNS_PLACED] = {
    "SELECT node_id::text, coalesce(gpu_ids, '{}')::text,"
    "       (extract(epoch FROM started_at) * 1000)::bigint + timeout_s * 1000::bigint, id::text,"
    "       tenant_id, 1, attempts, (extract(epoch FROM started_at) * 1000)::bigint,"
    "       CASE WHEN preempt THEN 2 ELSE 1 END"
    " FROM jobs WHERE state = 'running' AND node_id IS NOT NULL AND nodes = 1"
    " UNION ALL"
    " SELECT r.node_id::text, r.gpu_ids::text,"
    "       (extract(epoch FROM j.started_at) * 1000)::bigint + j.timeout_s * 1000::bigint,"
    "       j.id::text, j.tenant_id, 1, r.attempt, 0, 0"
    " FROM job_ranks r JOIN jobs j ON j.id = r.job_id AND j.attempts = r.attempt"
    " WHERE r.ended_at IS NULL AND j.state = 'running'"
    /* A part of an attempt that has ended (the gang requeued, cancelled or
     * failed, or a single-node job's run left on a node marked down,
     * ST_JOB_REQUEUE) holds its devices until its node reports it ended
     * (its job_ranks row ended_at), stops listing it (ST_RUNS_UNHELD),
     * re-registers or leaves (the gateway closes the row then,
     * ST_NODE_PARTS_CLOSE): a cancel takes time to land, and a node with
     * more slots than devices would otherwise be given them while the part
     * still runs. On a node that is down it holds nothing
     * (nothing is placed there); it frees "now" as far as reservations
     * plan. */
    " UNION ALL"
    " SELECT r.node_id::text, r.gpu_ids::text,"
    "       (extract(epoch FROM clock_timestamp()) * 1000)::bigint, j.id::text, j.tenant_id, 0,"
    "       r.attempt, 0, 0"
    " FROM job_ranks r JOIN jobs j ON j.id = r.job_id JOIN nodes n ON n.id = r.node_id"
    " WHERE r.ended_at IS NULL AND r.leased_at IS NOT NULL AND n.state = 'up'"
    "   AND " ENDED_PART("r", "j"), 0},
/* Rows of jobs changed since its statistics were taken, and the rows they
 * counted (0 before any ANALYZE). */
[ST_JOBS_GROWTH] = {"SELECT coalesce(s.n_mod_since_analyze, 0), greatest(c.reltuples, 0)::bigint,"
                    /* the running rows the planner expects: the table's
                     * rows times the share of state 'running' in its
                     * statistics (0 where it is not among the most common) */
                    "       (greatest(c.reltuples, 0) * coalesce((SELECT u.f FROM pg_stats p,"
                    "          unnest(p.most_common_vals::text::text[], p.most_common_freqs) AS u(v, f)"
                    "          WHERE p.schemaname = n.nspname AND p.tablename = 'jobs'"
                    "            AND p.attname = 'state' AND u.v = 'running'), 0))::bigint"
                    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
                    " WHERE c.oid = 'jobs'::regclass", 0},
/* The parts of ended attempts left open on node $1, which has just
 * (re-)registered or left: it holds none of them now. */
[ST_NODE_PARTS_CLOSE] = {
    "UPDATE job_ranks r SET ended_at = clock_timestamp(), state = 'cancelled' FROM jobs j"
    " WHERE j.id = r.job_id AND r.node_id = $1::uuid AND r.ended_at IS NULL"
    "   AND " ENDED_PART("r", "j"), 1},
[ST_JOBS_ACTIVE_COUNTS] = {
    "SELECT state, kernel, priority, count(*) FROM jobs WHERE state IN ('queued', 'running')"
    " GROUP BY state, kernel, priority", 0},
/* The event log that SSE streams read (store_events.c, gateway/events/events.c). */
[ST_EVENTS_LAST] = {"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM job_events_id_seq", 0},
/* xmin of the snapshot, and the next xid to be assigned: xmax is only the
 * last ended xid + 1, and a writer may hold a higher one; age() of an xid
 * counts from the next one (the reader has no xid of its own), so next =
 * xmax + age(xmax). INT_MAX: xmax's low 32 bits are not a normal xid. */
[ST_EVENTS_SNAPSHOT] = {
    "SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text,"
    "       age(((pg_snapshot_xmax(s)::text::bigint % 4294967296)::text)::xid)"
    " FROM pg_current_snapshot() s", 0},
#define EVENT_COLS                                                                               \
    "SELECT e.id, j.tenant_id, e.job_id, e.state, j.kernel,"                                     \
    "       jsonb_build_object('id', e.id, 'job_id', e.job_id, 'state', e.state,"                \
    "         'attempt', e.attempt, 'node', e.node_name, 'detail', e.detail,"                     \
    "         'at', kowloon_ts(e.at), 'kernel', j.kernel, 'labels', j.labels)"                     \
    " FROM job_events e JOIN jobs j ON j.id = e.job_id"
[ST_EVENTS_READ] = {EVENT_COLS " WHERE e.id > $1 AND e.id <= $2 ORDER BY e.id LIMIT $3", 3},
[ST_EVENTS_TENANT] = {EVENT_COLS " WHERE e.id > $1 AND e.id <= $2 AND j.tenant_id = $4"
                      " ORDER BY e.id LIMIT $3", 4},
[ST_EVENTS_JOB] = {EVENT_COLS " WHERE e.id > $1 AND e.id <= $2 AND e.job_id = $4::uuid"
                   " ORDER BY e.id LIMIT $3", 4},
#undef EVENT_COLS
[ST_EVENT_JOB_LAST] = {"SELECT coalesce(max(id), 0) FROM job_events WHERE job_id = $1::uuid", 1},
/* Multi-node jobs (store_gangs.c). Whether attempt $2 of multi-node job
 * $1 is the one running: no row for a job that is not multi-node. */
[ST_GANG_ATTEMPT] = {"SELECT (attempts = $2::int AND (state || '') = 'running')::int FROM jobs"
                     " WHERE id = $1::uuid AND nodes > 1", 2},
/* node_rank $3 of attempt $2 ended ($4: its state), as node $5, which must
 * hold it, reports; the nodes of the attempt's other parts still open (to
 * wake their polls). One row at least: whether $5 holds the part, then a
 * node per row (NULL: none open). */
[ST_GANG_RANK_END] = {
    "WITH " ASYNC_COMMIT ","
    " h AS (SELECT EXISTS (SELECT 1 FROM job_ranks WHERE job_id = $1::uuid AND attempt = $2::int"
    "         AND node_rank = $3::int AND node_id = $5::uuid)::int AS held),"
    " u AS (UPDATE job_ranks SET ended_at = clock_timestamp(), state = $4 FROM cfg"
    "       WHERE job_id = $1::uuid AND attempt = $2::int AND node_rank = $3::int"
    "         AND node_id = $5::uuid AND ended_at IS NULL RETURNING node_rank),"
    " o AS (SELECT DISTINCT node_id::text AS node FROM job_ranks, h WHERE h.held = 1"
    "         AND job_id = $1::uuid AND attempt = $2::int AND node_rank <> $3::int"
    "         AND ended_at IS NULL)"
    " SELECT h.held, o.node FROM h LEFT JOIN o ON true", 5},
/* The nodes of attempt $2's parts still open; the parts on nodes that left
 * (deregistered: no credential) are closed (failed) instead: nobody will
 * report them. A node that is down for silence keeps its parts open: it
 * may be alive, and they hold their devices if it comes back, until it
 * reports them, stops listing them (ST_RUNS_UNHELD) or registers again. */
[ST_GANG_NODES] = {
    "WITH d AS (UPDATE job_ranks r SET ended_at = clock_timestamp(), state = 'failed' FROM nodes n"
    "           WHERE r.job_id = $1::uuid AND r.attempt = $2::int AND r.ended_at IS NULL"
    "             AND n.id = r.node_id AND n.state = 'down' AND n.credential_hash IS NULL"
    "           RETURNING r.node_rank)"
    " SELECT DISTINCT r.node_id::text FROM job_ranks r JOIN nodes n ON n.id = r.node_id"
    " WHERE r.job_id = $1::uuid AND r.attempt = $2::int AND r.ended_at IS NULL"
    "   AND n.state <> 'down'", 2},
/* Nodes' progress reports, a batch at a time: $1 is [{id, attempt,
 * progress}]; a report of an attempt no longer running changes nothing. */
[ST_JOBS_PROGRESS] = {
    "WITH " ASYNC_COMMIT ","
    " p AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS p(id uuid, attempt int, progress jsonb))"
    " UPDATE jobs j SET progress = p.progress FROM p, cfg"
    " WHERE j.id = p.id AND j.attempts = p.attempt AND (j.state || '') = 'running'"
    /* only of runs the reporting node ($2) holds */
    "   AND " HELD_BY("j", "$2")
    /* a report sent again brings the same progress: no write, no event */
    "   AND j.progress IS DISTINCT FROM p.progress"
    " RETURNING 0, j.tenant_id, j.id::text, j.state, j.kernel,"
    "           jsonb_build_object('job_id', j.id, 'state', j.state, 'attempt', j.attempts,"
    "             'node', j.node_name, 'kernel', j.kernel, 'labels', j.labels,"
    "             'progress', j.progress)", 2},
/* What a node may touch (store_nodes.c). The node a credential names: its
 * SHA-256 in hex. */
/* tasks (store_tasks.c) */
[ST_TENANT_TASKS] = {"SELECT array_to_string(task_images, ','), task_images IS NOT NULL, task_egress"
                     " FROM tenants WHERE id = $1", 1},
/* A task part's end as its node reports it (node $8 must hold the run):
 * the exit code (part 0's), and its log blob, which the job now references
 * (when the node stored it for this attempt: run_outputs) and which
 * replaces the live chunks of that part. */
[ST_TASK_ENDED] = {
    "WITH j AS (UPDATE jobs SET"
    "             exit_code = CASE WHEN $4::int = 0 THEN $3::int ELSE exit_code END,"
    "             logs = CASE WHEN $5::text IS NULL THEN logs ELSE coalesce(logs, '{}'::jsonb)"
    "               || jsonb_build_object($4::text, jsonb_build_object('blob', $5::text,"
    "                    'bytes', $6::bigint, 'dropped', $7::bigint, 'attempt', attempts)) END"
    "           WHERE id = $1::uuid AND attempts = $2 AND kind = 'task' AND ((" RUNNING_BY_ID
    "             AND " HELD_BY("jobs", "$8") ") OR ($4::int > 0 AND " LATE_PART_OF("jobs", "$8") "))"
    "           RETURNING id, tenant_id, attempts),"
    " b AS (INSERT INTO job_blob_refs (job_id, blob_id, tenant_id)"
    "       SELECT j.id, $5::text, j.tenant_id FROM j WHERE $5::text IS NOT NULL AND EXISTS"
    "         (SELECT 1 FROM run_outputs o WHERE o.job_id = j.id AND o.attempt = j.attempts"
    "            AND o.blob_id = $5::text)"
    "       ON CONFLICT DO NOTHING),"
    " d AS (DELETE FROM job_log_chunks c USING j WHERE $5::text IS NOT NULL AND c.job_id = j.id"
    "         AND c.part = $4::int)"
    " SELECT id FROM j", 8},
/* A node's batch of live log bytes ($1: JSON [{job_id, attempt, part, off,
 * b64}]): each chunk of a run the node holds is appended where its part's
 * log ends now (the bytes before that end were taken already: a batch
 * sent again adds nothing), up to $3 bytes a part. The reply lists what
 * was added, with the job's tenant, kernel and labels for the streams. */
[ST_TASK_LOGS_APPEND] = {
    "WITH x AS (SELECT * FROM json_to_recordset($1::json)"
    "             AS x(job_id uuid, attempt int, part int, off bigint, b64 text)),"
    " h AS (SELECT x.*, decode(x.b64, 'base64') AS data, j.tenant_id, j.kernel, j.labels,"
    "              coalesce((SELECT max(c.off + length(c.data)) FROM job_log_chunks c"
    "                        WHERE c.job_id = x.job_id AND c.attempt = x.attempt"
    "                          AND c.part = x.part), 0) AS have"
    "       FROM x JOIN jobs j ON j.id = x.job_id AND j.attempts = x.attempt"
    "         AND j.kind = 'task' AND ((" RUNNING_BY_ID " AND " HELD_BY("j", "$2") ") OR (x.part > 0"
    "           AND " LATE_PART_OF("j", "$2") "))"
    "       WHERE x.part BETWEEN 0 AND 63),"
    " n AS (SELECT h.*, substring(h.data FROM (h.have - h.off + 1)::int"
    "                  FOR greatest(least(h.off + length(h.data), $3::bigint) - h.have, 0)::int) AS add"
    "       FROM h WHERE h.off <= h.have AND h.off + length(h.data) > h.have AND h.have < $3::bigint),"
    " i AS (INSERT INTO job_log_chunks (job_id, attempt, part, off, data)"
    "       SELECT job_id, attempt, part, have, add FROM n WHERE length(add) > 0"
    "       ON CONFLICT DO NOTHING RETURNING job_id, attempt, part, off)"
    " SELECT i.job_id::text, i.attempt, i.part, i.off, encode(n.add, 'base64'), n.tenant_id,"
    "        n.kernel, n.labels::text"
    " FROM i JOIN n ON n.job_id = i.job_id AND n.attempt = i.attempt AND n.part = i.part", 3},
/* A task's log for its tenant ($2): the job's state and kind, the part's
 * stored blob when the part has ended ({blob, bytes}), else the live
 * chunks of its current attempt from byte $4 on, in order. */
[ST_TASK_LOG_READ] = {
    "SELECT j.state, j.kind, j.logs -> $3::text ->> 'blob', c.off, c.data, j.attempts"
    " FROM jobs j LEFT JOIN job_log_chunks c ON c.job_id = j.id AND c.attempt = j.attempts"
    "   AND c.part = $3::int AND c.off + length(c.data) > $4::bigint"
    "   AND (j.logs -> $3::text IS NULL OR (j.logs -> $3::text ->> 'attempt')::int <> j.attempts)"
    " WHERE j.id = $1::uuid AND j.tenant_id = $2 ORDER BY c.off", 4},
/* The images the nodes with an engine list, and on how many nodes each. */
[ST_TASK_IMAGES] = {
    "SELECT i.image, count(DISTINCT n.id) FROM nodes n,"
    "   jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.tasks -> 'images') = 'array'"
    "                                  THEN n.tasks -> 'images' ELSE '[]' END) AS i(image)"
    " WHERE n.state = 'up' AND n.tasks ->> 'engine' IS NOT NULL AND n.tasks ->> 'engine' <> 'none'"
    " GROUP BY i.image ORDER BY i.image", 0},
[ST_NODE_BY_CREDENTIAL] = {"SELECT id::text, name FROM nodes WHERE credential_hash = decode($1, 'hex')", 1},
/* The nodes of the credential hashes $1 (hex), for the credential cache's
 * batch refresh (nodecred.h): one probe of nodes_credential each. */
[ST_NODES_BY_CREDENTIALS] = {
    "SELECT encode(credential_hash, 'hex'), id::text, name FROM nodes"
    " WHERE credential_hash = ANY (ARRAY(SELECT decode(h, 'hex') FROM unnest($1::text[]) h))", 1},
/* A row when attempt $2 of job $1 is running and node $3 holds it, or the
 * job is a multi-node task that ended with a part on $3 (LATE_PART_OF). */
[ST_NODE_RUN_HELD] = {
    "SELECT 1 FROM jobs WHERE id = $1::uuid AND attempts = $2::int AND ((" RUNNING_BY_ID
    "   AND " HELD_BY("jobs", "$3") ") OR " LATE_PART_OF("jobs", "$3") ")", 3},
/* Multi-node job $1: whether attempt $2 is its running one and node $3
 * holds a part of it, and whether $3 ever held a part of the job; no row
 * for a job that is not multi-node. */
[ST_NODE_GANG_MEMBER] = {
    "SELECT (attempts = $2::int AND (state || '') = 'running' AND EXISTS (SELECT 1 FROM job_ranks r"
    "          WHERE r.job_id = $1::uuid AND r.attempt = $2::int AND r.node_id = $3::uuid))::int,"
    "       EXISTS (SELECT 1 FROM job_ranks r WHERE r.job_id = $1::uuid"
    "               AND r.node_id = $3::uuid)::int"
    " FROM jobs WHERE id = $1::uuid AND nodes > 1", 3},
/* The size of blob $2 when it is an input of a run node $1 holds now (the
 * job running, its run or a part of its current attempt there), touching
 * its last use. Read from the node's few running jobs, never from every job
 * that ever referenced the blob. */
[ST_NODE_BLOB_GET] = {
    "WITH mine AS (SELECT id FROM jobs WHERE node_id = $1::uuid AND state = 'running'"
    "              UNION SELECT r.job_id FROM job_ranks r JOIN jobs j ON j.id = r.job_id"
    "                AND j.attempts = r.attempt AND (j.state || '') = 'running'"
    "              WHERE r.node_id = $1::uuid AND r.ended_at IS NULL)"
    " UPDATE blobs b SET last_used_at = now() WHERE b.id = $2 AND EXISTS (SELECT 1"
    "   FROM job_blob_refs x JOIN mine ON mine.id = x.job_id WHERE x.blob_id = $2)"
    " RETURNING b.size", 2},
/* Node $5 stored blob $3 ($4 bytes, hashed by the gateway) as an output of
 * attempt $2 of job $1, which it holds (checked from the request head):
 * the blob is recorded, owned by nobody until the job succeeds. */
[ST_RUN_OUTPUT] = {
    "WITH b AS (INSERT INTO blobs (id, size) VALUES ($3, $4::bigint) ON CONFLICT (id)"
    "           DO UPDATE SET last_used_at = now() RETURNING id)"
    " INSERT INTO run_outputs (job_id, attempt, blob_id, node_id)"
    " SELECT $1::uuid, $2::int, b.id, $5::uuid FROM b"
    " ON CONFLICT (job_id, attempt, blob_id) DO UPDATE SET stored_at = now()", 5},
};

int gw_store_set_prices(gw_store *s, const char *prices_json)
{
    char *p = strdup(prices_json);
    if (!p)
        return -ENOMEM;
    free(s->prices);
    s->prices = p;
    return 0;
}

int store__run(gw_store *s, int id, const char *const *vals, PGresult **r)
{
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    *r = store__exec(c, id, vals, NULL, NULL, 0);
    store__release(s, c);
    return *r ? 0 : -EIO;
}

int store__run_row(gw_store *s, int id, const char *const *vals, int missing, PGresult **r)
{
    if (store__run(s, id, vals, r) != 0) {
        *r = NULL;
        return -EIO;
    }
    if (PQntuples(*r) == 1)
        return 0;
    PQclear(*r);
    *r = NULL;
    return missing;
}

int store__int64(gw_store *s, int id, const char *const *vals, int64_t *out)
{
    PGresult *r;
    int rc = store__run_row(s, id, vals, -EIO, &r);
    if (rc == 0) {
        *out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    return rc;
}

int store__run_attempt(gw_store *s, int id, const char *job_id, int attempt, const char *node_id,
                       PGresult **r)
{
    char att[16];
    snprintf(att, sizeof att, "%d", attempt);
    const char *v[3] = {job_id, att, node_id};
    return store__run(s, id, v, r);
}

gw_store *gw_store_open(const char *conninfo, int pool_size)
{
    gw_store *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->conninfo = strdup(conninfo);
    s->size = pool_size > 0 ? pool_size : 8;
    s->conns = calloc((size_t)s->size, sizeof(*s->conns));
    if (!s->conninfo || !s->conns) {
        gw_store_close(s);
        return NULL;
    }
    for (int i = 0; i < s->size; i++)
        s->conns[i].store = s;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

void gw_store_close(gw_store *s)
{
    if (!s)
        return;
    for (int i = 0; s->conns && i < s->size; i++)
        if (s->conns[i].pg)
            PQfinish(s->conns[i].pg);
    free(s->conns);
    free(s->conninfo);
    free(s->prices);
    free(s);
}

/* PostgreSQL's notices ("relation already exists, skipping") are not
 * errors; they go to the debug log instead of stderr. */
static void notice_to_log(void *arg, const char *message)
{
    (void)arg;
    svc_debug("postgres: %.*s", (int)strcspn(message, "\n"), message);
}

static void conn_drop(store__conn *c)
{
    if (c->pg)
        PQfinish(c->pg);
    c->pg = NULL;
    memset(c->prepared, 0, sizeof(c->prepared));
}

/* Seconds a new connection may take, unless the URL says otherwise. */
#define STORE_CONNECT_TIMEOUT_S "5"
/* Settings of the gateway's sessions, unless the URL has options of its
 * own. No parallel query: the gateway's statements are short, and the
 * scheduler's once-a-second reload of the runs placed (ST_RUNS_PLACED,
 * some 3,000 rows at 1,000 nodes) was planned with two parallel workers,
 * started anew each second: 58-85 ms a call against 22 ms without them
 * (the scale bench's PostgreSQL profile, README "Scale"). */
#define STORE_OPTIONS "-c max_parallel_workers_per_gather=0"

store__conn *store__acquire(gw_store *s)
{
    store__conn *c = NULL;
    struct timespec t0 = {0, 0};
    pthread_mutex_lock(&s->mu);
    for (;;) {
        for (int i = 0; i < s->size && !c; i++)
            if (!s->conns[i].busy)
                c = &s->conns[i];
        if (c)
            break;
        if (t0.tv_sec == 0 && t0.tv_nsec == 0)
            clock_gettime(CLOCK_MONOTONIC, &t0);
        pthread_cond_wait(&s->cv, &s->mu);
    }
    c->busy = 1;
    pthread_mutex_unlock(&s->mu);
    if (t0.tv_sec != 0 || t0.tv_nsec != 0) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        atomic_fetch_add_explicit(&s->waits, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->wait_ns, (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL +
                                                          (t1.tv_nsec - t0.tv_nsec)),
                                  memory_order_relaxed);
    }

    /* A server restart leaves idle connections that still look fine.
     * Reading what the server sent exposes them: the first read takes its
     * goodbye message, the second finds the end of the stream. */
    for (int i = 0; i < 2 && c->pg; i++)
        if (PQconsumeInput(c->pg) == 0 || PQstatus(c->pg) != CONNECTION_OK) {
            conn_drop(c);
            s->last_failure_ms = svc_now_mono_ms();
        }
    if (!c->pg) {
        /* A connect that never completes (a server or network that swallows
         * packets) must not hold the thread that asked: the HTTP workers
         * reach PostgreSQL through this pool. STORE_CONNECT_TIMEOUT_S comes
         * first, so a connect_timeout in the URL wins (later keywords of
         * PQconnectdbParams override earlier ones). So do STORE_OPTIONS. */
        static const char *const kw[] = {"connect_timeout", "options", "dbname", NULL};
        const char *const val[] = {STORE_CONNECT_TIMEOUT_S, STORE_OPTIONS, s->conninfo, NULL};
        c->pg = PQconnectdbParams(kw, val, 1);
        if (PQstatus(c->pg) != CONNECTION_OK) {
            svc_warn("postgres: cannot connect: %s", PQerrorMessage(c->pg));
            atomic_fetch_add_explicit(&s->connect_errors, 1, memory_order_relaxed);
            s->last_failure_ms = svc_now_mono_ms();
            conn_drop(c);
            store__release(s, c);
            return NULL;
        }
        PQsetNoticeProcessor(c->pg, notice_to_log, NULL);
        c->custom = 1;   /* the server's default, auto */
    }
    return c;
}

void gw_store_stats_get(gw_store *s, gw_store_stats *out)
{
    *out = (gw_store_stats){
        .errors = atomic_load_explicit(&s->errors, memory_order_relaxed),
        .connect_errors = atomic_load_explicit(&s->connect_errors, memory_order_relaxed),
        .waits = atomic_load_explicit(&s->waits, memory_order_relaxed),
        .wait_seconds = (double)atomic_load_explicit(&s->wait_ns, memory_order_relaxed) / 1e9,
        .size = s->size,
    };
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->size; i++)
        out->busy += s->conns[i].busy;
    pthread_mutex_unlock(&s->mu);
}

int gw_store_jobs_active(gw_store *s, gw_active_count **rows, int *n)
{
    *rows = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_JOBS_ACTIVE_COUNTS, NULL, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    int k = r ? PQntuples(r) : 0;
    if (k > 0 && !(*rows = calloc((size_t)k, sizeof(**rows))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < k; i++) {
        gw_active_count *a = &(*rows)[i];
        store__copy(r, i, 0, a->state, sizeof(a->state));
        store__copy(r, i, 1, a->kernel, sizeof(a->kernel));
        a->priority = atoi(PQgetvalue(r, i, 2));
        a->count = strtoll(PQgetvalue(r, i, 3), NULL, 10);
    }
    *n = rc ? 0 : k;
    PQclear(r);
    store__release(s, c);
    return rc;
}

void store__release(gw_store *s, store__conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&s->mu);
    c->busy = 0;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int gw_store_sqlstate_transient(const char *sqlstate)
{
    static const char *const classes[] = {"08", "25", "40", "53", "57", "58", NULL};
    if (!sqlstate || strlen(sqlstate) != 5)
        return 1;
    /* lock not available; a prepared statement gone with a reset session */
    if (strcmp(sqlstate, "55P03") == 0 || strcmp(sqlstate, "26000") == 0)
        return 1;
    for (int i = 0; classes[i]; i++)
        if (strncmp(sqlstate, classes[i], 2) == 0)
            return 1;
    return 0;
}

int store__fail_rc(const store__conn *c)
{
    return gw_store_sqlstate_transient(c->sqlstate) ? -EIO : -EPROTO;
}

PGresult *store__exec(store__conn *c, int id, const char *const *vals, const int *lens,
                      const int *fmts, int binary)
{
    char name[16];
    snprintf(name, sizeof(name), "s%d", id);
    if (!(c->prepared[id / 64] & (1ull << (id % 64)))) {
        PGresult *p = PQprepare(c->pg, name, stmts[id].sql, stmts[id].nparams, NULL);
        int ok = PQresultStatus(p) == PGRES_COMMAND_OK;
        const char *state = p ? PQresultErrorField(p, PG_DIAG_SQLSTATE) : NULL;
        snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", !ok && state ? state : "");
        if (!ok) {
            svc_error("postgres: prepare %s: %s", name, PQresultErrorMessage(p));
            atomic_fetch_add_explicit(&c->store->errors, 1, memory_order_relaxed);
        }
        PQclear(p);
        if (!ok) {
            if (PQstatus(c->pg) != CONNECTION_OK)
                conn_drop(c);
            return NULL;
        }
        c->prepared[id / 64] |= 1ull << (id % 64);
    }
    if (c->custom != stmts[id].custom) {
        /* A round trip, only when the connection switches kind. */
        PGresult *m = PQexec(c->pg, stmts[id].custom ? "SET plan_cache_mode = auto"
                                                     : "SET plan_cache_mode = force_generic_plan");
        if (PQresultStatus(m) == PGRES_COMMAND_OK)
            c->custom = stmts[id].custom;
        PQclear(m);
    }
    PGresult *r = PQexecPrepared(c->pg, name, stmts[id].nparams, vals, lens, fmts, binary);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return r;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", state ? state : "");
    atomic_fetch_add_explicit(&c->store->errors, 1, memory_order_relaxed);
    svc_error("postgres: statement %s: %s%s%s", name, PQresultErrorMessage(r),
              state ? " SQLSTATE " : "", state ? state : "");
    PQclear(r);
    if (PQstatus(c->pg) != CONNECTION_OK)
        conn_drop(c);
    return NULL;
}

int store__command(store__conn *c, const char *sql)
{
    if (!c->pg)
        return -EIO;
    PGresult *r = PQexec(c->pg, sql);
    int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -EIO;
    if (rc)
        svc_error("postgres: %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return rc;
}

void store__copy(const PGresult *r, int row, int col, char *out, size_t len)
{
    size_t n = (size_t)PQgetlength(r, row, col);
    if (PQgetisnull(r, row, col))
        n = 0;
    if (n >= len)
        n = len - 1;
    memcpy(out, PQgetvalue(r, row, col), n);
    out[n] = '\0';
}

json_t *store__json(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return NULL;
    json_error_t e;
    json_t *j = json_loadb(PQgetvalue(r, row, col), (size_t)PQgetlength(r, row, col), 0, &e);
    if (j == NULL)
        svc_error("postgres: column %d of a row is not JSON the gateway can read: %s (byte %d)",
                  col, e.text, e.position);
    return j;
}

/* Runs one statement that needs no result beyond success; -EIO on failure,
 * -ENOENT when it changed or returned no row and need_row is set. */
static int exec_simple(gw_store *s, int id, const char *const *vals, int need_row)
{
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, id, vals, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    if (r && need_row && PQntuples(r) == 0 && atoi(PQcmdTuples(r)) == 0)
        rc = -ENOENT;
    PQclear(r);
    store__release(s, c);
    return rc;
}

int64_t gw_store_last_failure_ms(const gw_store *s)
{
    return s->last_failure_ms;
}

int gw_store_ping(gw_store *s)
{
    return exec_simple(s, ST_PING, NULL, 0);
}

static int migration_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *file_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        rewind(f);
        buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
        if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n)
            buf[n] = '\0';
        else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

/* Runs sql as a simple query; 0 or -EIO with PostgreSQL's message in err. */
static int exec_script(PGconn *pg, const char *sql, char *err, size_t errlen)
{
    PGresult *r = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    int rc = (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) ? 0 : -EIO;
    if (rc)
        snprintf(err, errlen, "%s", PQresultErrorMessage(r));
    PQclear(r);
    return rc;
}

static int migration_applied(PGconn *pg, const char *version)
{
    const char *v[1] = {version};
    PGresult *r = PQexecParams(pg, "SELECT 1 FROM schema_migrations WHERE version = $1",
                               1, NULL, v, NULL, NULL, 0);
    int applied = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    PQclear(r);
    return applied;
}

/* Runs script sql (the text of file) in one transaction, recording version
 * in schema_migrations in it when given; on failure rolls back, err ending
 * with " (in file)". 0 or -EIO. */
static int script_apply(PGconn *pg, const char *sql, const char *file, const char *version,
                        char *err, size_t errlen)
{
    int rc = exec_script(pg, "BEGIN", err, errlen);
    if (!rc)
        rc = exec_script(pg, sql, err, errlen);
    if (!rc && version) {
        const char *v[1] = {version};
        PGresult *r = PQexecParams(pg, "INSERT INTO schema_migrations (version) VALUES ($1)",
                                   1, NULL, v, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            snprintf(err, errlen, "%s", PQresultErrorMessage(r));
            rc = -EIO;
        }
        PQclear(r);
    }
    if (!rc)
        rc = exec_script(pg, "COMMIT", err, errlen);
    if (rc) {
        char ignored[8];
        exec_script(pg, "ROLLBACK", ignored, sizeof(ignored));
        size_t used = strlen(err);
        snprintf(err + used, errlen - used, " (in %s)", file);
    }
    return rc;
}

static int migration_apply(PGconn *pg, const char *dir, const char *file, char *err, size_t errlen)
{
    char path[1024], version[256];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    snprintf(version, sizeof(version), "%.*s", (int)(strlen(file) - 4), file);
    if (migration_applied(pg, version))
        return 0;
    char *sql = file_read(path);
    if (!sql) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -EIO;
    }
    int rc = script_apply(pg, sql, file, version, err, errlen);
    if (!rc)
        svc_info("migration applied: %s", file);
    free(sql);
    return rc;
}

/* Applies dir/objects.sql, the replaceable objects (functions) written
 * once, after the migrations: at every start, in one transaction. A
 * directory without it (an older tree's) is left as its migrations made
 * it. */
static int objects_apply(PGconn *pg, const char *dir, char *err, size_t errlen)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/objects.sql", dir);
    char *sql = file_read(path);
    if (!sql) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -EIO;
    }
    int rc = script_apply(pg, sql, "objects.sql", NULL, err, errlen);
    free(sql);
    return rc;
}

int gw_store_migrate(gw_store *s, const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot open migrations directory %s: %s", dir, strerror(errno));
        return -ENOENT;
    }
    char *files[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t len = strlen(e->d_name);
        if (len > 8 && e->d_name[0] >= '0' && e->d_name[0] <= '9' &&
            strcmp(e->d_name + len - 4, ".sql") == 0)
            files[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(files, (size_t)n, sizeof(files[0]), migration_cmp);

    int rc = -EIO;
    store__conn *c = store__acquire(s);
    if (!c) {
        snprintf(err, errlen, "cannot connect to PostgreSQL");
        goto out;
    }
    /* The advisory lock keeps two gateways starting together from applying
     * the same migration twice; the second waits, then finds it applied. */
    rc = exec_script(c->pg, "SELECT pg_advisory_lock(7071955)", err, errlen);
    if (!rc)
        rc = exec_script(c->pg,
                         "CREATE TABLE IF NOT EXISTS schema_migrations ("
                         " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                         err, errlen);
    for (int i = 0; !rc && i < n; i++)
        rc = migration_apply(c->pg, dir, files[i], err, errlen);
    if (!rc)
        rc = objects_apply(c->pg, dir, err, errlen);
    char ignored[8];
    exec_script(c->pg, "SELECT pg_advisory_unlock(7071955)", ignored, sizeof(ignored));
    store__release(s, c);
out:
    for (int i = 0; i < n; i++)
        free(files[i]);
    return rc;
}

int gw_store_key_create(gw_store *s, const char *tenant, int admin, const char *key)
{
    const char *v[3] = {tenant, key, admin ? "true" : "false"};
    return exec_simple(s, ST_KEY_CREATE, v, 1);
}

int gw_store_key_revoke(gw_store *s, const char *key)
{
    const char *v[1] = {key};
    return exec_simple(s, ST_KEY_REVOKE, v, 1);
}

int gw_store_node_register(gw_store *s, const gw_node_reg *reg, char id_out[37], int *issued)
{
    char slots_s[16], timeout_s[16];
    snprintf(slots_s, sizeof(slots_s), "%d", reg->slots);
    snprintf(timeout_s, sizeof(timeout_s), "%d", reg->timeout_s);
    const char *v[11] = {reg->name, reg->url, reg->backend, reg->reason, reg->gpus_json, slots_s,
                         reg->kernels_json, reg->presented_hash, reg->new_hash, timeout_s,
                         reg->tasks_json};
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_NODE_REGISTER, v, NULL, NULL, 0);
    /* no row: the name's holder lives and this is not it */
    int rc = !r ? -EIO : PQntuples(r) == 1 ? 0 : -EEXIST;
    if (!rc) {
        store__copy(r, 0, 0, id_out, 37);
        *issued = strcmp(PQgetvalue(r, 0, 1), "1") == 0;
    }
    PQclear(r);
    /* A node that registers holds no part of an ended attempt (it
     * restarted, or never had them): their devices are free. Failing
     * that, the registration fails and the node tries again. */
    const char *pv[1] = {id_out};
    if (!rc && !(r = store__exec(c, ST_NODE_PARTS_CLOSE, pv, NULL, NULL, 0)))
        rc = -EIO;
    else if (!rc)
        PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_nodes_heartbeat(gw_store *s, const char *beats_json, char (**found)[37], int *nfound)
{
    *found = NULL;
    *nfound = 0;
    const char *v[1] = {beats_json};
    PGresult *r;
    if (store__run(s, ST_NODE_HEARTBEAT, v, &r) != 0)
        return -EIO;
    int rows = PQntuples(r), rc = 0;
    if (rows > 0 && !(*found = calloc((size_t)rows, sizeof(**found))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++)
        store__copy(r, i, 0, (*found)[i], sizeof((*found)[i]));
    if (!rc)
        *nfound = rows;
    PQclear(r);
    return rc;
}

int gw_store_node_remove(gw_store *s, const char *id)
{
    const char *v[1] = {id};
    int rc = exec_simple(s, ST_NODE_REMOVE, v, 1);
    /* the node left: whatever it ran has stopped */
    return rc ? rc : exec_simple(s, ST_NODE_PARTS_CLOSE, v, 0);
}

/* Runs a statement whose single row and column is JSON text. */
static int exec_json(gw_store *s, int id, const char *const *vals, json_t **out)
{
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, id, vals, NULL, NULL, 0);
    *out = r && PQntuples(r) == 1 ? store__json(r, 0, 0) : NULL;
    PQclear(r);
    store__release(s, c);
    return *out ? 0 : -EIO;
}

int gw_store_nodes_json(gw_store *s, json_t **nodes)
{
    return exec_json(s, ST_NODES_JSON, NULL, nodes);
}

int gw_store_capacity_json(gw_store *s, json_t **capacity)
{
    return exec_json(s, ST_CAPACITY, NULL, capacity);
}

int gw_store_backends_up(gw_store *s, json_t **backends)
{
    return exec_json(s, ST_BACKENDS_UP, NULL, backends);
}

/* Each device's memory from the registration's gpus ([{memory_bytes}])
 * and its utilisation from the last heartbeat's state ({gpus: [{index,
 * util}]}). */
static void node_devices(gw_node *nd, const char *gpus_json, const char *state_json)
{
    json_t *gpus = json_loads(gpus_json, 0, NULL), *state = json_loads(state_json, JSON_DECODE_ANY, NULL);
    for (int g = 0; g < 16; g++) {
        nd->gpu_util[g] = -1;
        json_int_t bytes = json_integer_value(json_object_get(json_array_get(gpus, (size_t)g), "memory_bytes"));
        nd->gpu_mem_mb[g] = (int)(bytes >> 20);
    }
    size_t i;
    json_t *d;
    json_t *devs = json_object_get(state, "gpus");
    json_array_foreach(json_is_array(devs) ? devs : NULL, i, d) {
        json_int_t at = json_integer_value(json_object_get(d, "index"));
        json_t *u = json_object_get(d, "util");
        if (at >= 0 && at < 16 && json_is_number(u))
            nd->gpu_util[at] = (int)json_number_value(u);
    }
    json_decref(gpus);
    json_decref(state);
}

/* Whether the node runs tasks, and the keys of the images it lists, from
 * its tasks object ({engine, images}; "null": it said nothing). */
static void node_tasks(gw_node *nd, const char *tasks_json)
{
    json_t *t = json_loads(tasks_json, JSON_DECODE_ANY, NULL);
    const char *engine = json_string_value(json_object_get(t, "engine"));
    json_t *images = json_object_get(t, "images");
    nd->tasks = engine && strcmp(engine, "none") != 0;
    nd->nimages = json_is_array(images) ? 0 : -1;
    size_t i;
    json_t *im;
    json_array_foreach(json_is_array(images) ? images : NULL, i, im) {
        if (nd->nimages == GW_NODE_IMAGES_MAX) {
            nd->nimages = -1; /* too many to keep: counted as not listed */
            break;
        }
        if (json_is_string(im))
            nd->images[nd->nimages++] = gw_task_image_key(json_string_value(im));
    }
    json_decref(t);
}

int gw_store_nodes_load(gw_store *s, gw_node **out, int *n)
{
    *out = NULL;
    *n = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_NODES_LOAD, NULL, NULL, NULL, 0);
    int rc = r ? 0 : -EIO;
    int rows = r ? PQntuples(r) : 0;
    if (rows > 0 && !(*out = calloc((size_t)rows, sizeof(gw_node))))
        rc = -ENOMEM;
    for (int i = 0; !rc && i < rows; i++) {
        gw_node *nd = &(*out)[i];
        store__copy(r, i, 0, nd->id, sizeof(nd->id));
        store__copy(r, i, 1, nd->name, sizeof(nd->name));
        store__copy(r, i, 2, nd->url, sizeof(nd->url));
        store__copy(r, i, 3, nd->backend, sizeof(nd->backend));
        nd->slots = atoi(PQgetvalue(r, i, 4));
        nd->ngpus = atoi(PQgetvalue(r, i, 5));
        nd->up = atoi(PQgetvalue(r, i, 6));
        nd->draining = atoi(PQgetvalue(r, i, 7));
        node_devices(nd, PQgetvalue(r, i, 8), PQgetvalue(r, i, 9));
        node_tasks(nd, PQgetvalue(r, i, 10));
        *n = i + 1;
    }
    PQclear(r);
    store__release(s, c);
    return rc;
}

int gw_store_nodes_expire(gw_store *s, int timeout_s, int *marked)
{
    char t[16];
    snprintf(t, sizeof(t), "%d", timeout_s);
    const char *v[1] = {t};
    *marked = 0;
    store__conn *c = store__acquire(s);
    if (!c)
        return -EIO;
    PGresult *r = store__exec(c, ST_NODES_EXPIRE, v, NULL, NULL, 0);
    for (int i = 0; r && i < PQntuples(r); i++)
        svc_warn("node %s missed its heartbeats for %d s: marked down", PQgetvalue(r, i, 0), timeout_s);
    *marked = r ? PQntuples(r) : 0;
    int rc = r ? 0 : -EIO;
    PQclear(r);
    store__release(s, c);
    return rc;
}
