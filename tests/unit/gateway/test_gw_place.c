/* test_gw_place.c — the scheduler's placement choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

/* A node of the view: name, backend, slots, running, GPUs, available. */
#define N(nm, be, sl, run, ng, av) \
    {.name = (nm), .backend = (be), .slots = (sl), .running = (run), .ngpus = (ng), .available = (av)}

static void test_least_loaded_node_wins(void **state)
{
    gw_place_node n[] = {
        N("a", "cpu", 4, 3, 0, 1),
        N("b", "cpu", 4, 1, 0, 1),
        N("c", "cpu", 2, 1, 0, 1),
    };
    assert_int_equal(gw_place(n, 3, "any", 1), 1);
}

static void test_load_is_relative_to_slots(void **state)
{
    /* 2 of 8 busy (25 %) is less loaded than 1 of 2 (50 %). */
    gw_place_node n[] = {N("small", "cpu", 2, 1, 0, 1), N("big", "cpu", 8, 2, 0, 1)};
    assert_int_equal(gw_place(n, 2, "any", 1), 1);
}

static void test_ties_go_to_more_free_slots_then_name(void **state)
{
    gw_place_node n[] = {N("b", "cpu", 2, 0, 0, 1), N("a", "cpu", 4, 0, 0, 1), N("c", "cpu", 4, 0, 0, 1)};
    assert_int_equal(gw_place(n, 3, "any", 1), 1);
    gw_place_node m[] = {N("b", "cpu", 2, 0, 0, 1), N("a", "cpu", 2, 0, 0, 1)};
    assert_int_equal(gw_place(m, 2, "any", 1), 1);
}

static void test_full_down_and_backed_off_nodes_are_skipped(void **state)
{
    gw_place_node n[] = {
        N("full", "cpu", 2, 2, 0, 1),
        N("down", "cpu", 2, 0, 0, 0),
    };
    assert_int_equal(gw_place(n, 2, "any", 1), -1);
    n[1].available = 1;
    assert_int_equal(gw_place(n, 2, "any", 1), 1);
}

static void test_backend_must_match(void **state)
{
    gw_place_node n[] = {N("cpu-1", "cpu", 4, 0, 0, 1), N("gpu-1", "cuda", 4, 3, 1, 1)};
    assert_int_equal(gw_place(n, 2, "cuda", 1), 1);
    assert_int_equal(gw_place(n, 2, "cpu", 1), 0);
    assert_int_equal(gw_place(n, 2, "any", 1), 0);
}

static void test_cuda_job_needs_enough_gpus(void **state)
{
    gw_place_node n[] = {N("one", "cuda", 4, 0, 1, 1), N("eight", "cuda", 4, 2, 8, 1)};
    assert_int_equal(gw_place(n, 2, "cuda", 4), 1);
    assert_int_equal(gw_place(n, 2, "cuda", 16), -1);
}

static void test_no_nodes_means_no_placement(void **state)
{
    assert_int_equal(gw_place(NULL, 0, "any", 1), -1);
}

/* A GPU node of 4 devices of mem_mb each, none loaded. */
static gw_place_node gpu_node(const char *name, int running, int mem_mb)
{
    gw_place_node n = N(name, "cuda", 8, running, 4, 1);
    for (int g = 0; g < 4; g++)
        n.gpu[g] = (gw_place_gpu){.mem_mb = mem_mb, .load = 0, .util = -1};
    return n;
}

/* The least loaded devices go first: by runs on them, then by the
 * utilisation the node reported, then by index. */
static void test_devices_are_the_least_loaded(void **state)
{
    gw_place_node n[1] = {gpu_node("g", 0, 40960)};
    n[0].gpu[0].load = 2;
    n[0].gpu[1].load = 1;
    n[0].gpu[2].util = 90;
    n[0].gpu[3].util = 10;
    gw_place_req r = {.backend = "cuda", .gpus = 2, .nodes = 1};
    gw_place_pick p;
    assert_int_equal(gw_place_job(n, 1, &r, NULL, &p), 0);
    assert_int_equal(p.nnodes, 1);
    assert_int_equal(p.ngpu, 2);
    assert_int_equal(p.gpu[0][0], 3);
    assert_int_equal(p.gpu[0][1], 2);
}

/* gpu_memory_gb: only devices with that much count; a node without enough
 * of them does not fit. */
static void test_gpu_memory_is_respected(void **state)
{
    gw_place_node n[2] = {gpu_node("small", 0, 16384), gpu_node("big", 5, 81920)};
    n[0].gpu[3].mem_mb = 81920;
    gw_place_req r = {.backend = "cuda", .gpus = 1, .nodes = 1, .gpu_mem_mb = 40960};
    gw_place_pick p;
    assert_int_equal(gw_place_job(n, 2, &r, NULL, &p), 0);
    assert_int_equal(p.node[0], 0);   /* less loaded, and its device 3 is big enough */
    assert_int_equal(p.gpu[0][0], 3);
    r.gpus = 2;
    assert_int_equal(gw_place_job(n, 2, &r, NULL, &p), 0);
    assert_int_equal(p.node[0], 1);
    r.gpu_mem_mb = 100000;
    assert_int_equal(gw_place_job(n, 2, &r, NULL, &p), -1);
    assert_int_equal(gw_place_capable(&n[1], &r), 0);
}

/* A gang takes nodes distinct nodes, the least loaded first, each with
 * its own devices; all or nothing. */
