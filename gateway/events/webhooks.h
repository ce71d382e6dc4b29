/* webhooks.h — the delivery worker: a thread of every gateway that claims
 * due deliveries from the outbox (webhook_deliveries, filled by PostgreSQL
 * when a job's state changes), POSTs them signed the Standard Webhooks way,
 * and records each attempt; a delivery that fails is tried again with
 * exponential back-off and jitter until --webhook-max-age-s, then failed.
 * Gateways share the work through FOR UPDATE SKIP LOCKED claims; each
 * runs up to --webhook-max-inflight deliveries at once, at most
 * --webhook-tenant-inflight of one tenant's, and deletes ended ones after
 * --webhook-retention-s. */
#ifndef GW_WEBHOOKS_H
#define GW_WEBHOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"

/* Starts the thread; NULL (logged) when it cannot. */
gw_webhooks *gw_webhooks_start(gw_app *app);
/* Stops it and joins it: attempts in flight get a second to end (and are
 * recorded); those still running then are given back unrecorded, due
 * again at once for any gateway. NULL is a no-op. */
void gw_webhooks_stop(gw_webhooks *w);

/* The webhook-signature header's value for a message: "v1," and the base64
 * of HMAC-SHA256("id.timestamp.body") keyed with the secret's bytes (the
 * base64 after "whsec_"). out holds at least 64 bytes. 0, or -1 for a
 * secret that is not whsec_ + base64. */
int gw_webhook_sign(const char *secret, const char *msg_id, int64_t timestamp, const char *body,
                    size_t len, char *out, size_t outlen);

/* Milliseconds before the attempt after attempt number n (1: the first
 * failed): base_ms doubled per attempt up to an hour, times a factor in
 * [0.5, 1) from rnd ("equal jitter", so that receivers that came back are
 * not hit by every delivery at once). */
int64_t gw_webhook_backoff_ms(int base_ms, int n, uint32_t rnd);

#endif
