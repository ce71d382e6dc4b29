"""The node's data path, driven directly on a node with the cluster token:
inputs given as blob references are fetched from the gateway
(GET /v1/cluster/blobs/{id}), cached by hash, checked for size and hash,
and with "output_blobs" the outputs are pushed back (POST /v1/cluster/blobs)
and answered as references, never as text."""

import hashlib
import random
import struct
import time
import uuid

import pytest

from stack import Client

OCTET = {"Content-Type": "application/octet-stream"}


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def blob_id(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def gw(stack):
    return Client(stack.base, stack.cluster_token)


@pytest.fixture
def node(stack):
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
