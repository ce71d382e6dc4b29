/* test_gw_task.c — the stand-alone checks of a task request: image
 * references and the allow-list, the command, environment names, paths,
 * the working directory, network and output quota. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "task.h"

static void test_image_references_of_the_oci_form_are_accepted(void **state)
{
    assert_true(gw_task_image_valid("python"));
    assert_true(gw_task_image_valid("python:3.11-slim"));
    assert_true(gw_task_image_valid("localhost/kowloon-python:1"));
    assert_true(gw_task_image_valid("registry.example.com:5000/team/train__v2:latest"));
    assert_true(gw_task_image_valid("nvcr.io/nvidia/pytorch:24.01-py3"));
    assert_true(gw_task_image_valid("ghcr.io/a/b@sha256:"
                                    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
}

static void test_malformed_image_references_are_refused(void **state)
{
    assert_false(gw_task_image_valid(""));
    assert_false(gw_task_image_valid("Python"));           /* upper case in the path */
    assert_false(gw_task_image_valid("python:"));          /* empty tag */
    assert_false(gw_task_image_valid("-python"));
    assert_false(gw_task_image_valid("a//b"));
    assert_false(gw_task_image_valid("a/b/"));
    assert_false(gw_task_image_valid("python:.bad"));
    assert_false(gw_task_image_valid("py thon"));
    assert_false(gw_task_image_valid("--privileged"));
    assert_false(gw_task_image_valid("a@sha256:12"));
    assert_false(gw_task_image_valid("host:99999999/a"));
    char longref[300];
    memset(longref, 'a', sizeof longref - 1);
    longref[sizeof longref - 1] = '\0';
    assert_false(gw_task_image_valid(longref));
}

static void test_the_allow_list_matches_shell_patterns_per_path_segment(void **state)
{
    const char *list = "localhost/kowloon-*:*, nvcr.io/nvidia/pytorch:24.*";
    assert_true(gw_task_image_allowed(list, "localhost/kowloon-python:1"));
    assert_true(gw_task_image_allowed(list, "nvcr.io/nvidia/pytorch:24.01-py3"));
    assert_false(gw_task_image_allowed(list, "nvcr.io/nvidia/pytorch:23.10-py3"));
    assert_false(gw_task_image_allowed(list, "localhost/evil/kowloon-x:1")); /* '*' stops at '/' */
    assert_false(gw_task_image_allowed("", "python"));
    assert_false(gw_task_image_allowed(NULL, "python"));
    assert_true(gw_task_image_allowed("*", "python"));
}

static void test_env_names_kowloon_sets_are_refused(void **state)
{
    assert_true(gw_task_env_name_ok("LR"));
    assert_true(gw_task_env_name_ok("_x9"));
    assert_true(gw_task_env_name_ok("NCCL_DEBUG"));
    assert_false(gw_task_env_name_ok("9LIVES"));
    assert_false(gw_task_env_name_ok("A-B"));
    assert_false(gw_task_env_name_ok(""));
    assert_false(gw_task_env_name_ok("KOWLOON_NODE_TOKEN"));
    assert_false(gw_task_env_name_ok("MASTER_ADDR"));
    assert_false(gw_task_env_name_ok("WORLD_SIZE"));
    assert_false(gw_task_env_name_ok("CUDA_VISIBLE_DEVICES"));
}

static void test_paths_stay_below_their_folder(void **state)
{
    assert_true(gw_task_path_ok("train.py"));
    assert_true(gw_task_path_ok("conf/a.yaml"));
    assert_true(gw_task_path_ok("..hidden"));
    assert_false(gw_task_path_ok("../etc/passwd"));
    assert_false(gw_task_path_ok("a/../../b"));
    assert_false(gw_task_path_ok("/etc/passwd"));
    assert_false(gw_task_path_ok("a//b"));
    assert_false(gw_task_path_ok("a/./b"));
    assert_false(gw_task_path_ok("a\\b"));
    assert_false(gw_task_path_ok("a\nb"));
    assert_false(gw_task_path_ok(""));
}

