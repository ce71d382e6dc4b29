/* reply.c — 503 and 429 replies (reply.h). */
#include "reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int gw_reply_unavailable(svc_req *req, const char *what)
{
    svc_reply_header(req, "Retry-After", "2");
    return svc_reply_error(req, 503, "unavailable", NULL, NULL,
                           "%s is unavailable; retry shortly", what);
}

int gw_reply_store_error(svc_req *req, int rc, const char *what)
{
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such %s", what);
    if (rc == -EIO)
        return gw_reply_unavailable(req, "PostgreSQL");
    return svc_reply_error(req, 500, "internal", NULL, NULL, "internal error (%d)", rc);
}

int gw_retry_after_s(int64_t wait_ms)
{
    if (wait_ms <= 1000)
        return 1;
    if (wait_ms > 86400000)
        return 86400;
    return (int)((wait_ms + 999) / 1000);
}

int gw_reply_too_many(svc_req *req, const char *code, int retry_s, const char *fmt, ...)
{
    char msg[256], ra[16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ra, sizeof ra, "%d", retry_s);
    svc_reply_header(req, "Retry-After", ra);
    return svc_reply_error(req, 429, code, NULL, NULL, "%s", msg);
}

int gw_reply_verr(svc_req *req, const gw_verr *e)
{
    return svc_reply_error(req, e->status, e->status >= 500 ? "internal" : "invalid_argument",
                           e->field[0] ? e->field : NULL, NULL, "%s", e->message);
}
