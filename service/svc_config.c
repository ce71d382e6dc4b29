/* svc_config.c — flags, environment and defaults from one declarative table
 * (see svc_config.h). Values are never copied: opt->str points into argv,
 * the environment or the table's default, all of which outlive main. */
#include "svc_config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* An INT option is bounded unless its table entry leaves both bounds at 0
 * (or gives min > max): 0..0 is never a useful range. */
static int opt_bounded(const svc_opt *o)
{
    return o->min <= o->max && !(o->min == 0 && o->max == 0);
}

static int parse_bool(const char *s, long *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    }
    return -1;
}

/* Converts o->str into o->num; `from` names where the text came from for the
 * error message ("--slots", "KOWLOON_SLOTS", "default"). */
static int opt_convert(svc_opt *o, const char *from, char *err, size_t errlen)
{
    if (o->type == SVC_OPT_STRING)
        return 0;
    if (o->str == NULL) {
        o->num = 0;
        return 0;
    }
    if (o->type == SVC_OPT_BOOL) {
        if (parse_bool(o->str, &o->num) < 0) {
            snprintf(err, errlen, "%s: '%s' is not a boolean (true|false)", from, o->str);
            return -1;
        }
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(o->str, &end, 10);
    if (end == o->str || *end != '\0' || errno == ERANGE) {
        snprintf(err, errlen, "%s: '%s' is not an integer", from, o->str);
        return -1;
    }
    if (opt_bounded(o) && (v < o->min || v > o->max)) {
        snprintf(err, errlen, "%s: %ld is out of range [%ld, %ld]", from, v, o->min, o->max);
        return -1;
    }
    o->num = v;
    return 0;
}

svc_opt *svc_config_get(svc_opt *opts, const char *flag)
{
    if (opts == NULL || flag == NULL)
        return NULL;
    for (svc_opt *o = opts; o->flag != NULL; o++)
        if (strcmp(o->flag, flag) == 0)
            return o;
    return NULL;
}

void svc_config_bind(const svc_opt *opts, void *cfg)
{
    for (const svc_opt *o = opts; o->flag != NULL; o++) {
        if (o->at == 0)
            continue;
        char *field = (char *)cfg + o->at - 1;
        if (o->type == SVC_OPT_STRING)
            memcpy(field, &o->str, sizeof o->str);
        else if (o->type == SVC_OPT_INT)
            memcpy(field, &o->num, sizeof o->num);
        else
            *(int *)(void *)field = (int)o->num;
    }
}

const svc_opt *svc_config_at(const svc_opt *opts, size_t at)
{
    for (const svc_opt *o = opts; at != 0 && o->flag != NULL; o++)
        if (o->at == at)
            return o;
    return NULL;
}

int svc_config_given(const svc_opt *o)
{
    return o != NULL && o->given;
}

/* The flag-vs-environment precedence is resolved by remembering, for each
 * option, where its final text came from: flags are applied after env. */
int svc_config_parse(svc_opt *opts, int argc, char **argv, int first,
                     char **rest, int max_rest, int *nrest, char *err, size_t errlen)
{
    char dummy[1];
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    if (nrest != NULL)
        *nrest = 0;

    for (svc_opt *o = opts; o->flag != NULL; o++) {
        o->str = o->def;
        o->given = 0;
        const char *e = o->env != NULL ? getenv(o->env) : NULL;
        /* An empty variable counts as unset: `KOWLOON_X= cmd` and compose
         * files that pass an empty value should not override a default. */
        if (e != NULL && e[0] != '\0') {
            o->str = e;
            o->given = 1;
        }
        if (opt_convert(o, o->str == o->def ? "default" : o->env, err, errlen) < 0)
            return -1;
    }

    int only_positional = 0;
    for (int i = first; i < argc; i++) {
        char *a = argv[i];
        if (only_positional || a[0] != '-' || a[1] == '\0') {
            if (rest == NULL || nrest == NULL || *nrest >= max_rest) {
                snprintf(err, errlen, "unexpected argument '%s'", a);
                return -1;
            }
            rest[(*nrest)++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_positional = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (a[1] != '-') {
            snprintf(err, errlen, "unknown flag '%s' (flags start with --)", a);
            return -1;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - name) : strlen(name);
        svc_opt *o = NULL;
        for (svc_opt *c = opts; c->flag != NULL; c++)
            if (strlen(c->flag) == nlen && strncmp(c->flag, name, nlen) == 0)
                o = c;
        if (o == NULL) {
            snprintf(err, errlen, "unknown flag '--%.*s'", (int)nlen, name);
            return -1;
        }
        if (eq != NULL) {
            o->str = eq + 1;
        } else if (o->type == SVC_OPT_BOOL) {
            o->str = "true"; /* a bare boolean flag never takes the next word */
        } else if (i + 1 < argc) {
            o->str = argv[++i];
        } else {
            snprintf(err, errlen, "flag --%s needs a value", o->flag);
            return -1;
        }
        o->given = 1;
        char from[80];
        snprintf(from, sizeof from, "--%s", o->flag);
        if (opt_convert(o, from, err, errlen) < 0)
            return -1;
    }
    return 0;
}

void svc_config_usage(const svc_opt *opts, FILE *out)
{
    for (const svc_opt *o = opts; o->flag != NULL; o++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s", o->flag, o->type == SVC_OPT_BOOL ? "" : " VALUE");
        fprintf(out, "  %-26s %s", left, o->help != NULL ? o->help : "");
        if (o->env != NULL && o->def != NULL)
            fprintf(out, " (env %s, default %s)", o->env, o->def);
        else if (o->env != NULL)
            fprintf(out, " (env %s)", o->env);
        else if (o->def != NULL)
            fprintf(out, " (default %s)", o->def);
        fputc('\n', out);
    }
}

int svc_exe_dir(char *buf, size_t len)
{
    if (buf == NULL || len < 2)
        return -EINVAL;
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n < 0)
        return -errno;
    if ((size_t)n >= len - 1)
        return -ENAMETOOLONG; /* possibly truncated */
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash == NULL)
        return -ENOENT;
    if (slash == buf)
        slash[1] = '\0'; /* the executable lives in / */
    else
        *slash = '\0';
    return 0;
}
