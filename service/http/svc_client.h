/* svc_client.h — a small HTTP client on libcurl: JSON calls, and raw bytes
 * streamed straight between the network and a caller's buffer (blobs). Each
 * thread keeps its own curl handle so connections are reused; calls are
 * thread-safe. */
#ifndef SVC_CLIENT_H
#define SVC_CLIENT_H

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Call once in main before threads start (curl_global_init). */
int svc_client_global_init(void);
/* Servers' certificates are checked against the CA certificates of this
 * PEM file (a cluster's own CA, or the gateway's self-signed certificate)
 * instead of the system's: call in main before threads start. NULL or "":
 * the system's. No call ever goes through a proxy (*_proxy variables are
 * not read): cluster traffic goes straight to its gateway. */
void svc_client_set_ca_file(const char *path);

typedef struct svc_response {
    int status;       /* HTTP status; 0 when no response arrived */
    json_t *json;     /* parsed body when it was JSON, else NULL; caller decrefs */
    char error[256];  /* transport error text when status == 0 */
    int64_t length;   /* raw GET: bytes of the body stored; on SVC_XFER_TOOBIG
                         the size the server announced, -1 when it did not */
} svc_response;

/* What a transfer returns besides 0 (a response arrived, any status):
 * negative errno values (svc_err.h); -EINVAL for a missing argument. */
enum {
    SVC_XFER_EIO = -EIO,            /* no response: a transport error (resp->error) */
    SVC_XFER_TOOBIG = -EFBIG,       /* a 2xx body longer than the caller's buffer */
    SVC_XFER_ABORTED = -ECANCELED,  /* *cancel was raised, or on_chunk asked to stop */
};

/* Sees each piece of a raw body once it is stored (a running hash follows
 * the transfer this way). Returns 0 to go on, non-zero to abort. */
typedef int (*svc_chunk_fn)(void *cls, const void *data, size_t n);

/* Performs method url with an optional JSON body (borrowed) and an optional
 * bearer token, waiting at most timeout_ms. Returns 0 when an HTTP response
 * arrived (any status), SVC_XFER_EIO on a transport error (connection refused,
 * timeout); either way resp is filled and the caller calls
 * svc_response_clear. */
int svc_http_call(const char *method, const char *url, const char *bearer,
                  const json_t *body, long timeout_ms, svc_response *resp);
void svc_response_clear(svc_response *resp);

/* GETs url (Accept: application/octet-stream) into buf, which the caller
 * owns and which holds cap bytes: a 2xx body is written straight into it by
 * the receive callback, never staged elsewhere, and a body longer than cap
 * is refused — before its first byte when the server announced its
 * Content-Length — with SVC_XFER_TOOBIG. on_chunk (may be NULL) sees each
 * stored piece. A non-2xx body (a JSON error) goes to resp->json, never into
 * buf. stall_ms bounds connecting and any stretch without a byte received;
 * the total time is not bounded, since a large body may take minutes: the
 * caller's cancel flag (may be NULL; polled about every second and between
 * pieces) stops it with SVC_XFER_ABORTED. Returns 0 when a response arrived
 * (any status; on 2xx resp->length bytes are in buf, perhaps fewer than cap),
 * SVC_XFER_EIO on a transport error (resp->error). The caller clears resp. */
int svc_http_get_into(const char *url, const char *bearer, void *buf, size_t cap,
                      svc_chunk_fn on_chunk, void *cls, long stall_ms,
                      const volatile int *cancel, svc_response *resp);

/* svc_http_get_into of the len bytes of url's body from offset off (HTTP
 * Range: a 206 answer with them in buf; a server that ignores the range
 * answers 200 with the whole body, which is SVC_XFER_TOOBIG past len). */
int svc_http_get_range_into(const char *url, const char *bearer, uint64_t off, void *buf,
                            size_t len, long stall_ms, const volatile int *cancel,
                            svc_response *resp);

/* POSTs the len bytes at data as the body, Content-Type ctype. data is
 * borrowed and read in place while the call runs (curl sends from it; no
 * copy, no encoding); it must stay unchanged until the call returns. The
 * reply's JSON goes to resp->json. stall_ms and cancel as in
 * svc_http_get_into. Returns 0 (any status), SVC_XFER_EIO or SVC_XFER_ABORTED. */
int svc_http_post_raw(const char *url, const char *bearer, const char *ctype, const void *data,
                      size_t len, long stall_ms, const volatile int *cancel, svc_response *resp);

/* svc_http_post_raw with another method that carries a body (PUT). */
int svc_http_send_raw(const char *method, const char *url, const char *bearer, const char *ctype,
                      const void *data, size_t len, long stall_ms, const volatile int *cancel,
                      svc_response *resp);

/* POSTs over one curl multi handle, as many at once as the caller adds:
 * transfers run side by side and each ends on its own (a new one may be
 * added at any time, so a slow receiver never holds the others back), and
 * connections are kept for later POSTs (webhook deliveries). One thread
 * uses a poster at a time. */
typedef struct svc_poster svc_poster;

/* Decides whether a connection to sa may be opened: 1 yes, 0 no with why
 * filled (it becomes the request's error). */
typedef int (*svc_addr_ok_fn)(const void *cls, const struct sockaddr *sa, char *why, size_t whylen);

typedef struct svc_post {
    const char *url;
    const char *body;               /* borrowed; len bytes */
    size_t len;
    const char *const *headers;     /* "Name: value", NULL-terminated; borrowed */
    void *user;                     /* the caller's, untouched */
    /* filled when the post ends */
    int status;                     /* HTTP status; 0 when no response came */
    char error[256];                /* why no response came ("" when one did) */
    int duration_ms;
} svc_post;

/* NULL on ENOMEM. */
svc_poster *svc_poster_new(void);
/* Aborts what is still in flight (without calling anyone) and frees. */
void svc_poster_free(svc_poster *p);
/* Starts post, which (with all it points to) stays borrowed until
 * svc_poster_run hands it back. It ends within timeout_ms (connecting
 * included). Redirects are not followed, no proxy is used, only http and
 * https are spoken, and every socket is opened only when addr_ok (may be
 * NULL) accepts the address it connects to: the address actually
 * connected, not the one a name resolved to at some other time. The
 * response body is discarded. 0, or -1 (ENOMEM: post was not started and
 * is not handed back). */
int svc_poster_add(svc_poster *p, svc_post *post, long timeout_ms, svc_addr_ok_fn addr_ok,
                   const void *cls);
/* Drives the transfers for at most wait_ms, returning early once one has
 * ended; every post that ended is handed back through done(ctx, post) with
 * its status, error and duration. Returns how many are still in flight. */
int svc_poster_run(svc_poster *p, int wait_ms, void (*done)(void *ctx, svc_post *post), void *ctx);
/* Hands back every post still in flight through done, each with error
 * "aborted" and status 0, and stops them. */
void svc_poster_abort(svc_poster *p, void (*done)(void *ctx, svc_post *post), void *ctx);

#endif
