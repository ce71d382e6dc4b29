/* svc_json.c — request bodies to jansson trees (svc_json.h). One pass over
 * the text finds the flat arrays of numbers and the long plain strings and
 * checks every number literal; jansson then parses a copy of the text in
 * which each such array is a one-string placeholder array and each such
 * string a placeholder string, and the placeholders are swapped for compact
 * arrays that keep the elements' text and for the strings themselves.
 *
 * Why the placeholder is ["<nonce>:<k>"] for an array and "<nonce>:<k>" for
 * a string: it is a value of the same kind, so it is valid exactly where
 * the value it stands for was, and jansson's errors (same tokens before it,
 * '[' at its start; a string token past 20 bytes, which jansson quotes in no
 * error) keep their texts; errors after it are moved back by the bytes it
 * saved. The nonce is 128 random bits drawn per parse, so a client string
 * cannot be taken for a placeholder. */
#include "svc_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_dtoa.h"
#include "svc_util.h"

/* Tag of a compact array: [TAG, count, "elements text"]. The NUL byte is
 * what no client string can hold. */
static const char TAG[] = "\0kowloon.numbers";
#define TAG_LEN (sizeof TAG - 1)

#define NONCE_HEX 32
/* Containers the scan keeps a frame for (keys, indices: paths in messages,
 * keys told from values). The frames are a fixed array, so that the scan
 * allocates nothing per level however deep a text nests; deeper levels are
 * only counted (a parse with limits never gets there: SVC_JSON_DEPTH_CAP). */
#define SCAN_TRACK SVC_JSON_DEPTH_CAP
/* Longest raw member name unescaped to be checked against the known fields;
 * a longer one names none of them. */
#define FIELD_RAW_MAX 1024

enum { NUM_OK = 0, NUM_OVERFLOW = 1, NUM_UNDERFLOW = 2 };

typedef struct span {
    size_t off, len; /* the array or string in the text, brackets or quotes included */
    size_t count;    /* arrays: elements */
    int str;         /* a long plain string, not an array */
} span;

typedef struct frame {
    unsigned char obj, expect_key;
    size_t index;            /* arrays: current element */
    size_t key_off, key_len; /* objects: current key (raw text) */
} frame;

typedef struct scan {
    const char *text;
    size_t len;
    span *spans;
    size_t nspans, cap;
    frame stack[SCAN_TRACK];
    size_t depth;            /* containers open; frames for the first SCAN_TRACK */
    int plain;               /* compact nothing (the text holds a NUL byte) */
    int under;               /* a literal reads as 0 though not zero */
    size_t under_end;        /* byte just after it */
    char under_msg[JSON_ERROR_TEXT_LENGTH];
    /* limits (svc_json_parse_limits); 0 / NULL: none */
    size_t max_depth, max_values, values;
    const char *const *fields;
    svc_json_over over;      /* the limit the scan stopped at */
    size_t over_at;          /* byte where it stopped */
    char over_field[64];     /* SVC_JSON_OVER_FIELD: the name */
} scan;

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* strtod on a NUL-terminated copy of the literal: the text may go on with
 * characters strtod would take ("0x1p3", or no terminator at all).
 * 0 with *d and *erange set, or -1 on ENOMEM. */
static int strtod_n(const char *p, size_t n, double *d, int *erange)
{
    char small[64], *buf = small;
    if (n >= sizeof small && (buf = malloc(n + 1)) == NULL)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    errno = 0;
    *d = strtod(buf, NULL);
    *erange = errno == ERANGE;
    if (buf != small)
        free(buf);
    return 0;
}

/* Length of the JSON number literal at p (jansson's grammar: -?(0|[1-9]d*)
 * (.d+)?([eE][+-]?d+)?), or 0 if there is none. *is_int as jansson
 * classifies it; *status NUM_OVERFLOW where jansson would refuse it (too big
 * integer, real overflow), NUM_UNDERFLOW where it has a non-zero digit but
 * reads as 0. strtod runs only for literals whose magnitude is near a limit. */
/* The exponent part of a number at p ("e" or "E", a sign, digits) into
 * *exp (clamped at a billion); p itself when there is none, NULL when it
 * is malformed. */