static void test_gang_takes_distinct_nodes_or_none(void **state)
{
    gw_place_node n[4] = {N("a", "cpu", 2, 1, 0, 1), N("b", "cpu", 2, 0, 0, 1), N("c", "cpu", 2, 2, 0, 1),
                          N("d", "cpu", 4, 1, 0, 1)};
    gw_place_req r = {.backend = "cpu", .gpus = 2, .nodes = 3};
    gw_place_pick p;
    assert_int_equal(gw_place_job(n, 4, &r, NULL, &p), 0);
    assert_int_equal(p.nnodes, 3);
    assert_int_equal(p.node[0], 1);   /* 0 of 2 */
    assert_int_equal(p.node[1], 3);   /* 1 of 4 */
    assert_int_equal(p.node[2], 0);   /* 1 of 2 */
    assert_int_equal(p.ngpu, 0);      /* CPU nodes: gpus are ranks, not devices */
    r.nodes = 4;                      /* c is full: no part starts anywhere */
    assert_int_equal(gw_place_job(n, 4, &r, NULL, &p), -1);
    gw_place_node g[2] = {gpu_node("g1", 0, 0), gpu_node("g2", 0, 0)};
    gw_place_req rg = {.backend = "cuda", .gpus = 4, .nodes = 2};
    assert_int_equal(gw_place_job(g, 2, &rg, NULL, &p), 0);
    assert_int_equal(p.ngpu, 4);
    assert_int_equal(p.gpu[1][3], 3);
}

/* A GPU node with no more slots than devices never doubles a device up:
 * with 7 of its 8 slots free but only 1 device idle, an 8-GPU job goes
 * elsewhere or nowhere, and a 1-GPU job takes the idle device. */
static void test_devices_are_not_shared_where_slots_do_not_exceed_them(void **state)
{
    gw_place_node n[1] = {N("g8", "cuda", 8, 1, 8, 1)};
    for (int g = 0; g < 8; g++)
        n[0].gpu[g].load = g == 5 ? 0 : 1;   /* one 7-GPU run holds the rest */
    gw_place_req r8 = {.backend = "cuda", .gpus = 8, .nodes = 1};
    gw_place_req r2 = {.backend = "cuda", .gpus = 2, .nodes = 1};
    gw_place_req r1 = {.backend = "cuda", .gpus = 1, .nodes = 1};
    gw_place_pick p;
    assert_int_equal(gw_place_job(n, 1, &r8, NULL, &p), -1);
    assert_int_equal(gw_place_job(n, 1, &r2, NULL, &p), -1);
    assert_int_equal(gw_place_job(n, 1, &r1, NULL, &p), 0);
    assert_int_equal(p.gpu[0][0], 5);
    /* more slots than devices: the operator asked for sharing */
    gw_place_node m[1] = {N("shared", "cuda", 4, 1, 1, 1)};
    m[0].gpu[0].load = 1;
    assert_int_equal(gw_place_job(m, 1, &r1, NULL, &p), 0);
}

/* An exclusive-device GPU node with `busy` of its 8 devices running one
 * run each. */
static gw_place_node g8_node(const char *name, int busy)
{
    gw_place_node n = N(name, "cuda", 8, busy, 8, 1);
    for (int g = 0; g < 8; g++)
        n.gpu[g] = (gw_place_gpu){.load = g < busy ? 1 : 0, .util = -1};
    return n;
}

/* Where devices are not shared, a job goes to the node it fills best
 * (fewest idle devices left), however loaded: nine 1-GPU jobs fill the
 * nodes with 3 and 6 idle devices and leave the idle node whole for an
 * 8-GPU job (least loaded first put one on it at once). Where devices are
 * shared, the least loaded still goes first. */
static void test_best_fit_keeps_whole_nodes_where_devices_are_not_shared(void **state)
{
    gw_place_node n[3] = {g8_node("idle", 0), g8_node("five", 5), g8_node("two", 2)};
    gw_place_req r1 = {.backend = "cuda", .gpus = 1, .nodes = 1};
    gw_place_req r3 = {.backend = "cuda", .gpus = 3, .nodes = 1};
    gw_place_req r8 = {.backend = "cuda", .gpus = 8, .nodes = 1};
    gw_place_pick p;
    assert_int_equal(gw_place_job(n, 3, &r3, NULL, &p), 0);
    assert_int_equal(p.node[0], 1);   /* exactly fills "five" */
    for (int k = 0; k < 9; k++) {
        assert_int_equal(gw_place_job(n, 3, &r1, NULL, &p), 0);
        assert_int_not_equal(p.node[0], 0);
        n[p.node[0]].running++;
        n[p.node[0]].gpu[p.node[0] == 1 ? 5 + k : 2 + k - 3].load = 1;
    }
    assert_int_equal(n[1].running, 8);
    assert_int_equal(n[2].running, 8);
    assert_int_equal(gw_place_job(n, 3, &r8, NULL, &p), 0);
    assert_int_equal(p.node[0], 0);
    /* a gang of 4-GPU parts takes the nodes with 4 idle before the whole */
    gw_place_node g[3] = {g8_node("idle", 0), g8_node("four-a", 4), g8_node("four-b", 4)};
    gw_place_req r4x2 = {.backend = "cuda", .gpus = 4, .nodes = 2};
    assert_int_equal(gw_place_job(g, 3, &r4x2, NULL, &p), 0);
    assert_int_equal(p.node[0] + p.node[1], 3);
    /* shared devices (more slots than devices): the least loaded */
    gw_place_node s[2] = {N("busy", "cuda", 16, 6, 8, 1), N("quiet", "cuda", 16, 1, 8, 1)};
    assert_int_equal(gw_place_job(s, 2, &r1, NULL, &p), 0);
    assert_int_equal(p.node[0], 1);
}

/* Where devices are not shared, a reservation waits for enough devices
 * to be idle by their runs' ends, not just a free slot. */
