/* task.c — a task request checked and put in the forms the job keeps
 * (task.h). Every refusal names its field; the names themselves are
 * svc_task.h's to judge, so the gateway refuses exactly what a node
 * would. */
#include "gw_task.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_json.h"
#include "svc_sha256.h"
#include "svc_util.h"

#define TASK_DIMS 8            /* most dimensions of an input's shape */
#define TASK_ELEMS_MAX ((int64_t)1 << 40)

uint32_t gw_task_image_key(const char *image)
{
    uint32_t h = svc_fnv1a(image ? image : "");
    return h ? h : 1;
}

static int known_member(const char *k, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(k, names[i]) == 0)
            return 1;
    return 0;
}

/* Refuses (400) a member of o that is not one of names; prefix names o. */
static int members_check(const json_t *o, const char *prefix, const char *const *names,
                         gw_verr *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        if (!known_member(k, names)) {
            char field[160];
            snprintf(field, sizeof field, "%s.%.100s", prefix, k);
            return gw_verr_set(e, 400, field, "%s is not a member of %s", field, prefix);
        }
    }
    return 0;
}

static int command_parse(const json_t *cmd, gw_verr *e)
{
    if (!json_is_array(cmd))
        return gw_verr_set(e, cmd ? 400 : 422, "task.command",
                    "task.command must be a list of strings (the program and its arguments)");
    size_t n = json_array_size(cmd), total = 0, i;
    if (n == 0 || n > SVC_TASK_ARGS_MAX)
        return gw_verr_set(e, 422, "task.command", "task.command must have 1 to %d entries",
                    SVC_TASK_ARGS_MAX);
    json_t *a;
    json_array_foreach(cmd, i, a) {
        if (!json_is_string(a))
            return gw_verr_set(e, 400, "task.command", "task.command[%zu] must be a string", i);
        size_t len = json_string_length(a);
        if (len != strlen(json_string_value(a)))
            return gw_verr_set(e, 422, "task.command", "task.command[%zu] holds a NUL character", i);
        if (i == 0 && len == 0)
            return gw_verr_set(e, 422, "task.command", "task.command[0], the program, must not be empty");
        if (len > SVC_TASK_ARG_MAX)
            return gw_verr_set(e, 422, "task.command", "task.command[%zu] is over %d bytes", i,
                        SVC_TASK_ARG_MAX);
        total += len;
    }
    if (total > SVC_TASK_CMD_MAX)
        return gw_verr_set(e, 422, "task.command", "task.command is over %d bytes in all",
                    SVC_TASK_CMD_MAX);
    return 0;
}

static int env_parse(const json_t *env, gw_verr *e)
{
    if (!env)
        return 0;
    if (!json_is_object(env))
        return gw_verr_set(e, 400, "task.env", "task.env must be an object of strings");
    if (json_object_size(env) > SVC_TASK_ENV_MAX)
        return gw_verr_set(e, 422, "task.env", "task.env may set at most %d variables", SVC_TASK_ENV_MAX);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)env, k, v) {
        char field[160], why[200];
        snprintf(field, sizeof field, "task.env.%.128s", k);
        if (svc_task_env_name_check(k, why, sizeof why) != 0)
            return gw_verr_set(e, 422, field, "%s: %s", field, why);
        if (!json_is_string(v))
            return gw_verr_set(e, 400, field, "%s must be a string", field);
        if (json_string_length(v) != strlen(json_string_value(v)) ||
            json_string_length(v) > SVC_TASK_ENV_VALUE_MAX)
            return gw_verr_set(e, 422, field, "%s must be at most %d bytes, without NUL", field,
                        SVC_TASK_ENV_VALUE_MAX);
    }
    return 0;
}

/* j as plain jansson values: a compact array of numbers (svc_json.h, how
 * a request body holds a flat list of numbers) becomes an array of
 * integers and reals; anything else is j itself. New reference, NULL on
 * ENOMEM or a compact array that does not read. */
