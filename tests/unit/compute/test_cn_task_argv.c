/* test_cn_task_argv.c — the engine's command line and the program's
 * environment (compute/task/task_argv.c): every isolation flag of contract §4,
 * GPUs as podman (CDI) and docker name them, the image ending the engine's
 * options, mounts the -v syntax could misread refused, and the variables
 * torchrun, torch.distributed and jax.distributed read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "task_argv.h"

/* Index of s in v, or -1. */
static int find(const cn_strv *v, const char *s)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->v[i], s) == 0)
            return i;
    return -1;
}

static void has(const cn_strv *v, const char *s)
{
    if (find(v, s) < 0)
        fail_msg("missing %s", s);
}

static char *prog[] = {"python3", "-c", "print(1)", NULL};
static cn_task_mount mounts[] = {
    {.src = "/blobs/sha256/ab/abcd", .dst = "/kowloon/in/x", .ro = 1},
    {.src = "/scratch/r/in", .dst = "/kowloon/in", .ro = 1},
    {.src = "/scratch/r/out", .dst = "/kowloon/out", .ro = 0},
};
static char *env[] = {"A=1", "KOWLOON_JOB_ID=j", NULL};
static int gpus[] = {1, 3};

static cn_task_argv_in base(cn_engine_kind kind)
{
    return (cn_task_argv_in){
        .kind = kind, .engine = kind == CN_ENGINE_PODMAN ? "/usr/bin/podman" : "/usr/bin/docker",
        .name = "kowloon-0a0b0c0d-j.1", .run_label = "j.1", .node_label = "node-a",
        .gateway_label = "http://gw:8080", .uid = 65534, .gid = 65534, .memory_bytes = 1 << 30,
        .cpus = 2, .pids = 512, .network = CN_TASK_NET_NONE,
        .tmp_bytes = 1 << 30, .nmounts = 3, .mounts = mounts, .workdir = "/kowloon/work",
        .nenv = 2, .env = env, .image = "localhost/py:1", .argc = 3, .argv = prog};
}

static void test_podman_command_line_has_every_isolation_flag(void **state)
{
    cn_strv v = {0};
    char why[256];
    cn_task_argv_in in = base(CN_ENGINE_PODMAN);
    assert_int_equal(cn_task_argv_build(&in, &v, why, sizeof why), 0);
    assert_string_equal(v.v[0], "/usr/bin/podman");
    assert_string_equal(v.v[1], "run");
    has(&v, "--name=kowloon-0a0b0c0d-j.1");
    has(&v, "--label=kowloon.run=j.1");
    has(&v, "--label=kowloon.node=node-a");
    has(&v, "--label=kowloon.gateway=http://gw:8080");
    has(&v, "--user=65534:65534");
    has(&v, "--read-only");
    has(&v, "--security-opt=no-new-privileges");
    has(&v, "--cap-drop=ALL");
    has(&v, "--pids-limit=512");
    has(&v, "--memory=1073741824");
    has(&v, "--memory-swap=1073741824");
    has(&v, "--cpus=2.00");
    has(&v, "--network=none");
    has(&v, "--pull=never");
    has(&v, "--log-driver=none");
    has(&v, "--init");
    assert_true(find(&v, "--rm") < 0);
    has(&v, "--volume=/blobs/sha256/ab/abcd:/kowloon/in/x:ro");
    has(&v, "--volume=/scratch/r/out:/kowloon/out:rw");
    has(&v, "--workdir=/kowloon/work");
    assert_true(find(&v, "--privileged") < 0);
    /* environment as separate words, never through a shell */
    int e = find(&v, "A=1");
    assert_true(e > 0);
    assert_string_equal(v.v[e - 1], "--env");
    /* the image ends the options; the program's words follow untouched */
    int img = find(&v, "localhost/py:1");
    assert_int_equal(img, v.n - 4);
    assert_string_equal(v.v[img + 1], "python3");
    assert_string_equal(v.v[img + 3], "print(1)");
    assert_null(v.v[v.n]);
    for (int i = 0; i < img; i++)
        assert_true(strncmp(v.v[i], "--gpus", 6) != 0 && strncmp(v.v[i], "--device", 8) != 0);
    cn_strv_free(&v);
}

