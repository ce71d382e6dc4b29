/* svc_multipart.c — streaming multipart/form-data (svc_multipart.h).
 * Part data is scanned with memchr for the CR that starts the delimiter
 * "\r\n--boundary", so content moves at memchr speed; a delimiter cut by
 * the end of a piece is remembered as a count of matched bytes, and given
 * back as content if it turns out not to be one. */
#include "svc_multipart.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MP_BOUNDARY_MAX 70   /* RFC 2046 5.1.1 */

enum {
    ST_PREAMBLE,   /* before the first delimiter; bytes dropped */
    ST_AFTER,      /* a delimiter was just matched */
    ST_PAD,        /* transport padding (SP / HT) after a delimiter */
    ST_CR,         /* the CR that ends a delimiter line */
    ST_DASH,       /* the first '-' of a closing delimiter */
    ST_HEADERS,    /* a part's header block, collected in hbuf */
    ST_DATA,       /* a part's content; bytes handed to part_data */
    ST_DONE,       /* after the closing delimiter; the epilogue is dropped */
    ST_ERROR,
};

struct svc_multipart {
    svc_multipart_cb cb;
    void *cls;
    size_t max_parts, max_headers;
    char delim[4 + MP_BOUNDARY_MAX + 1];   /* "\r\n--" boundary */
    size_t dlen;
    int state;
    size_t match;      /* delim[0..match) seen at the end of the last piece */
    size_t parts;      /* parts begun; the current one's number */
    char *hbuf;        /* the current header block */
    size_t hlen, hcap;
    char *sbuf;        /* NUL-terminated strings for part_begin */
    size_t scap;
    char err[200];
};

/* Records the first error and makes the parser refuse from now on; -1. */
static int mp_fail(svc_multipart *mp, const char *fmt, ...)
{
    if (mp->state != ST_ERROR) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(mp->err, sizeof mp->err, fmt, ap);
        va_end(ap);
        mp->state = ST_ERROR;
    }
    return -1;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t';
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && is_ws(*p))
        p++;
    return p;
}

/* RFC 2046 bchars: the characters a boundary may hold. */
static int is_bchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("'()+_,-./:=? ", c) != NULL);
}

/* Case-insensitive: does [s, s+n) equal lit? */
static int ci_is(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && strncasecmp(s, lit, n) == 0;
}

/* One "; name=value" parameter of a header value at [*pp, end): sets the
 * name and the value (quotes removed) and advances *pp. Returns 1 for a
 * parameter, 0 at the end of the value, -1 when it is malformed, -2 for an
 * unterminated quoted string. A trailing ';' is allowed. */
static int next_param(const char **pp, const char *end, const char **name, size_t *nlen,
                      const char **val, size_t *vlen)
{
    const char *p = skip_ws(*pp, end);
    if (p == end)
        return 0;
    if (*p != ';')
        return -1;
    p = skip_ws(p + 1, end);
    if (p == end) {
        *pp = p;
        return 0;
    }
    *name = p;
    while (p < end && *p != '=' && *p != ';' && !is_ws(*p))
        p++;
    *nlen = (size_t)(p - *name);
    p = skip_ws(p, end);
    if (*nlen == 0 || p == end || *p != '=')
        return -1;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '"') {
        const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
        if (q == NULL)
            return -2;
        *val = p + 1;
        *vlen = (size_t)(q - p - 1);
        p = q + 1;
    } else {
        *val = p;
        while (p < end && *p != ';' && !is_ws(*p))
            p++;
        *vlen = (size_t)(p - *val);
        if (*vlen == 0)
            return -1;
    }
    *pp = p;
    return 1;
}

/* Reads the boundary out of a Content-Type value into delim; NULL on
 * success, else the reason. */
static const char *mp_boundary(svc_multipart *mp, const char *ct)
{
    if (ct == NULL)
        return "multipart body without a Content-Type header";
    const char *end = ct + strlen(ct), *p = skip_ws(ct, end), *type = p;
    while (p < end && *p != ';' && !is_ws(*p))
        p++;
    if (!ci_is(type, (size_t)(p - type), "multipart/form-data"))
        return "Content-Type is not multipart/form-data";
    const char *b = NULL, *name, *val;
    size_t blen = 0, nlen, vlen;
    int rc;
    while ((rc = next_param(&p, end, &name, &nlen, &val, &vlen)) == 1) {
        if (!ci_is(name, nlen, "boundary"))
            continue;
        if (b != NULL)
            return "Content-Type has two boundary parameters";
        b = val;
        blen = vlen;
    }
    if (rc < 0)
        return "malformed parameters in the multipart Content-Type";
    if (b == NULL)
        return "multipart/form-data Content-Type has no boundary parameter";
    if (blen == 0 || blen > MP_BOUNDARY_MAX)
        return "multipart boundary must be 1 to 70 characters long (RFC 2046)";
    for (size_t i = 0; i < blen; i++)
        if (!is_bchar(b[i]))
            return "multipart boundary holds a character RFC 2046 does not allow";
    if (b[blen - 1] == ' ')
        return "multipart boundary ends in a space (RFC 2046 does not allow it)";
    memcpy(mp->delim, "\r\n--", 4);
    memcpy(mp->delim + 4, b, blen);
    mp->dlen = 4 + blen;
    mp->delim[mp->dlen] = '\0';
    return NULL;
}

