"""bench/philly.py: the Philly-shaped workload and the offline packer of the
cluster-scale bench (python3 -m pytest -q tests/unit/bench/test_bench_philly.py)."""

import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import philly  # noqa: E402


def test_shapes_follow_the_stated_shares():
    _, jobs = philly.generate(100000, mean_s=60, seed=3)
    n = len(jobs)
    for g, nodes, p in philly.SHAPES:
        got = sum(1 for j in jobs if j["gpus"] == g and j["nodes"] == nodes) / n
        assert abs(got - p) < 0.01 + 0.1 * p, (g, nodes, got, p)
    assert abs(sum(p for _, _, p in philly.SHAPES) - 1.0) < 1e-9
    # the three kinds are all there
    assert any(j["nodes"] == 16 for j in jobs) and any(j["gpus"] == 8 and j["nodes"] == 1 for j in jobs)


def test_single_shapes_keep_the_durations_with_one_gpu_each():
    """The control path's ceiling (KL_SCALE_SHAPES=single): the same trace
    durations, tenants and seed, every job one GPU on one node."""
    _, philly_jobs = philly.generate(2000, mean_s=1, seed=5)
    _, single = philly.generate(2000, mean_s=1, seed=5, shapes="single")
    assert all(j["gpus"] == 1 and j["nodes"] == 1 for j in single)
    assert [j["seconds"] for j in single] == [j["seconds"] for j in philly_jobs]
    assert [j["tenant"] for j in single] == [j["tenant"] for j in philly_jobs]
    assert any(j["gpus"] > 1 for j in philly_jobs)


def test_time_is_compressed_to_the_mean_asked_for():
    factor, jobs = philly.generate(50000, mean_s=10, seed=4)
    assert math.isclose(factor, philly.TRACE_MEAN_S / 10)
    mean = sum(j["seconds"] for j in jobs) / len(jobs)
    assert 8.5 < mean < 11.5, mean
    # Gavel's bounds: 60 * 10^1.5 s to 60 * 10^4 s before compression
    assert min(j["trace_s"] for j in jobs) >= 60 * 10 ** 1.5 - 1e-6
    assert max(j["trace_s"] for j in jobs) <= 60 * 10 ** 4 + 1e-6
    assert all(math.isclose(j["seconds"], j["trace_s"] / factor, abs_tol=1e-3) for j in jobs[:100])


def test_fifty_tenants_interleaved_with_weights_one_to_four():
    _, jobs = philly.generate(200, mean_s=60)
    assert len({j["tenant"] for j in jobs}) == 50
    assert jobs[0]["tenant"] == jobs[50]["tenant"] != jobs[1]["tenant"]
    assert {j["weight"] for j in jobs} == {1, 2, 3, 4}


def test_the_same_seed_gives_the_same_jobs():
    assert philly.generate(100, 60, seed=9) == philly.generate(100, 60, seed=9)
    assert philly.generate(100, 60, seed=9) != philly.generate(100, 60, seed=10)


def test_a_job_body_is_a_sleep_on_its_gpus_and_nodes():
    one = philly.job_body({"gpus": 1, "nodes": 1, "seconds": 4.2})
    assert one == {"kernel": "sleep", "params": {"seconds": 4.2},
                   "resources": {"backend": "cuda", "gpus": 1}, "timeout_s": 7}
    gang = philly.job_body({"gpus": 8, "nodes": 16, "seconds": 30})
    assert gang["resources"] == {"backend": "cuda", "gpus": 8, "nodes": 16}
    assert gang["timeout_s"] == 32


def job(g, n, s):
    return {"gpus": g, "nodes": n, "seconds": s}


def test_the_packer_fills_every_gpu_when_jobs_fit():
    util, started = philly.pack([job(1, 1, 10)] * 16, nodes=2, gpus=8, window_s=10)
    assert started == 16 and math.isclose(util, 1.0)
    util, started = philly.pack([job(1, 1, 10)] * 8, nodes=2, gpus=8, window_s=10)
    assert math.isclose(util, 0.5)


def test_the_packer_places_one_node_jobs_best_fit_so_whole_nodes_stay_free():
    # the 1-GPU jobs share one node; the 8-GPU job still finds a whole one
    util, started = philly.pack([job(1, 1, 10), job(1, 1, 10), job(8, 1, 10)],
                                nodes=2, gpus=8, window_s=10)
    assert started == 3
    assert math.isclose(util, 10 / 16)


def test_a_gang_takes_whole_nodes_or_waits():
    util, started = philly.pack([job(8, 2, 10)], nodes=2, gpus=8, window_s=10)
    assert started == 1 and math.isclose(util, 1.0)
    util, started = philly.pack([job(8, 3, 10)], nodes=2, gpus=8, window_s=10)
    assert started == 0 and util == 0
    # a gang behind a running job starts when its nodes free, small jobs backfill meanwhile
    util, started = philly.pack([job(1, 1, 5), job(8, 2, 5), job(1, 1, 5)],
                                nodes=2, gpus=8, window_s=10)
    assert started == 3
    assert math.isclose(util, (2 * 5 + 16 * 5) / 160)


def test_only_the_window_counts():
    util, _ = philly.pack([job(8, 1, 10)], nodes=1, gpus=8, window_s=20, start_s=5)
    assert math.isclose(util, 5 * 8 / (8 * 15))
