/* svc_tensor.c — decode and encode tensors on the wire (svc_tensor.h).
 * Decoding is strict: every way a document can disagree with itself is
 * refused with a message that says what was expected and what came.
 *
 * Numbers in "data": JSON text for float32 values is produced by the dumper
 * (svc_reply_json, svc_http_call), which uses jansson's default of 17
 * significant digits. 17 digits round-trip every double exactly, and a float
 * widened to double is a double, so float32 values survive too (parsing the
 * text and narrowing gives back the same float). JSON_REAL_PRECISION(9)
 * would be enough for float32 alone and shorter, but the same dump carries
 * float64 tensors and parameters, which 9 digits would corrupt; the base64
 * form is the compact path. Job results do not come through here: the
 * gateway streams them with svc_tstream.h, shortest round-trip per dtype. */
#include "svc_tensor.h"

#include <math.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_json.h"
#include "svc_sha256.h"
#include "svc_util.h"

_Static_assert(SVC_JSON_COMPACT_MIN > SVC_TENSOR_MAX_DIMS, "a shape must stay a plain array");

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the b64 form is little-endian and is copied as-is: port the codec first"
#endif

size_t svc_dtype_size(svc_dtype t)
{
    switch (t) {
    case SVC_F32: return 4;
    case SVC_F64: return 8;
    case SVC_I32: return 4;
    }
    return 0;
}

const char *svc_dtype_name(svc_dtype t)
{
    switch (t) {
    case SVC_F32: return "float32";
    case SVC_F64: return "float64";
    case SVC_I32: return "int32";
    }
    return "unknown";
}

int svc_dtype_parse(const char *s, svc_dtype *out)
{
    if (s == NULL)
        return -1;
    for (int t = SVC_F32; t <= SVC_I32; t++)
        if (strcmp(s, svc_dtype_name((svc_dtype)t)) == 0) {
            if (out != NULL)
                *out = (svc_dtype)t;
            return 0;
        }
    return -1;
}

