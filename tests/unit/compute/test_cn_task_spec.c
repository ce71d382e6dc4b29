/* test_cn_task_spec.c — a run request's "task" as the node decodes it
 * (compute/task/task_spec.c, compute/runs/cn_args.c, service/data/svc_task.c): what it keeps,
 * what it refuses and with which status and field; and how a part's end
 * maps to contract §5's codes (cn_task_end_code). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cn_args.h"
#include "cn_runs.h"
#include "svc_log.h"
#include "task.h"

/* Decodes the whole run request text; returns decode's result. */
static int decode(const char *text, cn_run_req *req, int *status, kl_err *err)
{
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    if (!body)
        fail_msg("bad test JSON: %s: %s", je.text, text);
    memset(err, 0, sizeof *err);
    *status = 0;
    int rc = cn_run_req_decode(body, req, status, err);
    json_decref(body);
    return rc;
}

/* Expects the task member text (inside a run request) to be refused with
 * status and field. */
static void refused(const char *task, int status, const char *field)
{
    char text[4096];
    cn_run_req req;
    kl_err err;
    int st;
    snprintf(text, sizeof text, "{\"job_id\":\"j\",\"attempt\":1,\"task\":%s}", task);
    if (decode(text, &req, &st, &err) == 0)
        fail_msg("accepted: %s", task);
    if (st != status || strcmp(err.field, field) != 0)
        fail_msg("%s: got %d %s (%s), want %d %s", task, st, err.field, err.message, status, field);
    assert_null(req.task);
}

static void test_a_full_task_decodes(void **state)
{
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(decode("{\"job_id\":\"j1\",\"attempt\":2,\"timeout_s\":30,\"gpus\":0,"
                            "\"task\":{\"image\":\"localhost/py:1\",\"command\":[\"python3\",\"-c\",\"x\"],"
                            "\"env\":{\"LR\":\"0.1\",\"PATH\":\"/bin\"},\"workdir\":\"/kowloon/work/sub\","
                            "\"files\":{\"a/b.py\":{\"text\":\"print(1)\"},\"c.bin\":{\"b64\":\"AAEC\"},"
                            "\"d.tar\":{\"blob\":\"sha256:" "0000000000000000000000000000000000000000000000000000000000000000"
                            "\",\"size\":9}},"
                            "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[2,3],\"blob\":\"sha256:"
                            "1111111111111111111111111111111111111111111111111111111111111111\",\"size\":24},"
                            "\"y\":{\"dtype\":\"uint8\",\"shape\":[2],\"b64\":\"AQI=\",\"format\":\"npy\"},"
                            "\"raw\":{\"blob\":\"sha256:2222222222222222222222222222222222222222222222222222222222222222\",\"size\":5}},"
                            "\"limits\":{\"memory_bytes\":67108864,\"cpus\":1.5,\"pids\":64,"
                            "\"output_bytes\":1024,\"log_bytes\":4096},\"network\":\"egress\"}}",
                            &req, &st, &err),
                     0);
    const cn_task_spec *t = req.task;
    assert_non_null(t);
    assert_string_equal(req.run_id, "j1.2");
    assert_int_equal(req.gpus, 0);
    assert_string_equal(t->image, "localhost/py:1");
    assert_int_equal(t->argc, 3);
    assert_string_equal(t->argv[2], "x");
    assert_null(t->argv[3]);
    assert_int_equal(t->nenv, 2);
    assert_string_equal(t->env[0], "LR=0.1");
    assert_string_equal(t->workdir, "/kowloon/work/sub");
    assert_int_equal(t->nfiles, 3);
    assert_string_equal(t->files[0].path, "a/b.py");
    assert_memory_equal(t->files[0].data, "print(1)", 8);
    assert_int_equal(t->files[1].size, 3);
    assert_int_equal(t->files[2].size, 9);
    assert_null(t->files[2].data);
    assert_int_equal(t->ninputs, 3);
    assert_string_equal(t->inputs[0].dtype, "float32");
    assert_int_equal(t->inputs[0].ndim, 2);
    assert_int_equal(t->inputs[0].size, 24);
    assert_true(t->inputs[1].npy);
    assert_int_equal(t->inputs[1].data[1], 2);
    assert_string_equal(t->inputs[2].dtype, "");
    assert_int_equal(t->limits.memory_bytes, 64 << 20);
    assert_true(t->limits.cpus == 1.5);
    assert_int_equal(t->limits.pids, 64);
    assert_int_equal(t->network, CN_TASK_NET_EGRESS);
    cn_run_req_clear(&req);
}

