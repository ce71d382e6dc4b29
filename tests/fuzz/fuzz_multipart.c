/* fuzz_multipart.c — libFuzzer harness for the streaming multipart/form-data
 * parser (service/http/svc_multipart.c).
 *
 * Input: byte 0 picks the piece sizes, the rest is a body for the boundary
 * "BOUNDARY-x". The body is parsed twice, fed whole and fed in pieces of 1
 * to N bytes; both runs must give the same events (part_begin strings, the
 * content of each part, part_end), the same result and the same message.
 * Callbacks must come in order (data only inside a part, a name never
 * empty), within the part limit, and an accepted body ends every part. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_multipart.h"

#define MAX_PARTS 8
#define MAX_HEADERS 256

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_multipart: invariant broken: %s\n", what);
        abort();
    }
}

/* The events of one run, serialized; data runs are merged, so the log does
 * not depend on how the body was cut. */
typedef struct {
    unsigned char *buf;
    size_t n, cap;
    size_t pending;    /* bytes of the current data run */
    int in_part;
    size_t parts;
} ev_log;

static void put(ev_log *l, const void *p, size_t n)
{
    if (l->n + n > l->cap) {
        l->cap = (l->n + n) * 2 + 64;
        l->buf = realloc(l->buf, l->cap);
        check(l->buf != NULL, "out of memory");
    }
    memcpy(l->buf + l->n, p, n);
    l->n += n;
}

/* Closes a data run: its length, so that the log is unambiguous. */
static void flush(ev_log *l)
{
    if (l->pending == 0)
        return;
    put(l, "L", 1);
    put(l, &l->pending, sizeof l->pending);
    l->pending = 0;
}

static int on_begin(void *cls, const char *name, const char *fname, const char *ct)
{
    ev_log *l = cls;
    check(!l->in_part, "part_begin inside a part");
    check(name != NULL && name[0] != '\0', "a part without a name");
    check(++l->parts <= MAX_PARTS, "more parts than max_parts");
    flush(l);
    put(l, "B", 1);
    put(l, name, strlen(name) + 1);
    put(l, fname ? "f" : "-", 1);
    if (fname)
        put(l, fname, strlen(fname) + 1);
    put(l, ct ? "c" : "-", 1);
    if (ct)
        put(l, ct, strlen(ct) + 1);
    l->in_part = 1;
    return 0;
}

static int on_data(void *cls, const char *data, size_t n)
{
    ev_log *l = cls;
    check(l->in_part, "part_data outside a part");
    check(n > 0, "part_data with no bytes");
    if (l->pending == 0)
        put(l, "D", 1);
    put(l, data, n);
    l->pending += n;
    return 0;
}

static int on_end(void *cls)
{
    ev_log *l = cls;
    check(l->in_part, "part_end outside a part");
    flush(l);
    put(l, "E", 1);
    l->in_part = 0;
    return 0;
}

static const svc_multipart_cb cb = {on_begin, on_data, on_end};

/* Parses body in pieces of 1..max_piece bytes (0: whole) drawn from seed;
 * logs the events, then the result and the message. */
static void run(const char *body, size_t len, unsigned max_piece, uint32_t seed, ev_log *l)
{
    memset(l, 0, sizeof *l);
    const char *why = NULL;
    svc_multipart *mp = svc_multipart_new("multipart/form-data; boundary=\"BOUNDARY-x\"", &cb, l,
                                          MAX_PARTS, MAX_HEADERS, &why);
    check(mp != NULL, "the fixed Content-Type is refused");
    int rc = 0;
    size_t at = 0;
    while (at < len && rc == 0) {
        size_t n = len - at;
        if (max_piece > 0) {
            seed = seed * 1103515245u + 12345u;
            size_t k = 1 + (seed >> 16) % max_piece;
            if (k < n)
                n = k;
        }
        rc = svc_multipart_feed(mp, body + at, n);
        check(rc == 0 || rc == -1, "feed returned neither 0 nor -1");
        at += n;
    }
    int fin = svc_multipart_finish(mp);
    check(fin == 0 || fin == -1, "finish returned neither 0 nor -1");
    check(rc == 0 || fin == -1, "finish succeeded after a failed feed");
    const char *err = svc_multipart_error(mp);
    check((fin == 0) == (err[0] == '\0'), "the message disagrees with the result");
    if (fin == 0)
        check(!l->in_part, "an accepted body left a part open");
    check(svc_multipart_feed(mp, "x", 1) == (fin == 0 ? 0 : -1), "feed after the end misbehaves");
    flush(l);
    put(l, fin == 0 ? "OK" : "ERR", fin == 0 ? 2 : 3);
    put(l, err, strlen(err) + 1);
    svc_multipart_free(mp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned max_piece = 1u + data[0] % 64;
    ev_log a, b;
    run((const char *)data + 1, size - 1, 0, 0, &a);
    run((const char *)data + 1, size - 1, max_piece, data[0], &b);
    if (a.n != b.n || memcmp(a.buf, b.buf, a.n) != 0) {
        fprintf(stderr, "whole: %.*s\npieces of 1..%u: %.*s\n", (int)a.n, (const char *)a.buf, max_piece,
                (int)b.n, (const char *)b.buf);
        check(0, "the events depend on how the body was cut");
    }
    free(a.buf);
    free(b.buf);
    return 0;
}
