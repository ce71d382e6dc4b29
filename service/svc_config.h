/* svc_config.h — one declarative table of options per program: each option
 * has a flag, an environment variable, a default and a help line. Flags win
 * over the environment, which wins over the default. */
#ifndef SVC_CONFIG_H
#define SVC_CONFIG_H

#include <stddef.h>
#include <stdio.h>

typedef enum { SVC_OPT_STRING, SVC_OPT_INT, SVC_OPT_BOOL } svc_opt_type;

typedef struct svc_opt {
    const char *flag;     /* "listen" for --listen */
    const char *env;      /* "KOWLOON_LISTEN" or NULL */
    svc_opt_type type;
    const char *def;      /* default as text; NULL = none */
    long min, max;        /* SVC_OPT_INT bounds */
    const char *help;
    /* Where svc_config_bind writes the value in the program's config
     * struct: SVC_OPT_STR/INT/BOOL(type, field), which also check the
     * field's type (const char *, long, int); 0: not bound. */
    size_t at;
    /* filled by svc_config_parse */
    const char *str;      /* points into argv, environ or def; may be NULL */
    long num;             /* INT value, or BOOL 0/1 */
    int given;            /* 1: str came from the flag or the environment */
} svc_opt;

/* The .at of an option bound to field of struct type: its offset + 1 (0
 * means unbound). A field of another type than the option's does not
 * compile (-Werror: comparison of distinct pointer types). */
#define SVC_OPT__AT(type, field, ctype) \
    (offsetof(type, field) + 1 + 0 * sizeof(&((type *)0)->field == (ctype *)0))
#define SVC_OPT_STR(type, field) SVC_OPT__AT(type, field, const char *)
#define SVC_OPT_INT(type, field) SVC_OPT__AT(type, field, long)
#define SVC_OPT_BOOL(type, field) SVC_OPT__AT(type, field, int)

/* Parses argv[first..argc) as --flag value / --flag=value / --bool-flag.
 * Non-option arguments are collected into rest (up to max_rest; *nrest set).
 * Returns 0, or -1 with a message in err (unknown flag, missing value, an
 * integer out of bounds). `--help` returns 1. */
int svc_config_parse(svc_opt *opts, int argc, char **argv, int first,
                     char **rest, int max_rest, int *nrest, char *err, size_t errlen);
/* Prints "  --flag VALUE   help (env NAME, default X)" lines. */
void svc_config_usage(const svc_opt *opts, FILE *out);
/* Writes every bound option's value (after svc_config_parse) into its
 * field of cfg: a STRING's str (borrowed: argv, the environment or the
 * table, which outlive main), an INT's num, a BOOL's num as an int. */
void svc_config_bind(const svc_opt *opts, void *cfg);
/* The option bound at `at` (SVC_OPT_*(type, field)); NULL if none. */
const svc_opt *svc_config_at(const svc_opt *opts, size_t at);
/* Finds an option by flag name; NULL if absent. */
svc_opt *svc_config_get(svc_opt *opts, const char *flag);
/* o->given: 1 when o's value came from its flag or its environment
 * variable, 0 when it is the table's default (or there is none); lets a
 * program fill a default of its own where the user said nothing. 0 for
 * NULL. */
int svc_config_given(const svc_opt *o);
/* Directory of the running executable (from /proc/self/exe), in buf. */
int svc_exe_dir(char *buf, size_t len);

#endif
