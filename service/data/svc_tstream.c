/* svc_tstream.c — JSON documents written piece by piece (svc_tstream.h).
 * A document is a list of parts (literal text, a tensor's "data" array, a
 * tensor's base64 string) and a cursor into it; every read formats only as
 * much as the reader's buffer holds, so memory stays O(buffer) whatever the
 * size of the tensors. */
#include "svc_tstream.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "svc_dtoa.h"
#include "svc_util.h"

/* Room a step needs to make progress: one number with its comma (the
 * formatter writes a NUL after it), or one base64 group. A reader with
 * less room is served from pend. */
#define PIECE_MIN (SVC_DTOA_MAX + 8)

typedef enum { PART_TEXT, PART_NUMS, PART_B64 } part_kind;

typedef struct part {
    part_kind kind;
    char *text;                 /* TEXT: own copy */
    size_t len;                 /* TEXT: bytes; NUMS, B64: bytes of data */
    svc_dtype dtype;            /* NUMS */
    const unsigned char *data;  /* NUMS, B64: borrowed */
} part;

/* Memory the stream releases when freed: malloc'd (len 0) or mapped. */
typedef struct owned_mem {
    void *p;
    size_t map_len;   /* > 0: munmap(p, map_len); 0: free(p) */
} owned_mem;

struct svc_tstream {
    part *parts;
    size_t n, cap;
    owned_mem *owned;
    size_t nowned, owned_cap;
    size_t cur;       /* the part being read */
    int stage;        /* NUMS, B64: 0 before the opening bracket or quote,
                         1 in the body, 2 before the closing one */
    size_t pos;       /* TEXT: bytes written; NUMS: elements; B64: bytes encoded */
    char pend[64];    /* a piece that did not fit the reader's buffer */
    size_t pend_len, pend_off;
};

svc_tstream *svc_tstream_new(void)
{
    return calloc(1, sizeof(svc_tstream));
}

void svc_tstream_free(void *cls)
{
    svc_tstream *s = cls;
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->parts[i].text);
    for (size_t i = 0; i < s->nowned; i++) {
        if (s->owned[i].map_len > 0)
            munmap(s->owned[i].p, s->owned[i].map_len);
        else
            free(s->owned[i].p);
    }
    free(s->parts);
    free(s->owned);
    free(s);
}

/* A new zeroed part at the end, or NULL on ENOMEM. */
static part *part_add(svc_tstream *s)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        part *p = realloc(s->parts, cap * sizeof(part));
        if (p == NULL)
            return NULL;
        s->parts = p;
        s->cap = cap;
    }
    part *p = &s->parts[s->n++];
    memset(p, 0, sizeof(*p));
    return p;
}

int svc_tstream_text(svc_tstream *s, const char *text, size_t len)
{
    if (len == 0)
        return 0;
    char *copy = malloc(len);
    part *p = copy != NULL ? part_add(s) : NULL;
    if (p == NULL) {
        free(copy);
        return -ENOMEM;
    }
    memcpy(copy, text, len);
    p->kind = PART_TEXT;
    p->text = copy;
    p->len = len;
    return 0;
}

/* Takes ptr (map_len 0: from malloc; else a mapping of that length). */
static int own(svc_tstream *s, void *ptr, size_t map_len)
{
    if (s->nowned == s->owned_cap) {
        size_t cap = s->owned_cap ? 2 * s->owned_cap : 4;
        owned_mem *o = realloc(s->owned, cap * sizeof(*o));
        if (o == NULL) {
            if (map_len > 0)
                munmap(ptr, map_len);
            else
                free(ptr);
            return -ENOMEM;
        }
        s->owned = o;
        s->owned_cap = cap;
    }
    s->owned[s->nowned++] = (owned_mem){ptr, map_len};
    return 0;
}

int svc_tstream_own(svc_tstream *s, void *ptr)
{
    return ptr == NULL ? 0 : own(s, ptr, 0);
}

int svc_tstream_own_mapping(svc_tstream *s, void *addr, size_t len)
{
    return addr == NULL || len == 0 ? 0 : own(s, addr, len);
}

int svc_tstream_tensor(svc_tstream *s, const svc_tensor *t, int b64)
{
    if ((size_t)svc_tensor_elems(t) * svc_dtype_size(t->dtype) != t->nbytes ||
        (t->nbytes > 0 && t->data == NULL))
        return -EINVAL;
    /* {"dtype":"float32","shape":[...],"data": — shape dims are int64. */
    char head[64 + SVC_TENSOR_MAX_DIMS * 21];
    size_t off = (size_t)snprintf(head, sizeof(head), "{\"dtype\":\"%s\",\"shape\":[",
                                  svc_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim; i++)
        off += (size_t)snprintf(head + off, sizeof(head) - off, "%s%lld", i ? "," : "",
                                (long long)t->shape[i]);
    off += (size_t)snprintf(head + off, sizeof(head) - off, "],\"%s\":", b64 ? "b64" : "data");
    if (svc_tstream_text(s, head, off) != 0)
        return -ENOMEM;
    part *p = part_add(s);
    if (p == NULL)
        return -ENOMEM;
    p->kind = b64 ? PART_B64 : PART_NUMS;
    p->dtype = t->dtype;
    p->data = t->data;
    p->len = t->nbytes;
    return svc_tstream_text(s, "}", 1);
}