static void test_gpus_are_cdi_devices_for_podman_and_a_quoted_list_for_docker(void **state)
{
    cn_strv v = {0};
    char why[256];
    cn_task_argv_in in = base(CN_ENGINE_PODMAN);
    in.ngpus = 2;
    in.gpus = gpus;
    assert_int_equal(cn_task_argv_build(&in, &v, why, sizeof why), 0);
    has(&v, "--device=nvidia.com/gpu=1");
    has(&v, "--device=nvidia.com/gpu=3");
    cn_strv_free(&v);
    in = base(CN_ENGINE_DOCKER);
    in.ngpus = 2;
    in.gpus = gpus;
    assert_int_equal(cn_task_argv_build(&in, &v, why, sizeof why), 0);
    assert_string_equal(v.v[0], "/usr/bin/docker");
    has(&v, "--gpus=\"device=1,3\"");
    has(&v, "--security-opt=no-new-privileges");
    cn_strv_free(&v);
}

static void test_network_modes_and_a_cgroup_parent(void **state)
{
    cn_strv v = {0};
    char why[256];
    cn_task_argv_in in = base(CN_ENGINE_PODMAN);
    in.network = CN_TASK_NET_PEERS;
    in.memory_bytes = 0;   /* the parent cgroup holds the limit */
    in.cgroup_parent = "/kowloon/0a0b0c0d/j.1";
    in.rm = 1;   /* the node tells an OOM itself: the engine may remove it */
    assert_int_equal(cn_task_argv_build(&in, &v, why, sizeof why), 0);
    has(&v, "--rm");
    has(&v, "--network=host");
    has(&v, "--cgroup-parent=/kowloon/0a0b0c0d/j.1");
    for (int i = 0; i < v.n; i++)
        assert_true(strncmp(v.v[i], "--memory", 8) != 0);
    cn_strv_free(&v);
    in = base(CN_ENGINE_PODMAN);
    in.network = CN_TASK_NET_EGRESS;   /* the engine's default network */
    assert_int_equal(cn_task_argv_build(&in, &v, why, sizeof why), 0);
    for (int i = 0; i < v.n; i++)
        assert_true(strncmp(v.v[i], "--network", 9) != 0);
    cn_strv_free(&v);
}

static void test_a_mount_the_volume_syntax_would_misread_is_refused(void **state)
{
    cn_strv v = {0};
    char why[256];
    cn_task_mount bad[] = {{.src = "/data/a:b", .dst = "/kowloon/in/x", .ro = 1}};
    cn_task_argv_in in = base(CN_ENGINE_PODMAN);
    in.mounts = bad;
    in.nmounts = 1;
    assert_int_equal(cn_task_argv_build(&in, &v, why, sizeof why), -1);
    assert_non_null(strstr(why, "/data/a:b"));
    assert_null(v.v);
    cn_task_mount rel[] = {{.src = "data", .dst = "/kowloon/in/x", .ro = 1}};
    in.mounts = rel;
    assert_int_equal(cn_task_argv_build(&in, &v, why, sizeof why), -1);
}

static const char *get(const cn_strv *v, const char *name)
{
    size_t n = strlen(name);
    const char *last = NULL;
    for (int i = 0; i < v->n; i++)
        if (strncmp(v->v[i], name, n) == 0 && v->v[i][n] == '=')
            last = v->v[i] + n + 1;
    return last;
}

static void test_environment_of_a_single_part(void **state)
{
    char *tenv[] = {"LR=0.1", NULL};
    cn_task_input ins[2] = {{.name = "weights.bin"}, {.name = "x", .npy = 1}};
    cn_task_spec spec = {.nenv = 1, .env = tenv, .ninputs = 2, .inputs = ins};
    cn_task_env_in in = {.job_id = "job1", .attempt = 2, .node_rank = 0, .nnodes = 1, .gpus = 2,
                         .spec = &spec};
    cn_strv v = {0};
    assert_int_equal(cn_task_env_build(&in, &v), 0);
    assert_string_equal(v.v[0], "LR=0.1");
    assert_string_equal(get(&v, "KOWLOON_JOB_ID"), "job1");
    assert_string_equal(get(&v, "KOWLOON_ATTEMPT"), "2");
    assert_string_equal(get(&v, "KOWLOON_INPUT_WEIGHTS_BIN"), "/kowloon/in/weights.bin");
    assert_string_equal(get(&v, "KOWLOON_INPUT_X"), "/kowloon/in/x.npy");
    assert_string_equal(get(&v, "KOWLOON_INPUTS"), "/kowloon/in");
    assert_string_equal(get(&v, "KOWLOON_OUT"), "/kowloon/out");
    assert_string_equal(get(&v, "KOWLOON_PROGRESS"), "/kowloon/meta/progress.jsonl");
    assert_string_equal(get(&v, "HOME"), "/kowloon/work");
    /* the engine shows the placed devices as 0..n-1 */
    assert_string_equal(get(&v, "CUDA_VISIBLE_DEVICES"), "0,1");
    assert_string_equal(get(&v, "LOCAL_WORLD_SIZE"), "2");
    assert_string_equal(get(&v, "WORLD_SIZE"), "1");
    assert_null(get(&v, "MASTER_ADDR"));
    cn_strv_free(&v);
    /* a HOME of the tenant's stays */
    char *home[] = {"HOME=/kowloon/work/h", NULL};
    spec.nenv = 1;
    spec.env = home;
    assert_int_equal(cn_task_env_build(&in, &v), 0);
    assert_string_equal(get(&v, "HOME"), "/kowloon/work/h");
    cn_strv_free(&v);
}

