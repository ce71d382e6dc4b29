-- 012_usage: what each job used and what it cost, recorded once when the
-- job ends after running (succeeded, failed, timed out, cancelled while
-- running), kept beside the job so that GET /v1/usage sums rows of one
-- table through one index. json, not jsonb: the object keeps the order it
-- was written in (queue, run, resources, bytes, cost), and the sums read
-- it with ->> all the same.
ALTER TABLE jobs ADD COLUMN usage json;
COMMENT ON COLUMN jobs.usage IS
    'set when a job that ran ends: queue_s, run_s, backend, gpus, gpu_model, gpu_s, cpu_s, bytes_in, bytes_out, cost, currency; NULL for a job that never ran';
-- the usage query: one tenant's ended jobs in a time range
CREATE INDEX jobs_usage ON jobs (tenant_id, finished_at) WHERE usage IS NOT NULL;

-- kowloon_usage: in sql/objects.sql now, re-applied at every start.

-- The job object, now with its usage (null until a job that ran ends),
-- after what the kernel reported and before the timestamps: 011's order.
-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