static const char *num_exponent(const char *p, const char *end, long long *exp)
{
    *exp = 0;
    if (p >= end || (*p != 'e' && *p != 'E'))
        return p;
    p++;
    int neg = 0;
    if (p < end && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    if (p >= end || !is_digit(*p))
        return NULL;
    while (p < end && is_digit(*p)) {
        if (*exp < 1000000000)
            *exp = *exp * 10 + (*p - '0');
        p++;
    }
    *exp = neg ? -*exp : *exp;
    return p;
}

/* The status of a real literal s (n bytes; integer digits [int0, int1),
 * fraction digits [frac0, frac1), exponent exp): NUM_OK unless its
 * magnitude is near a limit, where strtod judges it. */
static int num_real_status(const char *s, size_t n, const char *int0, const char *int1, const char *frac0,
                           const char *frac1, long long exp)
{
    /* Decimal exponent of the first non-zero digit. */
    long long e10;
    const char *q = int0;
    while (q < int1 && *q == '0')
        q++;
    if (q < int1) {
        e10 = (long long)(int1 - q) - 1 + exp;
    } else {
        q = frac0;
        while (q < frac1 && *q == '0')
            q++;
        if (q == frac1)
            return NUM_OK; /* all zeros: exactly 0 */
        e10 = -(long long)(q - frac0) - 1 + exp;
    }
    if (e10 > -300 && e10 < 300)
        return NUM_OK;
    int erange;
    double d;
    if (strtod_n(s, n, &d, &erange) < 0)
        return NUM_OVERFLOW; /* out of memory: not compacted, not judged */
    if (erange && (d > 1.0 || d < -1.0))
        return NUM_OVERFLOW;
    return d == 0.0 ? NUM_UNDERFLOW : NUM_OK;
}

static size_t num_scan(const char *p, const char *end, int *is_int, int *status)
{
    const char *s = p;
    *status = NUM_OK;
    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return 0;
    const char *int0 = p;
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return 0;
    } else {
        while (p < end && is_digit(*p))
            p++;
    }
    const char *int1 = p, *frac0 = p, *frac1 = p;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p))
            return 0;
        frac0 = p;
        while (p < end && is_digit(*p))
            p++;
        frac1 = p;
    }
    long long exp;
    const char *after = num_exponent(p, end, &exp);
    if (after == NULL)
        return 0;
    int has_exp = after != p;
    p = after;
    size_t n = (size_t)(p - s);
    *is_int = frac1 == frac0 && !has_exp && int1 == p;
    if (*is_int) {
        size_t digits = (size_t)(int1 - int0);
        if (digits > 19 || (digits == 19 && memcmp(int0, *s == '-' ? "9223372036854775808"
                                                                   : "9223372036854775807", 19) > 0))
            *status = NUM_OVERFLOW;
        return n;
    }
    *status = num_real_status(s, n, int0, int1, frac0, frac1, exp);
    return n;
}

/* "inputs.x.data[3]": where the scan stands, plus [idx] when idx is given. */
static void path_text(const scan *sc, long long idx, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < sc->depth && k < SCAN_TRACK && off < len; k++) {
        const frame *f = &sc->stack[k];
        if (f->obj)
            off += (size_t)snprintf(buf + off, len - off, "%s%.*s", off ? "." : "",
                                    (int)(f->key_len > 40 ? 40 : f->key_len), sc->text + f->key_off);
        else
            off += (size_t)snprintf(buf + off, len - off, "[%zu]", f->index);
    }
    if (idx >= 0 && off < len)
        snprintf(buf + off, len - off, "[%lld]", idx);
}

static void under_note(scan *sc, const char *lit, size_t n, long long idx)
{
    if (sc->under)
        return;
    char path[96];
    path_text(sc, idx, path, sizeof path);
    sc->under = 1;
    sc->under_end = (size_t)(lit - sc->text) + n;
    snprintf(sc->under_msg, sizeof sc->under_msg,
             "number %.*s%s is not zero but reads as 0 (underflow) at %s", (int)(n > 32 ? 32 : n),
             lit, n > 32 ? "..." : "", path[0] ? path : "the top level");
}

/* The array opening at text[at] if it is flat and made of numbers only:
 * returns 1 with *end just past its ']' and *count its elements; 0 if not
 * (then jansson gets it as it is, and says what is wrong with it). */
static int numeric_array(scan *sc, size_t at, size_t *end, size_t *count)
{
    const char *p = sc->text + at + 1, *e = sc->text + sc->len;
    const char *ulit = NULL;
    size_t un = 0, uidx = 0, n = 0;
    while (p < e && is_ws(*p))
        p++;
    if (p < e && *p == ']')
        return 0;
    for (;;) {
        int is_int, st;
        size_t t = num_scan(p, e, &is_int, &st);
        if (t == 0 || st == NUM_OVERFLOW)
            return 0;
        if (st == NUM_UNDERFLOW && ulit == NULL) {
            ulit = p;
            un = t;
            uidx = n;
        }
        n++;
        p += t;
        while (p < e && is_ws(*p))
            p++;
        if (p < e && *p == ']')
            break;
        if (p >= e || *p != ',')
            return 0;
        p++;
        while (p < e && is_ws(*p))
            p++;
    }
    if (n >= SVC_JSON_COMPACT_MIN && ulit != NULL)
        under_note(sc, ulit, un, (long long)uidx);
    *end = (size_t)(p + 1 - sc->text);
    *count = n;
    return 1;
}

