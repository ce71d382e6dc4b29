/* test_cn_slurm.c — a node's allocation from the SLURM_* environment
 * (--slurm): its name, CPUs, GPUs, and the slots and threads they give; a
 * malformed or missing variable is refused with its name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cn_slurm.h"

/* The environment a test gives: NULL-terminated {name, value} pairs. */
static const char *const *fake_env;

static const char *fake_getenv(const char *name)
{
    for (const char *const *p = fake_env; p && p[0]; p += 2)
        if (strcmp(p[0], name) == 0)
            return p[1];
    return NULL;
}

static int read_env(const char *const *env, cn_slurm *s, char *err)
{
    fake_env = env;
    err[0] = '\0';
    return cn_slurm_read(fake_getenv, s, err, 256);
}

/* Reads env, expecting it accepted; the allocation goes to *s. */
static void read_ok(const char *const *env, cn_slurm *s)
{
    char err[256];
    if (read_env(env, s, err) != 0)
        fail_msg("refused: %s", err);
}

static void expect_refused(const char *const *env, const char *needle)
{
    cn_slurm s;
    char err[256];
    assert_int_equal(read_env(env, &s, err), -1);
    if (!strstr(err, needle))
        fail_msg("error \"%s\" does not name %s", err, needle);
}

/* Reads env, expecting it accepted with the ngpus GPUs gpus, taken from the
 * variable from; the allocation goes to *s. */
static void expect_gpus(const char *const *env, const char *gpus, const char *from, int ngpus,
                        cn_slurm *s)
{
    read_ok(env, s);
    assert_string_equal(s->gpus, gpus);
    assert_string_equal(s->gpus_from, from);
    assert_int_equal(s->ngpus, ngpus);
}

static void test_cpu_task_is_named_after_host_and_job_and_gets_one_slot_per_cpu(void **state)
{
    (void)state;
    const char *env[] = {"SLURM_JOB_ID", "4242", "SLURMD_NODENAME", "cn017",
                         "SLURM_CPUS_ON_NODE", "8", NULL};
    cn_slurm s;
    read_ok(env, &s);
    assert_string_equal(s.name, "cn017-slurm4242");
    assert_string_equal(s.host, "cn017");
    assert_string_equal(s.job_id, "4242");
    assert_int_equal(s.cpus, 8);
    assert_int_equal(s.ngpus, 0);
    assert_string_equal(s.gpus, "");
    assert_null(s.gpus_from);
    assert_int_equal(cn_slurm_slots(&s), 8);
    assert_int_equal(cn_slurm_threads(&s, cn_slurm_slots(&s)), 1);
    assert_int_equal(cn_slurm_threads(&s, 2), 4);
}

static void test_the_credential_is_kept_on_the_hosts_own_tmp_per_allocation(void **state)
{
    (void)state;
    cn_slurm s;
    const char *job_tmp[] = {"SLURM_JOB_ID", "4242", "SLURMD_NODENAME", "cn017",
                             "SLURM_CPUS_ON_NODE", "8", "TMPDIR", "/scratch/4242", NULL};
    read_ok(job_tmp, &s);
    assert_string_equal(s.state_dir, "/scratch/4242/kowloon-node-4242");
    const char *no_tmp[] = {"SLURM_JOB_ID", "4243", "SLURMD_NODENAME", "cn017",
                            "SLURM_CPUS_ON_NODE", "8", NULL};
    read_ok(no_tmp, &s);
    assert_string_equal(s.state_dir, "/tmp/kowloon-node-4243");
    /* a TMPDIR that is no plain absolute path is not followed */
    const char *odd[] = {"SLURM_JOB_ID", "4244", "SLURMD_NODENAME", "cn017",
                         "SLURM_CPUS_ON_NODE", "8", "TMPDIR", "scratch/../etc", NULL};
    read_ok(odd, &s);
    assert_string_equal(s.state_dir, "/tmp/kowloon-node-4244");
}

static void test_two_allocations_on_one_host_get_two_names(void **state)
{
    (void)state;
    const char *a[] = {"SLURM_JOB_ID", "7", "SLURMD_NODENAME", "h1", "SLURM_CPUS_ON_NODE", "1", NULL};
    const char *b[] = {"SLURM_JOB_ID", "8", "SLURMD_NODENAME", "h1", "SLURM_CPUS_ON_NODE", "1", NULL};
    cn_slurm sa, sb;
    read_ok(a, &sa);
    read_ok(b, &sb);
    assert_string_not_equal(sa.name, sb.name);
}

static void test_cpus_per_task_wins_over_cpus_on_node(void **state)
{
    (void)state;
    const char *env[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h", "SLURM_CPUS_ON_NODE", "32",
                         "SLURM_CPUS_PER_TASK", "6", NULL};
    cn_slurm s;
    read_ok(env, &s);
    assert_int_equal(s.cpus, 6);
}

static void test_gpus_come_from_cuda_visible_devices_first(void **state)
{
    (void)state;
    const char *env[] = {"SLURM_JOB_ID", "9", "SLURMD_NODENAME", "g1", "SLURM_CPUS_ON_NODE", "16",
                         "CUDA_VISIBLE_DEVICES", "0,1", "SLURM_STEP_GPUS", "4,5",
                         "SLURM_JOB_GPUS", "4,5,6", NULL};
    cn_slurm s;
    expect_gpus(env, "0,1", "CUDA_VISIBLE_DEVICES", 2, &s);
    /* one run per GPU, the CPUs shared out between them */
    assert_int_equal(cn_slurm_slots(&s), 2);
    assert_int_equal(cn_slurm_threads(&s, 2), 8);
}

