/* test_svc_tensor.c — the tensor wire codec: round trips in both encodings
 * for every dtype, and each way a document can be refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_tensor.h"
#include "svc_util.h"

/* Decodes text that must be refused; returns the message (static). */
static const char *refused(const char *text, int64_t max_elems)
{
    static char msg[256];
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (j == NULL)
        fail_msg("test JSON does not parse: %s", jerr.text);
    svc_tensor t;
    int rc = svc_tensor_from_json(j, max_elems, &t, msg, sizeof msg);
    json_decref(j);
    if (rc == 0)
        fail_msg("accepted: %s", text);
    assert_null(t.data);
    assert_true(msg[0] != '\0');
    return msg;
}

static void decode_ok(const char *text, svc_tensor *t)
{
    char msg[256];
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    int rc = svc_tensor_from_json(j, 0, t, msg, sizeof msg);
    json_decref(j);
    if (rc != 0)
        fail_msg("refused %s: %s", text, msg);
}

/* Encodes t in the given form, dumps it as the server does, parses the
 * text and decodes it again: the bytes must be identical. */
static void round_trip(const svc_tensor *t, int b64)
{
    json_t *j = svc_tensor_to_json(t, b64);
    assert_non_null(j);
    assert_non_null(json_object_get(j, b64 ? "b64" : "data"));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    svc_tensor back;
    decode_ok(text, &back);
    free(text);
    assert_int_equal(back.dtype, t->dtype);
    assert_int_equal(back.ndim, t->ndim);
    assert_memory_equal(back.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    assert_int_equal(back.nbytes, t->nbytes);
    if (t->nbytes > 0)
        assert_memory_equal(back.data, t->data, t->nbytes);
    svc_tensor_free(&back);
}

static svc_tensor make(svc_dtype dt, int ndim, const int64_t *shape)
{
    svc_tensor t = {.dtype = dt, .ndim = ndim};
    if (ndim > 0)
        memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    t.nbytes = (size_t)svc_tensor_elems(&t) * svc_dtype_size(dt);
    t.data = t.nbytes ? malloc(t.nbytes) : NULL;
    return t;
}

static void test_float32_round_trips_in_data_and_b64(void **state)
{
    (void)state;
    int64_t shape[] = {3, 4};
    svc_tensor t = make(SVC_F32, 2, shape);
    float *f = t.data;
    const float special[] = {0.1f, -0.0f, FLT_MIN, FLT_MAX, -FLT_MAX, 1e-45f /* subnormal */,
                             3.14159274f, 16777217.0f, 1.0f / 3.0f, -2.5e-38f, 7.0f, 123456.789f};
    memcpy(f, special, sizeof special);
    round_trip(&t, 0);
    round_trip(&t, 1);
    svc_tensor_free(&t);
    assert_null(t.data);
}

static void test_float64_round_trips_in_data_and_b64(void **state)
{
    (void)state;
    int64_t shape[] = {6};
    svc_tensor t = make(SVC_F64, 1, shape);
    const double v[] = {0.1, DBL_MIN, DBL_MAX, 4.9e-324, -1.0 / 3.0, 9007199254740993.0};
    memcpy(t.data, v, sizeof v);
    round_trip(&t, 0);
    round_trip(&t, 1);
    svc_tensor_free(&t);
}

static void test_int32_round_trips_in_data_and_b64(void **state)
{
    (void)state;
    int64_t shape[] = {2, 1, 2};
    svc_tensor t = make(SVC_I32, 3, shape);
    const int32_t v[] = {INT32_MIN, -1, 0, INT32_MAX};
    memcpy(t.data, v, sizeof v);
    round_trip(&t, 0);
    round_trip(&t, 1);
    svc_tensor_free(&t);
}

static void test_scalar_and_empty_tensors_round_trip(void **state)
{
    (void)state;
    svc_tensor s = make(SVC_F32, 0, NULL);
    *(float *)s.data = 2.5f;
    assert_int_equal(svc_tensor_elems(&s), 1);
    round_trip(&s, 0);
    round_trip(&s, 1);
    svc_tensor_free(&s);

    int64_t shape[] = {3, 0};
    svc_tensor e = make(SVC_F64, 2, shape);
    assert_null(e.data);
    round_trip(&e, 0);
    round_trip(&e, 1);
    svc_tensor e2;
    decode_ok("{\"dtype\":\"int32\",\"shape\":[0],\"b64\":\"\"}", &e2);
    assert_null(e2.data);
    assert_int_equal(e2.nbytes, 0);
    svc_tensor_free(&e2);
}

static void test_b64_decodes_little_endian_bytes(void **state)
{
    (void)state;
    svc_tensor t;
    /* 1.0f = 00 00 80 3f, 2 = 02 00 00 00 */
    decode_ok("{\"dtype\":\"float32\",\"shape\":[1],\"b64\":\"AACAPw==\"}", &t);
    assert_true(((float *)t.data)[0] == 1.0f);
    svc_tensor_free(&t);
    decode_ok("{\"dtype\":\"int32\",\"shape\":[],\"b64\":\"AgAAAA==\"}", &t);
    assert_int_equal(((int32_t *)t.data)[0], 2);
    svc_tensor_free(&t);
}

static void test_malformed_base64_is_refused(void **state)
{
    (void)state;
    /* float32 [1] needs 4 bytes, i.e. 8 base64 characters. */
    const char *bad[] = {
        "AACAPw=",    /* length not a multiple of 4 */
        "AACAP===",   /* three pad characters */
        "AAC=Pw==",   /* padding in the middle */
        "AACA Pw=",   /* whitespace */
        "AACAPw\n=",  /* newline */
        "AACA*w==",   /* character outside the alphabet */
        "AACAPx==",   /* non-zero bits under the padding */
        "AACA-w==",   /* base64url is not base64 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[128];
        json_t *j = json_pack("{s:s, s:[i], s:s}", "dtype", "float32", "shape", 1, "b64", bad[i]);
        char *s = json_dumps(j, 0);
        snprintf(text, sizeof text, "%s", s);
        free(s);
        json_decref(j);
        refused(text, 0);
    }
    assert_non_null(strstr(refused("{\"dtype\":\"float32\",\"shape\":[1],\"b64\":5}", 0), "b64"));
}

static void test_b64_byte_count_must_match_shape(void **state)
{
    (void)state;
    /* 20 bytes of zeros where [2,3] float32 needs 24. */
    char *b = svc_b64_encode((unsigned char[20]){0}, 20);
    char text[256];
    snprintf(text, sizeof text, "{\"dtype\":\"float32\",\"shape\":[2,3],\"b64\":\"%s\"}", b);
    free(b);
    assert_string_equal(refused(text, 0), "shape [2,3] float32 needs 24 bytes, b64 has 20");
}

static void test_data_length_must_match_shape(void **state)
{
    (void)state;
    assert_string_equal(refused("{\"dtype\":\"float32\",\"shape\":[2,3],\"data\":[1,2,3,4,5]}", 0),
                        "shape [2,3] needs 6 elements, data has 5");
    refused("{\"dtype\":\"float32\",\"shape\":[],\"data\":[]}", 0);
    refused("{\"dtype\":\"float32\",\"shape\":[0],\"data\":[1]}", 0);
}

static void test_non_number_in_data_is_refused(void **state)
{
    (void)state;
    assert_non_null(strstr(refused("{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,\"2\"]}", 0),
                           "data[1]"));
    refused("{\"dtype\":\"float64\",\"shape\":[1],\"data\":[null]}", 0);
    refused("{\"dtype\":\"float64\",\"shape\":[1],\"data\":[true]}", 0);
    refused("{\"dtype\":\"float64\",\"shape\":[1],\"data\":[{}]}", 0);
    refused("{\"dtype\":\"float64\",\"shape\":[1],\"data\":\"1\"}", 0);
    /* A double beyond float32's range would become infinity. */
    assert_non_null(strstr(refused("{\"dtype\":\"float32\",\"shape\":[1],\"data\":[1e300]}", 0),
                           "out of range for float32"));
}

static void test_nested_arrays_are_refused_with_a_clear_message(void **state)
{
    (void)state;
    const char *m = refused("{\"dtype\":\"float32\",\"shape\":[2,2],\"data\":[[1,2],[3,4]]}", 0);
    assert_non_null(strstr(m, "nested"));
    assert_non_null(strstr(m, "flat"));
    m = refused("{\"dtype\":\"float32\",\"shape\":[3],\"data\":[1,[2],3]}", 0);
    assert_non_null(strstr(m, "data[1] is an array"));
}

static void test_shape_is_validated(void **state)
{
    (void)state;
    assert_non_null(strstr(refused("{\"dtype\":\"float32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data\":[1]}", 0),
                           "at most 8"));
    refused("{\"dtype\":\"float32\",\"shape\":[-1],\"data\":[]}", 0);
    refused("{\"dtype\":\"float32\",\"shape\":[1.0],\"data\":[1]}", 0);
    refused("{\"dtype\":\"float32\",\"shape\":\"2\",\"data\":[1,2]}", 0);
    refused("{\"dtype\":\"float32\",\"data\":[1]}", 0);
    /* 2^62 * 2^62 overflows int64: refused before anything is allocated. */
    assert_non_null(strstr(refused("{\"dtype\":\"float32\",\"shape\":[4611686018427387904,"
                                   "4611686018427387904],\"data\":[]}", 0),
                           "overflow"));
    int nd;
    int64_t shape[SVC_TENSOR_MAX_DIMS];
    json_t *j = json_loads("[4,5]", 0, NULL);
    assert_int_equal(svc_shape_from_json(j, &nd, shape), 0);
    assert_int_equal(nd, 2);
    assert_int_equal(shape[1], 5);
    json_decref(j);
    j = json_loads("[4,-5]", 0, NULL);
    assert_int_equal(svc_shape_from_json(j, &nd, shape), -1);
    json_decref(j);
}

static void test_more_than_max_elems_is_refused(void **state)
{
    (void)state;
    const char *m = refused("{\"dtype\":\"float32\",\"shape\":[1000,1000],\"b64\":\"\"}", 999999);
    assert_non_null(strstr(m, "limit"));
    svc_tensor t;
    json_t *j = json_loads("{\"dtype\":\"int32\",\"shape\":[2],\"data\":[1,2]}", 0, NULL);
    assert_int_equal(svc_tensor_from_json(j, 2, &t, NULL, 0), 0);
    svc_tensor_free(&t);
    json_decref(j);
}

static void test_int32_out_of_range_or_fractional_is_refused(void **state)
{
    (void)state;
    assert_non_null(strstr(refused("{\"dtype\":\"int32\",\"shape\":[1],\"data\":[2147483648]}", 0),
                           "out of range for int32"));
    refused("{\"dtype\":\"int32\",\"shape\":[1],\"data\":[-2147483649]}", 0);
    refused("{\"dtype\":\"int32\",\"shape\":[1],\"data\":[1.5]}", 0);
}

static void test_exactly_one_of_data_or_b64_and_no_unknown_members(void **state)
{
    (void)state;
    assert_non_null(strstr(refused("{\"dtype\":\"float32\",\"shape\":[1],\"data\":[1],\"b64\":\"AACAPw==\"}", 0),
                           "exactly one"));
    refused("{\"dtype\":\"float32\",\"shape\":[1]}", 0);
    refused("{\"dtype\":\"float16\",\"shape\":[1],\"data\":[1]}", 0);
    refused("{\"shape\":[1],\"data\":[1]}", 0);
    refused("{\"dtype\":\"float32\",\"shape\":[1],\"data\":[1],\"extra\":1}", 0);
    refused("[1,2]", 0);
}

/* 16M elements: encoding and dumping must stay linear (a quadratic step
 * would take minutes here, not a second or two). */
static void test_large_tensor_encodes_in_linear_time(void **state)
{
    (void)state;
    int64_t shape[] = {1 << 24};
    svc_tensor t = make(SVC_F32, 1, shape);
    for (int64_t i = 0; i < shape[0]; i++)
        ((float *)t.data)[i] = (float)i * 0.5f;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    json_t *j = svc_tensor_to_json(&t, 0);
    assert_int_equal(json_array_size(json_object_get(j, "data")), (size_t)1 << 24);
    char *text = json_dumps(j, JSON_COMPACT);
    assert_non_null(text);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    assert_true(s < 30.0);
    free(text);
    json_decref(j);
    j = svc_tensor_to_json(&t, 1);
    assert_int_equal(json_string_length(json_object_get(j, "b64")), (t.nbytes + 2) / 3 * 4);
    json_decref(j);
    svc_tensor_free(&t);
}

static void test_dtype_names(void **state)
{
    (void)state;
    svc_dtype d;
    assert_int_equal(svc_dtype_parse("float64", &d), 0);
    assert_int_equal(d, SVC_F64);
    assert_int_equal(svc_dtype_parse("Float32", &d), -1);
    assert_string_equal(svc_dtype_name(SVC_I32), "int32");
    assert_int_equal(svc_dtype_size(SVC_F64), 8);
    svc_tensor_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float32_round_trips_in_data_and_b64),
        cmocka_unit_test(test_float64_round_trips_in_data_and_b64),
        cmocka_unit_test(test_int32_round_trips_in_data_and_b64),
        cmocka_unit_test(test_scalar_and_empty_tensors_round_trip),
        cmocka_unit_test(test_b64_decodes_little_endian_bytes),
        cmocka_unit_test(test_malformed_base64_is_refused),
        cmocka_unit_test(test_b64_byte_count_must_match_shape),
        cmocka_unit_test(test_data_length_must_match_shape),
        cmocka_unit_test(test_non_number_in_data_is_refused),
        cmocka_unit_test(test_nested_arrays_are_refused_with_a_clear_message),
        cmocka_unit_test(test_shape_is_validated),
        cmocka_unit_test(test_more_than_max_elems_is_refused),
        cmocka_unit_test(test_int32_out_of_range_or_fractional_is_refused),
        cmocka_unit_test(test_exactly_one_of_data_or_b64_and_no_unknown_members),
        cmocka_unit_test(test_large_tensor_encodes_in_linear_time),
        cmocka_unit_test(test_dtype_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
