/* test_svc_config.c — the option table: flag beats environment beats
 * default, bounds, booleans, positional arguments and errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_config.h"

static svc_opt opts[] = {
    {.flag = "listen", .env = "TKW_LISTEN", .type = SVC_OPT_STRING, .def = "127.0.0.1:8080", .help = "address"},
    {.flag = "slots", .env = "TKW_SLOTS", .type = SVC_OPT_INT, .def = "2", .min = 1, .max = 64, .help = "runs"},
    {.flag = "admin", .env = "TKW_ADMIN", .type = SVC_OPT_BOOL, .def = "false", .help = "admin key"},
    {.flag = "tenant", .env = NULL, .type = SVC_OPT_STRING, .def = NULL, .help = "tenant name"},
    {.flag = "offset", .env = NULL, .type = SVC_OPT_INT, .def = "-3", .help = "unbounded"},
    {0},
};

static int parse(int argc, char **argv, char **rest, int *nrest, char *err)
{
    return svc_config_parse(opts, argc, argv, 1, rest, 4, nrest, err, 256);
}

static int reset_env(void **state)
{
    (void)state;
    unsetenv("TKW_LISTEN");
    unsetenv("TKW_SLOTS");
    unsetenv("TKW_ADMIN");
    return 0;
}

static void test_defaults_apply_without_flags_or_env(void **state)
{
    (void)state;
    char *argv[] = {"prog", NULL};
    char *rest[4], err[256];
    int nrest;
    assert_int_equal(parse(1, argv, rest, &nrest, err), 0);
    assert_string_equal(svc_config_get(opts, "listen")->str, "127.0.0.1:8080");
    assert_int_equal(svc_config_get(opts, "slots")->num, 2);
    assert_int_equal(svc_config_get(opts, "admin")->num, 0);
    assert_null(svc_config_get(opts, "tenant")->str);
    assert_int_equal(svc_config_get(opts, "offset")->num, -3);
    assert_int_equal(nrest, 0);
    assert_null(svc_config_get(opts, "nope"));
}

/* A program's own config struct, bound once: every value lands in its
 * field with its type, and the option is found again by its field. */
typedef struct {
    int flag;
    const char *listen;
    long slots;
    int admin;
    const char *tenant;
} bound_cfg;

static void test_bind_writes_each_value_into_its_field(void **state)
{
    (void)state;
    svc_opt b[] = {
        {.flag = "listen", .type = SVC_OPT_STRING, .def = "127.0.0.1:8080",
         .at = SVC_OPT_STR(bound_cfg, listen)},
        {.flag = "slots", .type = SVC_OPT_INT, .def = "2", .min = 1, .max = 64,
         .at = SVC_OPT_INT(bound_cfg, slots)},
        {.flag = "admin", .type = SVC_OPT_BOOL, .def = "0", .at = SVC_OPT_BOOL(bound_cfg, admin)},
        {.flag = "tenant", .type = SVC_OPT_STRING, .at = SVC_OPT_STR(bound_cfg, tenant)},
        {.flag = "unbound", .type = SVC_OPT_INT, .def = "7"},
        {.flag = NULL},
    };
    char *argv[] = {"prog", "--slots", "9", "--admin", NULL};
    char err[256];
    bound_cfg c = {.flag = 42, .tenant = "x"};
    assert_int_equal(svc_config_parse(b, 4, argv, 1, NULL, 0, NULL, err, sizeof err), 0);
    svc_config_bind(b, &c);
    assert_int_equal(c.flag, 42);   /* no option is bound to it */
    assert_string_equal(c.listen, "127.0.0.1:8080");
    assert_int_equal(c.slots, 9);
    assert_int_equal(c.admin, 1);
    assert_null(c.tenant);          /* no default: NULL, written too */
    assert_ptr_equal(svc_config_at(b, SVC_OPT_INT(bound_cfg, slots)), &b[1]);
    assert_true(svc_config_given(svc_config_at(b, SVC_OPT_INT(bound_cfg, slots))));
    assert_false(svc_config_given(svc_config_at(b, SVC_OPT_STR(bound_cfg, listen))));
    assert_null(svc_config_at(b, 0));
}

