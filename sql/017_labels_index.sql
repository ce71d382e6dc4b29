-- 017_labels_index: the labels index takes each job's entries as they come.
-- Every state change of a job is a new row version and so new entries in
-- every index of jobs, the GIN index of labels included. With GIN's
-- pending list (fastupdate) those entries pile up until one unlucky
-- statement merges the whole list (4 MB) into the index: a submit or a
-- result that took a hundred times longer than its neighbours, and a
-- backlog of labelled jobs drained at half the rate of unlabelled ones.
-- Entered directly, each costs a little and none stalls.
ALTER INDEX jobs_labels SET (fastupdate = off);
