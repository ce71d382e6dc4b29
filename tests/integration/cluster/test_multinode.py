"""Jobs that span nodes (resources.nodes): what a submit accepts and echoes,
where each node_rank ran (placement), the rendezvous of the control plane,
and a gang's attempt ending everywhere at once.

The gang tests place the job themselves, writing what the scheduler's claim
writes (the job running on node_rank 0's node, a job_ranks row per node),
so that the lease, the rendezvous, the reports, the reaper and cancel are
tested on their own against scripted nodes."""

import time
import uuid

import pytest
import requests

from fakenode import FakeNode
from stack import capacity, wait_until

# No node takes it (16 GPUs): it stays queued until a test places it.
PARKED = {"kernel": "sleep", "params": {"seconds": 0}, "priority": 0,
          "resources": {"backend": "cuda", "gpus": 16}}


def test_the_catalog_says_how_many_nodes_each_kernel_spans(A):
    kernels = {k["name"]: k for k in A.get("/v1/kernels").json()["kernels"]}
    assert all(isinstance(k["max_nodes"], int) and 1 <= k["max_nodes"] <= 64
               for k in kernels.values()), kernels
    assert kernels["gemm"]["max_nodes"] == 1


@pytest.mark.parametrize("resources,status,word", [
    ({"nodes": 2}, 422, "gemm"),          # a kernel that cannot span nodes
    ({"nodes": 65}, 422, "at most 1"),    # past any kernel's max_nodes
    ({"nodes": 0}, 400, "at least 1"),
    ({"nodes": "2"}, 400, "integer"),
])
def test_resources_nodes_past_what_the_kernel_spans_is_refused(A, stack, resources, status, word):
    before = stack.count_jobs()
    r = A.post("/v1/jobs", json={"kernel": "gemm", "resources": resources, "inputs": {
        "a": {"dtype": "float32", "shape": [1, 1], "data": [1]},
        "b": {"dtype": "float32", "shape": [1, 1], "data": [1]}}})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == "resources.nodes" and word in err["message"], err
    assert stack.count_jobs() == before


@pytest.mark.parametrize("gb,status", [(0, 422), (-1, 422), (1025, 422), ("80G", 400)])
def test_bad_gpu_memory_gb_is_refused_naming_it(A, gb, status):
    r = A.post("/v1/jobs", json={**PARKED, "resources": {"gpu_memory_gb": gb}})
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == "resources.gpu_memory_gb"


def test_the_job_echoes_nodes_and_gpu_memory_and_has_no_placement_while_queued(A):
    r = A.post("/v1/jobs", json={**PARKED, "resources": {**PARKED["resources"], "gpu_memory_gb": 40}})
    assert r.status_code == 202, r.text
    job = r.json()
    want = {"backend": "cuda", "gpus": 16, "nodes": 1, "gpu_memory_gb": 40}
    assert job["resources"] == want and job["placement"] is None, job
    got = A.get(f"/v1/jobs/{job['id']}").json()
    assert got["resources"] == want and got["placement"] is None, got
    A.post(f"/v1/jobs/{job['id']}/cancel")


def test_a_single_node_job_has_one_placement_entry(A):
    r = A.post_job({"kernel": "sleep", "params": {"seconds": 0}, "resources": {"backend": "cpu"}})
    assert r.status_code == 202, r.text
    done = A.wait(r.json()["id"])
    assert done["state"] == "succeeded", done
    assert done["placement"] == [{"node_rank": 0, "node": done["node"], "ranks": [0], "gpus": []}]
    assert done["resources"]["nodes"] == 1


# ------------------------------------------------------------------ gangs

@pytest.fixture
def pair(stack):
    """Two scripted nodes whose runs never end by themselves."""
    tag = uuid.uuid4().hex[:6]
    nodes = [FakeNode(stack.cluster_base, stack.cluster_token, f"fake-gang-{tag}-{i}", run_s=3600).start()
             for i in range(2)]
    yield nodes
    for n in nodes:
        n.close()


def place(stack, job_id, nodes, attempt=1):
    """What the scheduler's gang claim writes: the job running on node_rank
    0's node, one job_ranks row per node (device 0 each)."""
    ranks = ", ".join(f"('{job_id}', {attempt}, {g}, '{n.id}', '{n.name}', '{{0}}')"
                      for g, n in enumerate(nodes))
    stack.psql(f"UPDATE jobs SET nodes = {len(nodes)}, state = 'running', attempts = {attempt},"
               f" node_id = '{nodes[0].id}', node_name = '{nodes[0].name}', started_at = now()"
               f" WHERE id = '{job_id}';"
               f" INSERT INTO job_ranks (job_id, attempt, node_rank, node_id, node_name, gpu_ids)"
               f" VALUES {ranks}")


def parked_gang(A, stack, nodes):
    r = A.post("/v1/jobs", json=PARKED)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    place(stack, job_id, nodes)
    for g, n in enumerate(nodes):
        assert wait_until(lambda: any(t["job_id"] == job_id for t in n.taken), timeout=15), n.name
    return job_id


