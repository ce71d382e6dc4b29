-- 013_webhooks: a job may name a webhook; the state changes it asked for
-- are POSTed there, signed with its tenant's secret (Standard Webhooks).
-- The outbox (webhook_deliveries) is written by a trigger on jobs, so a
-- delivery is recorded in the very statement that changes the job's state
-- and writes its job_events row: a crash never loses one nor invents one.
-- The trigger's WHEN clause is evaluated without calling the function, so
-- a job without a webhook pays nothing.
ALTER TABLE jobs ADD COLUMN webhook text;
ALTER TABLE jobs ADD COLUMN webhook_events text[];
COMMENT ON COLUMN jobs.webhook IS 'http(s) URL the job''s state changes are POSTed to; NULL: none';
COMMENT ON COLUMN jobs.webhook_events IS 'the states that are delivered to jobs.webhook';

CREATE TABLE webhook_secrets (
    tenant_id   bigint PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_secrets IS
    'a tenant''s signing secret, whsec_ + base64 of 32 random bytes; made on first use';

CREATE TABLE webhook_deliveries (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    tenant_id   bigint NOT NULL,
    event_id    bigint,
    event       text NOT NULL,
    url         text NOT NULL,
    payload     text NOT NULL,
    state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts    integer NOT NULL DEFAULT 0,
    next_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz
);
COMMENT ON TABLE webhook_deliveries IS 'the webhook outbox: one row per event to deliver';
COMMENT ON COLUMN webhook_deliveries.event_id IS 'the job_events row this delivery reports';
COMMENT ON COLUMN webhook_deliveries.payload IS
    'the body, fixed when the event happened, so every retry sends (and signs) the same bytes';
COMMENT ON COLUMN webhook_deliveries.next_at IS
    'pending: when the next attempt is due; a gateway that claims the delivery moves it past '
    'the attempt''s time-out, so a gateway that dies mid-attempt hands it on, never loses it';
-- what the delivery workers poll, without a scan of delivered rows
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id, id);

CREATE TABLE webhook_attempts (
    delivery_id bigint NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    n           integer NOT NULL,
    at          timestamptz NOT NULL,
    status      integer,
    error       text,
    duration_ms integer NOT NULL,
    PRIMARY KEY (delivery_id, n)
);
COMMENT ON COLUMN webhook_attempts.status IS 'the receiver''s HTTP status; NULL when no answer came';

-- kowloon_webhook_enqueue and the triggers jobs_webhook_insert and
-- jobs_webhook_update that call it: in sql/objects.sql now.