static void test_environment_of_a_gang_part_is_what_torchrun_reads(void **state)
{
    cn_task_spec spec = {0};
    cn_task_env_in in = {.job_id = "j", .attempt = 1, .node_rank = 1, .nnodes = 3, .gpus = 0,
                         .master_addr = "10.0.0.7", .master_port = 29500, .spec = &spec};
    cn_strv v = {0};
    assert_int_equal(cn_task_env_build(&in, &v), 0);
    assert_string_equal(get(&v, "MASTER_ADDR"), "10.0.0.7");
    assert_string_equal(get(&v, "MASTER_PORT"), "29500");
    assert_string_equal(get(&v, "NNODES"), "3");
    assert_string_equal(get(&v, "NODE_RANK"), "1");
    assert_string_equal(get(&v, "RANK"), "1");
    assert_string_equal(get(&v, "WORLD_SIZE"), "3");
    assert_string_equal(get(&v, "LOCAL_RANK"), "0");
    assert_string_equal(get(&v, "LOCAL_WORLD_SIZE"), "1");
    assert_string_equal(get(&v, "KOWLOON_MASTER_ADDR"), "10.0.0.7");
    assert_string_equal(get(&v, "KOWLOON_WORLD_SIZE"), "3");
    assert_null(get(&v, "CUDA_VISIBLE_DEVICES"));
    assert_null(get(&v, "GLOO_SOCKET_IFNAME"));      /* no interface known */
    cn_strv_free(&v);
    /* the interface of the node's --dist-host, for Gloo and NCCL (exact) */
    in.ifname = "eth1";
    assert_int_equal(cn_task_env_build(&in, &v), 0);
    assert_string_equal(get(&v, "GLOO_SOCKET_IFNAME"), "eth1");
    assert_string_equal(get(&v, "NCCL_SOCKET_IFNAME"), "=eth1");
    cn_strv_free(&v);
    /* ... unless the tenant chose: theirs is the only one */
    char *tenv[] = {"NCCL_SOCKET_IFNAME=ib0", "GLOO_SOCKET_IFNAME=ib0", NULL};
    spec.nenv = 2;
    spec.env = tenv;
    assert_int_equal(cn_task_env_build(&in, &v), 0);
    int nccl = 0, gloo = 0;
    for (int i = 0; i < v.n; i++) {
        nccl += strncmp(v.v[i], "NCCL_SOCKET_IFNAME=", 19) == 0;
        gloo += strncmp(v.v[i], "GLOO_SOCKET_IFNAME=", 19) == 0;
    }
    assert_int_equal(nccl, 1);
    assert_int_equal(gloo, 1);
    assert_string_equal(get(&v, "NCCL_SOCKET_IFNAME"), "ib0");
    cn_strv_free(&v);
    /* a single part gets none */
    in.master_addr = NULL;
    spec.nenv = 0;
    assert_int_equal(cn_task_env_build(&in, &v), 0);
    assert_null(get(&v, "GLOO_SOCKET_IFNAME"));
    assert_null(get(&v, "NCCL_SOCKET_IFNAME"));
    cn_strv_free(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_podman_command_line_has_every_isolation_flag),
        cmocka_unit_test(test_gpus_are_cdi_devices_for_podman_and_a_quoted_list_for_docker),
        cmocka_unit_test(test_network_modes_and_a_cgroup_parent),
        cmocka_unit_test(test_a_mount_the_volume_syntax_would_misread_is_refused),
        cmocka_unit_test(test_environment_of_a_single_part),
        cmocka_unit_test(test_environment_of_a_gang_part_is_what_torchrun_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
