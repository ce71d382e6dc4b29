-- 003: what a kernel said of its run beyond its tensors (gemm: the
-- precision that actually ran), shown on the job and its result.
ALTER TABLE jobs ADD COLUMN info jsonb NOT NULL DEFAULT '{}';
COMMENT ON COLUMN jobs.info IS 'key/value facts the kernel reported for the succeeded attempt';

CREATE OR REPLACE FUNCTION kowloon_job_json(j jobs) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', j.id,
        'state', j.state,
        'kernel', j.kernel,
        'params', j.params,
        'priority', j.priority,
        'timeout_s', j.timeout_s,
        'max_attempts', j.max_attempts,
        'attempts', j.attempts,
        'resources', jsonb_build_object('backend', j.backend_req, 'gpus', j.gpus),
        'labels', j.labels,
        'node', j.node_name,
        'backend', j.backend,
        'info', j.info,
        'cancel_requested', j.cancel_requested,
        'error', CASE WHEN j.error_code IS NULL THEN NULL
                      ELSE jsonb_build_object('code', j.error_code, 'message', j.error_message) END,
        'created_at', kowloon_ts(j.created_at),
        'started_at', kowloon_ts(j.started_at),
        'finished_at', kowloon_ts(j.finished_at))
$$;
