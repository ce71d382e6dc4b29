/* svc_http.c — the HTTP server on libmicrohttpd (svc_http.h). A request
 * lives in one svc_req from the access handler's first call to MHD's
 * completion callback, which frees it whatever happened in between (reply,
 * early error, client gone). Bodies are read raw into our own buffer, never
 * through MHD's post processor (CVE-2023-27371), and capped at max_body
 * (max_json_body for JSON). Each TCP connection has an svc_conn
 * (svc_conns.c) from MHD's connection-start to its connection-close notice:
 * it decides whether the connection is taken and holds its head and body
 * to deadlines that MHD's own idle timeout misses when the client sends a
 * byte now and then (slowloris). The client's address is the peer's, or
 * behind a trusted proxy the one X-Forwarded-For names (svc_addr.c). */
#include "svc_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "svc_addr.h"
#include "svc_conns.h"
#include "svc_head.h"
#include "svc_json.h"
#include "svc_log.h"
#include "svc_tls.h"
#include "svc_util.h"

#define MAX_PARAMS 8
/* Bytes of an over-limit chunked body read and dropped so that its sender
 * still gets a 413 (see on_access); past this the connection is closed. */
#define DRAIN_MAX ((size_t)1 << 20)
/* libmicrohttpd's default memory per connection; it holds the request head. */
#define MHD_POOL_DEFAULT ((size_t)32 << 10)
/* Bytes of pool libmicrohttpd 0.9.75 takes per header or query argument
 * (struct MHD_HTTP_Header, 56 on LP64, with allocation slack). */
#define HEADER_RECORD ((size_t)64)
/* Query arguments a request may carry (more: 414), and the bytes of head
 * per header the connection's pool is sized for (see svc_server_start). */
#define MAX_QUERY_ARGS 64
/* Least memory pool a connection gets (libmicrohttpd's own default is
 * 32 KiB; with max_header set the pool is sized from it). */
#define POOL_MIN ((size_t)16 << 10)
#define HEADER_AVG 32
/* How long a connection over the per-IP limit may take to send its request
 * head (a health check or a node's call; others get 503). */
#define OVER_HEAD_MS 2000
/* Connections an address may open past the per-IP limit for reserved
 * routes (a node's lease poll, heartbeat, reports and fetches), and the
 * share of max_connections such connections may take in all (at least two
 * addresses' allowance: no one address takes it whole). */
#define RESERVED_PER_IP 8
#define RESERVED_SHARE_DIV 8
/* After a request whose body buffer reached this size, free memory is
 * handed back to the system (malloc_trim): see on_completed. */
#define TRIM_BODY_BYTES ((size_t)1 << 20)
/* How long a stopping server waits for the application to answer its
 * suspended requests. */
#define SUSPEND_DRAIN_MS 5000

struct svc_server {
    struct MHD_Daemon *mhd;
    const svc_route *routes;
    size_t max_body, max_json_body, max_big_body;
    svc_json_limits json;    /* depth and values; fields come from the route */
    size_t max_header;       /* 0: no check of our own */
    unsigned per_ip_limit;   /* 0: none */
    svc_authorize_fn authorize;
    void *app;
    atomic_int starting;  /* MHD's log lines go to start_err while set */
    char start_err[256];
    svc_conns *conns;        /* connections, their caps and deadlines */
    svc_cidrs *trusted;      /* proxies whose X-Forwarded-For names the client */
    svc_tls *tls;            /* NULL: plain HTTP */
    /* Suspended requests (svc_req_suspend) the application has not resumed
     * yet; the fields of svc_req that the suspension shares between threads
     * are guarded by susp_mu. */
    pthread_mutex_t susp_mu;
    pthread_cond_t susp_cv;  /* signalled when the list empties */
    svc_req *deferred;
    int ndeferred;
    int susp_closed;         /* stopping: no new suspensions */
    /* svc_server_opts.metrics' families, NULL without it */
    svc_metric *m_requests, *m_duration;
    svc_series *m_conns, *m_suspended;
    struct svc_stream *streams; /* live reply streams (svc_reply_stream_live) */
    int streams_closed;      /* stopping: live streams end */
};

typedef struct reply_header {
    struct reply_header *next;
    char *name, *value;
} reply_header;

struct svc_req {
    svc_server *srv;
    struct MHD_Connection *conn;
    char *method, *path;           /* own copies: logged after MHD resets its pool */
    const svc_route *route;        /* NULL when answered 404/405 */
    int nparams;
    const char *pname[MAX_PARAMS]; /* point into route->pattern, not NUL-ended */
    size_t pname_len[MAX_PARAMS];
    char *pval[MAX_PARAMS];        /* own copies */
    char *body;                    /* NUL-terminated, own */
    size_t body_len, body_cap;
    size_t body_want;              /* bytes the Content-Length says (0: unknown):
                                      the buffer grows to it as they come */
    json_t *json;                  /* own reference */
    reply_header *headers;         /* queued by svc_reply_header */
    void *user;
    void *user_owned;              /* from svc_req_user_alloc, freed with r */
    int started;                   /* the access handler has seen it */
    int http11;                    /* HTTP/1.1 (Host required) */
    int raw_nul;                   /* the raw target has %00 */
    int too_many_args;             /* the raw target has more than MAX_QUERY_ARGS */
    size_t raw_len;                /* bytes of the raw target */
    int status;                    /* 0 until a reply is queued */
    int queued;                    /* 1 if MHD accepted the reply */
    int over_limit;                /* body exceeded max_body; rest discarded */
    int streamed;                  /* the body goes to route->body, unbuffered */
    int body_stopped;              /* the route's body callback said stop */
    int body_cut;                  /* ... and the rest is drained, not read (svc_req_cut_body) */
    void (*on_free)(void *);       /* svc_req_on_free */
    void *on_free_arg;
    size_t drained;                /* bytes discarded since */
    /* Suspension (svc_req_suspend); guarded by srv->susp_mu once deferred. */
    int deferred;                  /* the application answers later */
    int suspended;                 /* MHD_suspend_connection was called */
    int resumed;                   /* svc_req_resume was called (or the stop forced it) */
    int refs;                      /* 1 (the connection) + 1 while deferred */
    struct MHD_Response *pending;  /* the reply held until the connection is resumed */
    svc_req *dprev, *dnext;        /* in srv->deferred */
    int64_t t0;
    struct timespec t0_ts;         /* t0 to the nanosecond, for the latency histogram */
    svc_conn *sc;                  /* the connection's record (may be NULL) */
    char ip[INET6_ADDRSTRLEN];     /* the client: the peer, or whom a trusted proxy names */
};

/* ---- request state ---------------------------------------------------- */

static void req_free(svc_req *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < r->nparams; i++)
        free(r->pval[i]);
    for (reply_header *h = r->headers, *next; h != NULL; h = next) {
        next = h->next;
        free(h->name);
        free(h->value);
        free(h);
    }
    if (r->pending != NULL)
        MHD_destroy_response(r->pending);
    if (r->on_free != NULL)
        r->on_free(r->on_free_arg);
    json_decref(r->json);
    free(r->user_owned);
    free(r->body);
    free(r->method);
    free(r->path);
    free(r);
}

