/* task_spec.c — decoding of a run request's "task" (task_spec.h). Type
 * errors answer 400, values the contract refuses 422, each naming its
 * field the way the tenant wrote it. */
#include "task_spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_util.h"

/* Bytes of a blob or input at most (1 TiB): the engine mounts it, so the
 * node never holds it; the bound only keeps arithmetic in range. */
#define CN_TASK_BYTES_MAX ((int64_t)1 << 40)

/* Sets status and err; always -1. */
static int bad(int *status, int code, kl_err *err, const char *field, const char *msg)
{
    *status = code;
    kl_err_set(err, field, "%s", msg);
    return -1;
}

static char *dup_str(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* A JSON string without an embedded NUL; NULL otherwise. */
static const char *plain_string(const json_t *v, size_t *len)
{
    if (!json_is_string(v))
        return NULL;
    const char *s = json_string_value(v);
    *len = json_string_length(v);
    return strlen(s) == *len ? s : NULL;
}

static int decode_command(const json_t *cmd, cn_task_spec *s, int *status, kl_err *err)
{
    size_t i, total = 0, len;
    const json_t *v;
    if (!json_is_array(cmd))
        return bad(status, 400, err, "task.command", "task.command must be an array of strings");
    if (json_array_size(cmd) == 0 || json_array_size(cmd) > SVC_TASK_ARGS_MAX)
        return bad(status, 422, err, "task.command",
                   "task.command must have 1 to 256 entries");
    if (!(s->argv = calloc(json_array_size(cmd) + 1, sizeof *s->argv)))
        return bad(status, 422, err, "task.command", "out of memory");
    json_array_foreach(cmd, i, v) {
        const char *a = plain_string(v, &len);
        if (!a)
            return bad(status, 400, err, "task.command",
                       "task.command must be an array of strings without NUL characters");
        total += len;
        if (len > SVC_TASK_ARG_MAX || total > SVC_TASK_CMD_MAX)
            return bad(status, 422, err, "task.command",
                       "task.command is too long (32 KiB an entry, 128 KiB in all)");
        if (i == 0 && len == 0)
            return bad(status, 422, err, "task.command", "task.command[0] must not be empty");
        if (!(s->argv[i] = dup_str(a, len)))
            return bad(status, 422, err, "task.command", "out of memory");
        s->argc++;
    }
    return 0;
}

static int decode_env(const json_t *env, cn_task_spec *s, int *status, kl_err *err)
{
    const char *name;
    const json_t *v;
    char why[200], field[200];
    size_t len;
    if (!env || json_is_null(env))
        return 0;
    if (!json_is_object(env))
        return bad(status, 400, err, "task.env", "task.env must be an object of strings");
    if (json_object_size(env) > SVC_TASK_ENV_MAX)
        return bad(status, 422, err, "task.env", "task.env has more than 128 variables");
    if (!(s->env = calloc(json_object_size(env) + 1, sizeof *s->env)))
        return bad(status, 422, err, "task.env", "out of memory");
    json_object_foreach((json_t *)env, name, v) {
        snprintf(field, sizeof field, "task.env.%.128s", name);
        if (svc_task_env_name_check(name, why, sizeof why) < 0)
            return bad(status, 422, err, field, why);
        const char *val = plain_string(v, &len);
        if (!val)
            return bad(status, 400, err, field, "an env value must be a string without NUL");
        if (len > SVC_TASK_ENV_VALUE_MAX)
            return bad(status, 422, err, field, "an env value is at most 32 KiB");
        size_t n = strlen(name);
        char *kv = malloc(n + 1 + len + 1);
        if (!kv)
            return bad(status, 422, err, field, "out of memory");
        memcpy(kv, name, n);
        kv[n] = '=';
        memcpy(kv + n + 1, val, len + 1);
        s->env[s->nenv++] = kv;
    }
    return 0;
}

/* "b64" (or "text") into *data; 0, or -1 with status and err. */
static int decode_inline(const json_t *o, const char *field, unsigned char **data, size_t *size,
                         int *status, kl_err *err)
{
    size_t len;
    const json_t *t = json_object_get(o, "text"), *b = json_object_get(o, "b64");
    if (t) {
        const char *txt = plain_string(t, &len);
        if (!txt)
            return bad(status, 400, err, field, "text must be a string");
        if (!(*data = (unsigned char *)dup_str(txt, len)))
            return bad(status, 422, err, field, "out of memory");
        *size = len;
        return 0;
    }
    if (!json_is_string(b))
        return bad(status, 400, err, field, "b64 must be a string");
    if (svc_b64_decode(json_string_value(b), json_string_length(b), data, size) < 0)
        return bad(status, 422, err, field, "b64 is not valid base64");
    return 0;
}

/* "blob" and "size": 0, or -1 with status and err. */
static int decode_blob(const json_t *o, const char *field, char blob[CN_TASK_BLOB_ID],
                       uint64_t *size, int *status, kl_err *err)
{
    const json_t *b = json_object_get(o, "blob"), *sz = json_object_get(o, "size");
    const char *id = json_string_value(b);
    if (!id || strlen(id) != 71 || strncmp(id, "sha256:", 7) != 0 ||
        strspn(id + 7, "0123456789abcdef") != 64)
        return bad(status, 422, err, field, "blob must be \"sha256:\" and 64 lowercase hex digits");
    if (!json_is_integer(sz) || json_integer_value(sz) < 0 ||
        json_integer_value(sz) > CN_TASK_BYTES_MAX)
        return bad(status, 400, err, field, "a blob reference needs its size in bytes");
    snprintf(blob, CN_TASK_BLOB_ID, "%s", id);
    *size = (uint64_t)json_integer_value(sz);
    return 0;
}

static int decode_files(const json_t *files, cn_task_spec *s, int *status, kl_err *err)
{
    const char *path;
    const json_t *v;
    char why[400], field[300];
    size_t inline_total = 0;
    if (!files || json_is_null(files))
        return 0;
    if (!json_is_object(files))
        return bad(status, 400, err, "task.files", "task.files must be an object");
    if (json_object_size(files) > SVC_TASK_FILES_MAX)
        return bad(status, 422, err, "task.files", "task.files has more than 64 files");
    if (!(s->files = calloc(json_object_size(files) + 1, sizeof *s->files)))
        return bad(status, 422, err, "task.files", "out of memory");
    json_object_foreach((json_t *)files, path, v) {
        snprintf(field, sizeof field, "task.files.%.255s", path);
        if (svc_task_path_check(path, why, sizeof why) < 0)
            return bad(status, 422, err, field, why);
        if (!json_is_object(v))
            return bad(status, 400, err, field, "a file must be an object: text, b64 or blob");
        cn_task_file *f = &s->files[s->nfiles++];
        snprintf(f->path, sizeof f->path, "%s", path);
        /* one file may not be the directory of another: "a" and "a/b" */
        for (int k = 0; k < s->nfiles - 1; k++) {
            const char *a = s->files[k].path, *b = f->path;
            size_t la = strlen(a), lb = strlen(b);
            if ((la < lb && strncmp(a, b, la) == 0 && b[la] == '/') ||
                (lb < la && strncmp(a, b, lb) == 0 && a[lb] == '/'))
                return bad(status, 422, err, field, "a file path is the directory of another");
        }
        if (json_object_get(v, "blob")) {
            uint64_t size;
            if (decode_blob(v, field, f->blob, &size, status, err) < 0)
                return -1;
            f->size = (size_t)size;
        } else {
            if (decode_inline(v, field, &f->data, &f->size, status, err) < 0)
                return -1;
            inline_total += f->size;
            if (inline_total > SVC_TASK_INLINE_MAX)
                return bad(status, 422, err, field, "inline files are at most 1 MiB in all");
        }
    }
    return 0;
}

static int decode_input(const char *name, const json_t *v, cn_task_input *in, int *status,
                        kl_err *err)
{
    char field[128], why[200];
    snprintf(field, sizeof field, "task.inputs.%.64s", name);
    if (svc_task_input_name_check(name, why, sizeof why) < 0)
        return bad(status, 422, err, field, why);
    if (!json_is_object(v))
        return bad(status, 400, err, field, "an input must be an object");
    snprintf(in->name, sizeof in->name, "%s", name);
    const json_t *dt = json_object_get(v, "dtype"), *fmt = json_object_get(v, "format");
    size_t esize = 0;
    if (dt && !json_is_null(dt)) {
        if (!json_is_string(dt) || !(esize = svc_task_dtype_size(json_string_value(dt))))
            return bad(status, 422, err, field, "dtype must be one of bool, int8, int16, int32, "
                                                "int64, uint8, uint16, uint32, uint64, float16, "
                                                "float32, float64");
        snprintf(in->dtype, sizeof in->dtype, "%s", json_string_value(dt));
        const json_t *sh = json_object_get(v, "shape");
        size_t i;
        const json_t *d;
        if (!json_is_array(sh) || json_array_size(sh) > 8)
            return bad(status, 400, err, field, "shape must be an array of at most 8 sizes");
        json_array_foreach(sh, i, d) {
            if (!json_is_integer(d) || json_integer_value(d) < 0 ||
                json_integer_value(d) > CN_TASK_BYTES_MAX)
                return bad(status, 400, err, field, "shape must hold sizes >= 0");
            in->shape[in->ndim++] = json_integer_value(d);
        }
    }
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "raw") != 0 && strcmp(f, "npy") != 0))
            return bad(status, 422, err, field, "format must be raw or npy");
        in->npy = strcmp(f, "npy") == 0;
        if (in->npy && !in->dtype[0])
            return bad(status, 422, err, field, "format npy needs a dtype and a shape");
    }
    if (json_object_get(v, "blob")) {
        if (decode_blob(v, field, in->blob, &in->size, status, err) < 0)
            return -1;
    } else {
        size_t n = 0;
        if (decode_inline(v, field, &in->data, &n, status, err) < 0)
            return -1;
        in->size = n;
    }
    if (in->dtype[0]) {
        /* the bytes must be exactly what the shape says */
        int64_t elems = 1;
        for (int d = 0; d < in->ndim; d++) {
            if (in->shape[d] != 0 && elems > CN_TASK_BYTES_MAX / in->shape[d])
                return bad(status, 422, err, field, "shape is too large");
            elems *= in->shape[d];
        }
        if ((uint64_t)elems * esize != in->size) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s has %llu bytes but its shape of %s needs %llu", field,
                     (unsigned long long)in->size, in->dtype,
                     (unsigned long long)((uint64_t)elems * esize));
            return bad(status, 422, err, field, msg);
        }
    }
    return 0;
}

