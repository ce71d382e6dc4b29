/* svc_http.h — the HTTP server both daemons are built on (libmicrohttpd):
 * one route table, JSON bodies read raw and parsed once centrally, one reply
 * helper and one error helper so every answer has the same shape, a body
 * limit enforced before the body is read (a JSON body has its own, and
 * limits of depth, values and top-level names checked before any value is
 * built: svc_json.h), no body at all on a route that takes none, and the
 * limits that keep hostile clients from holding the server: deadlines for
 * the request head and body (a client that trickles them is cut off),
 * connection limits per client address (an IPv6 /64) and in all, a header
 * size limit, and framing checks (one Content-Length, no Content-Length
 * beside chunked, no other transfer coding). Every route declares who may
 * call it: a route that does not keeps the server from starting.
 * TLS when a certificate is given (svc_tls.h).
 * Handlers run either on a thread per connection, where they may block, or
 * on a fixed pool of threads polling every connection (epoll), where a
 * request that waits is suspended (svc_req_suspend) and costs no thread.
 * Errors the server gives itself are JSON like every other; the few that
 * libmicrohttpd 0.9.75 answers before any callback runs (a malformed
 * Content-Length, an unsupported HTTP version, a request line larger than
 * the connection's memory) keep its fixed HTML bodies. */
#ifndef SVC_HTTP_H
#define SVC_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "svc_json.h"
#include "svc_metrics.h"
#include "svc_tls.h"

typedef struct svc_server svc_server;
typedef struct svc_req svc_req;

/* A handler answers through svc_reply_* exactly once and returns 0. If it
 * returns without replying the server answers 500 internal. */
typedef int (*svc_handler)(svc_req *req);

/* Takes one piece of a streamed body (svc_route.body), in order, after the
 * head's checks and the access check passed. Returns 0 to go on, or non-zero
 * to stop: the rest of the body is read and dropped (see svc_req_cut_body
 * for a body not worth reading on), and the handler still runs at the end
 * and answers (it knows from its own state what failed). */
typedef int (*svc_body_fn)(svc_req *req, const char *data, size_t n);

/* Looks at a request's head once every check of the server passed (the
 * access check and the body limit included), before a byte of its body is
 * read: 0 to go on, or -1 after replying, and the body is never read. */
typedef int (*svc_head_fn)(svc_req *req);

/* svc_route.access of a route anyone may call. 0 is no declaration: a
 * route table with one does not start (access fails closed). */
#define SVC_ACCESS_PUBLIC (-1)

typedef struct svc_route {
    const char *method;   /* "GET", "POST", "DELETE" */
    const char *pattern;  /* "/v1/jobs/{id}/result": {name} matches one segment; a
                             last {name*} the rest of the path */
    svc_handler handler;
    int json_body;        /* 1: the body must be application/json and parse to
                             an object, else 415/400 before the handler runs */
    int access;           /* who may call it: SVC_ACCESS_PUBLIC, or a value in
                             the application's terms for which the server's
                             authorize callback decides from the request head,
                             before a byte of the body is read */
    int reserved;         /* 1: served even on a connection over the per-IP
                             limit (health checks, cluster traffic), so that
                             clients on the same address cannot crowd it out
                             (within a small allowance per address) */
    svc_body_fn body;     /* set: the body is streamed to it, never buffered
                             (on a json_body route: only a body of body_type;
                             svc_req_streamed says which came) */
    const char *body_type;/* the Content-Type a streamed body must have (415) */
    size_t max_body;      /* bytes of a streamed or raw body; 0: the server's
                             max_body (a JSON body has max_json_body, or
                             max_body when json_bulk) */
    svc_head_fn head;     /* set: decides from the head (a limit of the
                             caller's own, say) before the body is read */
    int raw_body;         /* 1: the body is buffered as it is (svc_req_body).
                             A route with none of json_body, body and raw_body
                             takes no body: one is refused (413) at the head */
    const char *const *json_fields; /* NULL-terminated names the top-level
                             object may have; another is a 400 naming it,
                             before its value is parsed. NULL: any */
    int json_bulk;        /* 1: a JSON body may take max_body (a node's
                             batched report), not only max_json_body */
    int big_body;         /* 1: a streamed body may take the server's
                             max_big_body (uploads), not max_body */
} svc_route;

/* Decides from the head whether the caller may use a route whose access is
 * not 0. Returns 0 to go on, or replies (401, 403, 429, 503) and returns -1;
 * the body is then never read. */
typedef int (*svc_authorize_fn)(svc_req *req, int access);

