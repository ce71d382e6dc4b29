"""The node's data path. A node without the gateway's blob directory
(--blob-dir none): inputs given as blob references are fetched from the
gateway's cluster listener (GET /v1/cluster/blobs/{id}, only for runs the
node holds), cached by hash, checked for size and hash, and outputs are
pushed back (POST /v1/cluster/blobs?job_id=&attempt=) and answered as
references, never as text. A node that shares the directory maps the
inputs it finds there and writes its outputs into it, and the gateway
records such an output (PUT /v1/cluster/blobs/{id}) only when it sees the
file with the stated size and its bytes hash to its name."""

import hashlib
import os
import random
import shutil
import signal
import struct
import time
import uuid

import numpy as np
import pytest

from stack import Client, free_port, nodes_drained, wait_until

OCTET = {"Content-Type": "application/octet-stream"}


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def blob_id(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def http_node(stack):
    """A node of its own that moves every byte over HTTP (--blob-dir none)."""
    name = "node-http"
    stack.node_ports[name] = free_port()
    p = stack.start_node(name, shared_blobs=False)
    try:
        stack.wait_nodes_up([name], timeout=30)
        yield name
    finally:
        p.stop(signal.SIGTERM)
        del stack.node_ports[name]


@pytest.fixture
def node(stack, http_node):
    """The HTTP node's own API (the cluster token)."""
    return Client(stack.node_url(http_node), stack.cluster_token)


@pytest.fixture
def shared_node(stack):
    """One of the stack's nodes: they share the gateway's blob directory."""
    return Client(stack.node_url(stack.node_names[0]), stack.cluster_token)


def only_on(stack, name):
    """Every other node that is up is drained meanwhile: what is submitted
    runs on name."""
    return nodes_drained(stack.admin, keep=lambda n: n["name"] == name or n["state"] != "up")


def upload(A, data):
    """A tenant's blob (the public listener)."""
    r = A.post("/v1/blobs", data=data, headers=OCTET)
    assert r.status_code in (200, 201), r.text
    assert r.json()["id"] == blob_id(data)
    return r.json()["id"]


def run_on_node(node, inputs, kernel="gemm", params=None, output_blobs=True):
    """A run posted straight to a node's own API, with no job behind it."""
    job_id = str(uuid.uuid4())
    body = {"job_id": job_id, "attempt": 1, "kernel": kernel, "params": params or {},
            "inputs": inputs, "timeout_s": 30, "backend": "cpu", "gpus": 1}
    if output_blobs:
        body["output_blobs"] = True
    t0 = time.monotonic()
    r = node.post("/v1/runs", json=body)
    assert r.status_code == 202, r.text
    assert time.monotonic() - t0 < 2, "POST /v1/runs must not wait for the inputs"
    r = node.get(f"/v1/runs/{job_id}.1?wait=20")
    assert r.status_code == 200, r.text
    run = r.json()
    assert run["state"] in ("succeeded", "failed", "cancelled"), run
    return run


def cache(node):
    r = node.get("/v1/info")
    assert r.status_code == 200, r.text
    return r.json()["input_cache"]


def blob_io(node):
    r = node.get("/v1/info")
    assert r.status_code == 200, r.text
    return r.json()["blob_io"]


def gemm_inputs(A):
    a = [random.uniform(-2, 2) for _ in range(6)]
    b = [random.uniform(-2, 2) for _ in range(6)]
    ref = {"dtype": "float32", "shape": [2, 3], "blob": upload(A, f32(a))}
    return a, b, {"a": ref, "b": {"dtype": "float32", "shape": [3, 2], "blob": upload(A, f32(b))}}


N = 1 << 15  # 128 KiB of float32: past the 64 KiB an output may travel inline


def saxpy_blobs(A):
    x = np.random.default_rng().random(N, dtype=np.float32)
    y = np.random.default_rng().random(N, dtype=np.float32)
    return x, y, {"x": {"dtype": "float32", "shape": [N], "blob": upload(A, x.tobytes())},
                  "y": {"dtype": "float32", "shape": [N], "blob": upload(A, y.tobytes())}}


def test_blob_inputs_are_fetched_and_outputs_pushed_as_blobs(stack, A, http_node, node):
    x, y, inputs = saxpy_blobs(A)
    before_io, before_cache = blob_io(node), cache(node)
    with only_on(stack, http_node):
        j = A.run("saxpy", {"a": 2.0}, inputs, timeout=60)
    assert j["node"] == http_node, j
    after_io, after_cache = blob_io(node), cache(node)
    assert after_cache["misses"] - before_cache["misses"] == 2
    assert after_cache["fetched_bytes"] - before_cache["fetched_bytes"] == 2 * x.nbytes
    assert after_io["pushed_outputs"] - before_io["pushed_outputs"] == 1
    assert after_io["pushed_bytes"] - before_io["pushed_bytes"] == x.nbytes
    r = A.get(f"/v1/jobs/{j['id']}/result?encoding=blob")
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]["y"]
    assert set(out) >= {"dtype", "shape", "blob"} and out["shape"] == [N], out
    r = A.get(f"/v1/jobs/{j['id']}/outputs/y")
    assert r.status_code == 200 and blob_id(r.content) == out["blob"]
    np.testing.assert_allclose(np.frombuffer(r.content, np.float32), 2 * x + y, rtol=1e-6)
    # the node stored it as an output of that run; the job's tenant owns it now
    assert stack.psql_value(f"SELECT count(*) FROM run_outputs WHERE job_id = '{j['id']}'") == "0"
    assert stack.psql_value(f"SELECT count(*) FROM job_blob_refs WHERE job_id = '{j['id']}'"
                            f" AND blob_id = '{out['blob']}'") == "1"


