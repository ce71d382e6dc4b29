-- 012_usage: what each job used and what it cost, recorded once when the
-- job ends after running (succeeded, failed, timed out, cancelled while
-- running), kept beside the job so that GET /v1/usage sums rows of one
-- table through one index. json, not jsonb: the object keeps the order it
-- was written in (queue, run, resources, bytes, cost), and the sums read
-- it with ->> all the same.
ALTER TABLE jobs ADD COLUMN usage json;
COMMENT ON COLUMN jobs.usage IS
    'set when a job that ran ends: queue_s, run_s, backend, gpus, gpu_model, gpu_s, cpu_s, bytes_in, bytes_out, cost, currency; NULL for a job that never ran';
-- the usage query: one tenant's ended jobs in a time range
CREATE INDEX jobs_usage ON jobs (tenant_id, finished_at) WHERE usage IS NOT NULL;

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
CREATE FUNCTION kowloon_usage(j jobs, ended timestamptz, node jsonb, ran_on text,
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
    'a job''s usage and cost as it ends (see 012_usage.sql)';

-- The job object, now with its usage (null until a job that ran ends),
-- after what the kernel reported and before the timestamps: 011's order.
-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
