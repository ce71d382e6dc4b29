"""Tasks through the real gateway (issue 18): POST /v1/jobs with "task", a
real PostgreSQL, Redis and kowloon-compute nodes running podman. The
task's inputs reach the program under /kowloon/in, its /kowloon/out files
come back through the outputs routes, its logs through GET
/v1/jobs/{id}/logs (whole, Range, follow) and `event: log`, its exit code
and errors on the job. Skipped, with the reason, only where podman cannot
build or run the test image (scripts/task-image.sh, cached)."""

import io
import json
import os
import threading
import time
import urllib.parse

import numpy as np
import pytest
import requests

import stack as stk
from stack import wait_until, started
from task_engine import IMAGE, containers, image_conf


@pytest.fixture(scope="module")
def conf():
    """The engine's containers.conf, once the test image exists."""
    return image_conf()


class TaskStack(stk.Stack):
    """A stack whose gateway allows the test images and whose nodes run
    tasks with podman (node "tk-cpu" has no engine: kernels only)."""

    def __init__(self, conf, **kw):
        self.conf = conf
        super().__init__(**kw)

    def gateway_env(self, **extra):
        return super().gateway_env(**{"KOWLOON_TASK_IMAGES": "localhost/kowloon-*:*", **extra})

    def start_node(self, name, port=None, backend="auto", extra_args=(), **kw):
        if name == "tk-cpu":
            task = ["--task-engine", "none"]
        else:
            task = ["--task-containers-conf", self.conf,
                    "--task-scratch", os.path.join(self.root, "scratch"),
                    "--task-grace-s", "2"]
        return super().start_node(name, port, backend, (*task, *extra_args), **kw)


@pytest.fixture(scope="module")
def ts(conf):
    yield from started(TaskStack(conf, node_names=("tk-a", "tk-b", "tk-cpu")))


@pytest.fixture(scope="module")
def A(ts):
    return ts.client("A")


@pytest.fixture(scope="module")
def B(ts):
    return ts.client("B")


def py(code, **task):
    return {"image": IMAGE, "command": ["python3", "-c", code], **task}


def submit(client, task, **kw):
    r = client.post_job({"task": task, **kw})
    assert r.status_code == 202, r.text
    return r.json()


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def upload(client, data):
    r = client.post("/v1/blobs", data=data, headers={"Content-Type": "application/octet-stream"})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def logs(client, job_id, **params):
    q = ("?" + urllib.parse.urlencode(params)) if params else ""
    return client.get(f"/v1/jobs/{job_id}/logs{q}")


# ---------------------------------------------------------------- data in and out

def test_task_reads_two_inputs_and_its_npy_output_equals_numpy(ts, A):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    aid = upload(A, a.tobytes())
    code = """
import numpy as np, os
a = np.fromfile('/kowloon/in/a', dtype=np.float32).reshape(64, 32)
b = np.load('/kowloon/in/b.npy')
np.save('/kowloon/out/y.npy', a * 2 + b)
os.makedirs('/kowloon/out/sub', exist_ok=True)
open('/kowloon/out/sub/note.txt', 'w').write('hello')
print('done', a.shape, b.shape, flush=True)
"""
    job = submit(A, py(code, inputs={
        "a": {"dtype": "float32", "shape": [64, 32], "blob": aid},
        "b": {"dtype": "float32", "shape": [64, 32], "format": "npy", "data": b.tolist()}}),
        resources={"gpus": 0})
    assert job["kind"] == "task" and job["kernel"] is None
    assert job["task"] == {"image": IMAGE, "command": ["python3", "-c", code], "env": {},
                           "workdir": "/kowloon/work", "network": "none"}
    assert job["logs"] == f"/v1/jobs/{job['id']}/logs" and job["exit_code"] is None
    assert A.job(job["id"])["task"] == job["task"]  # what GET shows is what the 202 showed
    done = A.wait(job["id"], timeout=120)
    assert done["state"] == "succeeded", json.dumps(done)
    assert done["exit_code"] == 0
    # usage as for kernels: the inputs' bytes in, the outputs' out
    assert done["usage"]["bytes_in"] == a.nbytes + b.nbytes, done["usage"]
    assert done["usage"]["bytes_out"] == len(npy_bytes(a * 2 + b)) + len(b"hello")
    y = A.get(f"/v1/jobs/{job['id']}/outputs/y.npy")
    assert y.status_code == 200, y.text
    assert y.content == npy_bytes(a * 2 + b)
    np.testing.assert_array_equal(np.load(io.BytesIO(y.content)), a * 2 + b)
    # a path name, URL-encoded; and a Range of it
    note = A.get(f"/v1/jobs/{job['id']}/outputs/sub%2Fnote.txt")
    assert note.status_code == 200 and note.content == b"hello", note.text
    part = A.get(f"/v1/jobs/{job['id']}/outputs/sub%2Fnote.txt", headers={"Range": "bytes=1-3"})
    assert part.status_code == 206 and part.content == b"ell"
    res = A.result(job["id"]).json()
    assert res["outputs"]["y.npy"]["bytes"] == len(y.content)
    assert res["outputs"]["sub/note.txt"]["url"] == f"/v1/jobs/{job['id']}/outputs/sub%2Fnote.txt"
    text = logs(A, job["id"])
    assert text.status_code == 200 and "done (64, 32) (64, 32)" in text.text
    # another tenant sees none of it
    B = ts.client("B")
    assert B.get(f"/v1/jobs/{job['id']}/outputs/y.npy").status_code == 404
    assert logs(B, job["id"]).status_code == 404


