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

DROP FUNCTION IF EXISTS kowloon_job_json(jobs);
-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.

-- Rows written before this migration may hold a float parameter as an
-- integer literal past int64 (jsonb's rendering of 1e+19); give those back
-- their float form, which PostgreSQL writes shortest-exact ("1e+19").
UPDATE jobs SET params = (
    SELECT json_object_agg(p.key,
               CASE WHEN json_typeof(p.value) = 'number' AND p.value::text ~ '^-?[0-9]{19,}$'
                    THEN to_json(p.value::text::float8) ELSE p.value END)
    FROM json_each(jobs.params) p)
WHERE params::text ~ '[0-9]{19,}';
