"""A queued job's object says where it stands: `queue.position` (1: the
next to be placed) from the ready queue, and `queue.eta_s`, the seconds
until it starts estimated from the jobs ahead, its kernel's recent run
times and the slots up. Only queued jobs carry it."""

import time
import uuid

# a job no node here can take (no node has 16 GPUs): it stays queued,
# behind every other job (priority 0)
PARKED = {"kernel": "sleep", "params": {"seconds": 0}, "priority": 0,
          "resources": {"backend": "cuda", "gpus": 16}}


def test_queued_jobs_carry_their_position_and_eta(A):
    # recent runs of the kernel, for the estimate
    ran = [A.submit("sleep", {"seconds": 0.2}, resources={"backend": "cpu"}) for _ in range(2)]
    for j in ran:
        assert A.wait(j["id"])["state"] == "succeeded"
    run = uuid.uuid4().hex
    ids = [A.submit(**PARKED, labels={"run": run})["id"] for _ in range(3)]
    try:
        # The estimate's inputs are kept 5 s: one read before the two runs
        # ended (another test's, or with the nodes drained by one) can
        # still say "none" for that long. It failed so once in CI.
        deadline = time.monotonic() + 15
        while True:
            q = [A.job(i)["queue"] for i in ids]
            etas = [x["eta_s"] for x in q]
            if all(e is not None for e in etas) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        pos = [x["position"] for x in q]
        assert pos[0] >= 1 and pos[1] == pos[0] + 1 and pos[2] == pos[0] + 2, q
        assert all(isinstance(e, (int, float)) and e >= 0 for e in etas), q
        assert etas[0] <= etas[1] <= etas[2], q
        # "queue" comes right after "state"
        assert list(A.job(ids[0]))[:3] == ["id", "state", "queue"]
        # one ahead leaves: the others move up
        assert A.cancel(ids[0]).status_code == 200
        assert [A.job(i)["queue"]["position"] for i in ids[1:]] == [pos[0], pos[0] + 1]
        # a job that is not queued has no queue
        assert "queue" not in A.job(ids[0]) and "queue" not in A.job(ran[0]["id"])
    finally:
        for i in ids[1:]:
            A.cancel(i)