/* Stops the scan at byte at for limit what. Returns 1 (scan_text's "over"). */
static int over(scan *sc, svc_json_over what, size_t at)
{
    sc->over = what;
    sc->over_at = at;
    return 1;
}

/* Counts one value starting at byte at: 0, or 1 past max_values. */
static int value(scan *sc, size_t at)
{
    if (sc->max_values > 0 && ++sc->values > sc->max_values)
        return over(sc, SVC_JSON_OVER_VALUES, at);
    return 0;
}

/* Opens a container at byte at: 0, or 1 past a limit. */
static int push(scan *sc, int obj, size_t at)
{
    if (value(sc, at))
        return 1;
    if (sc->max_depth > 0 && sc->depth >= sc->max_depth)
        return over(sc, SVC_JSON_OVER_DEPTH, at);
    if (sc->depth < SCAN_TRACK)
        sc->stack[sc->depth] = (frame){.obj = (unsigned char)obj, .expect_key = (unsigned char)obj};
    sc->depth++;
    return 0;
}

/* 1 if p[0..n) is UTF-8 (RFC 3629) without control characters: what
 * jansson takes in a string. */
static int text_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20)
            return 0;
    return svc_utf8_valid((const char *)p, n);
}

/* 1 if the raw member name t[0..n) (between its quotes) is one of
 * sc->fields once unescaped; 0 if not, with its text in sc->over_field. A
 * name jansson would refuse (not UTF-8, a control character, an escape it
 * cannot read, \u0000) counts as known: jansson refuses the text at that
 * name, saying why, and nothing after it is built. */
static int field_known(scan *sc, const char *t, size_t n, int escaped)
{
    char small[128], *raw = small, *name = small;
    size_t len = n;
    json_t *dec = NULL;
    int known = 0;
    if (!text_ok((const unsigned char *)t, n))
        return 1;
    if (n > FIELD_RAW_MAX)
        goto unknown;
    if (escaped) {
        if (n + 3 > sizeof small && (raw = malloc(n + 3)) == NULL)
            return 1; /* out of memory: jansson will judge it */
        raw[0] = '"';
        memcpy(raw + 1, t, n);
        raw[n + 1] = '"';
        dec = json_loadb(raw, n + 2, JSON_DECODE_ANY, NULL);
        if (raw != small)
            free(raw);
        if (!json_is_string(dec)) {
            json_decref(dec);
            return 1;
        }
        name = (char *)json_string_value(dec);
        len = json_string_length(dec);
    } else {
        name = (char *)t;
    }
    for (size_t k = 0; sc->fields[k] != NULL && !known; k++)
        known = strlen(sc->fields[k]) == len && memcmp(sc->fields[k], name, len) == 0;
unknown:
    if (!known) {
        /* at most 60 bytes, cut before a UTF-8 sequence rather than in it,
         * control characters (a NUL too) shown as '?' */
        const char *src = n > FIELD_RAW_MAX ? t : name;
        size_t cut = len > 60 ? 60 : len;
        for (int back = 0; back < 3 && cut < len && ((unsigned char)src[cut] & 0xc0) == 0x80; back++)
            cut--;
        for (size_t k = 0; k < cut; k++)
            sc->over_field[k] = (unsigned char)src[k] < 0x20 ? '?' : src[k];
        sc->over_field[cut] = '\0';
    }
    json_decref(dec);
    return known;
}

static int span_add(scan *sc, size_t off, size_t len, size_t count, int str)
{
    if (sc->nspans == sc->cap) {
        size_t cap = sc->cap ? 2 * sc->cap : 8;
        span *s = realloc(sc->spans, cap * sizeof *s);
        if (s == NULL)
            return -1;
        sc->spans = s;
        sc->cap = cap;
    }
    sc->spans[sc->nspans++] = (span){off, len, count, str};
    return 0;
}

/* Index of the '"' that ends the string whose text starts at t[i] (n if
 * none), as jansson's lexer finds it: a quote after a backslash does not
 * end it. *escaped: the string holds a backslash. memchr does the walking;
 * each quote and each backslash is found once. */