static void test_a_reservation_waits_for_idle_devices(void **state)
{
    int64_t now = 1000000;
    gw_place_node n[1] = {N("g8", "cuda", 8, 2, 8, 1)};
    int64_t ends[2] = {now + 5000, now + 9000};
    n[0].ends = ends;
    n[0].nends = 2;
    for (int g = 0; g < 8; g++) {
        n[0].gpu[g].load = 1;
        n[0].gpu[g].end_ms = g < 4 ? now + 5000 : now + 9000;   /* two 4-GPU runs */
    }
    gw_place_req r8 = {.backend = "cuda", .gpus = 8, .nodes = 1};
    gw_place_req r4 = {.backend = "cuda", .gpus = 4, .nodes = 1};
    uint8_t reserved[1];
    assert_int_equal(gw_place_reserve(n, 1, &r8, now, NULL, reserved), now + 9000);
    assert_int_equal(reserved[0], 1);
    assert_int_equal(gw_place_reserve(n, 1, &r4, now, NULL, reserved), now + 5000);
}

/* A job that fits nowhere reserves the nodes that free first (by their
 * runs' ends); later jobs may use reserved nodes only when they end by
 * then, and other nodes freely. */
static void test_reservation_and_backfill(void **state)
{
    const int64_t now = 1000000;
    int64_t ends_a[2] = {now + 5000, now + 60000}, ends_b[2] = {now + 20000, now + 30000},
            ends_c[2] = {now + 90000, now + 99000};
    gw_place_node n[4] = {N("a", "cpu", 2, 2, 0, 1), N("b", "cpu", 2, 2, 0, 1), N("c", "cpu", 2, 2, 0, 1),
                          N("d", "cpu", 2, 1, 0, 1)};
    n[0].ends = ends_a, n[0].nends = 2;
    n[1].ends = ends_b, n[1].nends = 2;
    n[2].ends = ends_c, n[2].nends = 2;
    gw_place_req gang = {.backend = "cpu", .gpus = 2, .nodes = 3};
    gw_place_pick p;
    assert_int_equal(gw_place_job(n, 4, &gang, NULL, &p), -1);
    uint8_t reserved[4], allowed[4];
    int64_t at = gw_place_reserve(n, 4, &gang, now, NULL, reserved);
    assert_true(at == now + 20000);   /* d now, a at +5 s, b at +20 s */
    assert_int_equal(reserved[0], 1);
    assert_int_equal(reserved[1], 1);
    assert_int_equal(reserved[2], 0);
    assert_int_equal(reserved[3], 1);
    int64_t held[4] = {0};
    for (int i = 0; i < 4; i++)
        held[i] = reserved[i] ? at : 0;
    gw_place_req small = {.backend = "cpu", .gpus = 1, .nodes = 1};
    gw_place_backfill_mask(4, held, now, 30, allowed);   /* 30 s: past the start */
    assert_int_equal(gw_place_job(n, 4, &small, allowed, &p), -1);   /* d is reserved */
    gw_place_backfill_mask(4, held, now, 10, allowed);   /* 10 s: done by then */
    assert_int_equal(gw_place_job(n, 4, &small, allowed, &p), 0);
    assert_int_equal(p.node[0], 3);
    /* a second reservation leaves the held nodes out: c, the only one
     * left, frees a slot at +90 s, and a job of 85 s may still backfill
     * there (not on the gang's nodes, held from +20 s) */
    gw_place_req two = {.backend = "cpu", .gpus = 2, .nodes = 1};
    int64_t at2 = gw_place_reserve(n, 4, &two, now, held, reserved);
    assert_true(at2 == now + 90000);
    assert_int_equal(reserved[0] + reserved[1] + reserved[3], 0);
    assert_int_equal(reserved[2], 1);
    held[2] = at2;
    gw_place_backfill_mask(4, held, now, 85, allowed);
    assert_int_equal(allowed[0] + allowed[1] + allowed[3], 0);   /* past the gang's start */
    assert_int_equal(allowed[2], 1);                             /* done by c's */
    /* none left: a third reservation finds no node */
    assert_true(gw_place_reserve(n, 4, &two, now, (int64_t[4]){1, 1, 1, 1}, reserved) == -1);
    /* more nodes than the cluster has capable ones: no reservation */
    gang.nodes = 5;
    assert_true(gw_place_reserve(n, 4, &gang, now, NULL, reserved) == -1);
    /* a node with runs of unknown end is the last choice */
    gang.nodes = 4;
    n[2].nends = 0;
    assert_true(gw_place_reserve(n, 4, &gang, now, NULL, reserved) == INT64_MAX);
    /* in halves, as a pass does: the free times once for the shape (any
     * number of nodes), one node worked out again after it changed */
    int64_t times[4], scratch[4];
    uint8_t again[4];
    gw_place_free_times(n, 4, &gang, now, times);
    assert_true(times[3] == now && times[0] == now + 5000 && times[2] == INT64_MAX);
    assert_true(gw_place_reserve_at(times, 4, 2, NULL, again, scratch) == now + 5000);
    assert_true(gw_place_reserve(n, 4, &(gw_place_req){.backend = "cpu", .gpus = 2, .nodes = 2}, now,
                                 NULL, reserved) == now + 5000);
    assert_memory_equal(again, reserved, 4);
    n[3].running = 2;   /* d fills up: it frees when its first run ends, which is not known */
    times[3] = gw_place_free_time(&n[3], &gang, now);
    assert_true(times[3] == INT64_MAX);
    assert_true(gw_place_reserve_at(times, 4, 2, NULL, again, scratch) == now + 20000);
    assert_true(gw_place_reserve(n, 4, &(gw_place_req){.backend = "cpu", .gpus = 2, .nodes = 2}, now,
                                 NULL, reserved) == now + 20000);
    assert_memory_equal(again, reserved, 4);
    /* a node that cannot take the job at all */
    assert_true(gw_place_free_time(&n[0], &(gw_place_req){.backend = "cuda", .gpus = 1, .nodes = 1},
                                   now) == -1);
}

