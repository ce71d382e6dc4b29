/* task.c — the stand-alone checks of a task request (task.h). Envelope
 * mistakes (wrong types, unknown members) and refused values are both the
 * caller's to map to a status; every message names the field. */
#include "task.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(gw_task_err *e, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(gw_task_err *e, const char *field, const char *fmt, ...)
{
    va_list ap;
    snprintf(e->field, sizeof e->field, "%s", field);
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

static int lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A path component of a repository name: runs of [a-z0-9] joined by '.',
 * '_', '__' or one or more '-'. */
static int path_component_ok(const char *s, size_t n)
{
    size_t i = 0;
    if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
        return 0;
    while (i < n) {
        if (lower_alnum(s[i])) {
            i++;
            continue;
        }
        size_t j = i;
        if (s[i] == '.') {
            j++;
        } else if (s[i] == '_') {
            j += (i + 1 < n && s[i + 1] == '_') ? 2 : 1;
        } else if (s[i] == '-') {
            while (j < n && s[j] == '-')
                j++;
        } else {
            return 0;
        }
        if (j >= n || !lower_alnum(s[j]))
            return 0;
        i = j;
    }
    return 1;
}

/* host[:port]: dot-separated labels of [A-Za-z0-9-] not starting or
 * ending with '-', then an optional decimal port. */
static int domain_ok(const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    size_t host_n = colon ? (size_t)(colon - s) : n;
    if (colon) {
        size_t pn = n - host_n - 1;
        if (pn == 0 || pn > 5)
            return 0;
        for (size_t i = 0; i < pn; i++)
            if (!isdigit((unsigned char)colon[1 + i]))
                return 0;
    }
    size_t start = 0;
    for (size_t i = 0; i <= host_n; i++) {
        if (i < host_n && s[i] != '.')
            continue;
        size_t len = i - start;
        if (len == 0 || s[start] == '-' || s[i - 1] == '-')
            return 0;
        for (size_t k = start; k < i; k++)
            if (!isalnum((unsigned char)s[k]) && s[k] != '-')
                return 0;
        start = i + 1;
    }
    return 1;
}

int gw_task_image_valid(const char *ref)
{
    size_t n = ref ? strlen(ref) : 0;
    if (n == 0 || n > GW_TASK_IMAGE_MAX)
        return 0;
    /* @sha256:<64 hex> */
    const char *at = strchr(ref, '@');
    size_t name_end = n;
    if (at) {
        if (strncmp(at + 1, "sha256:", 7) != 0 || strlen(at + 8) != 64)
            return 0;
        for (const char *h = at + 8; *h; h++)
            if (!isdigit((unsigned char)*h) && !(*h >= 'a' && *h <= 'f'))
                return 0;
        name_end = (size_t)(at - ref);
    }
    /* :tag after the last '/' */
    const char *slash = NULL;
    for (size_t i = 0; i < name_end; i++)
        if (ref[i] == '/')
            slash = ref + i;
    const char *tag = memchr(slash ? slash : ref, ':', name_end - (size_t)((slash ? slash : ref) - ref));
    if (tag) {
        size_t tn = name_end - (size_t)(tag + 1 - ref);
        if (tn == 0 || tn > 128)
            return 0;
        for (size_t i = 0; i < tn; i++) {
            char c = tag[1 + i];
            if (!(isalnum((unsigned char)c) || c == '_' || (i > 0 && (c == '.' || c == '-'))))
                return 0;
        }
        name_end = (size_t)(tag - ref);
    }
    /* the first component is a registry host when it has '.' or ':' or is
     * localhost */
    size_t start = 0;
    const char *first_slash = memchr(ref, '/', name_end);
    if (first_slash) {
        size_t fn = (size_t)(first_slash - ref);
        if (memchr(ref, '.', fn) || memchr(ref, ':', fn) || (fn == 9 && !memcmp(ref, "localhost", 9))) {
            if (!domain_ok(ref, fn))
                return 0;
            start = fn + 1;
        }
    }
    if (start >= name_end)
        return 0;
    for (size_t i = start; i <= name_end; i++) {
        if (i < name_end && ref[i] != '/')
            continue;
        if (!path_component_ok(ref + start, i - start))
            return 0;
        start = i + 1;
    }
    return 1;
}

int gw_task_image_allowed(const char *list, const char *ref)
{
    if (!list || !ref)
        return 0;
    const char *p = list;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n > 0 && isspace((unsigned char)*p)) {
            p++;
            n--;
        }
        while (n > 0 && isspace((unsigned char)p[n - 1]))
            n--;
        char pat[GW_TASK_IMAGE_MAX + 1];
        if (n > 0 && n < sizeof pat) {
            memcpy(pat, p, n);
            pat[n] = '\0';
            if (fnmatch(pat, ref, FNM_PATHNAME) == 0)
                return 1;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

int gw_task_env_name_ok(const char *name)
{
    static const char *const reserved[] = {
        "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "NNODES", "LOCAL_WORLD_SIZE",
        "GROUP_RANK", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", NULL};
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 128 || isdigit((unsigned char)name[0]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '_')
            return 0;
    if (strncmp(name, "KOWLOON_", 8) == 0 || strncmp(name, "MASTER_", 7) == 0)
        return 0;
    for (int i = 0; reserved[i]; i++)
        if (strcmp(name, reserved[i]) == 0)
            return 0;
    return 1;
}

int gw_task_path_ok(const char *p)
{
    size_t n = p ? strlen(p) : 0;
    if (n == 0 || n > GW_TASK_PATH_MAX || p[0] == '/')
        return 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            unsigned char c = (unsigned char)p[i];
            if (c < 0x20 || c == 0x7f || c == '\\')
                return 0;
            if (c != '/')
                continue;
        }
        size_t len = i - start;
        if (len == 0 || (len == 1 && p[start] == '.') ||
            (len == 2 && p[start] == '.' && p[start + 1] == '.'))
            return 0;
        start = i + 1;
    }
    return 1;
}

/* The working directory: absolute, normalised, and not where Kowloon
 * mounts inputs and outputs or the kernel's own file systems. */
static int workdir_ok(const char *w)
{
    static const char *const under[] = {"/proc", "/sys", "/dev", "/kowloon/in", "/kowloon/out", NULL};
    if (!w || w[0] != '/' || strcmp(w, "/") == 0 || !gw_task_path_ok(w + 1))
        return 0;
    for (int i = 0; under[i]; i++) {
        size_t n = strlen(under[i]);
        if (strncmp(w, under[i], n) == 0 && (w[n] == '\0' || w[n] == '/'))
            return 0;
    }
    return 1;
}

static int command_check(const json_t *cmd, gw_task_err *e)
{
    if (!cmd)
        return fail(e, "task.command", "task.command is required: the program and its arguments, "
                    "as a list of strings");
    if (!json_is_array(cmd) || json_array_size(cmd) == 0)
        return fail(e, "task.command", "task.command must be a non-empty list of strings");
    if (json_array_size(cmd) > GW_TASK_ARGV_MAX)
        return fail(e, "task.command", "task.command has at most %d elements", GW_TASK_ARGV_MAX);
    size_t total = 0, i;
    json_t *a;
    json_array_foreach(cmd, i, a) {
        if (!json_is_string(a))
            return fail(e, "task.command", "task.command[%zu] must be a string", i);
        size_t n = json_string_length(a);
        if (n > GW_TASK_ARG_MAX || memchr(json_string_value(a), '\0', n))
            return fail(e, "task.command", "task.command[%zu] must be at most %d bytes, without "
                        "NUL", i, GW_TASK_ARG_MAX);
        if (i == 0 && n == 0)
            return fail(e, "task.command", "task.command[0], the program, must not be empty");
        total += n + 1;
    }
    if (total > GW_TASK_CMD_BYTES)
        return fail(e, "task.command", "task.command takes at most %d KiB in all",
                    GW_TASK_CMD_BYTES >> 10);
    return 0;
}

static int env_check(const json_t *env, gw_task_err *e)
{
    if (!env)
        return 0;
    if (!json_is_object(env))
        return fail(e, "task.env", "task.env must be an object of strings");
    if (json_object_size(env) > GW_TASK_ENV_MAX)
        return fail(e, "task.env", "task.env holds at most %d variables", GW_TASK_ENV_MAX);
    size_t total = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)env, k, v) {
        char field[64];
        snprintf(field, sizeof field, "task.env.%.40s", k);
        if (!gw_task_env_name_ok(k))
            return fail(e, field, "%s: a variable's name is [A-Za-z_][A-Za-z0-9_]* of at most 128 "
                        "characters, and not one Kowloon sets (KOWLOON_*, MASTER_*, WORLD_SIZE, "
                        "RANK, LOCAL_RANK, NODE_RANK, NNODES, LOCAL_WORLD_SIZE, GROUP_RANK, "
                        "CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES)", field);
        if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v)))
            return fail(e, field, "%s must be a string without NUL", field);
        total += strlen(k) + json_string_length(v) + 2;
    }
    if (total > GW_TASK_ENV_BYTES)
        return fail(e, "task.env", "task.env takes at most %d KiB in all", GW_TASK_ENV_BYTES >> 10);
    return 0;
}