/* Drops one reference to r: the connection's (on_completed) or, for a
 * suspended request, the application's (svc_req_resume); the last frees it.
 * Only a deferred request ever has two, and only then is the lock needed:
 * r->deferred is written on the connection's own thread, before any other
 * thread learns of r. */
static void req_unref(svc_req *r)
{
    if (!r->deferred) {
        req_free(r);
        return;
    }
    pthread_mutex_lock(&r->srv->susp_mu);
    int last = --r->refs <= 0;
    pthread_mutex_unlock(&r->srv->susp_mu);
    if (last)
        req_free(r);
}

/* ---- connections ------------------------------------------------------ */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    svc_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        char peer[INET6_ADDRSTRLEN];
        svc_head_peer(conn, peer, sizeof peer);
        /* without a record the connection goes without deadlines */
        *socket_context = ci != NULL ? svc_conns_open(s->conns, ci->connect_fd, peer) : NULL;
        svc_gauge_add(s->m_conns, 1);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        svc_conns_close(s->conns, *socket_context);
        *socket_context = NULL;
        svc_gauge_add(s->m_conns, -1);
    }
}

/* The svc_conn of an MHD connection; NULL when it has none (on_connection
 * could not allocate one). */
static svc_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* ---- routing ---------------------------------------------------------- */

typedef struct {
    int n;
    const char *name[MAX_PARAMS];
    size_t name_len[MAX_PARAMS];
    const char *val[MAX_PARAMS];
    size_t val_len[MAX_PARAMS];
} captures;

/* 1 if path matches pattern; a {name} segment matches one non-empty
 * segment, a last {name*} the rest of the path, slashes included (a
 * name that is itself a path: a client may send its slashes as %2F, which
 * the server has decoded by now); each is recorded in cap. */
static int path_match(const char *pat, const char *path, captures *cap)
{
    cap->n = 0;
    while (*pat != '\0' && *path != '\0') {
        if (*pat == '{') {
            const char *close = strchr(pat, '}');
            int rest = close != NULL && close > pat + 1 && close[-1] == '*' && close[1] == '\0';
            const char *end = path;
            while (*end != '\0' && (rest || *end != '/'))
                end++;
            if (close == NULL || end == path || cap->n == MAX_PARAMS)
                return 0;
            cap->name[cap->n] = pat + 1;
            cap->name_len[cap->n] = (size_t)(close - pat - 1 - rest);
            cap->val[cap->n] = path;
            cap->val_len[cap->n] = (size_t)(end - path);
            cap->n++;
            pat = close + 1;
            path = end;
        } else if (*pat++ != *path++) {
            return 0;
        }
    }
    return *pat == '\0' && *path == '\0';
}

static int method_match(const char *route_method, const char *method)
{
    return strcmp(route_method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(route_method, "GET") == 0);
}

/* Finds the route for the request and copies its captures; on no match
 * fills allow with the methods the path does accept ("" when none). A path
 * that some route names literally belongs to the literal routes alone, as in
 * OpenAPI: DELETE /v1/nodes/register is 405 (Allow: POST), not a DELETE of
 * the node "register" through /v1/nodes/{id}. */
static const svc_route *route_find(svc_req *r, char *allow, size_t allow_len)
{
    captures cap;
    size_t off = 0;
    int literal = 0;
    allow[0] = '\0';
    for (const svc_route *rt = r->srv->routes; rt != NULL && rt->method != NULL && !literal; rt++)
        literal = strchr(rt->pattern, '{') == NULL && strcmp(rt->pattern, r->path) == 0;
    for (const svc_route *rt = r->srv->routes; rt != NULL && rt->method != NULL; rt++) {
        if ((literal && strchr(rt->pattern, '{') != NULL) || !path_match(rt->pattern, r->path, &cap))
            continue;
        if (method_match(rt->method, r->method)) {
            for (int i = 0; i < cap.n; i++) {
                r->pval[i] = strndup(cap.val[i], cap.val_len[i]);
                if (r->pval[i] == NULL)
                    return NULL;
                r->pname[i] = cap.name[i];
                r->pname_len[i] = cap.name_len[i];
                r->nparams = i + 1;
            }
            return rt;
        }
        size_t ml = strlen(rt->method);
        char *seen = strstr(allow, rt->method);
        int dup = seen != NULL && (seen[ml] == '\0' || seen[ml] == ',');
        if (!dup && off + ml + 3 < allow_len)
            off += (size_t)snprintf(allow + off, allow_len - off, "%s%s", off ? ", " : "", rt->method);
    }
    return NULL;
}

/* ---- replies ---------------------------------------------------------- */

/* Queues buf as the reply. Takes ownership of buf when must_free (freed by
 * MHD after sending, or here on failure); copies it otherwise. */
/* Adds the content type and the queued headers to resp and queues it as
 * the reply; resp is released here (MHD keeps its own reference when it
 * queued it, and then frees what resp owns once it is sent). 0 or -1. */
static int queue_response(svc_req *r, int status, const char *ctype, struct MHD_Response *resp)
{
    r->status = status;
    int ok = MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) == MHD_YES;
    int sniff = 0;
    for (reply_header *h = r->headers; h != NULL; h = h->next) {
        ok &= MHD_add_response_header(resp, h->name, h->value) == MHD_YES;
        sniff |= strcasecmp(h->name, "X-Content-Type-Options") == 0;
    }
    /* Every answer means its Content-Type: a browser must not read JSON or
     * a tenant's bytes as HTML or script. */
    if (!sniff)
        ok &= MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff") == MHD_YES;
    if (r->deferred) {
        /* A suspended connection takes no reply: it is held until the
         * connection's thread sees the resume (flush_pending). */
        pthread_mutex_lock(&r->srv->susp_mu);
        int keep = ok && !r->resumed && r->pending == NULL;
        if (keep)
            r->pending = resp;
        pthread_mutex_unlock(&r->srv->susp_mu);
        if (!keep)
            MHD_destroy_response(resp);
        return keep ? 0 : -1;
    }
    if (ok)
        r->queued = MHD_queue_response(r->conn, (unsigned)status, resp) == MHD_YES;
    MHD_destroy_response(resp);
    if (!r->queued)
        svc_warn("http: could not queue the %d reply to %s %s", status, r->method, r->path);
    return r->queued ? 0 : -1;
}

static int reply_buffer(svc_req *r, int status, const char *ctype, void *buf, size_t len,
                        int must_free)
{
    if (r->status != 0) {
        svc_error("http: second reply to %s %s ignored (status %d)", r->method, r->path, status);
        if (must_free)
            free(buf);
        return -1;
    }
    r->status = status;
    struct MHD_Response *resp =
        must_free ? MHD_create_response_from_buffer_with_free_callback(len, buf, free)
                  : MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_COPY);
    if (resp == NULL) {
        if (must_free)
            free(buf);
        return -1;
    }
    return queue_response(r, status, ctype, resp);
}