/* Fair share: the largest deficit in whole units goes next, then the least
 * virtual time, then the more urgent head; with targets, where a target is
 * more than a unit, the deficit over it (so that what is left over goes by
 * weight, not to the tenants of small targets first). */
static void test_fair_pick(void **state)
{
    double d[3] = {0, 0, 0}, vt[3] = {10, 2, 3}, head[3] = {5, 9, 7};
    uint8_t cand[3] = {1, 1, 1};
    assert_int_equal(gw_place_fair_pick(d, NULL, vt, head, cand, 3), 1);
    vt[2] = 2;
    assert_int_equal(gw_place_fair_pick(d, NULL, vt, head, cand, 3), 2);   /* tie: head 7 < 9 */
    d[0] = 1.5;   /* 2 whole units short: first, whatever its virtual time */
    assert_int_equal(gw_place_fair_pick(d, NULL, vt, head, cand, 3), 0);
    d[1] = 1.2;   /* also 2 units once rounded up: level, the virtual time decides */
    assert_int_equal(gw_place_fair_pick(d, NULL, vt, head, cand, 3), 1);
    cand[2] = cand[1] = 0;
    assert_int_equal(gw_place_fair_pick(d, NULL, vt, head, cand, 3), 0);
    cand[0] = 0;
    assert_int_equal(gw_place_fair_pick(d, NULL, vt, head, cand, 3), -1);
    double d2[3] = {8, 20, 0}, tg[3] = {16, 64, 0.5};
    uint8_t all[3] = {1, 1, 1};
    /* 8 short of 16 is a half; 20 short of 64 under a third */
    assert_int_equal(gw_place_fair_pick(d2, tg, vt, head, all, 3), 0);
    assert_int_equal(gw_place_fair_pick(d2, NULL, vt, head, all, 3), 1);
    d2[0] = -2, d2[1] = -4;   /* both past their targets, 2 at its own */
    assert_int_equal(gw_place_fair_pick(d2, tg, vt, head, all, 3), 2);
    all[2] = 0;   /* -4 of 64 is nearer its target than -2 of 16 */
    assert_int_equal(gw_place_fair_pick(d2, tg, vt, head, all, 3), 1);
    /* targets of a few units count whole units: half a unit short of 0.5
     * and of 1.5 are level, and the virtual time decides (vt 10, 2) */
    double d3[2] = {0.5, 0.5}, tg3[2] = {0.5, 1.5};
    assert_int_equal(gw_place_fair_pick(d3, tg3, vt, head, all, 2), 1);
    d3[1] = -0.5;
    assert_int_equal(gw_place_fair_pick(d3, tg3, vt, head, all, 2), 0);
    assert_true(gw_place_fair_charge(4, 2) == 2.0);
    assert_true(gw_place_fair_charge(1, 0) == 1.0);
    assert_true(gw_place_fair_target(8, 3, 4) == 6.0);
}

/* A job larger than half its tenant's share that would take the tenant
 * past it yields while another tenant below its own has jobs to look at;
 * never otherwise. */
static void test_fair_defers_a_lump_while_others_are_below_their_share(void **state)
{
    (void)state;
    double d[3] = {3, 2, -1};
    uint8_t cand[3] = {1, 1, 1};
    /* tenant 0 (a share of 8, 3 units short): a 16-GPU gang would hold 13
     * past its target while tenant 1 (2 short) has jobs */
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 16, 8), 1);
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 5, 8), 1);
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 4, 8), 0);   /* half its share: no lump */
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 8, 64), 0);  /* 8 GPUs of a share of 64 */
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 3, 4), 0);   /* within its deficit */
    d[0] = 2.2;   /* 3 units once rounded up, as the pick counts them */
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 3, 4), 0);
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 4, 4), 1);
    cand[1] = 0;  /* the tenant below its share has nothing left to look at */
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 16, 8), 0);
    cand[1] = 1;
    d[1] = 0;     /* nobody else below its share: the room is the lump's */
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 16, 8), 0);
    d[1] = 0.1;   /* a fraction of a unit short counts as one */
    assert_int_equal(gw_place_fair_defers(d, cand, 3, 0, 16, 8), 1);
    assert_int_equal(gw_place_fair_defers(d, cand, 3, -1, 16, 8), 0);
}

/* --fair-preempt: the youngest runs go first, only while what is taken
 * stays within what the tenant holds past its share; a run larger than
 * what is left is passed over for smaller ones. */
static void test_preemption_stops_the_youngest_runs_down_to_the_share(void **state)
{
    (void)state;
    const gw_preempt_cand c[] = {
        {.start_ms = 1000, .units = 1}, {.start_ms = 5000, .units = 1},
        {.start_ms = 3000, .units = 4}, {.start_ms = 4000, .units = 1},
        {.start_ms = 2000, .units = 2},
    };
    uint8_t take[5];
    /* 2.5 past: the two youngest 1-unit runs (5000, 4000); the 4-unit run
     * at 3000 and the 2-unit one would take it below its share */
    assert_int_equal(gw_place_preempt_pick(c, 5, 2.5, take), 2);
    assert_memory_equal(take, ((uint8_t[]){0, 1, 0, 1, 0}), 5);
    /* 7 past: 5000, 4000, then the 4 units at 3000 (6); the 2 at 2000
     * would make 8; the 1 at 1000 makes 7 */
    assert_int_equal(gw_place_preempt_pick(c, 5, 7, take), 7);
    assert_memory_equal(take, ((uint8_t[]){1, 1, 1, 1, 0}), 5);
    /* less than a unit past: nothing */
    assert_int_equal(gw_place_preempt_pick(c, 5, 0.9, take), 0);
    assert_memory_equal(take, ((uint8_t[]){0, 0, 0, 0, 0}), 5);
    /* everything, and no more than there is */
    assert_int_equal(gw_place_preempt_pick(c, 5, 100, take), 9);
    assert_memory_equal(take, ((uint8_t[]){1, 1, 1, 1, 1}), 5);
    assert_int_equal(gw_place_preempt_pick(c, 0, 100, take), 0);
}

