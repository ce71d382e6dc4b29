/* test_svc_tstream.c — JSON documents streamed piece by piece: the text is
 * the same whatever the reader's buffer size (down to one byte), tensors
 * read back exactly, and non-finite reals are distinct strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "svc_tstream.h"

/* Reads the whole stream with reads of at most max bytes; caller frees. */
static char *read_all(svc_tstream *s, size_t max)
{
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    char *buf = malloc(max);
    for (;;) {
        ssize_t n = svc_tstream_read(s, buf, max);
        assert_true(n >= 0 && (size_t)n <= max);
        if (n == 0)
            break;
        while (len + (size_t)n + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + len, buf, (size_t)n);
        len += (size_t)n;
    }
    out[len] = '\0';
    free(buf);
    return out;
}

static svc_tensor view(svc_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    svc_tensor t = {.dtype = dt, .ndim = ndim, .data = (void *)data};
    memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    t.nbytes = (size_t)svc_tensor_elems(&t) * svc_dtype_size(dt);
    return t;
}

/* A small result document as the gateway writes it. */
static svc_tstream *small_doc(int b64)
{
    static const float c[6] = {1.0f, -0.0f, 0.1f, 1e-45f, 3.4028235e38f, -2.5f};
    static const int32_t k[3] = {0, -2147483647 - 1, 42};
    static const double d[1] = {0.1};
    const int64_t s23[2] = {2, 3}, s3[1] = {3}, s1[1] = {1}, s0[1] = {0};
    svc_tstream *s = svc_tstream_new();
    svc_tensor tc = view(SVC_F32, 2, s23, c), tk = view(SVC_I32, 1, s3, k),
               td = view(SVC_F64, 1, s1, d), te = view(SVC_F32, 1, s0, NULL);
    assert_int_equal(svc_tstream_text(s, "{\"outputs\":{\"c\":", 16), 0);
    assert_int_equal(svc_tstream_tensor(s, &tc, b64), 0);
    assert_int_equal(svc_tstream_text(s, ",\"k\":", 5), 0);
    assert_int_equal(svc_tstream_tensor(s, &tk, b64), 0);
    assert_int_equal(svc_tstream_text(s, ",\"d\":", 5), 0);
    assert_int_equal(svc_tstream_tensor(s, &td, b64), 0);
    assert_int_equal(svc_tstream_text(s, ",\"e\":", 5), 0);
    assert_int_equal(svc_tstream_tensor(s, &te, b64), 0);
    assert_int_equal(svc_tstream_text(s, "}}", 2), 0);
    return s;
}

static void test_json_text_is_the_same_for_every_read_size(void **state)
{
    const char *want =
        "{\"outputs\":{\"c\":{\"dtype\":\"float32\",\"shape\":[2,3],"
        "\"data\":[1.0,-0.0,0.1,1e-45,3.4028235e38,-2.5]},"
        "\"k\":{\"dtype\":\"int32\",\"shape\":[3],\"data\":[0,-2147483648,42]},"
        "\"d\":{\"dtype\":\"float64\",\"shape\":[1],\"data\":[0.1]},"
        "\"e\":{\"dtype\":\"float32\",\"shape\":[0],\"data\":[]}}}";
    for (size_t max = 1; max <= 300; max++) {
        svc_tstream *s = small_doc(0);
        char *got = read_all(s, max);
        if (strcmp(got, want) != 0)
            fail_msg("reads of %zu bytes gave\n%s\nnot\n%s", max, got, want);
        free(got);
        svc_tstream_free(s);
    }
}

static void test_b64_text_is_the_same_for_every_read_size(void **state)
{
    svc_tstream *s = small_doc(1);
    char *want = read_all(s, 1 << 16);
    svc_tstream_free(s);
    assert_non_null(strstr(want, "\"k\":{\"dtype\":\"int32\",\"shape\":[3],\"b64\":\"AAAAAAAAAIAqAAAA\"}"));
    assert_non_null(strstr(want, "\"e\":{\"dtype\":\"float32\",\"shape\":[0],\"b64\":\"\"}"));
    for (size_t max = 1; max <= 120; max++) {
        s = small_doc(1);
        char *got = read_all(s, max);
        assert_string_equal(got, want);
        free(got);
        svc_tstream_free(s);
    }
    free(want);
}

static void test_non_finite_reals_are_distinct_strings(void **state)
{
    const float f[4] = {NAN, INFINITY, -INFINITY, 1.5f};
    const double d[3] = {-NAN, INFINITY, -INFINITY};
    const int64_t s4[1] = {4}, s3[1] = {3};
    svc_tensor tf = view(SVC_F32, 1, s4, f), td = view(SVC_F64, 1, s3, d);
    svc_tstream *s = svc_tstream_new();
    assert_int_equal(svc_tstream_tensor(s, &tf, 0), 0);
    assert_int_equal(svc_tstream_tensor(s, &td, 0), 0);
    char *got = read_all(s, 7);
    assert_string_equal(got, "{\"dtype\":\"float32\",\"shape\":[4],\"data\":[\"NaN\",\"Infinity\",\"-Infinity\",1.5]}"
                             "{\"dtype\":\"float64\",\"shape\":[3],\"data\":[\"NaN\",\"Infinity\",\"-Infinity\"]}");
    free(got);
    svc_tstream_free(s);
}

/* A tensor larger than any one read: every value reads back exactly. */
static void test_large_tensor_reads_back_exactly(void **state)
{
    enum { N = 100000 };
    float *v = malloc(N * sizeof(float));
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1e6f;
    }
    const int64_t shape[1] = {N};
    svc_tensor t = view(SVC_F32, 1, shape, v);
    svc_tstream *s = svc_tstream_new();
    assert_int_equal(svc_tstream_tensor(s, &t, 0), 0);
    assert_int_equal(svc_tstream_own(s, v), 0); /* freed with the stream */
    char *got = read_all(s, 4093);
    char *p = strstr(got, "\"data\":[");
    assert_non_null(p);
    p += 8;
    x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        float want = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1e6f;
        char *end;
        float f = strtof(p, &end);
        assert_true(end > p);
        assert_memory_equal(&f, &want, 4);
        assert_true(*end == (i + 1 < N ? ',' : ']'));
        p = end + 1;
    }
    free(got);
    svc_tstream_free(s);
}

static void test_tensor_whose_bytes_do_not_match_its_shape_is_refused(void **state)
{
    const float f[2] = {1, 2};
    const int64_t s3[1] = {3};
    svc_tensor t = view(SVC_F32, 1, s3, f);
    t.nbytes = 8;
    svc_tstream *s = svc_tstream_new();
    assert_int_equal(svc_tstream_tensor(s, &t, 0), -EINVAL);
    svc_tstream_free(s);
    svc_tstream_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_text_is_the_same_for_every_read_size),
        cmocka_unit_test(test_b64_text_is_the_same_for_every_read_size),
        cmocka_unit_test(test_non_finite_reals_are_distinct_strings),
        cmocka_unit_test(test_large_tensor_reads_back_exactly),
        cmocka_unit_test(test_tensor_whose_bytes_do_not_match_its_shape_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