def test_the_same_input_twice_is_fetched_once(stack, A, http_node, node):
    _, _, inputs = saxpy_blobs(A)
    before = cache(node)
    assert before["budget_bytes"] == 1024 << 20
    with only_on(stack, http_node):
        assert A.run("saxpy", {"a": 1.0}, inputs, timeout=60)["node"] == http_node
        mid = cache(node)
        assert mid["misses"] - before["misses"] == 2
        assert mid["fetched_bytes"] - before["fetched_bytes"] == 2 * 4 * N
        assert A.run("saxpy", {"a": 3.0}, inputs, timeout=60)["node"] == http_node
    after = cache(node)
    assert after["hits"] - mid["hits"] == 2
    assert after["fetched_bytes"] == mid["fetched_bytes"], "a cached blob crossed again"
    assert after["served_bytes"] - mid["served_bytes"] == 2 * 4 * N


def test_without_output_blobs_outputs_stay_base64(node):
    inputs = {"a": {"dtype": "float32", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]},
              "b": {"dtype": "float32", "shape": [3, 2], "data": [1, 0, 0, 1, 1, 1]}}
    run = run_on_node(node, inputs, output_blobs=False)
    assert run["state"] == "succeeded", run
    assert "b64" in run["outputs"]["c"], run["outputs"]["c"]


def test_a_run_posted_by_hand_cannot_fetch_a_tenants_blob(A, node):
    """A run no job stands behind (posted to the node's API): the gateway
    serves a node only the inputs of runs it holds, so a tenant's blob is
    refused like one that does not exist."""
    _, _, inputs = gemm_inputs(A)
    run = run_on_node(node, inputs)
    assert run["state"] == "failed", run
    assert run["error"]["code"] == "backend_error", run["error"]
    assert "no blob" in run["error"]["message"], run["error"]


def test_an_unknown_blob_is_a_backend_error(A, node):
    _, _, inputs = gemm_inputs(A)
    inputs["b"]["blob"] = blob_id(uuid.uuid4().bytes)
    run = run_on_node(node, inputs)
    assert run["state"] == "failed", run
    assert run["error"]["code"] == "backend_error", run["error"]
    assert "no blob" in run["error"]["message"], run["error"]