/* A lump yields for wait_ms from its first hold, then goes (it cannot
 * starve); its entry is forgotten when it starts or when no hold came for
 * forget_ms; with every entry taken a new lump does not yield. */
static void test_a_lump_yields_for_its_wait_and_no_longer(void **state)
{
    (void)state;
    static gw_lumps t;
    memset(&t, 0, sizeof t);
    const char *a = "00000000-0000-0000-0000-00000000000a";
    const char *b = "00000000-0000-0000-0000-00000000000b";
    assert_int_equal(gw_lumps_waited(&t, a, 1000, 30000, 600000), 0);
    assert_int_equal(gw_lumps_waited(&t, b, 5000, 30000, 600000), 0);
    assert_int_equal(gw_lumps_waited(&t, a, 30999, 30000, 600000), 0);
    assert_int_equal(gw_lumps_waited(&t, a, 31000, 30000, 600000), 1);   /* its 30 s are up */
    assert_int_equal(gw_lumps_waited(&t, b, 31000, 30000, 600000), 0);   /* b's are not */
    gw_lumps_placed(&t, a, 32000, 600000);
    assert_int_equal(gw_lumps_waited(&t, a, 33000, 30000, 600000), 0);   /* a new wait */
    assert_int_equal(gw_lumps_waited(&t, b, 35000, 30000, 600000), 1);
    /* not held for forget_ms: forgotten, its wait starts again */
    assert_int_equal(gw_lumps_waited(&t, b, 35000 + 600000, 30000, 600000), 0);
    /* every entry taken by a lump held now: one more does not yield */
    memset(&t, 0, sizeof t);
    char id[37];
    for (int i = 0; i < GW_LUMP_SLOTS; i++) {
        snprintf(id, sizeof id, "00000000-0000-0000-0000-%012d", i);
        assert_int_equal(gw_lumps_waited(&t, id, 1000, 30000, 600000), 0);
    }
    assert_int_equal(gw_lumps_waited(&t, a, 1000, 30000, 600000), 1);
    snprintf(id, sizeof id, "00000000-0000-0000-0000-%012d", 7);
    assert_int_equal(gw_lumps_waited(&t, id, 2000, 30000, 600000), 0);   /* still known */
    gw_lumps_placed(&t, id, 2000, 600000);
    assert_int_equal(gw_lumps_waited(&t, a, 2000, 30000, 600000), 0);     /* its entry reused */
}

/* A tenant at its share waits while one below it ran out of window. */
static void test_fair_waits_for_a_window_run_out(void **state)
{
    (void)state;
    double d[3] = {0.2, 5, -3};
    uint8_t cut[3] = {0, 0, 0};
    assert_int_equal(gw_place_fair_waits(d, cut, 3, 1), 0);   /* nothing ran out */
    cut[1] = 1;
    assert_int_equal(gw_place_fair_waits(d, cut, 3, 1), 0);   /* the pick is below its share */
    d[1] = 0.5;
    d[0] = 0;
    assert_int_equal(gw_place_fair_waits(d, cut, 3, 0), 1);   /* at its share; 1 is below */
    assert_int_equal(gw_place_fair_waits(d, cut, 3, 2), 1);   /* past it */
    d[1] = 0;
    assert_int_equal(gw_place_fair_waits(d, cut, 3, 2), 0);   /* 1 reached its share */
    d[1] = 1e-12;                                             /* less than a unit's rounding */
    assert_int_equal(gw_place_fair_waits(d, cut, 3, 2), 0);
    d[1] = 3;
    assert_int_equal(gw_place_fair_waits(d, cut, 3, -1), 0);  /* no pick */
}

/* Two tenants with endless queues of one-unit jobs on `slots` units, as
 * the scheduler composes the policy: each unit that frees goes to the
 * pick (deficits from the targets, virtual times advanced by each start).
 * A's jobs last len_a, B's len_b (ticks). Returns A's share of the
 * unit-ticks held over `ticks`. */
static double fair_sim(int slots, double wa, double wb, int len_a, int len_b, int ticks)
{
    double w[2] = {wa, wb}, vt[2] = {0, 0}, head[2] = {0, 1};
    int units[2] = {0, 0}, len[2] = {len_a, len_b};
    uint8_t cand[2] = {1, 1};
    int end[64], who[64];
    long held[2] = {0, 0};
    for (int u = 0; u < slots; u++)
        end[u] = 0;   /* free now */
    for (int t = 0; t < ticks; t++) {
        for (int u = 0; u < slots; u++) {
            if (end[u] > t)
                continue;
            if (end[u] == t && t > 0)
                units[who[u]]--;
            double d[2];
            for (int k = 0; k < 2; k++)
                d[k] = gw_place_fair_target(slots, w[k], w[0] + w[1]) - units[k];
            int k = gw_place_fair_pick(d, NULL, vt, head, cand, 2);
            units[k]++;
            vt[k] += gw_place_fair_charge(1, w[k]);
            who[u] = k;
            end[u] = t + len[k];
        }
        for (int u = 0; u < slots; u++)
            held[who[u]]++;
    }
    return (double)held[0] / (double)(held[0] + held[1]);
}

/* fair_sim's two tenants at equal weights with jobs of len ticks on
 * `slots` units, on device-seconds (--fair-repay-s of repay ticks; 0:
 * devices held now only), B waiting from the start but with nothing it
 * can place before tick b_from (its job waits for nodes to drain). A's
 * share of the unit-ticks held over `ticks`. */
