"""bench/scale_report.py: the fairness figure and its profile by slice
(python3 -m pytest -q tests/unit/bench/test_bench_scale_report.py)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import scale_report  # noqa: E402


def test_shares_are_against_the_weights_of_the_tenants_given():
    r = scale_report.share_ratios({"a": 30.0, "b": 30.0, "idle": 40.0}, {"a": 1, "b": 2})
    assert abs(r["a"] - 1.5) < 1e-9 and abs(r["b"] - 0.75) < 1e-9
    assert scale_report.share_ratios({}, {"a": 1}) == {"a": 0}


def test_a_gang_is_passed_over_when_a_later_job_of_its_tenant_starts_first():
    # (tenant, order, id, nodes); starts in ms, the window ends at 100
    jobs = [("a", 1, "g1", 16), ("a", 2, "s1", 1),      # g1 waits while s1 runs: passed over
            ("a", 3, "g2", 16),                         # nothing after it: not
            ("b", 1, "s2", 1), ("b", 2, "g3", 16), ("b", 3, "s3", 1),   # g3 before s3: not
            ("c", 1, "g4", 16), ("c", 2, "s4", 1)]      # s4 starts after the window: not
    starts = {"s1": 10, "s2": 5, "g3": 20, "s3": 30, "s4": 150}
    assert scale_report.passed_over(jobs, starts, 100) == 1
    starts["g1"] = 50                                   # started, but after s1
    assert scale_report.passed_over(jobs, starts, 100) == 1
    starts["g1"] = 5                                    # before s1
    assert scale_report.passed_over(jobs, starts, 100) == 0


def test_each_slice_counts_only_the_part_of_a_run_inside_it():
    # Two tenants of weight 1, a 60 s window cut in two 30 s slices: a
    # holds 2 GPUs throughout; b 2 GPUs in the first slice, 1 GPU in the
    # second (ending 15 s before the window's end, plus a run started
    # before the window), and a tenant with no backlog does not count.
    parts = [("a", 2, -5000, 60000), ("b", 2, 0, 30000), ("b", 1, 30000, 45000),
             ("b", 1, -10000, 60000), ("x", 8, 0, 60000)]
    s = scale_report.fair_slices(parts, {"a": 1, "b": 1}, 0, 60000)
    assert s[0] == [0.2, 0.2]      # a 60, b 90 GPU-s: 0.8 and 1.2 of fair
    # a 60, b 45: a 1.143, b 0.857
    assert s[1] == [0.143, 0.143]
    # what is left past the last whole slice: a slice when half one or more
    assert len(scale_report.fair_slices(parts, {"a": 1}, 0, 59999)) == 2
    assert len(scale_report.fair_slices(parts, {"a": 1}, 0, 44999)) == 1
    # the last slice ends at the window's end: a (2 GPUs) 59.998, b 44.999 GPU-s
    last = scale_report.fair_slices(parts, {"a": 1, "b": 1}, 0, 59999)[1]
    assert last == [0.143, 0.143]


def test_stopped_runs_count_the_cancelled_parts_ended_in_the_window():
    # (job, attempt) -> parts; the window is [0, 60000] ms
    def part(ngpu, a, b, state):
        return {"ngpu": ngpu, "t_start": a, "t_end": b, "state": state}
    runs = {("j1", 1): [part(1, -10000, 20000, "cancelled")],      # 20 GPU-s in the window
            ("j1", 2): [part(1, 25000, 60000, "succeeded")],
            ("j2", 1): [part(4, 10000, 15000, "cancelled")],       # 20 GPU-s
            ("j3", 1): [part(8, 50000, 70000, "cancelled")],       # stopped after the window
            ("j4", 1): [part(2, -5000, -1000, "cancelled")]}       # and before it
    assert scale_report.stopped_runs(runs, 0, 60000) == (2, 40.0)
    assert scale_report.stopped_runs({}, 0, 60000) == (0, 0.0)
