-- sql/objects.sql — the replaceable objects of the schema, each written
-- once: the functions that render a job and a tenant as the API shows them,
-- a job's usage and placement, the blob accounting and the webhook queue,
-- and the triggers that call the last two.
-- The gateway applies it after the migrations at every start (`migrate` and
-- `serve`), in one transaction under the migrations' lock, so a change here
-- is a change to this file alone: no new migration redefines them. Only
-- CREATE OR REPLACE (triggers: created where missing, below), with the
-- same argument and return types (a function
-- keeps its identity, so statements other gateways prepared stay valid);
-- a change of signature needs a migration that drops the old one first.
-- The C side writes a queued job's first members in kowloon_job_json's
-- order (gateway/api/api_jobs.c, job_json_queued).

-- Times as the API writes them: UTC, milliseconds, "Z". STABLE, not
-- IMMUTABLE (to_char is STABLE): declared so, it inlines into the callers.
CREATE OR REPLACE FUNCTION kowloon_ts(t timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- A tenant as the admin API shows it (GET /v1/tenants).
CREATE OR REPLACE FUNCTION kowloon_tenant_json(t tenants) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'name', t.name,
        'rate_rps', t.rate_rps,
        'rate_burst', t.rate_burst,
        'max_queued', t.max_queued,
        'max_running', t.max_running,
        'weight', t.weight,
        'task_images', to_jsonb(t.task_images),
        'task_egress', t.task_egress,
        'created_at', kowloon_ts(t.created_at),
        'queued', (SELECT count(*) FROM jobs j WHERE j.tenant_id = t.id AND j.state = 'queued'),
        'running', (SELECT count(*) FROM jobs j WHERE j.tenant_id = t.id AND j.state = 'running'),
        'keys', (SELECT count(*) FROM api_keys k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL))
$$;

