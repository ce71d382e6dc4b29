"""The data path: jobs whose tensors are blobs. Inputs uploaded as raw bytes
and named by id, inline inputs turned into blobs at submit, nodes that fetch
inputs and push outputs as bytes, outputs downloaded raw or as .npy, and
what must hold when things break (a node killed mid-run, a gateway killed
mid-upload, retention)."""

import contextlib
import glob
import hashlib
import io
import os
import socket
import time

import numpy as np
import pytest

import requests

from stack import decode, free_port, status_kb as _kb, tensor, wait_until

OCTET = {"Content-Type": "application/octet-stream"}
ASAN = pytest.mark.skipif("ASAN_OPTIONS" in os.environ,
                          reason="memory bounds are measured on the normal build, not under ASan")


def upload(client, arr):
    r = client.post("/v1/blobs", data=np.ascontiguousarray(arr).tobytes(), headers=OCTET)
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def ref(arr, blob, dtype=None):
    dtype = dtype or {"f": "float32", "i": "int32"}[np.asarray(arr).dtype.kind]
    return {"dtype": dtype, "shape": list(np.shape(arr)), "blob": blob}


def outputs(client, jid):
    r = client.result(jid, "b64")
    assert r.status_code == 200, r.text
    return {k: decode(v) for k, v in r.json()["outputs"].items()}


def rng():
    return np.random.default_rng(11)


def kernel_cases():
    g = rng()
    x = g.random(1000, dtype=np.float32)
    y = g.random(1000, dtype=np.float32)
    a = g.random((64, 32), dtype=np.float32)
    b = g.random((32, 48), dtype=np.float32)
    grid = g.random((40, 50), dtype=np.float32)
    pts = g.random((300, 3), dtype=np.float32)
    mx = g.standard_normal((64, 4)).astype(np.float32)
    my = (np.arange(64) % 3).astype(np.int32)
    return {
        "saxpy": ({"a": 1.5}, {"x": x, "y": y}),
        "reduce": ({"op": "sum"}, {"x": a}),
        "gemm": ({"alpha": 2.0}, {"a": a, "b": b}),
        "heat2d": ({"alpha": 0.2, "steps": 5}, {"grid": grid}),
        "kmeans": ({"k": 4, "seed": 3}, {"points": pts}),
        "train_mlp": ({"classes": 3, "epochs": 2, "seed": 1}, {"x": mx, "y": my}),
    }


@pytest.mark.parametrize("kernel", sorted(kernel_cases()))
def test_every_kernel_gives_the_same_numbers_from_blob_and_inline_inputs(A, kernel):
    params, ins = kernel_cases()[kernel]
    inline = A.run(kernel, params, {k: tensor(v, b64=True) for k, v in ins.items()},
                   resources={"backend": "cpu"}, timeout=60)
    blob = A.run(kernel, params, {k: ref(v, upload(A, v)) for k, v in ins.items()},
                 resources={"backend": "cpu"}, timeout=60)
    assert inline["state"] == "succeeded", inline
    assert blob["state"] == "succeeded", blob
    want, got = outputs(A, inline["id"]), outputs(A, blob["id"])
    assert set(want) == set(got)
    for name in want:
        if kernel == "train_mlp" and name in ("loss", "accuracy"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5)
        else:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{kernel}.{name}")


def test_outputs_download_raw_and_npy(A):
    a = rng().random((33, 17), dtype=np.float32)
    b = rng().random((17, 9), dtype=np.float32)
    j = A.run("gemm", {}, {"a": ref(a, upload(A, a)), "b": ref(b, upload(A, b))})
    assert j["state"] == "succeeded", j
    want = outputs(A, j["id"])["c"]
    raw = A.get(f"/v1/jobs/{j['id']}/outputs/c")
    assert raw.status_code == 200 and raw.headers["Content-Type"] == "application/octet-stream"
    assert raw.headers["X-Kowloon-Dtype"] == "float32" and raw.headers["X-Kowloon-Shape"] == "33,9"
    np.testing.assert_array_equal(np.frombuffer(raw.content, np.float32).reshape(33, 9), want)
    for kw in ({"params": {"format": "npy"}}, {"headers": {"Accept": "application/x-npy"}}):
        npy = A.get(f"/v1/jobs/{j['id']}/outputs/c", **kw)
        assert npy.status_code == 200 and npy.headers["Content-Type"] == "application/x-npy", kw
        arr = np.load(io.BytesIO(npy.content))
        assert arr.dtype == np.float32 and arr.shape == (33, 9)
        np.testing.assert_array_equal(arr, want)
    assert A.get(f"/v1/jobs/{j['id']}/outputs/nope").status_code == 404
    assert A.get(f"/v1/jobs/{j['id']}/outputs/c", params={"format": "csv"}).status_code == 400


