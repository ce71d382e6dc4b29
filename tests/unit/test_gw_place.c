/* test_gw_place.c — the scheduler's placement choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "scheduler.h"

static void test_least_loaded_node_wins(void **state)
{
    gw_place_node n[] = {
        {"a", "cpu", 4, 3, 0, 1},
        {"b", "cpu", 4, 1, 0, 1},
        {"c", "cpu", 2, 1, 0, 1},
    };
    assert_int_equal(gw_place(n, 3, "any", 1), 1);
}

static void test_load_is_relative_to_slots(void **state)
{
    /* 2 of 8 busy (25 %) is less loaded than 1 of 2 (50 %). */
    gw_place_node n[] = {{"small", "cpu", 2, 1, 0, 1}, {"big", "cpu", 8, 2, 0, 1}};
    assert_int_equal(gw_place(n, 2, "any", 1), 1);
}

static void test_ties_go_to_more_free_slots_then_name(void **state)
{
    gw_place_node n[] = {{"b", "cpu", 2, 0, 0, 1}, {"a", "cpu", 4, 0, 0, 1}, {"c", "cpu", 4, 0, 0, 1}};
    assert_int_equal(gw_place(n, 3, "any", 1), 1);
    gw_place_node m[] = {{"b", "cpu", 2, 0, 0, 1}, {"a", "cpu", 2, 0, 0, 1}};
    assert_int_equal(gw_place(m, 2, "any", 1), 1);
}

static void test_full_down_and_backed_off_nodes_are_skipped(void **state)
{
    gw_place_node n[] = {
        {"full", "cpu", 2, 2, 0, 1},
        {"down", "cpu", 2, 0, 0, 0},
    };
    assert_int_equal(gw_place(n, 2, "any", 1), -1);
    n[1].available = 1;
    assert_int_equal(gw_place(n, 2, "any", 1), 1);
}

static void test_backend_must_match(void **state)
{
    gw_place_node n[] = {{"cpu-1", "cpu", 4, 0, 0, 1}, {"gpu-1", "cuda", 4, 3, 1, 1}};
    assert_int_equal(gw_place(n, 2, "cuda", 1), 1);
    assert_int_equal(gw_place(n, 2, "cpu", 1), 0);
    assert_int_equal(gw_place(n, 2, "any", 1), 0);
}

static void test_cuda_job_needs_enough_gpus(void **state)
{
    gw_place_node n[] = {{"one", "cuda", 4, 0, 1, 1}, {"eight", "cuda", 4, 2, 8, 1}};
    assert_int_equal(gw_place(n, 2, "cuda", 4), 1);
    assert_int_equal(gw_place(n, 2, "cuda", 16), -1);
}

static void test_no_nodes_means_no_placement(void **state)
{
    assert_int_equal(gw_place(NULL, 0, "any", 1), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_least_loaded_node_wins),
        cmocka_unit_test(test_load_is_relative_to_slots),
        cmocka_unit_test(test_ties_go_to_more_free_slots_then_name),
        cmocka_unit_test(test_full_down_and_backed_off_nodes_are_skipped),
        cmocka_unit_test(test_backend_must_match),
        cmocka_unit_test(test_cuda_job_needs_enough_gpus),
        cmocka_unit_test(test_no_nodes_means_no_placement),
    };
    return cmocka_run_group_tests_name("gw_place", tests, NULL, NULL);
}
