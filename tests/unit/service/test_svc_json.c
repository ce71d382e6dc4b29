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
#include "svc_util.h"

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

/* Builds fmt with every '@' replaced by a run of n 'A's (a long string's
 * body). Caller frees. */
static char *with_long(const char *fmt, size_t n)
{
    size_t ats = 0;
    for (const char *p = fmt; *p; p++)
        ats += *p == '@';
    char *r = malloc(strlen(fmt) + ats * n + 1), *o = r;
    for (const char *p = fmt; *p; p++) {
        if (*p == '@') {
            memset(o, 'A', n);
            o += n;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return r;
}

/* svc_json_parse and json_loadb agree on text: the same value, or the same
 * error text, line, column and byte. */
static void agrees_with_jansson(const char *text, size_t len)
{
    json_error_t ea, eb;
    json_t *a = svc_json_parse(text, len, &ea);
    json_t *b = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &eb);
    if (b == NULL) {
        assert_null(a);
        assert_string_equal(ea.text, eb.text);
        assert_int_equal(ea.line, eb.line);
        assert_int_equal(ea.column, eb.column);
        assert_int_equal(ea.position, eb.position);
        assert_int_equal(json_error_code(&ea), json_error_code(&eb));
    } else {
        assert_non_null(a);
        /* No compact array in these texts: the trees are plain jansson. */
        assert_true(json_equal(a, b));
    }
    json_decref(a);
    json_decref(b);
}

static void long_plain_strings_are_the_same_strings(void **state)
{
    static const char *const fmts[] = {
        "\"@\"",
        "[\"@\"]",
        "[\"@\", \"@\"]",
        "{\"x\":{\"dtype\":\"float32\",\"b64\":\"@\"},\"y\":[\"@\",{\"k\":\"@\"}]}",
        "{\"@\":\"@\"}", /* a long key stays jansson's */
    };
    for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++) {
        char *t = with_long(fmts[i], SVC_JSON_STRING_MIN + 3 * i);
        agrees_with_jansson(t, strlen(t));
        free(t);
    }
    /* Right at the threshold and one below. */
    for (size_t n = SVC_JSON_STRING_MIN - 1; n <= SVC_JSON_STRING_MIN; n++) {
        char *t = with_long("{\"s\":\"@\",\"d\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}", n);
        json_error_t e;
        json_t *a = parse(t, &e);
        assert_non_null(a);
        assert_int_equal(json_string_length(json_object_get(a, "s")), n);
        assert_true(svc_json_numbers(json_object_get(a, "d"), NULL, NULL, NULL));
        json_decref(a);
        free(t);
    }
}

static void long_strings_with_escapes_or_utf8_are_left_to_jansson(void **state)
{
    static const char *const fmts[] = {
        "[\"@\\n@\"]",            /* an escape */
        "[\"@\\\"@\"]",           /* an escaped quote inside */
        "[\"@\\\\\", \"@\"]",     /* a string ending in an escaped backslash */
        "[\"@\xc3\xa9@\"]",       /* UTF-8 */
        "[\"@\xc3@\"]",           /* invalid UTF-8: jansson's error */
        "[\"@\xff\"]",
        "[\"@\t@\"]",             /* a raw control character: jansson's error */
        "[\"@\n@\"]",
        "[\"@\\u0000@\"]",        /* NUL escape: refused without JSON_ALLOW_NUL */
        "[\"@\\x@\"]",            /* invalid escape */
        "[\"@",                   /* unterminated */
        "[\"@\\",
    };
    for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++) {
        char *t = with_long(fmts[i], SVC_JSON_STRING_MIN);
        agrees_with_jansson(t, strlen(t));
        free(t);
    }
}

static void errors_after_a_long_string_keep_their_positions(void **state)
{
    static const char *const fmts[] = {
        "{\"a\":\"@\", \"b\": x}",
        "{\"a\" \"@\"}",            /* the error is on the long string itself */
        "[\"@\" 1]",
        "\"@\" 1",
        "\"@\" \"@\"",
        "{\"a\":1 \"@\"}",
        "[\"@\",\n  \"@\",\n  [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],\n \"@\", tru]",
        "{\"a\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16], \"b\":\"@\", \"a\":1}", /* duplicate */
        "[\"\xc3\xa9\xc3\xa9\", \"@\", \"\xc3\xa9\", nul]", /* columns count characters */
        "{\"@\":1, \"@\":2}",                               /* duplicate long keys */
        "[\"@\", 1e-999]",                                  /* underflow after it */
    };
    for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++) {
        char *t = with_long(fmts[i], SVC_JSON_STRING_MIN + 7);
        json_error_t ea, eb;
        json_t *a = svc_json_parse(t, strlen(t), &ea);
        json_t *b = json_loadb(t, strlen(t), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &eb);
        assert_null(a);
        if (strstr(ea.text, "underflow") == NULL) {
            assert_null(b);
            assert_string_equal(ea.text, eb.text);
            assert_int_equal(ea.line, eb.line);
            assert_int_equal(ea.column, eb.column);
            assert_int_equal(ea.position, eb.position);
        } else {
            assert_int_equal(ea.position, (int)strlen(t) - 1);
        }
        json_decref(b);
        free(t);
    }
}