static json_t *plain(const json_t *j)
{
    const char *text;
    size_t len, count, pos = 0;
    if (!svc_json_numbers(j, &text, &len, &count))
        return json_incref((json_t *)j);
    json_t *a = json_array();
    svc_json_num num;
    int rc;
    while (a && (rc = svc_json_numbers_next(text, len, &pos, &num)) == 1)
        if (json_array_append_new(a, num.is_int ? json_integer(num.i) : json_real(num.d)) != 0)
            rc = -1;
    if (a && rc != 0) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* The elements of shape (an array of non-negative integers); -1 when it
 * is not one. */
static int64_t shape_elems(const json_t *shape)
{
    if (!json_is_array(shape) || json_array_size(shape) > TASK_DIMS)
        return -1;
    int64_t n = 1;
    size_t i;
    json_t *d;
    json_array_foreach(shape, i, d) {
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return -1;
        int64_t x = json_integer_value(d);
        if (x > 0 && n > TASK_ELEMS_MAX / x)
            return -1;
        n *= x;
    }
    return n;
}

/* IEEE half of a float, rounded to nearest even. */
static uint16_t half_of(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffffu;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = mant >> shift, rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

/* Writes number v as one element of dtype at out; -1 when v is not a
 * value of that dtype (a fraction for an integer, out of range, not a
 * number). */
static int element_put(const json_t *v, const char *dtype, unsigned char *out)
{
    if (strcmp(dtype, "bool") == 0) {
        if (!json_is_boolean(v) && !(json_is_integer(v) && (json_integer_value(v) & ~1) == 0))
            return -1;
        out[0] = json_is_true(v) || (json_is_integer(v) && json_integer_value(v) == 1);
        return 0;
    }
    if (dtype[0] == 'f') {
        if (!json_is_number(v))
            return -1;
        double d = json_number_value(v);
        if (strcmp(dtype, "float64") == 0) {
            memcpy(out, &d, 8);
        } else if (strcmp(dtype, "float32") == 0) {
            float f = (float)d;
            memcpy(out, &f, 4);
        } else {
            uint16_t h = half_of((float)d);
            memcpy(out, &h, 2);
        }
        return 0;
    }
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    int bits = atoi(dtype + (dtype[0] == 'u' ? 4 : 3));
    int is_unsigned = dtype[0] == 'u';
    if (is_unsigned && x < 0)
        return -1;
    if (bits < 64) {
        long long lo = is_unsigned ? 0 : -(1LL << (bits - 1));
        long long hi = is_unsigned ? (1LL << bits) - 1 : (1LL << (bits - 1)) - 1;
        if (x < lo || x > hi)
            return -1;
    }
    uint64_t u = (uint64_t)x;
    for (int b = 0; b < bits / 8; b++)     /* little-endian, as the node and NumPy read it */
        out[b] = (unsigned char)(u >> (8 * b));
    return 0;
}

/* Appends the elements of data (a number or nested lists of them) to
 * buf; -1 on a value that is not of dtype or more elements than cap. */
static int data_flatten(const json_t *data, const char *dtype, size_t esize, unsigned char *buf,
                        size_t cap, size_t *n, int depth)
{
    if (json_is_array(data)) {
        if (depth > TASK_DIMS)
            return -1;
        json_t *arr = plain(data);
        size_t i;
        json_t *x;
        int rc = arr ? 0 : -1;
        json_array_foreach(arr, i, x)
            if (rc == 0 && data_flatten(x, dtype, esize, buf, cap, n, depth + 1) != 0)
                rc = -1;
        json_decref(arr);
        return rc;
    }
    if (*n >= cap || element_put(data, dtype, buf + *n * esize) != 0)
        return -1;
    (*n)++;
    return 0;
}

static int input_check(const char *name, const char *field, const json_t *in, const json_t *jd,
                       const json_t *js, json_t *run_inputs, gw_task_req *t, gw_verr *e);

/* One input: its lease entry into run_inputs, and what the caller must do
 * (a blob to check, inline bytes to store). */
static int input_parse(const char *name, const json_t *in, json_t *run_inputs, gw_task_req *t,
                       gw_verr *e)
{
    static const char *const members[] = {"dtype", "shape", "data", "b64", "blob", "format", NULL};
    char field[160], why[200];
    snprintf(field, sizeof field, "task.inputs.%.64s", name);
    if (svc_task_input_name_check(name, why, sizeof why) != 0)
        return gw_verr_set(e, 422, field, "%s: %s", field, why);
    if (!json_is_object(in))
        return gw_verr_set(e, 400, field, "%s must be an object: {dtype, shape, data|b64|blob, format}",
                    field);
    if (members_check(in, field, members, e) != 0)
        return -1;
    const json_t *jd = json_object_get(in, "dtype");
    json_t *js = json_object_get(in, "shape") ? plain(json_object_get(in, "shape")) : NULL;
    int rc = input_check(name, field, in, jd, js, run_inputs, t, e);
    json_decref(js);
    return rc;
}

/* An input's form: its dtype (NULL: plain bytes), element size, element
 * count (-1 without a shape) and byte size (-1 without a dtype), checked
 * for fitting together before anything is built. */
typedef struct input_form {
    const char *dtype, *format;
    size_t esize;
    int64_t elems, want;
} input_form;

static int input_form_check(const char *field, const json_t *in, const json_t *jd,
                            const json_t *js, input_form *f, gw_verr *e)
{
    const json_t *jdata = json_object_get(in, "data"), *jb64 = json_object_get(in, "b64");
    const json_t *jblob = json_object_get(in, "blob"), *jf = json_object_get(in, "format");
    f->dtype = json_string_value(jd);
    f->format = jf ? json_string_value(jf) : "raw";
    if ((jd && !f->dtype) || (jf && !f->format))
        return gw_verr_set(e, 400, field, "%s: dtype and format must be strings", field);
    if (strcmp(f->format, "raw") != 0 && strcmp(f->format, "npy") != 0)
        return gw_verr_set(e, 422, field, "%s.format must be raw or npy", field);
    f->esize = f->dtype ? svc_task_dtype_size(f->dtype) : 0;
    if (f->dtype && f->esize == 0)
        return gw_verr_set(e, 422, field, "%s.dtype %.32s is not one of bool, int8, int16, int32, "
                    "int64, uint8, uint16, uint32, uint64, float16, float32, float64", field,
                    f->dtype);
    if ((f->dtype != NULL) != (js != NULL))
        return gw_verr_set(e, 422, field, "%s: dtype and shape go together (neither: plain bytes)", field);
    if (!f->dtype && strcmp(f->format, "npy") == 0)
        return gw_verr_set(e, 422, field, "%s: format npy needs a dtype and a shape", field);
    f->elems = js ? shape_elems(js) : -1;
    if (js && f->elems < 0)
        return gw_verr_set(e, 422, field, "%s.shape must be a list of at most %d non-negative integers",
                    field, TASK_DIMS);
    if ((jdata != NULL) + (jb64 != NULL) + (jblob != NULL) != 1)
        return gw_verr_set(e, 422, field, "%s needs exactly one of data, b64 or blob", field);
    if (jdata && !f->dtype)
        return gw_verr_set(e, 422, field, "%s: data needs a dtype and a shape", field);
    f->want = f->dtype ? f->elems * (int64_t)f->esize : -1;
    return 0;
}

/* An input given by blob: recorded in t->blobs, its size checked later. */
static int input_blob(const char *field, const json_t *jblob, const input_form *f,
                      json_t *entry, gw_task_req *t, gw_verr *e)
{
    const char *id = json_string_value(jblob);
    if (!id || !svc_blob_id_valid(id))
        return gw_verr_set(e, 422, field, "%s.blob must be a blob id (sha256:<64 hex digits>)", field);
    json_object_set_new(entry, "blob", json_string(id));
    gw_task_blob *b = &t->blobs[t->nblobs++];
    snprintf(b->field, sizeof b->field, "%s", field);
    snprintf(b->id, sizeof b->id, "%s", id);
    b->size = f->want;
    b->entry = entry;
    return 0;
}

/* An inline input's bytes (from b64, or data flattened to the dtype), in
 * *bytes (malloc'd) and *len. */
static int input_bytes(const char *field, const json_t *in, const input_form *f,
                       unsigned char **bytes, size_t *len, gw_verr *e)
{
    const json_t *jb64 = json_object_get(in, "b64"), *jdata = json_object_get(in, "data");
    if (jb64) {
        const char *s = json_string_value(jb64);
        if (!s || svc_b64_decode(s, json_string_length(jb64), bytes, len) != 0)
            return gw_verr_set(e, 422, field, "%s.b64 is not base64", field);
        if (f->want >= 0 && (int64_t)*len != f->want) {
            free(*bytes);
            *bytes = NULL;
            return gw_verr_set(e, 422, field, "%s.b64 holds %zu bytes; dtype %s and its shape need %lld",
                        field, *len, f->dtype, (long long)f->want);
        }
        return 0;
    }
    if ((uint64_t)f->want > (uint64_t)SVC_TASK_INLINE_MAX * 64)
        return gw_verr_set(e, 422, field, "%s.data is too large to send as JSON; upload it as a blob",
                    field);
    *bytes = malloc(f->want ? (size_t)f->want : 1);
    size_t n = 0;
    if (!*bytes)
        return gw_verr_set(e, 500, field, "out of memory");
    if (data_flatten(jdata, f->dtype, f->esize, *bytes, (size_t)f->elems, &n, 0) != 0 ||
        (int64_t)n != f->elems) {
        free(*bytes);
        *bytes = NULL;
        return gw_verr_set(e, 422, field, "%s.data must hold %lld values of %s (its shape), nested "
                    "or flat", field, (long long)f->elems, f->dtype);
    }
    *len = (size_t)f->want;
    return 0;
}

/* input_parse's body, with shape (js) as plain values. */
static int input_check(const char *name, const char *field, const json_t *in, const json_t *jd,
                       const json_t *js, json_t *run_inputs, gw_task_req *t, gw_verr *e)
{
    input_form f = {0};
    if (input_form_check(field, in, jd, js, &f, e) != 0)
        return -1;
    json_t *entry = json_object();
    if (!entry || json_object_set_new(run_inputs, name, entry) != 0)
        return gw_verr_set(e, 500, field, "out of memory");
    if (f.dtype) {
        json_object_set_new(entry, "dtype", json_string(f.dtype));
        json_object_set(entry, "shape", (json_t *)js);
    }
    json_object_set_new(entry, "format", json_string(f.format));
    const json_t *jblob = json_object_get(in, "blob");
    if (jblob)
        return input_blob(field, jblob, &f, entry, t, e);
    unsigned char *bytes = NULL;
    size_t len = 0;
    if (input_bytes(field, in, &f, &bytes, &len, e) != 0)
        return -1;
    if (len > GW_TASK_INLINE_INPUT_MAX) {
        gw_task_big *b = &t->big[t->nbig++];
        snprintf(b->field, sizeof b->field, "%s", field);
        b->data = bytes;
        b->len = len;
        b->entry = entry;
        return 0;
    }
    char *b64 = svc_b64_encode(bytes, len);
    free(bytes);
    if (!b64)
        return gw_verr_set(e, 500, field, "out of memory");
    json_object_set_new(entry, "b64", json_string(b64));
    free(b64);
    return 0;
}

/* Two inputs may not meet in one KOWLOON_INPUT_<NAME> variable nor one
 * path under /kowloon/in (contract section 1). */
static int inputs_distinct(const json_t *inputs, gw_verr *e)
{
    const char *a, *b;
    json_t *va, *vb;
    json_object_foreach((json_t *)inputs, a, va) {
        char ea[SVC_TASK_INPUT_NAME_MAX + 8], pa[SVC_TASK_INPUT_NAME_MAX + 8];
        const char *fa = json_string_value(json_object_get(va, "format"));
        svc_task_input_env_name(a, ea, sizeof ea);
        snprintf(pa, sizeof pa, "%s%s", a, fa && strcmp(fa, "npy") == 0 ? ".npy" : "");
        json_object_foreach((json_t *)inputs, b, vb) {
            if (strcmp(a, b) >= 0)
                continue;
            char eb[SVC_TASK_INPUT_NAME_MAX + 8], pb[SVC_TASK_INPUT_NAME_MAX + 8];
            const char *fb = json_string_value(json_object_get(vb, "format"));
            svc_task_input_env_name(b, eb, sizeof eb);
            snprintf(pb, sizeof pb, "%s%s", b, fb && strcmp(fb, "npy") == 0 ? ".npy" : "");
            if (strcmp(ea, eb) == 0 || strcmp(pa, pb) == 0) {
                char field[160];
                snprintf(field, sizeof field, "task.inputs.%.64s", b);
                return gw_verr_set(e, 422, field, "inputs %s and %s would share %s", a, b,
                            strcmp(pa, pb) == 0 ? "a path under /kowloon/in" : "a KOWLOON_INPUT_ variable");
            }
        }
    }
    return 0;
}

static int inputs_parse(const json_t *inputs, json_t *run, gw_task_req *t, gw_verr *e)
{
    if (!inputs)
        return 0;
    if (!json_is_object(inputs))
        return gw_verr_set(e, 400, "task.inputs", "task.inputs must be an object of named inputs");
    if (json_object_size(inputs) > SVC_TASK_INPUTS_MAX)
        return gw_verr_set(e, 422, "task.inputs", "task.inputs may hold at most %d inputs",
                    SVC_TASK_INPUTS_MAX);
    json_t *out = json_object();
    if (!out || json_object_set_new(run, "inputs", out) != 0)
        return gw_verr_set(e, 500, "task.inputs", "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)inputs, k, v)
        if (input_parse(k, v, out, t, e) != 0)
            return -1;
    return inputs_distinct(out, e);
}

static int files_parse(const json_t *files, json_t *run, gw_task_req *t, gw_verr *e)
{
    static const char *const members[] = {"text", "b64", "blob", NULL};
    if (!files)
        return 0;
    if (!json_is_object(files))
        return gw_verr_set(e, 400, "task.files", "task.files must be an object of path: {text|b64|blob}");
    if (json_object_size(files) > SVC_TASK_FILES_MAX)
        return gw_verr_set(e, 422, "task.files", "task.files may hold at most %d files",
                    SVC_TASK_FILES_MAX);
    json_t *out = json_object();
    if (!out || json_object_set_new(run, "files", out) != 0)
        return gw_verr_set(e, 500, "task.files", "out of memory");
    size_t inline_bytes = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)files, k, v) {
        char field[160], why[200];
        snprintf(field, sizeof field, "task.files.%.128s", k);
        if (svc_task_path_check(k, why, sizeof why) != 0)
            return gw_verr_set(e, 422, field, "%s: %s", field, why);
        if (!json_is_object(v) || json_object_size(v) != 1)
            return gw_verr_set(e, 400, field, "%s must be one of {\"text\"}, {\"b64\"}, {\"blob\"}", field);
        if (members_check(v, field, members, e) != 0)
            return -1;
        const json_t *x;
        json_t *entry = json_object();
        if (!entry || json_object_set_new(out, k, entry) != 0)
            return gw_verr_set(e, 500, field, "out of memory");
        if ((x = json_object_get(v, "blob"))) {
            const char *id = json_string_value(x);
            if (!id || !svc_blob_id_valid(id))
                return gw_verr_set(e, 422, field, "%s.blob must be a blob id (sha256:<64 hex digits>)",
                            field);
            json_object_set_new(entry, "blob", json_string(id));
            gw_task_blob *b = &t->blobs[t->nblobs++];
            snprintf(b->field, sizeof b->field, "%s", field);
            snprintf(b->id, sizeof b->id, "%s", id);
            b->size = -1;
            b->entry = entry;
            continue;
        }
        size_t len;
        if ((x = json_object_get(v, "text"))) {
            if (!json_is_string(x))
                return gw_verr_set(e, 400, field, "%s.text must be a string", field);
            len = json_string_length(x);
            char *b64 = svc_b64_encode(json_string_value(x), len);
            if (!b64)
                return gw_verr_set(e, 500, field, "out of memory");
            json_object_set_new(entry, "b64", json_string(b64));
            free(b64);
        } else {
            x = json_object_get(v, "b64");
            const char *s = json_string_value(x);
            unsigned char *bytes = NULL;
            if (!s || svc_b64_decode(s, json_string_length(x), &bytes, &len) != 0)
                return gw_verr_set(e, 422, field, "%s.b64 is not base64", field);
            free(bytes);
            json_object_set(entry, "b64", (json_t *)x);
        }
        inline_bytes += len;
        if (inline_bytes > SVC_TASK_INLINE_MAX)
            return gw_verr_set(e, 422, "task.files", "task.files holds over %d bytes inline; send large "
                        "files as blobs ({\"blob\"})", SVC_TASK_INLINE_MAX);
    }
    /* a file may not also be the directory of another */
    const char *a, *b;
    json_t *va, *vb;
    json_object_foreach((json_t *)files, a, va) {
        size_t n = strlen(a);
        json_object_foreach((json_t *)files, b, vb) {
            if (strncmp(a, b, n) == 0 && b[n] == '/') {
                char field[160];
                snprintf(field, sizeof field, "task.files.%.128s", b);
                return gw_verr_set(e, 422, field, "%s: %s is a file, so it cannot be a folder too", field, a);
            }
        }
    }
    return 0;
}

static int limits_build(const json_t *task, const gw_task_limits *lim, json_t *run,
                        gw_verr *e)
{
    const json_t *q = json_object_get(task, "output_quota_mb");
    int64_t out_bytes = lim->max_output_bytes;
    if (q) {
        if (!json_is_integer(q))
            return gw_verr_set(e, 400, "task.output_quota_mb", "task.output_quota_mb must be an integer");
        json_int_t mb = json_integer_value(q);
        if (mb < 1 || (int64_t)mb > (lim->max_output_bytes >> 20))
            return gw_verr_set(e, 422, "task.output_quota_mb", "task.output_quota_mb must be 1 to %lld "
                        "(this gateway's --max-output-mb)", (long long)(lim->max_output_bytes >> 20));
        out_bytes = (int64_t)mb << 20;
    }
    json_t *l = json_pack("{s:I, s:I}", "output_bytes", (json_int_t)out_bytes, "log_bytes",
                          (json_int_t)lim->log_bytes);
    if (l && lim->memory_gb > 0)
        json_object_set_new(l, "memory_bytes", json_integer((json_int_t)llround(lim->memory_gb *
                                                                                1073741824.0)));
    if (l && lim->cpus > 0)
        json_object_set_new(l, "cpus", json_real(lim->cpus));
    if (!l || json_object_set_new(run, "limits", l) != 0)
        return gw_verr_set(e, 500, "task", "out of memory");
    return 0;
}

int gw_task_parse(const json_t *task, const gw_task_limits *lim, gw_task_req *t, gw_verr *e)
{
    static const char *const members[] = {"image", "command", "env", "workdir", "files",
                                          "inputs", "output_quota_mb", "network", NULL};
    memset(t, 0, sizeof *t);
    memset(e, 0, sizeof *e);
    char why[200];
    if (!json_is_object(task))
        return gw_verr_set(e, 400, "task", "task must be an object: {image, command, ...}");
    if (members_check(task, "task", members, e) != 0)
        return -1;
    const json_t *img = json_object_get(task, "image");
    if (!img)
        return gw_verr_set(e, 422, "task.image", "task.image is required (an OCI image reference)");
    if (!json_is_string(img))
        return gw_verr_set(e, 400, "task.image", "task.image must be a string");
    if (svc_task_image_check(json_string_value(img), why, sizeof why) != 0)
        return gw_verr_set(e, 422, "task.image", "task.image: %s", why);
    snprintf(t->image, sizeof t->image, "%s", json_string_value(img));
    const json_t *cmd = json_object_get(task, "command"), *env = json_object_get(task, "env");
    if (command_parse(cmd, e) != 0 || env_parse(env, e) != 0)
        return -1;
    const json_t *wd = json_object_get(task, "workdir");
    const char *workdir = "/kowloon/work";
    if (wd) {
        if (!json_is_string(wd))
            return gw_verr_set(e, 400, "task.workdir", "task.workdir must be a string");
        workdir = json_string_value(wd);
        if (svc_task_workdir_check(workdir, why, sizeof why) != 0)
            return gw_verr_set(e, 422, "task.workdir", "task.workdir: %s", why);
    }
    const json_t *net = json_object_get(task, "network");
    const char *network = "none";
    if (net) {
        network = json_string_value(net);
        if (!network || (strcmp(network, "none") != 0 && strcmp(network, "egress") != 0))
            return gw_verr_set(e, 422, "task.network", "task.network must be none or egress");
    }
    t->egress = strcmp(network, "egress") == 0;
    t->echo = json_pack("{s:s, s:O, s:o, s:s, s:s}", "image", t->image, "command", cmd, "env",
                        env ? json_deep_copy(env) : json_object(), "workdir", workdir, "network",
                        network);
    t->run = json_pack("{s:s, s:O, s:o, s:s, s:s}", "image", t->image, "command", cmd, "env",
                       env ? json_deep_copy(env) : json_object(), "workdir", workdir, "network",
                       network);
    if (!t->echo || !t->run)
        return gw_verr_set(e, 500, "task", "out of memory");
    if (files_parse(json_object_get(task, "files"), t->run, t, e) != 0 ||
        inputs_parse(json_object_get(task, "inputs"), t->run, t, e) != 0 ||
        limits_build(task, lim, t->run, e) != 0)
        return -1;
    return 0;
}

void gw_task_req_free(gw_task_req *t)
{
    if (!t)
        return;
    json_decref(t->echo);
    json_decref(t->run);
    for (int i = 0; i < t->nbig; i++)
        free(t->big[i].data);
    memset(t, 0, sizeof *t);
}

int gw_task_output_is_file(const json_t *m)
{
    return json_is_true(json_object_get(m, "file"));
}

int gw_task_outputs_meta(const json_t *outputs, json_t **meta, char *why, size_t whylen)
{
    *meta = NULL;
    if (outputs && !json_is_object(outputs)) {
        snprintf(why, whylen, "the report's outputs is not an object");
        return -1;
    }
    if (json_object_size(outputs) > GW_TASK_OUTPUTS_MAX) {
        snprintf(why, whylen, "the report has over %d outputs", GW_TASK_OUTPUTS_MAX);
        return -1;
    }
    json_t *list = json_array();
    const char *k;
    json_t *v;
    char w[200];
    json_object_foreach((json_t *)outputs, k, v) {
        const char *id = json_string_value(json_object_get(v, "blob"));
        const json_t *bytes = json_object_get(v, "bytes"), *npy = json_object_get(v, "npy");
        if (svc_task_path_check(k, w, sizeof w) != 0 || !id || !svc_blob_id_valid(id) ||
            !json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
            (npy && !json_is_object(npy))) {
            snprintf(why, whylen, "output %.200s: a task output is a relative path with {blob, "
                     "bytes} (a blob the node stored)", k);
            json_decref(list);
            return -1;
        }
        json_t *m = json_pack("{s:s, s:s, s:O, s:b}", "name", k, "blob", id, "nbytes", bytes,
                              "file", 1);
        if (m && npy)
            json_object_set(m, "npy", (json_t *)npy);
        if (!m || json_array_append_new(list, m) != 0) {
            snprintf(why, whylen, "out of memory");
            json_decref(list);
            return -1;
        }
    }
    *meta = list;
    return 0;
}
