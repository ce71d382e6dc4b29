/* fuzz_tstream.c — libFuzzer harness for the streaming JSON writer of
 * results (service/data/svc_tstream.c, numbers from svc_dtoa.cc).
 *
 * The input picks a dtype, a shape and the tensor's raw bytes (any bit
 * patterns: NaN, infinities, denormals, -0.0), the encoding, and the sizes
 * of the reads. The document is read piece by piece and must be valid
 * JSON, the same text whatever the read sizes, and hold the same values: a
 * finite number reads back bit for bit (float32 through strtof), a
 * non-finite one is the string "NaN", "Infinity" or "-Infinity" of its
 * class, and the b64 form decodes to the same bytes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "svc_tensor.h"
#include "svc_tstream.h"
#include "svc_util.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tstream: invariant broken: %s\n", what);
        abort();
    }
}

/* The whole document, read in pieces whose sizes cycle through steps. */
static char *read_all(svc_tensor *t, int b64, const uint8_t *steps, size_t nsteps, size_t *len)
{
    svc_tstream *s = svc_tstream_new();
    check(s != NULL, "svc_tstream_new");
    check(svc_tstream_text(s, "{\"t\":", 5) == 0, "text");
    check(svc_tstream_tensor(s, t, b64) == 0, "svc_tstream_tensor refused a consistent tensor");
    check(svc_tstream_text(s, "}", 1) == 0, "text");
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    for (size_t i = 0;; i++) {
        size_t max = nsteps ? (size_t)steps[i % nsteps] % 97 + 1 : 4096;
        if (cap - n < max + 1) {
            cap = 2 * cap + max;
            out = realloc(out, cap);
        }
        ssize_t k = svc_tstream_read(s, out + n, max);
        check(k >= 0 && (size_t)k <= max, "read size");
        if (k == 0)
            break;
        n += (size_t)k;
    }
    svc_tstream_free(s);
    out[n] = '\0';
    *len = n;
    return out;
}

static void check_value(const json_t *v, svc_dtype dt, const unsigned char *raw)
{
    double d;
    if (dt == SVC_I32) {
        int32_t x;
        memcpy(&x, raw, 4);
        check(json_is_integer(v) && json_integer_value(v) == x, "int32 value");
        return;
    }
    if (dt == SVC_F32) {
        float f;
        memcpy(&f, raw, 4);
        d = f;
    } else {
        memcpy(&d, raw, 8);
    }
    if (isnan(d)) {
        check(json_is_string(v) && strcmp(json_string_value(v), "NaN") == 0, "NaN string");
    } else if (isinf(d)) {
        check(json_is_string(v) && strcmp(json_string_value(v), d > 0 ? "Infinity" : "-Infinity") == 0,
              "infinity string");
    } else {
        check(json_is_real(v), "a finite float is a JSON real");
        double got = json_real_value(v);
        if (dt == SVC_F32) {
            float g = (float)got, f = (float)d;
            check(memcmp(&g, &f, 4) == 0, "float32 round trip");
        } else {
            check(memcmp(&got, &d, 8) == 0, "float64 round trip");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    svc_tensor t = {0};
    t.dtype = (svc_dtype)(data[0] % 3);
    int b64 = data[1] & 1;
    size_t nsteps = data[2] % 8;
    const uint8_t *steps = data + 3;
    if (size < 3 + nsteps)
        return 0;
    const uint8_t *bytes = data + 3 + nsteps;
    size_t left = size - 3 - nsteps, es = svc_dtype_size(t.dtype);
    int64_t elems = (int64_t)(left / es);
    t.ndim = 1;
    t.shape[0] = elems;
    if (elems > 1 && data[1] & 2 && elems % 2 == 0) { /* a matrix now and then */
        t.ndim = 2;
        t.shape[0] = 2;
        t.shape[1] = elems / 2;
    }
    t.nbytes = (size_t)elems * es;
    t.data = t.nbytes ? (void *)bytes : NULL;

    size_t len, len2;
    char *text = read_all(&t, b64, steps, nsteps, &len);
    char *text2 = read_all(&t, b64, NULL, 0, &len2);
    check(len == len2 && memcmp(text, text2, len) == 0, "the same text whatever the read sizes");
    json_error_t err;
    json_t *doc = json_loadb(text, len, 0, &err);
    check(doc != NULL, "the document is valid JSON");
    json_t *tj = json_object_get(doc, "t");
    check(strcmp(json_string_value(json_object_get(tj, "dtype")), svc_dtype_name(t.dtype)) == 0, "dtype");
    if (b64) {
        unsigned char *dec = NULL;
        size_t dlen = 0;
        const char *s = json_string_value(json_object_get(tj, "b64"));
        check(s != NULL && svc_b64_decode(s, strlen(s), &dec, &dlen) == 0, "b64 decodes");
        check(dlen == t.nbytes && (dlen == 0 || memcmp(dec, bytes, dlen) == 0), "b64 bytes");
        free(dec);
    } else {
        json_t *arr = json_object_get(tj, "data");
        check(json_is_array(arr) && json_array_size(arr) == (size_t)elems, "data length");
        for (int64_t i = 0; i < elems; i++)
            check_value(json_array_get(arr, (size_t)i), t.dtype, bytes + (size_t)i * es);
    }
    json_decref(doc);
    free(text);
    free(text2);
    return 0;
}
