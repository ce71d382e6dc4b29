"""A single-node run claimed for a node whose lease poll this gateway holds
is handed to that poll by the claim itself (leased in the claim's
statement, with no lease look: gateway/sched/lease.c's outbox). A run
no poll here takes (its node stopped polling here for 2 s, or had no room
for it for 5 s) is taken back to the claimed runs, so the node's next look
(on any gateway) gets it; a cancel taken while the run waits travels with
it."""

import contextlib
import re
import threading
import time

import pytest
import requests

import stack as stk
from test_lease_room import beating, register


def lease_counts(stack):
    """kowloon_lease_runs_total of the stack's gateway, by how."""
    r = requests.get(stack.cluster_base + "/metrics", timeout=10,
                     headers={"Authorization": f"Bearer {stack.cluster_token}"})
    assert r.status_code == 200, r.text[:300]
    return {how: float(n) for how, n in
            re.findall(r'^kowloon_lease_runs_total\{how="(\w+)"\} (\S+)$', r.text, re.M)}


def delta(after, before, how):
    return after.get(how, 0.0) - before.get(how, 0.0)


def held_poll(base, node, h, max_runs, wait_ms):
    """Sends node's lease poll in a thread; (thread, box): box["answer"] is
    its JSON once answered."""
    box = {}

    def poll():
        r = requests.post(f"{base}/v1/cluster/nodes/{node}/lease", headers=h, timeout=30,
                          json={"max": max_runs, "wait_ms": wait_ms})
        box["status"], box["answer"] = r.status_code, r.json()
    t = threading.Thread(target=poll, daemon=True)
    t.start()
    time.sleep(1.0)   # the poll is held when the job comes
    return t, box


def lease_row(stack, job):
    return tuple(stack.psql(f"SELECT state, attempts, (leased_at IS NOT NULL)::text FROM jobs"
                            f" WHERE id = '{job}'")[0])


@contextlib.contextmanager
def handed_one(A, stack, name, max_runs, wait_ms):
    """A node registered by hand and heartbeating (holding no run) whose
    poll for max_runs is held while a job for it is submitted; yields (node,
    its credential header, the job id, the poll's thread and box, the lease
    counts before). The job is cancelled and the node removed at the end."""
    base = stack.cluster_base
    node, h = register(stack, base, name)
    job = None
    try:
        with beating(base, node, h, []):
            before = lease_counts(stack)
            t, box = held_poll(base, node, h, max_runs, wait_ms)
            job = A.submit("sleep", {"seconds": 600}, resources={"backend": "cuda", "gpus": 1})["id"]
            yield node, h, job, t, box, before
    finally:
        if job:
            A.cancel(job)
        requests.delete(f"{base}/v1/cluster/nodes/{node}", headers=h, timeout=5)


def poll(stack, node, h, max_runs, wait_ms):
    r = requests.post(f"{stack.cluster_base}/v1/cluster/nodes/{node}/lease", headers=h, timeout=30,
                      json={"max": max_runs, "wait_ms": wait_ms})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.timeout(90)
def test_a_run_claimed_for_a_held_poll_comes_in_the_claims_answer_without_a_look(A, stack):
    with handed_one(A, stack, "node-hand", 1, 20000) as (node, h, job, t, box, before):
        t.join(25)
        assert box.get("status") == 200, box
        runs = box["answer"]["runs"]
        assert [r["job_id"] for r in runs] == [job], box["answer"]
        assert runs[0]["attempt"] == 1 and runs[0]["kernel"] == "sleep"
        assert runs[0]["params"] == {"seconds": 600}
        after = lease_counts(stack)
        assert delta(after, before, "handed") == 1, (before, after)
        assert delta(after, before, "looked") == 0, (before, after)
        assert lease_row(stack, job) == ("running", "1", "true")


@pytest.mark.timeout(90)
def test_a_handed_run_no_answer_took_is_taken_back_and_a_cancel_follows_it(A, stack):
    """The poll held asks for no run (max 0: the node was full when it sent
    it), so the run handed to it waits; after 5 s it is taken back (claimed,
    not leased), and the node's next poll takes it by a look, with the
    cancel asked meanwhile in a later answer."""
    with handed_one(A, stack, "node-hand-back", 0, 6000) as (node, h, job, t, box, before):
        stk.wait_until(lambda: delta(lease_counts(stack), before, "taken_back") == 1, 15, 0.2,
                       "the handed run taken back")
        assert lease_row(stack, job) == ("running", "1", "false")
        t.join(10)
        assert box.get("status") == 200 and box["answer"]["runs"] == [], box
        assert A.cancel(job).status_code == 200
        got = poll(stack, node, h, 1, 5000)
        assert [x["job_id"] for x in got["runs"]] == [job], got
        assert got["runs"][0]["attempt"] == 1
        after = lease_counts(stack)
        assert delta(after, before, "handed") == 0 and delta(after, before, "looked") == 1
        assert lease_row(stack, job) == ("running", "1", "true")
        assert poll(stack, node, h, 0, 5000)["cancel"] == [{"job_id": job, "attempt": 1}]


@pytest.mark.timeout(90)
def test_a_cancel_taken_while_a_handed_run_waits_travels_with_the_run(A, stack):
    """The run waits in the outbox (the poll asks for none), the job is
    cancelled: the look the cancel wakes takes the cancel, which must not
    reach the node before the run (a node ignores a cancel of a run it does
    not hold). The next poll with room gets the run and its cancel in one
    answer."""
    with handed_one(A, stack, "node-hand-cancel", 0, 1500) as (node, h, job, t, box, before):
        stk.wait_until(lambda: lease_row(stack, job)[0] == "running", 10, 0.05, "the claim")
        assert A.cancel(job).status_code == 200
        t.join(10)
        assert box.get("status") == 200, box
        assert box["answer"] == {"runs": [], "cancel": []}, box["answer"]
        got = poll(stack, node, h, 1, 3000)
        assert [x["job_id"] for x in got["runs"]] == [job], got
        assert got["cancel"] == [{"job_id": job, "attempt": 1}], got