svc_multipart *svc_multipart_new(const char *content_type, const svc_multipart_cb *cb, void *cls,
                                 size_t max_parts, size_t max_header_bytes, const char **why)
{
    const char *reason = "out of memory";
    svc_multipart *mp = calloc(1, sizeof *mp);
    if (mp == NULL)
        goto fail;
    if ((reason = mp_boundary(mp, content_type)) != NULL)
        goto fail;
    if (cb != NULL)
        mp->cb = *cb;
    mp->cls = cls;
    mp->max_parts = max_parts ? max_parts : SVC_MULTIPART_DEFAULT_PARTS;
    mp->max_headers = max_header_bytes ? max_header_bytes : SVC_MULTIPART_DEFAULT_HEADERS;
    /* The body may open with "--boundary" itself: start as if after a CRLF. */
    mp->state = ST_PREAMBLE;
    mp->match = 2;
    return mp;

fail:
    free(mp);
    if (why != NULL)
        *why = reason;
    return NULL;
}

void svc_multipart_free(svc_multipart *mp)
{
    if (mp == NULL)
        return;
    free(mp->hbuf);
    free(mp->sbuf);
    free(mp);
}

const char *svc_multipart_error(const svc_multipart *mp)
{
    return mp->err;
}

/* Hands n bytes of the current part on; 0, or -1 when the callback stops. */
static int mp_emit(svc_multipart *mp, const char *p, size_t n)
{
    if (n == 0 || mp->state != ST_DATA || mp->cb.part_data == NULL)
        return 0;
    if (mp->cb.part_data(mp->cls, p, n) != 0)
        return mp_fail(mp, "stopped by the application");
    return 0;
}

/* A delimiter was matched in the preamble or after a part's content. */
static int mp_delimiter(svc_multipart *mp)
{
    int in_part = mp->state == ST_DATA;
    mp->state = ST_AFTER;
    mp->match = 0;
    if (in_part && mp->cb.part_end != NULL && mp->cb.part_end(mp->cls) != 0)
        return mp_fail(mp, "stopped by the application");
    return 0;
}

/* Copies [s, s+n) into the string area at *at, NUL-terminated; returns it. */
static const char *put_str(svc_multipart *mp, size_t *at, const char *s, size_t n)
{
    char *d = mp->sbuf + *at;
    memcpy(d, s, n);
    d[n] = '\0';
    *at += n + 1;
    return d;
}

/* Parses the complete header block in hbuf (its lines end in CRLF, the
 * last one empty) and starts the part. 0 or -1. */
/* A part's header lines (hbuf, up to its blank line): the values of its
 * Content-Disposition (required) and Content-Type, each at most once.
 * 0, or what mp_fail returns. */
static int mp_part_headers(svc_multipart *mp, const char **disp, const char **disp_end, const char **ct,
                      const char **ct_end)
{
    size_t no = mp->parts;
    const char *p = mp->hbuf, *end = mp->hbuf + mp->hlen - 2;
    *disp = *disp_end = *ct = *ct_end = NULL;
    while (p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));   /* every CR is a CRLF here */
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (is_ws(*p))
            return mp_fail(mp, "part %zu has a folded header line (obsolete; one line per header)", no);
        if (colon == NULL)
            return mp_fail(mp, "part %zu has a header line without a colon", no);
        for (const char *q = p; q < colon; q++)
            if (is_ws(*q) || *q < 0x21)
                return mp_fail(mp, "part %zu has a malformed header name", no);
        const char *v = skip_ws(colon + 1, eol), *v_end = eol;
        while (v_end > v && is_ws(v_end[-1]))
            v_end--;
        size_t nlen = (size_t)(colon - p);
        if (ci_is(p, nlen, "content-disposition")) {
            if (*disp != NULL)
                return mp_fail(mp, "part %zu has two Content-Disposition headers", no);
            *disp = v, *disp_end = v_end;
        } else if (ci_is(p, nlen, "content-type")) {
            if (*ct != NULL)
                return mp_fail(mp, "part %zu has two Content-Type headers", no);
            *ct = v, *ct_end = v_end;
        }
        p = eol + 2;
    }
    if (*disp == NULL)
        return mp_fail(mp, "part %zu has no Content-Disposition header", no);
    return 0;
}

