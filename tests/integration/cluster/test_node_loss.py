"""Losing a node mid-run: the job is re-queued and runs again on the other
node. The killed node is restarted afterwards; the module has its own stack."""

import signal
import time

import pytest
import requests

from stack import free_port, ts, wait_until


pytestmark = pytest.mark.destructive


@pytest.fixture(scope="module")
def stack(own_stack):
    """These tests kill, stop and add nodes: a stack of this module's own
    (conftest.py)."""
    return own_stack


def extra_node_while_busy(A, stack, name, busy_s):
    """Fills every regular node with a sleep of busy_s seconds, then starts
    one more node (name, on a free port), so the next job goes to it.
    Returns the node's process and the ids of the sleeps."""
    busy = [A.submit("sleep", {"seconds": busy_s}) for _ in stack.node_names]
    for b in busy:
        A.wait(b["id"], 10, states=("running",))
    stack.node_ports[name] = free_port()
    return stack.start_node(name), [b["id"] for b in busy]


def end_busy(A, busy):
    """Cancels the sleeps of extra_node_while_busy and waits for them to end,
    so the next test finds the regular nodes free."""
    for b in busy:
        A.cancel(b)
    for b in busy:
        A.wait(b, 20)


@pytest.mark.timeout(60)
def test_deregistered_node_is_never_dispatched_to(A, stack):
    """A node that shut down cleanly (DELETE /v1/nodes/{id}) gets no job
    afterwards, and the job waiting for a slot stays plainly queued."""
    name = "node-leaver"
    p, _ = extra_node_while_busy(A, stack, name, busy_s=4)
    try:
        stack.wait_nodes_up([name], timeout=20)
        time.sleep(1.5)  # long enough for any scheduler cache to know it
    finally:
        p.stop(signal.SIGTERM)  # deregisters before it exits
    assert p.popen.returncode == 0, "clean shutdown should exit 0"
    j = A.submit("sleep", {"seconds": 0})
    seen = []
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        seen.append(A.job(j["id"]))
        time.sleep(0.05)
    done = A.wait(j["id"], 20)
    assert done["state"] == "succeeded", done
    sent_to_leaver = stack.psql_value(
        f"SELECT count(*) FROM job_events WHERE job_id = '{j['id']}' AND node_name = '{name}'")
    assert sent_to_leaver == "0", f"job dispatched to {name} after it deregistered"
    assert done["node"] in stack.node_names and done["attempts"] == 1, done
    odd = [s for s in seen if s["state"] == "queued" and (s["started_at"] or s["node"])]
    assert not odd, f"a queued job shows a start or a node: {odd[0]}"