void svc_reply_header(svc_req *req, const char *name, const char *value)
{
    reply_header *h = calloc(1, sizeof *h);
    if (h == NULL || (h->name = strdup(name)) == NULL || (h->value = strdup(value)) == NULL) {
        if (h != NULL)
            free(h->name);
        free(h);
        svc_error("http: out of memory adding header %s", name);
        return;
    }
    h->next = req->headers;
    req->headers = h;
}

/* Compact, with jansson's default 17 significant digits for reals so every
 * double (and every float32 widened to double) reads back bit-exact; see
 * the note at the top of svc_tensor.c. The dump is linear in the output,
 * so responses of hundreds of MB cost one buffer the size of the text. */
int svc_reply_json(svc_req *req, int status, json_t *body)
{
    char *text = body != NULL ? svc_json_dump(body, NULL) : NULL;
    json_decref(body);
    if (text == NULL) {
        static const char oom[] =
            "{\"error\":{\"code\":\"internal\",\"message\":\"cannot serialize the reply\"}}";
        return reply_buffer(req, 500, "application/json", (void *)oom, sizeof oom - 1, 0);
    }
    return reply_buffer(req, status, "application/json", text, strlen(text), 1);
}

int svc_reply_error(svc_req *req, int status, const char *code, const char *field,
                    json_t *extra, const char *fmt, ...)
{
    char small[512];
    char *msg = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
        va_end(ap);
    } else if (msg == NULL) {
        msg = small;
    }
    json_t *err = json_object();
    json_object_set_new(err, "code", json_string(code));
    /* The message may quote client input that is not UTF-8. */
    json_t *jm = json_string(msg);
    json_object_set_new(err, "message", jm != NULL ? jm : json_string("(message not UTF-8)"));
    if (field != NULL)
        json_object_set_new(err, "field", json_string(field));
    if (msg != small)
        free(msg);
    json_t *top = json_object();
    if (json_is_object(extra))
        json_object_update(top, extra);
    json_decref(extra);
    json_object_set_new(top, "error", err);
    return svc_reply_json(req, status, top);
}

int svc_reply_fd(svc_req *req, int status, const char *content_type, int fd, uint64_t offset,
                 uint64_t len)
{
    if (req->status != 0) {
        close(fd);
        return -1;
    }
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, offset);
    if (resp == NULL) {
        close(fd);
        return svc_reply_error(req, 500, "internal", NULL, NULL, "cannot send the file");
    }
    return queue_response(req, status, content_type, resp); /* MHD closes fd when done */
}

int svc_reply_raw(svc_req *req, int status, const char *content_type, const void *data, size_t len)
{
    return reply_buffer(req, status, content_type, (void *)data, len, 0);
}

int svc_reply_metrics(svc_req *req, svc_metrics *m)
{
    size_t len = 0;
    char *text = m != NULL ? svc_metrics_render(m, &len) : NULL;
    if (text == NULL)
        return svc_reply_error(req, 500, "internal", NULL, NULL, "cannot render the metrics");
    return reply_buffer(req, 200, SVC_METRICS_CONTENT_TYPE, text, len, 1);
}

/* What MHD's content reader calls back with: the caller's writer. A live
 * stream (svc_reply_stream_live) is also the caller's handle: one
 * reference for the response, one for the caller; the fields after mu are
 * guarded by it, and the server's list links by srv->susp_mu. */
struct svc_stream {
    svc_stream_fn fill;
    void *cls;
    void (*free_cls)(void *);
    int live;
    svc_server *srv;
    struct MHD_Connection *conn;
    struct svc_stream *prev, *next; /* in srv->streams */
    pthread_mutex_t mu;
    int refs;
    int suspended;  /* by stream_read, until a wake resumes it */
    int woken;      /* a wake came since fill was last called */
    int stopping;   /* the server stops: end the body */
    int done;       /* the response is gone: conn is not ours any more */
};
typedef struct svc_stream reply_stream;

static ssize_t stream_map(ssize_t n)
{
    if (n > 0)
        return n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

/* A live stream with nothing to send suspends its connection from inside
 * the content reader and returns 0 (libmicrohttpd's way of saying "no data
 * yet" without polling it in a loop); svc_stream_wake resumes it. A wake
 * that comes while fill runs is seen before suspending, so none is lost. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    reply_stream *st = cls;
    if (!st->live)
        return stream_map(st->fill(st->cls, buf, max));
    for (;;) {
        pthread_mutex_lock(&st->mu);
        int stopping = st->stopping;
        st->woken = 0;
        pthread_mutex_unlock(&st->mu);
        if (stopping)
            return MHD_CONTENT_READER_END_OF_STREAM;
        ssize_t n = st->fill(st->cls, buf, max);
        if (n != SVC_STREAM_LATER)
            return stream_map(n);
        pthread_mutex_lock(&st->mu);
        int again = st->woken || st->stopping;
        if (!again) {
            MHD_suspend_connection(st->conn);
            st->suspended = 1;
        }
        pthread_mutex_unlock(&st->mu);
        if (!again)
            return 0;
    }
}

static void stream_unref(reply_stream *st)
{
    pthread_mutex_lock(&st->mu);
    int last = --st->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (last) {
        pthread_mutex_destroy(&st->mu);
        free(st);
    }
}

static void stream_free(void *cls)
{
    reply_stream *st = cls;
    if (st->live) {
        svc_server *s = st->srv;
        pthread_mutex_lock(&s->susp_mu);
        if (st->prev != NULL)
            st->prev->next = st->next;
        else
            s->streams = st->next;
        if (st->next != NULL)
            st->next->prev = st->prev;
        pthread_mutex_unlock(&s->susp_mu);
        pthread_mutex_lock(&st->mu);
        st->done = 1;
        pthread_mutex_unlock(&st->mu);
    }
    if (st->free_cls != NULL)
        st->free_cls(st->cls);
    if (st->live)
        stream_unref(st);
    else
        free(st);
}

void svc_stream_wake(svc_stream *st)
{
    if (st == NULL)
        return;
    pthread_mutex_lock(&st->mu);
    st->woken = 1;
    if (st->suspended && !st->done) {
        st->suspended = 0;
        MHD_resume_connection(st->conn);
    }
    pthread_mutex_unlock(&st->mu);
}

void svc_stream_release(svc_stream *st)
{
    if (st != NULL)
        stream_unref(st);
}

/* Ends every live stream of a stopping server (svc_server_stop), and marks
 * it so that streams made from now on end at once. */
static void streams_stop(svc_server *s)
{
    pthread_mutex_lock(&s->susp_mu);
    s->streams_closed = 1;
    for (reply_stream *st = s->streams; st != NULL; st = st->next) {
        pthread_mutex_lock(&st->mu);
        st->stopping = 1;
        if (st->suspended && !st->done) {
            st->suspended = 0;
            MHD_resume_connection(st->conn);
        }
        pthread_mutex_unlock(&st->mu);
    }
    pthread_mutex_unlock(&s->susp_mu);
}

static reply_stream *stream_make(svc_req *req, int status, const char *ctype, svc_stream_fn fill,
                                 void *cls, void (*free_cls)(void *), int live)
{
    reply_stream *st = req->status == 0 ? calloc(1, sizeof(*st)) : NULL;
    struct MHD_Response *resp = NULL;
    if (st != NULL) {
        *st = (reply_stream){.fill = fill, .cls = cls, .free_cls = free_cls, .live = live};
        if (live) {
            svc_server *s = req->srv;
            pthread_mutex_init(&st->mu, NULL);
            st->refs = 2; /* the response's and the caller's */
            st->srv = s;
            st->conn = req->conn;
            pthread_mutex_lock(&s->susp_mu);
            st->stopping = s->streams_closed;
            st->next = s->streams;
            if (s->streams != NULL)
                s->streams->prev = st;
            s->streams = st;
            pthread_mutex_unlock(&s->susp_mu);
        }
        /* Unknown size: MHD sends it chunked, asking for up to 64 KiB a call
         * (less when the connection's buffer is smaller). */
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, (size_t)64 << 10, stream_read, st,
                                                 stream_free);
        if (resp == NULL && live) {
            st->free_cls = NULL;
            stream_free(st); /* unlinks it and drops the response's reference */
            stream_unref(st);
            st = NULL;
        }
    }
    if (resp == NULL) {
        if (req->status != 0)
            svc_error("http: second reply to %s %s ignored (status %d)", req->method, req->path, status);
        if (!live)
            free(st);
        if (free_cls != NULL)
            free_cls(cls);
        if (req->status == 0)
            svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return NULL;
    }
    if (queue_response(req, status, ctype, resp) != 0) { /* frees st and cls unless MHD holds it */
        if (live)
            stream_unref(st);
        return NULL;
    }
    return st;
}