int64_t svc_tensor_elems(const svc_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

void svc_tensor_free(svc_tensor *t)
{
    if (t == NULL)
        return;
    if (t->release != NULL)
        t->release(t->data, t->nbytes);
    else
        free(t->data);
    memset(t, 0, sizeof *t);
}

json_t *svc_shape_to_json(int ndim, const int64_t *shape)
{
    json_t *a = json_array();
    for (int i = 0; a != NULL && i < ndim; i++)
        if (json_array_append_new(a, json_integer(shape[i])) < 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

/* "[2,3]" for messages. */
static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

/* Validates a shape array and its element count (overflow-checked against
 * both int64 and the bytes a buffer can hold). 0 or -1 with msg. */
static int shape_parse(const json_t *j, int *ndim, int64_t *shape, int64_t *elems,
                       char *msg, size_t msglen)
{
    size_t n = 0;
    /* A compact array (svc_json.h) is longer than any shape may be: only
     * its length is looked at. */
    int compact = svc_json_numbers(j, NULL, NULL, &n);
    if (!compact && !json_is_array(j)) {
        snprintf(msg, msglen, "shape must be an array of non-negative integers");
        return -1;
    }
    if (!compact)
        n = json_array_size(j);
    if (n > SVC_TENSOR_MAX_DIMS) {
        snprintf(msg, msglen, "shape has %zu dimensions, at most %d are allowed", n,
                 SVC_TENSOR_MAX_DIMS);
        return -1;
    }
    int64_t total = 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(j, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            snprintf(msg, msglen, "shape[%zu] must be a non-negative integer", i);
            return -1;
        }
        int64_t v = json_integer_value(d);
        if (v != 0 && total > (INT64_MAX / 8) / v) {
            snprintf(msg, msglen, "shape is too large: the element count overflows");
            return -1;
        }
        total *= v;
        shape[i] = v;
    }
    *ndim = (int)n;
    *elems = total;
    return 0;
}

int svc_shape_from_json(const json_t *j, int *ndim, int64_t *shape)
{
    char msg[8];
    int64_t elems;
    int nd;
    int64_t tmp[SVC_TENSOR_MAX_DIMS];
    if (shape_parse(j, &nd, tmp, &elems, msg, sizeof msg) < 0)
        return -1;
    *ndim = nd;
    memcpy(shape, tmp, sizeof(int64_t) * (size_t)nd);
    return 0;
}

/* Stores element i, as jansson typed it (is_int: an integer token, x its
 * value as json_number_value gives it), into out->data. 0, or -1 with msg.
 * A non-zero value that float32 would make exactly 0 is refused like one
 * too large for it; subnormal floats are kept. */
static int elem_store(svc_tensor *out, size_t i, int is_int, json_int_t ix, double x,
                      char *msg, size_t msglen)
{
    if (out->dtype == SVC_I32) {
        if (!is_int) {
            snprintf(msg, msglen, "data[%zu] must be an integer for int32", i);
            return -1;
        }
        if (ix < INT32_MIN || ix > INT32_MAX) {
            snprintf(msg, msglen, "data[%zu] = %lld is out of range for int32", i, (long long)ix);
            return -1;
        }
        ((int32_t *)out->data)[i] = (int32_t)ix;
        return 0;
    }
    if (!isfinite(x)) {
        snprintf(msg, msglen, "data[%zu] is not a finite number", i);
        return -1;
    }
    if (out->dtype == SVC_F64) {
        ((double *)out->data)[i] = x;
        return 0;
    }
    float f = (float)x;
    if (!isfinite(f)) {
        snprintf(msg, msglen, "data[%zu] = %g is out of range for float32", i, x);
        return -1;
    }
    if (f == 0.0f && x != 0.0) {
        snprintf(msg, msglen, "data[%zu] = %g is not zero but reads as 0 in float32 (underflow)", i, x);
        return -1;
    }
    ((float *)out->data)[i] = f;
    return 0;
}

/* 1 if a number literal has a non-zero digit before its exponent. */
static int mantissa_nonzero(const char *p, size_t n)
{
    for (size_t i = 0; i < n && p[i] != 'e' && p[i] != 'E'; i++)
        if (p[i] >= '1' && p[i] <= '9')
            return 1;
    return 0;
}

/* A compact array from svc_json_parse: the elements are read from their
 * text one by one, with the checks of the plain form, plus one the plain
 * form cannot make (its text is gone): a literal with a non-zero digit must
 * not read as 0. svc_json_parse refuses those already; this is the codec's
 * own guard. */
static int data_parse_compact(const char *text, size_t len, size_t n, svc_tensor *out,
                              char *msg, size_t msglen)
{
    size_t pos = 0;
    svc_json_num v;
    for (size_t i = 0; i < n; i++) {
        if (svc_json_numbers_next(text, len, &pos, &v) != 1) {
            snprintf(msg, msglen, "data[%zu] must be a number", i);
            return -1;
        }
        if (!v.is_int && v.d == 0.0 && mantissa_nonzero(v.text, v.len)) {
            snprintf(msg, msglen, "data[%zu] = %.*s is not zero but reads as 0 (underflow)", i,
                     (int)(v.len > 32 ? 32 : v.len), v.text);
            return -1;
        }
        if (elem_store(out, i, v.is_int, (json_int_t)v.i, v.d, msg, msglen) < 0)
            return -1;
    }
    return 0;
}

/* Allocates out->data (out->nbytes) and fills it from a flat "data" array,
 * plain (a json_t per element) or compact (svc_json_parse). */
static int data_parse(const json_t *arr, int64_t elems, const char *shp, svc_tensor *out,
                      char *msg, size_t msglen)
{
    const char *ctext = NULL;
    size_t clen = 0, n = 0;
    int compact = svc_json_numbers(arr, &ctext, &clen, &n);
    if (!compact && !json_is_array(arr)) {
        snprintf(msg, msglen, "data must be a flat array of numbers");
        return -1;
    }
    if (!compact)
        n = json_array_size(arr);
    /* Nesting is named before the count, which it would only confuse. */
    if (!compact && n > 0 && json_is_array(json_array_get(arr, 0))) {
        snprintf(msg, msglen, "data must be a flat row-major array, not nested arrays "
                 "(data[0] is an array)");
        return -1;
    }
    if ((int64_t)n != elems) {
        snprintf(msg, msglen, "shape %s needs %lld elements, data has %zu", shp,
                 (long long)elems, n);
        return -1;
    }
    /* Allocated only now that the count is known to match the document. */
    if (out->nbytes > 0 && (out->data = malloc(out->nbytes)) == NULL) {
        snprintf(msg, msglen, "out of memory for %zu bytes", out->nbytes);
        return -1;
    }
    if (compact)
        return data_parse_compact(ctext, clen, n, out, msg, msglen);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (json_is_array(v)) {
            snprintf(msg, msglen, "data must be a flat row-major array, not nested arrays "
                     "(data[%zu] is an array)", i);
            return -1;
        }
        if (out->dtype != SVC_I32 && !json_is_number(v)) {
            snprintf(msg, msglen, "data[%zu] must be a number", i);
            return -1;
        }
        if (elem_store(out, i, json_is_integer(v), json_integer_value(v), json_number_value(v),
                       msg, msglen) < 0)
            return -1;
    }
    return 0;
}

static int b64_parse(const json_t *js, const char *shp, svc_tensor *out, char *msg, size_t msglen)
{
    if (!json_is_string(js)) {
        snprintf(msg, msglen, "b64 must be a base64 string");
        return -1;
    }
    const char *s = json_string_value(js);
    size_t slen = json_string_length(js);
    if (slen % 4 != 0) {
        snprintf(msg, msglen, "b64 is not valid base64: its length %zu is not a multiple of 4", slen);
        return -1;
    }
    /* The size is judged from the length and padding alone, before
     * anything is allocated. */
    size_t have = svc_b64_decoded_len(s, slen);
    if (have != out->nbytes) {
        snprintf(msg, msglen, "shape %s %s needs %zu bytes, b64 has %zu", shp,
                 svc_dtype_name(out->dtype), out->nbytes, have);
        return -1;
    }
    /* Decoded straight into the tensor's buffer. */
    unsigned char *bytes = malloc(have > 0 ? have : 1);
    size_t got = 0;
    if (bytes == NULL) {
        snprintf(msg, msglen, "out of memory for %zu bytes", have);
        return -1;
    }
    if (svc_b64_decode_to(s, slen, bytes, have, &got) < 0) {
        free(bytes);
        snprintf(msg, msglen, "b64 is not valid base64 (standard alphabet, '=' padding, no whitespace)");
        return -1;
    }
    free(out->data);
    out->data = NULL;
    if (out->nbytes > 0)
        out->data = bytes;
    else
        free(bytes);
    return 0;
}

int svc_tensor_from_json(const json_t *j, int64_t max_elems, svc_tensor *out,
                         char *msg, size_t msglen)
{
    char dummy[1];
    if (msg == NULL || msglen == 0) {
        msg = dummy;
        msglen = sizeof dummy;
    }
    msg[0] = '\0';
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) {
        snprintf(msg, msglen, "a tensor must be an object {\"dtype\", \"shape\", \"data\" or \"b64\"}");
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)j, key, val) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data") && strcmp(key, "b64") &&
            strcmp(key, "blob")) {
            snprintf(msg, msglen, "unknown tensor member '%s' (expected dtype, shape, data, b64 or blob)", key);
            return -1;
        }
    }
    svc_tensor t = {0};
    const json_t *jd = json_object_get(j, "dtype");
    if (!json_is_string(jd) || svc_dtype_parse(json_string_value(jd), &t.dtype) < 0) {
        snprintf(msg, msglen, "dtype must be one of float32, float64, int32");
        return -1;
    }
    int64_t elems;
    if (shape_parse(json_object_get(j, "shape"), &t.ndim, t.shape, &elems, msg, msglen) < 0)
        return -1;
    char shp[8 * 22 + 4];
    shape_text(t.ndim, t.shape, shp, sizeof shp);
    if (max_elems > 0 && elems > max_elems) {
        snprintf(msg, msglen, "shape %s has %lld elements, more than the limit of %lld", shp,
                 (long long)elems, (long long)max_elems);
        return -1;
    }
    if ((uint64_t)elems > SIZE_MAX / svc_dtype_size(t.dtype)) {
        snprintf(msg, msglen, "shape %s is too large for this machine", shp);
        return -1;
    }
    t.nbytes = (size_t)elems * svc_dtype_size(t.dtype);

    const json_t *data = json_object_get(j, "data");
    const json_t *b64 = json_object_get(j, "b64");
    const json_t *blob = json_object_get(j, "blob");
    if ((data != NULL) + (b64 != NULL) + (blob != NULL) != 1) {
        snprintf(msg, msglen, "a tensor needs exactly one of \"data\", \"b64\" or \"blob\"");
        return -1;
    }
    int rc;
    if (blob != NULL) {
        /* A reference: its size is checked against the blob where the
         * blob is known (the gateway at submit, the node when fetching). */
        if (!svc_blob_id_valid(json_string_value(blob))) {
            snprintf(msg, msglen, "blob must be \"sha256:\" followed by 64 lowercase hex digits");
            return -1;
        }
        snprintf(t.blob, sizeof t.blob, "%s", json_string_value(blob));
        rc = 0;
    } else if (data != NULL) {
        rc = data_parse(data, elems, shp, &t, msg, msglen);
    } else {
        rc = b64_parse(b64, shp, &t, msg, msglen);
    }
    if (rc < 0) {
        svc_tensor_free(&t);
        return -1;
    }
    *out = t;
    return 0;
}

