/* svc_npy.c — the .npy header (svc_npy.h), after numpy's format spec
 * (numpy/lib/format.py): byte for byte what numpy.save writes, less the
 * spare spaces numpy leaves to grow the first axis in place. The reader
 * takes what numpy writes and refuses the rest, with a code per reason. */
#include "svc_npy.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the data after the header is sent as it lies in memory: port the writer first"
#endif

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* The descr of a dtype, or NULL for a value outside the enum. */
static const char *npy_descr(svc_dtype t)
{
    switch (t) {
    case SVC_F32: return "<f4";
    case SVC_F64: return "<f8";
    case SVC_I32: return "<i4";
    }
    return NULL;
}

size_t svc__npy_wrap(const char *dict, size_t dict_len, char *out, size_t cap)
{
    /* Version 1.0 has a 2-byte length, 2.0 a 4-byte one; numpy pads so that
     * at least one space precedes the newline (padlen in 1..ALIGN). */
    size_t prefix = 10, hlen = dict_len + 1;
    size_t pad = SVC_NPY_ALIGN - (prefix + hlen) % SVC_NPY_ALIGN;
    if (hlen + pad > 65535) {
        prefix = 12;
        pad = SVC_NPY_ALIGN - (prefix + hlen) % SVC_NPY_ALIGN;
        if (hlen + pad > UINT32_MAX)
            return 0;
    }
    size_t total = prefix + hlen + pad;
    if (out == NULL || cap < total)
        return 0;
    size_t body = hlen + pad;
    memcpy(out, npy_magic, sizeof npy_magic);
    out[6] = prefix == 10 ? 1 : 2;
    out[7] = 0;
    out[8] = (char)(body & 0xff);
    out[9] = (char)((body >> 8) & 0xff);
    if (prefix == 12) {
        out[10] = (char)((body >> 16) & 0xff);
        out[11] = (char)((body >> 24) & 0xff);
    }
    memcpy(out + prefix, dict, dict_len);
    memset(out + prefix + dict_len, ' ', pad);
    out[total - 1] = '\n';
    return total;
}

size_t svc_npy_header(svc_dtype dtype, int ndim, const int64_t *shape, char *out, size_t cap)
{
    return svc_npy_header_descr(npy_descr(dtype), ndim, shape, out, cap);
}

size_t svc_npy_header_descr(const char *descr, int ndim, const int64_t *shape, char *out,
                            size_t cap)
{
    if (descr == NULL || strlen(descr) > 8 || ndim < 0 || ndim > SVC_TENSOR_MAX_DIMS || (ndim > 0 && shape == NULL))
        return 0;
    /* Python's repr of the tuple: "()", "(n,)", "(m, n)". */
    char tuple[SVC_TENSOR_MAX_DIMS * 24 + 4];
    size_t t = 0;
    tuple[t++] = '(';
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return 0;
        t += (size_t)snprintf(tuple + t, sizeof tuple - t, "%s%" PRId64, i ? ", " : "", shape[i]);
    }
    if (ndim == 1)
        tuple[t++] = ',';
    tuple[t++] = ')';
    tuple[t] = '\0';
    char dict[sizeof tuple + 64];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, tuple);
    if (n < 0 || (size_t)n >= sizeof dict)
        return 0;
    return svc__npy_wrap(dict, (size_t)n, out, cap);
}

const char *svc_npy_strerror(int code)
{
    switch (code) {
    case 0: return "ok";
    case SVC_NPY_ETRUNC: return ".npy data ends inside its header";
    case SVC_NPY_EMAGIC: return "not a .npy file (it does not start with \\x93NUMPY)";
    case SVC_NPY_EVERSION: return "unsupported .npy format version (1.0, 2.0 and 3.0 are read)";
    case SVC_NPY_EHEADER:
        return ".npy header is not a dictionary of 'descr', 'fortran_order' and 'shape' as numpy writes it";
    case SVC_NPY_EDTYPE:
        return "unsupported .npy dtype: only '<f4' (float32), '<f8' (float64) and '<i4' (int32) are accepted";
    case SVC_NPY_EFORTRAN:
        return ".npy array is in Fortran order; save a C-ordered array (numpy.ascontiguousarray)";
    case SVC_NPY_ESHAPE: return ".npy shape has more than 8 dimensions or is too large";
    case SVC_NPY_EPAD:
        return ".npy header padding is wrong (spaces then a newline, header a multiple of 64 bytes)";
    }
    return "unknown .npy error";
}