static void test_defaults_of_a_minimal_task(void **state)
{
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(decode("{\"job_id\":\"j\",\"attempt\":1,\"task\":{\"image\":\"i\",\"command\":[\"true\"]}}",
                            &req, &st, &err), 0);
    assert_string_equal(req.task->workdir, "/kowloon/work");
    assert_int_equal(req.task->network, CN_TASK_NET_NONE);
    assert_int_equal(req.gpus, 0);   /* a task may have no GPU */
    assert_int_equal(req.task->limits.memory_bytes, 0);   /* the node's default */
    assert_int_equal(req.node_rank, -1);
    cn_run_req_clear(&req);
}

static void test_a_gang_part_needs_no_world_matching_its_gpus(void **state)
{
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(decode("{\"job_id\":\"j\",\"attempt\":1,\"gpus\":0,\"dist\":{\"nodes\":2,\"node_rank\":1},"
                            "\"task\":{\"image\":\"i\",\"command\":[\"true\"]}}", &req, &st, &err), 0);
    assert_int_equal(req.node_rank, 1);
    assert_int_equal(req.nodes, 2);
    cn_run_req_clear(&req);
    /* a kernel still needs both */
    assert_int_equal(decode("{\"job_id\":\"j\",\"attempt\":1,\"kernel\":\"sleep\",\"dist\":{\"nodes\":2,\"node_rank\":1}}",
                            &req, &st, &err), -1);
    assert_string_equal(err.field, "dist");
}

static void test_kernel_and_task_are_exclusive(void **state)
{
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(decode("{\"job_id\":\"j\",\"attempt\":1,\"kernel\":\"sleep\",\"task\":{\"image\":\"i\",\"command\":[\"x\"]}}",
                            &req, &st, &err), -1);
    assert_int_equal(st, 400);
    assert_string_equal(err.field, "task");
}

/* Task members (inside a run request) that decode refuses, with the status
 * and the field it names. */
