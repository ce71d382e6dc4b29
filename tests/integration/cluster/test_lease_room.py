"""A node that restarts counts its ended runs (the lease poll's seq) from 0
again. What its previous process last reported (a high seq, no free slot)
must not make the gateway hand the new process nothing (gateway/sched/lease.c)."""

import contextlib
import threading
import time

import pytest
import requests

import stack as stk


def test_a_restarted_node_gets_runs_despite_its_old_report(A, stack):
    reg = {"name": "node-restarted", "url": "http://127.0.0.1:9", "backend": "cuda", "slots": 1,
           "kernels": ["sleep"], "gpus": [{"name": "Fake GPU", "memory_bytes": 1 << 30}]}
    tok = {"Authorization": f"Bearer {stack.cluster_token}"}
    base = stack.cluster_base
    r = requests.post(f"{base}/v1/cluster/nodes/register", headers=tok, json=reg, timeout=5)
    assert r.status_code == 200, r.text
    node, cred = r.json()["id"], r.json()["credential"]
    h = {"Authorization": f"Bearer {cred}"}
    job = None
    try:
        # the old process: many runs ended, no room
        r = requests.post(f"{base}/v1/cluster/nodes/{node}/results", headers=h, timeout=5,
                          json={"results": [], "free": 0, "seq": 1000})
        assert r.status_code == 200, r.text
        # the new process registers again (same name, its credential: same id) and polls from seq 0
        r = requests.post(f"{base}/v1/cluster/nodes/register", headers=tok,
                          json=dict(reg, credential=cred), timeout=5)
        assert r.status_code == 200 and r.json()["id"] == node, r.text
        job = A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})
        r = requests.post(f"{base}/v1/cluster/nodes/{node}/lease", headers=h, timeout=15,
                          json={"max": 1, "wait_ms": 5000, "seq": 0})
        assert r.status_code == 200, r.text
        runs = r.json()["runs"]
        assert [x["job_id"] for x in runs] == [job["id"]], r.json()
    finally:
        if job:
            A.cancel(job["id"])
        requests.delete(f"{base}/v1/cluster/nodes/{node}", headers=h, timeout=5)


# The lease thread probes the polls it holds for work another gateway made
# for them, in one statement for all of them (ST_NODES_WITH_WORK), and a
# poll whose node it knows to be quiet is answered at the end of its wait
# without a look. What another gateway does must still reach the node.

def register(stack, base, name):
    """A one-slot CUDA node registered on base's cluster listener, not
    drained; its id and credential header."""
    r = stack.register_node(name, backend="cuda", gpus=[{"name": "Fake GPU", "memory_bytes": 1 << 30}],
                            drain=False, base=base)
    assert r.status_code == 200, r.text
    return r.json()["id"], {"Authorization": f"Bearer {r.json()['credential']}"}


