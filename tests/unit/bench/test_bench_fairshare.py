"""bench/fairshare.py: the offline fair-share model of issue 20's figure 4
(python3 -m pytest -q tests/unit/bench/test_bench_fairshare.py)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import fairshare  # noqa: E402
import philly  # noqa: E402


def jobs_of(spec):
    """(tenant, gpus, nodes, seconds) rows as philly.py's job dicts."""
    return [{"i": i, "tenant": t, "weight": 1, "gpus": g, "nodes": n, "seconds": s}
            for i, (t, g, n, s) in enumerate(spec)]


# Two tenants of weight 1 on two nodes of 8 GPUs: A's first job is a gang
# of both nodes, twice A's share; then 1-GPU jobs of both.
LUMP = jobs_of([("a", 8, 2, 10)] + [("a", 1, 1, 10)] * 8 + [("b", 1, 1, 10)] * 8)


def test_a_gang_of_twice_a_share_takes_the_cluster_without_yielding():
    r = fairshare.run(LUMP, nodes=2, gpus=8, window=10)
    assert r["worst"] > 0.99 and r["util"] == 1.0, r


def test_a_lump_that_yields_leaves_each_tenant_its_share_and_starts_next():
    r = fairshare.run(LUMP, nodes=2, gpus=8, window=10, lumps="yield")
    assert r["worst"] < 0.01 and r["util"] == 1.0, r
    # over 30 s it ran after the 1-GPU jobs: the same GPU-seconds either way
    late = fairshare.run(LUMP, nodes=2, gpus=8, window=30, lumps="yield")
    first = fairshare.run(LUMP, nodes=2, gpus=8, window=30)
    assert late["util"] == first["util"] == round(320 / 480, 4), (late, first)


def test_a_lump_that_has_waited_its_time_goes_in_its_turn():
    r = fairshare.run(LUMP, nodes=2, gpus=8, window=10, lumps="yield", lump_wait=0)
    assert r["worst"] > 0.99, r


def test_jobs_within_half_a_share_never_yield():
    spec = [("a", 4, 1, 10)] * 4 + [("b", 1, 1, 10)] * 16
    none = fairshare.run(jobs_of(spec), nodes=2, gpus=8, window=10)
    yielding = fairshare.run(jobs_of(spec), nodes=2, gpus=8, window=10, lumps="yield")
    assert none == yielding, (none, yielding)


def test_the_philly_mix_runs_with_every_tenant_counted():
    _, jobs = philly.generate(3000, mean_s=10, seed=2)
    r = fairshare.run(jobs, nodes=20, gpus=8, window=20)
    assert 0 <= r["mean"] <= r["worst"] and 0.5 < r["util"] <= 1.0, r
