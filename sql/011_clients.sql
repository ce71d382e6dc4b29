-- 011_idempotency: submits carrying an Idempotency-Key (IETF httpapi
-- idempotency-key draft). The first submit of a key records its job and the
-- fingerprint of its request here, in the same statement that inserts the
-- job; a later submit of the same key by the same tenant within 24 hours
-- gets that job back (same fingerprint) or 422 (another one). The primary
-- key makes concurrent duplicates, on one gateway or several, wait for the
-- first and find its job.
-- No foreign keys: jobs and tenants are never deleted, and each check
-- would cost every keyed submit (the SDK's all are) a trigger in the
-- batch's statement.
CREATE TABLE job_idempotency (
    tenant_id   bigint NOT NULL,
    key         text NOT NULL,
    body_hash   bytea NOT NULL,
    job_id      uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
COMMENT ON TABLE job_idempotency IS
    'Idempotency-Key of a submit: which job it made; kept 24 hours, then removed by the retention pass';
COMMENT ON COLUMN job_idempotency.body_hash IS
    'SHA-256 of the job as the gateway resolved it (kernel, params with defaults, resources, labels, inputs'' bytes), so JSON spelling and tensor encoding do not matter';
-- the retention pass deletes the oldest first
CREATE INDEX job_idempotency_created ON job_idempotency (created_at);

-- The job object in an order a reader follows: what it is (id, state,
-- kernel, params, labels), how it was asked to run, where and how it ran,
-- when, and last what went wrong. Same members as before (006); json, not
-- jsonb, so the order and params' exact text are kept. api_jobs.c writes a
-- submit's 202 in the same order.
CREATE OR REPLACE FUNCTION kowloon_job_json(j jobs) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', j.id,
        'state', j.state,
        'kernel', j.kernel,
        'params', j.params,
        'labels', j.labels,
        'priority', j.priority,
        'resources', json_build_object('backend', j.backend_req, 'gpus', j.gpus),
        'timeout_s', j.timeout_s,
        'max_attempts', j.max_attempts,
        'attempts', j.attempts,
        'cancel_requested', j.cancel_requested,
        'node', j.node_name,
        'backend', j.backend,
        'info', j.info,
        'created_at', kowloon_ts(j.created_at),
        'started_at', kowloon_ts(j.started_at),
        'finished_at', kowloon_ts(j.finished_at),
        'error', CASE WHEN j.error_code IS NULL THEN NULL
                      ELSE json_build_object('code', j.error_code, 'message', j.error_message) END)
$$;
