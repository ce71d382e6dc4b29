-- 022_webhook_fairness: the delivery worker claims by tenant, and ended
-- deliveries are trimmed.
--
-- A claim walks the tenants that have pending deliveries (one probe of this
-- index per tenant, a skip scan) and takes each one's oldest due ones up to
-- its in-flight cap, so one tenant's backlog, however long, costs another
-- tenant's delivery nothing to find.
CREATE INDEX webhook_deliveries_tenant_due ON webhook_deliveries (tenant_id, next_at)
    WHERE state = 'pending';
-- What --webhook-retention-s trims: delivered and failed deliveries, the
-- oldest first (their attempts go with them, ON DELETE CASCADE).
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (finished_at)
    WHERE state <> 'pending';
