/* svc_client.c — JSON and raw bytes over HTTP with libcurl (svc_client.h). Each thread
 * keeps one easy handle, reset between calls but never closed. All handles
 * share one connection cache (a curl share object), so a short-lived thread
 * — the gateway's tracker of one run — reuses a kept-alive connection to its
 * node instead of opening its own. The handle is cleaned up by a
 * thread-specific destructor when the thread ends. */
#include "svc_client.h"
#include "svc_json.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static pthread_key_t curl_key;
static pthread_once_t curl_key_once = PTHREAD_ONCE_INIT;
static pthread_once_t curl_global_once = PTHREAD_ONCE_INIT;
static CURLcode curl_global_rc = CURLE_OK;

static void curl_handle_destroy(void *h)
{
    curl_easy_cleanup(h);
}

static void curl_key_create(void)
{
    pthread_key_create(&curl_key, curl_handle_destroy);
}

static CURLSH *curl_share;
static const char *ca_file; /* svc_client_set_ca_file */

void svc_client_set_ca_file(const char *path)
{
    ca_file = path != NULL && *path != '\0' ? path : NULL;
}
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
    (void)h, (void)access, (void)arg;
    pthread_mutex_lock(&share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg)
{
    (void)h, (void)arg;
    pthread_mutex_unlock(&share_locks[data]);
}