static int decode_inputs(const json_t *inputs, cn_task_spec *s, int *status, kl_err *err)
{
    const char *name;
    const json_t *v;
    if (!inputs || json_is_null(inputs))
        return 0;
    if (!json_is_object(inputs))
        return bad(status, 400, err, "task.inputs", "task.inputs must be an object");
    if (json_object_size(inputs) > SVC_TASK_INPUTS_MAX)
        return bad(status, 422, err, "task.inputs", "task.inputs has more than 64 inputs");
    if (!(s->inputs = calloc(json_object_size(inputs) + 1, sizeof *s->inputs)))
        return bad(status, 422, err, "task.inputs", "out of memory");
    json_object_foreach((json_t *)inputs, name, v) {
        if (decode_input(name, v, &s->inputs[s->ninputs++], status, err) < 0)
            return -1;
        /* two inputs may not share KOWLOON_INPUT_<NAME> ("x.y", "X_Y") nor
         * a path in /kowloon/in ("x" asked as npy is "x.npy") */
        const cn_task_input *in = &s->inputs[s->ninputs - 1];
        char mine[SVC_TASK_INPUT_NAME_MAX + 1], other[SVC_TASK_INPUT_NAME_MAX + 1];
        char mpath[SVC_TASK_INPUT_NAME_MAX + 8], opath[SVC_TASK_INPUT_NAME_MAX + 8];
        svc_task_input_env_name(in->name, mine, sizeof mine);
        snprintf(mpath, sizeof mpath, "%s%s", in->name, in->npy ? ".npy" : "");
        for (int k = 0; k < s->ninputs - 1; k++) {
            svc_task_input_env_name(s->inputs[k].name, other, sizeof other);
            snprintf(opath, sizeof opath, "%s%s", s->inputs[k].name,
                     s->inputs[k].npy ? ".npy" : "");
            if (strcmp(mine, other) == 0 || strcmp(mpath, opath) == 0) {
                char field[128];
                snprintf(field, sizeof field, "task.inputs.%.64s", name);
                return bad(status, 422, err, field, "two inputs would share a path in /kowloon/in "
                                                    "or a KOWLOON_INPUT_ variable");
            }
        }
    }
    return 0;
}

