-- 002: cheaper job rows on the hot paths.

-- to_char is STABLE, not IMMUTABLE: declared IMMUTABLE, kowloon_ts could not
-- be inlined and was planned anew at every call, three times per job object.
CREATE OR REPLACE FUNCTION kowloon_ts(t timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Tensor bytes are floats that do not compress: store them out of line
-- without trying.
ALTER TABLE job_inputs ALTER COLUMN data SET STORAGE EXTERNAL;
ALTER TABLE job_results ALTER COLUMN data SET STORAGE EXTERNAL;
