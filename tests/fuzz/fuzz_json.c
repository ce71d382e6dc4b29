/* fuzz_json.c — libFuzzer harness for the body parser (service/svc_json.c).
 *
 * The input is a request body. svc_json_parse must agree with the parse it
 * replaces, json_loadb(JSON_DECODE_ANY | JSON_REJECT_DUPLICATES): the same
 * documents accepted, the same values (a compact array holds, element by
 * element, the numbers jansson builds, with the same integer/real types and
 * bit-identical doubles), and for refused documents the same error text,
 * line, column and byte. The one intended difference: a literal with a
 * non-zero digit that reads as 0 is refused, at that literal, where jansson
 * accepts the document or fails only later in it. Long plain strings,
 * which svc_json_parse copies without jansson's lexer, are plain jansson
 * strings and compare as such (run.sh lowers SVC_JSON_STRING_MIN so that
 * fuzzed inputs have them). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "svc_json.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_json: invariant broken: %s\n", what);
        abort();
    }
}

static int same_number(const json_t *ref, int is_int, int64_t i, double d)
{
    if (is_int)
        return json_is_integer(ref) && json_integer_value(ref) == i;
    double r = json_real_value(ref);
    return json_is_real(ref) && memcmp(&r, &d, sizeof d) == 0;
}

/* 1 if tree a (svc_json_parse) holds what b (json_loadb) holds. */
static int same(const json_t *a, const json_t *b)
{
    const char *text;
    size_t len, count;
    if (svc_json_numbers(a, &text, &len, &count)) {
        if (!json_is_array(b) || json_array_size(b) != count || count < SVC_JSON_COMPACT_MIN)
            return 0;
        size_t pos = 0;
        svc_json_num v;
        for (size_t k = 0; k < count; k++)
            if (svc_json_numbers_next(text, len, &pos, &v) != 1 ||
                !same_number(json_array_get(b, k), v.is_int, v.i, v.d))
                return 0;
        return svc_json_numbers_next(text, len, &pos, &v) == 0;
    }
    if (json_typeof(a) != json_typeof(b))
        return 0;
    switch (json_typeof(a)) {
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return 0;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)a, key, v) {
            json_t *w = json_object_get(b, key);
            if (w == NULL || !same(v, w))
                return 0;
        }
        return 1;
    }
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t k = 0; k < json_array_size(a); k++)
            if (!same(json_array_get(a, k), json_array_get(b, k)))
                return 0;
        return 1;
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_INTEGER:
        return json_integer_value(a) == json_integer_value(b);
    case JSON_REAL: {
        double x = json_real_value(a), y = json_real_value(b);
        return memcmp(&x, &y, sizeof x) == 0;
    }
    default:
        return 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t ea, eb;
    json_t *a = svc_json_parse((const char *)data, size, &ea);
    json_t *b = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &eb);
    int same_error = a == NULL && b == NULL && strcmp(ea.text, eb.text) == 0 &&
                     ea.line == eb.line && ea.column == eb.column && ea.position == eb.position;
    if (a == NULL && !same_error) {
        /* Only the underflow refusal may differ, and only before jansson's. */
        check(strncmp(ea.text, "number ", 7) == 0 &&
              strstr(ea.text, "is not zero but reads as 0 (underflow)") != NULL &&
              json_error_code(&ea) == json_error_numeric_overflow,
              "refused differently from jansson");
        check(b == NULL ? eb.position > ea.position : 1, "underflow reported after jansson's error");
    } else if (a != NULL) {
        check(b != NULL, "accepts what jansson refuses");
        check(same(a, b), "values differ from jansson's");
    }
    json_decref(a);
    json_decref(b);
    return 0;
}
