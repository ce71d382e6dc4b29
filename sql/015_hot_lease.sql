-- 015_hot_lease: a node's poll taking its runs (leased_at set) no longer
-- writes a new entry in every index of jobs. leased_at leaves every index
-- predicate, so that update is a heap-only (HOT) one: the poll finds a
-- node's unleased runs through jobs_node_running (a node has few running
-- runs) and filters on leased_at there. Pages keep a fifth free, so a HOT
-- update finds room beside its row.
DROP INDEX IF EXISTS jobs_node_unleased;
ALTER TABLE jobs SET (fillfactor = 80);