static void test_env_beats_default(void **state)
{
    (void)state;
    setenv("TKW_SLOTS", "8", 1);
    setenv("TKW_LISTEN", "0.0.0.0:9000", 1);
    char *argv[] = {"prog", NULL};
    char err[256];
    int nrest;
    assert_int_equal(parse(1, argv, NULL, &nrest, err), 0);
    assert_int_equal(svc_config_get(opts, "slots")->num, 8);
    assert_string_equal(svc_config_get(opts, "listen")->str, "0.0.0.0:9000");
}

static void test_flag_beats_env(void **state)
{
    (void)state;
    setenv("TKW_SLOTS", "8", 1);
    setenv("TKW_ADMIN", "true", 1);
    char *argv[] = {"prog", "--slots", "3", "--listen=[::1]:1", "--admin=false", NULL};
    char err[256];
    int nrest;
    assert_int_equal(parse(5, argv, NULL, &nrest, err), 0);
    assert_int_equal(svc_config_get(opts, "slots")->num, 3);
    assert_string_equal(svc_config_get(opts, "listen")->str, "[::1]:1");
    assert_int_equal(svc_config_get(opts, "admin")->num, 0);
}

static void test_empty_env_counts_as_unset(void **state)
{
    (void)state;
    setenv("TKW_SLOTS", "", 1);
    char *argv[] = {"prog", NULL};
    char err[256];
    int nrest;
    assert_int_equal(parse(1, argv, NULL, &nrest, err), 0);
    assert_int_equal(svc_config_get(opts, "slots")->num, 2);
}

static void test_int_bounds_are_enforced_from_every_source(void **state)
{
    (void)state;
    char err[256];
    int nrest;
    char *argv[] = {"prog", "--slots", "65", NULL};
    assert_int_equal(parse(3, argv, NULL, &nrest, err), -1);
    assert_non_null(strstr(err, "--slots"));
    assert_non_null(strstr(err, "[1, 64]"));

    char *argv0[] = {"prog", "--slots=0", NULL};
    assert_int_equal(parse(2, argv0, NULL, &nrest, err), -1);

    char *argv1[] = {"prog", NULL};
    setenv("TKW_SLOTS", "100", 1);
    assert_int_equal(parse(1, argv1, NULL, &nrest, err), -1);
    assert_non_null(strstr(err, "TKW_SLOTS"));

    setenv("TKW_SLOTS", "4x", 1);
    assert_int_equal(parse(1, argv1, NULL, &nrest, err), -1);
    assert_non_null(strstr(err, "not an integer"));
    unsetenv("TKW_SLOTS");

    char *argv2[] = {"prog", "--slots", "64", "--offset", "-99999", NULL};
    assert_int_equal(parse(5, argv2, NULL, &nrest, err), 0);
    assert_int_equal(svc_config_get(opts, "slots")->num, 64);
    assert_int_equal(svc_config_get(opts, "offset")->num, -99999);
}

static void test_bool_flag_takes_no_value_and_positionals_are_kept(void **state)
{
    (void)state;
    char *argv[] = {"prog", "keys", "create", "--admin", "--tenant", "acme", "extra", NULL};
    char *rest[4], err[256];
    int nrest;
    assert_int_equal(parse(7, argv, rest, &nrest, err), 0);
    assert_int_equal(svc_config_get(opts, "admin")->num, 1);
    assert_string_equal(svc_config_get(opts, "tenant")->str, "acme");
    assert_int_equal(nrest, 3);
    assert_string_equal(rest[0], "keys");
    assert_string_equal(rest[1], "create");
    assert_string_equal(rest[2], "extra");

    char *argv2[] = {"prog", "--", "--admin", NULL};
    assert_int_equal(parse(3, argv2, rest, &nrest, err), 0);
    assert_int_equal(nrest, 1);
    assert_string_equal(rest[0], "--admin");
    assert_int_equal(svc_config_get(opts, "admin")->num, 0);
}