/* Decimal text of v into out (at least 12 bytes); returns its length. */
static size_t i32_text(int32_t v, char *out)
{
    char tmp[12];
    size_t n = 0;
    uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    size_t len = 0;
    if (v < 0)
        out[len++] = '-';
    while (n > 0)
        out[len++] = tmp[--n];
    return len;
}

/* A non-finite real as its JSON string; returns the length written. */
static size_t nonfinite_text(double v, char *out)
{
    const char *s = isnan(v) ? "\"NaN\"" : v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    size_t n = strlen(s);
    memcpy(out, s, n);
    return n;
}

/* Element i of a NUMS part as JSON text into out (at least SVC_DTOA_MAX
 * bytes); returns its length. Data is read with memcpy: a tensor's offset
 * in a packed blob need not be aligned to its element size. */
static size_t elem_text(const part *p, size_t i, char *out)
{
    switch (p->dtype) {
    case SVC_F32: {
        float v;
        memcpy(&v, p->data + 4 * i, 4);
        return isfinite(v) ? svc_dtoa_f32(v, out) : nonfinite_text(v, out);
    }
    case SVC_F64: {
        double v;
        memcpy(&v, p->data + 8 * i, 8);
        return isfinite(v) ? svc_dtoa_f64(v, out) : nonfinite_text(v, out);
    }
    case SVC_I32: {
        int32_t v;
        memcpy(&v, p->data + 4 * i, 4);
        return i32_text(v, out);
    }
    }
    return 0;
}

static void part_next(svc_tstream *s)
{
    s->cur++;
    s->stage = 0;
    s->pos = 0;
}

/* "[1.0,2.5,...]": as many elements as room (>= PIECE_MIN) holds. */
static size_t step_nums(svc_tstream *s, const part *p, char *dst, size_t room)
{
    size_t used = 0, elems = p->len / svc_dtype_size(p->dtype);
    if (s->stage == 0) {
        dst[used++] = '[';
        s->stage = 1;
    }
    while (s->pos < elems && room - used >= 1 + SVC_DTOA_MAX) {
        if (s->pos > 0)
            dst[used++] = ',';
        used += elem_text(p, s->pos++, dst + used);
    }
    if (s->pos == elems && used < room) {
        dst[used++] = ']';
        part_next(s);
    }
    return used;
}

/* "\"AAEC...\"": whole 3-byte groups while room (>= PIECE_MIN) lasts. */
static size_t step_b64(svc_tstream *s, const part *p, char *dst, size_t room)
{
    size_t used = 0;
    if (s->stage == 0) {
        dst[used++] = '"';
        s->stage = 1;
    }
    size_t groups = (room - used) / 4, left = p->len - s->pos;
    size_t take = groups * 3 < left ? groups * 3 : left;
    if (take > 0) {
        used += svc_b64_encode_to(p->data + s->pos, take, dst + used);
        s->pos += take;
    }
    if (s->pos == p->len && used < room) {
        dst[used++] = '"';
        part_next(s);
    }
    return used;
}

/* Writes the next piece of the current part into dst (room >= PIECE_MIN);
 * returns its length, 0 at the end of the document. */
static size_t step(svc_tstream *s, char *dst, size_t room)
{
    if (s->cur == s->n)
        return 0;
    const part *p = &s->parts[s->cur];
    if (p->kind == PART_NUMS)
        return step_nums(s, p, dst, room);
    if (p->kind == PART_B64)
        return step_b64(s, p, dst, room);
    size_t k = p->len - s->pos < room ? p->len - s->pos : room;
    memcpy(dst, p->text + s->pos, k);
    s->pos += k;
    if (s->pos == p->len)
        part_next(s);
    return k;
}

ssize_t svc_tstream_read(void *cls, char *buf, size_t max)
{
    svc_tstream *s = cls;
    size_t out = 0;
    while (out < max) {
        if (s->pend_off < s->pend_len) {
            size_t k = s->pend_len - s->pend_off;
            k = k < max - out ? k : max - out;
            memcpy(buf + out, s->pend + s->pend_off, k);
            s->pend_off += k;
            out += k;
            continue;
        }
        size_t k;
        if (max - out >= PIECE_MIN) {
            k = step(s, buf + out, max - out);
            out += k;
        } else {
            k = step(s, s->pend, sizeof(s->pend));
            s->pend_len = k;
            s->pend_off = 0;
        }
        if (k == 0)
            break;
    }
    return (ssize_t)out;
}