def test_non_zero_exit_fails_with_the_exit_code_and_the_end_of_stderr(ts, A):
    job = submit(A, py("import sys; print('about to fail', file=sys.stderr); sys.exit(3)"))
    done = A.wait(job["id"], timeout=120)
    assert done["state"] == "failed", done
    assert done["exit_code"] == 3
    assert done["error"]["code"] == "task_failed"
    assert "about to fail" in done["error"]["message"]
    assert done["attempts"] == 1  # a program's own failure is not retried


def test_tasks_go_only_to_nodes_with_an_engine(ts, A):
    jobs = [submit(A, py("print(1)")) for _ in range(4)]
    for j in jobs:
        done = A.wait(j["id"], timeout=120)
        assert done["state"] == "succeeded", json.dumps(done)
        assert done["node"] in ("tk-a", "tk-b"), done


# ---------------------------------------------------------------- logs

def _read_stream(resp, into, stop):
    try:
        for chunk in resp.iter_content(chunk_size=None):
            into.append(chunk)
            if stop.is_set():
                break
    except (requests.RequestException, OSError, AttributeError):
        # closed from the test's thread while this one reads: urllib3 then
        # finds its file gone (AttributeError on None), which is the end
        pass


def test_logs_arrive_live_through_follow_and_sse_and_stay_after_the_end(ts, A):
    """The program prints a line, works for 15 s, prints another: the
    first line reaches the follow stream and both SSE streams while the job
    still runs; the follow stream ends with the job, holding both lines."""
    code = ("import time\n"
            "print('first line', flush=True)\n"
            "time.sleep(15)\n"
            "print('second line', flush=True)\n")
    jid = submit(A, py(code))["id"]
    # SSE on the job's stream and the tenant's
    sse = A.get(f"/v1/jobs/{jid}/events", stream=True, timeout=(5, 120))
    assert sse.status_code == 200
    tenant = A.get("/v1/events", stream=True, timeout=(5, 120))
    follow = A.get(f"/v1/jobs/{jid}/logs?follow=1", stream=True, timeout=(5, 120))
    assert follow.status_code == 200
    got_sse, got_tenant, got_follow, stop = [], [], [], threading.Event()
    threads = [threading.Thread(target=_read_stream, args=(r, b, stop), daemon=True)
               for r, b in ((sse, got_sse), (tenant, got_tenant))]
    for t in threads:
        t.start()
    f_thread = threading.Thread(target=_read_stream, args=(follow, got_follow, threading.Event()),
                                daemon=True)
    f_thread.start()
    wait_until(lambda: b"first line" in b"".join(got_follow), 90, 0.05, "first line followed")
    assert A.job(jid)["state"] == "running"  # live: the job has not ended
    wait_until(lambda: b"event: log" in b"".join(got_sse) and b"first line" in b"".join(got_sse),
               30, 0.05, "event: log on the job's stream")
    wait_until(lambda: b"first line" in b"".join(got_tenant), 30, 0.05, "event: log on /v1/events")
    frame = [f for f in b"".join(got_sse).split(b"\n\n") if b"event: log" in f][0]
    data = json.loads(b"".join(l[5:].strip() for l in frame.split(b"\n") if l.startswith(b"data:")))
    assert data["job_id"] == jid and data["attempt"] == 1 and data["part"] == 0
    assert data["offset"] == 0 and data["text"].startswith("first line")
    assert set(data) == {"job_id", "attempt", "part", "offset", "text"}
    # the follow stream ends when the job does, with everything in it
    f_thread.join(120)
    assert not f_thread.is_alive(), "the follow stream did not end with the job"
    text = b"".join(got_follow).decode()
    assert text == "first line\nsecond line\n", text
    stop.set()
    done = A.wait(jid, timeout=60)
    assert done["state"] == "succeeded", json.dumps(done)
    # after the end: the node's log blob, whole or by Range
    after = logs(A, jid)
    assert after.status_code == 200 and after.text == "first line\nsecond line\n", after.text
    r = logs(A, jid, part=0)
    assert r.text == after.text
    r = A.get(f"/v1/jobs/{jid}/logs", headers={"Range": "bytes=6-9"})
    assert r.status_code == 206 and r.text == "line", r.text
    assert ts.client("B").get(f"/v1/jobs/{jid}/logs").status_code == 404
    for r in (sse, tenant, follow):
        r.close()


