"""Faults the gateway survives: a node cut off mid-run (its late result must
not be recorded twice), retry back-off, a gateway killed with -9 and
restarted (it re-attaches to the run instead of re-running it), and a
graceful SIGTERM of a gateway."""

import signal
import time
import uuid
from datetime import timezone

import numpy as np
import pytest
import requests

from stack import free_port, tensor, ts, wait_until

# a run is given up --timeout-grace-s past its timeout_s (15 s by default):
# shorter here, so that the tests that wait it out take seconds less
GRACE_S = 8
STACK_GATEWAY_ENV = {"KOWLOON_TIMEOUT_GRACE_S": GRACE_S}


pytestmark = pytest.mark.destructive


@pytest.fixture(scope="module")
def stack(own_stack):
    """These tests freeze and kill the stack's nodes and gateway: a stack
    of this module's own (conftest.py)."""
    return own_stack


def events(stack, job_id):
    rows = stack.psql(
        "SELECT state, attempt, coalesce(node_name, ''), "
        "extract(epoch FROM at) FROM job_events "
        f"WHERE job_id = '{job_id}' ORDER BY id")
    return [(state, int(attempt), node, float(at)) for state, attempt, node, at in rows]


def freeze_running_sleep(A, stack, seconds):
    """Submits a sleep, waits until its node runs it, and SIGSTOPs that node
    (a network cut: it stops answering, its run is not lost). Returns the
    job, its node, the other node and the frozen node's process (the test
    sends SIGCONT)."""
    j = A.submit("sleep", {"seconds": seconds}, max_attempts=3)
    j = stack.wait_run_on_node(A.wait(j["id"], 10, states=("running",)))
    victim = j["node"]
    proc = stack.procs[victim]
    proc.popen.send_signal(signal.SIGSTOP)
    return j, victim, [n for n in stack.node_names if n != victim][0], proc


@pytest.mark.timeout(90)
def test_job_cut_off_from_its_node_runs_again_and_is_recorded_once(A, stack):
    """SIGSTOP stands for a network cut: the node stops answering but its
    run is not lost. The job is re-queued after the node times out, runs on
    the other node, and the frozen node's attempt, resumed later, changes
    nothing."""
    j, victim, other, proc = freeze_running_sleep(A, stack, 3)
    try:
        done = A.wait(j["id"], 40)
    finally:
        proc.popen.send_signal(signal.SIGCONT)
    assert done["state"] == "succeeded", done
    assert done["attempts"] == 2 and done["node"] == other, done
    # the resumed node finishes its stale attempt and the gateway hears of it
    hdr = {"Authorization": "Bearer " + stack.cluster_token}
    stale = f"{stack.node_url(victim)}/v1/runs/{j['id']}.1"

    def stale_run_over():
        r = requests.get(stale, headers=hdr, timeout=2)
        if r.status_code == 200 and r.json().get("state") in ("queued", "running"):
            return False
        n = stack.nodes_by_name().get(victim, {})
        return n.get("state") == "up" and n.get("running", 0) == 0
    wait_until(stale_run_over, 30, 0.1, f"the stale attempt on {victim} to end and be reported")
    again = A.job(j["id"])
    assert again["state"] == "succeeded" and again["attempts"] == 2 and again["node"] == other, again
    assert stack.psql_value(f"SELECT count(*) FROM job_results WHERE job_id = '{j['id']}'") == "1"
    assert stack.psql_value(
        f"SELECT attempt FROM job_results WHERE job_id = '{j['id']}'") == "2"
    stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(90)
