-- 024: job_ranks also records a single-node job's run left on a node that
-- was marked down (it may be alive and still running it): that row holds
-- the run's devices until the node stops listing it, registers again or
-- leaves (gateway/store/store.c, ST_JOB_REQUEUE). Only the table's
-- comment changes.
COMMENT ON TABLE job_ranks IS 'one row per node of each attempt of a multi-node job, and one for a single-node job''s run left on a node marked down: where the ranks ran and how that part ended';
