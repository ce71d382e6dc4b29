"""The Python SDK and CLI (sdk/python, package `kowloon`) against the real
stack: every kernel through Client.run equals numpy; a large input goes as
a blob once; a 429 storm is ridden out with one job per submit; Job.wait
returns at the job's end; errors map to typed exceptions; job listing pages
lazily; events (SSE, resumed by Last-Event-ID, or the Prefer: wait
fallback); the asyncio client; the `kowloon` command. A few tests need no
stack: retries and idempotency keys against a scripted transport, the SSE
parser, and SSE resume against a scripted server."""

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import httpx
import numpy as np
import pytest

from stack import REPO

SDK_SRC = os.path.join(REPO, "sdk", "python", "src")
sys.path.insert(0, SDK_SRC)

import kowloon  # noqa: E402
from kowloon import _wire  # noqa: E402

# The kernels' numpy references, from their tests in the kernels room.
sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels")))
import test_kernel_heat2d as heat  # noqa: E402  (numpy references, not re-collected here)
import test_kernel_kmeans as km  # noqa: E402
import test_kernel_montecarlo as mc  # noqa: E402
import test_kernel_train_mlp as mlp  # noqa: E402

rng = np.random.default_rng(20261203)


class Recorder(httpx.HTTPTransport):
    """An httpx transport that notes (method, path, status, request headers,
    request body) of every exchange."""

    def __init__(self):
        super().__init__()
        self.log = []

    def handle_request(self, request):
        resp = super().handle_request(request)
        self.log.append((request.method, request.url.path, resp.status_code,
                         dict(request.headers), request.content if request.method == "POST" else b""))
        return resp

    def calls(self, method=None, path_prefix=""):
        return [e for e in self.log if (method is None or e[0] == method)
                and e[1].startswith(path_prefix)]


@pytest.fixture
def kl(stack):
    """A kowloon.Client of tenant A; jobs it left unfinished are cancelled."""
    rec = Recorder()
    c = kowloon.Client(stack.base, stack.keys["A"], transport=rec)
    c.recorder = rec
    yield c
    _cancel_leftovers(c)
    c.close()


def _cancel_leftovers(c):
    for st in ("queued", "running"):
        try:
            for j in list(c.jobs.list(state=st)):
                try:
                    j.cancel()
                except kowloon.ApiError:
                    pass
        except kowloon.KowloonError:
            pass


def new_tenant_client(stack, **limits):
    """A Client of a fresh tenant with these limits (admin API)."""
    name = "sdk-" + uuid.uuid4().hex[:8]
    r = stack.admin.post("/v1/tenants", json=dict(name=name, **limits))
    assert r.status_code == 201, r.text
    r = stack.admin.post("/v1/keys", json={"tenant": name})
    assert r.status_code == 201, r.text
    return name, r.json()["key"]


# ------------------------------------------------------------------ kernels

