/* quota.h — a tenant's blob quota (--blob-quota-mb) as the API applies it.
 * Every blob byte a tenant causes to be stored counts: its uploads, its
 * multipart parts, the inline inputs that become blobs at submit, and its
 * jobs' outputs; each blob once per tenant, however it holds it (its own
 * reference or its jobs'; 021_quota_retention.sql keeps the count). Bytes
 * that stream in are checked against the room read at the head and cut off
 * as soon as they pass it; the count PostgreSQL keeps is checked again when
 * a blob is recorded. Small tensors kept in a job's row (at most 64 KiB
 * each) are not blob bytes and go with the job. */
#ifndef GW_QUOTA_H
#define GW_QUOTA_H

#include <stdint.h>

#include "gw.h"
#include "svc_http.h"

/* The room of a tenant without a quota. */
#define GW_QUOTA_NONE UINT64_MAX

/* The quota in bytes; 0: none. */
uint64_t gw_quota_bytes(const gw_app *app);
/* What a tenant charged used bytes may still add: 0 when at or past the
 * quota, GW_QUOTA_NONE without one. */
uint64_t gw_quota_room(const gw_app *app, uint64_t used);
/* Reads the tenant's bytes now (*used; 0 without a quota, which asks
 * nothing) and its *room. 0, or -1 after replying 503. */
int gw_quota_read(svc_req *req, int64_t tenant_id, uint64_t *used, uint64_t *room);
/* Replies 413 quota_exceeded with the message, and in the body
 * quota_bytes, used_bytes and remaining_bytes (from used). */
int gw_reply_quota(svc_req *req, const gw_app *app, uint64_t used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
