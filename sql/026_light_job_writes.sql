-- 026_light_job_writes: fewer writes on the job path. A job writes an event
-- row at its submit, its start and its end, an input row at its submit and
-- a result row at its end; each of these inserts checked its foreign key to
-- jobs (a probe of jobs_pkey and a KEY SHARE lock on the job's row, a
-- write to its page and a WAL record): about 10 µs of PostgreSQL's CPU a
-- row, five a job. Jobs are deleted by one statement shape only (JOBS_DELETE
-- in gateway/store/store.c: the retention pass and DELETE /v1/jobs/{id}),
-- which now deletes these rows itself instead of the cascade. The other
-- tables that refer to jobs (ranks, blob references, outputs, log chunks,
-- webhook deliveries) are written far less often and keep their keys.
ALTER TABLE job_events DROP CONSTRAINT IF EXISTS job_events_job_id_fkey;
ALTER TABLE job_inputs DROP CONSTRAINT IF EXISTS job_inputs_job_id_fkey;
ALTER TABLE job_results DROP CONSTRAINT IF EXISTS job_results_job_id_fkey;
-- jobs_active (state) held the rows jobs_tenant_active (tenant_id, state)
-- holds, under the same predicate: every submit and every start wrote an
-- entry in both. What looked through it (the counts of /metrics) reads
-- jobs_tenant_active whole instead, the same number of entries.
DROP INDEX IF EXISTS jobs_active;