/* A cursor over the dictionary text [p, end). */
typedef struct {
    const char *p, *end;
} npy_cur;

static void cur_ws(npy_cur *c)
{
    while (c->p < c->end && *c->p == ' ')
        c->p++;
}

static int cur_eat(npy_cur *c, char ch)
{
    cur_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes ('…' or "…"); sets *s, *n to its
 * contents. 0 or SVC_NPY_EHEADER. */
static int cur_string(npy_cur *c, const char **s, size_t *n)
{
    cur_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return SVC_NPY_EHEADER;
    char q = *c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20)
            return SVC_NPY_EHEADER;
        c->p++;
    }
    if (c->p >= c->end)
        return SVC_NPY_EHEADER;
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return 0;
}

/* A non-negative decimal int as Python writes it (no sign, no leading
 * zeros). 0, SVC_NPY_EHEADER, or SVC_NPY_ESHAPE when it exceeds int64. */
static int cur_int(npy_cur *c, int64_t *v)
{
    cur_ws(c);
    const char *start = c->p;
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p - '0';
        if (x > (INT64_MAX - d) / 10)
            return SVC_NPY_ESHAPE;
        x = x * 10 + d;
        c->p++;
    }
    size_t n = (size_t)(c->p - start);
    if (n == 0 || (n > 1 && *start == '0'))
        return SVC_NPY_EHEADER;
    *v = x;
    return 0;
}

/* A Python tuple of ints: "()", "(n,)", "(m, n)", "(m, n,)". */
static int cur_shape(npy_cur *c, int *ndim, int64_t *shape)
{
    if (!cur_eat(c, '('))
        return SVC_NPY_EHEADER;
    int n = 0;
    if (cur_eat(c, ')')) {
        *ndim = 0;
        return 0;
    }
    for (;;) {
        int64_t v;
        int rc = cur_int(c, &v);
        if (rc != 0)
            return rc;
        if (n == SVC_TENSOR_MAX_DIMS)
            return SVC_NPY_ESHAPE;
        shape[n++] = v;
        int comma = cur_eat(c, ',');
        if (cur_eat(c, ')')) {
            if (n == 1 && !comma)   /* "(5)" is an int, not a tuple */
                return SVC_NPY_EHEADER;
            break;
        }
        if (!comma)
            return SVC_NPY_EHEADER;
    }
    *ndim = n;
    return 0;
}

static int str_is(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* The value of "descr": '<f4', '<f8' or '<i4' into *dtype. */
static int cur_descr(npy_cur *c, svc_dtype *dtype)
{
    const char *d;
    size_t dlen;
    int rc = cur_string(c, &d, &dlen);
    if (rc != 0)
        return rc;
    if (str_is(d, dlen, "<f4"))
        *dtype = SVC_F32;
    else if (str_is(d, dlen, "<f8"))
        *dtype = SVC_F64;
    else if (str_is(d, dlen, "<i4"))
        *dtype = SVC_I32;
    else
        return SVC_NPY_EDTYPE;
    return 0;
}

/* The value of "fortran_order": False only. */
static int cur_order(npy_cur *c)
{
    cur_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        return 0;
    }
    return left >= 4 && memcmp(c->p, "True", 4) == 0 ? SVC_NPY_EFORTRAN : SVC_NPY_EHEADER;
}

