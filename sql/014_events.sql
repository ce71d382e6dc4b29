-- 014_events: job_events as the log Server-Sent Events streams read.
--
-- Streams resume from the id of the last event a client saw, so an event
-- must never become visible with an id below one already handed out. A
-- bigserial id is taken before its transaction commits, so a reader can
-- see id 7 committed while id 6 is still in flight. The gateway hands out
-- an event only once every id up to it is settled (gateway/events.c): it
-- notes the sequence's last value L, then the next xid to be assigned N,
-- and reads up to L once a later snapshot's xmin has reached N. That needs
-- every event's transaction to hold its xid before it draws its id (else a
-- transaction could draw an id below L and get an xid above N), which this
-- default guarantees whatever statement inserts the row.
CREATE FUNCTION kowloon_event_id() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('job_events_id_seq') END
$$;
COMMENT ON FUNCTION kowloon_event_id() IS
    'the next job_events id, drawn only after the transaction has its xid (see 014_events.sql)';
ALTER TABLE job_events ALTER COLUMN id SET DEFAULT kowloon_event_id();

-- The last progress a running job's kernel reported (train_mlp: epoch and
-- loss; kmeans: iteration and inertia): {"fraction": 0..1, ...}. Written
-- in batches from nodes' reports; streamed as `event: progress`, which is
-- not a job_events row.
ALTER TABLE jobs ADD COLUMN progress jsonb;
COMMENT ON COLUMN jobs.progress IS
    'the last progress its kernel reported: {"fraction": 0..1, kernel-specific numbers}; NULL before any';

DROP FUNCTION IF EXISTS kowloon_job_json(jobs);
-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