static void a_client_string_is_never_a_placeholder(void **state)
{
    /* Strings shaped like placeholders, next to long strings: kept as sent. */
    char *t = with_long("[\"@\",\"00000000000000000000000000000000:0\","
                        "[\"00000000000000000000000000000000:0\"],\"@\"]", SVC_JSON_STRING_MIN);
    agrees_with_jansson(t, strlen(t));
    free(t);
}

static void tensor_decodes_b64_from_a_long_string(void **state)
{
    size_t n = SVC_JSON_STRING_MIN; /* floats: 4n bytes, 16n/3 characters */
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)i * 0.5f;
    char *b64 = svc_b64_encode(f, n * sizeof *f);
    size_t tl = strlen(b64) + 100;
    char *t = malloc(tl);
    snprintf(t, tl, "{\"dtype\":\"float32\",\"shape\":[%zu],\"b64\":\"%s\"}", n, b64);
    json_error_t e;
    json_t *a = parse(t, &e);
    assert_non_null(a);
    svc_tensor ta;
    char msg[200];
    assert_int_equal(svc_tensor_from_json(a, 0, &ta, msg, sizeof msg), 0);
    assert_int_equal(ta.nbytes, n * sizeof *f);
    assert_memory_equal(ta.data, f, ta.nbytes);
    svc_tensor_free(&ta);
    json_decref(a);
    /* A bad character deep inside: refused as before. */
    t[strlen(t) - 200] = '-';
    a = parse(t, &e);
    assert_non_null(a);
    assert_int_equal(svc_tensor_from_json(a, 0, &ta, msg, sizeof msg), -1);
    assert_string_equal(msg, "b64 is not valid base64 (standard alphabet, '=' padding, no whitespace)");
    json_decref(a);
    free(t);
    free(b64);
    free(f);
}

/* Reals in their shortest form that reads back exactly (decimal from
 * 1e-6 to 1e21, as results write them): what the job object's usage
 * (PostgreSQL's 0.006, parsed into a double) used to come back as,
 * 0.0060000000000000001 and 2.4000000000000001e-5. */
