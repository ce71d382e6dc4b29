-- 002: cheaper job rows on the hot paths.

-- to_char is STABLE, not IMMUTABLE: declared IMMUTABLE, kowloon_ts could not
-- be inlined and was planned anew at every call, three times per job object.
-- kowloon_ts: in sql/objects.sql now, re-applied at every start.

-- Tensor bytes are floats that do not compress: store them out of line
-- without trying.
ALTER TABLE job_inputs ALTER COLUMN data SET STORAGE EXTERNAL;
ALTER TABLE job_results ALTER COLUMN data SET STORAGE EXTERNAL;