def test_a_run_left_on_a_node_marked_down_holds_its_slot_until_the_node_lets_go(A, stack):
    """A node marked down may be alive (its heartbeats starved, or cut off a
    while) and still running its job, which has meanwhile run again
    elsewhere. When it comes back, that old run must keep its devices and
    slot until the node no longer holds it: the gateway wrote it into
    job_ranks when the job left the node, cancels it there, and closes the
    row once the node's heartbeat stops listing it. Before, the node came
    back looking free and the next job was placed on it while it still ran
    the old one (an over-commit; the simulated cluster saw gang parts
    placed on such GPUs at saturation)."""
    stack.wait_nodes_up(stack.node_names, timeout=30)
    j, victim, other, proc = freeze_running_sleep(A, stack, 8)
    try:
        wait_until(lambda: A.job(j["id"])["attempts"] == 2 and A.job(j["id"])["state"] == "running",
                   30, 0.1, "the job to run again elsewhere")
        left = stack.psql(f"SELECT node_name, ended_at IS NULL FROM job_ranks WHERE job_id = '{j['id']}'"
                          " AND attempt = 1")
        assert left == [[victim, "t"]], left
    finally:
        proc.popen.send_signal(signal.SIGCONT)
    # The victim is back, its slot still taken by attempt 1 and the other's
    # by attempt 2: the next job waits for the victim to let attempt 1 go.
    nxt = A.submit("sleep", {"seconds": 0})
    done = A.wait(nxt["id"], 30)
    assert done["state"] == "succeeded", done
    hdr = {"Authorization": "Bearer " + stack.cluster_token}
    old = requests.get(f"{stack.node_url(victim)}/v1/runs/{j['id']}.1", headers=hdr, timeout=2)
    assert old.status_code == 200 and old.json()["state"] == "cancelled", old.text
    # closed once the node's heartbeat (looked at every 5 s) no longer lists
    # it, 10 s after its lease at the earliest
    closed = wait_until(lambda: stack.psql_value(
        f"SELECT extract(epoch FROM ended_at) FROM job_ranks WHERE job_id = '{j['id']}'"
        " AND attempt = 1 AND ended_at IS NOT NULL"), 30, 0.2, "the old run's part to be closed")
    def epoch(t):
        return ts(t).replace(tzinfo=timezone.utc).timestamp()
    if done["node"] == victim:  # placed there only once the old run let go (ms rounding aside)
        assert epoch(done["started_at"]) >= float(closed) - 0.001, (done, closed)
    else:  # or it waited for the other node's attempt 2
        assert done["node"] == other, done
        assert epoch(done["started_at"]) >= epoch(A.wait(j["id"], 30)["finished_at"]) - 0.001, done
    assert A.wait(j["id"], 30)["state"] == "succeeded"
    stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(90)
def test_lost_attempt_is_retried_after_a_backoff(A, stack):
    """A counted retry is not placed again at once: it waits at least half
    the base back-off (1 s by default, with jitter in [0.5, 1))."""
    j = A.submit("sleep", {"seconds": 3}, max_attempts=3)
    j = stack.wait_run_on_node(A.wait(j["id"], 10, states=("running",)))
    victim = j["node"]
    stack.kill_node(victim)
    try:
        done = A.wait(j["id"], 40)
        assert done["state"] == "succeeded" and done["attempts"] == 2, done
        ev = events(stack, j["id"])
        requeue = [e for e in ev if e[0] == "queued" and e[1] == 1]
        rerun = [e for e in ev if e[0] == "running" and e[1] == 2]
        assert requeue and rerun, ev
        assert rerun[0][3] - requeue[0][3] >= 0.5, ev
        not_before = stack.psql_value(f"SELECT not_before IS NOT NULL FROM jobs WHERE id = '{j['id']}'")
        assert not_before == "t", "the back-off should be recorded on the job"
    finally:
        stack.start_node(victim)
        stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(90)
