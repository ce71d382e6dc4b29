-- 004: retries wait out an exponential back-off before they are placed again.
ALTER TABLE jobs ADD COLUMN not_before timestamptz;
COMMENT ON COLUMN jobs.not_before IS
    'a re-queued job is not placed before this time (back-off with jitter); NULL: at once';
