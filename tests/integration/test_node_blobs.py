"""The node's data path, driven directly on a node with the cluster token.
A node without the gateway's blob directory (--blob-dir none): inputs given
as blob references are fetched from the gateway (GET /v1/cluster/blobs/{id}),
cached by hash, checked for size and hash, and with "output_blobs" the
outputs are pushed back (POST /v1/cluster/blobs) and answered as
references, never as text. A node that shares the directory maps the
inputs it finds there and writes its outputs into it, and the gateway
records such an output (PUT /v1/cluster/blobs/{id}) only when it sees the
file with the stated size."""

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

from stack import Client, free_port, wait_until

OCTET = {"Content-Type": "application/octet-stream"}


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def blob_id(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def gw(stack):
    return Client(stack.base, stack.cluster_token)


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
    return Client(stack.node_url(http_node), stack.cluster_token)


@pytest.fixture
def shared_node(stack):
    """One of the stack's nodes: they share the gateway's blob directory."""
    return Client(stack.node_url(stack.node_names[0]), stack.cluster_token)


def push(gw, data):
    r = gw.post("/v1/cluster/blobs", data=data, headers=OCTET)
    assert r.status_code == 201, r.text
    assert r.json()["id"] == blob_id(data)
    return r.json()["id"]


def run_on_node(node, inputs, kernel="gemm", params=None, output_blobs=True):
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


def gemm_inputs(gw):
    a = [random.uniform(-2, 2) for _ in range(6)]
    b = [random.uniform(-2, 2) for _ in range(6)]
    ref = {"dtype": "float32", "shape": [2, 3], "blob": push(gw, f32(a))}
    return a, b, {"a": ref, "b": {"dtype": "float32", "shape": [3, 2], "blob": push(gw, f32(b))}}


def test_blob_inputs_are_fetched_and_outputs_pushed_as_blobs(gw, node):
    a, b, inputs = gemm_inputs(gw)
    run = run_on_node(node, inputs)
    assert run["state"] == "succeeded", run
    c = run["outputs"]["c"]
    assert set(c) == {"dtype", "shape", "blob"}, c
    assert c["dtype"] == "float32" and c["shape"] == [2, 2]
    r = gw.get(f"/v1/cluster/blobs/{c['blob']}")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert blob_id(r.content) == c["blob"]
    got = struct.unpack("<4f", r.content)
    for i in range(2):
        for j in range(2):
            want = sum(a[i * 3 + k] * b[k * 2 + j] for k in range(3))
            assert abs(got[i * 2 + j] - want) <= 1e-5 + 1e-5 * abs(want), (got, want)


def test_the_same_input_twice_is_fetched_once(gw, node):
    _, _, inputs = gemm_inputs(gw)
    before = cache(node)
    assert before["budget_bytes"] == 1024 << 20
    assert run_on_node(node, inputs)["state"] == "succeeded"
    mid = cache(node)
    assert mid["misses"] - before["misses"] == 2
    assert mid["fetched_bytes"] - before["fetched_bytes"] == 48
    assert run_on_node(node, inputs)["state"] == "succeeded"
    after = cache(node)
    assert after["hits"] - mid["hits"] == 2
    assert after["fetched_bytes"] == mid["fetched_bytes"], "a cached blob crossed again"
    assert after["served_bytes"] - mid["served_bytes"] == 48


def test_without_output_blobs_outputs_stay_base64(gw, node):
    _, _, inputs = gemm_inputs(gw)
    run = run_on_node(node, inputs, output_blobs=False)
    assert run["state"] == "succeeded", run
    assert "b64" in run["outputs"]["c"], run["outputs"]["c"]


def test_a_blob_of_the_wrong_size_is_invalid_argument(gw, node):
    _, _, inputs = gemm_inputs(gw)
    inputs["a"]["blob"] = push(gw, f32([1.0] * 5))  # shape [2, 3] needs 24 bytes
    run = run_on_node(node, inputs)
    assert run["state"] == "failed", run
    err = run["error"]
    assert err["code"] == "invalid_argument", err
    assert err["field"] == "inputs.a", err
    assert "20 bytes" in err["message"] and "24 bytes" in err["message"], err


def test_an_unknown_blob_is_a_backend_error(gw, node):
    _, _, inputs = gemm_inputs(gw)
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


def blob_io(node):
    r = node.get("/v1/info")
    assert r.status_code == 200, r.text
    return r.json()["blob_io"]


def test_http_node_says_it_shares_no_blob_dir(node):
    assert blob_io(node)["shared_dir"] is None


def test_node_sharing_the_blob_dir_maps_inputs_and_writes_outputs(stack, gw, shared_node):
    a, b, inputs = gemm_inputs(gw)
    before_io, before_cache = blob_io(shared_node), cache(shared_node)
    assert os.path.samefile(before_io["shared_dir"], stack.blob_dir), before_io
    run = run_on_node(shared_node, inputs)
    assert run["state"] == "succeeded", run
    after_io, after_cache = blob_io(shared_node), cache(shared_node)
    # nothing crossed over HTTP: both inputs mapped, the output written
    assert after_cache["fetched_bytes"] == before_cache["fetched_bytes"]
    assert after_cache["misses"] == before_cache["misses"]
    assert after_io["mapped_inputs"] - before_io["mapped_inputs"] == 2
    assert after_io["mapped_bytes"] - before_io["mapped_bytes"] == 48
    assert after_io["written_outputs"] - before_io["written_outputs"] == 1
    assert after_io["pushed_outputs"] == before_io["pushed_outputs"]
    assert set(run["phases_ms"]) == {"inputs", "compute", "outputs"}, run
    c = run["outputs"]["c"]
    path = os.path.join(stack.blob_dir, "sha256", c["blob"][7:9], c["blob"][7:])
    with open(path, "rb") as f:
        data = f.read()
    assert blob_id(data) == c["blob"]
    # recorded by the gateway, which serves it like any other blob
    assert stack.psql_value(f"SELECT size FROM blobs WHERE id = '{c['blob']}'") == "16"
    r = gw.get(f"/v1/cluster/blobs/{c['blob']}")
    assert r.status_code == 200 and r.content == data
    got = struct.unpack("<4f", data)
    for i in range(2):
        for j in range(2):
            want = sum(a[i * 3 + k] * b[k * 2 + j] for k in range(3))
            assert abs(got[i * 2 + j] - want) <= 1e-5 + 1e-5 * abs(want), (got, want)


def test_a_shared_blob_of_the_wrong_size_is_invalid_argument(gw, shared_node):
    _, _, inputs = gemm_inputs(gw)
    inputs["a"]["blob"] = push(gw, f32([2.0] * 5))
    run = run_on_node(shared_node, inputs)
    assert run["state"] == "failed" and run["error"]["code"] == "invalid_argument", run
    assert run["error"]["field"] == "inputs.a"
    assert "20 bytes" in run["error"]["message"], run["error"]


def test_gateway_records_a_node_written_blob_only_when_its_file_is_there(stack, gw):
    data = os.urandom(1000)
    bid = blob_id(data)
    # not in the store: refused, nothing recorded
    r = gw.request("PUT", f"/v1/cluster/blobs/{bid}", json={"size": 1000})
    assert r.status_code == 404, r.text
    assert stack.psql_value(f"SELECT count(*) FROM blobs WHERE id = '{bid}'") == "0"
    # a file under that name (as a node writes it) but another size: refused
    d = os.path.join(stack.blob_dir, "sha256", bid[7:9])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, bid[7:]), "wb") as f:
        f.write(data)
    r = gw.request("PUT", f"/v1/cluster/blobs/{bid}", json={"size": 999})
    assert r.status_code == 422 and r.json()["error"]["field"] == "size", r.text
    assert stack.psql_value(f"SELECT count(*) FROM blobs WHERE id = '{bid}'") == "0"
    for bad in ({}, {"size": "1000"}, {"size": -1}):
        assert gw.request("PUT", f"/v1/cluster/blobs/{bid}", json=bad).status_code == 400, bad
    assert gw.request("PUT", "/v1/cluster/blobs/sha256:xyz", json={"size": 1}).status_code == 400
    assert Client(stack.base, "wrong").request("PUT", f"/v1/cluster/blobs/{bid}",
                                                json={"size": 1000}).status_code == 401
    # the right size: recorded, with nobody's reference yet
    r = gw.request("PUT", f"/v1/cluster/blobs/{bid}", json={"size": 1000})
    assert r.status_code == 201 and r.json() == {"id": bid, "size": 1000}, r.text
    assert stack.psql_value(f"SELECT size FROM blobs WHERE id = '{bid}'") == "1000"
    assert stack.psql_value(f"SELECT count(*) FROM blob_refs WHERE blob_id = '{bid}'") == "0"


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


@pytest.mark.parametrize("case", ["not-recorded", "wrong-size"])
def test_a_run_reporting_an_output_blob_the_gateway_did_not_record_fails_bad_result(stack, A, gw, case):
    """A node's result names an output blob: the gateway takes it only if
    that blob is recorded (pushed, or adopted from the shared directory)
    with the size the output's shape needs; else the job fails bad_result
    and the blob is given to nobody."""
    from fakenode import FakeNode
    data = os.urandom(64)
    if case == "not-recorded":
        bid = blob_id(data)  # neither pushed nor adopted
        shape = [16]
    else:
        bid = push(gw, data)  # recorded with 64 bytes
        shape = [15]          # but reported as 60
    node = FakeNode(stack.base, stack.cluster_token, f"fake-output-{case}", run_s=0.2,
                    outputs={"x": {"dtype": "float32", "shape": shape, "blob": bid}}).start()
    try:
        j = A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})
        done = A.wait(j["id"], 30)
        assert done["state"] == "failed", done
        assert done["error"]["code"] == "bad_result", done["error"]
        assert stack.psql_value(f"SELECT count(*) FROM blob_refs WHERE blob_id = '{bid}'") == "0"
    finally:
        node.close()
