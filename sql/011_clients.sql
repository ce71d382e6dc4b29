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
-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