typedef struct svc_server_opts {
    const char *listen;          /* "127.0.0.1:8080"; port 0 picks a free one */
    const svc_route *routes;     /* terminated by a route with method NULL */
    size_t max_body;             /* bytes; larger bodies get 413 unread */
    size_t max_json_body;        /* bytes of a JSON body; 0 => max_body */
    size_t max_big_body;         /* bytes of a big_body route's body; 0 =>
                                    max_body */
    unsigned json_max_depth;     /* svc_json_limits; 0 => SVC_JSON_MAX_DEPTH */
    size_t json_max_values;      /* 0 => SVC_JSON_MAX_VALUES */
    unsigned conn_timeout_s;     /* a connection idle this long is closed, and
                                    so is one whose request line and headers
                                    are not complete this long after it opened
                                    or after its previous request ended, however
                                    steadily they trickle in; 0 => 30 */
    unsigned body_timeout_s;     /* a request body must come in windows of this
                                    long, each bringing body_min_rate bytes a
                                    second (or the body's end), else the
                                    connection is closed; 0 => 30 */
    size_t body_min_rate;        /* bytes a second; 0 => 16 KiB */
    unsigned per_ip_limit;       /* max connections per client address (an
                                    IPv6 /64); a request on one more gets 503
                                    with Retry-After and the connection is
                                    closed, unless its route is reserved (a
                                    few more per address, a bounded share in
                                    all); 0 => none */
    const char *trusted_proxies; /* "CIDR[,CIDR...]": peers whose
                                    X-Forwarded-For names the client
                                    (svc_req_client_ip, limits, logs); their
                                    connections are not capped per address.
                                    NULL or "": none */
    svc_tls *tls;                /* NULL: plain HTTP; else HTTPS with its
                                    certificate (borrowed: outlives the server) */
    unsigned max_connections;    /* 0 => 1024; more are closed at once */
    size_t max_header;           /* bytes of request line + headers; larger
                                    get 431 (JSON); 0 => only libmicrohttpd's
                                    own 32 KiB connection memory bounds them */
    svc_authorize_fn authorize;  /* for routes with access != 0; NULL: none */
    unsigned threads;            /* 0: a thread per connection, and handlers
                                    may block as long as they like; N: N
                                    threads poll every connection (epoll), so
                                    a handler must not block for long: one
                                    that waits suspends its request */
    void *app;                   /* handed to handlers via svc_req_app */
    svc_metrics *metrics;        /* NULL: none; else every request is counted
                                    by method, route pattern (never the raw
                                    path, so the series stay few) and status,
                                    with its latency, and open connections
                                    and suspended requests are gauged */
} svc_server_opts;

/* Starts the server's threads. Returns NULL and fills err on failure
 * (address in use, bad listen string). */
svc_server *svc_server_start(const svc_server_opts *opts, char *err, size_t errlen);
/* Port actually bound (useful with port 0). */
int svc_server_port(const svc_server *s);
/* Stops accepting, waits for handlers in flight, frees. NULL is a no-op. */
void svc_server_stop(svc_server *s);

/* Request accessors; every pointer is valid until the handler returns. */
void *svc_req_app(svc_req *req);
const char *svc_req_method(svc_req *req);
const char *svc_req_param(svc_req *req, const char *name);   /* {name} from the pattern */
const char *svc_req_query(svc_req *req, const char *name);   /* NULL if absent */
const char *svc_req_header(svc_req *req, const char *name);  /* case-insensitive */
json_t *svc_req_json(svc_req *req);       /* borrowed; NULL without a JSON body */
int svc_req_streamed(svc_req *req);       /* 1: the body went to route->body */
const char *svc_req_body(svc_req *req, size_t *len);
/* "Bearer X" from Authorization: returns X, or NULL. */
const char *svc_req_bearer(svc_req *req);
/* The client's address: the peer's, or behind a trusted proxy the one its
 * X-Forwarded-For names. Per-address limits count by svc_addr_key_of it. */
const char *svc_req_client_ip(svc_req *req);
/* Per-request slot for the application (e.g. the authenticated tenant),
 * made by svc_req_user_alloc. */
void *svc_req_user(svc_req *req);
/* From a body callback that stops (svc_body_fn): the rest of the body is
 * not worth reading either. What still comes is dropped, at most 1 MiB of
 * it, so that a sender that stops soon still gets the handler's answer;
 * past that the connection is closed. */
void svc_req_cut_body(svc_req *req);
/* Calls fn(arg) when the request ends, whatever happened (reply sent,
 * client gone mid-body): where a streamed body's partial state is dropped.
 * One per request; a second call replaces the first. */