static void test_step_gpus_then_job_gpus_stand_in_for_cuda_visible_devices(void **state)
{
    (void)state;
    const char *step[] = {"SLURM_JOB_ID", "9", "SLURMD_NODENAME", "g1", "SLURM_CPUS_ON_NODE", "4",
                          "SLURM_STEP_GPUS", "2,3", "SLURM_JOB_GPUS", "1,2,3", NULL};
    const char *job[] = {"SLURM_JOB_ID", "9", "SLURMD_NODENAME", "g1", "SLURM_CPUS_ON_NODE", "4",
                         "SLURM_JOB_GPUS", "1,2,3", NULL};
    cn_slurm s;
    expect_gpus(step, "2,3", "SLURM_STEP_GPUS", 2, &s);
    expect_gpus(job, "1,2,3", "SLURM_JOB_GPUS", 3, &s);
}

static void test_gpu_uuids_and_no_dev_files_are_understood(void **state)
{
    (void)state;
    const char *uuids[] = {"SLURM_JOB_ID", "3", "SLURMD_NODENAME", "g", "SLURM_CPUS_ON_NODE", "2",
                           "CUDA_VISIBLE_DEVICES",
                           "GPU-8f6e2a4c-1b2d-4c3e-9f00-0123456789ab,MIG-1b2d4c3e-9f00-0123", NULL};
    const char *none[] = {"SLURM_JOB_ID", "3", "SLURMD_NODENAME", "g", "SLURM_CPUS_ON_NODE", "2",
                          "CUDA_VISIBLE_DEVICES", "NoDevFiles", NULL};
    cn_slurm s;
    read_ok(uuids, &s);
    assert_int_equal(s.ngpus, 2);
    read_ok(none, &s);
    assert_int_equal(s.ngpus, 0);
    assert_string_equal(s.gpus, "");
    assert_int_equal(cn_slurm_slots(&s), 2);
}

static void test_outside_an_allocation_or_outside_srun_is_refused(void **state)
{
    (void)state;
    const char *nojob[] = {"SLURMD_NODENAME", "h", "SLURM_CPUS_ON_NODE", "1", NULL};
    const char *nohost[] = {"SLURM_JOB_ID", "1", "SLURM_CPUS_ON_NODE", "1", NULL};
    const char *nocpus[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h", NULL};
    expect_refused(nojob, "SLURM_JOB_ID");
    expect_refused(nohost, "SLURMD_NODENAME");
    expect_refused(nocpus, "SLURM_CPUS_ON_NODE");
}

static void test_malformed_values_are_refused_naming_the_variable(void **state)
{
    (void)state;
    const char *job[] = {"SLURM_JOB_ID", "12;rm", "SLURMD_NODENAME", "h", "SLURM_CPUS_ON_NODE", "1", NULL};
    const char *host[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h/../x", "SLURM_CPUS_ON_NODE", "1",
                          NULL};
    const char *cpus[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h", "SLURM_CPUS_ON_NODE", "2(x3)",
                          NULL};
    const char *zero[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h", "SLURM_CPUS_PER_TASK", "0",
                          "SLURM_CPUS_ON_NODE", "4", NULL};
    const char *gpus[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h", "SLURM_CPUS_ON_NODE", "1",
                          "SLURM_JOB_GPUS", "0,,1", NULL};
    const char *word[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h", "SLURM_CPUS_ON_NODE", "1",
                          "CUDA_VISIBLE_DEVICES", "all", NULL};
    const char *many[] = {"SLURM_JOB_ID", "1", "SLURMD_NODENAME", "h", "SLURM_CPUS_ON_NODE", "1",
                          "SLURM_STEP_GPUS", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", NULL};
    expect_refused(job, "SLURM_JOB_ID");
    expect_refused(host, "SLURMD_NODENAME");
    expect_refused(cpus, "SLURM_CPUS_ON_NODE");
    expect_refused(zero, "SLURM_CPUS_PER_TASK");
    expect_refused(gpus, "SLURM_JOB_GPUS");
    expect_refused(word, "CUDA_VISIBLE_DEVICES");
    expect_refused(many, "SLURM_STEP_GPUS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_task_is_named_after_host_and_job_and_gets_one_slot_per_cpu),
        cmocka_unit_test(test_two_allocations_on_one_host_get_two_names),
        cmocka_unit_test(test_the_credential_is_kept_on_the_hosts_own_tmp_per_allocation),
        cmocka_unit_test(test_cpus_per_task_wins_over_cpus_on_node),
        cmocka_unit_test(test_gpus_come_from_cuda_visible_devices_first),
        cmocka_unit_test(test_step_gpus_then_job_gpus_stand_in_for_cuda_visible_devices),
        cmocka_unit_test(test_gpu_uuids_and_no_dev_files_are_understood),
        cmocka_unit_test(test_outside_an_allocation_or_outside_srun_is_refused),
        cmocka_unit_test(test_malformed_values_are_refused_naming_the_variable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