static double fair_sim_owed(int slots, int len, int ticks, double repay, int b_from)
{
    double vt[2] = {0, 0}, head[2] = {0, 1}, owed[2] = {0, 0}, target[2];
    int units[2] = {0, 0};
    int end[64], who[64];
    long held[2] = {0, 0};
    for (int u = 0; u < slots; u++)
        end[u] = 0, who[u] = -1;
    for (int t = 0; t < ticks; t++) {
        uint8_t cand[2] = {1, t >= b_from};
        for (int k = 0; k < 2; k++) {
            target[k] = gw_place_fair_target(slots, 1, 2);
            owed[k] = gw_place_fair_owed(owed[k], target[k], units[k], t > 0, repay, 1e9);
        }
        for (int u = 0; u < slots; u++) {
            if (end[u] > t)
                continue;
            if (who[u] >= 0)
                units[who[u]]--;
            double d[2];
            for (int k = 0; k < 2; k++)
                d[k] = gw_place_fair_deficit(target[k], units[k], owed[k], repay);
            int k = gw_place_fair_pick(d, target, vt, head, cand, 2);
            units[k]++;
            vt[k] += gw_place_fair_charge(1, 1);
            who[u] = k;
            end[u] = t + len;
        }
        for (int u = 0; u < slots; u++)
            held[who[u]]++;
    }
    return (double)held[0] / (double)(held[0] + held[1]);
}

/* What a tenant is owed: its shortfall (or excess) over time, halved every
 * half-life, at most its share over repay seconds; the deficit repays it
 * over repay seconds. And a tenant kept from running for a while is
 * repaid after: 16 units, B with nothing it can place for 40 ticks (A
 * holds all 16 meanwhile), 400 ticks: devices held now alone leave A 0.55
 * of the unit-ticks, device-seconds give both half. */
static void test_fair_share_on_device_seconds_repays_a_tenant_kept_out(void **state)
{
    (void)state;
    assert_true(fabs(gw_place_fair_owed(0, 8, 2, 3, 30, 1e9) - 18) < 1e-6);
    assert_true(fabs(gw_place_fair_owed(18, 8, 10, 2, 30, 1e9) - 14) < 1e-6);
    assert_true(fabs(gw_place_fair_owed(100, 8, 8, 10, 30, 10) - 50) < 1e-6);    /* one half-life */
    assert_true(fabs(gw_place_fair_owed(200, 8, 0, 10, 30, 1e9) - 240) < 1e-6);  /* at most 8 x 30 */
    assert_true(fabs(gw_place_fair_owed(-50, 8, 20, 10, 30, 1e9) - -170) < 1e-6);
    assert_true(gw_place_fair_owed(7, 8, 0, 0, 30, 1e9) == 7);
    assert_true(fabs(gw_place_fair_deficit(8, 6, 60, 30) - 4) < 1e-6);
    assert_true(fabs(gw_place_fair_deficit(8, 6, 60, 0) - 2) < 1e-6);
    assert_true(fabs(gw_place_fair_deficit(8, 10, -60, 30) - -4) < 1e-6);
    double now_only = fair_sim_owed(16, 4, 400, 0, 40);
    double owed = fair_sim_owed(16, 4, 400, 40, 40);
    assert_true(now_only > 0.54);
    assert_true(fabs(owed - 0.5) < 0.02);
    assert_true(fabs(fair_sim_owed(16, 4, 400, 40, 0) - 0.5) < 0.02);   /* nobody kept out */
}

/* The devices held follow the weights: on two units with weights 1 and 3
 * (targets of half a unit and one and a half), with jobs ten times as
 * long for one tenant as for the other at equal weights, and on many
 * units. Counting starts alone gave the tenant of long jobs 0.9 of the
 * time. */
static void test_fair_share_follows_weights_in_devices_held(void **state)
{
    assert_true(fabs(fair_sim(2, 1, 3, 5, 5, 20000) - 0.25) < 0.02);
    assert_true(fabs(fair_sim(2, 1, 1, 10, 1, 20000) - 0.5) < 0.02);
    assert_true(fabs(fair_sim(48, 1, 2, 7, 3, 20000) - 1.0 / 3) < 0.02);
}

/* A task goes to nodes with an engine; to those that list its image when
 * any does; to any engine node when none lists it (which then fails it
 * image_not_found once, rather than the job waiting forever). */
static void test_tasks_need_an_engine_and_prefer_nodes_with_their_image(void **state)
{
    (void)state;
    uint32_t has[] = {7, 42}, other[] = {7};
    gw_place_node n[] = {N("kernels-only", "cpu", 4, 0, 0, 1), N("engine", "cpu", 4, 2, 0, 1),
                         N("engine-with-image", "cpu", 4, 3, 0, 1)};
    n[1].tasks = 1;
    n[1].images = other;
    n[1].nimages = 1;
    n[2].tasks = 1;
    n[2].images = has;
    n[2].nimages = 2;
    gw_place_req r = {.backend = "any", .gpus = 0, .nodes = 1, .image = 42};
    gw_place_pick pick;
    r.image_anywhere = gw_place_image_listed(n, 3, 42);
    assert_true(r.image_anywhere);
    assert_int_equal(gw_place_job(n, 3, &r, NULL, &pick), 0);
    assert_int_equal(pick.node[0], 2); /* the busiest, but the one with the image */
    r.image = 99;
    r.image_anywhere = gw_place_image_listed(n, 3, 99);
    assert_false(r.image_anywhere);
    assert_int_equal(gw_place_job(n, 3, &r, NULL, &pick), 0);
    assert_int_equal(pick.node[0], 1); /* an engine node, never the kernels-only one */
    n[1].tasks = n[2].tasks = 0;
    assert_int_equal(gw_place_job(n, 3, &r, NULL, &pick), -1);
    /* a kernel job goes anywhere */
    gw_place_req k = {.backend = "any", .gpus = 1, .nodes = 1};
    assert_int_equal(gw_place_job(n, 3, &k, NULL, &pick), 0);
    assert_int_equal(pick.node[0], 0);
}

