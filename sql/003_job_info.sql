-- 003: what a kernel said of its run beyond its tensors (gemm: the
-- precision that actually ran), shown on the job and its result.
ALTER TABLE jobs ADD COLUMN info jsonb NOT NULL DEFAULT '{}';
COMMENT ON COLUMN jobs.info IS 'key/value facts the kernel reported for the succeeded attempt';

-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