int svc_reply_stream(svc_req *req, int status, const char *ctype, svc_stream_fn fill, void *cls,
                     void (*free_cls)(void *))
{
    return stream_make(req, status, ctype, fill, cls, free_cls, 0) != NULL ? 0 : -1;
}

svc_stream *svc_reply_stream_live(svc_req *req, int status, const char *ctype, svc_stream_fn fill,
                                  void *cls, void (*free_cls)(void *))
{
    return stream_make(req, status, ctype, fill, cls, free_cls, 1);
}

/* ---- the request pipeline --------------------------------------------- */

static int is_json_content_type(const char *ct)
{
    static const char want[] = "application/json";
    if (ct == NULL || strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    char c = ct[sizeof want - 1];
    return c == '\0' || c == ';' || c == ' ' || c == '\t';
}

/* The body limit of the request's route: a JSON body's is max_json_body
 * (max_body on a bulk route), a streamed or raw body's the route's own or
 * max_body. */
static size_t req_max_body(const svc_req *r)
{
    const svc_route *rt = r->route;
    if (rt->json_body && !r->streamed)
        return rt->json_bulk ? r->srv->max_body : r->srv->max_json_body;
    if (rt->max_body > 0)
        return rt->max_body;
    return rt->big_body ? r->srv->max_big_body : r->srv->max_body;
}

/* 1 if the route takes a body of some kind. */
static int route_takes_body(const svc_route *rt)
{
    return rt->json_body || rt->body != NULL || rt->raw_body;
}

static int too_large(svc_req *r)
{
    r->over_limit = 1;
    return svc_reply_error(r, 413, "payload_too_large", NULL, NULL,
                           "request body exceeds the limit of %zu bytes", req_max_body(r));
}

/* The route of the request, or -1 after replying 404 or 405 (with Allow),
 * or 503 when its address holds too many connections (a reserved route
 * is exempt). */
static int req_route(svc_req *r)
{
    char allow[64];
    r->route = route_find(r, allow, sizeof allow);
    if (r->route == NULL) {
        if (allow[0] != '\0') {
            svc_reply_header(r, "Allow", allow);
            svc_reply_error(r, 405, "method_not_allowed", NULL, NULL,
                            "%s is not allowed on %s (allowed: %s)", r->method, r->path, allow);
        } else {
            svc_reply_error(r, 404, "not_found", NULL, NULL, "no such resource: %.200s%s",
                            r->path, strlen(r->path) > 200 ? "…" : "");
        }
        return -1;
    }
    if (!r->route->reserved && svc_conns_over(r->srv->conns, r->sc)) {
        svc_info("http: %s %s from %s refused: over %u connections from that address",
                 r->method, r->path, r->ip, r->srv->per_ip_limit);
        svc_reply_header(r, "Retry-After", "1");
        svc_reply_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
        svc_reply_error(r, 503, "unavailable", NULL, NULL,
                        "too many connections from %s (at most %u); reuse one of them",
                        r->ip, r->srv->per_ip_limit);
        return -1;
    }
    return 0;
}

/* Who may call is decided from the head: a caller that may not gets its
 * answer before a byte of the body is read or parsed. Access 0 never gets
 * here (svc_server_start refuses such a table); an access the server
 * cannot check is refused. 0, or -1 after replying. */
static int req_authorize(svc_req *r)
{
    if (r->route->access == SVC_ACCESS_PUBLIC)
        return 0;
    if (r->srv->authorize == NULL || r->route->access == 0) {
        svc_reply_error(r, 403, "forbidden", NULL, NULL, "%s %s is not open to anyone",
                        r->method, r->route->pattern);
        return -1;
    }
    if (r->srv->authorize(r, r->route->access) != 0) {
        if (r->status == 0)
            svc_reply_error(r, 500, "internal", NULL, NULL, "the access check did not reply");
        return -1;
    }
    return 0;
}

/* A body of body_type streams to the route (a JSON route may take one
 * too); a JSON body is buffered and parsed later. Sets r->streamed; -1
 * after replying 415 to a body of a type the route does not take. */
static int req_body_type(svc_req *r)
{
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
    int of_type = r->route->body_type != NULL && ct != NULL &&
                  strncasecmp(ct, r->route->body_type, strlen(r->route->body_type)) == 0;
    r->streamed = r->route->body != NULL && (of_type || !r->route->json_body);
    if (r->route->json_body ? !r->streamed && !is_json_content_type(ct)
                            : r->route->body_type != NULL && !of_type) {
        svc_reply_error(r, 415, "unsupported_media_type", NULL, NULL, "%s %s needs Content-Type: %s%s%s",
                        r->method, r->path, r->route->json_body ? "application/json" : "",
                        r->route->json_body && r->route->body_type ? " or " : "",
                        r->route->body_type ? r->route->body_type : "");
        return -1;
    }
    return 0;
}

/* First call: headers only. Everything that can be refused without the
 * body is refused here, so a refused body is never buffered (after a reply
 * to a POST or PUT, MHD closes the connection rather than read it). */
static void req_begin(svc_req *r)
{
    svc_head_refusal no;
    svc_head_facts facts = {.http11 = r->http11, .raw_nul = r->raw_nul,
                            .too_many_args = r->too_many_args, .max_args = MAX_QUERY_ARGS,
                            .raw_len = r->raw_len, .max_header = r->srv->max_header,
                            .path = r->path};
    if (svc_head_refuse(r->conn, &facts, &no)) {
        svc_reply_error(r, no.status, no.code, no.field[0] ? no.field : NULL, NULL, "%s",
                        no.message);
        return;
    }
    if (req_route(r) < 0)
        return;
    /* A route that takes no body refuses one before a byte of it is read:
     * nothing holds a connection, or memory, by sending one. */
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    int has_te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                             MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
    if (!route_takes_body(r->route) && (has_te || (cl != NULL && strtoull(cl, NULL, 10) > 0))) {
        svc_reply_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
        svc_reply_error(r, 413, "payload_too_large", NULL, NULL, "%s %s takes no request body",
                        r->method, r->route->pattern);
        return;
    }
    if (req_authorize(r) < 0 || req_body_type(r) < 0)
        return;
    if (cl != NULL) {
        /* MHD has already refused a malformed Content-Length. No memory is
         * taken for what it announces: the buffer grows as bytes come. */
        unsigned long long n = strtoull(cl, NULL, 10);
        if (n > req_max_body(r)) {
            too_large(r);
            return;
        }
        r->body_want = (size_t)n;
    }
    if (r->route->head != NULL && r->route->head(r) != 0 && r->status == 0)
        svc_reply_error(r, 500, "internal", NULL, NULL, "the head check did not reply");
}

/* Appends a piece of the body: 0, 1 when the total passed max_body (the
 * buffer is released and the request marked), -1 on ENOMEM. */
static int req_body_append(svc_req *r, const char *data, size_t n)
{
    if (n > req_max_body(r) - r->body_len) {
        r->over_limit = 1;
        free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
        return 1;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + n + 1)
            cap *= 2;
        if (r->body_want > 0 && cap > r->body_want + 1 && r->body_len + n <= r->body_want)
            cap = r->body_want + 1; /* the last growth: exactly what was announced */
        if (cap > req_max_body(r) + 1)
            cap = req_max_body(r) + 1;
        char *p = realloc(r->body, cap);
        if (p == NULL)
            return -1;
        r->body = p;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return 0;
}

/* Last call: the whole body is here. Parse it if the route wants JSON, then
 * run the handler; a handler that does not reply gets a 500 for it. */
static void req_finish(svc_req *r)
{
    if (r->over_limit) {
        too_large(r);
        return;
    }
    if (r->route->json_body && !r->streamed) {
        if (r->body_len == 0) {
            svc_reply_error(r, 400, "invalid_json", NULL, NULL,
                            "the request body is empty; a JSON object is expected");
            return;
        }
        /* An array is no request: refused before a value of it is built. */
        size_t lead = strspn(r->body, " \t\r\n");
        if (lead < r->body_len && r->body[lead] == '[') {
            svc_reply_error(r, 400, "invalid_json", NULL, NULL,
                            "the request body must be a JSON object");
            return;
        }
        json_error_t jerr;
        svc_json_limits lim = r->srv->json;
        lim.fields = r->route->json_fields;
        svc_json_over over;
        r->json = svc_json_parse_limits(r->body, r->body_len, &lim, &jerr, &over);
        if (r->json == NULL && over == SVC_JSON_OVER_FIELD) {
            svc_reply_error(r, 400, "invalid_argument", jerr.source, NULL, "%s", jerr.text);
            return;
        }
        if (r->json == NULL && over != SVC_JSON_WITHIN) {
            svc_reply_error(r, 413, "payload_too_large", NULL, NULL, "%s (byte %d)", jerr.text,
                            jerr.position);
            return;
        }
        if (r->json == NULL) {
            svc_reply_error(r, 400, "invalid_json", NULL, NULL,
                            "invalid JSON: %s (line %d, column %d, byte %d)", jerr.text,
                            jerr.line, jerr.column, jerr.position);
            return;
        }
        if (!json_is_object(r->json)) {
            svc_reply_error(r, 400, "invalid_json", NULL, NULL,
                            "the request body must be a JSON object");
            return;
        }
    }
    r->route->handler(r);
    if (r->deferred)
        return; /* answered later: see req_deferred_step */
    if (r->status == 0) {
        svc_error("http: handler for %s %s returned without replying", r->method, r->route->pattern);
        svc_reply_error(r, 500, "internal", NULL, NULL, "the server did not produce a reply");
    }
}

/* A suspended request at the end of its handler, and again each time its
 * connection comes back from a resume: suspends the connection if nobody
 * resumed it yet, else queues the reply held for it. */
static enum MHD_Result req_deferred_step(svc_req *r)
{
    svc_server *s = r->srv;
    pthread_mutex_lock(&s->susp_mu);
    if (!r->resumed) {
        if (!r->suspended) {
            MHD_suspend_connection(r->conn);
            r->suspended = 1;
        }
        pthread_mutex_unlock(&s->susp_mu);
        return MHD_YES;
    }
    struct MHD_Response *resp = r->pending;
    r->pending = NULL;
    pthread_mutex_unlock(&s->susp_mu);
    if (resp != NULL) {
        r->queued = MHD_queue_response(r->conn, (unsigned)r->status, resp) == MHD_YES;
        MHD_destroy_response(resp);
    }
    /* No reply (the server is stopping): the connection is closed. */
    return r->queued ? MHD_YES : MHD_NO;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_size, void **con_cls)
{
    svc_req *r = *con_cls;
    if (r == NULL || !r->started) {
        if (r == NULL && (r = calloc(1, sizeof *r)) == NULL)
            return MHD_NO;
        r->refs = 1;
        *con_cls = r; /* from here on on_completed frees it */
        r->started = 1;
        r->srv = cls;
        r->conn = conn;
        r->http11 = strcmp(version, MHD_HTTP_VERSION_1_1) == 0;
        r->t0 = svc_now_mono_ms();
        clock_gettime(CLOCK_MONOTONIC, &r->t0_ts);
        r->method = strdup(method);
        r->path = strdup(url);
        if (r->method == NULL || r->path == NULL)
            return MHD_NO;
        r->sc = conn_of(conn);
        svc_head_client(conn, r->srv->trusted, r->ip, sizeof r->ip);
        svc_conns_head(r->srv->conns, r->sc);
        req_begin(r);
        return r->status == 0 || r->queued ? MHD_YES : MHD_NO;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        svc_conns_body(r->srv->conns, r->sc, n);
        if (r->status != 0)
            return MHD_YES; /* refused from the headers; MHD drops the rest */
        if (!r->over_limit && r->streamed && !r->body_cut) {
            /* A streamed body goes to the route piece by piece. */
            if (n > req_max_body(r) - r->body_len) {
                r->over_limit = 1;
            } else {
                r->body_len += n;
                if (!r->body_stopped && r->route->body(r, upload_data, n) != 0)
                    r->body_stopped = 1;
                return MHD_YES;
            }
        }
        if (!r->over_limit && !r->body_cut) {
            int rc = req_body_append(r, upload_data, n);
            if (rc < 0) {
                svc_error("http: out of memory reading the body of %s %s", r->method, r->path);
                return MHD_NO;
            }
            if (rc == 0)
                return MHD_YES;
            n = 0;
        }
        /* Past the limit (only a chunked body gets here: a Content-Length
         * was checked first), or cut by its route. libmicrohttpd 0.9.75
         * takes no reply in the middle of a body, so the next bytes are
         * discarded unbuffered and the answer goes out at the last call; a
         * body that keeps coming beyond DRAIN_MAX gets its connection
         * closed instead. */
        r->drained += n;
        if (r->drained > DRAIN_MAX) {
            if (r->body_cut)
                svc_info("http: closing %s %s from %s: the rest of its body was refused",
                         r->method, r->path, r->ip);
            else
                svc_info("http: closing %s %s from %s: body over %zu bytes", r->method, r->path,
                         r->ip, req_max_body(r));
            return MHD_NO;
        }
        return MHD_YES;
    }
    if (!r->deferred)
        svc_conns_app(r->srv->conns, r->sc); /* the body is in: no deadline */
    if (r->status == 0 && !r->deferred)
        req_finish(r);
    if (r->deferred)
        return req_deferred_step(r);
    /* MHD_NO closes the connection: better than leaving it without reply. */
    return r->queued ? MHD_YES : MHD_NO;
}

/* MHD's first look at a request: the raw target, before %xx is decoded and
 * the query split. Returns the request state, which MHD hands to on_access
 * as *con_cls (and on_completed frees), with a NUL (%00) noted. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    svc_server *s = cls;
    (void)conn;
    svc_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->refs = 1;
    r->raw_nul = strstr(uri, "%00") != NULL;
    r->raw_len = strlen(uri);
    const char *query = strchr(uri, '?');
    size_t nargs = 0;
    for (const char *p = query; p != NULL && *p != '\0'; p++)
        nargs += *p == '&' || *p == '?';
    r->too_many_args = nargs > MAX_QUERY_ARGS;
    if ((s->max_header > 0 && r->raw_len > s->max_header) || r->too_many_args) {
        /* The target alone is over the limit, or has more arguments than
         * a request may carry, and MHD is about to add a record to the
         * connection's pool for every query argument in it: past what the
         * pool was sized for, they exhaust it, and MHD then closes the
         * connection without a word. The target lies in MHD's own
         * writable read buffer and MHD splits the arguments only after
         * this call, so ending the query here leaves it nothing to split;
         * the request is refused with a JSON 414 once its head is in. */
        char *q = strchr((char *)uri, '?');
        if (q != NULL)
            q[1] = '\0';
    }
    return r;
}

