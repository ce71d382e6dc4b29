/* svc_sse.c — Server-Sent Events over svc_http's live streams (svc_sse.h).
 * The channel is a byte queue under a mutex: producers append frames and
 * wake the stream; the connection's fill takes what is there, or answers
 * SVC_STREAM_LATER when nothing is. */
#include "svc_sse.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "svc_log.h"

#define SSE_MAX_QUEUED_DEFAULT ((size_t)1 << 20)

struct svc_sse {
    pthread_mutex_t mu;
    svc_stream *stream;
    char *buf;          /* queued bytes are buf[off, len) */
    size_t off, len, cap, max;
    int refs;           /* the stream's fill and the caller */
    int ended;          /* svc_sse_end: finish after the queue */
    int closed;         /* nothing more may be queued */
    int cut;            /* over max: abort the body */
};

static void sse_unref(svc_sse *c)
{
    pthread_mutex_lock(&c->mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last) {
        pthread_mutex_destroy(&c->mu);
        free(c->buf);
        free(c);
    }
}

static ssize_t sse_fill(void *cls, char *out, size_t max)
{
    svc_sse *c = cls;
    pthread_mutex_lock(&c->mu);
    ssize_t n;
    if (c->cut) {
        n = -1;
    } else if (c->off < c->len) {
        size_t k = c->len - c->off < max ? c->len - c->off : max;
        memcpy(out, c->buf + c->off, k);
        c->off += k;
        if (c->off == c->len)
            c->off = c->len = 0;
        n = (ssize_t)k;
    } else {
        n = c->ended ? 0 : SVC_STREAM_LATER;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* The response is gone (sent, client gone, server stopped). */
static void sse_gone(void *cls)
{
    svc_sse *c = cls;
    pthread_mutex_lock(&c->mu);
    c->closed = 1;
    pthread_mutex_unlock(&c->mu);
    sse_unref(c);
}

svc_sse *svc_sse_open(svc_req *req, size_t max_queued)
{
    svc_sse *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->max = max_queued > 0 ? max_queued : SSE_MAX_QUEUED_DEFAULT;
    c->refs = 2;
    svc_reply_header(req, "Cache-Control", "no-cache");
    svc_reply_header(req, "X-Accel-Buffering", "no");
    c->stream = svc_reply_stream_live(req, 200, "text/event-stream; charset=utf-8", sse_fill, c,
                                      sse_gone);
    if (c->stream == NULL) { /* sse_gone ran: only the caller's reference is left */
        sse_unref(c);
        return NULL;
    }
    return c;
}

/* Appends n bytes of text and wakes the stream; mu held by the caller.
 * 0, or -1 when closed or when the client is too slow (then cut off). */
static int sse_queue(svc_sse *c, const char *text, size_t n)
{
    if (c->closed || c->ended)
        return -1;
    if (c->len - c->off + n > c->max) {
        c->cut = c->closed = 1;
        svc_warn("sse: a client %zu bytes behind is cut off", c->len - c->off);
        svc_stream_wake(c->stream);
        return -1;
    }
    if (c->len + n > c->cap) {
        if (c->off > 0) { /* reuse what was sent before growing */
            memmove(c->buf, c->buf + c->off, c->len - c->off);
            c->len -= c->off;
            c->off = 0;
        }
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n)
            cap *= 2;
        char *b = cap != c->cap ? realloc(c->buf, cap) : c->buf;
        if (b == NULL)
            return -1;
        c->buf = b;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, text, n);
    c->len += n;
    svc_stream_wake(c->stream);
    return 0;
}

static int has_newline(const char *s)
{
    return s != NULL && strpbrk(s, "\r\n") != NULL;
}

/* Appends s (n bytes) to out when it fits; counts it anyway. */
static void put(char *out, size_t cap, size_t *at, const char *s, size_t n)
{
    if (*at + n < cap)
        memcpy(out + *at, s, n);
    *at += n;
}

long svc_sse_frame(char *out, size_t cap, const char *id, const char *event, const char *data)
{
    if (has_newline(id) || has_newline(event))
        return -1;
    size_t at = 0;
    if (id != NULL) {
        put(out, cap, &at, "id: ", 4);
        put(out, cap, &at, id, strlen(id));
        put(out, cap, &at, "\n", 1);
    }
    if (event != NULL) {
        put(out, cap, &at, "event: ", 7);
        put(out, cap, &at, event, strlen(event));
        put(out, cap, &at, "\n", 1);
    }
    /* Every line of data, empty ones too, is a data: line of its own;
     * the client joins them with LF. */
    const char *p = data != NULL ? data : "";
    for (;;) {
        size_t k = strcspn(p, "\r\n");
        put(out, cap, &at, "data: ", 6);
        put(out, cap, &at, p, k);
        put(out, cap, &at, "\n", 1);
        p += k;
        if (*p == '\0')
            break;
        p += p[0] == '\r' && p[1] == '\n' ? 2 : 1;
    }
    put(out, cap, &at, "\n", 1);
    if (at < cap)
        out[at] = '\0';
    return (long)at;
}

int svc_sse_send(svc_sse *c, const char *id, const char *event, const char *data)
{
    char small[1024];
    long n = svc_sse_frame(small, sizeof(small), id, event, data);
    if (n < 0)
        return -1;
    char *frame = small;
    if ((size_t)n >= sizeof(small)) {
        if ((frame = malloc((size_t)n + 1)) == NULL)
            return -1;
        svc_sse_frame(frame, (size_t)n + 1, id, event, data);
    }
    pthread_mutex_lock(&c->mu);
    int rc = sse_queue(c, frame, (size_t)n);
    pthread_mutex_unlock(&c->mu);
    if (frame != small)
        free(frame);
    return rc;
}

int svc_sse_comment(svc_sse *c, const char *text)
{
    if (has_newline(text))
        return -1;
    char line[256];
    int n = snprintf(line, sizeof(line), ": %s\n\n", text);
    if (n < 0 || (size_t)n >= sizeof(line))
        return -1;
    pthread_mutex_lock(&c->mu);
    int rc = sse_queue(c, line, (size_t)n);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void svc_sse_end(svc_sse *c)
{
    pthread_mutex_lock(&c->mu);
    c->ended = 1;
    svc_stream_wake(c->stream);
    pthread_mutex_unlock(&c->mu);
}

size_t svc_sse_queued(svc_sse *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->len - c->off;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int svc_sse_closed(svc_sse *c)
{
    pthread_mutex_lock(&c->mu);
    int closed = c->closed || c->ended;
    pthread_mutex_unlock(&c->mu);
    return closed;
}

void svc_sse_release(svc_sse *c)
{
    if (c == NULL)
        return;
    svc_stream_release(c->stream);
    sse_unref(c);
}