static void curl_global_once_init(void)
{
    curl_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (curl_global_rc != CURLE_OK)
        return;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&share_locks[i], NULL);
    curl_share = curl_share_init();
    if (curl_share) {
        curl_share_setopt(curl_share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(curl_share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(curl_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
        curl_share_setopt(curl_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    }
}

int svc_client_global_init(void)
{
    pthread_once(&curl_global_once, curl_global_once_init);
    pthread_once(&curl_key_once, curl_key_create);
    return curl_global_rc == CURLE_OK ? 0 : -1;
}

/* The calling thread's handle, created on first use; NULL on ENOMEM. */
static CURL *thread_handle(void)
{
    pthread_once(&curl_key_once, curl_key_create);
    CURL *h = pthread_getspecific(curl_key);
    if (h == NULL) {
        h = curl_easy_init();
        if (h != NULL && pthread_setspecific(curl_key, h) != 0) {
            curl_easy_cleanup(h);
            h = NULL;
        }
    }
    return h;
}

/* The response body, grown geometrically so large results (hundreds of MB
 * of base64) arrive in linear time. Always NUL-terminated once non-empty. */
typedef struct {
    char *buf;
    size_t len, cap;
} body_buf;

static size_t on_body(char *data, size_t size, size_t nmemb, void *userp)
{
    body_buf *b = userp;
    size_t n = size * nmemb;
    if (n > SIZE_MAX - b->len - 1)
        return 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1)
            cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
        char *p = realloc(b->buf, cap);
        if (p == NULL)
            return 0; /* curl reports CURLE_WRITE_ERROR */
        b->buf = p;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return n;
}

/* Builds the header list: the given lines plus the bearer's. Returns the
 * list (caller frees), or NULL with resp->error set. */
/* What a finished transfer says: on success resp gets the status and the
 * body's JSON (NULL when empty or not JSON) and 0 is returned; else resp's
 * error names curl's reason and SVC_XFER_EIO is returned. */
static int transfer_result(CURL *h, CURLcode rc, const char *url, const char *errbuf,
                           const body_buf *body, svc_response *resp)
{
    if (rc != CURLE_OK) {
        snprintf(resp->error, sizeof resp->error, "%s: %s", curl_easy_strerror(rc),
                 errbuf[0] ? errbuf : url);
        return SVC_XFER_EIO;
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    resp->status = (int)status;
    /* svc_json_parse: the runs a lease hands out carry their inputs as long
     * base64 strings, which it copies at once where jansson's lexer went
     * byte by byte (a third of a node's CPU on small jobs). */
    json_error_t jerr;
    if (body->len > 0)
        resp->json = svc_json_parse(body->buf, body->len, &jerr);
    return 0;
}

static struct curl_slist *headers_build(const char *const *lines, int n, const char *bearer,
                                        svc_response *resp)
{
    struct curl_slist *hdrs = NULL;
    char auth[1024];

    for (int i = 0; i <= n; i++) {
        const char *line = i < n ? lines[i] : NULL;
        if (i == n) {
            if (bearer == NULL)
                break;
            /* A token is pasted into a header line: refuse what could end it. */
            if (strpbrk(bearer, "\r\n") != NULL || strlen(bearer) > sizeof auth - 32) {
                snprintf(resp->error, sizeof resp->error, "invalid bearer token");
                curl_slist_free_all(hdrs);
                return NULL;
            }
            snprintf(auth, sizeof auth, "Authorization: Bearer %s", bearer);
            line = auth;
        }
        /* A NULL result would drop the list built so far: keep the old head. */
        struct curl_slist *next = curl_slist_append(hdrs, line);
        if (next == NULL) {
            snprintf(resp->error, sizeof resp->error, "out of memory");
            curl_slist_free_all(hdrs);
            return NULL;
        }
        hdrs = next;
    }
    return hdrs;
}

/* The calling thread's handle, reset, with the options every call shares. */
static CURL *handle_prepare(const char *url, struct curl_slist *hdrs, char *errbuf,
                            svc_response *resp)
{
    CURL *h = thread_handle();
    if (h == NULL) {
        snprintf(resp->error, sizeof resp->error, "curl_easy_init failed");
        return NULL;
    }
    curl_easy_reset(h); /* clears options; the connection cache survives */
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (curl_share)
        curl_easy_setopt(h, CURLOPT_SHARE, curl_share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    /* Straight to the server: a proxy named by the environment would see
     * the cluster token and every byte of the cluster's traffic. */
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    if (ca_file != NULL)
        curl_easy_setopt(h, CURLOPT_CAINFO, ca_file);
    return h;
}

/* The handle outlives the call: detach everything that does not. */
static void handle_release(CURL *h)
{
    if (h == NULL)
        return;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, NULL);
}

int svc_http_call(const char *method, const char *url, const char *bearer,
                  const json_t *body, long timeout_ms, svc_response *resp)
{
    memset(resp, 0, sizeof *resp);
    if (method == NULL || url == NULL) {
        snprintf(resp->error, sizeof resp->error, "missing method or url");
        return -EINVAL;
    }

    int ret = SVC_XFER_EIO;
    char *payload = NULL;
    struct curl_slist *hdrs = NULL;
    body_buf rb = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    CURL *h = NULL;

    if (body != NULL) {
        payload = svc_json_dump(body, NULL);
        if (payload == NULL) {
            snprintf(resp->error, sizeof resp->error, "cannot serialize the request body");
            goto done;
        }
    }
    const char *lines[3] = {"Accept: application/json", "Expect:", "Content-Type: application/json"};
    if (!(hdrs = headers_build(lines, payload != NULL ? 3 : 2, bearer, resp)))
        goto done;
    if (!(h = handle_prepare(url, hdrs, errbuf, resp)))
        goto done;
    if (timeout_ms > 0) {
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &rb);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else {
        /* POSTFIELDS makes curl send a body (an empty one when there is
         * none, so a bodiless POST still has Content-Length: 0). */
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(payload != NULL ? strlen(payload) : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload != NULL ? payload : "");
        if (strcmp(method, "POST") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }

    ret = transfer_result(h, curl_easy_perform(h), url, errbuf, &rb, resp);

done:
    handle_release(h);
    curl_slist_free_all(hdrs);
    free(payload);
    free(rb.buf);
    return ret;
}

/* ---- raw bytes ---------------------------------------------------------- */

/* An error reply is kept for its message only: this much of it is enough. */
#define RAW_ERROR_BODY_MAX (64 << 10)

/* Where a raw GET's body goes: a 2xx body into the caller's buffer, any
 * other body (a JSON error) into err. */
typedef struct {
    CURL *h;
    char *buf;
    size_t cap, len;
    int started, ok;      /* the status was looked at; it is 2xx */
    int too_big, aborted;
    int64_t announced;    /* Content-Length, -1 when not sent */
    svc_chunk_fn on_chunk;
    void *cls;
    body_buf err;
} raw_sink;

static size_t on_raw(char *data, size_t size, size_t nmemb, void *userp)
{
    raw_sink *s = userp;
    size_t n = size * nmemb;

    if (!s->started) {
        long status = 0;
        curl_off_t cl = -1;
        s->started = 1;
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(s->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        s->ok = status >= 200 && status < 300;
        s->announced = cl >= 0 ? (int64_t)cl : -1;
        if (s->ok && cl >= 0 && (uint64_t)cl > s->cap) {
            s->too_big = 1;
            return 0;  /* curl reports CURLE_WRITE_ERROR */
        }
    }
    if (!s->ok)
        return s->err.len + n > RAW_ERROR_BODY_MAX ? n : on_body(data, size, nmemb, &s->err);
    if (n > s->cap - s->len) {
        s->too_big = 1;
        return 0;
    }
    memcpy(s->buf + s->len, data, n);
    if (s->on_chunk && s->on_chunk(s->cls, s->buf + s->len, n) != 0) {
        s->aborted = 1;
        return 0;
    }
    s->len += n;
    return n;
}

/* Aborts a transfer once the caller's cancel flag is raised. */
static int on_progress(void *cls, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    const volatile int *cancel = cls;
    return __atomic_load_n(cancel, __ATOMIC_ACQUIRE) != 0;
}

/* Stall and cancel limits shared by the raw transfers: a large body may take
 * minutes, so only silence is a failure, never the total time. */
static void raw_limits(CURL *h, long stall_ms, const volatile int *cancel)
{
    if (stall_ms > 0) {
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, stall_ms < 10000 ? stall_ms : 10000L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall_ms >= 2000 ? stall_ms / 1000 : 1L);
    }
    if (cancel != NULL) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)cancel);
    }
}

static int raw_cancelled(const volatile int *cancel)
{
    return cancel != NULL && __atomic_load_n(cancel, __ATOMIC_ACQUIRE) != 0;
}

/* svc_http_get_into with range ("a-b", or NULL for the whole body). */
static int get_into(const char *url, const char *bearer, const char *range, void *buf, size_t cap,
                    svc_chunk_fn on_chunk, void *cls, long stall_ms, const volatile int *cancel,
                    svc_response *resp);

int svc_http_get_into(const char *url, const char *bearer, void *buf, size_t cap,
                      svc_chunk_fn on_chunk, void *cls, long stall_ms,
                      const volatile int *cancel, svc_response *resp)
{
    return get_into(url, bearer, NULL, buf, cap, on_chunk, cls, stall_ms, cancel, resp);
}

int svc_http_get_range_into(const char *url, const char *bearer, uint64_t off, void *buf,
                            size_t len, long stall_ms, const volatile int *cancel,
                            svc_response *resp)
{
    char range[48];
    if (len == 0) {
        memset(resp, 0, sizeof *resp);
        snprintf(resp->error, sizeof resp->error, "an empty range");
        return -EINVAL;
    }
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    return get_into(url, bearer, range, buf, len, NULL, NULL, stall_ms, cancel, resp);
}

static int get_into(const char *url, const char *bearer, const char *range, void *buf, size_t cap,
                    svc_chunk_fn on_chunk, void *cls, long stall_ms, const volatile int *cancel,
                    svc_response *resp)
{
    memset(resp, 0, sizeof *resp);
    if (url == NULL || (buf == NULL && cap > 0)) {
        snprintf(resp->error, sizeof resp->error, "missing url or buffer");
        return -EINVAL;
    }

    int ret = SVC_XFER_EIO;
    struct curl_slist *hdrs = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    raw_sink sink = {.buf = buf, .cap = cap, .announced = -1, .on_chunk = on_chunk, .cls = cls};
    CURL *h = NULL;

    const char *lines[2] = {"Accept: application/octet-stream, application/json", "Expect:"};
    if (!(hdrs = headers_build(lines, 2, bearer, resp)))
        goto done;
    if (!(h = handle_prepare(url, hdrs, errbuf, resp)))
        goto done;
    sink.h = h;
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    if (range)
        curl_easy_setopt(h, CURLOPT_RANGE, range);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_raw);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    raw_limits(h, stall_ms, cancel);

    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    resp->status = (int)status;
    if (sink.too_big) {
        resp->length = sink.announced > (int64_t)cap ? sink.announced : -1;
        snprintf(resp->error, sizeof resp->error, "the body is larger than %zu bytes", cap);
        ret = SVC_XFER_TOOBIG;
        goto done;
    }
    if (sink.aborted || rc == CURLE_ABORTED_BY_CALLBACK || raw_cancelled(cancel)) {
        snprintf(resp->error, sizeof resp->error, "transfer aborted");
        ret = SVC_XFER_ABORTED;
        goto done;
    }
    if (rc != CURLE_OK) {
        snprintf(resp->error, sizeof resp->error, "%s: %s", curl_easy_strerror(rc),
                 errbuf[0] ? errbuf : url);
        goto done;
    }
    resp->length = (int64_t)sink.len;
    if (sink.err.len > 0)
        resp->json = json_loadb(sink.err.buf, sink.err.len, JSON_DECODE_ANY, NULL);
    ret = 0;

done:
    handle_release(h);
    curl_slist_free_all(hdrs);
    free(sink.err.buf);
    return ret;
}

