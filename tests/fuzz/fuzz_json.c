/* fuzz_json.c — libFuzzer harness for the body parser (service/data/svc_json.c).
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
 * fuzzed inputs have them).
 *
 * The same input is parsed again within small limits (svc_json_parse_limits:
 * depth, values, the top level's known names). Within them it must give
 * the same tree or the same error as without; refused for a limit, the
 * document must break that limit, or not be JSON at all. */
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

/* Levels of arrays and objects in t (a compact array is one, like any). */
static size_t depth_of(const json_t *t)
{
    if (svc_json_numbers(t, NULL, NULL, NULL))
        return 1;
    size_t d = 0;
    if (json_is_object(t)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)t, key, v) {
            size_t c = depth_of(v);
            d = c > d ? c : d;
        }
        return d + 1;
    }
    if (json_is_array(t)) {
        for (size_t k = 0; k < json_array_size(t); k++) {
            size_t c = depth_of(json_array_get(t, k));
            d = c > d ? c : d;
        }
        return d + 1;
    }
    return 0;
}

/* Values in t as the scan counts them: a compact array is one. */
static size_t values_of(const json_t *t)
{
    size_t n = 1;
    if (svc_json_numbers(t, NULL, NULL, NULL))
        return 1;
    if (json_is_object(t)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)t, key, v)
            n += values_of(v);
    } else if (json_is_array(t)) {
        for (size_t k = 0; k < json_array_size(t); k++)
            n += values_of(json_array_get(t, k));
    }
    return n;
}

static const char *const FIELDS[] = {"a", "data", "kernel", "", NULL};
#define LIM_DEPTH 4
#define LIM_VALUES 40

/* 1 if the top level is an object with a name outside FIELDS. */
static int unknown_field(const json_t *t)
{
    const char *key;
    json_t *v;
    if (!json_is_object(t))
        return 0;
    json_object_foreach((json_t *)t, key, v) {
        int known = 0;
        for (int k = 0; FIELDS[k] != NULL; k++)
            known |= strcmp(key, FIELDS[k]) == 0;
        if (!known)
            return 1;
    }
    return 0;
}

/* The parse within limits against the one without (a, ea) and jansson's
 * tree b. */
static void check_limits(const uint8_t *data, size_t size, const json_t *a, const json_error_t *ea,
                         const json_t *b)
{
    svc_json_limits lim = {.max_depth = LIM_DEPTH, .max_values = LIM_VALUES, .fields = FIELDS};
    json_error_t el;
    svc_json_over over;
    json_t *l = svc_json_parse_limits((const char *)data, size, &lim, &el, &over);
    if (l != NULL) {
        check(over == SVC_JSON_WITHIN, "a tree, yet a limit reported");
        check(a != NULL && same(l, b), "within limits, not the tree of the plain parse");
        check(depth_of(l) <= LIM_DEPTH && values_of(l) <= LIM_VALUES && !unknown_field(l),
              "a tree past the limits");
    } else if (over == SVC_JSON_WITHIN) {
        check(a == NULL && strcmp(el.text, ea->text) == 0 && el.position == ea->position &&
              el.line == ea->line && el.column == ea->column,
              "refused within limits, unlike the plain parse");
    } else {
        check(el.position >= 0 && (size_t)el.position < size, "a limit reported outside the text");
        if (a != NULL)
            check(over == SVC_JSON_OVER_DEPTH    ? depth_of(a) > LIM_DEPTH
                  : over == SVC_JSON_OVER_VALUES ? values_of(a) > LIM_VALUES
                                                 : unknown_field(a),
                  "refused for a limit the document keeps");
        if (over == SVC_JSON_OVER_FIELD) {
            int known = 0;
            for (int k = 0; FIELDS[k] != NULL; k++)
                known |= strcmp(el.source, FIELDS[k]) == 0;
            check(!known || strlen(el.source) >= 57, "a known name reported unknown");
        }
    }
    json_decref(l);
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
    check_limits(data, size, a, &ea, b);
    json_decref(a);
    json_decref(b);
    return 0;
}