def test_gateway_killed_mid_run_reattaches_instead_of_rerunning(A, stack):
    j = A.submit("sleep", {"seconds": 3})
    j = stack.wait_run_on_node(A.wait(j["id"], 10, states=("running",)))
    stack.gateway.kill9()
    time.sleep(0.5)
    stack.gateway = stack.start_gateway("gateway", stack.gw_port)
    done = A.wait(j["id"], 40)
    assert done["state"] == "succeeded", done
    assert done["attempts"] == 1, f"the run should have been collected, not re-run: {done}"
    assert stack.psql_value(f"SELECT count(*) FROM job_results WHERE job_id = '{j['id']}'") == "1"
    stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(60)
def test_result_postgresql_refuses_fails_the_job_instead_of_retrying_for_ever(A, stack):
    """A result PostgreSQL will never accept (here: a constraint the test
    adds, standing in for any value it refuses) is not retried as if
    PostgreSQL were down: the job fails with bad_result and the node's slot
    is free again."""
    stack.psql("ALTER TABLE job_results ADD CONSTRAINT it_small_results"
               " CHECK (octet_length(meta::text) < 10) NOT VALID")
    try:
        x = np.arange(64, dtype=np.float32)
        j = A.submit("saxpy", {"a": 1.0}, {"x": tensor(x), "y": tensor(x)})
        done = A.wait(j["id"], 20)
        assert done["state"] == "failed", done
        assert done["error"]["code"] == "bad_result", done
        assert stack.psql_value(f"SELECT count(*) FROM job_results WHERE job_id = '{j['id']}'") == "0"
    finally:
        stack.psql("ALTER TABLE job_results DROP CONSTRAINT it_small_results")
    small = A.run("saxpy", {"a": 1.0}, {"x": tensor(x[:4]), "y": tensor(x[:4])})
    assert small["state"] == "succeeded"


def fake_run_across_gateway_restart(A, stack, name, run_s, timeout_s, kill_after_s, down_s):
    """A sleep job on a scripted CUDA node whose runs end after run_s
    (whatever timeout_s says); the gateway is killed kill_after_s after the
    node got the run, stays down down_s, and is restarted. Returns the job
    once it is terminal."""
    from fakenode import FakeNode
    node = FakeNode(stack.cluster_base, stack.cluster_token, name, run_s=run_s).start()
    try:
        j = A.submit("sleep", {"seconds": 1}, timeout_s=timeout_s,
                     resources={"backend": "cuda", "gpus": 1})
        assert node.posting.wait(10), "the job never reached the fake node"
        time.sleep(kill_after_s)
        stack.gateway.kill9()
        time.sleep(down_s)
        stack.gateway = stack.start_gateway("gateway", stack.gw_port)
        return A.wait(j["id"], 40)
    finally:
        node.close()
        stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(90)
def test_restarted_gateway_keeps_a_runs_deadline_from_its_start(A, stack):
    """A node that never finishes a run (a fake one that ignores timeout_s)
    is given up at started_at + timeout_s + grace; a gateway restart in
    between does not start the clock again."""
    done = fake_run_across_gateway_restart(A, stack, "fake-stuck", run_s=3600, timeout_s=2,
                                           kill_after_s=5, down_s=0.5)
    assert done["state"] == "failed" and done["error"]["code"] == "timeout", done
    took = (ts(done["finished_at"]) - ts(done["started_at"])).total_seconds()
    # 2 s + 8 s grace (~10 s); a clock started again at the restart, 5.5 s
    # in at the earliest, gives 15.5 s or more
    assert 2 + GRACE_S - 1 <= took <= 2 + GRACE_S + 4.5, f"given up {took:.1f}s after the start"


