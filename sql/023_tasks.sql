-- 023_tasks: tasks (issue 18), jobs that run the tenant's own program in a
-- container: what they run, how they ended, their logs; which images a
-- tenant may run; what engine each node has.
ALTER TABLE jobs ADD COLUMN kind text NOT NULL DEFAULT 'kernel' CHECK (kind IN ('kernel', 'task'));
COMMENT ON COLUMN jobs.kind IS
    'kernel: a catalog kernel (kernel, params, job_inputs); task: the tenant''s program (task_run), '
    'whose kernel column reads ''task''';
ALTER TABLE jobs ADD COLUMN task json;
COMMENT ON COLUMN jobs.task IS
    'a task as the job object shows it: {image, command, env, workdir, network} (files and inputs '
    'are not echoed); json, not jsonb, so that its members keep the order the submit''s answer has';
ALTER TABLE jobs ADD COLUMN task_run jsonb;
COMMENT ON COLUMN jobs.task_run IS
    'a task as a node leases it (docs/tasks_contract.md section 2): inline files and inputs in '
    'base64, the rest as blob references with their size, limits in bytes';
ALTER TABLE jobs ADD COLUMN exit_code int;
COMMENT ON COLUMN jobs.exit_code IS 'a task''s exit status as its last attempt reported it (128+n: signal n)';
ALTER TABLE jobs ADD COLUMN logs jsonb;
COMMENT ON COLUMN jobs.logs IS
    'the whole log of each part of the last attempt that reported one, as the node stored it: '
    '{"<part>": {"blob", "bytes", "dropped", "attempt"}}; authoritative once the part ended';

-- The live log of a running task, as nodes ship it (POST
-- /v1/cluster/nodes/{id}/logs): contiguous chunks per (attempt, part) by
-- byte offset, so that a batch sent again changes nothing. Kept in
-- PostgreSQL rather than Redis: it must outlive the job's end until the
-- node's log blob is recorded, a gateway restart, and a Redis flush, and
-- GET /v1/jobs/{id}/logs reads it with the tenant check in one statement.
CREATE TABLE job_log_chunks (
    job_id   uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt  int NOT NULL,
    part     int NOT NULL CHECK (part BETWEEN 0 AND 63),
    off      bigint NOT NULL CHECK (off >= 0),
    data     bytea NOT NULL,
    PRIMARY KEY (job_id, attempt, part, off)
);
COMMENT ON TABLE job_log_chunks IS
    'live task logs: chunk (job, attempt, part) at byte offset off; a part''s chunks are contiguous '
    'from 0 and capped by the gateway (--task-log-mb)';

ALTER TABLE tenants ADD COLUMN task_images text[];
COMMENT ON COLUMN tenants.task_images IS
    'image patterns (fnmatch) the tenant''s tasks may name; NULL: the gateway''s --task-images';
ALTER TABLE tenants ADD COLUMN task_egress boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN tenants.task_egress IS 'the tenant''s single-node tasks may ask network "egress"';

ALTER TABLE nodes ADD COLUMN tasks jsonb;
COMMENT ON COLUMN nodes.tasks IS
    'the node''s task engine as it last said (registration, heartbeats): {engine, version, images} '
    'or {engine: "none", reason}; NULL: a node that says nothing of tasks (runs none)';

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

-- The job object (018_gangs.sql's) with kind, task, exit_code and logs:
-- kernel is null for a task. api_jobs.c's job_json_queued writes a queued
-- job's first members in this order.
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