def test_output_blobs_must_be_a_boolean(node):
    body = {"job_id": str(uuid.uuid4()), "attempt": 1, "kernel": "sleep",
            "params": {"seconds": 0}, "output_blobs": "yes"}
    r = node.post("/v1/runs", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == "output_blobs"


def test_http_node_says_it_shares_no_blob_dir(node):
    assert blob_io(node)["shared_dir"] is None


def test_node_sharing_the_blob_dir_maps_inputs_and_writes_outputs(stack, A, shared_node):
    x, y, inputs = saxpy_blobs(A)
    name = stack.node_names[0]
    before_io, before_cache = blob_io(shared_node), cache(shared_node)
    assert os.path.samefile(before_io["shared_dir"], stack.blob_dir), before_io
    with only_on(stack, name):
        j = A.run("saxpy", {"a": 2.0}, inputs, timeout=60)
    assert j["node"] == name, j
    after_io, after_cache = blob_io(shared_node), cache(shared_node)
    # nothing crossed over HTTP: both inputs mapped, the output written
    assert after_cache["fetched_bytes"] == before_cache["fetched_bytes"]
    assert after_cache["misses"] == before_cache["misses"]
    assert after_io["mapped_inputs"] - before_io["mapped_inputs"] == 2
    assert after_io["mapped_bytes"] - before_io["mapped_bytes"] == 2 * x.nbytes
    assert after_io["written_outputs"] - before_io["written_outputs"] == 1
    assert after_io["pushed_outputs"] == before_io["pushed_outputs"]
    out = A.get(f"/v1/jobs/{j['id']}/result?encoding=blob").json()["outputs"]["y"]
    path = os.path.join(stack.blob_dir, "sha256", out["blob"][7:9], out["blob"][7:])
    with open(path, "rb") as f:
        data = f.read()
    assert blob_id(data) == out["blob"]
    # hashed and recorded by the gateway, which serves it like any other blob
    assert stack.psql_value(f"SELECT size FROM blobs WHERE id = '{out['blob']}'") == str(x.nbytes)
    r = A.get(f"/v1/jobs/{j['id']}/outputs/y")
    assert r.status_code == 200 and r.content == data
    np.testing.assert_allclose(np.frombuffer(data, np.float32), 2 * x + y, rtol=1e-6)


def test_a_shared_blob_of_the_wrong_size_is_invalid_argument(A, shared_node):
    _, _, inputs = gemm_inputs(A)
    inputs["a"]["blob"] = upload(A, f32([2.0] * 5))
    run = run_on_node(shared_node, inputs)
    assert run["state"] == "failed" and run["error"]["code"] == "invalid_argument", run
    assert run["error"]["field"] == "inputs.a"
    assert "20 bytes" in run["error"]["message"], run["error"]


@pytest.fixture
def held_run(stack, A):
    """A scripted node holding a run: (node, job_id, attempt)."""
    from fakenode import FakeNode
    node = FakeNode(stack.cluster_base, stack.cluster_token, f"fake-adopt-{uuid.uuid4().hex[:6]}",
                    run_s=3600).start()
    try:
        j = A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})
        wait_until(lambda: any(t["job_id"] == j["id"] for t in node.taken), 15, what="the run")
        yield node, j["id"], 1
        A.cancel(j["id"])
    finally:
        node.close()




def test_gateway_records_a_node_written_blob_only_when_its_file_is_there(stack, held_run):
    fake, job_id, attempt = held_run
    gw = Client(stack.cluster_base, fake.credential)
    q = f"?job_id={job_id}&attempt={attempt}"
    data = os.urandom(1000)
    bid = blob_id(data)
    # not in the store: refused, nothing recorded
    r = gw.request("PUT", f"/v1/cluster/blobs/{bid}{q}", json={"size": 1000})
    assert r.status_code == 404, r.text
    assert stack.psql_value(f"SELECT count(*) FROM blobs WHERE id = '{bid}'") == "0"
    # a file under that name (as a node writes it) but another size: refused
    stack.plant_blob(bid, data)
    r = gw.request("PUT", f"/v1/cluster/blobs/{bid}{q}", json={"size": 999})
    assert r.status_code == 422 and r.json()["error"]["field"] == "size", r.text
    assert stack.psql_value(f"SELECT count(*) FROM blobs WHERE id = '{bid}'") == "0"
    for bad in ({}, {"size": "1000"}, {"size": -1}):
        assert gw.request("PUT", f"/v1/cluster/blobs/{bid}{q}", json=bad).status_code == 400, bad
    assert gw.request("PUT", f"/v1/cluster/blobs/sha256:xyz{q}", json={"size": 1}).status_code == 400
    assert Client(stack.cluster_base, "wrong").request(
        "PUT", f"/v1/cluster/blobs/{bid}{q}", json={"size": 1000}).status_code == 401
    # the right size and bytes: recorded as that run's output, nobody's reference yet
    r = gw.request("PUT", f"/v1/cluster/blobs/{bid}{q}", json={"size": 1000})
    assert r.status_code == 201 and r.json() == {"id": bid, "size": 1000}, r.text
    assert stack.psql_value(f"SELECT size FROM blobs WHERE id = '{bid}'") == "1000"
    assert stack.psql_value(f"SELECT count(*) FROM blob_refs WHERE blob_id = '{bid}'") == "0"
    assert stack.psql_value(f"SELECT count(*) FROM run_outputs WHERE job_id = '{job_id}'"
                            f" AND attempt = {attempt} AND blob_id = '{bid}'") == "1"


