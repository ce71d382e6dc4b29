-- 027: preemption (--fair-preempt). A running single-node job whose run
-- the scheduler stops to make room for a larger job of its own tenant
-- (a job of over a quarter of its share that took the tenant past it) has
-- preempt set until the node reports the run ended; its job is then
-- queued again at once, and the attempt counts in preemptions, not
-- against max_attempts. Neither column is indexed: setting them keeps the
-- row's update HOT.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS preempt boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS preemptions integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN jobs.preempt IS 'the scheduler stops its run (--fair-preempt): the node''s next lease poll carries a cancel, and its report queues the job again';
COMMENT ON COLUMN jobs.preemptions IS 'attempts stopped by preemption: they do not count against max_attempts';
