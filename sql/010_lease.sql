-- 010_lease: runs travel to nodes by lease. The scheduler claims a job for
-- a node (state running, node_id set, leased_at NULL); the node's long poll
-- takes it (leased_at set) and later reports how it ended. A cancel asked
-- for a leased run is handed to its node once (cancel_sent).
ALTER TABLE jobs ADD COLUMN leased_at timestamptz;
ALTER TABLE jobs ADD COLUMN cancel_sent boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN jobs.leased_at IS 'when the node''s lease poll took the current attempt; NULL while it waits for the node';
COMMENT ON COLUMN jobs.cancel_sent IS 'a cancel of the current attempt was handed to its node';
-- what a node's poll looks for: its runs not taken yet, and cancels to hand out
CREATE INDEX jobs_node_unleased ON jobs (node_id, seq) WHERE state = 'running' AND leased_at IS NULL;
CREATE INDEX jobs_node_cancel ON jobs (node_id)
    WHERE state = 'running' AND cancel_requested AND NOT cancel_sent;
-- runs past their deadline, found by the reaper without a scan of all running jobs
CREATE INDEX jobs_running_started ON jobs (started_at) WHERE state = 'running';
-- runs that were running before this migration were dispatched the old way:
-- the node already has them
UPDATE jobs SET leased_at = started_at WHERE state = 'running';
-- the reconciler pages through queued jobs in seq order
CREATE INDEX jobs_queued_seq ON jobs (seq) WHERE state = 'queued';
-- tensor bytes are floats that do not compress: store them out of line
-- without trying (pglz spent more than the rest of a small job's result)
ALTER TABLE job_inputs ALTER COLUMN data SET STORAGE EXTERNAL;
ALTER TABLE job_results ALTER COLUMN data SET STORAGE EXTERNAL;
