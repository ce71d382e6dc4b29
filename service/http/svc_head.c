/* svc_head.c — request head checks and the client's address (svc_head.h),
 * on libmicrohttpd's view of the head: its header list, its query
 * arguments (already split and %-decoded) and its connection info. */
#include "svc_head.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "svc_util.h"

/* ---- the client ------------------------------------------------------- */

void svc_head_peer(struct MHD_Connection *conn, char *out, size_t len)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, len, "unknown");
    if (ci == NULL || ci->client_addr == NULL)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)len);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len);
}

typedef struct {
    char buf[1024];
    size_t len;
} xff_join;

static enum MHD_Result join_xff(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    (void)kind;
    xff_join *x = cls;
    if (key == NULL || value == NULL || strcasecmp(key, "X-Forwarded-For") != 0)
        return MHD_YES;
    int n = snprintf(x->buf + x->len, sizeof x->buf - x->len, "%s%s", x->len ? "," : "", value);
    if (n < 0 || (size_t)n >= sizeof x->buf - x->len) {
        /* longer than a real chain: keep its right end, which is what is read */
        size_t vlen = strlen(value), keep = sizeof x->buf - 1;
        snprintf(x->buf, sizeof x->buf, "%s", value + (vlen > keep ? vlen - keep : 0));
        x->len = strlen(x->buf);
        return MHD_YES;
    }
    x->len += (size_t)n;
    return MHD_YES;
}

void svc_head_client(struct MHD_Connection *conn, const svc_cidrs *trusted, char *out, size_t len)
{
    char peer[INET6_ADDRSTRLEN];
    svc_head_peer(conn, peer, sizeof peer);
    if (svc_cidrs_count(trusted) == 0) {
        snprintf(out, len, "%s", peer);
        return;
    }
    xff_join x = {.len = 0};
    x.buf[0] = '\0';
    MHD_get_connection_values(conn, MHD_HEADER_KIND, join_xff, &x);
    svc_addr_client(trusted, peer, x.len > 0 ? x.buf : NULL, out, len);
}

/* ---- checks ----------------------------------------------------------- */

typedef struct {
    const char *name;
    int n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    (void)value;
    header_count *hc = cls;
    if (key != NULL && strcasecmp(key, hc->name) == 0)
        hc->n++;
    return MHD_YES;
}

static int header_times(struct MHD_Connection *conn, const char *name)
{
    header_count hc = {name, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &hc);
    return hc.n;
}