static const struct {
    const char *task;
    int status;
    const char *field;
} refusals[] = {
    /* environment names a task may not set, or that are not names */
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"KOWLOON_TOKEN\":\"x\"}}", 422, "task.env.KOWLOON_TOKEN"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"MASTER_ADDR\":\"x\"}}", 422, "task.env.MASTER_ADDR"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"WORLD_SIZE\":\"2\"}}", 422, "task.env.WORLD_SIZE"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"CUDA_VISIBLE_DEVICES\":\"0\"}}", 422, "task.env.CUDA_VISIBLE_DEVICES"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"GROUP_RANK\":\"0\"}}", 422, "task.env.GROUP_RANK"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"A-B\":\"x\"}}", 422, "task.env.A-B"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"9A\":\"x\"}}", 422, "task.env.9A"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":{\"A\":1}}", 400, "task.env.A"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"env\":[]}", 400, "task.env"},
    /* paths that leave the folder they are in, or are not plain paths */
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"../a\":{\"text\":\"\"}}}", 422, "task.files.../a"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a/../../b\":{\"text\":\"\"}}}", 422, "task.files.a/../../b"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"/etc/x\":{\"text\":\"\"}}}", 422, "task.files./etc/x"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a//b\":{\"text\":\"\"}}}", 422, "task.files.a//b"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a/\":{\"text\":\"\"}}}", 422, "task.files.a/"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a\\\\b\":{\"text\":\"\"}}}", 422, "task.files.a\\b"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a\\u0001\":{\"text\":\"\"}}}", 422, "task.files.a\001"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a\":{\"text\":\"\"},\"a/b\":{\"text\":\"\"}}}", 422, "task.files.a/b"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a\":{\"b64\":\"!!\"}}}", 422, "task.files.a"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"files\":{\"a\":{\"blob\":\"sha256:zz\",\"size\":1}}}", 422, "task.files.a"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"workdir\":\"rel\"}", 422, "task.workdir"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"workdir\":\"/a/../b\"}", 422, "task.workdir"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"workdir\":\"/\"}", 422, "task.workdir"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"workdir\":\"/kowloon/in/x\"}", 422, "task.workdir"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"workdir\":\"/proc\"}", 422, "task.workdir"},
    /* images, commands, inputs and limits */
    {"{\"image\":\"--privileged\",\"command\":[\"x\"]}", 422, "task.image"},
    {"{\"image\":\"a b\",\"command\":[\"x\"]}", 422, "task.image"},
    {"{\"image\":3,\"command\":[\"x\"]}", 400, "task.image"},
    {"{\"image\":\"i\",\"command\":[]}", 422, "task.command"},
    {"{\"image\":\"i\",\"command\":[\"\"]}", 422, "task.command"},
    {"{\"image\":\"i\",\"command\":\"ls\"}", 400, "task.command"},
    {"{\"image\":\"i\",\"command\":[1]}", 400, "task.command"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"a/b\":{\"b64\":\"\"}}}", 422, "task.inputs.a/b"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"..\":{\"b64\":\"\"}}}", 422, "task.inputs..."},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"manifest.json\":{\"b64\":\"\"}}}", 422, "task.inputs.manifest.json"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"a.b\":{\"b64\":\"\"},\"A_B\":{\"b64\":\"\"}}}", 422, "task.inputs.A_B"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"x.npy\":{\"b64\":\"\"},"
     "\"x\":{\"dtype\":\"uint8\",\"shape\":[0],\"b64\":\"\",\"format\":\"npy\"}}}", 422, "task.inputs.x"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[3],\"b64\":\"AAAA\"}}}",
     422, "task.inputs.x"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"x\":{\"dtype\":\"complex64\",\"shape\":[1],\"b64\":\"\"}}}",
     422, "task.inputs.x"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"x\":{\"b64\":\"\",\"format\":\"npy\"}}}", 422, "task.inputs.x"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"inputs\":{\"x\":{\"b64\":\"\"},\"X\":{\"b64\":\"\"}}}", 422, "task.inputs.X"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"limits\":{\"pids\":1}}", 422, "task.limits.pids"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"limits\":{\"memory_bytes\":1024}}", 422, "task.limits.memory_bytes"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"limits\":{\"cpus\":0}}", 422, "task.limits.cpus"},
    {"{\"image\":\"i\",\"command\":[\"x\"],\"network\":\"host\"}", 422, "task.network"},
};

static void test_bad_task_members_are_refused_naming_the_field(void **state)
{
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++)
        refused(refusals[i].task, refusals[i].status, refusals[i].field);
}

/* svc_task.c's checks let ordinary names, paths and workdirs through. */
static void test_ordinary_names_paths_and_workdirs_pass_the_checks(void **state)
{
    char why[200], env[80];
    assert_int_equal(svc_task_env_name_check("PATH", why, sizeof why), 0);
    assert_int_equal(svc_task_env_name_check("HOME", why, sizeof why), 0);
    assert_int_equal(svc_task_env_name_check("_x1", why, sizeof why), 0);
    assert_int_equal(svc_task_path_check("src/train.py", why, sizeof why), 0);
    assert_int_equal(svc_task_path_check(".hidden/x-1_2+3@4=5,6", why, sizeof why), 0);
    assert_int_equal(svc_task_path_check("my notes: v2.txt", why, sizeof why), 0);
    assert_int_equal(svc_task_workdir_check("/kowloon/work/a b", why, sizeof why), 0);
    assert_int_equal(svc_task_workdir_check("/kowloon/input", why, sizeof why), 0);
    assert_int_equal(svc_task_input_name_check("train-1.npy", why, sizeof why), 0);
    svc_task_input_env_name("train-1.npy", env, sizeof env);
    assert_string_equal(env, "TRAIN_1_NPY");
}