@contextlib.contextmanager
def beating(base, node, h, held):
    """Heartbeats for node every 0.5 s (the stack judges nodes quickly),
    listing the run ids in held, while the block runs."""
    stop = threading.Event()

    def beat():
        while not stop.wait(0.5):
            try:
                requests.post(f"{base}/v1/cluster/nodes/{node}/heartbeat", headers=h, timeout=5,
                              json={"running": len(held), "slots": 1, "runs": list(held)})
            except requests.RequestException:
                pass
    t = threading.Thread(target=beat, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def poll_until(base, node, h, found, max_runs, seconds, wait_ms=4000):
    """Polls node's lease (each poll held up to wait_ms) until found(answer)
    or seconds pass; returns the answer that matched, or None."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r = requests.post(f"{base}/v1/cluster/nodes/{node}/lease", headers=h, timeout=30,
                          json={"max": max_runs, "wait_ms": wait_ms})
        assert r.status_code == 200, r.text
        if found(r.json()):
            return r.json()
    return None


@pytest.mark.timeout(120)
def test_a_cancel_asked_on_another_gateway_reaches_a_poll_held_here(A, stack):
    base = stack.cluster_base
    node, h = register(stack, base, "node-probe-cancel")
    port = stk.free_port()
    proc = stack.start_gateway("gateway-probe", port, KOWLOON_DRAIN_S=0)
    job, held = None, []
    try:
        with beating(base, node, h, held):
            job = A.submit("sleep", {"seconds": 600}, resources={"backend": "cuda", "gpus": 1})
            got = poll_until(base, node, h,
                             lambda b: any(x["job_id"] == job["id"] for x in b["runs"]), 1, 30)
            assert got, "the run never reached the node"
            held.append(f"{job['id']}.{got['runs'][0]['attempt']}")
            # The node's next polls find nothing: its room is quiet here. The
            # cancel is asked on the other gateway, which wakes no poll here.
            r = stack.client("A", base=f"http://127.0.0.1:{port}").cancel(job["id"])
            assert r.status_code in (200, 202), r.text
            got = poll_until(base, node, h,
                             lambda b: any(x["job_id"] == job["id"] for x in b["cancel"]), 0, 40)
            assert got, "the cancel asked on the other gateway never reached the node"
    finally:
        proc.stop()
        stack.procs.pop("gateway-probe", None)
        if job:
            A.cancel(job["id"])
        requests.delete(f"{base}/v1/cluster/nodes/{node}", headers=h, timeout=5)


@pytest.mark.timeout(120)
def test_a_poll_held_by_a_gateway_without_the_scheduler_gets_the_run_claimed_elsewhere(A, stack):
    proc = stack.start_gateway("gateway-probe", stk.free_port(), KOWLOON_DRAIN_S=0)
    base = proc.cluster_base
    node, h = register(stack, base, "node-probe-claim")
    job = None
    try:
        with open(proc.log_path) as f:
            assert "holds the scheduler lock" not in f.read()
        with beating(base, node, h, []):
            # the node's first look there finds nothing: it is quiet there
            r = requests.post(f"{base}/v1/cluster/nodes/{node}/lease", headers=h, timeout=30,
                              json={"max": 1, "wait_ms": 0})
            assert r.status_code == 200 and r.json()["runs"] == [], r.text
            job = A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})
            got = poll_until(base, node, h,
                             lambda b: any(x["job_id"] == job["id"] for x in b["runs"]), 1, 40)
            assert got, "the run the scheduler claimed never reached the poll held by the other gateway"
    finally:
        if job:
            A.cancel(job["id"])
        requests.delete(f"{base}/v1/cluster/nodes/{node}", headers=h, timeout=5)
        proc.stop()
        stack.procs.pop("gateway-probe", None)


@pytest.mark.timeout(120)
def test_runs_two_nodes_do_not_hold_are_requeued_from_one_batch_of_heartbeats(A, stack):
    """The look for runs a node does not hold is made for a whole batch of
    heartbeats at once: runs leased to two nodes whose heartbeats list none
    of them go back to the queue (node_lost), each node's own."""
    base = stack.cluster_base
    nodes = [register(stack, base, f"node-unheld-{k}") for k in range(2)]
    jobs = []
    try:
        for node, h in nodes:
            job = A.submit("sleep", {"seconds": 600}, resources={"backend": "cuda", "gpus": 1})
            jobs.append(job["id"])
            got = poll_until(base, node, h, lambda b: bool(b["runs"]), 1, 30)
            assert got, f"no run reached node {node}"
        with contextlib.ExitStack() as beats:
            for node, h in nodes:
                beats.enter_context(beating(base, node, h, []))   # held: none
            ids = ",".join(f"'{j}'" for j in jobs)
            # re-queued: node_lost until placed again, then a second attempt
            stk.wait_until(lambda: [r[0] for r in stack.psql(
                f"SELECT (error_code = 'node_lost' OR attempts >= 2)::text FROM jobs"
                f" WHERE id IN ({ids})")] == ["true"] * 2, 60, 0.5, "both runs re-queued as lost")
    finally:
        for j in jobs:
            A.cancel(j)
        for node, h in nodes:
            requests.delete(f"{base}/v1/cluster/nodes/{node}", headers=h, timeout=5)