static void dump_writes_reals_shortest_and_exact(void **state)
{
    (void)state;
    static const struct { const char *in, *out; } cases[] = {
        {"{\"queue_s\":0.006,\"cpu_s\":2.4e-5}", "{\"queue_s\":0.006,\"cpu_s\":0.000024}"},
        {"[0.0060000000000000001,2.4000000000000001e-05,2.4e-7]", "[0.006,0.000024,2.4e-7]"},
        {"[1.5,0.1,3.0,-0.0,1e21,1.7976931348623157e308,5e-324]",
         "[1.5,0.1,3.0,-0.0,1e21,1.7976931348623157e308,5e-324]"},
        {"[1e20,1e-5,-2.5e-300]", "[100000000000000000000.0,0.00001,-2.5e-300]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = json_loads(cases[i].in, JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        char *got = svc_json_dump(j, NULL);
        assert_string_equal(got, cases[i].out);
        /* and it reads back as the very same doubles */
        json_t *back = json_loads(got, JSON_DECODE_ANY, NULL);
        assert_true(json_equal(j, back));
        json_decref(back);
        free(got);
        json_decref(j);
    }
}

/* svc_json_dump writes what json_dumps(JSON_COMPACT | JSON_ENCODE_ANY)
 * writes, byte for byte, but for reals (above): escapes, key order,
 * nesting, long strings. */
static void dump_matches_jansson(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{\"b\":1,\"a\":[true,false,null,-7,9223372036854775807],\"c\":{}}",
        "[1.5,0.5,3.0,-2.0]",
        "{\"s\":\"quote \\\" back \\\\ nl \\n tab \\t ctl \\u0001 \\u001f slash / utf8 \\u00e9\\u4e2d\"}",
        "\"just a string\"", "42", "[]", "[[[[{\"x\":[{}]}]]]]",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        json_t *j = json_loads(docs[i], JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        char *want = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        size_t len = 0;
        char *got = svc_json_dump(j, &len);
        assert_non_null(got);
        assert_string_equal(got, want);
        assert_int_equal(len, strlen(want));
        free(want);
        free(got);
        json_decref(j);
    }
    /* a long base64 string and an embedded NUL */
    size_t n = 100000;
    char *long_s = malloc(n);
    for (size_t i = 0; i < n; i++)
        long_s[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="[i % 65];
    json_t *j = json_pack("{s:s%, s:s%}", "b64", long_s, n, "nul", "a\0b", (size_t)3);
    char *want = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    char *got = svc_json_dump(j, NULL);
    assert_string_equal(got, want);
    free(want);
    free(got);
    json_decref(j);
    free(long_s);
}

/* A text made of n copies of unit between head and tail. */
static char *repeat(const char *head, const char *unit, size_t n, const char *tail)
{
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *t = malloc(hl + ul * n + tl + 1);
    memcpy(t, head, hl);
    for (size_t i = 0; i < n; i++)
        memcpy(t + hl + i * ul, unit, ul);
    memcpy(t + hl + ul * n, tail, tl + 1);
    return t;
}

static json_t *parse_lim(const char *text, unsigned depth, size_t values, const char *const *fields,
                         json_error_t *e, svc_json_over *over)
{
    svc_json_limits lim = {.max_depth = depth, .max_values = values, .fields = fields};
    return svc_json_parse_limits(text, strlen(text), &lim, e, over);
}

/* Nesting past max_depth stops the scan at the bracket that goes one level
 * too deep, before jansson runs; at the limit the text parses. */
static void depth_limit_refuses_at_the_first_level_too_deep(void **state)
{
    (void)state;
    json_error_t e;
    svc_json_over over;
    char t_at[80], t_past[80];
    snprintf(t_at, sizeof t_at, "%.32s%.32s", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    snprintf(t_past, sizeof t_past, "{\"a\":%.32s%.32s}", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    json_t *j = parse_lim(t_at, 32, 0, NULL, &e, &over);
    assert_non_null(j);
    assert_int_equal(over, SVC_JSON_WITHIN);
    json_decref(j);
    assert_null(parse_lim(t_past, 32, 0, NULL, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_DEPTH);
    assert_int_equal(e.position, 5 + 31); /* the object is level 1 */
    assert_int_equal(json_error_code(&e), json_error_stack_overflow);
    assert_non_null(strstr(e.text, "deeper than 32 levels"));
    /* the default is SVC_JSON_MAX_DEPTH, and a limit above the cap is the cap */
    assert_null(parse_lim(t_past, 0, 0, NULL, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_DEPTH);
    char *deep = repeat("", "[", 8u << 20, "");
    assert_null(parse_lim(deep, 100000, 0, NULL, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_DEPTH);
    assert_int_equal(e.position, SVC_JSON_DEPTH_CAP);
    /* without limits a text that deep is jansson's to refuse, and the scan
     * takes no memory per level to get there */
    assert_null(svc_json_parse(deep, strlen(deep), &e));
    assert_int_equal(json_error_code(&e), json_error_stack_overflow);
    free(deep);
}

/* Every value counts once, containers included; a compact array counts as
 * one; keys do not count. */
static void value_limit_counts_every_value_once(void **state)
{
    (void)state;
    json_error_t e;
    svc_json_over over;
    /* 1 (object) + 1 (array) + 16 compact-as-one + ... */
    const char *doc = "{\"a\":[1,\"s\",true,false,null,{},[]],"
                      "\"d\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}";
    /* object, array, 1, "s", true, false, null, {}, [], compact: 10 */
    json_t *j = parse_lim(doc, 0, 10, NULL, &e, &over);
    assert_non_null(j);
    json_decref(j);
    assert_null(parse_lim(doc, 0, 9, NULL, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_VALUES);
    assert_non_null(strstr(e.text, "more than 9 values"));
    assert_int_equal(e.position, strstr(doc, "[0,") - doc);
    /* the shapes that once took a gateway to hundreds of MB */
    char *objs = repeat("{\"kernel\":\"saxpy\",\"params\":[", "{},", 200000, "{}]}");
    assert_null(parse_lim(objs, 0, 100000, NULL, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_VALUES);
    free(objs);
    char *arrs = repeat("[", "[],", 200000, "[]]");
    assert_null(parse_lim(arrs, 0, 0, NULL, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_VALUES);
    free(arrs);
}

/* A top-level member the route does not know is refused when the scan
 * reaches its name (unescaped first), before its value is built; nested
 * names are not the route's business. */
static void unknown_top_level_fields_are_refused_by_name(void **state)
{
    (void)state;
    static const char *const fields[] = {"kernel", "params", NULL};
    json_error_t e;
    svc_json_over over;
    json_t *j = parse_lim("{\"ker\\u006eel\":\"saxpy\",\"params\":{\"x\":{\"y\":1}}}", 0, 0, fields,
                          &e, &over);
    assert_non_null(j);
    assert_non_null(json_object_get(j, "kernel"));
    json_decref(j);
    const char *doc = "{\"kernel\":\"saxpy\", \"x\":[{},{},{}]}";
    assert_null(parse_lim(doc, 0, 0, fields, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_FIELD);
    assert_string_equal(e.source, "x");
    assert_int_equal(e.position, strstr(doc, "\"x\"") - doc);
    assert_string_equal(e.text, "x is not a field of this request");
    assert_null(parse_lim("{\"\\u0078y\":1}", 0, 0, fields, &e, &over));
    assert_string_equal(e.source, "xy");
    /* a name jansson cannot unescape, or would refuse as it is, is left to
     * jansson, which says why */
    assert_null(parse_lim("{\"\\u00zz\":1}", 0, 0, fields, &e, &over));
    assert_int_equal(over, SVC_JSON_WITHIN);
    assert_null(parse_lim("{\"k\xe9rnel\":1}", 0, 0, fields, &e, &over));
    assert_int_equal(over, SVC_JSON_WITHIN);
    assert_int_equal(json_error_code(&e), json_error_invalid_utf8);
    assert_null(parse_lim("{\"a\\u0000\":1}", 0, 0, fields, &e, &over));
    assert_int_equal(over, SVC_JSON_WITHIN);
    /* a long name is cut in the report */
    char *longname = repeat("{\"", "n", 5000, "\":1}");
    assert_null(parse_lim(longname, 0, 0, fields, &e, &over));
    assert_int_equal(over, SVC_JSON_OVER_FIELD);
    assert_int_equal(strlen(e.source), 60);
    free(longname);
}

/* With no limits given, svc_json_parse_limits is svc_json_parse. */
static void no_limits_is_the_plain_parse(void **state)
{
    (void)state;
    char *arrs = repeat("[", "[],", 200000, "[]]");
    json_error_t e;
    svc_json_over over = SVC_JSON_OVER_DEPTH;
    json_t *j = svc_json_parse_limits(arrs, strlen(arrs), NULL, &e, &over);
    assert_non_null(j);
    assert_int_equal(over, SVC_JSON_WITHIN);
    assert_int_equal(json_array_size(j), 200001);
    json_decref(j);
    free(arrs);
}

static void ordered_follows_the_names_then_keeps_the_rest(void **state)
{
    (void)state;
    json_t *obj = json_pack("{s:i, s:i, s:i, s:i}", "d", 4, "a", 1, "c", 3, "x", 9);
    json_t *names = json_pack("[s, s, s, s]", "a", "b", "c", "d");
    json_t *o = svc_json_ordered(obj, names);
    assert_non_null(o);
    const char *want[] = {"a", "b", "c", "d", "x"}, *k;
    json_t *v;
    size_t n = 0;
    json_object_foreach(o, k, v) {
        assert_true(n < 5);
        assert_string_equal(k, want[n]);
        n++;
    }
    assert_int_equal(n, 5);
    assert_true(json_is_null(json_object_get(o, "b")));  /* a name obj lacks: null */
    assert_int_equal(json_integer_value(json_object_get(o, "x")), 9); /* kept, last */
    assert_int_equal(json_integer_value(json_object_get(o, "d")), 4);
    /* the values are shared, not copied */
    assert_ptr_equal(json_object_get(o, "a"), json_object_get(obj, "a"));
    json_decref(o);
    json_decref(names);
    json_decref(obj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(compact_arrays_hold_jansson_values),
        cmocka_unit_test(dump_writes_reals_shortest_and_exact),
        cmocka_unit_test(short_mixed_and_nested_arrays_stay_plain),
        cmocka_unit_test(markers_cannot_be_forged),
        cmocka_unit_test(duplicates_and_errors_match_jansson),
        cmocka_unit_test(underflow_is_refused_with_its_path),
        cmocka_unit_test(tensor_decodes_the_compact_form_like_the_plain_one),
        cmocka_unit_test(long_plain_strings_are_the_same_strings),
        cmocka_unit_test(long_strings_with_escapes_or_utf8_are_left_to_jansson),
        cmocka_unit_test(errors_after_a_long_string_keep_their_positions),
        cmocka_unit_test(a_client_string_is_never_a_placeholder),
        cmocka_unit_test(tensor_decodes_b64_from_a_long_string),
        cmocka_unit_test(dump_matches_jansson),
        cmocka_unit_test(depth_limit_refuses_at_the_first_level_too_deep),
        cmocka_unit_test(value_limit_counts_every_value_once),
        cmocka_unit_test(unknown_top_level_fields_are_refused_by_name),
        cmocka_unit_test(no_limits_is_the_plain_parse),
        cmocka_unit_test(ordered_follows_the_names_then_keeps_the_rest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
