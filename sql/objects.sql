-- sql/objects.sql — the replaceable objects of the schema, each written
-- once: the functions that render a job and a tenant as the API shows them.
-- The gateway applies it after the migrations at every start (`migrate` and
-- `serve`), in one transaction under the migrations' lock, so a change here
-- is a change to this file alone: no new migration redefines them. Only
-- CREATE OR REPLACE, with the same argument and return types (a function
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