/* Content-Disposition [disp, disp_end): form-data, with a name (required)
 * and a filename, each at most once. 0, or what mp_fail returns. */
static int mp_disposition(svc_multipart *mp, const char *disp, const char *disp_end, const char **name,
                          size_t *name_len, const char **fname, size_t *fname_len)
{
    size_t no = mp->parts;
    const char *type = disp, *p = disp, *pn, *pv;
    size_t pnlen, pvlen;
    int rc;
    while (p < disp_end && *p != ';' && !is_ws(*p))
        p++;
    if (!ci_is(type, (size_t)(p - type), "form-data"))
        return mp_fail(mp, "part %zu is not form-data (Content-Disposition: %.*s)", no,
                       (int)(p - type > 40 ? 40 : p - type), type);
    *name = *fname = NULL;
    *name_len = *fname_len = 0;
    while ((rc = next_param(&p, disp_end, &pn, &pnlen, &pv, &pvlen)) == 1) {
        if (ci_is(pn, pnlen, "name")) {
            if (*name != NULL)
                return mp_fail(mp, "part %zu has two name parameters", no);
            *name = pv, *name_len = pvlen;
        } else if (ci_is(pn, pnlen, "filename")) {
            if (*fname != NULL)
                return mp_fail(mp, "part %zu has two filename parameters", no);
            *fname = pv, *fname_len = pvlen;
        }
    }
    if (rc == -2)
        return mp_fail(mp, "part %zu has an unterminated quoted string in Content-Disposition", no);
    if (rc < 0)
        return mp_fail(mp, "part %zu has a malformed Content-Disposition header", no);
    if (*name == NULL || *name_len == 0)
        return mp_fail(mp, "part %zu has no name", no);
    return 0;
}

static int mp_part_begin(svc_multipart *mp)
{
    const char *disp = NULL, *disp_end = NULL, *ct = NULL, *ct_end = NULL, *name = NULL, *fname = NULL;
    size_t name_len = 0, fname_len = 0;
    int rc;
    if ((rc = mp_part_headers(mp, &disp, &disp_end, &ct, &ct_end)) != 0 ||
        (rc = mp_disposition(mp, disp, disp_end, &name, &name_len, &fname, &fname_len)) != 0)
        return rc;
    /* The three strings come from disjoint parts of hbuf: hlen + 3 bytes. */
    if (mp->scap < mp->hlen + 3) {
        char *s = realloc(mp->sbuf, mp->hlen + 3);
        if (s == NULL)
            return mp_fail(mp, "out of memory");
        mp->sbuf = s;
        mp->scap = mp->hlen + 3;
    }
    size_t at = 0;
    const char *s_name = put_str(mp, &at, name, name_len);
    const char *s_fname = fname ? put_str(mp, &at, fname, fname_len) : NULL;
    const char *s_ct = ct ? put_str(mp, &at, ct, (size_t)(ct_end - ct)) : NULL;
    mp->state = ST_DATA;
    mp->match = 0;
    if (mp->cb.part_begin != NULL && mp->cb.part_begin(mp->cls, s_name, s_fname, s_ct) != 0)
        return mp_fail(mp, "stopped by the application");
    return 0;
}

/* Collects header bytes from data[0..n); returns the count used, or
 * (size_t)-1 on error. */
static size_t mp_headers(svc_multipart *mp, const char *data, size_t n)
{
    size_t i = 0;
    while (i < n) {
        char c = data[i++];
        char prev = mp->hlen ? mp->hbuf[mp->hlen - 1] : '\0';
        if (mp->hlen == mp->max_headers) {
            mp_fail(mp, "part %zu has a header block longer than %zu bytes", mp->parts, mp->max_headers);
            return (size_t)-1;
        }
        if (prev == '\r' && c != '\n') {
            mp_fail(mp, "part %zu has a CR without LF in its headers", mp->parts);
            return (size_t)-1;
        }
        if (c == '\n' && prev != '\r') {
            mp_fail(mp, "part %zu has a bare LF in its headers; multipart lines must end in CRLF", mp->parts);
            return (size_t)-1;
        }
        if (c == '\0') {
            mp_fail(mp, "part %zu has a NUL byte in its headers", mp->parts);
            return (size_t)-1;
        }
        if (mp->hlen == mp->hcap) {
            size_t cap = mp->hcap ? 2 * mp->hcap : 256;
            if (cap > mp->max_headers)
                cap = mp->max_headers;
            char *h = realloc(mp->hbuf, cap);
            if (h == NULL) {
                mp_fail(mp, "out of memory");
                return (size_t)-1;
            }
            mp->hbuf = h;
            mp->hcap = cap;
        }
        mp->hbuf[mp->hlen++] = c;
        /* A blank line ends the block: "\r\n" alone, or "\r\n\r\n". */
        if (c == '\n' && (mp->hlen == 2 || mp->hbuf[mp->hlen - 3] == '\n'))
            return mp_part_begin(mp) == 0 ? i : (size_t)-1;
    }
    return i;
}

