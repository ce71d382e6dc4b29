/* test_gw_events.c — the pure logic of the event streams: filters, the
 * Last-Event-ID syntax, and when the event log counts as settled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "events.h"

static int parse(gw_event_filter *f, const char *kernel, const char *label, const char *state,
                 const char **field)
{
    char msg[200];
    *field = NULL;
    return gw_event_filter_parse(f, kernel, label, state, field, msg, sizeof(msg));
}

static void test_filter_parses_kernel_label_and_states(void **state)
{
    (void)state;
    gw_event_filter f;
    const char *field;
    assert_int_equal(parse(&f, "gemm", "team:a:b", "queued,failed", &field), 0);
    assert_string_equal(f.kernel, "gemm");
    assert_string_equal(f.label_key, "team");
    assert_string_equal(f.label_value, "a:b");
    assert_int_equal(f.states, gw_event_state_bit("queued") | gw_event_state_bit("failed"));
    assert_int_equal(parse(&f, NULL, NULL, NULL, &field), 0);
    assert_int_equal(f.states, 0);
    assert_string_equal(f.kernel, "");
}

static void test_filter_refuses_bad_values_naming_the_field(void **state)
{
    (void)state;
    gw_event_filter f;
    const char *field;
    struct {
        const char *kernel, *label, *state, *field;
    } bad[] = {
        {"", NULL, NULL, "kernel"},
        {NULL, "nocolon", NULL, "label"},
        {NULL, ":v", NULL, "label"},
        {NULL, "sp ace:v", NULL, "label"},
        {NULL, NULL, "", "state"},
        {NULL, NULL, "done", "state"},
        {NULL, NULL, "queued,", "state"},
        {NULL, NULL, ",queued", "state"},
        {NULL, NULL, "queued,,running", "state"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(&f, bad[i].kernel, bad[i].label, bad[i].state, &field), -EINVAL);
        assert_string_equal(field, bad[i].field);
    }
}

static void test_filter_matches_kernel_label_and_state(void **state)
{
    (void)state;
    gw_event_filter f;
    const char *field;
    json_t *red = json_pack("{s:s, s:s}", "team", "red", "x", "1");
    json_t *blue = json_pack("{s:s}", "team", "blue");
    json_t *num = json_pack("{s:i}", "team", 1);
    assert_int_equal(parse(&f, "gemm", "team:red", "running,succeeded", &field), 0);
    assert_true(gw_event_filter_match(&f, "gemm", red, "running"));
    assert_false(gw_event_filter_match(&f, "saxpy", red, "running"));
    assert_false(gw_event_filter_match(&f, "gemm", blue, "running"));
    assert_false(gw_event_filter_match(&f, "gemm", num, "running"));
    assert_false(gw_event_filter_match(&f, "gemm", NULL, "running"));
    assert_false(gw_event_filter_match(&f, "gemm", red, "queued"));
    assert_int_equal(parse(&f, NULL, NULL, NULL, &field), 0);
    assert_true(gw_event_filter_match(&f, "any", NULL, "cancelled"));
    json_decref(red);
    json_decref(blue);
    json_decref(num);
}

static void test_event_id_is_a_non_negative_decimal(void **state)
{
    (void)state;
    int64_t id;
    assert_int_equal(gw_event_id_parse(NULL, &id), 0);
    assert_int_equal(id, -1);
    assert_int_equal(gw_event_id_parse("0", &id), 0);
    assert_int_equal(id, 0);
    assert_int_equal(gw_event_id_parse("123456789012345678", &id), 0);
    assert_int_equal(id, 123456789012345678LL);
    const char *bad[] = {"", "-1", "1.5", " 1", "1 ", "abc", "1234567890123456789", "0x10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gw_event_id_parse(bad[i], &id), -EINVAL);
}

static void test_horizon_settles_at_once_with_no_writer_in_flight(void **state)
{
    (void)state;
    gw_event_horizon h = {0};
    /* xmin == next: nothing in flight, every id up to 10 is final */
    assert_int_equal(gw_event_horizon_step(&h, 0, 10, 500, 500), 10);
    assert_int_equal(h.ncand, 0);
    assert_int_equal(gw_event_horizon_step(&h, 10, 10, 500, 500), 10);
}

static void test_horizon_waits_for_writers_older_than_its_snapshot(void **state)
{
    (void)state;
    gw_event_horizon h = {0};
    /* xid 490 is in flight and may hold an id <= 10: not settled */
    assert_int_equal(gw_event_horizon_step(&h, 0, 10, 490, 500), 0);
    assert_int_equal(h.ncand, 1);
    /* 490 still runs; more ids drawn meanwhile wait as well */
    assert_int_equal(gw_event_horizon_step(&h, 0, 14, 495, 505), 0);
    assert_int_equal(h.ncand, 2);
    /* every writer before 500 ended: ids up to 10 are final, 14 not yet */
    assert_int_equal(gw_event_horizon_step(&h, 0, 14, 502, 506), 10);
    assert_int_equal(h.ncand, 1);
    /* all before 505 ended: 14 too, and a new horizon settles at once */
    assert_int_equal(gw_event_horizon_step(&h, 10, 20, 510, 510), 20);
    assert_int_equal(h.ncand, 0);
}

static void test_horizon_list_full_keeps_the_oldest(void **state)
{
    (void)state;
    gw_event_horizon h = {0};
    for (int i = 1; i <= GW_EVENT_HORIZONS + 4; i++)
        assert_int_equal(gw_event_horizon_step(&h, 0, i, 100, (uint64_t)(200 + i)), 0);
    assert_int_equal(h.ncand, GW_EVENT_HORIZONS);
    assert_int_equal(h.cand[0].last, 1);
    /* the writers before the 5th horizon's next ended */
    assert_int_equal(gw_event_horizon_step(&h, 0, 99, 205, 300), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_parses_kernel_label_and_states),
        cmocka_unit_test(test_filter_refuses_bad_values_naming_the_field),
        cmocka_unit_test(test_filter_matches_kernel_label_and_state),
        cmocka_unit_test(test_event_id_is_a_non_negative_decimal),
        cmocka_unit_test(test_horizon_settles_at_once_with_no_writer_in_flight),
        cmocka_unit_test(test_horizon_waits_for_writers_older_than_its_snapshot),
        cmocka_unit_test(test_horizon_list_full_keeps_the_oldest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