int svc_http_post_raw(const char *url, const char *bearer, const char *ctype, const void *data,
                      size_t len, long stall_ms, const volatile int *cancel, svc_response *resp)
{
    return svc_http_send_raw("POST", url, bearer, ctype, data, len, stall_ms, cancel, resp);
}

int svc_http_send_raw(const char *method, const char *url, const char *bearer, const char *ctype,
                      const void *data, size_t len, long stall_ms, const volatile int *cancel,
                      svc_response *resp)
{
    memset(resp, 0, sizeof *resp);
    if (url == NULL || ctype == NULL || (data == NULL && len > 0) ||
        strpbrk(ctype, "\r\n") != NULL || strlen(ctype) > 200) {
        snprintf(resp->error, sizeof resp->error, "missing url, content type or data");
        return -EINVAL;
    }

    int ret = SVC_XFER_EIO;
    struct curl_slist *hdrs = NULL;
    body_buf rb = {0};
    char errbuf[CURL_ERROR_SIZE] = "", type[224];
    CURL *h = NULL;

    snprintf(type, sizeof type, "Content-Type: %s", ctype);
    /* No "Expect: 100-continue": one round trip less per upload. */
    const char *lines[3] = {"Accept: application/json", "Expect:", type};
    if (!(hdrs = headers_build(lines, 3, bearer, resp)))
        goto done;
    if (!(h = handle_prepare(url, hdrs, errbuf, resp)))
        goto done;
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    /* POSTFIELDS (not COPYPOSTFIELDS): curl reads the caller's bytes in place. */
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, data != NULL ? data : "");
    if (strcmp(method, "POST") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &rb);
    raw_limits(h, stall_ms, cancel);

    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_ABORTED_BY_CALLBACK || raw_cancelled(cancel)) {
        snprintf(resp->error, sizeof resp->error, "transfer aborted");
        ret = SVC_XFER_ABORTED;
        goto done;
    }
    ret = transfer_result(h, rc, url, errbuf, &rb, resp);

