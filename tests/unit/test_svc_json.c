/* test_svc_json.c — the body parser: same trees, errors and positions as
 * json_loadb except that long flat number arrays are compact and numbers
 * that underflow to 0 are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_json.h"
#include "svc_tensor.h"

static json_t *parse(const char *text, json_error_t *e)
{
    return svc_json_parse(text, strlen(text), e);
}

static void compact_arrays_hold_jansson_values(void **state)
{
    const char *text = "{\"d\":[1, -0, 2.5, -3e2, 9223372036854775807, -9223372036854775808,"
                       "0.1, 1e-310, 7, 8, 9, 10, 11, 12, 13, 1.7976931348623157e308]}";
    json_error_t e;
    json_t *a = parse(text, &e), *b = json_loads(text, 0, NULL);
    assert_non_null(a);
    const char *t;
    size_t len, n, pos = 0;
    assert_true(svc_json_numbers(json_object_get(a, "d"), &t, &len, &n));
    assert_int_equal(n, 16);
    svc_json_num v;
    for (size_t i = 0; i < n; i++) {
        const json_t *ref = json_array_get(json_object_get(b, "d"), i);
        assert_int_equal(svc_json_numbers_next(t, len, &pos, &v), 1);
        assert_int_equal(v.is_int, json_is_integer(ref));
        if (v.is_int)
            assert_true(v.i == json_integer_value(ref));
        assert_memory_equal(&v.d, &(double){json_number_value(ref)}, sizeof v.d);
    }
    assert_int_equal(svc_json_numbers_next(t, len, &pos, &v), 0);
    json_decref(a);
    json_decref(b);
}

static void short_mixed_and_nested_arrays_stay_plain(void **state)
{
    json_error_t e;
    json_t *a = parse("{\"s\":[2,3],\"m\":[1,\"a\",2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"
                      "\"n\":[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],[]]}", &e);
    assert_non_null(a);
    assert_true(json_is_array(json_object_get(a, "s")));
    assert_int_equal(json_array_size(json_object_get(a, "s")), 2);
    assert_int_equal(json_array_size(json_object_get(a, "m")), 17);
    assert_false(svc_json_numbers(json_object_get(a, "m"), NULL, NULL, NULL));
    json_t *n = json_object_get(a, "n");
    assert_int_equal(json_array_size(n), 2);
    assert_true(svc_json_numbers(json_array_get(n, 0), NULL, NULL, NULL));
    json_decref(a);
}

static void markers_cannot_be_forged(void **state)
{
    /* The tag's bytes, as a client would have to write them. */
    json_error_t e;
    assert_null(parse("{\"d\":[\"\\u0000kowloon.numbers\",16,\"1,2\"]}", &e));
    json_t *a = parse("{\"d\":[\"kowloon.numbers\",16,\"1,2\"]}", &e);
    assert_non_null(a);
    assert_false(svc_json_numbers(json_object_get(a, "d"), NULL, NULL, NULL));
    json_decref(a);
    /* A placeholder-looking string is just a string. */
    a = parse("{\"d\":[\"00000000000000000000000000000000:0\"]}", &e);
    assert_non_null(a);
    assert_string_equal(json_string_value(json_array_get(json_object_get(a, "d"), 0)),
                        "00000000000000000000000000000000:0");
    json_decref(a);
}

static void duplicates_and_errors_match_jansson(void **state)
{
    static const char *const bad[] = {
        "{\"a\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],\"a\":1}",
        "{\"a\" [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}",
        "[0,0,0,0,0,0,0,0,\n0,0,0,0,0,0,0,0] x",
        "{\"a\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,99999999999999999999]}",
        "{\"a\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1e400]}",
        "{\"a\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,]}",
        "{\"a\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,01]}",
        "{\"b\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16], \"c\": tru}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_error_t a, b;
        assert_null(parse(bad[i], &a));
        assert_null(json_loads(bad[i], JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &b));
        assert_string_equal(a.text, b.text);
        assert_int_equal(a.line, b.line);
        assert_int_equal(a.column, b.column);
        assert_int_equal(a.position, b.position);
    }
}

static void underflow_is_refused_with_its_path(void **state)
{
    json_error_t e;
    assert_null(parse("{\"params\":{\"a\":1e-999}}", &e));
    assert_non_null(strstr(e.text, "1e-999"));
    assert_non_null(strstr(e.text, "params.a"));
    assert_int_equal(e.position, 21);
    assert_null(parse("{\"inputs\":{\"x\":{\"data\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0.0001e-400]}}}", &e));
    assert_non_null(strstr(e.text, "inputs.x.data[16]"));
    assert_null(parse("[1,2,0.5e-330]", &e));
    assert_non_null(strstr(e.text, "[2]"));
    /* Zero written any way, and subnormals, are fine. */
    json_t *a = parse("[0e-999, -0.0e-400, 0.000, 1e-310]", &e);
    assert_non_null(a);
    json_decref(a);
    /* Beyond int64 stays what jansson says: refused. */
    assert_null(parse("[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,18446744073709551616]", &e));
    assert_string_equal(e.text, "too big integer near '18446744073709551616'");
}

static void tensor_decodes_the_compact_form_like_the_plain_one(void **state)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"dtype\":\"float32\",\"shape\":[4,4],\"data\":"
             "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16.5]}");
    json_error_t e;
    json_t *a = parse(text, &e), *b = json_loads(text, 0, NULL);
    assert_true(svc_json_numbers(json_object_get(a, "data"), NULL, NULL, NULL));
    svc_tensor ta, tb;
    char msg[200];
    assert_int_equal(svc_tensor_from_json(a, 0, &ta, msg, sizeof msg), 0);
    assert_int_equal(svc_tensor_from_json(b, 0, &tb, msg, sizeof msg), 0);
    assert_int_equal(ta.nbytes, tb.nbytes);
    assert_memory_equal(ta.data, tb.data, ta.nbytes);
    svc_tensor_free(&ta);
    svc_tensor_free(&tb);
    json_decref(a);
    json_decref(b);

    static const char *const bad[] = {
        "{\"dtype\":\"float32\",\"shape\":[3],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}",
        "{\"dtype\":\"int32\",\"shape\":[16],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,1.5]}",
        "{\"dtype\":\"int32\",\"shape\":[16],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,2147483648]}",
        "{\"dtype\":\"float32\",\"shape\":[16],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,1e39]}",
        "{\"dtype\":\"float32\",\"shape\":[16],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,1e-50]}",
        "{\"dtype\":\"float32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data\":[1]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ma[200], mb[200];
        a = parse(bad[i], &e);
        b = json_loads(bad[i], 0, NULL);
        assert_non_null(a);
        assert_int_equal(svc_tensor_from_json(a, 0, &ta, ma, sizeof ma), -1);
        assert_int_equal(svc_tensor_from_json(b, 0, &tb, mb, sizeof mb), -1);
        assert_string_equal(ma, mb);
        json_decref(a);
        json_decref(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(compact_arrays_hold_jansson_values),
        cmocka_unit_test(short_mixed_and_nested_arrays_stay_plain),
        cmocka_unit_test(markers_cannot_be_forged),
        cmocka_unit_test(duplicates_and_errors_match_jansson),
        cmocka_unit_test(underflow_is_refused_with_its_path),
        cmocka_unit_test(tensor_decodes_the_compact_form_like_the_plain_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
