/* test_gw_task.c — a task request checked and turned into the forms the
 * job keeps (gateway/task.c): the allow-list, every member's refusals with
 * the field they name, and the lease form (inline bytes in base64, blobs
 * to look up, limits in bytes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gw_task.h"

static const gw_task_limits LIM = {.max_output_bytes = 256 << 20, .log_bytes = 64 << 20};

/* gw_task_parse on JSON text: its result, status and field. */
static int parse(const char *text, int *status, char *field, gw_task_req *t)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    assert_non_null(j);
    gw_verr e;
    int rc = gw_task_parse(j, &LIM, t, &e);
    *status = e.status;
    snprintf(field, 160, "%s", e.field);
    json_decref(j);
    return rc;
}

static void refused(const char *text, int status, const char *field)
{
    gw_task_req t;
    int st;
    char f[160];
    assert_int_equal(parse(text, &st, f, &t), -1);
    gw_task_req_free(&t);
    assert_int_equal(st, status);
    assert_string_equal(f, field);
}

static void test_the_allow_list_matches_shell_patterns_per_path_segment(void **state)
{
    (void)state;
    const char *list = "localhost/kowloon-*:*, nvcr.io/nvidia/pytorch:24.*";
    assert_true(svc_task_image_allowed(list, "localhost/kowloon-python:1"));
    assert_true(svc_task_image_allowed(list, "nvcr.io/nvidia/pytorch:24.01-py3"));
    assert_false(svc_task_image_allowed(list, "nvcr.io/nvidia/pytorch:23.10-py3"));
    assert_false(svc_task_image_allowed(list, "localhost/evil/kowloon-x:1")); /* '*' stops at '/' */
    assert_false(svc_task_image_allowed("", "python"));
    assert_false(svc_task_image_allowed(NULL, "python"));
    assert_true(svc_task_image_allowed("*", "python"));
}

static void test_a_good_task_becomes_its_echo_and_its_lease_form(void **state)
{
    (void)state;
    gw_task_req t;
    int st;
    char f[160];
    assert_int_equal(parse("{\"image\":\"localhost/kowloon-python:1\",\"command\":[\"python3\","
                           "\"-c\",\"print(1)\"],\"env\":{\"LR\":\"0.1\"},\"workdir\":\"/app\","
                           "\"files\":{\"a/b.py\":{\"text\":\"x\"}},\"inputs\":{\"x\":{\"dtype\":"
                           "\"float32\",\"shape\":[2],\"data\":[1,2]},\"y\":{\"dtype\":\"uint8\","
                           "\"shape\":[3],\"blob\":\"sha256:" "0000000000000000000000000000000000000000000000000000000000000000"
                           "\",\"format\":\"npy\"}},\"network\":\"egress\",\"output_quota_mb\":10}",
                           &st, f, &t), 0);
    assert_int_equal(t.egress, 1);
    assert_string_equal(t.image, "localhost/kowloon-python:1");
    assert_null(json_object_get(t.echo, "files"));
    assert_string_equal(json_string_value(json_object_get(t.echo, "workdir")), "/app");
    json_t *run = t.run;
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(run,
                        "files"), "a/b.py"), "b64")), "eA==");
    /* float32 1, 2 little-endian */
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(run,
                        "inputs"), "x"), "b64")), "AACAPwAAAEA=");
    assert_int_equal(t.nblobs, 1);
    assert_int_equal(t.blobs[0].size, 3);
    assert_string_equal(t.blobs[0].field, "task.inputs.y");
    json_t *lim = json_object_get(run, "limits");
    assert_int_equal(json_integer_value(json_object_get(lim, "output_bytes")), 10 << 20);
    assert_int_equal(json_integer_value(json_object_get(lim, "log_bytes")), 64 << 20);
    gw_task_req_free(&t);
}

static void test_a_large_inline_input_is_left_to_become_a_blob(void **state)
{
    (void)state;
    json_t *data = json_array();
    for (int i = 0; i < 20000; i++)
        json_array_append_new(data, json_integer(i));
    json_t *j = json_pack("{s:s, s:[s], s:{s:{s:s, s:[i], s:o}}}", "image", "p", "command", "x",
                          "inputs", "big", "dtype", "int32", "shape", 20000, "data", data);
    gw_task_req t;
    gw_verr e;
    assert_int_equal(gw_task_parse(j, &LIM, &t, &e), 0);
    assert_int_equal(t.nbig, 1);
    assert_int_equal(t.big[0].len, 80000);
    assert_null(json_object_get(t.big[0].entry, "b64"));
    gw_task_req_free(&t);
    json_decref(j);
}

