-- 006: job parameters keep the exact JSON text the gateway wrote.
-- jsonb stores numbers as numeric and prints them without an exponent, so a
-- float parameter of 1e+19 came back as the integer literal
-- 10000000000000000000, which no int64 JSON reader takes: the job could not
-- be read or dispatched. json keeps the text (the gateway writes it
-- canonically: 17 significant digits, an exponent where needed), and the
-- job object is built with json_build_object, which embeds json values
-- verbatim.
ALTER TABLE jobs ALTER COLUMN params TYPE json USING params::json;
COMMENT ON COLUMN jobs.params IS
    'kernel parameters as the gateway wrote them (json, not jsonb: numbers keep their exact text)';

DROP FUNCTION kowloon_job_json(jobs);
CREATE FUNCTION kowloon_job_json(j jobs) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', j.id,
        'state', j.state,
        'kernel', j.kernel,
        'params', j.params,
        'priority', j.priority,
        'timeout_s', j.timeout_s,
        'max_attempts', j.max_attempts,
        'attempts', j.attempts,
        'resources', json_build_object('backend', j.backend_req, 'gpus', j.gpus),
        'labels', j.labels,
        'node', j.node_name,
        'backend', j.backend,
        'info', j.info,
        'cancel_requested', j.cancel_requested,
        'error', CASE WHEN j.error_code IS NULL THEN NULL
                      ELSE json_build_object('code', j.error_code, 'message', j.error_message) END,
        'created_at', kowloon_ts(j.created_at),
        'started_at', kowloon_ts(j.started_at),
        'finished_at', kowloon_ts(j.finished_at))
$$;
COMMENT ON FUNCTION kowloon_job_json(jobs) IS
    'the public job object; json so that params keep their exact text';

-- Rows written before this migration may hold a float parameter as an
-- integer literal past int64 (jsonb's rendering of 1e+19); give those back
-- their float form, which PostgreSQL writes shortest-exact ("1e+19").
UPDATE jobs SET params = (
    SELECT json_object_agg(p.key,
               CASE WHEN json_typeof(p.value) = 'number' AND p.value::text ~ '^-?[0-9]{19,}$'
                    THEN to_json(p.value::text::float8) ELSE p.value END)
    FROM json_each(jobs.params) p)
WHERE params::text ~ '[0-9]{19,}';