def test_a_task_has_what_a_kernel_job_has(ts, A):
    """Idempotency-Key, labels and their filter, Prefer: wait and a webhook
    work for a task as for a kernel: the replayed submit names the first
    job, the held GET answers when the task ends, with its exit code, and
    the receiver gets job.succeeded carrying the task's fields."""
    hook = stk.HookReceiver()
    try:
        tag = os.urandom(6).hex()
        body = {"task": py("print('hello')"), "labels": {"suite": tag}, "webhook": hook.url}
        key = "task-" + tag
        r1 = A.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
        assert r1.status_code == 202, r1.text
        r2 = A.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
        assert r2.status_code in (200, 202), r2.text
        assert r2.json()["id"] == r1.json()["id"]
        assert r2.headers["Idempotent-Replayed"] == "true"
        jid = r1.json()["id"]
        r = A.get(f"/v1/jobs/{jid}", headers={"Prefer": "wait=60"}, timeout=90)
        assert r.status_code == 200, r.text
        job = r.json()
        assert (job["state"], job["kind"], job["exit_code"]) == ("succeeded", "task", 0), job
        assert r.headers["Preference-Applied"] == "wait=60"
        listed = A.list(label=f"suite:{tag}").json()["jobs"]
        assert [j["id"] for j in listed] == [jid]
        wait_until(lambda: any(b.get("type") == "job.succeeded" for b in hook.bodies()), 30, 0.1,
                   "the task's webhook")
        sent = [b for b in hook.bodies() if b.get("type") == "job.succeeded"]
        assert len(sent) == 1
        data = sent[0]["data"]
        assert (data["id"], data["kind"], data["exit_code"]) == (jid, "task", 0)
        assert data["task"]["image"] == IMAGE and data["logs"] == f"/v1/jobs/{jid}/logs"
    finally:
        hook.close()


def test_a_revoked_key_ends_its_follow_stream(ts, A):
    """A followed log outlives no revocation: within the key cache's period
    the stream ends with a line that says why, while the task runs on."""
    key = ts.create_key("A")
    c = ts.client(key=key)
    job = submit(c, py("import time\nprint('up', flush=True)\ntime.sleep(60)\n"))
    follow = c.get(f"/v1/jobs/{job['id']}/logs?follow=1", stream=True, timeout=(5, 120))
    assert follow.status_code == 200
    got, done = [], threading.Event()

    def read():
        _read_stream(follow, got, threading.Event())
        done.set()
    threading.Thread(target=read, daemon=True).start()
    wait_until(lambda: b"up" in b"".join(got), 90, 0.05, "the first line followed")
    assert ts.revoke_key(key).returncode == 0
    t0 = time.monotonic()
    assert done.wait(30), "the follow stream outlived its key's revocation"
    took = time.monotonic() - t0
    text = b"".join(got).decode()
    assert text.endswith("[kowloon] the API key of this stream was revoked: it ends here\n"), text
    assert took < 10, f"the stream outlived the revocation by {took:.1f} s"
    assert A.job(job["id"])["state"] == "running"  # the tenant's other keys see it run on
    assert A.post(f"/v1/jobs/{job['id']}/cancel").status_code in (200, 202)