/* Runs gw_task_check on JSON text; returns its result and the field. */
static int check(const char *text, char *field, int *egress, int64_t *quota)
{
    json_error_t je;
    json_t *t = json_loads(text, 0, &je);
    assert_non_null(t);
    gw_task_err e = {{0}, {0}};
    int rc = gw_task_check(t, egress, quota, &e);
    snprintf(field, 64, "%s", e.field);
    json_decref(t);
    return rc;
}

static void test_a_whole_task_is_checked_member_by_member(void **state)
{
    char f[64];
    int egress;
    int64_t quota;
    assert_int_equal(check("{\"image\":\"localhost/kowloon-python:1\",\"command\":[\"python3\","
                           "\"-c\",\"print(1)\"],\"env\":{\"LR\":\"0.1\"},\"workdir\":\"/app\","
                           "\"files\":{\"a/b.py\":{\"text\":\"x\"}},\"inputs\":{\"x\":{}},"
                           "\"network\":\"egress\",\"output_quota_mb\":10}",
                           f, &egress, &quota), 0);
    assert_int_equal(egress, 1);
    assert_int_equal(quota, 10);
    assert_int_equal(check("{\"image\":\"p\",\"command\":[]}", f, &egress, &quota), -1);
    assert_string_equal(f, "task.command");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"\"]}", f, &egress, &quota), -1);
    assert_string_equal(f, "task.command");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\", 1]}", f, &egress, &quota), -1);
    assert_int_equal(check("{\"command\":[\"x\"]}", f, &egress, &quota), -1);
    assert_string_equal(f, "task.image");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"privileged\":true}", f, &egress,
                           &quota), -1);
    assert_string_equal(f, "task.privileged");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"env\":{\"MASTER_PORT\":\"1\"}}",
                           f, &egress, &quota), -1);
    assert_string_equal(f, "task.env.MASTER_PORT");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"files\":{\"../x\":{}}}", f,
                           &egress, &quota), -1);
    assert_string_equal(f, "task.files.../x");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"inputs\":{\"a/b\":{}}}", f,
                           &egress, &quota), -1);
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"workdir\":\"/kowloon/out/w\"}",
                           f, &egress, &quota), -1);
    assert_string_equal(f, "task.workdir");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"workdir\":\"relative\"}", f,
                           &egress, &quota), -1);
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"network\":\"host\"}", f, &egress,
                           &quota), -1);
    assert_string_equal(f, "task.network");
    assert_int_equal(check("{\"image\":\"p\",\"command\":[\"x\"],\"output_quota_mb\":0}", f,
                           &egress, &quota), -1);
    assert_string_equal(f, "task.output_quota_mb");
}

static void test_an_over_long_command_is_refused(void **state)
{
    json_t *cmd = json_array();
    for (int i = 0; i < GW_TASK_ARGV_MAX + 1; i++)
        json_array_append_new(cmd, json_string("x"));
    json_t *t = json_pack("{s:s, s:o}", "image", "p", "command", cmd);
    gw_task_err e = {{0}, {0}};
    int egress;
    int64_t quota;
    assert_int_equal(gw_task_check(t, &egress, &quota, &e), -1);
    assert_string_equal(e.field, "task.command");
    json_decref(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_references_of_the_oci_form_are_accepted),
        cmocka_unit_test(test_malformed_image_references_are_refused),
        cmocka_unit_test(test_the_allow_list_matches_shell_patterns_per_path_segment),
        cmocka_unit_test(test_env_names_kowloon_sets_are_refused),
        cmocka_unit_test(test_paths_stay_below_their_folder),
        cmocka_unit_test(test_a_whole_task_is_checked_member_by_member),
        cmocka_unit_test(test_an_over_long_command_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