/* Counts a request that ended by its route's pattern and its status, and
 * its latency from the first byte of its head to the end of its reply. A
 * request no route took is "unmatched", and a method no route table uses
 * is "other": neither may grow the series with what a client sends. */
static void req_observe(svc_server *s, const svc_req *r)
{
    static const char *const methods[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH",
                                          "OPTIONS", NULL};
    if (s->m_requests == NULL || !r->started)
        return;
    const char *method = "other";
    for (int i = 0; methods[i] != NULL; i++)
        if (r->method != NULL && strcmp(r->method, methods[i]) == 0)
            method = methods[i];
    const char *route = r->route != NULL ? r->route->pattern : "unmatched";
    char status[8];
    snprintf(status, sizeof status, "%d", r->status);
    svc_counter_add(svc_metric_with(s->m_requests, method, route, status), 1);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    svc_histogram_observe(svc_metric_with(s->m_duration, method, route),
                          (double)(now.tv_sec - r->t0_ts.tv_sec) +
                              (double)(now.tv_nsec - r->t0_ts.tv_nsec) / 1e9);
}

/* The server's families in opts->metrics (none without it). */
static void metrics_register(svc_server *s, svc_metrics *m)
{
    if (m == NULL)
        return;
    s->m_requests = svc_metric_counter(m, "kowloon_http_requests_total",
                                       "HTTP requests answered, by method, route pattern and status "
                                       "(0: the client left before a reply)",
                                       (const char *[]){"method", "route", "status", NULL});
    s->m_duration = svc_metric_histogram(m, "kowloon_http_request_duration_seconds",
                                         "HTTP request latency from its head to the end of its "
                                         "reply (a suspended request's wait included), seconds",
                                         (const char *[]){"method", "route", NULL},
                                         svc_metrics_latency_bounds, svc_metrics_latency_nbounds);
    s->m_conns = svc_metric_with(svc_metric_gauge(m, "kowloon_http_connections",
                                                  "open HTTP connections", NULL));
    s->m_suspended = svc_metric_with(svc_metric_gauge(
        m, "kowloon_http_suspended_requests",
        "requests suspended while they wait (a commit, a long poll, a job's end)", NULL));
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    svc_server *s = cls;
    svc_conns_idle(s->conns, conn_of(conn));
    svc_req *r = *con_cls;
    if (r == NULL)
        return;
    req_observe(cls, r);
    if (svc_log_enabled(SVC_LOG_DEBUG))
        svc_debug("http: %s %s %d %lldms%s ip=%s", r->method ? r->method : "?",
                  r->path ? r->path : "?", r->status, (long long)(svc_now_mono_ms() - r->t0),
                  toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (aborted)", r->ip);
    int large = r->body_cap >= TRIM_BODY_BYTES;
    req_unref(r);
    *con_cls = NULL;
    /* What a large request freed in this thread's malloc arena (one per
     * connection thread) goes back to the system now rather than staying
     * with the arena. The body and parse buffers themselves are mmapped
     * and unmapped on free; this is for the mid-sized rest (README, Limits). */
    if (large)
        malloc_trim(0);
}

/* ---- accessors -------------------------------------------------------- */

int svc_req_suspend(svc_req *req)
{
    svc_server *s = req->srv;
    if (req->status != 0 || req->deferred)
        return -1;
    pthread_mutex_lock(&s->susp_mu);
    int ok = !s->susp_closed;
    if (ok) {
        req->deferred = 1;
        req->refs = 2;
        req->dnext = s->deferred;
        if (s->deferred != NULL)
            s->deferred->dprev = req;
        s->deferred = req;
        s->ndeferred++;
        svc_gauge_add(s->m_suspended, 1);
    }
    pthread_mutex_unlock(&s->susp_mu);
    return ok ? 0 : -1;
}

/* Takes r out of srv->deferred, marked resumed; susp_mu held. */
static void deferred_unlink(svc_server *s, svc_req *r)
{
    r->resumed = 1;
    if (r->dprev != NULL)
        r->dprev->dnext = r->dnext;
    else
        s->deferred = r->dnext;
    if (r->dnext != NULL)
        r->dnext->dprev = r->dprev;
    r->dprev = r->dnext = NULL;
    svc_gauge_add(s->m_suspended, -1);
    if (--s->ndeferred == 0)
        pthread_cond_broadcast(&s->susp_cv);
    if (r->suspended)
        MHD_resume_connection(r->conn);
}

void svc_req_resume(svc_req *req)
{
    svc_server *s = req->srv;
    if (req->status == 0) {
        svc_error("http: %s %s resumed without a reply", req->method, req->path);
        svc_reply_error(req, 500, "internal", NULL, NULL, "the server did not produce a reply");
    }
    pthread_mutex_lock(&s->susp_mu);
    if (!req->resumed)
        deferred_unlink(s, req);
    int last = --req->refs <= 0;
    pthread_mutex_unlock(&s->susp_mu);
    if (last)
        req_free(req);
}

void *svc_req_app(svc_req *req) { return req->srv->app; }
const char *svc_req_method(svc_req *req) { return req->method; }
json_t *svc_req_json(svc_req *req) { return req->json; }
int svc_req_streamed(svc_req *req) { return req->streamed; }
const char *svc_req_client_ip(svc_req *req) { return req->ip; }
void *svc_req_user(svc_req *req) { return req->user; }

void svc_req_cut_body(svc_req *req)
{
    req->body_cut = 1;
}

void svc_req_on_free(svc_req *req, void (*fn)(void *), void *arg)
{
    req->on_free = fn;
    req->on_free_arg = arg;
}

void *svc_req_user_alloc(svc_req *req, size_t size)
{
    free(req->user_owned);
    req->user_owned = req->user = calloc(1, size);
    return req->user;
}

const char *svc_req_param(svc_req *req, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < req->nparams; i++)
        if (req->pname_len[i] == n && strncmp(req->pname[i], name, n) == 0)
            return req->pval[i];
    return NULL;
}