static void test_errors_name_the_problem(void **state)
{
    (void)state;
    char err[256];
    int nrest;
    char *rest[4];
    char *a1[] = {"prog", "--bogus", NULL};
    assert_int_equal(parse(2, a1, rest, &nrest, err), -1);
    assert_non_null(strstr(err, "--bogus"));
    char *a2[] = {"prog", "--listen", NULL};
    assert_int_equal(parse(2, a2, rest, &nrest, err), -1);
    assert_non_null(strstr(err, "needs a value"));
    char *a3[] = {"prog", "--admin=maybe", NULL};
    assert_int_equal(parse(2, a3, rest, &nrest, err), -1);
    char *a4[] = {"prog", "a", "b", "c", "d", "e", NULL};
    assert_int_equal(parse(6, a4, rest, &nrest, err), -1);
    assert_non_null(strstr(err, "'e'"));
    char *a5[] = {"prog", "--slots", "3", "--help", NULL};
    assert_int_equal(parse(4, a5, rest, &nrest, err), 1);
}

static void test_usage_lists_flags_env_and_defaults(void **state)
{
    (void)state;
    char buf[2048] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    svc_config_usage(opts, f);
    fclose(f);
    assert_non_null(strstr(buf, "--listen VALUE"));
    assert_non_null(strstr(buf, "(env TKW_SLOTS, default 2)"));
    assert_non_null(strstr(buf, "--admin "));
    assert_null(strstr(buf, "--admin VALUE"));
}

static void test_exe_dir_is_the_test_binary_folder(void **state)
{
    (void)state;
    char dir[4096];
    assert_int_equal(svc_exe_dir(dir, sizeof dir), 0);
    assert_non_null(strstr(dir, "tests"));
    assert_int_equal(access(dir, F_OK), 0);
    char tiny[4];
    assert_true(svc_exe_dir(tiny, sizeof tiny) < 0);
}

static void test_given_tells_flag_and_env_from_default(void **state)
{
    (void)state;
    char *argv[] = {"prog", "--slots", "2", "--tenant", "t", NULL};
    char *rest[4], err[256];
    int nrest;
    setenv("TKW_ADMIN", "false", 1);
    assert_int_equal(parse(5, argv, rest, &nrest, err), 0);
    /* the same value as the default still counts as said by the user */
    assert_true(svc_config_given(svc_config_get(opts, "slots")));
    assert_true(svc_config_given(svc_config_get(opts, "tenant")));
    assert_true(svc_config_given(svc_config_get(opts, "admin")));
    assert_false(svc_config_given(svc_config_get(opts, "listen")));
    assert_false(svc_config_given(svc_config_get(opts, "offset")));
    assert_false(svc_config_given(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults_apply_without_flags_or_env, reset_env),
        cmocka_unit_test_setup(test_env_beats_default, reset_env),
        cmocka_unit_test_setup(test_bind_writes_each_value_into_its_field, reset_env),
        cmocka_unit_test_setup(test_flag_beats_env, reset_env),
        cmocka_unit_test_setup(test_empty_env_counts_as_unset, reset_env),
        cmocka_unit_test_setup(test_int_bounds_are_enforced_from_every_source, reset_env),
        cmocka_unit_test_setup(test_bool_flag_takes_no_value_and_positionals_are_kept, reset_env),
        cmocka_unit_test_setup(test_errors_name_the_problem, reset_env),
        cmocka_unit_test(test_usage_lists_flags_env_and_defaults),
        cmocka_unit_test(test_exe_dir_is_the_test_binary_folder),
        cmocka_unit_test_setup(test_given_tells_flag_and_env_from_default, reset_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