def test_every_kernel_through_run_equals_numpy(kl):
    x = np.arange(1000)  # int64: cast to the catalog's float32
    y = rng.standard_normal(1000).astype(np.float32)
    out = kl.run("saxpy", x=x, y=y, a=2.5)
    assert set(out) == {"y"} and out["y"].dtype == np.float32 and out["y"].shape == (1000,)
    np.testing.assert_allclose(out["y"], 2.5 * x + y, rtol=1e-6)

    v = rng.standard_normal((7, 9))  # float64 in, float32 sent
    out = kl.run("reduce", x=v, op="max")
    assert out["value"].shape == (1,)
    assert out["value"][0] == v.astype(np.float32).max()

    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5, 7), (7, 3), (5, 3)))
    out = kl.run("gemm", a=a, b=b, c=c, alpha=2.0, beta=-1.0)
    np.testing.assert_allclose(out["c"], 2.0 * (a.astype(np.float64) @ b) - c, rtol=1e-4, atol=1e-4)

    out = kl.run("sleep", seconds=0)
    assert out["slept"].shape == (1,) and 0 <= out["slept"][0] < 1

    g = rng.uniform(-1, 1, (12, 15)).astype(np.float32)
    out = kl.run("heat2d", grid=g, alpha=0.2, steps=5)
    want, resid = heat.numpy_heat(g, 0.2, 5)
    np.testing.assert_array_equal(out["grid"], want)
    assert out["residual"][0] == resid

    pts = rng.uniform(-1, 1, (120, 2)).astype(np.float32)
    out = kl.run("kmeans", points=pts, init=pts[:3], k=3, iterations=4, tol=0.0)
    cents, labels, inertia, it = km.lloyd(pts, pts[:3].copy(), 4, 0.0)
    assert out["labels"].dtype == np.int32 and out["iterations_run"].dtype == np.int32
    np.testing.assert_allclose(out["centroids"], cents, rtol=1e-6, atol=1e-7)
    assert (out["labels"] == labels).all() and out["iterations_run"][0] == it
    assert out["inertia"][0] == pytest.approx(inertia, rel=1e-6)

    out = kl.run("montecarlo_option", s0=100.0, strike=100.0, rate=0.05, sigma=0.2,
                 maturity=1.0, paths=20000, seed=5)
    bs = mc.black_scholes("call", 100.0, 100.0, 0.05, 0.2, 1.0)
    assert abs(float(out["price"][0]) - bs) <= 3 * float(out["std_error"][0])

    xs, ys = mlp.blobs(48, 4, 3, 1.5)
    out = kl.run("train_mlp", x=xs, y=ys.astype(np.int64), hidden=8, classes=3, epochs=2,
                 batch_size=16, lr=0.1, momentum=0.9, seed=7, resources={"backend": "cpu"})
    (w1, b1, w2, b2), losses, _ = mlp.numpy_train(xs, ys, 8, 3, 2, 16, 0.1, 0.9, 7)
    for name, want in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)):
        np.testing.assert_allclose(out[name], want, rtol=1e-3, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(out["loss"], losses, rtol=1e-4, atol=1e-6)

    out = kl.run("allreduce", count=1001, dtype="float64", op="sum", iters=2,
                 resources={"backend": "cpu", "gpus": 2})
    assert out["wrong"].dtype == np.int32 and out["wrong"][0] == 0
    assert out["time_us"].dtype == np.float64 and out["time_us"][0] > 0


def test_unknown_keyword_and_lossy_cast_refused_before_sending(kl):
    n = len(kl.recorder.calls("POST", "/v1/jobs"))
    with pytest.raises(kowloon.KowloonError, match="no input or param 'z'"):
        kl.submit("saxpy", x=[1.0], y=[1.0], a=1.0, z=3)
    with pytest.raises(kowloon.KowloonError, match="cannot cast float64 to int32"):
        kl.submit("train_mlp", x=np.ones((4, 2)), y=np.ones(4), classes=2)
    assert len(kl.recorder.calls("POST", "/v1/jobs")) == n


# ------------------------------------------------------------------ blobs

def test_large_input_goes_as_blob_and_a_second_run_does_not_upload_it(kl):
    x = rng.standard_normal(40000).astype(np.float32)  # 160 KB
    bid = "sha256:" + __import__("hashlib").sha256(x.tobytes()).hexdigest()
    for round_ in (1, 2):
        kl.recorder.log.clear()
        out = kl.run("reduce", x=x)
        assert out["value"][0] == pytest.approx(x.astype(np.float64).sum(), rel=1e-4, abs=1e-3)
        heads = kl.recorder.calls("HEAD", "/v1/blobs/")
        posts = kl.recorder.calls("POST", "/v1/blobs")
        assert [h[1] for h in heads] == [f"/v1/blobs/{bid}"]
        if round_ == 1:
            assert heads[0][2] in (200, 404)
            if heads[0][2] == 404:
                assert len(posts) == 1 and posts[0][4] == x.tobytes()
        else:
            assert heads[0][2] == 200 and posts == [], "the bytes were sent again"
        (submit,) = kl.recorder.calls("POST", "/v1/jobs")
        body = json.loads(submit[4])
        assert body["inputs"]["x"] == {"dtype": "float32", "shape": [40000], "blob": bid}


def test_small_input_goes_inline_as_base64(kl):
    kl.run("saxpy", x=np.ones(16, np.float32), y=np.zeros(16, np.float32), a=1.0)
    assert kl.recorder.calls("HEAD", "/v1/blobs") == []
    body = json.loads(kl.recorder.calls("POST", "/v1/jobs")[-1][4])
    assert set(body["inputs"]["x"]) == {"dtype", "shape", "b64"}


# ------------------------------------------------------------------ retries

def test_429_storm_is_ridden_out_with_one_job_per_submit(stack):
    name, key = new_tenant_client(stack, rate_rps=2, rate_burst=2)
    rec = Recorder()
    with kowloon.Client(stack.base, key, transport=rec, max_retry_s=30) as c:
        jobs = [c.submit("sleep", seconds=0) for _ in range(8)]
        listed = list(c.jobs.list(page_size=3))
    assert len({j.id for j in jobs}) == 8
    assert sorted(j.id for j in listed) == sorted(j.id for j in jobs)
    n = stack.psql_value("SELECT count(*) FROM jobs j JOIN tenants t ON t.id = j.tenant_id "
                         f"WHERE t.name = '{name}'")
    assert int(n) == 8, "a retried submit made a second job"
    statuses = [e[2] for e in rec.log]
    assert statuses.count(429) >= 3, statuses
    submits = rec.calls("POST", "/v1/jobs")
    keys = [e[3].get("idempotency-key") for e in submits]
    assert all(keys) and len(set(keys)) == 8, "one Idempotency-Key per logical submit"
    # every 429'd submit was retried with the key it had
    for i, e in enumerate(submits):
        if e[2] == 429:
            assert submits[i + 1][3]["idempotency-key"] == e[3]["idempotency-key"]


def _scripted(replies):
    """A Client on a MockTransport answering the scripted replies in turn
    (an Exception is raised instead of answering); returns (client, seen)."""
    seen, it = [], iter(replies)

    def handler(request):
        seen.append(request)
        r = next(it)
        if isinstance(r, Exception):
            raise r
        return r
    catalog = {"kernels": [{"name": "saxpy", "params": [{"name": "a", "type": "number"}],
                            "inputs": [{"name": "x", "dtype": "float32"},
                                       {"name": "y", "dtype": "float32"}], "outputs": []}]}
    c = kowloon.Client("http://kowloon.test", "kl_x", transport=httpx.MockTransport(handler),
                       max_retry_s=5)
    c._catalog = {k["name"]: k for k in catalog["kernels"]}
    return c, seen


def _job(id_="j1", state="queued"):
    return {"id": id_, "state": state, "kernel": "saxpy"}


def test_retries_reuse_the_idempotency_key_and_stop_at_the_budget():
    err503 = httpx.Response(503, headers={"Retry-After": "0"},
                            json={"error": {"code": "unavailable", "message": "pg down"}})
    c, seen = _scripted([err503, httpx.ConnectError("refused"),
                         httpx.Response(202, json=_job("j1")),
                         httpx.Response(202, json=_job("j2"))])
    j1 = c.submit("saxpy", x=[1.0], y=[2.0], a=1.0)
    j2 = c.submit("saxpy", x=[1.0], y=[2.0], a=1.0)
    assert (j1.id, j2.id) == ("j1", "j2") and len(seen) == 4
    k = [r.headers["idempotency-key"] for r in seen]
    assert k[0] == k[1] == k[2] != k[3]
    uuid.UUID(k[0])

    r429 = httpx.Response(429, headers={"Retry-After": "1"},
                          json={"error": {"code": "rate_limited", "message": "slow down"}})
    c, seen = _scripted([r429] * 10)
    c._cfg.retry.max_total_s = 1.5
    t0 = time.monotonic()
    with pytest.raises(kowloon.RateLimitError) as ei:
        c.job("j1")
    assert 0.9 < time.monotonic() - t0 < 3 and len(seen) == 2
    assert ei.value.status == 429 and ei.value.code == "rate_limited" and ei.value.retry_after == 1

    c, seen = _scripted([httpx.Response(422, json={"error": {
        "code": "invalid_argument", "message": "inputs.y has shape [1]", "field": "inputs.y"}})])
    with pytest.raises(kowloon.ValidationError) as ei:
        c.submit("saxpy", x=[1.0], y=[2.0], a=1.0)
    assert len(seen) == 1 and ei.value.field == "inputs.y"


# ------------------------------------------------------------------ waiting

def test_wait_returns_at_the_jobs_end_not_at_n(kl):
    job = kl.submit("sleep", seconds=1.5)
    t0 = time.monotonic()
    assert job.wait(timeout=40) is job
    took = time.monotonic() - t0
    assert job.state == "succeeded" and job.done
    assert 1.0 < took < 5.0, f"wait returned after {took:.2f} s"
    waits = [e for e in kl.recorder.calls("GET", f"/v1/jobs/{job.id}") if "prefer" in e[3]]
    assert len(waits) == 1 and waits[0][3]["prefer"] == "wait=40", waits
    job2 = kl.submit("sleep", seconds=10)
    t0 = time.monotonic()
    with pytest.raises(kowloon.WaitTimeout):
        job2.wait(timeout=1)
    assert time.monotonic() - t0 < 3
    assert job2.cancel().data["cancel_requested"] or job2.state == "cancelled"


# ------------------------------------------------------------------ errors

def test_errors_map_to_typed_exceptions(stack, kl):
    with kowloon.Client(stack.base, "kl_" + "0" * 40) as bad:
        with pytest.raises(kowloon.AuthenticationError) as ei:
            bad.nodes()
        assert ei.value.status == 401 and ei.value.code == "unauthenticated"
        assert not isinstance(ei.value, kowloon.PermissionDeniedError)
    with pytest.raises(kowloon.PermissionDeniedError) as ei:
        kl.request("GET", "/v1/tenants")
    assert ei.value.status == 403 and ei.value.code == "forbidden"
    with pytest.raises(kowloon.NotFoundError) as ei:
        kl.job(str(uuid.uuid4()))
    assert ei.value.status == 404 and ei.value.message == "no such job"
    done = kl.submit("sleep", seconds=0).wait(30)
    with pytest.raises(kowloon.ConflictError) as ei:
        done.cancel()
    assert ei.value.status == 409
    with pytest.raises(kowloon.ValidationError) as ei:
        kl.submit("gemm", a=np.ones((2, 3)), b=np.ones((2, 2)))
    assert ei.value.status == 422 and ei.value.field == "inputs.b", ei.value
    with pytest.raises(kowloon.BadRequestError) as ei:
        list(kl.jobs.list(state="bogus"))
    assert ei.value.field == "state"
    x, y = mlp.blobs(10, 2, 2, 1.0)
    y[6] = 2
    with pytest.raises(kowloon.JobFailedError) as ei:
        kl.run("train_mlp", x=x, y=y, classes=2, batch_size=5, resources={"backend": "cpu"})
    assert ei.value.state == "failed" and ei.value.code == "invalid_argument"
    u = kl.usage()      # usage itself: test_usage.py
    assert {"totals", "groups", "currency"} <= set(u)
    with pytest.raises(kowloon.BadRequestError) as ei:
        kl.usage(group_by="node")
    assert ei.value.field == "group_by"


# ------------------------------------------------------------------ listing

def test_jobs_list_pages_lazily_through_cursors(kl):
    tag = uuid.uuid4().hex[:10]
    ids = [kl.submit("sleep", seconds=0, labels={"t": tag}).id for _ in range(5)]
    kl.recorder.log.clear()
    it = kl.jobs.list(label=("t", tag), page_size=2)
    first = [next(it).id, next(it).id]
    assert len(kl.recorder.calls("GET", "/v1/jobs")) == 1, "fetched more than it needed"
    rest = [j.id for j in it]
    assert first + rest == ids[::-1], "newest first, each once"
    pages = kl.recorder.calls("GET", "/v1/jobs")
    assert len(pages) == 3
    assert [j.id for j in kl.jobs.list(kernel="sleep", label=f"t:{tag}")] == ids[::-1]


# ------------------------------------------------------------------ events

def test_events_follow_a_job_to_its_end(kl):
    job = kl.submit("sleep", seconds=1)
    evs = list(job.events())
    assert evs and evs[-1].state == "succeeded" and job.state == "succeeded"
    states = [e.state for e in evs if e.state]
    assert states[-1] == "succeeded" and "queued" not in states[states.index("succeeded"):]
    with pytest.raises(kowloon.NotFoundError):
        list(kowloon.Job(kl, {"id": str(uuid.uuid4()), "state": "queued"}).events())


def test_sse_parser_handles_fields_comments_and_line_ends():
    p = _wire.SSEParser()
    text = (": heartbeat\r\nid: 7\r\nevent: state\ndata: {\"state\":\"running\"}\n\n"
            "data: a\rdata:b\r\n\nretry: 2500\nid: 9\nevent: progress\n"
            "data: {\"progress\": {\"epoch\": 2, \"epochs\": 4}}\n\n: bye\n")
    sp, evs = _wire.LineSplitter(), []
    for i in range(0, len(text), 3):  # arbitrary chunking, CRLF split across chunks
        for line in sp.feed(text[i:i + 3]):
            ev = p.feed_line(line)
            if ev:
                evs.append(ev)
    assert [(e.id, e.event) for e in evs] == [("7", "state"), ("7", "message"), ("9", "progress")]
    assert evs[0].state == "running" and evs[1].data == "a\nb"
    assert evs[2].progress == {"epoch": 2, "epochs": 4} and p.retry_ms == 2500
    assert _wire.progress_fraction(evs[2].progress) == 0.5


def test_events_resume_with_last_event_id_after_a_dropped_connection():
    """A scripted SSE server drops the first stream after two events; the
    client reconnects with Last-Event-ID and gets the rest, no repeat."""
    seen_ids = []

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            seen_ids.append(self.headers.get("Last-Event-ID"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            if self.headers.get("Last-Event-ID") is None:
                self.wfile.write(b"retry: 10\n: hi\n\nid: 1\nevent: state\ndata: {\"state\": \"queued\"}\n\n"
                                 b"id: 2\nevent: state\ndata: {\"state\": \"running\"}\n\n"
                                 b"id: 3\nevent: progress\ndata: {\"progr")  # cut mid-event
            else:
                start = int(self.headers["Last-Event-ID"]) + 1
                for i, (ev, data) in enumerate([("progress", '{"progress": {"step": 1, "steps": 2}}'),
                                                ("state", '{"state": "succeeded"}')], 3):
                    if i >= start:
                        self.wfile.write(f"id: {i}\nevent: {ev}\ndata: {data}\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with kowloon.Client(f"http://127.0.0.1:{srv.server_port}", "kl_x") as c:
            job = kowloon.Job(c, {"id": "j", "state": "queued"})
            evs = list(job.events())
    finally:
        srv.shutdown()
    assert [e.id for e in evs] == ["1", "2", "3", "4"]
    assert seen_ids == [None, "2"]
    assert job.state == "succeeded" and job.progress == {"step": 1, "steps": 2}


# ------------------------------------------------------------------ asyncio

def test_async_client_runs_jobs_concurrently(stack):
    mats = [(rng.standard_normal((6, 4)).astype(np.float32),
             rng.standard_normal((4, 5)).astype(np.float32)) for _ in range(4)]

    async def main():
        async with kowloon.AsyncClient(stack.base, stack.keys["A"]) as c:
            t0 = time.monotonic()
            outs = await asyncio.gather(*(c.run("gemm", a=a, b=b, alpha=0.5) for a, b in mats),
                                        c.run("sleep", seconds=1), c.run("sleep", seconds=1))
            took = time.monotonic() - t0
            job = await c.submit("sleep", seconds=0)
            evs = [e async for e in job.events()]
            listed = [j.id async for j in c.jobs.list(kernel="sleep", page_size=2)]
            return outs, took, job, evs, listed, await c.nodes()

    outs, took, job, evs, listed, nodes = asyncio.run(main())
    for (a, b), out in zip(mats, outs):
        np.testing.assert_allclose(out["c"], 0.5 * (a.astype(np.float64) @ b), rtol=1e-4, atol=1e-5)
    assert took < 1.95, f"two 1 s sleeps on two nodes took {took:.2f} s: not concurrent"
    assert evs[-1].state == "succeeded" and job.id in listed
    assert {n["name"] for n in nodes} >= {"node-a", "node-b"}


# ------------------------------------------------------------------ CLI

def cli(stack, *args, key="A", timeout=60):
    env = dict(os.environ, KOWLOON_URL=stack.base, KOWLOON_API_KEY=stack.keys[key],
               PYTHONPATH=SDK_SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kowloon", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_takes_the_key_from_the_environment_a_file_or_stdin_never_argv(stack, tmp_path):
    """A key among the command's arguments is readable by every user of
    the host (ps): --api-key is refused without a request and without
    echoing the key; the key comes from $KOWLOON_API_KEY, --api-key-file
    FILE or --api-key-file - (stdin)."""
    key = stack.keys["A"]
    env = dict(os.environ, KOWLOON_URL=stack.base,
               PYTHONPATH=SDK_SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("KOWLOON_API_KEY", None)

    def run(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "kowloon", *args], env=env, input=stdin,
                              capture_output=True, text=True, timeout=60)
    r = run("--api-key", key, "kernels", "--json")
    assert r.returncode == 2 and "KOWLOON_API_KEY" in r.stderr, (r.returncode, r.stderr)
    assert key not in r.stderr + r.stdout
    r = run("kernels", "--json")
    assert r.returncode == 2 and "--api-key-file" in r.stderr, r.stderr
    f = tmp_path / "key"
    f.write_text(key + "\n")
    f.chmod(0o600)
    for args, stdin in ((("--api-key-file", str(f)), None), (("--api-key-file", "-"), key + "\n"),
                        (("kernels", "--api-key-file", str(f)), None)):
        args = args if args[0] == "kernels" else (*args, "kernels")
        r = run(*args, "--json", stdin=stdin)
        assert r.returncode == 0, (args, r.stderr)
        assert any(k["name"] == "saxpy" for k in json.loads(r.stdout))
    r = run("--api-key-file", str(tmp_path / "missing"), "kernels")
    assert r.returncode == 2 and "missing" in r.stderr, r.stderr


def test_cli_run_writes_outputs_and_json(stack, tmp_path):
    x = np.arange(6, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.ones(6))
    out = tmp_path / "out"
    r = cli(stack, "run", "saxpy", "--param", "a=3", "--input", f"x={tmp_path / 'x.npy'}",
            "--input", f"y={tmp_path / 'y.npy'}", "--out", str(out), "--label", "cli:yes")
    assert r.returncode == 0, r.stderr
    y = np.load(out / "y.npy")
    assert y.dtype == np.float32 and (y == 3 * x + 1).all()
    r = cli(stack, "--json", "run", "saxpy", "--param", "a=2", "--input",
            f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}")
    assert r.returncode == 0, r.stderr
    body = json.loads(r.stdout)
    assert body["job"]["state"] == "succeeded" and body["outputs"]["y"]["data"] == (2 * x + 1).tolist()
    r = cli(stack, "jobs", "--json", "--label", "cli:yes", "--kernel", "saxpy")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert len(listed) == 1 and listed[0]["labels"] == {"cli": "yes"}
    r = cli(stack, "jobs", "--state", "succeeded", "--limit", "2")
    assert r.returncode == 0 and r.stdout.splitlines()[0].split()[:3] == ["ID", "STATE", "KERNEL"]
    assert len(r.stdout.splitlines()) == 3
    for cmd in ("nodes", "kernels"):
        r = cli(stack, cmd, "--json")
        assert r.returncode == 0 and isinstance(json.loads(r.stdout), list), r.stderr


@pytest.mark.timeout(150)  # ten CLI runs; 44-60 s on a loaded 2-core machine
def test_cli_watch_cancel_and_exit_codes(stack, kl):
    job = kl.submit("sleep", seconds=1)
    r = cli(stack, "watch", job.id)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith(f"{job.id} succeeded")
    job = kl.submit("sleep", seconds=30)
    r = cli(stack, "cancel", job.id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["id"] == job.id, r.stderr
    r = cli(stack, "watch", "--json", job.id)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert json.loads(r.stdout.splitlines()[-1])["state"] == "cancelled"
    r = cli(stack, "cancel", job.id)
    assert r.returncode == 3 and "409" in r.stderr
    r = cli(stack, "cancel", str(uuid.uuid4()), "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["error"]["status"] == 404
    r = cli(stack, "run", "saxpy", "--param", "nope=1")
    assert r.returncode == 2 and "no param 'nope'" in r.stderr
    r = cli(stack, "frobnicate")
    assert r.returncode == 2
    r = cli(stack, "usage", "--json", "--group-by", "kernel")
    assert r.returncode == 0 and "totals" in json.loads(r.stdout), r.stderr
    r = cli(stack, "usage", "--json", "--from", "tomorrow")
    assert r.returncode == 3 and json.loads(r.stdout)["error"]["field"] == "from", r.stdout
    r = cli(stack, "run", "train_mlp", "--param", "classes=2", "--input", "x=/nonexistent.npy")
    assert r.returncode == 2