static void test_dtypes_have_sizes_and_descrs(void **state)
{
    assert_int_equal(svc_task_dtype_size("float16"), 2);
    assert_int_equal(svc_task_dtype_size("int64"), 8);
    assert_int_equal(svc_task_dtype_size("bool"), 1);
    assert_int_equal(svc_task_dtype_size("str"), 0);
    assert_string_equal(svc_task_dtype_descr("uint8"), "|u1");
    assert_string_equal(svc_task_dtype_descr("float32"), "<f4");
    assert_null(svc_task_dtype_descr(NULL));
}

/* contract §5: how each way of ending reads */
static void test_end_codes_follow_the_contract(void **state)
{
    assert_null(cn_task_end_code(&(cn_task_end){.status = 0}));
    assert_string_equal(cn_task_end_code(&(cn_task_end){.status = 3}), "task_failed");
    assert_string_equal(cn_task_end_code(&(cn_task_end){.status = 125}), "task_failed");
    assert_string_equal(cn_task_end_code(&(cn_task_end){.status = 137, .oom = 1}), "oom");
    assert_null(cn_task_end_code(&(cn_task_end){.status = 0, .oom = 1}));
    assert_string_equal(cn_task_end_code(&(cn_task_end){.status = 125, .engine_error = 1}), "engine_error");
    assert_string_equal(cn_task_end_code(&(cn_task_end){.status = 125, .engine_error = 1, .image_missing = 1}),
                        "image_not_found");
    assert_string_equal(cn_task_end_code(&(cn_task_end){.stop = CN_TASK_STOP_CANCEL, .status = 143}), "cancelled");
    assert_string_equal(cn_task_end_code(&(cn_task_end){.stop = CN_TASK_STOP_QUOTA, .status = 0}), "output_quota");
}

/* A node without an engine takes no task: the gateway places it elsewhere. */
static void test_a_node_without_an_engine_refuses_tasks(void **state)
{
    cn_backend backend;
    cn_runs *runs;
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(cn_backend_open(&backend, "cpu", NULL), 0);
    cn_runs_opts o = {.slots = 1, .threads = 1, .backend = &backend};
    assert_int_equal(cn_runs_create(&o, &runs), 0);
    assert_int_equal(decode("{\"job_id\":\"j\",\"attempt\":1,\"task\":{\"image\":\"i\",\"command\":[\"true\"]}}",
                            &req, &st, &err), 0);
    assert_int_equal(cn_runs_submit(runs, &req, NULL, &err), CN_ENOTSUP);
    assert_string_equal(err.field, "task");
    cn_run_req_clear(&req);
    cn_runs_destroy(runs);
    cn_backend_close(&backend);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_full_task_decodes),
        cmocka_unit_test(test_defaults_of_a_minimal_task),
        cmocka_unit_test(test_a_gang_part_needs_no_world_matching_its_gpus),
        cmocka_unit_test(test_kernel_and_task_are_exclusive),
        cmocka_unit_test(test_bad_task_members_are_refused_naming_the_field),
        cmocka_unit_test(test_ordinary_names_paths_and_workdirs_pass_the_checks),
        cmocka_unit_test(test_dtypes_have_sizes_and_descrs),
        cmocka_unit_test(test_end_codes_follow_the_contract),
        cmocka_unit_test(test_a_node_without_an_engine_refuses_tasks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
