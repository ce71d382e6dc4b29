/* svc_task.c — the names a task may use (svc_task.h). Character classes
 * are spelled out rather than taken from <ctype.h>, whose answers depend
 * on the locale. */
#include "svc_task.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_alnum(char c)
{
    return is_alpha(c) || (c >= '0' && c <= '9');
}

static int fail(char *why, size_t whylen, const char *fmt, const char *what)
{
    snprintf(why, whylen, fmt, what);
    return -1;
}

int svc_task_image_check(const char *image, char *why, size_t whylen)
{
    size_t n = image ? strlen(image) : 0;
    if (n == 0 || n > SVC_TASK_IMAGE_MAX)
        return fail(why, whylen, "image must be 1 to %s bytes", "255");
    if (!is_alnum(image[0]))
        return fail(why, whylen, "image \"%.64s\" must start with a letter or a digit", image);
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(image[i]) && !strchr("._/:@-", image[i]))
            return fail(why, whylen, "image \"%.64s\" has a character an image reference cannot",
                        image);
    return 0;
}

int svc_task_image_allowed(const char *list, const char *image)
{
    char buf[4096];
    char *save = NULL;
    if (!list || !image || !*list)
        return 0;
    snprintf(buf, sizeof buf, "%s", list);
    for (char *p = strtok_r(buf, ", ", &save); p; p = strtok_r(NULL, ", ", &save))
        if (fnmatch(p, image, FNM_PATHNAME) == 0)
            return 1;
    return 0;
}

int svc_task_env_name_check(const char *name, char *why, size_t whylen)
{
    static const char *const reserved[] = {
        "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "NNODES", "LOCAL_WORLD_SIZE",
        "GROUP_RANK", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", NULL};
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SVC_TASK_ENV_NAME_MAX || !(is_alpha(name[0]) || name[0] == '_'))
        return fail(why, whylen, "env name \"%.64s\" must match [A-Za-z_][A-Za-z0-9_]{0,127}",
                    name ? name : "");
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(name[i]) && name[i] != '_')
            return fail(why, whylen, "env name \"%.64s\" must match [A-Za-z_][A-Za-z0-9_]{0,127}",
                        name);
    if (strncmp(name, "KOWLOON_", 8) == 0 || strncmp(name, "MASTER_", 7) == 0)
        return fail(why, whylen, "env name \"%.64s\" is reserved: Kowloon sets KOWLOON_* and "
                                 "MASTER_*", name);
    for (int i = 0; reserved[i]; i++)
        if (strcmp(name, reserved[i]) == 0)
            return fail(why, whylen, "env name \"%.64s\" is reserved: Kowloon sets it", name);
    return 0;
}

/* The segments of a relative path: printable ASCII but '\\', none empty,
 * "." or "..". 0 or -1 with why. */
static int check_segments(const char *path, const char *what, char *why, size_t whylen)
{
    size_t n = strlen(path), start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            unsigned char c = (unsigned char)path[i];
            if (c < 0x20 || c >= 0x7f || c == '\\')
                return fail(why, whylen, "%s has a control, non-ASCII or '\\' character", what);
            if (c != '/')
                continue;
        }
        size_t len = i - start;
        if (len == 0)
            return fail(why, whylen, "%s has an empty segment (a leading, trailing or doubled "
                                     "'/')", what);
        if ((len == 1 && path[start] == '.') ||
            (len == 2 && path[start] == '.' && path[start + 1] == '.'))
            return fail(why, whylen, "%s has a \".\" or \"..\" segment", what);
        start = i + 1;
    }
    return 0;
}

int svc_task_path_check(const char *path, char *why, size_t whylen)
{
    char what[320];
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n > SVC_TASK_PATH_MAX)
        return fail(why, whylen, "a file path must be 1 to %s bytes", "255");
    snprintf(what, sizeof what, "file path \"%.255s\"", path);
    if (path[0] == '/')
        return fail(why, whylen, "%s must be relative to the working directory", what);
    return check_segments(path, what, why, whylen);
}

int svc_task_workdir_check(const char *dir, char *why, size_t whylen)
{
    static const char *const under[] = {"/proc", "/sys", "/dev", "/kowloon/in", "/kowloon/out",
                                        NULL};
    char what[320];
    size_t n = dir ? strlen(dir) : 0;
    if (n < 2 || n > SVC_TASK_PATH_MAX || dir[0] != '/')
        return fail(why, whylen, "workdir must be an absolute path other than / of at most %s "
                                 "bytes", "255");
    snprintf(what, sizeof what, "workdir \"%.255s\"", dir);
    if (check_segments(dir + 1, what, why, whylen) < 0)
        return -1;
    for (int i = 0; under[i]; i++) {
        size_t k = strlen(under[i]);
        if (strncmp(dir, under[i], k) == 0 && (dir[k] == '\0' || dir[k] == '/'))
            return fail(why, whylen, "%s is under /proc, /sys, /dev, /kowloon/in or /kowloon/out",
                        what);
    }
    return 0;
}

int svc_task_input_name_check(const char *name, char *why, size_t whylen)
{
    size_t n = name ? strlen(name) : 0;
    int ok = n > 0 && n <= SVC_TASK_INPUT_NAME_MAX && strcmp(name, ".") != 0 &&
             strcmp(name, "..") != 0 && strcmp(name, "manifest.json") != 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = is_alnum(name[i]) || name[i] == '_' || name[i] == '.' || name[i] == '-';
    if (!ok)
        return fail(why, whylen, "input name \"%.64s\" must be 1 to 64 characters of "
                                 "[A-Za-z0-9_.-] (not \".\", \"..\" or manifest.json)",
                    name ? name : "");
    return 0;
}

void svc_task_input_env_name(const char *name, char *out, size_t len)
{
    size_t k = 0;
    for (; name[k] && k + 1 < len; k++) {
        char c = name[k];
        out[k] = c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : is_alnum(c) ? c : '_';
    }
    if (len)
        out[k] = '\0';
}

static const struct {
    const char *name, *descr;
    size_t size;
} svc__task_dtypes[] = {
    {"bool", "|b1", 1},     {"int8", "|i1", 1},    {"uint8", "|u1", 1},
    {"int16", "<i2", 2},    {"uint16", "<u2", 2},  {"int32", "<i4", 4},
    {"uint32", "<u4", 4},   {"int64", "<i8", 8},   {"uint64", "<u8", 8},
    {"float16", "<f2", 2},  {"float32", "<f4", 4}, {"float64", "<f8", 8},
};

size_t svc_task_dtype_size(const char *dtype)
{
    for (size_t i = 0; dtype && i < sizeof svc__task_dtypes / sizeof *svc__task_dtypes; i++)
        if (strcmp(dtype, svc__task_dtypes[i].name) == 0)
            return svc__task_dtypes[i].size;
    return 0;
}

const char *svc_task_dtype_descr(const char *dtype)
{
    for (size_t i = 0; dtype && i < sizeof svc__task_dtypes / sizeof *svc__task_dtypes; i++)
        if (strcmp(dtype, svc__task_dtypes[i].name) == 0)
            return svc__task_dtypes[i].descr;
    return NULL;
}
