-- 021_quota_retention: every blob byte a tenant causes to be stored counts
-- toward its quota, and ended jobs can be deleted (DELETE /v1/jobs/{id},
-- and the retention pass past --job-retention-days) with their events,
-- results and blob references; unreferenced bytes are then swept.
--
-- A tenant holds a blob through its own reference (blob_refs: uploaded,
-- a multipart part, an output kept with ?encoding=blob) or through any of
-- its jobs (job_blob_refs: inputs, outputs). It is charged a blob's size
-- once, however many of these it has; two tenants holding the same bytes
-- are each charged (the quota is what a tenant could store alone), though
-- the store keeps the bytes once.

-- The tenant of each job reference, so that the count below can be kept
-- when the job row goes in the same statement.
ALTER TABLE job_blob_refs ADD COLUMN tenant_id bigint;
UPDATE job_blob_refs r SET tenant_id = j.tenant_id FROM jobs j WHERE j.id = r.job_id;
ALTER TABLE job_blob_refs ALTER COLUMN tenant_id SET NOT NULL;
COMMENT ON COLUMN job_blob_refs.tenant_id IS 'the job''s tenant (jobs.tenant_id), for blob_usage';

CREATE TABLE blob_usage (
    tenant_id  bigint NOT NULL,
    blob_id    text NOT NULL,
    size       bigint NOT NULL,
    holders    integer NOT NULL CHECK (holders > 0),
    PRIMARY KEY (tenant_id, blob_id)
);
COMMENT ON TABLE blob_usage IS
    'which blobs each tenant holds and through how many references (its blob_refs row, if any, and '
    'each of its jobs'' job_blob_refs rows); kept by the triggers on those two tables, never written '
    'by the gateway. No foreign keys: a row exists exactly while its references do, and those have '
    'theirs. The row is the lock that decides whether a reference is the tenant''s first to a blob';
COMMENT ON COLUMN blob_usage.size IS 'blobs.size, copied: what the tenant is charged for it';

CREATE TABLE tenant_totals (
    tenant_id     bigint PRIMARY KEY REFERENCES tenants (id),
    blob_bytes    bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE tenant_totals IS
    'the blob bytes a tenant is charged for, kept apart from tenants so that the rows busy writers '
    'lock are not the ones the admin API reads; no row: 0';
COMMENT ON COLUMN tenant_totals.blob_bytes IS
    'sum of blob_usage.size of the tenant: what its blob quota (--blob-quota-mb) is checked against';

-- A table of its own, not a column of tenant_totals: a deletion takes
-- these locks before the blob counts' (which come last, in the triggers),
-- and no other statement takes them, so the two orders never meet.
CREATE TABLE jobs_deleted (
    tenant_id  bigint PRIMARY KEY REFERENCES tenants (id),
    jobs       bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE jobs_deleted IS
    'jobs of a tenant deleted so far (DELETE /v1/jobs/{id}, retention); authentication reads it, and '
    'a gateway''s cache of ended jobs keeps an answer only while it has not changed, so that a job '
    'deleted through one gateway stops being answered by the others within --key-cache-ms';

INSERT INTO blob_usage (tenant_id, blob_id, size, holders)
SELECT h.tenant_id, h.blob_id, b.size, count(*)
FROM (SELECT tenant_id, blob_id FROM blob_refs
      UNION ALL SELECT tenant_id, blob_id FROM job_blob_refs) h
JOIN blobs b ON b.id = h.blob_id
GROUP BY h.tenant_id, h.blob_id, b.size;
INSERT INTO tenant_totals (tenant_id, blob_bytes)
SELECT tenant_id, sum(size) FROM blob_usage GROUP BY tenant_id;

-- kowloon_blob_hold and kowloon_blob_release (what the triggers below
-- call): in sql/objects.sql now, re-applied at every start.

-- kowloon_refs_added and kowloon_refs_removed, and the four triggers on
-- blob_refs and job_blob_refs that call them: in sql/objects.sql now.

-- Usage outlives its job: what a deleted job used is moved here, and GET
-- /v1/usage sums both, so that bills do not change when jobs go.
CREATE TABLE usage_records (
    job_id       uuid PRIMARY KEY,
    tenant_id    bigint NOT NULL REFERENCES tenants (id),
    kernel       text NOT NULL,
    labels       jsonb NOT NULL,
    finished_at  timestamptz NOT NULL,
    usage        json NOT NULL
);
CREATE INDEX usage_records_tenant ON usage_records (tenant_id, finished_at);
COMMENT ON TABLE usage_records IS
    'the usage (jobs.usage) of deleted jobs, with what GET /v1/usage groups by: kept until an '
    'operator removes it (a row is a few hundred bytes; no tensor, no event)';

-- The retention pass walks ended jobs oldest first.
CREATE INDEX jobs_ended ON jobs (finished_at) WHERE state IN ('succeeded', 'failed', 'cancelled');