/* Scans data[0..n) for the delimiter in the preamble or a part's content;
 * returns the count used, or (size_t)-1 on error. */
static size_t mp_scan(svc_multipart *mp, const char *data, size_t n)
{
    size_t i = 0;
    if (mp->match > 0) {
        /* Go on with a delimiter that began in an earlier piece. */
        size_t k = mp->match;
        while (k < mp->dlen && i < n && data[i] == mp->delim[k])
            k++, i++;
        if (k == mp->dlen)
            return mp_delimiter(mp) == 0 ? i : (size_t)-1;
        if (i == n) {
            mp->match = k;
            return i;
        }
        /* Not one: the held bytes were content. delim has a single CR, at
         * its start, so no other delimiter can begin inside them. */
        mp->match = 0;
        if (mp_emit(mp, mp->delim, k) != 0)
            return (size_t)-1;
    }
    const char *start = data + i, *end = data + n, *q = start;
    for (;;) {
        const char *r = memchr(q, '\r', (size_t)(end - q));
        if (r == NULL)
            return mp_emit(mp, start, (size_t)(end - start)) == 0 ? n : (size_t)-1;
        size_t avail = (size_t)(end - r), cmp = avail < mp->dlen ? avail : mp->dlen;
        if (memcmp(r, mp->delim, cmp) == 0) {
            if (mp_emit(mp, start, (size_t)(r - start)) != 0)
                return (size_t)-1;
            if (cmp < mp->dlen) {
                mp->match = cmp;
                return n;
            }
            return mp_delimiter(mp) == 0 ? (size_t)(r - data) + mp->dlen : (size_t)-1;
        }
        q = r + 1;
    }
}

/* One byte of a delimiter line's tail: "--", padding, CRLF. 0 or -1. */
static int mp_line_byte(svc_multipart *mp, char c)
{
    switch (mp->state) {
    case ST_AFTER:
        if (c == '-') {
            mp->state = ST_DASH;
            return 0;
        }
        /* fall through */
    case ST_PAD:
        if (is_ws(c)) {
            mp->state = ST_PAD;
            return 0;
        }
        if (c == '\r') {
            mp->state = ST_CR;
            return 0;
        }
        if (c == '\n')
            return mp_fail(mp, "a boundary line ends in a bare LF; multipart lines must end in CRLF");
        return mp_fail(mp, "a line starts with the boundary but is not a boundary line "
                           "(the boundary must not occur in a part)");
    case ST_DASH:
        if (c == '-') {
            mp->state = ST_DONE;
            return 0;
        }
        return mp_fail(mp, "malformed closing boundary (a single '-' after the boundary)");
    case ST_CR:
        if (c != '\n')
            return mp_fail(mp, "a boundary line has a CR without LF");
        if (mp->parts == mp->max_parts)
            return mp_fail(mp, "multipart body has more than %zu parts", mp->max_parts);
        mp->parts++;
        mp->hlen = 0;
        mp->state = ST_HEADERS;
        return 0;
    }
    return -1;
}

int svc_multipart_feed(svc_multipart *mp, const char *data, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t used;
        switch (mp->state) {
        case ST_PREAMBLE:
        case ST_DATA:
            used = mp_scan(mp, data + i, n - i);
            break;
        case ST_HEADERS:
            used = mp_headers(mp, data + i, n - i);
            break;
        case ST_AFTER:
        case ST_PAD:
        case ST_DASH:
        case ST_CR:
            used = mp_line_byte(mp, data[i]) == 0 ? 1 : (size_t)-1;
            break;
        case ST_DONE:
            return 0;
        default:
            return -1;
        }
        if (used == (size_t)-1)
            return -1;
        i += used;
    }
    return mp->state == ST_ERROR ? -1 : 0;
}

int svc_multipart_finish(svc_multipart *mp)
{
    switch (mp->state) {
    case ST_DONE:
        return 0;
    case ST_ERROR:
        return -1;
    case ST_PREAMBLE:
        return mp_fail(mp, "multipart body has no boundary line \"%s\" (lines must end in CRLF)",
                       mp->delim + 2);
    default:
        return mp_fail(mp, "multipart body ends before its closing boundary");
    }
}