def test_result_as_blob_ids_the_tenant_can_download(A, B):
    x = np.arange(10, dtype=np.float32)
    j = A.run("saxpy", {"a": 2.0}, {"x": tensor(x), "y": tensor(x)})
    r = A.result(j["id"], "blob")
    assert r.status_code == 200, r.text
    z = r.json()["outputs"]["y"]
    assert set(z) == {"dtype", "shape", "blob"} and z["shape"] == [10]
    got = A.get("/v1/blobs/" + z["blob"])
    assert got.status_code == 200
    np.testing.assert_array_equal(np.frombuffer(got.content, np.float32), 3 * x)
    assert B.get("/v1/blobs/" + z["blob"]).status_code == 404
    # and the output can be the next job's input without crossing the client
    j2 = A.run("saxpy", {"a": 1.0}, {"x": z, "y": tensor(x)})
    np.testing.assert_array_equal(outputs(A, j2["id"])["y"], 4 * x)


@pytest.fixture
def no_new_jobs(stack):
    before = stack.count_jobs()
    yield
    assert stack.count_jobs() == before, "a refused request left a job row"


def test_blob_input_of_the_wrong_size_is_422_naming_it(A, no_new_jobs):
    x = np.arange(10, dtype=np.float32)
    bid = upload(A, x)
    r = A.post_job({"kernel": "saxpy", "params": {"a": 1},
                    "inputs": {"x": {"dtype": "float32", "shape": [11], "blob": bid},
                               "y": tensor(np.zeros(11, np.float32))}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "inputs.x", r.text
    assert "40 bytes" in r.json()["error"]["message"] and "44" in r.json()["error"]["message"]


def test_unknown_or_foreign_blob_input_is_422(A, B, no_new_jobs):
    x = np.arange(4, dtype=np.float32)
    theirs = upload(B, x)
    for bid in (theirs, "sha256:" + "0" * 64):
        r = A.post_job({"kernel": "saxpy", "params": {"a": 1},
                        "inputs": {"x": {"dtype": "float32", "shape": [4], "blob": bid},
                                   "y": tensor(x)}})
        assert r.status_code == 422 and r.json()["error"]["field"] == "inputs.x", r.text
    r = A.post_job({"kernel": "saxpy", "params": {"a": 1},
                    "inputs": {"x": {"dtype": "float32", "shape": [4], "blob": "sha256:xyz"},
                               "y": tensor(x)}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "inputs.x", r.text


def test_job_inputs_and_outputs_outlive_the_tenants_delete(A, stack):
    x = np.arange(8, dtype=np.float32)
    bid = upload(A, x)
    j = A.run("saxpy", {"a": 1.0}, {"x": ref(x, bid), "y": ref(x, bid)})
    assert A.request("DELETE", "/v1/blobs/" + bid).status_code == 200
    refs = stack.psql_value(f"SELECT count(*) FROM job_blob_refs WHERE blob_id = '{bid}'")
    assert int(refs) >= 1  # the job's reference keeps it from retention
    np.testing.assert_array_equal(outputs(A, j["id"])["y"], 2 * x)


def node_info(stack, name):
    r = requests.get(stack.node_url(name) + "/v1/info", timeout=5,
                     headers={"Authorization": "Bearer " + stack.cluster_token})
    assert r.status_code == 200, r.text
    return r.json()


def test_nodes_sharing_the_blob_dir_fetch_no_input_over_http(A, stack):
    """The stack's nodes share the gateway's blob directory: blob inputs are
    mapped from it, never fetched, and outputs written into it. (A node
    without it fetches each blob once and caches it: test_node_blobs.)"""
    x = rng().random(1 << 18, dtype=np.float32)  # 1 MiB
    bid = upload(A, x)

    def total(section, key):
        return sum(node_info(stack, n)[section][key] for n in stack.node_names)
    fetched0, mapped0 = total("input_cache", "fetched_bytes"), total("blob_io", "mapped_bytes")
    written0, pushed0 = total("blob_io", "written_outputs"), total("blob_io", "pushed_outputs")
    for k in range(6):
        j = A.run("saxpy", {"a": float(k)}, {"x": ref(x, bid), "y": ref(x, bid)})
        np.testing.assert_array_equal(outputs(A, j["id"])["y"], np.float32(k) * x + x)
    assert total("input_cache", "fetched_bytes") == fetched0
    assert total("blob_io", "mapped_bytes") - mapped0 == 12 * x.nbytes
    assert total("blob_io", "written_outputs") - written0 == 6
    assert total("blob_io", "pushed_outputs") == pushed0


def restart_nodes(stack, shared):
    """Restarts the stack's nodes with (or without) the shared blob dir."""
    for n in stack.node_names:
        stack.procs[n].stop()
        stack.start_node(n, shared_blobs=shared)
    stack.wait_nodes_up(stack.node_names, timeout=30)


@contextlib.contextmanager
def nodes_over_http(stack):
    """The stack's nodes without the shared blob directory for a while:
    every byte crosses over HTTP, as between hosts that share no filesystem."""
    restart_nodes(stack, shared=False)
    try:
        for n in stack.node_names:
            assert node_info(stack, n)["blob_io"]["shared_dir"] is None
        yield
    finally:
        restart_nodes(stack, shared=True)


@ASAN
@pytest.mark.timeout(300)
def test_one_gib_tensor_in_and_out_keeps_the_gateway_small(stack):
    n = 1 << 28  # 1 GiB of float32
    x = np.ones(n, dtype=np.float32)
    port = free_port()
    gw = stack.start_gateway("gateway-1gib", port, KOWLOON_MAX_OUTPUT_MB=2048)
    A = stack.client("A", base=f"http://127.0.0.1:{port}")
    pid = gw.pid
    base = _kb(pid, "VmRSS")
    bid = upload(A, x)
    j = A.run("saxpy", {"a": 1.0}, {"x": ref(x, bid), "y": ref(x, bid)}, timeout=240)
    assert j["state"] == "succeeded", j
    r = A.get(f"/v1/jobs/{j['id']}/outputs/y", stream=True, timeout=240)
    got, ok = 0, True
    for chunk in r.iter_content(16 << 20):
        ok = ok and bool(np.all(np.frombuffer(chunk, np.float32) == 2.0))
        got += len(chunk)
    assert got == n * 4 and ok
    grew = _kb(pid, "VmHWM") - base
    gw.stop()
    assert grew < 64 << 10, f"the gateway's peak RSS grew {grew >> 10} MiB for a 1 GiB tensor"


def test_gateway_killed_mid_upload_never_serves_a_half_blob(stack, A):
    port = free_port()
    gw = stack.start_gateway("gateway-upload-kill", port)
    data = os.urandom(8 << 20)
    full_id = "sha256:" + hashlib.sha256(data).hexdigest()
    half_id = "sha256:" + hashlib.sha256(data[: 3 << 20]).hexdigest()
    tmp = os.path.join(stack.blob_dir, "tmp")
    before = {e.name for e in os.scandir(tmp)}
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/blobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n"
              b"Authorization: Bearer " + stack.keys["A"].encode() + b"\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data[: 3 << 20])

    def half_written():  # the gateway holds a part of the upload on disk
        return any(e.name not in before and e.stat().st_size > 0 for e in os.scandir(tmp))
    wait_until(half_written, 30, 0.02, "a part of the upload on disk")
    gw.kill9()
    s.close()
    names = {os.path.basename(p) for p in glob.glob(os.path.join(stack.blob_dir, "sha256", "*", "*"))}
    assert full_id[7:] not in names and half_id[7:] not in names
    for bid in (full_id, half_id):
        assert A.get("/v1/blobs/" + bid).status_code == 404


@pytest.mark.timeout(120)
def test_node_killed_while_it_runs_a_blob_job_the_job_ends_right_once(A, stack):
    x = rng().random(1 << 20, dtype=np.float32)
    bid = upload(A, x)
    blocker = A.wait(A.submit("sleep", {"seconds": 6})["id"], 10, states=("running",))
    j = A.submit("heat2d", {"alpha": 0.2, "steps": 400},
                 {"grid": {"dtype": "float32", "shape": [1024, 1024], "blob": bid}}, max_attempts=3)
    j = stack.wait_run_on_node(A.wait(j["id"], 20, states=("running",)))
    victim = j["node"]
    assert victim != blocker["node"]
    stack.kill_node(victim)
    try:
        done = A.wait(j["id"], 90)
        assert done["state"] == "succeeded" and done["attempts"] == 2, done
        ref_run = A.run("heat2d", {"alpha": 0.2, "steps": 400},
                        {"grid": {"dtype": "float32", "shape": [1024, 1024], "blob": bid}}, timeout=90)
        np.testing.assert_array_equal(outputs(A, done["id"])["grid"], outputs(A, ref_run["id"])["grid"])
        assert_succeeded_once(stack, j["id"])
    finally:
        stack.start_node(victim)
        stack.wait_nodes_up(stack.node_names, timeout=30)


def assert_succeeded_once(stack, job_id):
    """The job's history holds exactly one success (a lost attempt's run
    never recorded a second)."""
    events = stack.psql_value(f"SELECT count(*) FROM job_events WHERE job_id = '{job_id}' "
                              "AND state = 'succeeded'")
    assert events == "1", events


# ---------------------------------------------------------------- multipart submits

def multipart_submit(A, job, parts, **kw):
    files = [("job", (None, job if isinstance(job, (bytes, str)) else __import__("json").dumps(job),
                      "application/json"))]
    files += [(name, (name + ".bin", data, "application/octet-stream")) for name, data in parts]
    return A.post("/v1/jobs", files=files, **kw)


def test_multipart_submit_carries_json_and_raw_bytes(A):
    x = np.arange(1000, dtype=np.float32)
    y = np.full(1000, 10, dtype=np.float32)
    r = multipart_submit(A, {"kernel": "saxpy", "params": {"a": 2.0}, "inputs": {
        "x": {"dtype": "float32", "shape": [1000], "part": "x"},
        "y": {"dtype": "float32", "shape": [1000], "part": "y"}}},
        [("x", x.tobytes()), ("y", y.tobytes())])
    assert r.status_code == 202, r.text
    done = A.wait(r.json()["id"])
    assert done["state"] == "succeeded", done
    np.testing.assert_array_equal(outputs(A, done["id"])["y"], 2 * x + y)
    # the parts are the tenant's blobs now
    assert A.get("/v1/blobs/" + "sha256:" + __import__("hashlib").sha256(x.tobytes()).hexdigest()
                 ).status_code == 200


@pytest.mark.parametrize("case,status", [
    ("no-job-part", 400), ("unknown-part", 422), ("unused-part", 422), ("wrong-size", 422),
    ("truncated", 400), ("bad-json", 400)])
def test_bad_multipart_submits_are_refused_and_store_no_job(A, no_new_jobs, case, status):
    x = np.arange(4, dtype=np.float32).tobytes()
    job = {"kernel": "saxpy", "params": {"a": 1.0}, "inputs": {
        "x": {"dtype": "float32", "shape": [4], "part": "x"},
        "y": {"dtype": "float32", "shape": [4], "part": "y"}}}
    if case == "no-job-part":
        r = A.post("/v1/jobs", files=[("x", ("x", x, "application/octet-stream"))])
    elif case == "unknown-part":
        r = multipart_submit(A, job, [("x", x), ("z", x)])
    elif case == "unused-part":
        r = multipart_submit(A, job, [("x", x), ("y", x), ("extra", x)])
    elif case == "wrong-size":
        r = multipart_submit(A, job, [("x", x), ("y", x[:8])])
    elif case == "bad-json":
        r = multipart_submit(A, b'{"kernel": ', [("x", x)])
    else:
        body = (b"--B\r\nContent-Disposition: form-data; name=\"job\"\r\n\r\n"
                + __import__("json").dumps(job).encode() + b"\r\n--B\r\n"
                b"Content-Disposition: form-data; name=\"x\"\r\n\r\n" + x)  # no closing boundary
        r = A.post("/v1/jobs", data=body, headers={"Content-Type": "multipart/form-data; boundary=B"})
    assert r.status_code == status, (case, r.status_code, r.text)
    assert "error" in r.json()


@pytest.mark.timeout(180)
def test_node_killed_while_it_fetches_inputs_the_job_ends_right_once(A, stack):
    # 2 x 128 MiB of inputs over HTTP: the node is still fetching them when it dies
    n = 1 << 25
    x = rng().random(n, dtype=np.float32)
    y = rng().random(n, dtype=np.float32)
    with nodes_over_http(stack):
        bx, by = upload(A, x), upload(A, y)
        j = A.submit("saxpy", {"a": 3.0}, {"x": ref(x, bx), "y": ref(y, by)}, max_attempts=3)
        j = stack.wait_run_on_node(A.wait(j["id"], 20, states=("running",)))
        victim = j["node"]
        stack.kill_node(victim)
        try:
            done = A.wait(j["id"], 120)
            assert done["state"] == "succeeded" and done["attempts"] >= 2, done
            out = A.get(f"/v1/jobs/{done['id']}/outputs/y")
            np.testing.assert_array_equal(np.frombuffer(out.content, np.float32), np.float32(3.0) * x + y)
            assert_succeeded_once(stack, j["id"])
        finally:
            stack.start_node(victim, shared_blobs=False)
            stack.wait_nodes_up(stack.node_names, timeout=30)


def wait_phase(stack, job, phase, timeout):
    """Waits until the job's node says its run is in phase ("inputs",
    "compute", "outputs")."""
    url = f"{stack.node_url(job['node'])}/v1/runs/{job['id']}.{job['attempts']}"
    hdr = {"Authorization": "Bearer " + stack.cluster_token}

    def there():
        r = requests.get(url, headers=hdr, timeout=2)
        return r.status_code == 200 and r.json().get("phase") == phase
    wait_until(there, timeout, 0.005, f"run {job['id']} in phase {phase}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("shared", [True, False], ids=["writing-to-the-shared-dir", "pushing-over-http"])
def test_node_killed_while_it_stores_outputs_the_job_ends_right_once(A, stack, shared):
    # a 256 MiB output: hashing, writing and fsyncing (or pushing) it takes
    # long enough to kill the node in the middle
    n = 1 << 26
    x = rng().random(n, dtype=np.float32)
    y = rng().random(n, dtype=np.float32)
    want = np.float32(3.0) * x + y
    t_start = time.time()
    with contextlib.nullcontext() if shared else nodes_over_http(stack):
        bx, by = upload(A, x), upload(A, y)
        j = A.submit("saxpy", {"a": 3.0}, {"x": ref(x, bx), "y": ref(y, by)}, max_attempts=3)
        j = A.wait(j["id"], 30, states=("running",))
        wait_phase(stack, j, "outputs", 90)
        victim = j["node"]
        stack.kill_node(victim)
        try:
            done = A.wait(j["id"], 150)
            assert done["state"] == "succeeded" and done["attempts"] >= 2, done
            out = A.get(f"/v1/jobs/{done['id']}/outputs/y", timeout=60)
            np.testing.assert_array_equal(np.frombuffer(out.content, np.float32), want)
            assert_succeeded_once(stack, j["id"])
        finally:
            stack.start_node(victim, shared_blobs=shared)
            stack.wait_nodes_up(stack.node_names, timeout=30)
    # whatever the killed node left half written, no file under a real name
    # holds other bytes than its name says
    for path in glob.glob(os.path.join(stack.blob_dir, "sha256", "*", "*")):
        if os.stat(path).st_mtime >= t_start - 1:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(8 << 20), b""):
                    h.update(chunk)
            assert h.hexdigest() == os.path.basename(path), f"{path} holds other bytes"