static size_t string_end(const char *t, size_t i, size_t n, int *escaped)
{
    const char *q = NULL;
    *escaped = 0;
    for (;;) {
        if (q == NULL || (size_t)(q - t) < i) {
            q = i < n ? memchr(t + i, '"', n - i) : NULL;
            if (q == NULL)
                return n;
        }
        const char *b = memchr(t + i, '\\', (size_t)(q - t) - i);
        if (b == NULL)
            return (size_t)(q - t);
        *escaped = 1;
        i = (size_t)(b - t) + 2;
    }
}

/* 1 if every byte of p[0..n) is in 0x20..0x7f: no control character, which
 * jansson refuses in a string, and no UTF-8, which it validates. Eight bytes
 * a step: a word has a byte >= 0x80 where its top bits are set, and one
 * below 0x20 where subtracting 0x20 from each byte borrows into a top bit
 * that was clear. */
static int plain_ascii(const char *p, size_t n)
{
    const uint64_t ones = 0x0101010101010101u, tops = 0x8080808080808080u;
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= (w | ((w - 0x20 * ones) & ~w)) & tops;
    }
    for (; i < n; i++)
        acc |= (unsigned char)p[i] < 0x20 || (unsigned char)p[i] >= 0x80;
    return acc == 0;
}

/* The scan: containers followed for paths, strings skipped (long plain
 * ones recorded), numeric arrays recorded, every other literal checked,
 * values counted and member names of the top level checked against the
 * limits. It need not judge the grammar: where the text is not JSON,
 * jansson refuses it at or before the place this scan could be misled.
 * 0, 1 when a limit stopped it (sc->over), or -1 on ENOMEM. */
/* A string at t[*i] (just past its opening quote): a member name of an
 * object (checked against the known fields at the top level) or a value
 * (a long plain one recorded). *i ends past its closing quote. 0, 1 over
 * a limit, -1 on ENOMEM. */
static int scan_string(scan *sc, frame *top, size_t *i)
{
    const char *t = sc->text;
    size_t n = sc->len, s = *i;
    int escaped;
    size_t e = string_end(t, s, n, &escaped);
    *i = e + 1;
    if (top != NULL && top->obj && top->expect_key) {
        top->key_off = s;
        top->key_len = e - s;
        top->expect_key = 0;
        if (sc->fields != NULL && sc->depth == 1 && !field_known(sc, t + s, e - s, escaped))
            return over(sc, SVC_JSON_OVER_FIELD, s - 1);
        return 0;
    }
    if (value(sc, s - 1))
        return 1;
    if (!sc->plain && !escaped && e < n && e - s >= SVC_JSON_STRING_MIN && sc->depth <= SCAN_TRACK &&
        plain_ascii(t + s, e - s) && span_add(sc, s - 1, e - s + 2, 0, 1) < 0)
        return -1;
    return 0;
}

/* An array at t[*i]: a long array of numbers only is recorded whole (a
 * level like any array) and *i moves past it; any other is entered. 0, 1
 * over a limit, -1 on ENOMEM. */
static int scan_array(scan *sc, size_t *i)
{
    size_t end, count;
    if (!sc->plain && numeric_array(sc, *i, &end, &count) && count >= SVC_JSON_COMPACT_MIN) {
        if (value(sc, *i))
            return 1;
        if (sc->max_depth > 0 && sc->depth >= sc->max_depth)
            return over(sc, SVC_JSON_OVER_DEPTH, *i);
        if (span_add(sc, *i, end - *i, count, 0) < 0)
            return -1;
        *i = end;
        return 0;
    }
    if (push(sc, 0, *i))
        return 1;
    (*i)++;
    return 0;
}

/* A number at t[*i] (a '-' or a digit): one value, an underflow noted; a
 * malformed one is stepped over (jansson refuses it). 0, or 1 over a
 * limit. */
static int scan_number(scan *sc, size_t *i)
{
    int is_int, st;
    const char *t = sc->text;
    size_t len = num_scan(t + *i, t + sc->len, &is_int, &st);
    if (len == 0) {
        (*i)++;
        return 0;
    }
    if (value(sc, *i))
        return 1;
    if (st == NUM_UNDERFLOW)
        under_note(sc, t + *i, len, -1);
    *i += len;
    return 0;
}