@pytest.mark.timeout(90)
def test_a_run_failed_for_no_result_keeps_its_gpu_until_its_node_lets_it_go(A, stack):
    """The gateway fails a job whose node sent no result within timeout_s +
    grace, but the node may still be running it (a kernel its kill did not
    stop, reports lost on the way). The run keeps its GPU until the node
    lets it go: the gateway writes it into job_ranks, cancels it there, and
    closes the row when the node reports it. Before, its GPU counted as
    free the moment the job failed."""
    from stack import capacity
    model = f"Overdue GPU {uuid.uuid4().hex[:6]}"
    with stack.fake_node("fake-overdue", run_s=3600, gpu_name=model) as node:
        node.deaf.set()
        j = A.submit("sleep", {"seconds": 1}, timeout_s=1, resources={"backend": "cuda", "gpus": 1})
        assert node.posting.wait(10), "the job never reached the fake node"
        done = A.wait(j["id"], 30)
        assert done["state"] == "failed" and done["error"]["code"] == "timeout", done
        rid = f"{j['id']}.1"
        part = stack.psql(f"SELECT node_name, ended_at IS NULL FROM job_ranks WHERE job_id = '{j['id']}'"
                          " AND attempt = 1")
        assert part == [[node.name, "t"]], part
        # the node is told to cancel it and does not: its GPU stays taken
        wait_until(lambda: node.seen("DELETE"), 15, 0.1, "the cancel to reach the node")
        assert rid in node.runs
        caps = capacity(A, model)
        assert caps and caps[0]["free_gpus"] == 0, caps
        # the node lets it go (its report of a stale attempt): the row closes, the GPU is free
        node.deaf.clear()
        with node.mu:
            node.runs[rid]["state"] = "cancelled"
        wait_until(lambda: stack.psql_value(
            f"SELECT count(*) FROM job_ranks WHERE job_id = '{j['id']}' AND ended_at IS NOT NULL") == "1",
            20, 0.1, "the part to be closed by the node's report")
        wait_until(lambda: (capacity(A, model) or [{}])[0].get("free_gpus") == 1, 10, 0.1,
                   "the GPU to be free again")
        assert A.job(j["id"])["state"] == "failed"


@pytest.mark.timeout(90)
def test_run_that_ended_while_no_gateway_followed_it_is_collected_past_its_deadline(A, stack):
    """The gateway is down longer than the run's timeout_s + grace, and
    the run ended on its node meanwhile: the restarted gateway collects the
    result (one last look) instead of failing the job with timeout."""
    # down past 1 s + grace; the run ended 3 s after it started
    done = fake_run_across_gateway_restart(A, stack, "fake-done-meanwhile", run_s=3, timeout_s=1,
                                           kill_after_s=0.5, down_s=1 + GRACE_S + 1)
    assert done["state"] == "succeeded" and done["attempts"] == 1, done


@pytest.mark.timeout(60)
def test_sigterm_turns_readyz_and_submits_503_then_exits(A, stack):
    port = free_port()
    p = stack.start_gateway("gateway-drain", port, KOWLOON_DRAIN_S=3)
    base = f"http://127.0.0.1:{port}"
    p.popen.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    r = requests.get(base + "/readyz", timeout=5)
    assert r.status_code == 503 and r.json()["draining"] is True, r.text
    body = {"kernel": "sleep", "params": {"seconds": 0}}
    r = requests.post(base + "/v1/jobs", json=body, timeout=5,
                      headers={"Authorization": "Bearer " + stack.keys["A"]})
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "unavailable" and r.headers.get("Retry-After")
    p.popen.wait(timeout=20)
    assert p.popen.returncode == 0
    # the main gateway is untouched
    assert A.run("sleep", {"seconds": 0})["state"] == "succeeded"


@pytest.mark.timeout(60)
def test_second_gateway_serves_the_api_while_one_scheduler_dispatches(A, stack):
    port = free_port()
    p = stack.start_gateway("gateway-2", port, KOWLOON_DRAIN_S=0)
    try:
        other = stack.client("A", base=f"http://127.0.0.1:{port}")
        done = other.run("sleep", {"seconds": 0})
        assert done["state"] == "succeeded", done
        assert A.job(done["id"])["state"] == "succeeded"
        with open(p.log_path) as f:
            log = f.read()
        assert "holds the scheduler lock" not in log, "only one gateway may schedule"
    finally:
        p.stop(signal.SIGTERM)