/* The names of an object of files or inputs: paths (files) or plain
 * names (inputs), each value an object the caller decodes. */
static int names_check(const json_t *o, const char *what, int max, int paths, gw_task_err *e)
{
    char field[64];
    snprintf(field, sizeof field, "task.%s", what);
    if (!o)
        return 0;
    if (!json_is_object(o))
        return fail(e, field, "%s must be an object", field);
    if (json_object_size(o) > (size_t)max)
        return fail(e, field, "%s holds at most %d entries", field, max);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        snprintf(field, sizeof field, "task.%s.%.40s", what, k);
        int ok = paths ? gw_task_path_ok(k) : 1;
        if (!paths) {
            size_t n = strlen(k);
            ok = n > 0 && n <= 64 && strcmp(k, ".") != 0 && strcmp(k, "..") != 0 &&
                 strcmp(k, "manifest.json") != 0;
            for (size_t i = 0; ok && i < n; i++)
                ok = isalnum((unsigned char)k[i]) || k[i] == '_' || k[i] == '.' || k[i] == '-';
        }
        if (!ok)
            return fail(e, field, paths ? "%s: a file's path is relative, at most 255 bytes, with "
                                          "no empty, '.' or '..' segment"
                                        : "%s: an input's name is 1-64 characters of A-Z a-z 0-9 _ "
                                          ". - (not manifest.json)", field);
        if (!json_is_object(v))
            return fail(e, field, "%s must be an object", field);
    }
    return 0;
}

