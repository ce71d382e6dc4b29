"""Cancelling jobs: a queued job at once, a running one once its node stops
it, a finished one never."""

import time

import pytest


def busy_all_nodes(client, stack, seconds=8):
    """One long sleep job per node (slots 1 each), each seen running."""
    jobs = [client.submit("sleep", {"seconds": seconds}) for _ in stack.node_names]
    for j in jobs:
        client.wait(j["id"], 10, states=("running",))
    return jobs


def test_cancel_queued_job_is_cancelled_at_once(A, stack):
    busy = busy_all_nodes(A, stack)
    j = A.submit("sleep", {"seconds": 0.1})
    assert A.job(j["id"])["state"] == "queued"
    r = A.cancel(j["id"])
    assert r.status_code == 200, r.text
    assert r.json()["id"] == j["id"]
    assert r.json()["state"] == "cancelled", r.json()
    got = A.job(j["id"])
    assert got["state"] == "cancelled"
    assert got["finished_at"] is not None
    assert got["started_at"] is None and got["attempts"] == 0
    # it never runs, even once nodes free up: a job queued after it runs,
    # and it is still cancelled, never attempted
    for b in busy:
        A.cancel(b["id"])
    A.run("sleep", {"seconds": 0.1}, timeout=30)
    got = A.job(j["id"])
    assert got["state"] == "cancelled" and got["attempts"] == 0 and got["started_at"] is None, got


def test_cancel_running_job_ends_cancelled_within_seconds(A, stack):
    busy = busy_all_nodes(A, stack, seconds=30)
    t0 = time.monotonic()
    r = A.cancel(busy[0]["id"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] in ("running", "cancelled"), body
    if body["state"] == "running":
        assert body.get("cancel_requested") is True, body
    j = A.wait(busy[0]["id"], 5)
    assert j["state"] == "cancelled", j
    assert time.monotonic() - t0 < 5
    assert j["finished_at"] is not None
    r = A.result(j["id"])
    assert r.status_code == 409 and r.json().get("state") == "cancelled", r.text
    # the freed node takes new work
    nxt = A.run("sleep", {"seconds": 0}, timeout=15)
    assert nxt["state"] == "succeeded"


def test_cancel_finished_job_is_409(A):
    j = A.run("sleep", {"seconds": 0})
    r = A.cancel(j["id"])
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "conflict"
    assert r.json().get("state") == "succeeded", r.text
    assert A.job(j["id"])["state"] == "succeeded"


def test_cancel_cancelled_job_is_409(A, stack):
    busy_all_nodes(A, stack)
    j = A.submit("sleep", {"seconds": 0})
    assert A.cancel(j["id"]).status_code == 200
    r = A.cancel(j["id"])
    assert r.status_code == 409, r.text
    assert r.json().get("state") == "cancelled"


@pytest.mark.parametrize("job_id", ["00000000-0000-4000-8000-000000000000", "not-a-uuid"])
def test_cancel_unknown_job_is_404(A, job_id):
    r = A.cancel(job_id)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "not_found"


def test_cancel_while_the_node_is_still_accepting_the_run_stops_it(A, stack):
    """The cancel arrives after the job was handed to its node but before
    the node has started the run. The node's next lease poll carries the
    cancel, which stops the run; the job ends cancelled, not succeeded."""
    from fakenode import FakeNode
    node = FakeNode(stack.cluster_base, stack.cluster_token, "fake-slow-accept",
                    accept_delay_s=2.0, run_s=4.0).start()
    try:
        j = A.submit("sleep", {"seconds": 1}, resources={"backend": "cuda", "gpus": 1})
        assert node.posting.wait(10), "the job never reached the fake node"
        r = A.cancel(j["id"])
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "running" and r.json()["cancel_requested"] is True, r.json()
        done = A.wait(j["id"], 15)
        assert done["state"] == "cancelled", done
        posted = node.seen("POST")
        assert len(posted) == 1
        stops = [e for e in node.seen("DELETE") if e[0] >= posted[0][0] and e[3] == 200]
        assert stops, f"no cancel reached the run after it was taken: {node.events}"
    finally:
        node.close()
