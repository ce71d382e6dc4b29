/* test_bench_scalesim.c — kl-scalesim's node bookkeeping (bench/scalesim.h):
 * run requests parsed as the gateway sends them, devices held and freed,
 * over-commits counted, durations compressed, the JSON a node sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "scalesim.h"

#define JOB "0b6f3c7e-0000-4000-8000-000000000001"

static ss_node node_of(int gpus)
{
    ss_node n;
    memset(&n, 0, sizeof n);
    n.ngpus = n.slots = gpus;
    return n;
}

static ss_run parse(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    ss_run r;
    char err[128];
    assert_int_equal(ss_run_parse(j, &r, err, sizeof err), 0);
    json_decref(j);
    return r;
}

static void test_a_lease_run_gives_job_attempt_seconds_devices_and_gang_place(void **state)
{
    ss_run r = parse("{\"job_id\": \"" JOB "\", \"attempt\": 2, \"kernel\": \"sleep\", "
                     "\"params\": {\"seconds\": 42.5}, \"gpus\": 8, \"gpu_ids\": [0,1,2,3,4,5,6,7], "
                     "\"dist\": {\"nodes\": 16, \"node_rank\": 3, \"world\": 128}}");
    assert_string_equal(r.job_id, JOB);
    assert_int_equal(r.attempt, 2);
    assert_true(r.seconds == 42.5);
    assert_int_equal(r.ngpu, 8);
    assert_int_equal(r.gpu[7], 7);
    assert_int_equal(r.nodes, 16);
    assert_int_equal(r.node_rank, 3);
    ss_run one = parse("{\"job_id\": \"" JOB "\", \"attempt\": 1, \"params\": {\"seconds\": 1}, "
                       "\"gpu_ids\": [5]}");
    assert_int_equal(one.node_rank, -1);
    assert_int_equal(one.nodes, 1);
}

static void test_a_run_without_job_or_with_a_bad_gang_place_is_refused(void **state)
{
    const char *bad[] = {"{\"attempt\": 1}", "{\"job_id\": \"x\", \"attempt\": 1}",
                         "{\"job_id\": \"" JOB "\"}",
                         "{\"job_id\": \"" JOB "\", \"attempt\": 1, \"dist\": {\"nodes\": 2, \"node_rank\": 2}}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        ss_run r;
        char err[128] = "";
        assert_int_equal(ss_run_parse(j, &r, err, sizeof err), -1);
        assert_true(err[0] != '\0');
        json_decref(j);
    }
}

static void test_devices_held_twice_count_as_an_over_commit(void **state)
{
    ss_node n = node_of(8);
    ss_run a = parse("{\"job_id\": \"" JOB "\", \"attempt\": 1, \"gpu_ids\": [0,1,2,3]}");
    ss_run b = parse("{\"job_id\": \"" JOB "\", \"attempt\": 2, \"gpu_ids\": [4,5,6,7]}");
    ss_run c = parse("{\"job_id\": \"" JOB "\", \"attempt\": 3, \"gpu_ids\": [3,4]}");
    assert_int_equal(ss_node_take(&n, &a, 1000)->overcommit, 0);
    assert_int_equal(ss_node_take(&n, &b, 1000)->overcommit, 0);
    assert_int_equal(n.overcommits, 0);
    ss_run *got = ss_node_take(&n, &c, 1000);
    assert_int_equal(got->overcommit, 2);
    assert_int_equal(n.overcommits, 1);
    assert_int_equal(n.gpu_busy[3], 2);
}

static void test_a_device_the_node_lacks_is_an_over_commit_and_so_is_a_run_past_the_slots(void **state)
{
    ss_node n = node_of(2);
    ss_run a = parse("{\"job_id\": \"" JOB "\", \"attempt\": 1, \"gpu_ids\": [2]}");
    assert_int_equal(ss_node_take(&n, &a, 0)->overcommit, 1);
    ss_run b = parse("{\"job_id\": \"" JOB "\", \"attempt\": 2, \"gpu_ids\": [0]}");
    ss_run c = parse("{\"job_id\": \"" JOB "\", \"attempt\": 3, \"gpu_ids\": [1]}");
    ss_node_take(&n, &b, 0);
    assert_int_equal(n.slot_overcommits, 0);
    ss_node_take(&n, &c, 0);   /* a third run on two slots */
    assert_int_equal(n.slot_overcommits, 1);
}