/* Parses the dictionary text [p, end): the three keys once each. */
static int npy_dict(const char *p, const char *end, svc_dtype *dtype, int *ndim, int64_t *shape)
{
    npy_cur c = {p, end};
    int seen_descr = 0, seen_order = 0, seen_shape = 0;
    if (c.p >= c.end || *c.p++ != '{')
        return SVC_NPY_EHEADER;
    for (;;) {
        if (cur_eat(&c, '}'))
            break;
        const char *key;
        size_t klen;
        int rc = cur_string(&c, &key, &klen);
        if (rc != 0)
            return rc;
        if (!cur_eat(&c, ':'))
            return SVC_NPY_EHEADER;
        if (str_is(key, klen, "descr") && !seen_descr) {
            if ((rc = cur_descr(&c, dtype)) != 0)
                return rc;
            seen_descr = 1;
        } else if (str_is(key, klen, "fortran_order") && !seen_order) {
            if ((rc = cur_order(&c)) != 0)
                return rc;
            seen_order = 1;
        } else if (str_is(key, klen, "shape") && !seen_shape) {
            if ((rc = cur_shape(&c, ndim, shape)) != 0)
                return rc;
            seen_shape = 1;
        } else {
            return SVC_NPY_EHEADER;   /* an unknown or repeated key */
        }
        if (cur_eat(&c, ','))
            continue;
        if (!cur_eat(&c, '}'))
            return SVC_NPY_EHEADER;
        break;
    }
    if (!seen_descr || !seen_order || !seen_shape)
        return SVC_NPY_EHEADER;
    /* What follows the dictionary is padding: spaces, then one newline. */
    for (const char *q = c.p; q < end - 1; q++)
        if (*q != ' ')
            return SVC_NPY_EPAD;
    if (c.p >= end || end[-1] != '\n')
        return SVC_NPY_EPAD;
    return 0;
}

int svc_npy_parse_header(const void *buf, size_t len, svc_dtype *dtype, int *ndim,
                         int64_t shape[8], size_t *header_len)
{
    const unsigned char *b = buf;
    size_t need = 10;
    if (len == 0)
        goto truncated;
    if (memcmp(b, npy_magic, len < 6 ? len : 6) != 0)
        return SVC_NPY_EMAGIC;
    if (len < 8)
        goto truncated;
    if (b[6] < 1 || b[6] > 3 || b[7] != 0)
        return SVC_NPY_EVERSION;
    size_t prefix = b[6] == 1 ? 10 : 12;
    if (len < prefix) {
        need = prefix;
        goto truncated;
    }
    size_t body = (size_t)b[8] | (size_t)b[9] << 8;
    if (prefix == 12)
        body |= (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (body > SVC_NPY_MAX_HEADER)
        return SVC_NPY_EHEADER;
    need = prefix + body;
    if (need % SVC_NPY_ALIGN != 0)
        return SVC_NPY_EPAD;
    if (len < need)
        goto truncated;
    const char *dict = (const char *)b + prefix;
    svc_dtype dt = SVC_F32;
    int nd = 0;
    int64_t sh[SVC_TENSOR_MAX_DIMS];
    if (memchr(dict, '\n', body) != dict + body - 1)
        return body > 0 && dict[body - 1] != '\n' ? SVC_NPY_EPAD : SVC_NPY_EHEADER;
    int rc = npy_dict(dict, dict + body, &dt, &nd, sh);
    if (rc != 0)
        return rc;
    /* The byte size must fit an int64, or the caller's check would wrap. */
    int64_t bytes = dt == SVC_F64 ? 8 : 4;
    int over = 0, empty = 0;
    for (int i = 0; i < nd; i++) {
        if (sh[i] == 0)
            empty = 1;
        else if (bytes > INT64_MAX / sh[i])
            over = 1;
        else
            bytes *= sh[i];
    }
    if (over && !empty)
        return SVC_NPY_ESHAPE;
    *dtype = dt;
    *ndim = nd;
    memcpy(shape, sh, sizeof(int64_t) * (size_t)nd);
    *header_len = need;
    return 0;

truncated:
    if (header_len != NULL)
        *header_len = need;
    return SVC_NPY_ETRUNC;
}