@pytest.mark.timeout(90)
def test_job_on_killed_node_is_retried_on_the_other_node(A, stack):
    # the other node is busy for a while, so the lost job waits re-queued
    blocker = A.wait(A.submit("sleep", {"seconds": 7})["id"], 10, states=("running",))
    j = A.submit("sleep", {"seconds": 4}, max_attempts=3)
    j = stack.wait_run_on_node(A.wait(j["id"], 10, states=("running",)))
    victim, other = j["node"], blocker["node"]
    assert victim in stack.node_names and victim != other, (j, blocker)
    first_start = ts(j["started_at"])
    stack.kill_node(victim)
    try:
        snaps, deadline = [], time.monotonic() + 40
        while True:
            done = A.job(j["id"])
            snaps.append(done)
            if done["state"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert done["state"] == "succeeded", done
        assert done["attempts"] == 2, done
        assert done["node"] == other, done
        assert ts(done["started_at"]) >= first_start
        by = stack.nodes_by_name()
        assert by[victim]["state"] == "down", by[victim]
        requeued = [s for s in snaps if s["state"] == "queued"]
        assert requeued, "the job was never seen re-queued while the other node was busy"
        stale = [s for s in requeued if s["node"] is not None or s["started_at"] is not None]
        assert not stale, ("a re-queued job still shows the lost attempt's node/started_at: "
                           f"node={stale[0]['node']} started_at={stale[0]['started_at']}")
    finally:
        stack.start_node(victim)
        stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(60)
def test_restarted_node_takes_work_again(A, stack):
    stack.wait_nodes_up(stack.node_names, timeout=20)
    jobs = [A.submit("sleep", {"seconds": 1}) for _ in stack.node_names]
    done = [A.wait(j["id"], 20) for j in jobs]
    assert all(j["state"] == "succeeded" for j in done), done
    assert {j["node"] for j in done} == set(stack.node_names), "both nodes should have run one"


@pytest.mark.timeout(90)
def test_restarted_node_with_lost_run_requeues_it(A, stack):
    """A node that comes back under the same name before it is declared
    down has forgotten its runs; the gateway re-queues them."""
    j = A.submit("sleep", {"seconds": 3})
    j = stack.wait_run_on_node(A.wait(j["id"], 10, states=("running",)))
    victim = j["node"]
    stack.kill_node(victim)
    stack.start_node(victim)
    done = A.wait(j["id"], 40)
    stack.wait_nodes_up(stack.node_names, timeout=30)
    assert done["state"] == "succeeded", done
    assert done["attempts"] == 2, done


@pytest.mark.timeout(90)
def test_a_part_of_an_ended_attempt_holds_its_slot_until_its_node_registers_again(A, stack):
    """A gang part whose attempt has ended (the gang requeued or failed) is
    cancelled on its node, which takes time: until its node reports it
    ended, stops listing it in its heartbeats, re-registers or leaves, the
    scheduler keeps its devices and slot taken. (The simulated cluster
    caught the gateway giving a cancelled part's GPUs to the next job in
    the same lease reply.) Here each 1-slot node holds such a part, written
    into job_ranks as an ended gang's would be: a new job waits; node-a
    restarts (registers again, so it holds nothing) and the job runs there,
    while node-b's part still holds node-b; then node-b's heartbeats, which
    never listed it, close it too.

    These nodes never had the parts, so their heartbeats would let them go
    once the lease is 10 s old (the grace for a lease still on its way):
    leased "a minute from now" keeps that check off them for the test's
    span, standing for nodes that still run them."""
    stack.wait_nodes_up(stack.node_names, timeout=20)
    ended = A.run("sleep", {"seconds": 0})
    assert ended["state"] == "succeeded", ended
    stack.psql(
        "INSERT INTO job_ranks (job_id, attempt, node_rank, node_id, node_name, leased_at)"
        f" SELECT '{ended['id']}', 1, row_number() OVER (ORDER BY name) - 1, id, name,"
        " now() + interval '60 s'"
        " FROM nodes WHERE state = 'up'")
    try:
        # The parts of a real gang are in the scheduler's view from their
        # placement on; rows written behind its back are in it after its
        # next rebuild from PostgreSQL (every second).
        time.sleep(1.5)
        waiting = A.submit("sleep", {"seconds": 0})
        time.sleep(3)  # three of the scheduler's node refreshes: the job must not start
        assert A.job(waiting["id"])["state"] == "queued", A.job(waiting["id"])
        stack.kill_node("node-a")
        stack.start_node("node-a")
        done = A.wait(waiting["id"], 30)
        assert done["state"] == "succeeded" and done["node"] == "node-a", done
        open_parts = dict(stack.psql(
            f"SELECT node_name, count(*) FROM job_ranks WHERE job_id = '{ended['id']}'"
            " AND ended_at IS NULL GROUP BY node_name"))
        assert open_parts == {"node-b": "1"}, open_parts
        stack.psql(f"UPDATE job_ranks SET leased_at = now() - interval '60 s' WHERE job_id = '{ended['id']}'")
        assert wait_until(lambda: stack.psql(
            f"SELECT state FROM job_ranks WHERE job_id = '{ended['id']}' AND node_name = 'node-b'"
            " AND ended_at IS NOT NULL"), 20, 0.2, "node-b's heartbeat to let its part go") == [["cancelled"]]
    finally:
        stack.psql(f"DELETE FROM job_ranks WHERE job_id = '{ended['id']}'")
        stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(60)
def test_sigterm_drains_a_node_its_run_finishes_there_and_is_collected(A, stack):
    """SIGTERM to a node running a job: the node stops taking runs (503
    draining, draining: true in /v1/info and /v1/nodes), lets the run
    finish, waits for the gateway to collect it, deregisters and exits 0.
    The job succeeds there on its first attempt."""
    name = "node-drainer"
    # the sleeps outlast the new node's start however slow the machine (one CI
    # run took over 6 s to start it, and the job went to a freed node-a); they
    # are cancelled at the end
    p, busy = extra_node_while_busy(A, stack, name, busy_s=120)
    try:
        stack.wait_nodes_up([name], timeout=20)
        j = stack.wait_run_on_node(A.wait(A.submit("sleep", {"seconds": 2.5})["id"], 10,
                                          states=("running",)))
        assert j["node"] == name, j
        p.popen.send_signal(signal.SIGTERM)
        hdr = {"Authorization": "Bearer " + stack.cluster_token}
        url = stack.node_url(name)
        stack_wait = time.monotonic() + 5
        while time.monotonic() < stack_wait:
            info = requests.get(f"{url}/v1/info", headers=hdr, timeout=2).json()
            if info.get("draining"):
                break
            time.sleep(0.05)
        assert info.get("draining") is True, info
        # alive, but no longer ready: a DaemonSet rollout moves on only when
        # the replacement registers
        ready = requests.get(f"{url}/readyz", timeout=2)
        assert ready.status_code == 503 and ready.json()["draining"] is True, ready.text
        assert requests.get(f"{url}/healthz", timeout=2).status_code == 200
        r = requests.post(f"{url}/v1/runs", headers=hdr, timeout=5, json={
            "job_id": "00000000-0000-4000-8000-000000000001", "attempt": 1, "kernel": "sleep",
            "params": {"seconds": 0}, "inputs": {}, "timeout_s": 10, "backend": "any", "gpus": 1})
        assert r.status_code == 503 and r.json()["error"]["code"] == "draining", r.text
        done = A.wait(j["id"], 20)
        assert done["state"] == "succeeded" and done["attempts"] == 1, done
        assert done["node"] == name, done
        assert p.popen.wait(timeout=20) == 0, "a drained node exits 0"
        assert stack.nodes_by_name()[name]["state"] == "down"
    finally:
        p.stop(signal.SIGKILL)
        end_busy(A, busy)