/* A task that asks for no GPU takes no device of a GPU node: it runs
 * beside a run that holds every device, where a slot is free. */
static void test_a_task_without_gpus_takes_no_device(void **state)
{
    (void)state;
    gw_place_node n[1] = {N("g2", "cuda", 2, 1, 2, 1)};
    n[0].tasks = 1;
    n[0].nimages = -1;
    n[0].gpu[0].load = n[0].gpu[1].load = 1;   /* one 2-GPU run holds both */
    gw_place_req none = {.backend = "any", .gpus = 0, .nodes = 1, .image = 42};
    gw_place_req one = {.backend = "any", .gpus = 1, .nodes = 1, .image = 42};
    gw_place_req kernel = {.backend = "any", .gpus = 0, .nodes = 1};
    gw_place_pick p;
    assert_int_equal(gw_place_job(n, 1, &none, NULL, &p), 0);
    assert_int_equal(p.ngpu, 0);
    /* a task with a GPU, and a kernel (it runs on one), wait for a device */
    assert_int_equal(gw_place_job(n, 1, &one, NULL, &p), -1);
    assert_int_equal(gw_place_job(n, 1, &kernel, NULL, &p), -1);
}

/* gw_place_backend gives one pointer per backend, and a view or request
 * built from it places as one built from any other copy of the strings
 * (the scheduler interns them; tests and callers need not). */
static void test_interned_backends_place_as_plain_strings(void **state)
{
    char cuda[8], cpu[8], any[8];
    strcpy(cuda, "cuda");
    strcpy(cpu, "cpu");
    strcpy(any, "any");
    assert_ptr_equal(gw_place_backend(cuda), gw_place_backend("cuda"));
    assert_ptr_not_equal(gw_place_backend(cuda), cuda);
    assert_ptr_equal(gw_place_backend(cpu), gw_place_backend("cpu"));
    assert_string_equal(gw_place_backend("rocm"), "rocm");
    const char *be[2][2] = {{cpu, cuda}, {gw_place_backend(cpu), gw_place_backend(cuda)}};
    const char *want[2][4] = {{cpu, cuda, any, "rocm"},
                              {gw_place_backend(cpu), gw_place_backend(cuda), gw_place_backend(any),
                               gw_place_backend("rocm")}};
    int expect[4] = {0, 1, 1, -1};   /* cpu: the CPU node; cuda, any: the idle GPU node */
    for (int vb = 0; vb < 2; vb++)
        for (int rb = 0; rb < 2; rb++)
            for (int k = 0; k < 4; k++) {
                gw_place_node n[] = {N("cpu-1", be[vb][0], 4, 3, 0, 1), N("gpu-1", be[vb][1], 4, 0, 2, 1)};
                assert_int_equal(gw_place(n, 2, want[rb][k], 1), expect[k]);
            }
}