done:
    handle_release(h);
    curl_slist_free_all(hdrs);
    free(rb.buf);
    return ret;
}

void svc_response_clear(svc_response *resp)
{
    if (resp == NULL)
        return;
    json_decref(resp->json);
    resp->json = NULL;
    resp->status = 0;
    resp->length = 0;
    resp->error[0] = '\0';
}

/* ---- many POSTs at once (svc_poster) ---- */

/* One transfer: what its callbacks need. */
typedef struct poster_xfer {
    struct poster_xfer *prev, *next;   /* the poster's list of transfers in flight */
    svc_post *post;
    CURL *h;
    struct curl_slist *hdr;
    svc_addr_ok_fn addr_ok;
    const void *cls;
    char refused[200];       /* why opensocket refused an address */
    char errbuf[CURL_ERROR_SIZE];
    int64_t t0;
} poster_xfer;

struct svc_poster {
    CURLM *multi;
    int running;             /* transfers added and not yet handed back */
    poster_xfer *xfers;      /* those transfers */
};

svc_poster *svc_poster_new(void)
{
    svc_poster *p = calloc(1, sizeof *p);
    if (p && !(p->multi = curl_multi_init())) {
        free(p);
        p = NULL;
    }
    return p;
}

/* Every connection's socket comes from here: the resolved address is
 * checked right before the connect, so a DNS answer that changed since the
 * URL was checked (rebinding) cannot lead anywhere addr_ok refuses. */
