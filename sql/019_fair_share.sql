-- 019_fair_share: a tenant's weight in the scheduler's fair share, and
-- what each node last said of its devices (heartbeats).
ALTER TABLE tenants ADD COLUMN weight real NOT NULL DEFAULT 1 CHECK (weight >= 0.001 AND weight <= 1000000);
COMMENT ON COLUMN tenants.weight IS
    'fair share: tenants with ready jobs are served in turn by what they run per unit of weight';
ALTER TABLE nodes ADD COLUMN gpu_state jsonb;
COMMENT ON COLUMN nodes.gpu_state IS
    'the last heartbeat''s device state: per GPU {index, memory_total, memory_free, util} where NVML '
    'answers; on CPU nodes {cores, load1}';

CREATE OR REPLACE FUNCTION kowloon_tenant_json(t tenants) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'name', t.name,
        'rate_rps', t.rate_rps,
        'rate_burst', t.rate_burst,
        'max_queued', t.max_queued,
        'max_running', t.max_running,
        'weight', t.weight,
        'created_at', kowloon_ts(t.created_at),
        'queued', (SELECT count(*) FROM jobs j WHERE j.tenant_id = t.id AND j.state = 'queued'),
        'running', (SELECT count(*) FROM jobs j WHERE j.tenant_id = t.id AND j.state = 'running'),
        'keys', (SELECT count(*) FROM api_keys k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL))
$$;
