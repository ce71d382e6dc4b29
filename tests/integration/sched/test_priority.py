"""The ready queue is priority ordered: 9 goes before 1 when a slot frees."""

from stack import ts


def test_priority_9_starts_before_earlier_priority_1_jobs(A, stack):
    # node slots free one at a time (2 s, then 3 s) so the order is exact
    busy = [A.submit("sleep", {"seconds": s}) for s in (2, 3)]
    for b in busy:
        A.wait(b["id"], 10, states=("running",))
    low = [A.submit("sleep", {"seconds": 0.2}, priority=1) for _ in range(3)]
    high = A.submit("sleep", {"seconds": 0.2}, priority=9)
    for j in low + [high]:
        assert A.job(j["id"])["state"] == "queued", "submitted while every slot is busy"
    done = {j["id"]: A.wait(j["id"], 20) for j in low + [high]}
    assert all(j["state"] == "succeeded" for j in done.values()), done
    hs = ts(done[high["id"]]["started_at"])
    for j in low:
        ls = ts(done[j["id"]]["started_at"])
        assert hs < ls, f"priority 9 started {hs}, a priority 1 job started {ls}"


def test_equal_priority_is_first_in_first_out(A, stack):
    busy = [A.submit("sleep", {"seconds": s}) for s in (1.5, 3)]
    for b in busy:
        A.wait(b["id"], 10, states=("running",))
    jobs = [A.submit("sleep", {"seconds": 0.1}, priority=4) for _ in range(3)]
    done = [A.wait(j["id"], 20) for j in jobs]
    starts = [ts(j["started_at"]) for j in done]
    assert starts == sorted(starts), f"same priority ran out of order: {starts}"


def test_jobs_no_node_fits_do_not_hold_back_the_jobs_behind_them(A, stack):
    """More urgent jobs than one window of the scheduler's scan (64) ask for
    a CUDA node that no node offers; a priority-0 CPU job queued behind them
    still runs at once."""
    stuck = [A.submit("sleep", {"seconds": 0}, priority=9,
                      resources={"backend": "cuda", "gpus": 1}) for _ in range(150)]
    try:
        j = A.submit("sleep", {"seconds": 0}, priority=0)
        done = A.wait(j["id"], 15)
        assert done["state"] == "succeeded", done
        assert all(A.job(s["id"])["state"] == "queued" for s in stuck[:3] + stuck[-3:])
    finally:
        for s in stuck:
            A.cancel(s["id"])