-- The usage of job j ending at ended, its attempt measured by its node
-- (node: {"run_s", "cpu_s", "gpus", "gpu_model"}, NULL when no node
-- reported, as when the reaper gives up on a run: then run_s is the
-- gateway's own view, started_at to ended, and cpu_s 0). backend is where
-- the run happened when known; outputs the result meta (nbytes per output)
-- of a success. prices is the gateway's price table
-- {"currency", "rates": {"cpu", "cuda", "cuda:<GPU model>"}}: USD (say) per
-- CPU-core-hour of CPU time on the CPU, per GPU-hour on CUDA, the model's
-- own rate before the generic one; no rate costs 0. PL/pgSQL so that its
-- plans are kept per connection: it runs on the result path.
CREATE OR REPLACE FUNCTION kowloon_usage(j jobs, ended timestamptz, node jsonb, ran_on text,
                              outputs jsonb, prices jsonb) RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
    be text := ran_on;
    model text := node->>'gpu_model';
    run_s float8;
    cpu_s float8 := greatest(coalesce((node->>'cpu_s')::float8, 0), 0);
    n_gpus int := 0;
    rate float8;
    bytes_in bigint;
    bytes_out bigint;
BEGIN
    IF be IS NULL OR (be = 'cuda' AND model IS NULL) THEN
        SELECT coalesce(be, nd.backend), coalesce(model, nd.gpus->0->>'name') INTO be, model
        FROM nodes nd WHERE nd.id = j.node_id;
    END IF;
    be := coalesce(be, 'cpu');
    run_s := greatest(coalesce((node->>'run_s')::float8,
                               extract(epoch FROM ended - j.started_at)::float8), 0);
    IF be = 'cuda' THEN
        n_gpus := coalesce((node->>'gpus')::int, greatest(j.gpus, 1));
        rate := coalesce(prices->'rates'->>('cuda:' || model), prices->'rates'->>'cuda')::float8;
    ELSE
        model := NULL;
        rate := (prices->'rates'->>'cpu')::float8;
    END IF;
    SELECT coalesce(sum((e->>'nbytes')::bigint), 0) INTO bytes_in
    FROM job_inputs i, jsonb_array_elements(i.meta) e WHERE i.job_id = j.id;
    SELECT coalesce(sum((e->>'nbytes')::bigint), 0) INTO bytes_out
    FROM jsonb_array_elements(coalesce(outputs, '[]')) e;
    RETURN json_strip_nulls(json_build_object(
        'queue_s', round(greatest(extract(epoch FROM j.started_at - j.created_at), 0)::numeric, 3),
        'run_s', round(run_s::numeric, 3),
        'backend', be,
        'gpus', n_gpus,
        'gpu_model', model,
        'gpu_s', round((n_gpus * run_s)::numeric, 3),
        'cpu_s', round(cpu_s::numeric, 6),
        'bytes_in', bytes_in,
        'bytes_out', bytes_out,
        'cost', round(((CASE WHEN be = 'cuda' THEN n_gpus * run_s ELSE cpu_s END)
                       / 3600 * coalesce(rate, 0))::numeric, 9),
        'currency', prices->>'currency'));
END
$$;
COMMENT ON FUNCTION kowloon_usage(jobs, timestamptz, jsonb, text, jsonb, jsonb) IS
    'a job''s usage and cost as it ends';

-- Where each node_rank of a job runs (the job object's placement): one
-- entry per node of the current or last attempt, in node_rank order, with
-- the global ranks it holds (gpus per node each) and its device indices
-- ([] on CPU nodes or where the node chose). NULL until first placed. A
-- single-node job reads only its own row: job_ranks is looked at for
-- multi-node jobs alone.
CREATE OR REPLACE FUNCTION kowloon_placement(j jobs) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN j.nodes > 1 THEN
            (SELECT json_agg(json_build_object(
                        'node_rank', r.node_rank, 'node', r.node_name,
                        'ranks', (SELECT json_agg(g) FROM generate_series(
                                    r.node_rank * greatest(j.gpus, 1),
                                    (r.node_rank + 1) * greatest(j.gpus, 1) - 1) g),
                        'gpus', to_json(r.gpu_ids)) ORDER BY r.node_rank)
             FROM job_ranks r
             WHERE r.job_id = j.id
               AND r.attempt = (SELECT max(x.attempt) FROM job_ranks x WHERE x.job_id = j.id))
        WHEN j.node_name IS NOT NULL THEN
            json_build_array(json_build_object(
                'node_rank', 0, 'node', j.node_name,
                'ranks', (SELECT json_agg(g) FROM generate_series(0, greatest(j.gpus, 1) - 1) g),
                'gpus', to_json(coalesce(j.gpu_ids, '{}'::int[]))))
    END
$$;
COMMENT ON FUNCTION kowloon_placement(jobs) IS
    'the job object''s placement: [{node_rank, node, ranks, gpus}] of the current or last attempt';

-- References gained: (tenant, blob) pairs, one per reference. Locks are
-- taken in key order (blob_usage, then tenant_totals), and these are the
-- last locks a statement takes, so concurrent statements never wait on
-- each other in a cycle. PL/pgSQL (here and below) so that the plans are
-- kept per connection: the batch of submits runs this.
CREATE OR REPLACE FUNCTION kowloon_blob_hold(tenant_ids bigint[], blob_ids text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    WITH n AS (SELECT t, b, count(*) AS k FROM unnest(tenant_ids, blob_ids) AS x(t, b) GROUP BY t, b),
     u AS (INSERT INTO blob_usage AS bu (tenant_id, blob_id, size, holders)
           SELECT n.t, n.b, bl.size, n.k FROM n JOIN blobs bl ON bl.id = n.b ORDER BY n.t, n.b
           ON CONFLICT (tenant_id, blob_id) DO UPDATE SET holders = bu.holders + EXCLUDED.holders
           RETURNING bu.tenant_id, bu.size, bu.xmax = 0 AS created)
    INSERT INTO tenant_totals AS tt (tenant_id, blob_bytes)
    SELECT tenant_id, sum(size) FILTER (WHERE created) FROM u
    GROUP BY tenant_id HAVING bool_or(created) ORDER BY tenant_id
    ON CONFLICT (tenant_id) DO UPDATE SET blob_bytes = tt.blob_bytes + EXCLUDED.blob_bytes;
END
$$;
COMMENT ON FUNCTION kowloon_blob_hold(bigint[], text[]) IS
    'references added: counts them in blob_usage and charges each tenant for the blobs new to it';

-- References dropped; a blob whose last reference of a tenant goes stops
-- being charged to it.
CREATE OR REPLACE FUNCTION kowloon_blob_release(tenant_ids bigint[], blob_ids text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM blob_usage bu
    WHERE (bu.tenant_id, bu.blob_id) IN (SELECT t, b FROM unnest(tenant_ids, blob_ids) AS x(t, b))
    ORDER BY bu.tenant_id, bu.blob_id FOR UPDATE;
    WITH n AS (SELECT t, b, count(*) AS k FROM unnest(tenant_ids, blob_ids) AS x(t, b) GROUP BY t, b),
     d AS (DELETE FROM blob_usage bu USING n
           WHERE bu.tenant_id = n.t AND bu.blob_id = n.b AND bu.holders <= n.k
           RETURNING bu.tenant_id, bu.size)
    INSERT INTO tenant_totals AS tt (tenant_id, blob_bytes)
    SELECT tenant_id, -sum(size) FROM d GROUP BY tenant_id ORDER BY tenant_id
    ON CONFLICT (tenant_id) DO UPDATE SET blob_bytes = tt.blob_bytes + EXCLUDED.blob_bytes;
    WITH n AS (SELECT t, b, count(*) AS k FROM unnest(tenant_ids, blob_ids) AS x(t, b) GROUP BY t, b)
    UPDATE blob_usage bu SET holders = bu.holders - n.k FROM n
    WHERE bu.tenant_id = n.t AND bu.blob_id = n.b;
END
$$;
COMMENT ON FUNCTION kowloon_blob_release(bigint[], text[]) IS
    'references removed: uncounts them in blob_usage and stops charging a tenant for a blob it no '
    'longer holds at all';

-- Statement-level, with transition tables: one pass per statement (a batch
-- of submits, a page of expired jobs), its locks taken in order. A
-- statement that adds no reference (most batches of submits: small inputs
-- stay in their rows) costs one look at an empty table.
CREATE OR REPLACE FUNCTION kowloon_refs_added() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t bigint[];
    b text[];
BEGIN
    SELECT array_agg(tenant_id), array_agg(blob_id) INTO t, b FROM added;
    IF t IS NOT NULL THEN
        PERFORM kowloon_blob_hold(t, b);
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION kowloon_refs_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t bigint[];
    b text[];
BEGIN
    SELECT array_agg(tenant_id), array_agg(blob_id) INTO t, b FROM removed;
    IF t IS NOT NULL THEN
        PERFORM kowloon_blob_release(t, b);
    END IF;
    RETURN NULL;
END
$$;

-- Fired at the end of the statement that changed the job, when its
-- job_events row is written and visible: the newest event of the job is
-- the one this change wrote. The payload is the job object as it is now.
CREATE OR REPLACE FUNCTION kowloon_webhook_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (job_id, tenant_id, event_id, event, url, payload)
    SELECT NEW.id, NEW.tenant_id, e.id, NEW.state, NEW.webhook,
           json_build_object('type', 'job.' || NEW.state,
                             'timestamp', kowloon_ts(coalesce(e.at, clock_timestamp())),
                             'data', kowloon_job_json(NEW))::text
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT id, at FROM job_events WHERE job_id = NEW.id
                       ORDER BY id DESC LIMIT 1) e ON true;
    RETURN NULL;
END
$$;


-- The triggers that call them, each created where it is missing: a
-- database made before this file held them has them from its migrations,
-- and CREATE TRIGGER locks its table against writers, so it is not run
-- again at every start. A change to a trigger's definition is a migration
-- that drops it (this file then makes the new one). One row a trigger:
-- its name, when it fires, its table, and the rest of its definition.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('blob_refs_added', 'AFTER INSERT', 'blob_refs',
         'REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION kowloon_refs_added()'),
        ('blob_refs_removed', 'AFTER DELETE', 'blob_refs',
         'REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION kowloon_refs_removed()'),
        ('job_blob_refs_added', 'AFTER INSERT', 'job_blob_refs',
         'REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION kowloon_refs_added()'),
        ('job_blob_refs_removed', 'AFTER DELETE', 'job_blob_refs',
         'REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION kowloon_refs_removed()'),
        ('jobs_webhook_insert', 'AFTER INSERT', 'jobs',
         'FOR EACH ROW WHEN (NEW.webhook IS NOT NULL AND NEW.state = ANY (NEW.webhook_events))'
         ' EXECUTE FUNCTION kowloon_webhook_enqueue()'),
        ('jobs_webhook_update', 'AFTER UPDATE OF state', 'jobs',
         'FOR EACH ROW WHEN (NEW.webhook IS NOT NULL AND NEW.state = ANY (NEW.webhook_events)'
         ' AND OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION kowloon_webhook_enqueue()')
    ) AS v(name, event, tab, rest)
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = t.name
                       AND tgrelid = t.tab::regclass) THEN
            EXECUTE format('CREATE TRIGGER %I %s ON %I %s', t.name, t.event, t.tab, t.rest);
        END IF;
    END LOOP;
END
$$;

-- The public job object: every endpoint that returns a job returns this
-- shape; json, not jsonb, so that params keep their exact text. kernel is
-- null for a task.
CREATE OR REPLACE FUNCTION kowloon_job_json(j jobs) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', j.id,
        'state', j.state,
        'kind', j.kind,
        'kernel', CASE WHEN j.kind = 'task' THEN NULL ELSE j.kernel END,
        'task', j.task,
        'params', j.params,
        'labels', j.labels,
        'priority', j.priority,
        'resources', CASE WHEN j.kind = 'task' THEN
                          json_strip_nulls(json_build_object('backend', j.backend_req, 'gpus', j.gpus,
                              'nodes', j.nodes, 'gpu_memory_gb', j.gpu_memory_gb,
                              'memory_gb', (j.task_run #>> '{limits,memory_bytes}')::float8 / 1073741824,
                              'cpus', (j.task_run #>> '{limits,cpus}')::float8))
                          WHEN j.gpu_memory_gb IS NULL
                          THEN json_build_object('backend', j.backend_req, 'gpus', j.gpus,
                                                 'nodes', j.nodes)
                          ELSE json_build_object('backend', j.backend_req, 'gpus', j.gpus,
                                                 'nodes', j.nodes, 'gpu_memory_gb', j.gpu_memory_gb)
                     END,
        'timeout_s', j.timeout_s,
        'max_attempts', j.max_attempts,
        'attempts', j.attempts,
        'preemptions', j.preemptions,
        'cancel_requested', j.cancel_requested,
        'node', j.node_name,
        'placement', kowloon_placement(j),
        'backend', j.backend,
        'info', j.info,
        'progress', j.progress,
        'usage', j.usage,
        'exit_code', j.exit_code,
        'logs', CASE WHEN j.kind = 'task' THEN '/v1/jobs/' || j.id || '/logs' END,
        'created_at', kowloon_ts(j.created_at),
        'started_at', kowloon_ts(j.started_at),
        'finished_at', kowloon_ts(j.finished_at),
        'error', CASE WHEN j.error_code IS NULL THEN NULL
                      ELSE json_build_object('code', j.error_code, 'message', j.error_message) END)
$$;
COMMENT ON FUNCTION kowloon_job_json(jobs) IS
    'the public job object; json so that params keep their exact text';