/* Fills out; returns 1. */
static int refuse(svc_head_refusal *out, int status, const char *code, const char *field,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int refuse(svc_head_refusal *out, int status, const char *code, const char *field,
                  const char *fmt, ...)
{
    out->status = status;
    out->code = code;
    snprintf(out->field, sizeof out->field, "%s", field != NULL ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->message, sizeof out->message, fmt, ap);
    va_end(ap);
    return 1;
}

/* Refuses a request head that is too large or whose body length is
 * ambiguous: two Content-Lengths (MHD reads the first), Content-Length
 * beside Transfer-Encoding (MHD follows the latter), or a transfer coding
 * other than chunked (MHD would read the body until the connection
 * closes). MHD itself answers a malformed Content-Length with 400 and one
 * over 2^64 with 413. */
static int refuse_size_framing(struct MHD_Connection *conn, const svc_head_facts *f,
                               svc_head_refusal *out)
{
    if (f->too_many_args)
        return refuse(out, 414, "uri_too_long", NULL,
                      "the request target has more than %d query parameters", f->max_args);
    if (f->max_header > 0 && f->raw_len > f->max_header)
        return refuse(out, 414, "uri_too_long", NULL,
                      "the request target takes %zu bytes, over the limit of %zu", f->raw_len,
                      f->max_header);
    if (f->max_header > 0) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        if (ci != NULL && ci->header_size > f->max_header)
            return refuse(out, 431, "headers_too_large", NULL,
                          "the request line and headers take %zu bytes, over the limit of %zu",
                          ci->header_size, f->max_header);
    }
    int ncl = header_times(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
    int nte = header_times(conn, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *why = NULL;
    if (ncl > 1)
        why = "more than one Content-Length header";
    else if (nte > 0 && ncl > 0)
        why = "both Content-Length and Transfer-Encoding";
    else if (nte > 1 || (te != NULL && strcasecmp(te, "chunked") != 0))
        why = "a transfer coding other than chunked";
    return why != NULL ? refuse(out, 400, "bad_request", NULL, "the request has %s", why) : 0;
}

/* 1 if s is well-formed UTF-8, as jansson and PostgreSQL require. */
static int utf8_valid(const char *s)
{
    return svc_utf8_valid(s, strlen(s));
}

/* 1 if name is an RFC 9110 token (what a header field name must be). */
static int is_token(const char *name)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    return name[0] != '\0' && strspn(name, tchar) == strlen(name);
}

/* 1 if name is longer than one of the headers that frame a request but
 * starts with it: libmicrohttpd 0.9.75 appends an obsolete line folding
 * ("Transfer-Encoding: identity\r\n chunked") to the header's name, so a
 * folded framing header would silently vanish here while a proxy in front
 * reads it. */
static int is_folded_framing(const char *name)
{
    static const char *const framing[] = {"Transfer-Encoding", "Content-Length", "Host", NULL};
    for (int i = 0; framing[i] != NULL; i++) {
        size_t n = strlen(framing[i]);
        if (strlen(name) > n && strncasecmp(name, framing[i], n) == 0)
            return 1;
    }
    return 0;
}

static enum MHD_Result find_bad_name(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    (void)value;
    const char **bad = cls;
    if (key != NULL && is_token(key) && !is_folded_framing(key))
        return MHD_YES;
    *bad = key != NULL ? key : "";
    return MHD_NO;
}

/* Refuses what a proxy in front could read differently from us (request
 * smuggling) and what would silently change meaning: an HTTP/1.1 request
 * without exactly one Host (RFC 9112 3.2), a header name that is not a
 * token (libmicrohttpd keeps "Transfer-Encoding " with its space, so the
 * header would be ignored here and obeyed elsewhere), and a NUL (%00) in
 * the target, which decoding would turn into a silent truncation of the
 * path or of a query value. */
static int refuse_syntax(struct MHD_Connection *conn, const svc_head_facts *f,
                         svc_head_refusal *out)
{
    const char *bad = NULL;
    int hosts = header_times(conn, MHD_HTTP_HEADER_HOST);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, find_bad_name, &bad);
    if (bad != NULL)
        return refuse(out, 400, "bad_request", NULL,
                      "header name '%.64s' is not a token, or a header was folded over "
                      "lines (no spaces before the colon, no line folding)", bad);
    if (hosts > 1 || (f->http11 && hosts == 0))
        return refuse(out, 400, "bad_request", NULL,
                      "an HTTP/1.1 request needs exactly one Host header");
    if (f->raw_nul)
        return refuse(out, 400, "bad_request", NULL,
                      "the request target contains a NUL character (%%00)");
    return 0;
}

typedef struct {
    const char *bad; /* name of the first query parameter that is not UTF-8 */
} query_check;

static enum MHD_Result check_query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    query_check *qc = cls;
    if ((key != NULL && !utf8_valid(key)) || (value != NULL && !utf8_valid(value))) {
        qc->bad = key != NULL && utf8_valid(key) ? key : "";
        return MHD_NO;
    }
    return MHD_YES;
}

/* Handlers get text that is UTF-8 throughout, so that no path or query
 * value can fail later in jansson or PostgreSQL (a 5xx, or a filter
 * silently dropped). */
static int refuse_non_utf8(struct MHD_Connection *conn, const svc_head_facts *f,
                           svc_head_refusal *out)
{
    if (!utf8_valid(f->path))
        return refuse(out, 404, "not_found", NULL, "no such resource (path not UTF-8)");
    query_check qc = {NULL};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, check_query_arg, &qc);
    if (qc.bad == NULL)
        return 0;
    return refuse(out, 400, "invalid_argument", qc.bad[0] ? qc.bad : NULL,
                  "query parameter %.60s is not valid UTF-8", qc.bad[0] ? qc.bad : "(name)");
}

int svc_head_refuse(struct MHD_Connection *conn, const svc_head_facts *f, svc_head_refusal *out)
{
    memset(out, 0, sizeof *out);
    return refuse_size_framing(conn, f, out) || refuse_syntax(conn, f, out) ||
           refuse_non_utf8(conn, f, out);
}