const char *svc_req_query(svc_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *svc_req_header(svc_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

/* Empty string, not NULL, for a bodiless request: callers can strlen it. */
const char *svc_req_body(svc_req *req, size_t *len)
{
    if (len != NULL)
        *len = req->body_len;
    return req->body != NULL ? req->body : "";
}

/* RFC 7235: the scheme is case-insensitive; the token is one word. */
const char *svc_req_bearer(svc_req *req)
{
    const char *h = svc_req_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h == NULL || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return NULL;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    if (*h == '\0' || strpbrk(h, " \t") != NULL)
        return NULL;
    return h;
}

/* ---- server ----------------------------------------------------------- */

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    svc_server *s = cls;
    if (atomic_load(&s->starting)) {
        va_list ap2;
        va_copy(ap2, ap);
        vsnprintf(s->start_err, sizeof s->start_err, fmt, ap2);
        va_end(ap2);
        s->start_err[strcspn(s->start_err, "\r\n")] = '\0';
    }
    svc_logv(SVC_LOG_WARN, fmt, ap);
}

/* "host:port", "[v6]:port", ":port" or "*:port" (all interfaces). */
static int listen_parse(const char *s, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        snprintf(host, hlen, "%.*s", (int)(close - s - 1), s + 1);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL)
            return -1;
        snprintf(host, hlen, "%.*s", (int)(colon - s), s);
    }
    const char *p = colon + 1;
    if (*p == '\0' || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p) || atoi(p) > 65535)
        return -1;
    snprintf(port, plen, "%s", p);
    if (strcmp(host, "*") == 0)
        host[0] = '\0';
    return 0;
}