static void test_ending_frees_devices_from_that_moment_and_the_next_run_is_runnable_from_it(void **state)
{
    ss_node n = node_of(8);
    for (int g = 0; g < 8; g++)
        n.gpu_free_since[g] = 100;
    ss_run a = parse("{\"job_id\": \"" JOB "\", \"attempt\": 1, \"gpu_ids\": [0,1]}");
    ss_run *r = ss_node_take(&n, &a, 500);
    assert_int_equal(r->runnable, 100);
    assert_int_equal(r->state, SS_RUNNING);
    assert_int_equal(r->t_start, 500);
    assert_int_equal(ss_node_active(&n), 1);
    ss_node_end(&n, r, 2000);
    assert_int_equal(r->state, SS_ENDED);
    assert_int_equal(n.seq, 1);
    assert_int_equal(ss_node_active(&n), 0);
    assert_int_equal(n.gpu_busy[0], 0);
    assert_int_equal(n.gpu_free_since[1], 2000);
    ss_node_end(&n, r, 3000);   /* a second end changes nothing */
    assert_int_equal(n.seq, 1);
    /* held until the gateway records the report */
    assert_ptr_equal(ss_node_find(&n, JOB, 1), r);
    ss_run b = parse("{\"job_id\": \"" JOB "\", \"attempt\": 2, \"gpu_ids\": [1,2]}");
    assert_int_equal(ss_node_take(&n, &b, 2500)->runnable, 2000);
    ss_node_forget(&n, r);
    assert_null(ss_node_find(&n, JOB, 1));
}

static void test_a_gang_part_waits_for_its_peers_before_its_clock_starts(void **state)
{
    ss_node n = node_of(8);
    ss_run a = parse("{\"job_id\": \"" JOB "\", \"attempt\": 1, \"gpu_ids\": [0,1,2,3,4,5,6,7], "
                     "\"dist\": {\"nodes\": 2, \"node_rank\": 1}}");
    ss_run *r = ss_node_take(&n, &a, 10);
    assert_int_equal(r->state, SS_RDV);
    assert_int_equal(ss_node_active(&n), 1);
    ss_run_start(r, 50);
    assert_int_equal(r->state, SS_RUNNING);
    assert_int_equal(r->t_start, 50);
}

/* Rank 0 puts the id then waits for every other rank's ready; the others
 * get the id then say ready: nobody starts before all have met. */
static void test_the_gang_meets_as_nccl_starts(void **state)
{
    ss_run r0 = {.node_rank = 0, .nodes = 3}, r2 = {.node_rank = 2, .nodes = 3};
    int put;
    char key[64];
    const char *want0[] = {"ncclid", "ready-1", "ready-2"};
    for (int step = 0; step < 3; step++) {
        r0.rdv_step = step;
        assert_int_equal(ss_rdv_next(&r0, &put, key, sizeof key), 1);
        assert_int_equal(put, step == 0);
        assert_string_equal(key, want0[step]);
    }
    r0.rdv_step = 3;
    assert_int_equal(ss_rdv_next(&r0, &put, key, sizeof key), 0);
    assert_int_equal(ss_rdv_next(&r2, &put, key, sizeof key), 1);
    assert_int_equal(put, 0);
    assert_string_equal(key, "ncclid");
    r2.rdv_step = 1;
    assert_int_equal(ss_rdv_next(&r2, &put, key, sizeof key), 1);
    assert_int_equal(put, 1);
    assert_string_equal(key, "ready-2");
    r2.rdv_step = 2;
    assert_int_equal(ss_rdv_next(&r2, &put, key, sizeof key), 0);
}

static void test_time_is_compressed_by_the_factor(void **state)
{
    assert_int_equal(ss_duration_ms(60, 1), 60000);
    assert_int_equal(ss_duration_ms(60, 60), 1000);
    assert_int_equal(ss_duration_ms(0.001, 100), 1);   /* never 0 */
    assert_int_equal(ss_duration_ms(10, 0), 10000);    /* a bad factor counts as 1 */
}

static void test_the_heartbeat_lists_held_runs_and_busy_devices(void **state)
{
    ss_node n = node_of(4);
    ss_run a = parse("{\"job_id\": \"" JOB "\", \"attempt\": 3, \"gpu_ids\": [2]}");
    ss_node_take(&n, &a, 0);
    json_t *hb = ss_heartbeat_json(&n, 1000);
    assert_int_equal(json_integer_value(json_object_get(hb, "running")), 1);
    assert_int_equal(json_integer_value(json_object_get(hb, "slots")), 4);
    assert_string_equal(json_string_value(json_array_get(json_object_get(hb, "runs"), 0)), JOB ".3");
    json_t *gpus = json_object_get(json_object_get(hb, "state"), "gpus");
    assert_int_equal(json_array_size(gpus), 4);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(gpus, 2), "util")), 100);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(gpus, 1), "util")), 0);
    json_decref(hb);
}