def part(node, job_id):
    return next(t for t in node.taken if t["job_id"] == job_id)


def report(stack, node, job_id, attempt, node_rank, state, code=None):
    """node reports its part (with its own credential, on the cluster listener)."""
    rep = {"run_id": f"{job_id}.{attempt}", "job_id": job_id, "attempt": attempt,
           "kernel": "sleep", "state": state, "node_rank": node_rank, "backend": "cuda",
           "outputs": node.outputs if node_rank == 0 else {}, "info": {}}
    if code:
        rep["error"] = {"code": code, "message": "a peer is gone"}
    r = requests.post(f"{stack.cluster_base}/v1/cluster/nodes/{node.id}/results",
                      json={"results": [rep]},
                      headers={"Authorization": f"Bearer {node.credential}"}, timeout=10)
    assert r.status_code == 200, r.text


def cancels(node, job_id, attempt):
    return [e for e in node.seen("DELETE") if e[2] == f"{job_id}.{attempt}"]


def test_each_node_gets_its_part_with_dist_and_gpu_ids_and_placement_shows_them(A, stack, pair):
    job_id = parked_gang(A, stack, pair)
    for g, n in enumerate(pair):
        run = part(n, job_id)
        assert run["dist"] == {"nodes": 2, "node_rank": g, "world": 32, "shard_lo": 0,
                               "shard_hi": 0}, run
        assert run["gpu_ids"] == [0] and run["attempt"] == 1
    job = A.get(f"/v1/jobs/{job_id}").json()
    assert job["node"] == pair[0].name
    assert job["placement"] == [
        {"node_rank": 0, "node": pair[0].name, "ranks": list(range(16)), "gpus": [0]},
        {"node_rank": 1, "node": pair[1].name, "ranks": list(range(16, 32)), "gpus": [0]}]
    A.post(f"/v1/jobs/{job_id}/cancel")


def test_rendezvous_keeps_values_per_attempt_and_refuses_a_stale_one(A, stack, pair):
    job_id = parked_gang(A, stack, pair)
    hdr = {"Authorization": f"Bearer {pair[1].credential}"}   # a node of the gang
    url = f"{stack.cluster_base}/v1/cluster/rendezvous/{job_id}"
    blob = bytes(range(256)) * 4
    assert requests.get(f"{url}/1/nccl_id", headers=hdr).status_code == 404
    assert requests.put(f"{url}/1/nccl_id", data=blob, headers=hdr).status_code == 200
    r = requests.get(f"{url}/1/nccl_id", params={"wait_ms": 100}, headers=hdr)
    assert r.status_code == 200 and r.content == blob
    assert int(stack.redis_cmd("TTL", f"kowloon:rdv:{job_id}:1")[1:]) > 0
    r = requests.get(f"{url}/2/nccl_id", headers=hdr)
    assert r.status_code == 409 and r.json()["error"]["code"] == "attempt_stale", r.text
    assert requests.put(f"{url}/2/nccl_id", data=b"x", headers=hdr).status_code == 409
    assert requests.get(f"{url}/1/nccl_id").status_code == 401
    assert requests.get(f"{url}/1/bad%20key", headers=hdr).status_code == 400
    assert requests.get(f"{url}/1/k", params={"wait_ms": 20000}, headers=hdr).status_code == 400
    assert requests.put(f"{url}/1/big", data=b"x" * (64 * 1024 + 1), headers=hdr).status_code == 413
    r = A.post("/v1/jobs", json=PARKED)
    single = r.json()["id"]
    assert requests.get(f"{stack.cluster_base}/v1/cluster/rendezvous/{single}/1/k",
                        headers=hdr).status_code == 404
    A.post(f"/v1/jobs/{single}/cancel")
    # the attempt ends: its values go, and its ranks can no longer meet
    report(stack, pair[1], job_id, 1, 1, "failed", "peer_lost")
    assert wait_until(lambda: A.get(f"/v1/jobs/{job_id}").json()["state"] != "running", timeout=10)
    assert requests.get(f"{url}/1/nccl_id", headers=hdr).status_code == 409
    assert stack.redis_cmd("EXISTS", f"kowloon:rdv:{job_id}:1") == ":0"
    A.post(f"/v1/jobs/{job_id}/cancel")


def test_a_failed_rank_ends_the_attempt_on_every_node_and_requeues_the_job_whole(A, stack, pair):
    job_id = parked_gang(A, stack, pair)
    report(stack, pair[1], job_id, 1, 1, "failed", "peer_lost")
    job = A.wait(job_id, timeout=10, states=("queued",))
    assert job["state"] == "queued" and job["attempts"] == 1, job
    # node_rank 0's node is told to stop its part of the ended attempt
    assert wait_until(lambda: cancels(pair[0], job_id, 1), timeout=10)
    rows = stack.psql(f"SELECT node_rank, state FROM job_ranks WHERE job_id = '{job_id}'"
                      " ORDER BY node_rank")
    assert rows[1] == ["1", "failed"], rows
    details = stack.psql(f"SELECT detail FROM job_events WHERE job_id = '{job_id}'"
                         " AND state = 'queued' AND attempt = 1")
    assert details and "node_rank 1" in details[0][0], details
    A.post(f"/v1/jobs/{job_id}/cancel")