/* GnuTLS's certificate callback: the pair of the server the handshake's
 * connection belongs to (libmicrohttpd sets the session's pointer to the
 * connection, whose socket context is its svc_conn). */
static int tls_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                        const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                        gnutls_pcert_st **pcert, unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    (void)req_ca_dn, (void)nreqs, (void)pk_algos, (void)pk_algos_length;
    struct MHD_Connection *conn = gnutls_session_get_ptr(session);
    svc_server *s = conn != NULL ? svc_conns_owner(conn_of(conn)) : NULL;
    return s != NULL && svc_tls_current(s->tls, pcert, pcert_length, pkey) == 0 ? 0 : -1;
}

/* 0 when every route declares who may call it (access fails closed: a
 * route left at 0 is a mistake, not a public route); -1 with err. */
static int routes_check(const svc_server_opts *o, char *err, size_t errlen)
{
    for (const svc_route *rt = o->routes; rt->method != NULL; rt++) {
        if (rt->access == 0) {
            snprintf(err, errlen, "route %s %s declares no access (SVC_ACCESS_PUBLIC or a role)",
                     rt->method, rt->pattern);
            return -1;
        }
        if (rt->access != SVC_ACCESS_PUBLIC && o->authorize == NULL) {
            snprintf(err, errlen, "route %s %s needs an authorize callback", rt->method,
                     rt->pattern);
            return -1;
        }
    }
    return 0;
}

/* The address to bind for host and port (an empty host: every IPv4
 * interface); IPv4 first, since "localhost" may resolve to ::1 first and
 * clients mostly dial 127.0.0.1. *ai to free; NULL with err. */
static const struct addrinfo *server_resolve(const char *listen, const char *host, const char *port,
                                             struct addrinfo **ai, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    hints.ai_family = host[0] ? AF_UNSPEC : AF_INET;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, ai);
    if (gai != 0) {
        snprintf(err, errlen, "cannot resolve listen address '%s': %s", listen, gai_strerror(gai));
        return NULL;
    }
    for (const struct addrinfo *a = *ai; a != NULL; a = a->ai_next)
        if (a->ai_family == AF_INET)
            return a;
    return *ai;
}

/* A server with its options, its connection table and its metrics, not
 * listening yet; trusted is taken over. NULL with err (trusted freed). */