/* One optional limit: an integer in [lo, hi], or (cpus) a number. */
static int decode_limit(const json_t *lim, const char *name, int64_t lo, int64_t hi, int64_t *out,
                        int *status, kl_err *err)
{
    char field[64], msg[160];
    const json_t *v = json_object_get(lim, name);
    snprintf(field, sizeof field, "task.limits.%s", name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return bad(status, 400, err, field, "a limit must be an integer");
    if (json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(msg, sizeof msg, "%s must be between %lld and %lld", field, (long long)lo,
                 (long long)hi);
        return bad(status, 422, err, field, msg);
    }
    *out = json_integer_value(v);
    return 0;
}

static int decode_limits(const json_t *lim, cn_task_spec *s, int *status, kl_err *err)
{
    if (!lim || json_is_null(lim))
        return 0;
    if (!json_is_object(lim))
        return bad(status, 400, err, "task.limits", "task.limits must be an object");
    cn_task_limits *l = &s->limits;
    if (decode_limit(lim, "memory_bytes", 16 << 20, CN_TASK_BYTES_MAX, &l->memory_bytes, status,
                     err) < 0 ||
        decode_limit(lim, "pids", 16, 1 << 22, &l->pids, status, err) < 0 ||
        decode_limit(lim, "output_bytes", 0, CN_TASK_BYTES_MAX, &l->output_bytes, status, err) < 0 ||
        decode_limit(lim, "log_bytes", 4096, CN_TASK_BYTES_MAX, &l->log_bytes, status, err) < 0)
        return -1;
    const json_t *c = json_object_get(lim, "cpus");
    if (c && !json_is_null(c)) {
        if (!json_is_number(c))
            return bad(status, 400, err, "task.limits.cpus", "task.limits.cpus must be a number");
        double v = json_number_value(c);
        if (!isfinite(v) || v < 0.01 || v > 1024)
            return bad(status, 422, err, "task.limits.cpus",
                       "task.limits.cpus must be between 0.01 and 1024");
        l->cpus = v;
    }
    return 0;
}

int cn_task_spec_decode(const json_t *j, cn_task_spec *out, int *status, kl_err *err)
{
    char why[400];
    int rc = -1;

    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) {
        bad(status, 400, err, "task", "task must be an object");
        goto cleanup;
    }
    const json_t *img = json_object_get(j, "image");
    if (!json_is_string(img)) {
        bad(status, 400, err, "task.image", "task.image must be a string");
        goto cleanup;
    }
    if (svc_task_image_check(json_string_value(img), why, sizeof why) < 0) {
        bad(status, 422, err, "task.image", why);
        goto cleanup;
    }
    snprintf(out->image, sizeof out->image, "%s", json_string_value(img));
    const json_t *wd = json_object_get(j, "workdir");
    snprintf(out->workdir, sizeof out->workdir, "/kowloon/work");
    if (wd && !json_is_null(wd)) {
        if (!json_is_string(wd)) {
            bad(status, 400, err, "task.workdir", "task.workdir must be a string");
            goto cleanup;
        }
        if (svc_task_workdir_check(json_string_value(wd), why, sizeof why) < 0) {
            bad(status, 422, err, "task.workdir", why);
            goto cleanup;
        }
        snprintf(out->workdir, sizeof out->workdir, "%s", json_string_value(wd));
    }
    const json_t *net = json_object_get(j, "network");
    if (net && !json_is_null(net)) {
        const char *n = json_string_value(net);
        if (n && strcmp(n, "none") == 0)
            out->network = CN_TASK_NET_NONE;
        else if (n && strcmp(n, "egress") == 0)
            out->network = CN_TASK_NET_EGRESS;
        else if (n && strcmp(n, "peers") == 0)
            out->network = CN_TASK_NET_PEERS;
        else {
            bad(status, 422, err, "task.network", "task.network must be none, egress or peers");
            goto cleanup;
        }
    }
    if (decode_command(json_object_get(j, "command"), out, status, err) < 0 ||
        decode_env(json_object_get(j, "env"), out, status, err) < 0 ||
        decode_files(json_object_get(j, "files"), out, status, err) < 0 ||
        decode_inputs(json_object_get(j, "inputs"), out, status, err) < 0 ||
        decode_limits(json_object_get(j, "limits"), out, status, err) < 0)
        goto cleanup;
    rc = 0;
cleanup:
    if (rc < 0)
        cn_task_spec_free(out);
    return rc;
}

void cn_task_spec_free(cn_task_spec *s)
{
    if (!s)
        return;
    for (int i = 0; s->argv && s->argv[i]; i++)
        free(s->argv[i]);
    free(s->argv);
    for (int i = 0; i < s->nenv; i++)
        free(s->env[i]);
    free(s->env);
    for (int i = 0; i < s->nfiles; i++)
        free(s->files[i].data);
    free(s->files);
    for (int i = 0; i < s->ninputs; i++)
        free(s->inputs[i].data);
    free(s->inputs);
    memset(s, 0, sizeof *s);
}
