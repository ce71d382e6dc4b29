"""The control path (issue 9): a fixed pool of threads serves every
connection, requests that wait are suspended rather than holding a thread,
runs reach nodes through their lease polls and come back in batched
reports, and `Prefer: wait` answers when the job ends."""

import resource
import socket
import threading
import time
import uuid

import pytest
import requests

from stack import free_port

N_CONNS = 2000


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.fixture(scope="module")
def wide_gw(stack):
    """A gateway that takes many connections from one address."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = N_CONNS + 512
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    port = free_port()
    # The test measures threads, not time: a connection opened early waits
    # for the other 1,999 before its request goes, which took over the
    # default 30 s (--conn-timeout-s) on two loaded cores (a CI run: the
    # gateway closed it unanswered).
    proc = stack.start_gateway("gateway-wide", port, KOWLOON_MAX_CONNS_PER_IP=0,
                               KOWLOON_MAX_CONNECTIONS=N_CONNS + 200, KOWLOON_CONN_TIMEOUT_S=600)
    yield proc, port
    proc.stop()
    stack.procs.pop("gateway-wide", None)


# Under ASan on two loaded cores the gateway answered all 2,001 requests,
# the last 60 s after the test began: the suite's 60 s limit, not the
# gateway, failed it (CI of 80eebef). Its waits are bounded by their own
# timeouts (10 s a connect, 120 s the answers).
@pytest.mark.timeout(300)
def test_thread_count_is_flat_while_2000_connections_are_open(wide_gw):
    proc, port = wide_gw
    pid = proc.popen.pid
    requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    before = threads_of(pid)
    socks = []
    try:
        for _ in range(N_CONNS):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)
        # every one makes a keep-alive request and stays open
        req = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
        for s in socks:
            s.sendall(req)
        # The answers come in the gateway's order, not ours, and 2,000 of
        # them took over 10 s under ASan on two loaded cores: the wait on
        # any one socket is bounded by the whole batch, not by one request.
        for s in socks:
            s.settimeout(120)
            assert b" 200 " in s.recv(4096)
        during = threads_of(pid)
        assert during <= before, f"threads went from {before} to {during} with {N_CONNS} connections"
        # the gateway still answers a new client at once
        r = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert r.status_code == 200
    finally:
        for s in socks:
            s.close()


def get_preferring(client, job_id, prefer):
    """GET /v1/jobs/ID with the header Prefer: PREFER, answered 200: (the job,
    its Preference-Applied header, seconds the answer took)."""
    t0 = time.monotonic()
    r = client.get(f"/v1/jobs/{job_id}", headers={"Prefer": prefer})
    took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    return r.json(), r.headers["Preference-Applied"], took


def test_prefer_wait_answers_when_the_job_ends(A):
    j = A.submit("sleep", {"seconds": 1})
    job, applied, took = get_preferring(A, j["id"], "wait=20")
    assert job["state"] == "succeeded", job
    assert applied == "wait=20"
    assert took < 10, f"answered {took:.1f}s after asking, long after the job ended"


def test_prefer_wait_answers_the_job_as_it_is_when_the_time_passes(A):
    j = A.submit("sleep", {"seconds": 4})
    job, applied, took = get_preferring(A, j["id"], "respond-async, wait=1")
    assert job["state"] in ("queued", "running"), job
    assert applied == "wait=1"
    assert 0.9 <= took < 4, took
    assert A.wait(j["id"], 20)["state"] == "succeeded"


def test_prefer_wait_is_capped_at_60_seconds_and_said_so(A):
    j = A.run("sleep", {"seconds": 0})
    _, applied, _ = get_preferring(A, j["id"], "wait=3600")
    assert applied == "wait=60"


def test_waiting_requests_hold_no_threads(A, stack):
    pid = stack.gateway.popen.pid
    j = A.submit("sleep", {"seconds": 3})
    before = threads_of(pid)
    results = []

    def wait_one():
        r = A.get(f"/v1/jobs/{j['id']}", headers={"Prefer": "wait=30"})
        results.append((r.status_code, r.json().get("state")))

    ts = [threading.Thread(target=wait_one) for _ in range(40)]
    for t in ts:
        t.start()
    time.sleep(1.0)
    during = threads_of(pid)
    for t in ts:
        t.join(30)
    assert during <= before, f"threads went from {before} to {during} with 40 waiting requests"
    assert results == [(200, "succeeded")] * 40, results


def cluster(stack, method, path, cred=None, **kw):
    """A call on the cluster listener with a node's credential (cred), or
    the cluster token."""
    return requests.request(method, stack.cluster_base + path, timeout=10,
                            headers={"Authorization": f"Bearer {cred or stack.cluster_token}"}, **kw)


def hand_node(stack, name, **kw):
    """A node registered by hand: (id, credential)."""
    r = stack.register_node(name, **kw)
    assert r.status_code == 200, r.text
    return r.json()["id"], r.json()["credential"]


def test_lease_and_results_refuse_bad_input(stack):
    node, cred = hand_node(stack, "bad-input-node")
    assert requests.post(f"{stack.cluster_base}/v1/cluster/nodes/{node}/lease", json={},
                         timeout=5).status_code == 401
    r = cluster(stack, "POST", f"/v1/cluster/nodes/{node}/lease", cred, json={"max": -1})
    assert r.status_code == 400 and r.json()["error"]["field"] == "max", r.text
    r = cluster(stack, "POST", f"/v1/cluster/nodes/{node}/lease", cred, json={"wait_ms": 10 ** 7})
    assert r.status_code == 400 and r.json()["error"]["field"] == "wait_ms", r.text
    # a node acts only as itself
    for other in ("not-a-node", str(uuid.uuid4())):
        r = cluster(stack, "POST", f"/v1/cluster/nodes/{other}/lease", cred, json={})
        assert r.status_code == 403 and r.json()["error"]["field"] == "node", r.text
    r = cluster(stack, "POST", f"/v1/cluster/nodes/{node}/results", cred, json={"results": {}})
    assert r.status_code == 400 and r.json()["error"]["field"] == "results", r.text
    cluster(stack, "DELETE", f"/v1/cluster/nodes/{node}", cred)


def test_a_poll_of_an_idle_node_is_answered_empty_when_its_wait_ends(stack):
    node, cred = hand_node(stack, "idle-node")
    t0 = time.monotonic()
    r = cluster(stack, "POST", f"/v1/cluster/nodes/{node}/lease", cred,
                json={"max": 4, "wait_ms": 500})
    assert r.status_code == 200, r.text
    assert r.json() == {"runs": [], "cancel": []}
    assert 0.4 <= time.monotonic() - t0 < 5
    cluster(stack, "DELETE", f"/v1/cluster/nodes/{node}", cred)


def test_a_late_report_for_an_old_attempt_is_acknowledged_and_changes_nothing(A, stack):
    j = A.run("saxpy", {"a": 2.0}, {"x": {"dtype": "float32", "shape": [2], "data": [1, 2]},
                                    "y": {"dtype": "float32", "shape": [2], "data": [3, 4]}})
    assert j["state"] == "succeeded" and j["attempts"] == 1
    rid = f"{j['id']}.1"
    late = {"run_id": rid, "job_id": j["id"], "attempt": 1, "state": "failed",
            "error": {"code": "kernel_error", "message": "late"}}
    node, cred = hand_node(stack, "late-reporter")
    r = cluster(stack, "POST", f"/v1/cluster/nodes/{node}/results", cred,
                json={"free": 0, "results": [late, {"no": "job"}]})
    assert r.status_code == 200, r.text
    assert r.json()["recorded"] == [rid]
    again = A.job(j["id"])
    assert again["state"] == "succeeded" and again.get("error") is None, again


def test_prefer_wait_on_submit_answers_with_the_ended_job(A):
    body = {"kernel": "sleep", "params": {"seconds": 0.5}}
    t0 = time.monotonic()
    r = A.post("/v1/jobs", json=body, headers={"Prefer": "wait=20"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "succeeded", r.json()
    assert r.headers["Preference-Applied"] == "wait=20"
    assert time.monotonic() - t0 < 10


def test_prefer_wait_on_submit_answers_202_when_the_time_passes(A):
    r = A.post("/v1/jobs", json={"kernel": "sleep", "params": {"seconds": 4}},
               headers={"Prefer": "wait=1"})
    assert r.status_code == 202, r.text
    assert r.json()["state"] in ("queued", "running")
    assert r.headers["Preference-Applied"] == "wait=1"
    assert r.headers["Location"] == "/v1/jobs/" + r.json()["id"]
    assert A.wait(r.json()["id"], 20)["state"] == "succeeded"


def test_one_report_records_many_runs_each_fenced_by_its_attempt(A, stack):
    """A node's report of several runs is recorded together (the succeeded
    ones with small outputs in one statement), each still fenced by its own
    attempt: a stale attempt in the same report changes nothing, a failure
    beside the successes is recorded as one."""
    node, cred = hand_node(stack, "batch-reporter", backend="cuda", slots=4, kernels=["saxpy"],
                           gpus=[{"name": "Fake GPU", "memory_bytes": 1 << 30}], drain=False)
    try:
        x = {"dtype": "float32", "shape": [2], "data": [1, 2]}
        ids = [A.submit("saxpy", {"a": float(k)}, {"x": x, "y": x},
                        resources={"backend": "cuda", "gpus": 1})["id"] for k in range(3)]
        runs, deadline = [], time.monotonic() + 10
        while len(runs) < 3 and time.monotonic() < deadline:
            cluster(stack, "POST", f"/v1/cluster/nodes/{node}/heartbeat", cred,
                    json={"running": len(runs), "slots": 4, "runs": [f"{x['job_id']}.{x['attempt']}" for x in runs]})
            r = cluster(stack, "POST", f"/v1/cluster/nodes/{node}/lease", cred,
                        json={"max": 4 - len(runs), "wait_ms": 500})
            assert r.status_code == 200, r.text
            runs += r.json()["runs"]
        assert sorted(x["job_id"] for x in runs) == sorted(ids), runs
        by_id = {x["job_id"]: x for x in runs}

        def out(v):
            return {"y": {"dtype": "float32", "shape": [2], "data": v}}
        reports = [
            {"run_id": f"{ids[0]}.1", "job_id": ids[0], "attempt": by_id[ids[0]]["attempt"],
             "kernel": "saxpy", "state": "succeeded", "backend": "cuda", "outputs": out([1, 2])},
            {"run_id": f"{ids[1]}.1", "job_id": ids[1], "attempt": by_id[ids[1]]["attempt"],
             "kernel": "saxpy", "state": "succeeded", "backend": "cuda", "outputs": out([3, 4])},
            {"run_id": f"{ids[1]}.7", "job_id": ids[1], "attempt": 7,
             "kernel": "saxpy", "state": "succeeded", "backend": "cuda", "outputs": out([9, 9])},
            {"run_id": f"{ids[2]}.1", "job_id": ids[2], "attempt": by_id[ids[2]]["attempt"],
             "state": "failed", "error": {"code": "kernel_error", "message": "boom"}},
        ]
        r = cluster(stack, "POST", f"/v1/cluster/nodes/{node}/results", cred,
                    json={"free": 4, "results": reports})
        assert r.status_code == 200, r.text
        assert sorted(r.json()["recorded"]) == sorted(x["run_id"] for x in reports)
        jobs = [A.job(i) for i in ids]
        assert [j["state"] for j in jobs] == ["succeeded", "succeeded", "failed"], jobs
        assert jobs[2]["error"]["code"] == "kernel_error"
        for i, want in ((ids[0], [1, 2]), (ids[1], [3, 4])):
            res = A.get(f"/v1/jobs/{i}/result").json()
            assert res["outputs"]["y"]["data"] == want, res
            n = stack.psql_value(f"SELECT count(*) FROM job_events WHERE job_id = '{i}'"
                                 " AND state = 'succeeded'")
            assert n == "1", n
    finally:
        cluster(stack, "DELETE", f"/v1/cluster/nodes/{node}", cred)


def test_an_ended_job_is_read_from_the_gateways_memory_after_the_first_read(A, B, stack):
    """GET /v1/jobs/{id} keeps an ended job's answer (an ended job never
    changes): the second read does not ask PostgreSQL, shown here by a change
    made behind the gateway's back that the cached answer does not carry.
    The answer is found only by its own tenant, and a job that has not ended
    is read afresh every time."""
    q = A.submit("sleep", {"seconds": 0.3})
    first = A.job(q["id"])
    assert first["state"] in ("queued", "running"), first
    ended = A.wait(q["id"], 20)
    assert ended["state"] == "succeeded", ended   # read afresh: not the queued answer
    stack.psql(f"UPDATE jobs SET labels = '{{\"behind\": \"the gateway\"}}' WHERE id = '{q['id']}'")
    again = A.job(q["id"])
    assert again == ended, again
    assert B.get(f"/v1/jobs/{q['id']}").status_code == 404