def test_node_whose_blob_dir_the_gateway_does_not_see_falls_back_to_http(stack, A):
    """A directory with the store's identity that is not the gateway's (a
    mount gone wrong): the gateway refuses the outputs written there, and
    the node pushes them instead; inputs it cannot find are fetched."""
    name = "node-elsewhere"
    other = os.path.join(stack.root, "elsewhere")
    for sub in ("tmp", "sha256"):
        os.makedirs(os.path.join(other, sub), exist_ok=True)
    shutil.copy(os.path.join(stack.blob_dir, "store-id"), os.path.join(other, "store-id"))
    # the stack's nodes stop taking jobs, so that this one gets them
    for n in stack.node_names:
        assert stack.admin.post(f"/v1/nodes/{stack.nodes_by_name()[n]['id']}/drain").status_code == 200
    stack.node_ports[name] = free_port()
    p = stack.start_node(name, extra_args=["--blob-dir", other])
    try:
        stack.wait_nodes_up([name], timeout=30)
        nc = Client(stack.node_url(name), stack.cluster_token)
        x = np.arange(1 << 16, dtype=np.float32)
        bx = A.post("/v1/blobs", data=x.tobytes(), headers=OCTET).json()["id"]
        before = blob_io(nc)
        j = A.run("saxpy", {"a": 2.0}, {"x": {"dtype": "float32", "shape": [x.size], "blob": bx},
                                        "y": {"dtype": "float32", "shape": [x.size], "blob": bx}},
                  timeout=60)
        assert j["node"] == name, j
        out = A.get(f"/v1/jobs/{j['id']}/outputs/y")
        np.testing.assert_array_equal(np.frombuffer(out.content, np.float32), 3 * x)
        after = blob_io(nc)
        assert after["mapped_inputs"] == before["mapped_inputs"]
        assert after["written_outputs"] == before["written_outputs"]
        assert after["pushed_outputs"] - before["pushed_outputs"] == 1
        assert cache(nc)["fetched_bytes"] >= x.nbytes
    finally:
        p.stop(signal.SIGTERM)
        del stack.node_ports[name]
        for n in stack.node_names:
            stack.admin.request("DELETE", f"/v1/nodes/{stack.nodes_by_name()[n]['id']}/drain")


@pytest.mark.parametrize("case", ["not-stored", "wrong-size"])
def test_a_run_reporting_an_output_blob_the_gateway_did_not_record_fails_bad_result(stack, A, case):
    """A node's result names an output blob: the gateway takes it only if
    the node stored that blob for this run (pushed, or adopted from the
    shared directory) with the size the output's shape needs; else the job
    fails bad_result and the blob is given to nobody."""
    from fakenode import FakeNode
    data = os.urandom(64)
    if case == "not-stored":
        bid = blob_id(data)   # neither pushed nor adopted
        shape = [16]
    else:
        bid = upload(A, data)  # recorded with 64 bytes (a tenant's, not this run's)
        shape = [15]           # and reported as 60
    node = FakeNode(stack.cluster_base, stack.cluster_token, f"fake-output-{case}", run_s=0.2,
                    outputs={"slept": {"dtype": "float32", "shape": shape, "blob": bid}}).start()
    try:
        j = A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})
        done = A.wait(j["id"], 30)
        assert done["state"] == "failed", done
        assert done["error"]["code"] == "bad_result", done["error"]
        assert stack.psql_value(f"SELECT count(*) FROM job_blob_refs WHERE job_id = '{j['id']}'") == "0"
        refs = stack.psql_value(f"SELECT count(*) FROM blob_refs WHERE blob_id = '{bid}'")
        assert refs == ("0" if case == "not-stored" else "1"), refs   # A's own upload only
    finally:
        node.close()
