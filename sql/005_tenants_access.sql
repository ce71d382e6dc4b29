-- 005: per-tenant limits (rate and quotas), node drain, and the indexes that
-- keep the quota checks and key revocation cheap.

ALTER TABLE tenants
    ADD COLUMN rate_rps    integer CHECK (rate_rps >= 0),
    ADD COLUMN rate_burst  integer CHECK (rate_burst >= 0),
    ADD COLUMN max_queued  integer CHECK (max_queued >= 0),
    ADD COLUMN max_running integer CHECK (max_running >= 0);
COMMENT ON COLUMN tenants.rate_rps IS
    'requests per second per API key of this tenant (token refill rate); NULL: the gateway''s --rate-limit-rps; 0: unlimited';
COMMENT ON COLUMN tenants.rate_burst IS
    'token bucket size per API key; NULL: the gateway''s --rate-limit-burst; 0: the rate, at least 1';
COMMENT ON COLUMN tenants.max_queued IS
    'most queued jobs a submit may find; NULL: the gateway''s --max-queued-per-tenant; 0: unlimited';
COMMENT ON COLUMN tenants.max_running IS
    'most running jobs the scheduler places; NULL: the gateway''s --max-running-per-tenant; 0: unlimited';

ALTER TABLE nodes ADD COLUMN draining boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN nodes.draining IS
    'set by an admin (POST /v1/nodes/{id}/drain): no new runs are placed here; survives re-registration';

-- Quota checks count a tenant's queued or running jobs on every submit and
-- placement: an index-only range of this partial index, bounded by the limit.
CREATE INDEX jobs_tenant_active ON jobs (tenant_id, state) WHERE state IN ('queued', 'running');
CREATE INDEX api_keys_prefix_active ON api_keys (key_prefix) WHERE revoked_at IS NULL;

-- The tenant object of the admin API, built in one place like the job's.
-- kowloon_tenant_json: in sql/objects.sql now, re-applied at every start.