def test_the_job_succeeds_when_node_rank_0_does_and_records_every_part(A, stack, pair):
    job_id = parked_gang(A, stack, pair)
    report(stack, pair[1], job_id, 1, 1, "succeeded")
    time.sleep(0.3)
    assert A.get(f"/v1/jobs/{job_id}").json()["state"] == "running"
    report(stack, pair[0], job_id, 1, 0, "succeeded")
    job = A.wait(job_id, timeout=10)
    assert job["state"] == "succeeded", job
    rows = stack.psql(f"SELECT node_rank, state, ended_at IS NOT NULL FROM job_ranks"
                      f" WHERE job_id = '{job_id}' ORDER BY node_rank")
    assert rows == [["0", "succeeded", "t"], ["1", "succeeded", "t"]], rows


def test_cancel_reaches_every_node_of_the_gang(A, stack, pair):
    job_id = parked_gang(A, stack, pair)
    assert A.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    for n in pair:
        assert wait_until(lambda: cancels(n, job_id, 1), timeout=10), n.name
    # the nodes report their parts cancelled: the job ends cancelled
    assert A.wait(job_id, timeout=15)["state"] == "cancelled"


def test_a_part_on_a_node_down_for_silence_stays_open_and_is_cancelled_when_it_returns(A, stack, pair):
    """A node marked down because it went silent may be alive, still running
    its part: the part stays open (it holds nothing while the node is down,
    its devices once the node is back), the node is told to cancel it when
    it returns, and the part closes when the node reports it. (A node that
    left is another matter: below.)"""
    job_id = parked_gang(A, stack, pair)
    pair[1].silent.set()
    try:
        job = A.wait(job_id, timeout=20, states=("queued", "failed"))
        assert job["state"] == "queued", job
        assert stack.psql(f"SELECT ended_at IS NULL FROM job_ranks WHERE job_id = '{job_id}'"
                          " AND node_rank = 1") == [["t"]]
    finally:
        pair[1].silent.clear()
    assert wait_until(lambda: cancels(pair[1], job_id, 1), timeout=15)
    assert wait_until(lambda: stack.psql(f"SELECT state FROM job_ranks WHERE job_id = '{job_id}'"
                                         " AND node_rank = 1 AND ended_at IS NOT NULL"), timeout=15) == [["cancelled"]]
    A.post(f"/v1/jobs/{job_id}/cancel")


def test_capacity_counts_a_part_its_node_still_holds_as_taken(A, stack):
    """GET /v1/nodes' free GPUs agree with the scheduler: a leased part of an
    ended attempt (cancelled, not yet let go by its node) holds its device.
    The row is written here as a gang's would be, leased "a minute from
    now" so that the node's heartbeats (it never had the part) do not close
    it during the test."""
    ended = A.run("sleep", {"seconds": 0}, resources={"backend": "cpu"})
    model = f"Cap GPU {uuid.uuid4().hex[:6]}"
    node = FakeNode(stack.cluster_base, stack.cluster_token, f"fake-cap-{uuid.uuid4().hex[:6]}",
                    run_s=3600, gpu_name=model).start()

    def free():
        caps = capacity(A, model)
        return caps[0]["free_gpus"] if caps else None
    try:
        assert wait_until(lambda: free() == 1, timeout=10)
        stack.psql("INSERT INTO job_ranks (job_id, attempt, node_rank, node_id, node_name, gpu_ids, leased_at)"
                   f" VALUES ('{ended['id']}', 1, 0, '{node.id}', '{node.name}', '{{0}}',"
                   " now() + interval '60 s')")
        assert free() == 0
        stack.psql(f"UPDATE job_ranks SET ended_at = now() WHERE job_id = '{ended['id']}'")
        assert free() == 1
    finally:
        stack.psql(f"DELETE FROM job_ranks WHERE job_id = '{ended['id']}'")
        node.close()


def test_a_lost_node_requeues_the_gang_and_the_others_are_told(A, stack, pair):
    job_id = parked_gang(A, stack, pair)
    pair[1].close()   # deregisters: the node is down
    job = A.wait(job_id, timeout=20, states=("queued", "failed"))
    assert job["state"] == "queued", job
    assert wait_until(lambda: cancels(pair[0], job_id, 1), timeout=10)
    # the part of the node that left is closed: nobody will report it
    assert stack.psql(f"SELECT state FROM job_ranks WHERE job_id = '{job_id}' AND node_rank = 1"
                      " AND ended_at IS NOT NULL") == [["failed"]]
    A.post(f"/v1/jobs/{job_id}/cancel")
