"""Gang reservation and backfill (gateway/sched/placement.h) on the test stack's
two one-slot CPU nodes: a 4-rank gang (2 nodes x 2 ranks) that cannot start
while a small job runs reserves both nodes from that job's end (started_at +
timeout_s); a small job that ends by then runs on the free node meanwhile,
one that would not waits until the gang has started."""

from stack import ts

GANG = {"kernel": "allreduce", "params": {"count": 4096, "iters": 2},
        "resources": {"nodes": 2, "gpus": 2, "backend": "cpu"}}


def test_gang_starts_by_its_reservation_and_only_short_jobs_backfill(A, stack):
    up = [n for n in stack.admin.nodes() if n["state"] == "up" and not n["draining"]]
    assert sorted(n["name"] for n in up) == ["node-a", "node-b"], up
    first = A.submit("sleep", {"seconds": 2.5}, timeout_s=4, resources={"backend": "cpu"})
    first = A.wait(first["id"], 10, states=("running",))
    gang = A.post_job(dict(GANG)).json()
    # a slot is free (the other node), but the gang needs both
    assert A.job(gang["id"])["state"] == "queued"
    short = A.submit("sleep", {"seconds": 0.5}, timeout_s=2, resources={"backend": "cpu"})
    long = A.submit("sleep", {"seconds": 1}, timeout_s=60, resources={"backend": "cpu"})
    done = {k: A.wait(j["id"], 60) for k, j in
            (("first", first), ("gang", gang), ("short", short), ("long", long))}
    for k, j in done.items():
        assert j["state"] == "succeeded", (k, j)
    start = {k: ts(j["started_at"]).timestamp() for k, j in done.items()}
    reserved_at = start["first"] + 4   # the running job's started_at + timeout_s
    print(f"backfill: gang started {start['gang'] - start['first']:.2f} s after the first job "
          f"(reserved start +4 s); short job +{start['short'] - start['first']:.2f} s, "
          f"long job +{start['long'] - start['first']:.2f} s")
    # the short job filled the hole before the gang; the long one waited for it
    assert start["short"] < start["gang"], start
    assert start["long"] >= start["gang"], start
    # the gang started by its reservation (with the scheduler's second of slack)
    assert start["gang"] <= reserved_at + 1.0, start
    assert len(done["gang"]["placement"]) == 2
    assert done["gang"]["attempts"] == 1