static curl_socket_t poster_opensocket(void *cls, curlsocktype purpose, struct curl_sockaddr *a)
{
    poster_xfer *x = cls;
    if (purpose == CURLSOCKTYPE_IPCXN && x->addr_ok &&
        !x->addr_ok(x->cls, &a->addr, x->refused, sizeof x->refused))
        return CURL_SOCKET_BAD;
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static size_t poster_discard(char *ptr, size_t size, size_t n, void *cls)
{
    (void)ptr, (void)cls;
    return size * n;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sets up x's easy handle for its post; 0 or -1. */
static int poster_setup(poster_xfer *x, long timeout_ms)
{
    svc_post *p = x->post;
    if (!(x->h = curl_easy_init()))
        return -1;
    for (int i = 0; p->headers && p->headers[i]; i++) {
        struct curl_slist *l = curl_slist_append(x->hdr, p->headers[i]);
        if (!l)
            return -1;
        x->hdr = l;
    }
    CURL *h = x->h;
    curl_easy_setopt(h, CURLOPT_URL, p->url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, p->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)p->len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdr);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, poster_opensocket);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, poster_discard);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    return 0;
}

/* Takes x off p's list (when on it) and frees it. */
static void poster_xfer_free(svc_poster *p, poster_xfer *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else if (p->xfers == x)
        p->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    if (x->h) {
        curl_multi_remove_handle(p->multi, x->h);
        curl_easy_cleanup(x->h);
    }
    curl_slist_free_all(x->hdr);
    free(x);
}

/* Fills x's post from how its transfer ended. */
static void poster_done(poster_xfer *x, CURLcode res)
{
    svc_post *p = x->post;
    p->duration_ms = (int)(mono_ms() - x->t0);
    long code = 0;
    if (res == CURLE_OK)
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    p->status = (int)code;
    if (res == CURLE_OK)
        p->error[0] = '\0';
    else if (x->refused[0])
        snprintf(p->error, sizeof p->error, "address refused: %s", x->refused);
    else
        snprintf(p->error, sizeof p->error, "%s", x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));
}

int svc_poster_add(svc_poster *p, svc_post *post, long timeout_ms, svc_addr_ok_fn addr_ok,
                   const void *cls)
{
    poster_xfer *x = calloc(1, sizeof *x);
    if (!x)
        return -1;
    *x = (poster_xfer){.post = post, .addr_ok = addr_ok, .cls = cls, .t0 = mono_ms()};
    post->status = 0;
    post->error[0] = '\0';
    post->duration_ms = 0;
    if (poster_setup(x, timeout_ms) != 0 || curl_multi_add_handle(p->multi, x->h) != CURLM_OK) {
        if (x->h)
            curl_easy_cleanup(x->h);
        x->h = NULL;
        poster_xfer_free(p, x);
        return -1;
    }
    x->next = p->xfers;
    if (x->next)
        x->next->prev = x;
    p->xfers = x;
    p->running++;
    return 0;
}

/* Hands back every transfer curl says has ended. */
static void poster_collect(svc_poster *p, void (*done)(void *ctx, svc_post *post), void *ctx)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(p->multi, &left)) != NULL) {
        poster_xfer *x = NULL;
        if (m->msg != CURLMSG_DONE ||
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x) != CURLE_OK || !x)
            continue;
        poster_done(x, m->data.result);
        svc_post *post = x->post;
        poster_xfer_free(p, x);
        p->running--;
        done(ctx, post);
    }
}

int svc_poster_run(svc_poster *p, int wait_ms, void (*done)(void *ctx, svc_post *post), void *ctx)
{
    int64_t until = mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    int before = p->running;
    for (;;) {
        int active = 0;
        curl_multi_perform(p->multi, &active);
        poster_collect(p, done, ctx);
        int64_t left = until - mono_ms();
        if (p->running < before || p->running == 0 || left <= 0)
            break;
        curl_multi_poll(p->multi, NULL, 0, (int)(left < 1000 ? left : 1000), NULL);
    }
    return p->running;
}

void svc_poster_abort(svc_poster *p, void (*done)(void *ctx, svc_post *post), void *ctx)
{
    while (p->xfers) {
        poster_xfer *x = p->xfers;
        svc_post *post = x->post;
        post->status = 0;
        post->duration_ms = (int)(mono_ms() - x->t0);
        snprintf(post->error, sizeof post->error, "aborted");
        poster_xfer_free(p, x);
        p->running--;
        done(ctx, post);
    }
}

void svc_poster_free(svc_poster *p)
{
    if (!p)
        return;
    while (p->xfers)
        poster_xfer_free(p, p->xfers);
    curl_multi_cleanup(p->multi);
    free(p);
}