static int cmp_time(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* On random views, the reservation starts when the want-th node of those
 * it may hold frees (what sorting every node's time says), holds exactly
 * want nodes, none held before, none freeing later than the start. */
static void test_reservations_start_at_the_want_th_node_to_free(void **state)
{
    enum { NODES = 200 };
    static gw_place_node n[NODES];
    static int64_t ends[NODES][8], held[NODES], sorted[NODES];
    uint8_t reserved[NODES];
    int64_t now = 1000000;
    srand(7);
    for (int round = 0; round < 300; round++) {
        for (int i = 0; i < NODES; i++) {
            n[i] = (gw_place_node)N("x", "cpu", 4, 4, 0, rand() % 10 != 0);
            /* few distinct times, so that ties are common */
            for (int k = 0; k < 4; k++)
                ends[i][k] = now + 1000 * (rand() % 20);
            qsort(ends[i], 4, sizeof(ends[i][0]), cmp_time);
            n[i].ends = ends[i];
            n[i].nends = rand() % 8 == 0 ? 0 : 4;   /* some never end (unknown) */
            held[i] = rand() % 4 == 0 ? now + 5000 : 0;
        }
        gw_place_req r = {.backend = "cpu", .nodes = 1 + rand() % 24};
        int m = 0;
        for (int i = 0; i < NODES; i++)
            if (n[i].available && !held[i])
                sorted[m++] = n[i].nends ? (n[i].ends[0] > now ? n[i].ends[0] : now) : INT64_MAX;
        qsort(sorted, (size_t)m, sizeof(sorted[0]), cmp_time);
        int64_t at = gw_place_reserve(n, NODES, &r, now, held, reserved);
        if (m < r.nodes) {
            assert_int_equal(at, -1);
            continue;
        }
        assert_int_equal(at, sorted[r.nodes - 1]);
        int taken = 0;
        for (int i = 0; i < NODES; i++) {
            if (!reserved[i])
                continue;
            taken++;
            assert_true(n[i].available && held[i] == 0);
            int64_t t = n[i].nends ? (n[i].ends[0] > now ? n[i].ends[0] : now) : INT64_MAX;
            assert_true(t <= at);
        }
        assert_int_equal(taken, r.nodes);
    }
}

/* A tenant's running jobs from the runs the scheduler reloads: a gang's
 * parts count once, a part of an attempt that ended not at all, even where
 * it sorts between the parts of the job's current attempt. The units they
 * hold (fair share) count every live part's devices, 1 for a part without
 * any. */
static void test_running_jobs_are_counted_once_per_job(void **state)
{
    gw_run_place r[] = {
        {.job_id = "j2", .tenant_id = 7, .live = 1, .ngpu = 8},   /* a gang: three parts */
        {.job_id = "j1", .tenant_id = 7, .live = 1, .ngpu = 0},
        {.job_id = "j2", .tenant_id = 7, .live = 0, .ngpu = 8},   /* its last attempt's part, still open */
        {.job_id = "j2", .tenant_id = 7, .live = 1, .ngpu = 8},
        {.job_id = "j3", .tenant_id = 3, .live = 0, .ngpu = 4},   /* only an ended attempt's part */
        {.job_id = "j2", .tenant_id = 7, .live = 1, .ngpu = 8},
        {.job_id = "j4", .tenant_id = 3, .live = 1, .ngpu = 2},
        {.job_id = "j5", .tenant_id = 9, .live = 1, .ngpu = 1},
    };
    gw_tenant_run *c;
    int n = gw_sched_count_running(r, 8, &c);
    assert_int_equal(n, 3);
    assert_int_equal(c[0].tenant_id, 3);
    assert_int_equal(c[0].running, 1);
    assert_int_equal(c[0].units, 2);
    assert_int_equal(c[1].tenant_id, 7);
    assert_int_equal(c[1].running, 2);
    assert_int_equal(c[1].units, 3 * 8 + 1);
    assert_int_equal(c[2].tenant_id, 9);
    assert_int_equal(c[2].running, 1);
    assert_int_equal(c[2].units, 1);
    free(c);
    assert_int_equal(gw_sched_count_running(NULL, 0, &c), 0);
    free(c);
}

/* A reload of the runs leaves out the runs whose ends were reported while
 * its query ran (it may have read them before their ends were committed,
 * and would hold their devices for a second more): the same node, job and
 * attempt only. */
static void test_a_reload_leaves_out_runs_reported_ended_meanwhile(void **state)
{
    gw_run_place r[] = {
        {.node_id = "n1", .job_id = "j1", .attempt = 1, .live = 1, .tenant_id = 5, .ngpu = 1},
        {.node_id = "n1", .job_id = "j2", .attempt = 2, .live = 1, .tenant_id = 5, .ngpu = 2},
        {.node_id = "n2", .job_id = "j2", .attempt = 2, .live = 1, .tenant_id = 5, .ngpu = 2},
        {.node_id = "n1", .job_id = "j3", .attempt = 3, .live = 1, .tenant_id = 6, .ngpu = 1},
    };
    gw_ended_run e[] = {
        {.node_id = "n2", .job_id = "j2", .attempt = 2},   /* one part of the gang */
        {.node_id = "n1", .job_id = "j3", .attempt = 2},   /* an earlier attempt of j3 */
        {.node_id = "n1", .job_id = "j1", .attempt = 1},
        {.node_id = "n9", .job_id = "j1", .attempt = 1},   /* not in the reload */
    };
    assert_int_equal(gw_sched_runs_drop_ended(r, 4, e, 4), 2);
    assert_string_equal(r[0].node_id, "");
    assert_int_equal(r[0].live, 0);
    assert_string_equal(r[1].node_id, "n1");
    assert_string_equal(r[2].node_id, "");
    assert_string_equal(r[3].node_id, "n1");
    assert_int_equal(r[3].live, 1);
    /* what is left is what the tenants hold */
    gw_tenant_run *c;
    assert_int_equal(gw_sched_count_running(r, 4, &c), 2);
    assert_int_equal(c[0].tenant_id, 5);
    assert_int_equal(c[0].running, 1);
    assert_int_equal(c[0].units, 2);
    assert_int_equal(c[1].units, 1);
    free(c);
    assert_int_equal(gw_sched_runs_drop_ended(r, 4, e, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_least_loaded_node_wins),
        cmocka_unit_test(test_a_task_without_gpus_takes_no_device),
        cmocka_unit_test(test_load_is_relative_to_slots),
        cmocka_unit_test(test_ties_go_to_more_free_slots_then_name),
        cmocka_unit_test(test_full_down_and_backed_off_nodes_are_skipped),
        cmocka_unit_test(test_backend_must_match),
        cmocka_unit_test(test_cuda_job_needs_enough_gpus),
        cmocka_unit_test(test_no_nodes_means_no_placement),
        cmocka_unit_test(test_devices_are_the_least_loaded),
        cmocka_unit_test(test_gpu_memory_is_respected),
        cmocka_unit_test(test_gang_takes_distinct_nodes_or_none),
        cmocka_unit_test(test_devices_are_not_shared_where_slots_do_not_exceed_them),
        cmocka_unit_test(test_best_fit_keeps_whole_nodes_where_devices_are_not_shared),
        cmocka_unit_test(test_a_reservation_waits_for_idle_devices),
        cmocka_unit_test(test_reservation_and_backfill),
        cmocka_unit_test(test_fair_pick),
        cmocka_unit_test(test_fair_share_on_device_seconds_repays_a_tenant_kept_out),
        cmocka_unit_test(test_fair_defers_a_lump_while_others_are_below_their_share),
        cmocka_unit_test(test_a_lump_yields_for_its_wait_and_no_longer),
        cmocka_unit_test(test_preemption_stops_the_youngest_runs_down_to_the_share),
        cmocka_unit_test(test_fair_waits_for_a_window_run_out),
        cmocka_unit_test(test_fair_share_follows_weights_in_devices_held),
        cmocka_unit_test(test_interned_backends_place_as_plain_strings),
        cmocka_unit_test(test_reservations_start_at_the_want_th_node_to_free),
        cmocka_unit_test(test_tasks_need_an_engine_and_prefer_nodes_with_their_image),
        cmocka_unit_test(test_running_jobs_are_counted_once_per_job),
        cmocka_unit_test(test_a_reload_leaves_out_runs_reported_ended_meanwhile),
    };
    return cmocka_run_group_tests_name("gw_place", tests, NULL, NULL);
}