int gw_task_check(const json_t *task, int *egress, int64_t *quota_mb, gw_task_err *e)
{
    static const char *const known[] = {"image", "command", "env", "workdir", "files", "inputs",
                                        "network", "output_quota_mb", NULL};
    *egress = 0;
    *quota_mb = 0;
    if (!json_is_object(task))
        return fail(e, "task", "task must be an object with image and command");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)task, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = strcmp(k, known[i]) == 0;
        if (!ok) {
            char field[64];
            snprintf(field, sizeof field, "task.%.50s", k);
            return fail(e, field, "%s is not a member of a task (image, command, env, workdir, "
                        "files, inputs, network, output_quota_mb)", field);
        }
    }
    json_t *image = json_object_get(task, "image");
    if (!json_is_string(image))
        return fail(e, "task.image", "task.image is required: an OCI image reference");
    if (!gw_task_image_valid(json_string_value(image)))
        return fail(e, "task.image", "task.image is not an image reference "
                    "([registry/]name[:tag][@sha256:digest], lower-case name)");
    if (command_check(json_object_get(task, "command"), e) != 0 ||
        env_check(json_object_get(task, "env"), e) != 0 ||
        names_check(json_object_get(task, "files"), "files", GW_TASK_FILES_MAX, 1, e) != 0 ||
        names_check(json_object_get(task, "inputs"), "inputs", GW_TASK_INPUTS_MAX, 0, e) != 0)
        return -1;
    json_t *w = json_object_get(task, "workdir");
    if (w && (!json_is_string(w) || !workdir_ok(json_string_value(w))))
        return fail(e, "task.workdir", "task.workdir must be an absolute path (not /, and not under "
                    "/proc, /sys, /dev, /kowloon/in or /kowloon/out)");
    json_t *net = json_object_get(task, "network");
    if (net) {
        const char *s = json_string_value(net);
        if (!s || (strcmp(s, "none") != 0 && strcmp(s, "egress") != 0))
            return fail(e, "task.network", "task.network must be none or egress");
        *egress = strcmp(s, "egress") == 0;
    }
    json_t *q = json_object_get(task, "output_quota_mb");
    if (q) {
        if (!json_is_integer(q) || json_integer_value(q) < 1 || json_integer_value(q) > (1 << 20))
            return fail(e, "task.output_quota_mb", "task.output_quota_mb must be an integer from 1 "
                        "to 1048576");
        *quota_mb = json_integer_value(q);
    }
    return 0;
}
