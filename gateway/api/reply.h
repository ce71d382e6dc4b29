/* reply.h — the gateway's "not now" replies, one shape for each: 503 when a
 * store it needs cannot be asked (and a store call's failure as a reply), 429 with the Retry-After of a wait (rate
 * limits, failed authentications, quotas). Below auth.c and limits.c, which
 * both answer with them. */
#ifndef GW_REPLY_H
#define GW_REPLY_H

#include <stdint.h>

#include "gw_verr.h"
#include "svc_http.h"

/* Replies 503 unavailable naming the store that failed, with Retry-After. */
int gw_reply_unavailable(svc_req *req, const char *what);

/* The reply to a store call's failure rc: -ENOENT 404 "no such <what>",
 * -EIO 503 (PostgreSQL, as gw_reply_unavailable), anything else 500. */
int gw_reply_store_error(svc_req *req, int rc, const char *what);

/* Replies with a request's error detail (gw_verr.h): its status, the code
 * invalid_argument (internal for a 500), its field when it names one. */
int gw_reply_verr(svc_req *req, const gw_verr *e);

/* The Retry-After of a wait of wait_ms: whole seconds, rounded up, >= 1,
 * at most a day. */
int gw_retry_after_s(int64_t wait_ms);

/* Replies 429 with error code and the message, and Retry-After: retry_s. */
int gw_reply_too_many(svc_req *req, const char *code, int retry_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