static svc_server *server_new(const svc_server_opts *opts, svc_cidrs *trusted, char *err, size_t errlen)
{
    svc_server *s = calloc(1, sizeof *s);
    if (s == NULL) {
        svc_cidrs_free(trusted);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->routes = opts->routes;
    s->max_body = opts->max_body;
    s->max_big_body = opts->max_big_body > 0 ? opts->max_big_body : opts->max_body;
    s->max_json_body = opts->max_json_body > 0 && opts->max_json_body < opts->max_body
                           ? opts->max_json_body : opts->max_body;
    s->json = (svc_json_limits){.max_depth = opts->json_max_depth,
                                .max_values = opts->json_max_values};
    s->max_header = opts->max_header;
    s->per_ip_limit = opts->per_ip_limit;
    s->authorize = opts->authorize;
    s->trusted = trusted;
    s->tls = opts->tls;
    s->app = opts->app;
    unsigned timeout_s = opts->conn_timeout_s ? opts->conn_timeout_s : 30u;
    unsigned max_conns = opts->max_connections ? opts->max_connections : 1024u;
    svc_conns_opts co = {
        .max_conns = max_conns,
        .per_ip = opts->per_ip_limit,
        .over_per_ip = RESERVED_PER_IP,
        .over_share = max_conns / RESERVED_SHARE_DIV > 2 * RESERVED_PER_IP
                          ? max_conns / RESERVED_SHARE_DIV : 2 * RESERVED_PER_IP,
        .head_ms = (int64_t)timeout_s * 1000,
        .over_head_ms = OVER_HEAD_MS,
        .body_ms = (int64_t)(opts->body_timeout_s ? opts->body_timeout_s : 30u) * 1000,
        .body_min_rate = opts->body_min_rate ? opts->body_min_rate : (size_t)16 << 10,
        .uncounted = trusted,
        .owner = s,
    };
    if ((s->conns = svc_conns_new(&co, err, errlen)) == NULL) {
        svc_cidrs_free(trusted);
        free(s);
        return NULL;
    }
    metrics_register(s, opts->metrics);
    atomic_store(&s->starting, 1);
    pthread_mutex_init(&s->susp_mu, NULL);
    svc_cond_init_mono(&s->susp_cv);
    return s;
}

/* The memory pool of a connection. The head is read into it, and MHD adds
 * a record for every header and query argument to it. The pool holds the
 * head twice over, MAX_QUERY_ARGS arguments (a target with more is
 * refused with a JSON 414 before MHD splits it: on_uri) and a header for
 * every HEADER_AVG bytes of head. It is no larger: libmicrohttpd 0.9.75
 * zeroes a connection's whole pool after every request, so its size is
 * both memory each idle keep-alive connection holds and work each request
 * costs (a pool sized for a header per 2 bytes, 544 KiB at 16 KiB of head,
 * was a fifth of the gateway's CPU on small requests and 5 GB of RSS at
 * 10,000 idle connections). A head of many tiny headers past that gets
 * libmicrohttpd's own 431. */
static size_t server_pool_size(size_t max_header)
{
    if (max_header == 0)
        return MHD_POOL_DEFAULT;
    size_t pool = 2 * max_header + (MAX_QUERY_ARGS + max_header / HEADER_AVG) * HEADER_RECORD;
    return pool < POOL_MIN ? POOL_MIN : pool;
}

/* Starts MHD on addr. With a pool, every connection is polled (epoll) by a
 * fixed set of threads and a request that waits is suspended; without one,
 * each connection has its thread and a handler may block. */
static struct MHD_Daemon *server_daemon(svc_server *s, const svc_server_opts *opts, const struct addrinfo *addr,
                                        const char *port)
{
    unsigned timeout_s = opts->conn_timeout_s ? opts->conn_timeout_s : 30u;
    unsigned max_conns = opts->max_connections ? opts->max_connections : 1024u;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)max_conns + 64)
        svc_warn("http: %u connections allowed but only %llu file descriptors (ulimit -n)",
                 max_conns, (unsigned long long)rl.rlim_cur);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    unsigned pool_threads = opts->threads > 1 ? opts->threads : 0;
    if (opts->threads > 0)
        flags |= MHD_USE_EPOLL;
    else
        flags |= MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL;
    if (addr->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (s->tls != NULL)
        flags |= MHD_USE_TLS;
    /* MHD binds the address itself (SO_REUSEADDR, and the listen socket is
     * unambiguously its own to close); the port argument only names it in
     * MHD's messages. */
    return MHD_start_daemon(
        flags, (uint16_t)atoi(port), NULL, NULL, on_access, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, addr->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, max_conns + (pool_threads ? pool_threads : 1) * 16,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, server_pool_size(s->max_header),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_THREAD_POOL_SIZE, pool_threads,
        /* the certificate comes from the callback, so that a reload
         * (svc_tls_reload) reaches new handshakes without a restart */
        s->tls != NULL ? MHD_OPTION_HTTPS_CERT_CALLBACK : MHD_OPTION_END, tls_retrieve,
        MHD_OPTION_END);
}

svc_server *svc_server_start(const svc_server_opts *opts, char *err, size_t errlen)
{
    char dummy[1];
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    char host[256], port[8];
    if (opts == NULL || opts->listen == NULL || opts->routes == NULL ||
        listen_parse(opts->listen, host, sizeof host, port, sizeof port) < 0) {
        snprintf(err, errlen, "bad listen address '%s' (want HOST:PORT)",
                 opts && opts->listen ? opts->listen : "");
        return NULL;
    }
    if (routes_check(opts, err, errlen) != 0)
        return NULL;
    char perr[160];
    svc_cidrs *trusted = svc_cidrs_parse(opts->trusted_proxies, perr, sizeof perr);
    if (trusted == NULL) {
        snprintf(err, errlen, "trusted proxies: %s", perr);
        return NULL;
    }
    struct addrinfo *ai = NULL;
    const struct addrinfo *pick = server_resolve(opts->listen, host, port, &ai, err, errlen);
    if (pick == NULL) {
        svc_cidrs_free(trusted);
        return NULL;
    }
    svc_server *s = server_new(opts, trusted, err, errlen);
    if (s == NULL) {
        freeaddrinfo(ai);
        return NULL;
    }
    s->mhd = server_daemon(s, opts, pick, port);
    freeaddrinfo(ai);
    atomic_store(&s->starting, 0);
    if (s->mhd == NULL) {
        snprintf(err, errlen, "cannot listen on %s%s%s", opts->listen,
                 s->start_err[0] ? ": " : "", s->start_err);
        svc_conns_free(s->conns);
        svc_cidrs_free(s->trusted);
        pthread_cond_destroy(&s->susp_cv);
        pthread_mutex_destroy(&s->susp_mu);
        free(s);
        return NULL;
    }
    return s;
}

int svc_server_port(const svc_server *s)
{
    if (s == NULL)
        return -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    return di != NULL ? di->port : -1;
}

void svc_server_stop(svc_server *s)
{
    if (s == NULL)
        return;
    /* Suspended requests get SUSPEND_DRAIN_MS for the application to answer
     * them; the connections of those it did not are closed, as MHD can stop
     * only with none suspended. */
    streams_stop(s);
    pthread_mutex_lock(&s->susp_mu);
    s->susp_closed = 1;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += SUSPEND_DRAIN_MS / 1000;
    int rc = 0;
    while (s->ndeferred > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->susp_cv, &s->susp_mu, &until);
    int forced = s->ndeferred;
    if (forced > 0)
        svc_warn("http: closing %d suspended request%s not answered in time", forced,
                 forced == 1 ? "" : "s");
    while (s->deferred != NULL)
        deferred_unlink(s, s->deferred);
    pthread_mutex_unlock(&s->susp_mu);
    MHD_stop_daemon(s->mhd); /* joins every connection thread, closes every connection */
    svc_conns_free(s->conns);
    s->conns = NULL;
    svc_cidrs_free(s->trusted);
    s->trusted = NULL;
    /* Requests closed that way are still the application's until it calls
     * svc_req_resume, which takes susp_mu: the server stays (a leak at a
     * stop that is about to end the process) rather than be freed under
     * them. */
    if (forced > 0)
        return;
    pthread_cond_destroy(&s->susp_cv);
    pthread_mutex_destroy(&s->susp_mu);
    free(s);
}
