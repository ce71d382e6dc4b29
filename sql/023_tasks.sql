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

-- kowloon_tenant_json: in sql/objects.sql now, re-applied at every start.

-- The job object (018_gangs.sql's) with kind, task, exit_code and logs:
-- kernel is null for a task. api_jobs.c's job_json_queued writes a queued
-- job's first members in this order.
-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