static void test_reports_say_how_the_run_ended(void **state)
{
    ss_node n = node_of(8);
    ss_run a = parse("{\"job_id\": \"" JOB "\", \"attempt\": 1, \"params\": {\"seconds\": 2}, "
                     "\"gpu_ids\": [0], \"dist\": {\"nodes\": 2, \"node_rank\": 1}}");
    ss_run *r = ss_node_take(&n, &a, 0);
    ss_run_start(r, 1000);
    ss_node_end(&n, r, 3000);
    json_t *rep = ss_report_json(r, "Sim GPU");
    assert_string_equal(json_string_value(json_object_get(rep, "state")), "succeeded");
    /* the usage a real node measures: the gateway's fast path */
    json_t *u = json_object_get(rep, "usage");
    assert_true(json_number_value(json_object_get(u, "run_s")) == 2.0);
    assert_int_equal(json_integer_value(json_object_get(u, "gpus")), 1);
    assert_string_equal(json_string_value(json_object_get(u, "gpu_model")), "Sim GPU");
    assert_string_equal(json_string_value(json_object_get(rep, "run_id")), JOB ".1");
    assert_int_equal(json_integer_value(json_object_get(rep, "node_rank")), 1);
    json_t *slept = json_object_get(json_object_get(rep, "outputs"), "slept");
    assert_true(json_number_value(json_array_get(json_object_get(slept, "data"), 0)) == 2.0);
    json_decref(rep);
    r->cancelled = 1;
    rep = ss_report_json(r, "Sim GPU");
    assert_string_equal(json_string_value(json_object_get(rep, "state")), "cancelled");
    assert_null(json_object_get(rep, "outputs"));
    assert_null(json_object_get(rep, "usage"));
    json_decref(rep);
}

static void test_registration_offers_one_slot_per_gpu(void **state)
{
    ss_node n = node_of(8);
    json_t *reg = ss_register_json(&n, "sim-0001", "Sim GPU", 80LL << 30);
    assert_int_equal(json_integer_value(json_object_get(reg, "slots")), 8);
    assert_int_equal(json_array_size(json_object_get(reg, "gpus")), 8);
    assert_string_equal(json_string_value(json_object_get(reg, "backend")), "cuda");
    json_decref(reg);
}

/* The simulator spreads its nodes' exchanges over host names that all
 * resolve to the gateway (libcurl walks one host's idle connections for
 * every new exchange). */
static void test_the_gateway_gets_host_names_that_resolve_to_its_address(void **state)
{
    (void)state;
    char base[64], entry[128];
    assert_int_equal(ss_gw_host("http://127.0.0.1:40443", 7, base, sizeof base, entry, sizeof entry), 0);
    assert_string_equal(base, "http://node-7.sim:40443");
    assert_string_equal(entry, "node-7.sim:40443:127.0.0.1");
    /* anything else is used as it is */
    assert_int_equal(ss_gw_host("http://localhost:40443", 0, base, sizeof base, entry, sizeof entry), -1);
    assert_int_equal(ss_gw_host("http://127.0.0.1:40443/", 0, base, sizeof base, entry, sizeof entry), -1);
    assert_int_equal(ss_gw_host("https://127.0.0.1:40443", 0, base, sizeof base, entry, sizeof entry), -1);
    assert_int_equal(ss_gw_host("http://127.0.0.1", 0, base, sizeof base, entry, sizeof entry), -1);
    assert_int_equal(ss_gw_host("http://127.0.0.1:0", 0, base, sizeof base, entry, sizeof entry), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_lease_run_gives_job_attempt_seconds_devices_and_gang_place),
        cmocka_unit_test(test_a_run_without_job_or_with_a_bad_gang_place_is_refused),
        cmocka_unit_test(test_devices_held_twice_count_as_an_over_commit),
        cmocka_unit_test(test_a_device_the_node_lacks_is_an_over_commit_and_so_is_a_run_past_the_slots),
        cmocka_unit_test(test_ending_frees_devices_from_that_moment_and_the_next_run_is_runnable_from_it),
        cmocka_unit_test(test_a_gang_part_waits_for_its_peers_before_its_clock_starts),
        cmocka_unit_test(test_the_gang_meets_as_nccl_starts),
        cmocka_unit_test(test_time_is_compressed_by_the_factor),
        cmocka_unit_test(test_the_heartbeat_lists_held_runs_and_busy_devices),
        cmocka_unit_test(test_reports_say_how_the_run_ended),
        cmocka_unit_test(test_registration_offers_one_slot_per_gpu),
        cmocka_unit_test(test_the_gateway_gets_host_names_that_resolve_to_its_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