/* One json_t per element: jansson arrays grow geometrically, so encoding n
 * elements costs O(n) time (and about 40 bytes of heap per element; large
 * tensors should travel as b64). */
static json_t *data_to_json(const svc_tensor *t, int64_t elems)
{
    json_t *a = json_array();
    if (a == NULL)
        return NULL;
    for (int64_t i = 0; i < elems; i++) {
        json_t *v;
        switch (t->dtype) {
        case SVC_F32: v = json_real((double)((const float *)t->data)[i]); break;
        case SVC_F64: v = json_real(((const double *)t->data)[i]); break;
        default: v = json_integer(((const int32_t *)t->data)[i]); break;
        }
        /* json_real refuses NaN and infinities: JSON cannot carry them, so
         * they are written as null rather than dropping the whole tensor. */
        if (v == NULL)
            v = json_null();
        if (json_array_append_new(a, v) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

json_t *svc_tensor_to_json(const svc_tensor *t, int b64)
{
    if (t == NULL)
        return NULL;
    int64_t elems = svc_tensor_elems(t);
    json_t *o = json_object();
    json_t *shape = svc_shape_to_json(t->ndim, t->shape);
    json_t *body = NULL;
    if (t->blob[0] != '\0') {
        body = json_string(t->blob);
    } else if (b64) {
        char *s = svc_b64_encode(t->data != NULL ? t->data : "", t->data != NULL ? t->nbytes : 0);
        if (s != NULL) {
            body = json_stringn_nocheck(s, strlen(s));
            free(s);
        }
    } else {
        body = data_to_json(t, elems);
    }
    if (o == NULL || shape == NULL || body == NULL) {
        json_decref(o);
        json_decref(shape);
        json_decref(body);
        return NULL;
    }
    /* json_object_set_new steals its value even when it fails. */
    int bad = json_object_set_new(o, "dtype", json_string(svc_dtype_name(t->dtype)));
    bad |= json_object_set_new(o, "shape", shape);
    bad |= json_object_set_new(o, t->blob[0] ? "blob" : b64 ? "b64" : "data", body);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}
