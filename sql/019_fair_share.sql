-- 019_fair_share: a tenant's weight in the scheduler's fair share, and
-- what each node last said of its devices (heartbeats).
ALTER TABLE tenants ADD COLUMN weight real NOT NULL DEFAULT 1 CHECK (weight >= 0.001 AND weight <= 1000000);
COMMENT ON COLUMN tenants.weight IS
    'fair share: tenants with ready jobs are served in turn by what they run per unit of weight';
ALTER TABLE nodes ADD COLUMN gpu_state jsonb;
COMMENT ON COLUMN nodes.gpu_state IS
    'the last heartbeat''s device state: per GPU {index, memory_total, memory_free, util} where NVML '
    'answers; on CPU nodes {cores, load1}';

-- kowloon_tenant_json: in sql/objects.sql now, re-applied at every start.