static int scan_text(scan *sc)
{
    const char *t = sc->text;
    size_t i = 0, n = sc->len;
    while (i < n) {
        char c = t[i];
        frame *top = sc->depth > 0 && sc->depth <= SCAN_TRACK ? &sc->stack[sc->depth - 1] : NULL;
        int rc = 0;
        if (c == '"') {
            i++;
            rc = scan_string(sc, top, &i);
        } else if (c == '[') {
            rc = scan_array(sc, &i);
        } else if (c == '{') {
            if (push(sc, 1, i))
                return 1;
            i++;
        } else if (c == 't' || c == 'f' || c == 'n') {
            /* true, false, null: one value, whatever letters follow */
            if (value(sc, i))
                return 1;
            while (i < n && t[i] >= 'a' && t[i] <= 'z')
                i++;
        } else if (c == ']' || c == '}') {
            if (sc->depth > 0)
                sc->depth--;
            i++;
        } else if (c == ',') {
            if (top != NULL && top->obj)
                top->expect_key = 1;
            else if (top != NULL)
                top->index++;
            i++;
        } else if (c == '-' || is_digit(c)) {
            rc = scan_number(sc, &i);
        } else {
            i++;
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* jansson's line and column at byte pos of text: lines from 1, columns
 * counting characters (UTF-8 lead bytes) since the last newline. */
static void line_col(const char *text, size_t pos, int *line, int *col)
{
    int l = 1, c = 0;
    for (size_t i = 0; i < pos; i++) {
        unsigned char b = (unsigned char)text[i];
        if (b == '\n') {
            l++;
            c = 0;
        } else if (b < 0x80 || (b >= 0xC2 && b <= 0xF4)) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static void error_fill(json_error_t *err, const char *text, size_t pos, enum json_error_code code,
                       const char *msg)
{
    if (err == NULL)
        return;
    memset(err, 0, sizeof *err);
    line_col(text, pos, &err->line, &err->column);
    err->position = (int)pos;
    snprintf(err->source, sizeof err->source, "<buffer>");
    snprintf(err->text, sizeof err->text - 1, "%s", msg);
    err->text[JSON_ERROR_TEXT_LENGTH - 1] = (char)code;
}

typedef struct swap {
    const scan *sc;
    const char *nonce;
    size_t done;
} swap;

/* k if v is placeholder k of this parse, else -1. */
static long long placeholder(const swap *w, const json_t *v)
{
    const json_t *s = v;
    if (json_is_array(v) && json_array_size(v) == 1)
        s = json_array_get(v, 0);
    if (!json_is_string(s))
        return -1;
    const char *p = json_string_value(s);
    size_t len = json_string_length(s);
    if (len < NONCE_HEX + 2 || len > NONCE_HEX + 21 || memcmp(p, w->nonce, NONCE_HEX) != 0 ||
        p[NONCE_HEX] != ':')
        return -1;
    long long k = 0;
    for (size_t i = NONCE_HEX + 1; i < len; i++) {
        if (!is_digit(p[i]))
            return -1;
        k = k * 10 + (p[i] - '0');
    }
    if (k >= (long long)w->sc->nspans || w->sc->spans[k].str != (s == v))
        return -1;
    return k;
}

static json_t *compact_new(const scan *sc, size_t k)
{
    const span *s = &sc->spans[k];
    if (s->str) /* checked by the scan: no escape, no control byte, ASCII */
        return json_stringn_nocheck(sc->text + s->off + 1, s->len - 2);
    json_t *a = json_array();
    if (a == NULL ||
        json_array_append_new(a, json_stringn_nocheck(TAG, TAG_LEN)) < 0 ||
        json_array_append_new(a, json_integer((json_int_t)s->count)) < 0 ||
        json_array_append_new(a, json_stringn_nocheck(sc->text + s->off + 1, s->len - 2)) < 0) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* Replaces the placeholders under container v. 0, or -1 on ENOMEM. */
static int swap_in(swap *w, json_t *v)
{
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *c = json_array_get(v, i);
            long long k = placeholder(w, c);
            if (k >= 0) {
                if (json_array_set_new(v, i, compact_new(w->sc, (size_t)k)) < 0)
                    return -1;
                w->done++;
            } else if ((json_is_array(c) || json_is_object(c)) && swap_in(w, c) < 0) {
                return -1;
            }
        }
    } else if (json_is_object(v)) {
        for (void *it = json_object_iter(v); it != NULL; it = json_object_iter_next(v, it)) {
            json_t *c = json_object_iter_value(it);
            long long k = placeholder(w, c);
            if (k >= 0) {
                if (json_object_iter_set_new(v, it, compact_new(w->sc, (size_t)k)) < 0)
                    return -1;
                w->done++;
            } else if ((json_is_array(c) || json_is_object(c)) && swap_in(w, c) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* The text jansson parses: spans replaced by placeholders. NULL on ENOMEM. */
static char *rewrite(const scan *sc, const char *nonce, size_t *out_len)
{
    size_t ph_max = NONCE_HEX + 25, len = sc->len;
    for (size_t k = 0; k < sc->nspans; k++)
        len = len - sc->spans[k].len + ph_max;
    char *r = malloc(len + 1);
    if (r == NULL)
        return NULL;
    size_t from = 0, o = 0;
    for (size_t k = 0; k < sc->nspans; k++) {
        const span *s = &sc->spans[k];
        memcpy(r + o, sc->text + from, s->off - from);
        o += s->off - from;
        o += (size_t)snprintf(r + o, ph_max + 1, s->str ? "\"%s:%zu\"" : "[\"%s:%zu\"]", nonce, k);
        from = s->off + s->len;
    }
    memcpy(r + o, sc->text + from, sc->len - from);
    o += sc->len - from;
    r[o] = '\0';
    *out_len = o;
    return r;
}

/* Moves jansson's error on the rewritten text rw back onto the original:
 * the byte by the lengths the placeholders before it saved, the line by
 * the newlines in the arrays they replaced, and the column only where a
 * placeholder shares the error's line. jansson's own counts are adjusted,
 * not recomputed, so that its quirks (NUL bytes) stay as they are. */
static void error_back(const scan *sc, const char *nonce, const char *rw, json_error_t *e)
{
    size_t pos = (size_t)e->position, from_o = 0, from_r = 0;
    size_t delta = 0; /* original - rewritten, modulo 2^64 */
    int line_r = 1, col_r = 0, lines = 0, adj_line = 0;
    long long adj = 0; /* column change on line adj_line of rw */
    for (size_t k = 0; k < sc->nspans; k++) {
        const span *s = &sc->spans[k];
        char ph[NONCE_HEX + 32];
        size_t plen = (size_t)snprintf(ph, sizeof ph, s->str ? "\"%s:%zu\"" : "[\"%s:%zu\"]", nonce, k);
        size_t ro = from_r + (s->off - from_o);
        if (pos < ro + plen)
            break;
        for (size_t i = from_r; i < ro; i++) {
            unsigned char b = (unsigned char)rw[i];
            if (b == '\n') {
                line_r++;
                col_r = 0;
            } else if (b < 0x80 || (b >= 0xC2 && b <= 0xF4)) {
                col_r++;
            }
        }
        col_r += (int)plen;
        if (line_r != adj_line) {
            adj_line = line_r;
            adj = 0;
        }
        const char *nl = memrchr(sc->text + s->off, '\n', s->len);
        if (nl != NULL) /* the original line starts inside this array */
            adj = (long long)(sc->text + s->off + s->len - (nl + 1)) - col_r;
        else
            adj += (long long)s->len - (long long)plen;
        for (size_t i = 0; i < s->len; i++)
            lines += sc->text[s->off + i] == '\n';
        delta += s->len - plen;
        from_o = s->off + s->len;
        from_r = ro + plen;
    }
    if (adj_line != 0 && adj_line == e->line)
        e->column += (int)adj;
    e->line += lines;
    e->position = (int)(pos + delta);
}

/* The message and position of a limit the scan stopped at. */
static void over_fill(json_error_t *err, const scan *sc)
{
    char msg[JSON_ERROR_TEXT_LENGTH];
    enum json_error_code code = json_error_invalid_syntax;
    if (sc->over == SVC_JSON_OVER_DEPTH) {
        snprintf(msg, sizeof msg, "the JSON nests arrays and objects deeper than %zu levels",
                 sc->max_depth);
        code = json_error_stack_overflow;
    } else if (sc->over == SVC_JSON_OVER_VALUES) {
        snprintf(msg, sizeof msg, "the JSON holds more than %zu values", sc->max_values);
    } else {
        snprintf(msg, sizeof msg, "%s is not a field of this request", sc->over_field);
        code = json_error_item_not_found;
    }
    error_fill(err, sc->text, sc->over_at, code, msg);
    if (err != NULL && sc->over == SVC_JSON_OVER_FIELD)
        snprintf(err->source, sizeof err->source, "%s", sc->over_field);
}

json_t *svc_json_parse(const char *text, size_t len, json_error_t *err)
{
    return svc_json_parse_limits(text, len, NULL, err, NULL);
}

json_t *svc_json_parse_limits(const char *text, size_t len, const svc_json_limits *lim,
                              json_error_t *err, svc_json_over *over_out)
{
    const size_t flags = JSON_DECODE_ANY | JSON_REJECT_DUPLICATES;
    /* jansson skips some NUL bytes without counting them in positions: a
     * text with one is left to jansson whole, so its errors stay exact. The
     * scan lives on the heap: its frames are a fixed array. */
    scan *sc = calloc(1, sizeof *sc);
    char nonce[NONCE_HEX + 1];
    char *rw = NULL;
    json_t *root = NULL;
    json_error_t jerr;
    if (over_out != NULL)
        *over_out = SVC_JSON_WITHIN;
    if (text == NULL || sc == NULL) {
        error_fill(err, "", 0, sc ? json_error_invalid_argument : json_error_out_of_memory,
                   sc ? "wrong arguments" : "out of memory");
        free(sc);
        return NULL;
    }
    *sc = (scan){.text = text, .len = len, .plain = memchr(text, '\0', len) != NULL};
    if (lim != NULL) {
        sc->max_depth = lim->max_depth == 0 ? SVC_JSON_MAX_DEPTH
                        : lim->max_depth > SVC_JSON_DEPTH_CAP ? SVC_JSON_DEPTH_CAP : lim->max_depth;
        sc->max_values = lim->max_values == 0 ? SVC_JSON_MAX_VALUES : lim->max_values;
        sc->fields = lim->fields;
    }
    int rc = scan_text(sc);
    if (rc > 0) {
        over_fill(err, sc);
        if (over_out != NULL)
            *over_out = sc->over;
        goto done;
    }
    if (rc < 0 || (sc->nspans > 0 && svc_random_hex(nonce, NONCE_HEX / 2) < 0)) {
        error_fill(err, "", 0, json_error_out_of_memory, "out of memory");
        goto done;
    }
    size_t rlen = len;
    if (sc->nspans > 0 && (rw = rewrite(sc, nonce, &rlen)) == NULL) {
        error_fill(err, "", 0, json_error_out_of_memory, "out of memory");
        goto done;
    }
    root = json_loadb(rw != NULL ? rw : text, rlen, flags, &jerr);
    if (root == NULL) {
        if (rw != NULL)
            error_back(sc, nonce, rw, &jerr);
        if (sc->under && sc->under_end < (size_t)jerr.position)
            error_fill(err, text, sc->under_end, json_error_numeric_overflow, sc->under_msg);
        else if (err != NULL)
            *err = jerr;
        goto done;
    }
    if (sc->under) {
        error_fill(err, text, sc->under_end, json_error_numeric_overflow, sc->under_msg);
        json_decref(root);
        root = NULL;
        goto done;
    }
    if (sc->nspans > 0) {
        swap w = {.sc = sc, .nonce = nonce};
        long long k = placeholder(&w, root);
        if (k >= 0) {
            json_decref(root);
            root = compact_new(sc, (size_t)k);
            w.done = root != NULL;
        } else if (swap_in(&w, root) < 0) {
            w.done = 0;
        }
        if (w.done != sc->nspans) {
            json_decref(root);
            root = NULL;
            error_fill(err, "", 0, json_error_out_of_memory, "out of memory");
        }
    }
done:
    free(rw);
    free(sc->spans);
    free(sc);
    return root;
}

int svc_json_numbers(const json_t *j, const char **text, size_t *len, size_t *count)
{
    if (!json_is_array(j) || json_array_size(j) != 3)
        return 0;
    const json_t *tag = json_array_get(j, 0), *n = json_array_get(j, 1), *s = json_array_get(j, 2);
    if (!json_is_string(tag) || json_string_length(tag) != TAG_LEN ||
        memcmp(json_string_value(tag), TAG, TAG_LEN) != 0 || !json_is_integer(n) ||
        !json_is_string(s))
        return 0;
    if (text != NULL)
        *text = json_string_value(s);
    if (len != NULL)
        *len = json_string_length(s);
    if (count != NULL)
        *count = (size_t)json_integer_value(n);
    return 1;
}

int svc_json_numbers_next(const char *text, size_t len, size_t *pos, svc_json_num *out)
{
    const char *p = text + *pos, *e = text + len;
    while (p < e && (is_ws(*p) || *p == ','))
        p++;
    if (p == e) {
        *pos = len;
        return 0;
    }
    int is_int, st;
    size_t n = num_scan(p, e, &is_int, &st);
    if (n == 0 || st == NUM_OVERFLOW)
        return -1;
    out->text = p;
    out->len = n;
    out->is_int = is_int;
    if (is_int) {
        /* In range: num_scan has checked. Accumulated negative so that
         * INT64_MIN needs no special case. */
        const char *q = p + (*p == '-');
        int64_t v = 0;
        for (; q < p + n; q++)
            v = v * 10 - (*q - '0');
        out->i = *p == '-' ? v : -v;
        out->d = (double)out->i;
    } else {
        int erange;
        if (strtod_n(p, n, &out->d, &erange) < 0)
            return -1;
        out->i = 0;
    }
    *pos = (size_t)(p + n - text);
    return 1;
}

/* ---------------------------------------------------------------- dump */

/* The output under construction; on ENOMEM p is freed and NULL, and every
 * later put is a no-op. */
typedef struct obuf {
    char *p;
    size_t len, cap;
} obuf;

static void put(obuf *b, const char *s, size_t n)
{
    if (!b->p)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap * 2 > b->len + n + 1 ? b->cap * 2 : b->len + n + 1;
        char *q = realloc(b->p, cap);
        if (!q) {
            free(b->p);
            b->p = NULL;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* A string as jansson's dump writes it without flags: '"', '\' and control
 * characters escaped, everything else (UTF-8 included) as it is. Runs with
 * nothing to escape (all of a base64 tensor) go in one copy. */
static void put_string(obuf *b, const char *s, size_t n)
{
    put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(b, s + run, i - run);
        run = i + 1;
        char esc[8];
        switch (c) {
        case '"': put(b, "\\\"", 2); break;
        case '\\': put(b, "\\\\", 2); break;
        case '\b': put(b, "\\b", 2); break;
        case '\f': put(b, "\\f", 2); break;
        case '\n': put(b, "\\n", 2); break;
        case '\r': put(b, "\\r", 2); break;
        case '\t': put(b, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04X", c);
            put(b, esc, 6);
        }
    }
    put(b, s + run, n - run);
    put(b, "\"", 1);
}

/* A real in its shortest form that reads back as exactly the same double
 * (svc_dtoa: 0.006, not jansson's 17 digits 0.0060000000000000001), with
 * ".0" on integral values so that it still reads as a real. */
static void put_real(obuf *b, double d)
{
    char t[SVC_DTOA_MAX];
    put(b, t, svc_dtoa_f64(d, t));
}

static int dump_value(obuf *b, const json_t *j, int depth)
{
    char t[32];
    if (depth > 2048)   /* jansson refuses deeper trees too */
        return -1;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        int first = 1;
        put(b, "{", 1);
        json_object_foreach((json_t *)j, k, v) {
            if (!first)
                put(b, ",", 1);
            first = 0;
            put_string(b, k, strlen(k));
            put(b, ":", 1);
            if (dump_value(b, v, depth + 1) < 0)
                return -1;
        }
        put(b, "}", 1);
        return 0;
    }
    case JSON_ARRAY:
        put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(j); i++) {
            if (i)
                put(b, ",", 1);
            if (dump_value(b, json_array_get(j, i), depth + 1) < 0)
                return -1;
        }
        put(b, "]", 1);
        return 0;
    case JSON_STRING:
        put_string(b, json_string_value(j), json_string_length(j));
        return 0;
    case JSON_INTEGER:
        put(b, t, (size_t)snprintf(t, sizeof t, "%" JSON_INTEGER_FORMAT, json_integer_value(j)));
        return 0;
    case JSON_REAL:
        put_real(b, json_real_value(j));
        return 0;
    case JSON_TRUE:
        put(b, "true", 4);
        return 0;
    case JSON_FALSE:
        put(b, "false", 5);
        return 0;
    default:
        put(b, "null", 4);
        return 0;
    }
}

json_t *svc_json_ordered(const json_t *obj, const json_t *names)
{
    json_t *out = json_object(), *v;
    size_t i;
    const char *k;
    if (!out)
        return NULL;
    json_array_foreach(names, i, v) {
        const char *name = json_string_value(v);
        json_t *have = name ? json_object_get(obj, name) : NULL;
        if (name && json_object_set(out, name, have ? have : json_null()) != 0)
            goto oom;
    }
    json_object_foreach((json_t *)obj, k, v)
        if (!json_object_get(out, k) && json_object_set(out, k, v) != 0)
            goto oom;
    return out;
oom:
    json_decref(out);
    return NULL;
}

char *svc_json_dump(const json_t *j, size_t *len)
{
    obuf b = {malloc(256), 0, 256};
    if (!j || dump_value(&b, j, 0) < 0) {
        free(b.p);
        return NULL;
    }
    if (b.p)
        b.p[b.len] = '\0';
    if (len)
        *len = b.p ? b.len : 0;
    return b.p;
}