void svc_req_on_free(svc_req *req, void (*fn)(void *), void *arg);
/* Zeroed memory of size bytes owned by the request (freed with it), also set
 * as its user slot; NULL on ENOMEM. */
void *svc_req_user_alloc(svc_req *req, size_t size);

/* Suspends the request: its handler returns without replying, and the
 * connection costs no thread until svc_req_resume. Whoever will resume it
 * owns req from here: exactly one thread then calls svc_reply_* (the reply
 * is held and sent once the connection is back) and svc_req_resume, and
 * nothing else touches req. 0, or -1 when the server is stopping (or req
 * already has a reply): then the handler answers now. */
int svc_req_suspend(svc_req *req);
/* Sends the reply given to a suspended request (a 500 if none was) and
 * gives req back to the server: the pointer is not valid after this call.
 * Any thread. A stopping server waits a few seconds for suspended requests
 * to be resumed, then closes their connections; a reply given after that is
 * dropped, and svc_req_resume must still be called to free req (the server's
 * own memory is then left allocated, so that call stays safe). */
void svc_req_resume(svc_req *req);

/* Adds a header to the reply that follows (Location, Retry-After). */
void svc_reply_header(svc_req *req, const char *name, const char *value);
/* Replies with body as JSON. Steals the reference to body. */
int svc_reply_json(svc_req *req, int status, json_t *body);
/* Replies {"error": {"code", "message", "field"?}} (+ extra members merged at
 * top level when extra != NULL; steals extra). field may be NULL. */
int svc_reply_error(svc_req *req, int status, const char *code, const char *field,
                    json_t *extra, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Replies with len bytes of the open file fd from offset (sendfile where
 * the system has it). Takes fd: it is closed once sent or on failure. */
int svc_reply_fd(svc_req *req, int status, const char *content_type, int fd, uint64_t offset,
                 uint64_t len);
/* Replies with raw bytes of the given content type (copied). */
int svc_reply_raw(svc_req *req, int status, const char *content_type, const void *data, size_t len);

/* Replies 200 with the exposition of m (svc_metrics_render) as Prometheus
 * text; 500 when m is NULL or on ENOMEM. */
int svc_reply_metrics(svc_req *req, svc_metrics *m);

/* Writes the next at most max bytes of a streamed reply into buf: returns
 * how many (> 0), 0 once the body is complete, -1 to abort it (the client
 * sees a truncated chunked body and the connection is closed). */
typedef ssize_t (*svc_stream_fn)(void *cls, char *buf, size_t max);
/* Replies with a body produced piece by piece by fill as the connection can
 * take it (chunked transfer coding, no Content-Length), so that a large
 * reply never sits whole in memory; queued headers (svc_reply_header) are
 * sent as with any reply. fill runs on the connection's thread after the
 * handler has returned, so cls must not point into the request or the
 * handler's stack. The reply owns cls from this call on, whatever happens:
 * free_cls (may be NULL) releases it once the body is sent or abandoned, or
 * at once when the reply cannot be queued. 0, or -1 (a second reply, or
 * ENOMEM: then the reply is a 500 when none was queued before). */
int svc_reply_stream(svc_req *req, int status, const char *ctype, svc_stream_fn fill, void *cls,
                     void (*free_cls)(void *));

/* What a live stream's fill returns when it has nothing to send now: the
 * connection is then suspended (no thread polls it, no timeout runs) until
 * svc_stream_wake, and fill is called again. */
#define SVC_STREAM_LATER ((ssize_t)-2)

/* A live reply stream, fed from any thread: see svc_reply_stream_live. */
typedef struct svc_stream svc_stream;

/* As svc_reply_stream, for a body produced over time (Server-Sent Events):
 * fill may also return SVC_STREAM_LATER. Returns a handle the caller holds
 * until svc_stream_release, whatever happens to the connection: through it
 * any thread wakes the stream once fill has something again. fill never
 * runs after free_cls. A stopping server ends every live stream: fill is
 * not called again and the body ends cleanly (last chunk), and free_cls
 * runs before svc_server_stop returns. NULL when the reply cannot be made
 * (then as svc_reply_stream's -1: free_cls has run). */
svc_stream *svc_reply_stream_live(svc_req *req, int status, const char *ctype, svc_stream_fn fill,
                                  void *cls, void (*free_cls)(void *));
/* Has fill called again soon: at once if the connection is suspended,
 * else after the call in progress (a wake is never lost). Any thread; a
 * no-op once the body is over. */
void svc_stream_wake(svc_stream *st);
/* Drops the caller's handle; NULL is a no-op. */
void svc_stream_release(svc_stream *st);

#endif