/* Task members gw_task_parse refuses, with the status and the field it names. */
static const struct {
    const char *text;
    int status;
    const char *field;
} bad_members[] = {
    {"{\"image\":\"p\",\"command\":[]}", 422, "task.command"},
    {"{\"image\":\"p\",\"command\":[\"\"]}", 422, "task.command"},
    {"{\"image\":\"p\",\"command\":[\"x\", 1]}", 400, "task.command"},
    {"{\"command\":[\"x\"]}", 422, "task.image"},
    {"{\"image\":\"-rm\",\"command\":[\"x\"]}", 422, "task.image"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"privileged\":true}", 400, "task.privileged"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"env\":{\"MASTER_PORT\":\"1\"}}", 422,
     "task.env.MASTER_PORT"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"env\":{\"KOWLOON_X\":\"1\"}}", 422, "task.env.KOWLOON_X"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"env\":{\"9x\":\"1\"}}", 422, "task.env.9x"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"files\":{\"../x\":{\"text\":\"\"}}}", 422,
     "task.files.../x"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"files\":{\"/etc/x\":{\"text\":\"\"}}}", 422,
     "task.files./etc/x"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"files\":{\"a\":{\"text\":\"\"},"
     "\"a/b\":{\"text\":\"\"}}}", 422, "task.files.a/b"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"inputs\":{\"a/b\":{}}}", 422, "task.inputs.a/b"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"inputs\":{\"x\":{\"dtype\":\"float32\","
     "\"shape\":[3],\"data\":[1,2]}}}", 422, "task.inputs.x"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"inputs\":{\"x\":{\"dtype\":\"complex64\","
     "\"shape\":[1],\"data\":[1]}}}", 422, "task.inputs.x"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"inputs\":{\"x.y\":{\"b64\":\"\"},"
     "\"X_Y\":{\"b64\":\"\"}}}", 422, "task.inputs.x.y"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"workdir\":\"/kowloon/out/w\"}", 422, "task.workdir"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"workdir\":\"relative\"}", 422, "task.workdir"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"network\":\"host\"}", 422, "task.network"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"output_quota_mb\":0}", 422, "task.output_quota_mb"},
    {"{\"image\":\"p\",\"command\":[\"x\"],\"output_quota_mb\":257}", 422, "task.output_quota_mb"},
};

static void test_each_bad_member_is_refused_naming_its_field(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_members / sizeof bad_members[0]; i++)
        refused(bad_members[i].text, bad_members[i].status, bad_members[i].field);
}

static void test_an_over_long_command_is_refused(void **state)
{
    (void)state;
    json_t *cmd = json_array();
    for (int i = 0; i < SVC_TASK_ARGS_MAX + 1; i++)
        json_array_append_new(cmd, json_string("x"));
    json_t *j = json_pack("{s:s, s:o}", "image", "p", "command", cmd);
    gw_task_req t;
    gw_verr e;
    assert_int_equal(gw_task_parse(j, &LIM, &t, &e), -1);
    gw_task_req_free(&t);
    assert_string_equal(e.field, "task.command");
    json_decref(j);
}

static void test_reported_outputs_become_file_entries(void **state)
{
    (void)state;
    json_t *meta;
    char why[200];
    json_t *o = json_pack("{s:{s:s, s:i}}", "a/y.npy", "blob",
                          "sha256:1111111111111111111111111111111111111111111111111111111111111111",
                          "bytes", 12);
    assert_int_equal(gw_task_outputs_meta(o, &meta, why, sizeof why), 0);
    assert_int_equal(json_array_size(meta), 1);
    assert_true(gw_task_output_is_file(json_array_get(meta, 0)));
    json_decref(meta);
    json_decref(o);
    o = json_pack("{s:{s:s, s:i}}", "../y", "blob",
                  "sha256:1111111111111111111111111111111111111111111111111111111111111111", "bytes", 1);
    assert_int_equal(gw_task_outputs_meta(o, &meta, why, sizeof why), -1);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_allow_list_matches_shell_patterns_per_path_segment),
        cmocka_unit_test(test_a_good_task_becomes_its_echo_and_its_lease_form),
        cmocka_unit_test(test_a_large_inline_input_is_left_to_become_a_blob),
        cmocka_unit_test(test_each_bad_member_is_refused_naming_its_field),
        cmocka_unit_test(test_an_over_long_command_is_refused),
        cmocka_unit_test(test_reported_outputs_become_file_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