def test_a_live_log_is_served_with_range_while_the_task_runs(ts, A):
    code = ("import time\n"
            "print('0123456789', flush=True)\n"
            "time.sleep(120)\n")
    jid = submit(A, py(code))["id"]
    wait_until(lambda: logs(A, jid).text == "0123456789\n", 90, 0.1, "live log")
    r = A.get(f"/v1/jobs/{jid}/logs", headers={"Range": "bytes=2-4"})
    assert r.status_code == 206 and r.text == "234"
    assert r.headers["Content-Range"] == "bytes 2-4/11"
    assert A.get(f"/v1/jobs/{jid}/logs", headers={"Range": "bytes=50-"}).status_code == 416
    A.cancel(jid)
    assert A.wait(jid, timeout=60)["state"] == "cancelled"


# ---------------------------------------------------------------- ending a task

def test_cancel_and_timeout_remove_the_container(ts, A):
    sleeper = py("import time\nprint('up', flush=True)\ntime.sleep(600)")
    job = submit(A, sleeper)
    jid = job["id"]
    wait_until(lambda: "up" in logs(A, jid).text, 90, 0.1, "the task started")
    assert containers(ts.conf, run=f"{jid}.1"), "no container for the running task"
    A.cancel(jid)
    done = A.wait(jid, timeout=60)
    assert done["state"] == "cancelled", json.dumps(done)
    wait_until(lambda: not containers(ts.conf, run=f"{jid}.1"), 30, 0.2, "container removed")
    # a program that ignores SIGTERM, past its timeout: killed after the grace
    stubborn = py("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                  "print('up', flush=True)\ntime.sleep(600)")
    job = submit(A, stubborn, timeout_s=3)
    jid = job["id"]
    done = A.wait(jid, timeout=90)
    assert done["state"] == "failed" and done["error"]["code"] == "timeout", json.dumps(done)
    wait_until(lambda: not containers(ts.conf, run=f"{jid}.1"), 30, 0.2, "container removed")


def test_an_image_no_node_has_fails_clearly_once(ts, A):
    job = submit(A, {"image": "localhost/kowloon-absent:1", "command": ["true"]})
    done = A.wait(job["id"], timeout=90)
    assert done["state"] == "failed", json.dumps(done)
    assert done["error"]["code"] == "image_not_found", json.dumps(done)
    assert "kowloon-absent" in done["error"]["message"]
    assert done["attempts"] == 1 and done["exit_code"] is None


def test_output_quota_and_memory_limit_come_from_the_request(ts, A):
    big = py("open('/kowloon/out/big.bin', 'wb').write(b'x' * (3 << 20))")
    job = submit(A, dict(big, output_quota_mb=1))
    done = A.wait(job["id"], timeout=90)
    assert done["state"] == "failed" and done["error"]["code"] == "output_quota", json.dumps(done)
    assert A.get(f"/v1/jobs/{job['id']}/outputs/big.bin").status_code in (404, 409)
    hog = py("b = bytearray(400 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')")
    job = submit(A, hog, resources={"memory_gb": 0.125})
    done = A.wait(job["id"], timeout=90)
    assert done["state"] == "failed" and done["error"]["code"] == "oom", json.dumps(done)


# ---------------------------------------------------------------- inputs are mounted, not copied

@pytest.mark.timeout(240)
def test_one_large_blob_given_to_ten_tasks_is_the_same_file_in_each(ts, A):
    """A 256 MiB input named by 10 tasks: each program sees the blob
    store's own file (same device and inode as on the host), so the bytes
    exist once whatever the number of tasks. 4 s here idle; one loaded CI
    run passed the 60 s default limit in the waits: the limit now covers the
    waits' own, and each step's time is printed (shown on a failure)."""
    t0 = time.monotonic()
    size = 256 << 20
    data = np.random.default_rng(3).integers(0, 255, size, dtype=np.uint8).tobytes()
    bid = upload(A, data)
    print(f"uploaded at {time.monotonic() - t0:.1f} s", flush=True)
    host = os.stat(os.path.join(ts.blob_dir, "sha256", bid[7:9], bid[7:]))
    code = ("import os, json\n"
            "st = os.stat('/kowloon/in/big')\n"
            "f = open('/kowloon/in/big', 'rb'); first = f.read(1); f.seek(-1, 2); last = f.read(1)\n"
            "print(json.dumps({'ino': st.st_ino, 'size': st.st_size, 'first': first[0], 'last': last[0]}))\n")
    jobs = [submit(A, py(code, inputs={"big": {"blob": bid}})) for _ in range(10)]
    seen = []
    for j in jobs:
        done = A.wait(j["id"], timeout=180)
        print(f"{j['id']} {done['state']} at {time.monotonic() - t0:.1f} s: "
              f"node {done.get('node')}, started {done.get('started_at')}, "
              f"finished {done.get('finished_at')}", flush=True)
        assert done["state"] == "succeeded", json.dumps(done)
        seen.append(json.loads(logs(A, j["id"]).text.strip().splitlines()[-1]))
    assert {s["ino"] for s in seen} == {host.st_ino}, (seen[0], host.st_ino)
    assert all(s["size"] == size and s["first"] == data[0] and s["last"] == data[-1] for s in seen)
    # and no copy of it anywhere in the nodes' scratch
    scratch = os.path.join(ts.root, "scratch")
    copies = [os.path.join(d, f) for d, _, fs in os.walk(scratch) for f in fs
              if os.path.getsize(os.path.join(d, f)) >= size]
    assert copies == []


# ---------------------------------------------------------------- a node lost mid-task

def test_a_node_killed_mid_task_loses_its_orphan_on_restart_and_the_job_reruns_once(ts, A):
    code = ("import os, time\n"
            "print('attempt', os.environ['KOWLOON_ATTEMPT'], flush=True)\n"
            "time.sleep(6 if os.environ['KOWLOON_ATTEMPT'] == '1' else 0)\n"
            "open('/kowloon/out/done.txt', 'w').write(os.environ['KOWLOON_ATTEMPT'])\n")
    jid = submit(A, py(code))["id"]
    wait_until(lambda: "attempt 1" in logs(A, jid).text, 90, 0.1, "attempt 1 running")
    follow = A.get(f"/v1/jobs/{jid}/logs?follow=1", stream=True, timeout=(5, 120))
    followed = []
    reader = threading.Thread(target=_read_stream, args=(follow, followed, threading.Event()),
                              daemon=True)
    reader.start()
    wait_until(lambda: b"attempt 1" in b"".join(followed), 30, 0.05, "attempt 1 followed")
    node = A.job(jid)["node"]
    assert containers(ts.conf, run=f"{jid}.1"), "no container for attempt 1"
    ts.kill_node(node)
    done = A.wait(jid, timeout=120)
    assert done["state"] == "succeeded", json.dumps(done)
    assert done["attempts"] == 2, json.dumps(done)
    assert A.get(f"/v1/jobs/{jid}/outputs/done.txt").content == b"2"
    # the follow stream went on with the new attempt's log, and ended with the job
    reader.join(60)
    assert not reader.is_alive()
    assert b"".join(followed).decode() == "attempt 1\n[kowloon] attempt 2\nattempt 2\n"
    follow.close()
    # the killed node's container outlived it; its restart removes it
    ts.start_node(node)
    ts.wait_nodes_up([node], timeout=60)
    wait_until(lambda: not containers(ts.conf, run=f"{jid}.1"), 60, 0.2, "orphan removed")


# ---------------------------------------------------------------- sharing with kernels

def test_fair_share_serves_tasks_and_kernels_of_two_tenants_in_turn(ts):
    """Tenant F floods the two engine nodes with tasks and kernels; tenant G
    submits two afterwards. G's jobs start long before F's backlog is
    done: the scheduler's fair share counts tasks as it counts kernels."""
    F = ts.client(key=ts.create_key("fair-f-" + os.urandom(2).hex()))
    G = ts.client(key=ts.create_key("fair-g-" + os.urandom(2).hex()))
    quick = py("import time; time.sleep(0.5)")
    flood = []
    for i in range(12):
        if i % 2:
            flood.append(submit(F, quick)["id"])
        else:
            flood.append(F.submit("sleep", {"seconds": 0.5})["id"])
    late = [submit(G, quick)["id"], G.submit("sleep", {"seconds": 0.5})["id"]]
    ended = {}
    for c, ids in ((F, flood), (G, late)):
        for i in ids:
            d = c.wait(i, timeout=240)
            assert d["state"] == "succeeded", json.dumps(d)
            ended[i] = d
    starts_f = sorted(stk.ts(ended[i]["started_at"]) for i in flood)
    for i in late:
        # each of G's jobs started before at least a third of F's backlog
        assert stk.ts(ended[i]["started_at"]) < starts_f[-4], (ended[i]["started_at"], starts_f)
    assert any(ended[i]["kind"] == "task" for i in late)


def test_a_gang_part_that_ends_after_the_job_keeps_its_log(ts, A):
    """The job of a gang ends with node_rank 0's report; part 1 prints only
    after that and exits later still. Its live bytes and its log blob come
    after the end, and are kept: `?part=1` shows them."""
    code = ("import os, time\n"
            "if os.environ['NODE_RANK'] == '1':\n"
            "    time.sleep(3)\n"
            "    print('late part', os.environ['NODE_RANK'], flush=True)\n"
            "    time.sleep(1)\n")
    gang = submit(A, py(code), resources={"nodes": 2, "gpus": 0})
    done = A.wait(gang["id"], 120)
    assert done["state"] == "succeeded", json.dumps(done)
    wait_until(lambda: logs(A, gang["id"], part=1).text == "late part 1\n", 30, 0.1,
               "part 1's late log")
    assert logs(A, gang["id"]).text == ""
    # and the job object did not change after its end
    assert A.job(gang["id"]) == done


def test_backfill_fills_a_tasks_reservation_with_a_short_kernel_only(ts, A):
    """On the two engine nodes (the kernel-only node drained): a kernel runs
    on one; a 2-node task gang cannot start and reserves both from that
    kernel's end (started_at + timeout_s); a short kernel backfills the
    free node meanwhile, a long task waits for the gang."""
    cpu = ts.nodes_by_name()["tk-cpu"]["id"]
    assert ts.admin.post(f"/v1/nodes/{cpu}/drain").status_code == 200
    try:
        # first's run leaves room for the submissions below under a loaded
        # CI (a run there took 2 s between first's start and short's
        # submission, past what 2.5 s / timeout 4 left): short must come
        # while first runs and end (its timeout) before first's timeout
        first = A.submit("sleep", {"seconds": 6}, timeout_s=10, resources={"backend": "cpu"})
        first = A.wait(first["id"], 30, states=("running",))
        gang = submit(A, py("import os; print('part', os.environ['NODE_RANK'], flush=True)"),
                      resources={"nodes": 2, "gpus": 0})
        assert A.job(gang["id"])["state"] == "queued"
        short = A.submit("sleep", {"seconds": 0.5}, timeout_s=2, resources={"backend": "cpu"})
        long = submit(A, py("import time; time.sleep(1)"), timeout_s=60)
        done = {k: A.wait(j["id"], 120) for k, j in
                (("first", first), ("gang", gang), ("short", short), ("long", long))}
    finally:
        ts.admin.request("DELETE", f"/v1/nodes/{cpu}/drain")
    for k, j in done.items():
        assert j["state"] == "succeeded", (k, json.dumps(j))
    start = {k: stk.ts(j["started_at"]).timestamp() for k, j in done.items()}
    assert start["short"] < start["gang"], start
    assert start["long"] >= start["gang"], start
    assert start["gang"] <= start["first"] + 10 + 1.0, start
    assert sorted(p["node"] for p in done["gang"]["placement"]) == ["tk-a", "tk-b"]
    # each part's log, by ?part=; the job ends with node_rank 0's report,
    # and another part's log may land a moment later (its own report)
    assert logs(A, gang["id"]).text == "part 0\n"
    wait_until(lambda: logs(A, gang["id"], part=1).text == "part 1\n", 30, 0.1,
               "part 1's log")
