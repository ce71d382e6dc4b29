-- 001: tenants, API keys, nodes, jobs with their inputs, results and events.

CREATE TABLE tenants (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id          bigserial PRIMARY KEY,
    tenant_id   bigint NOT NULL REFERENCES tenants(id),
    key_hash    bytea NOT NULL UNIQUE,
    key_prefix  text NOT NULL,
    admin       boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
COMMENT ON COLUMN api_keys.key_hash IS 'SHA-256 of the whole key; the key itself is never stored';
COMMENT ON COLUMN api_keys.key_prefix IS 'first characters of the key, to recognise it in listings';

CREATE TABLE nodes (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text NOT NULL UNIQUE,
    url             text NOT NULL,
    backend         text NOT NULL CHECK (backend IN ('cpu', 'cuda')),
    backend_reason  text NOT NULL DEFAULT '',
    gpus            jsonb NOT NULL DEFAULT '[]',
    slots           integer NOT NULL CHECK (slots > 0),
    kernels         jsonb NOT NULL DEFAULT '[]',
    running         integer NOT NULL DEFAULT 0,
    state           text NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'down')),
    registered_at   timestamptz NOT NULL DEFAULT now(),
    last_heartbeat  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON COLUMN nodes.running IS 'runs the node reported in its last heartbeat';

CREATE TABLE jobs (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq             bigserial NOT NULL UNIQUE,
    tenant_id       bigint NOT NULL REFERENCES tenants(id),
    kernel          text NOT NULL,
    params          jsonb NOT NULL,
    priority        smallint NOT NULL CHECK (priority BETWEEN 0 AND 9),
    timeout_s       integer NOT NULL,
    max_attempts    integer NOT NULL,
    backend_req     text NOT NULL CHECK (backend_req IN ('any', 'cpu', 'cuda')),
    gpus            integer NOT NULL,
    labels          jsonb NOT NULL DEFAULT '{}',
    state           text NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    attempts        integer NOT NULL DEFAULT 0,
    node_id         uuid,
    node_name       text,
    backend         text,
    cancel_requested boolean NOT NULL DEFAULT false,
    error_code      text,
    error_message   text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at      timestamptz,
    finished_at     timestamptz
);
COMMENT ON COLUMN jobs.seq IS 'insertion order: the ready queue''s tie-break and the list cursor';
COMMENT ON COLUMN jobs.attempts IS 'dispatches so far; a node''s result counts only for the current attempt';
CREATE INDEX jobs_tenant_seq ON jobs (tenant_id, seq DESC);
CREATE INDEX jobs_active ON jobs (state) WHERE state IN ('queued', 'running');
CREATE INDEX jobs_node_running ON jobs (node_id) WHERE state = 'running';
CREATE INDEX jobs_labels ON jobs USING gin (labels jsonb_path_ops);

CREATE TABLE job_inputs (
    job_id  uuid PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    meta    jsonb NOT NULL,
    data    bytea NOT NULL
);
COMMENT ON TABLE job_inputs IS 'all input tensors of a job, concatenated; meta lists name, dtype, shape, offset, nbytes';

CREATE TABLE job_results (
    job_id      uuid PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    meta        jsonb NOT NULL,
    data        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE job_results IS 'one row per succeeded job: the primary key makes a second result impossible';

CREATE TABLE job_events (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    state       text NOT NULL,
    attempt     integer NOT NULL,
    node_name   text,
    detail      text,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX job_events_job ON job_events (job_id, id);

-- The public job object is built here, in one place, so every endpoint that
-- returns a job returns the same shape.
-- kowloon_ts: in sql/objects.sql now, re-applied at every start.

-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
