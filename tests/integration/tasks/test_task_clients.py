"""Tasks from the clients (issue 18): the SDK's submit_task, job.logs and
list_images, sync and async, and the `kowloon task run`, `logs`, `images`
commands. The first half needs no stack: a scripted gateway checks the
wire forms (inline and blob inputs and files, npy formats), that a
followed log arrives while the job runs, survives a dropped connection
without gap or repeat (Range), decodes UTF-8 split across chunks, and that
the CLI prints, saves and exits as it says. The second half runs the same
clients against the real stack with podman (gateway side of tasks)."""

import asyncio
import base64
import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

import numpy as np
import pytest

import stack as stk
from stack import REPO
from task_engine import drop_chain

SDK_SRC = os.path.join(REPO, "sdk", "python", "src")
sys.path.insert(0, SDK_SRC)

import kowloon  # noqa: E402

KEY = "kl_test"


class FakeGateway:
    """A scripted gateway: jobs as the test sets them, a log per (job, part)
    that the test appends to, blobs, images. Records every request."""

    def __init__(self):
        self.jobs = {}
        self.logs = {}
        self.outputs = {}
        self.blobs = {}
        self.requests = []
        self.drop_after = None      # cut the first followed stream after N bytes
        self.cond = threading.Condition()
        gw = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _json(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _record(self, body=b""):
                u = urllib.parse.urlsplit(self.path)
                gw.requests.append((self.command, u.path, dict(urllib.parse.parse_qsl(u.query)),
                                    dict(self.headers), body))
                return u.path, dict(urllib.parse.parse_qsl(u.query))

            def do_HEAD(self):
                path, _ = self._record()
                bid = path.rsplit("/", 1)[-1]
                self.send_response(200 if bid in gw.blobs else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                body = self._body()
                path, _ = self._record(body)
                if path == "/v1/blobs":
                    bid = "sha256:" + hashlib.sha256(body).hexdigest()
                    gw.blobs[bid] = body
                    return self._json(201, {"id": bid, "bytes": len(body)})
                if path == "/v1/jobs":
                    req = json.loads(body)
                    jid = f"job{len(gw.jobs) + 1}"
                    t = req["task"]
                    gw.jobs[jid] = {"id": jid, "kind": "task", "state": "queued", "kernel": None,
                                    "task": {k: t.get(k) for k in ("image", "command", "env",
                                                                   "workdir", "network")},
                                    "exit_code": None, "logs": f"/v1/jobs/{jid}/logs"}
                    return self._json(201, gw.jobs[jid])
                self._json(404, {"error": {"code": "not_found", "message": path}})

            def do_GET(self):
                path, q = self._record()
                parts = path.split("/")
                if path == "/v1/images":
                    return self._json(200, {"allowed": ["localhost/kowloon-*"],
                                            "images": [{"image": "localhost/kowloon-python:1",
                                                        "nodes": 2}]})
                if len(parts) >= 4 and parts[2] == "jobs" and parts[3] in gw.jobs:
                    jid = parts[3]
                    if len(parts) == 4:
                        return self._json(200, gw.jobs[jid])
                    if parts[4] == "logs":
                        return self._logs(jid, int(q.get("part", 0)), q.get("follow") == "1")
                    if parts[4] == "result":
                        return self._json(200, {"outputs": {n: {"bytes": len(b)} for n, b in
                                                            gw.outputs.get(jid, {}).items()}})
                    if parts[4] == "outputs":
                        name = urllib.parse.unquote(parts[5])
                        raw = gw.outputs[jid][name]
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(raw)))
                        self.end_headers()
                        return self.wfile.write(raw)
                self._json(404, {"error": {"code": "not_found", "message": "no such job"}})

            def _logs(self, jid, part, follow):
                key = (jid, part)
                off = 0
                rng = self.headers.get("Range")
                if rng:
                    off = int(rng.split("=")[1].rstrip("-"))
                with gw.cond:
                    have = gw.logs.get(key)
                if have is None:
                    return self._json(404, {"error": {"code": "not_found", "message": "no log yet"}})
                if not follow:
                    if rng and off >= len(have):
                        return self._json(416, {"error": {"code": "range", "message": "past"}})
                    raw = have[off:]
                    self.send_response(206 if rng else 200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    return self.wfile.write(raw)
                self.send_response(206 if rng else 200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent, drop = off, gw.drop_after
                gw.drop_after = None
                while True:
                    with gw.cond:
                        gw.cond.wait_for(lambda: len(gw.logs[key]) > sent
                                         or gw.jobs[jid]["state"] in kowloon._wire.TERMINAL, 10)
                        data, done = gw.logs[key][sent:], gw.jobs[jid]["state"] in kowloon._wire.TERMINAL
                    if drop is not None and sent - off + len(data) > drop:
                        data = data[:drop - (sent - off)]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        self.close_connection = True
                        return          # no last chunk: a dropped connection
                    if data:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        sent += len(data)
                    if done and not data:
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                        return

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.srv.server_port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def add_job(self, jid="j1", state="running", **extra):
        self.jobs[jid] = {"id": jid, "kind": "task", "state": state, "exit_code": None,
                          "task": {"image": "img", "command": ["x"]}, **extra}
        return jid

    def append(self, jid, data, part=0):
        with self.cond:
            self.logs[(jid, part)] = self.logs.get((jid, part), b"") + data
            self.cond.notify_all()

    def end(self, jid, state="succeeded", exit_code=0):
        with self.cond:
            self.jobs[jid].update(state=state, exit_code=exit_code)
            self.cond.notify_all()

    def posted_jobs(self):
        return [json.loads(r[4]) for r in self.requests if r[0] == "POST" and r[1] == "/v1/jobs"]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def fake():
    gw = FakeGateway()
    yield gw
    gw.close()


def test_submit_task_sends_inputs_files_and_envelope_in_their_wire_forms(fake):
    small = np.arange(6, dtype=np.int16).reshape(2, 3)
    big = np.ones(40000, dtype=np.float32)            # 160 KB: a blob
    script = "import numpy\nprint(1)\n"
    blob_file = bytes(range(256)) * 400                # 100 KB: a blob
    with kowloon.Client(fake.url, KEY) as c:
        job = c.submit_task("localhost/kowloon-python:1", "python3 main.py --lr '0.1 x'",
                            env={"LR": 0.1}, files={"main.py": script, "cfg.bin": b"\x00\x01",
                                                    "data/big.bin": blob_file},
                            inputs={"a": small, "big": big, "raw": b"hello", "n": small},
                            input_format={"n": "npy"}, resources={"gpus": 1, "nodes": 2},
                            timeout_s=60, labels={"team": "x"}, network="none")
    assert job.kind == "task" and job.state == "queued" and job.exit_code is None
    [body] = fake.posted_jobs()
    t = body["task"]
    assert t["image"] == "localhost/kowloon-python:1"
    assert t["command"] == ["python3", "main.py", "--lr", "0.1 x"]
    assert t["env"] == {"LR": "0.1"} and t["network"] == "none"
    assert t["files"]["main.py"] == {"text": script}
    assert t["files"]["cfg.bin"] == {"b64": "AAE="}
    assert t["files"]["data/big.bin"] == {"blob": "sha256:" + hashlib.sha256(blob_file).hexdigest()}
    assert t["inputs"]["a"] == {"dtype": "int16", "shape": [2, 3], "format": "raw",
                                "b64": base64.b64encode(small.tobytes()).decode()}
    assert t["inputs"]["n"]["format"] == "npy"
    assert t["inputs"]["raw"] == {"format": "raw", "b64": base64.b64encode(b"hello").decode()}
    bid = "sha256:" + hashlib.sha256(big.tobytes()).hexdigest()
    assert t["inputs"]["big"] == {"dtype": "float32", "shape": [40000], "format": "raw", "blob": bid}
    assert fake.blobs[bid] == big.tobytes()           # uploaded before the submit
    assert body["resources"] == {"gpus": 1, "nodes": 2} and body["timeout_s"] == 60
    assert body["labels"] == {"team": "x"} and "kernel" not in body
    post = [r for r in fake.requests if r[1] == "/v1/jobs"][0]
    assert post[3].get("Idempotency-Key")


def test_bad_task_arguments_are_refused_before_anything_is_sent(fake):
    with kowloon.Client(fake.url, KEY) as c:
        with pytest.raises(kowloon.KowloonError, match="dtype complex64"):
            c.submit_task("img", ["x"], inputs={"z": np.zeros(2, np.complex64)})
        with pytest.raises(kowloon.KowloonError, match="command is empty"):
            c.submit_task("img", [])
        with pytest.raises(kowloon.KowloonError, match="input_format"):
            c.submit_task("img", ["x"], inputs={"a": np.zeros(2)}, input_format="csv")
        with pytest.raises(kowloon.KowloonError, match="file f"):
            c.submit_task("img", ["x"], files={"f": 3})
    assert fake.requests == []


def test_logs_follow_arrives_live_and_resumes_a_dropped_stream_without_gap_or_repeat(fake):
    jid = fake.add_job()
    fake.append(jid, "première ligne\n".encode())
    fake.drop_after = 5            # cut inside the first line ("premi" + half of "è" later)
    got = []
    first = threading.Event()
    with kowloon.Client(fake.url, KEY) as c:
        job = c.job(jid)

        def read():
            for text in job.logs(follow=True):
                got.append(text)
                first.set()
        th = threading.Thread(target=read)
        th.start()
        assert first.wait(10), "the first text did not arrive while the job ran"
        assert th.is_alive()
        wide = "héllo €\n".encode()
        fake.append(jid, wide[:2])         # a UTF-8 character split across chunks
        fake.append(jid, wide[2:] + b"last\n")
        fake.end(jid)
        th.join(10)
        assert not th.is_alive()
    assert "".join(got) == "première ligne\nhéllo €\nlast\n"
    ranges = [r[3].get("Range") for r in fake.requests if r[1].endswith("/logs")]
    assert ranges[0] is None and ranges[1] == "bytes=5-"
    assert job.done and job.exit_code == 0


def test_logs_without_follow_is_the_text_so_far_and_empty_before_any(fake):
    jid = fake.add_job(state="queued")
    with kowloon.Client(fake.url, KEY) as c:
        job = c.job(jid)
        assert job.logs() == ""
        fake.append(jid, b"a\n", part=1)
        fake.append(jid, b"zero\n")
        assert job.logs() == "zero\n"
        assert job.logs(part=1) == "a\n"
        with pytest.raises(kowloon.NotFoundError):
            c.job("nope")


def test_async_client_submits_and_follows_logs(fake):
    jid = fake.add_job()

    async def main():
        async with kowloon.AsyncClient(fake.url, KEY) as c:
            j = await c.submit_task("img", ["python3", "-c", "print(1)"], files={"a.txt": "x"})
            assert j.kind == "task"
            job = await c.job(jid)
            fake.append(jid, b"one\n")
            chunks = []
            async for text in job.logs(follow=True):
                chunks.append(text)
                if "".join(chunks) == "one\n":
                    fake.append(jid, b"two\n")
                    fake.end(jid, "failed", 3)
            assert "".join(chunks) == "one\ntwo\n"
            assert await job.logs() == "one\ntwo\n"
            assert job.exit_code == 3 and job.state == "failed"
            imgs = await c.list_images()
            assert imgs["allowed"] == ["localhost/kowloon-*"]
    asyncio.run(main())
    assert fake.posted_jobs()[0]["task"]["files"] == {"a.txt": {"text": "x"}}


def test_list_images(fake):
    with kowloon.Client(fake.url, KEY) as c:
        assert c.list_images()["images"] == [{"image": "localhost/kowloon-python:1", "nodes": 2}]


def test_task_output_names_are_paths_sent_url_encoded(fake):
    jid = fake.add_job(state="succeeded")
    fake.outputs[jid] = {"sub/y.bin": b"\x01\x02", "z.txt": b"z"}
    with kowloon.Client(fake.url, KEY) as c:
        job = c.job(jid)
        assert job.result() == {"sub/y.bin": b"\x01\x02", "z.txt": b"z"}
        assert job.output("sub/y.bin") == b"\x01\x02"
    paths = {r[1] for r in fake.requests if "/outputs/" in r[1]}
    assert paths == {f"/v1/jobs/{jid}/outputs/sub%2Fy.bin", f"/v1/jobs/{jid}/outputs/z.txt"}


# ------------------------------------------------------------------ the CLI

def cli(url, *args, timeout=60, input=None):
    env = dict(os.environ, KOWLOON_URL=url, KOWLOON_API_KEY=KEY, PYTHONPATH=SDK_SRC)
    return subprocess.run([sys.executable, "-m", "kowloon", *args], env=env, text=True,
                          capture_output=True, timeout=timeout, input=input)


def test_cli_task_run_follows_saves_outputs_and_exits_by_the_jobs_end(fake, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float64))
    (tmp_path / "blob.bin").write_bytes(b"\xff" * 10)

    def play():  # the job the CLI submits: job1; it logs, writes an output, ends
        assert _wait(lambda: "job1" in fake.jobs)
        fake.jobs["job1"]["state"] = "running"
        fake.append("job1", b"epoch 1\n")
        fake.outputs["job1"] = {"m/w.bin": b"WW"}
        fake.append("job1", b"done\n")
        fake.end("job1")
    th = threading.Thread(target=play)
    th.start()
    out = tmp_path / "out"
    p = cli(fake.url, "task", "run", "--image", "localhost/kowloon-python:1",
            "--file", f"{tmp_path}/train.py:src/train.py", "--file", f"{tmp_path}/blob.bin",
            "--input", f"x={tmp_path}/x.npy", "--input", f"b={tmp_path}/blob.bin",
            "--env", "A=1", "--gpus", "1", "--nodes", "2", "--memory-gb", "2", "--follow",
            "--out", str(out), "--", "python3", "src/train.py", "--flag")
    th.join()
    assert p.returncode == 0, p.stderr
    assert p.stdout == "epoch 1\ndone\n"
    assert "job job1 succeeded, exit code 0" in p.stderr
    assert (out / "m" / "w.bin").read_bytes() == b"WW"
    body = fake.posted_jobs()[0]
    assert body["task"]["command"] == ["python3", "src/train.py", "--flag"]
    assert set(body["task"]["files"]) == {"src/train.py", "blob.bin"}
    assert body["task"]["inputs"]["x"]["format"] == "npy"
    assert body["task"]["inputs"]["x"]["dtype"] == "float64"
    assert body["task"]["inputs"]["b"] == {"format": "raw", "b64": base64.b64encode(b"\xff" * 10).decode()}
    assert body["resources"] == {"nodes": 2, "gpus": 1, "memory_gb": 2.0}
    assert body["task"]["env"] == {"A": "1"}


def test_cli_task_run_failed_job_prints_the_log_and_exits_1(fake):
    def play():
        assert _wait(lambda: "job1" in fake.jobs)
        fake.append("job1", b"Traceback: boom\n")
        fake.jobs["job1"]["error"] = {"code": "task_failed", "message": "exited with code 3"}
        fake.end("job1", "failed", 3)
    th = threading.Thread(target=play)
    th.start()
    p = cli(fake.url, "task", "run", "--image", "img", "--", "false")
    th.join()
    assert p.returncode == 1
    assert p.stdout == "Traceback: boom\n"
    assert "failed, exit code 3: task_failed" in p.stderr


def test_cli_usage_errors_exit_2_and_send_nothing(fake, tmp_path):
    assert cli(fake.url, "task", "run", "--image", "img").returncode == 2
    assert cli(fake.url, "task", "run", "--image", "img", "--file", "/no/such", "--", "x").returncode == 2
    assert cli(fake.url, "task", "run", "--image", "img", "--input", "novalue", "--", "x").returncode == 2
    assert cli(fake.url, "task", "run", "--", "x").returncode == 2      # --image missing
    assert fake.posted_jobs() == []


def test_cli_logs_and_images(fake):
    jid = fake.add_job(state="succeeded")
    fake.append(jid, b"part zero\n")
    fake.append(jid, b"part one\n", part=1)
    p = cli(fake.url, "logs", jid)
    assert p.returncode == 0 and p.stdout == "part zero\n"
    p = cli(fake.url, "logs", "-f", jid, "--part", "1")
    assert p.returncode == 0 and p.stdout == "part one\n"
    p = cli(fake.url, "images")
    assert p.returncode == 0
    assert "localhost/kowloon-*" in p.stdout and "localhost/kowloon-python:1  2" in p.stdout
    p = cli(fake.url, "--json", "images")
    assert json.loads(p.stdout)["images"][0]["nodes"] == 2
    assert cli(fake.url, "logs", "nope").returncode == 3


def _wait(pred, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


# ------------------------------------------------------------------ the real stack

IMAGE = "localhost/kowloon-python:1"


def task_image(variant="python"):
    """The containers.conf once the task image exists (scripts/task-image.sh,
    cached); skips without podman."""
    import shutil
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (scripts/install-deps.sh installs it)")
    p = subprocess.run([os.path.join(REPO, "scripts", "task-image.sh"), variant],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        pytest.skip(f"cannot build the {variant} task image: {p.stderr[-500:]}")
    return p.stdout.strip().splitlines()[-1]


class TaskStack(stk.Stack):
    """A stack whose nodes run tasks with podman and whose gateway allows
    the local images (localhost/kowloon-*) to every tenant."""

    def __init__(self, conf, node_names=("tc-1", "tc-2"), **kw):
        super().__init__(node_names=node_names, **kw)
        self.conf = conf

    def gateway_env(self, **extra):
        env = super().gateway_env(**extra)
        env.setdefault("KOWLOON_TASK_IMAGES", "localhost/kowloon-*")
        return env

    def start_node(self, name, port=None, backend="cpu", extra_args=(), **kw):
        task = ("--task-containers-conf", self.conf,
                "--task-scratch", os.path.join(self.root, "scratch"), "--task-grace-s", "2")
        return super().start_node(name, port, backend, (*task, *extra_args), **kw)

    def close(self):
        super().close()
        if os.geteuid() == 0:       # the chains of nodes killed on purpose
            for name in self.node_names:
                drop_chain(name, self.cluster_base)

    def containers(self, **labels):
        args = ["podman", "ps", "-a", "--format", "{{.Names}}",
                "--filter", f"label=kowloon.gateway={self.cluster_base}"]
        for k, v in labels.items():
            args += ["--filter", f"label=kowloon.{k}={v}"]
        out = subprocess.run(args, capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, CONTAINERS_CONF=self.conf))
        return [ln for ln in out.stdout.split() if ln]

    def remove_containers(self):
        for name in self.containers():
            subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=60,
                           env=dict(os.environ, CONTAINERS_CONF=self.conf))


def serve_task_stack():
    """A started TaskStack, yielded once, then stopped and its containers
    and files removed (the files kept with KOWLOON_TEST_KEEP): the body of
    a module fixture (here and test_task_ui.py)."""
    s = TaskStack(task_image()).start()
    yield s
    s.close()
    s.remove_containers()
    if not os.environ.get("KOWLOON_TEST_KEEP"):
        s.remove()


@pytest.fixture(scope="module")
def tstack():
    yield from serve_task_stack()


@pytest.fixture
def tc(tstack):
    with kowloon.Client(tstack.base, tstack.keys["A"]) as c:
        yield c


SCRIPT = """
import os, sys, time, numpy as np
a = np.fromfile(os.environ["KOWLOON_INPUT_A"], dtype=np.float32).reshape(256, 256)
b = np.load("/kowloon/in/b.npy")
print("shapes", a.shape, b.shape, flush=True)
print("waiting", flush=True)
while not os.path.exists("/kowloon/work/go") and time.time() < float(os.environ["DEADLINE"]):
    time.sleep(0.05)
os.makedirs(os.environ["KOWLOON_OUT"] + "/sub", exist_ok=True)
np.save(os.environ["KOWLOON_OUT"] + "/sub/y.npy", a @ b)
print("done", file=sys.stderr)
"""


def test_sdk_runs_a_task_end_to_end_logs_live_and_outputs_equal_numpy(tstack, tc):
    rng = np.random.default_rng(18)
    a = rng.random((256, 256), dtype=np.float32)          # 256 KiB: a blob, mounted
    b = rng.random((256, 4)).astype(np.float32)           # inline, as .npy
    # the program waits until this file appears in its work dir: the test
    # makes it appear only after it has read the log live
    job = tc.submit_task(IMAGE, ["python3", "main.py"], files={"main.py": SCRIPT},
                         inputs={"a": a, "b": b}, input_format={"b": "npy"},
                         env={"DEADLINE": str(time.time() + 60)}, timeout_s=120)
    assert job.kind == "task" and job.task["image"] == IMAGE
    seen = ""
    it = job.logs(follow=True)
    for text in it:
        seen += text
        if "waiting" in seen:
            break
    assert "shapes (256, 256) (256, 4)" in seen
    assert not job.refresh().done                          # live: the program still runs
    scratch = [os.path.join(dp, "work") for dp, dirs, _ in os.walk(os.path.join(tstack.root, "scratch"))
               if "work" in dirs and job.id in dp]
    assert scratch, "the task's work dir was not found"
    open(os.path.join(scratch[0], "go"), "w").close()
    rest = "".join(job.logs(follow=True))                  # from the start, to the end
    assert rest.startswith(seen) and "done" in rest
    out = job.result(timeout=60)
    assert job.exit_code == 0 and job.state == "succeeded"
    y = np.load(io.BytesIO(out["sub/y.npy"]))
    np.testing.assert_allclose(y, a @ b, rtol=1e-5)
    assert job.logs() == rest                              # kept after the end


def test_another_tenant_gets_404_for_the_job_and_its_log(tstack, tc):
    job = tc.submit_task(IMAGE, "python3 -c 'print(42)'")
    job.wait(60)
    assert job.logs() == "42\n"
    with kowloon.Client(tstack.base, tstack.keys["B"]) as other:
        with pytest.raises(kowloon.NotFoundError):
            other.job(job.id)
        with pytest.raises(kowloon.NotFoundError):
            kowloon.Job(other, {"id": job.id}).logs()


def test_an_image_outside_the_allow_list_is_a_422_naming_task_image(tc):
    with pytest.raises(kowloon.ValidationError) as e:
        tc.submit_task("docker.io/library/alpine:3", ["true"])
    assert e.value.field == "task.image"


def test_list_images_shows_the_patterns_and_what_the_nodes_have(tstack, tc):
    body = tc.list_images()
    assert "localhost/kowloon-*" in body["allowed"]
    have = {i["image"]: i["nodes"] for i in body["images"]}
    assert have.get(IMAGE) == 2, body


def cli_stack(tstack, *args, key="A", timeout=120):
    env = dict(os.environ, KOWLOON_URL=tstack.base, KOWLOON_API_KEY=tstack.keys[key],
               PYTHONPATH=SDK_SRC)
    return subprocess.run([sys.executable, "-m", "kowloon", *args], env=env, text=True,
                          capture_output=True, timeout=timeout)


def test_cli_task_run_prints_the_programs_output_and_exits_by_its_end(tstack, tmp_path):
    p = cli_stack(tstack, "task", "run", "--image", IMAGE, "--", "python3", "-c", "print(1)")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "1\n"
    assert "succeeded, exit code 0" in p.stderr
    (tmp_path / "fail.py").write_text("import sys\nprint('about to fail', flush=True)\nsys.exit(3)\n")
    p = cli_stack(tstack, "task", "run", "--image", IMAGE, "--file", f"{tmp_path}/fail.py",
                  "--follow", "--", "python3", "fail.py")
    assert p.returncode == 1
    assert p.stdout == "about to fail\n"
    assert "exit code 3" in p.stderr and "task_failed" in p.stderr
    jid = p.stderr.split()[1]
    p = cli_stack(tstack, "logs", jid)
    assert p.returncode == 0 and p.stdout == "about to fail\n"


@pytest.mark.timeout(300)
def test_make_run_lets_a_newcomer_run_a_task_at_once(tmp_path):
    """scripts/run.sh on ports of its own, then the README's first command."""
    task_image()
    state = tmp_path / "run"
    ports = {k: str(stk.free_port()) for k in ("PG", "REDIS", "GATEWAY", "CLUSTER", "NODE1", "NODE2")}
    env = dict(os.environ, KOWLOON_RUN_STATE=str(state),
               **{f"KOWLOON_RUN_{k}_PORT": v for k, v in ports.items()})
    os.chmod(tmp_path, 0o755)
    try:
        r = subprocess.run([os.path.join(REPO, "scripts", "run.sh")], env=env, text=True,
                           capture_output=True, timeout=240)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "python3 -m kowloon task run --image localhost/kowloon-python:1" in r.stdout
        key = (state / "dev-key").read_text().strip()
        p = subprocess.run([sys.executable, "-m", "kowloon", "task", "run", "--image", IMAGE,
                            "--", "python3", "-c", "print(1)"], text=True, capture_output=True,
                           timeout=120, env=dict(os.environ, PYTHONPATH=SDK_SRC,
                                                 KOWLOON_URL=f"http://127.0.0.1:{ports['GATEWAY']}",
                                                 KOWLOON_API_KEY=key))
        assert p.returncode == 0, p.stderr
        assert p.stdout == "1\n"
    finally:
        subprocess.run([os.path.join(REPO, "scripts", "stop.sh")], env=env, capture_output=True,
                       timeout=120)


def test_a_tasks_progress_lines_become_its_progress_and_progress_events(tc):
    code = ("import json, os, time\n"
            "p = open(os.environ['KOWLOON_PROGRESS'], 'a', buffering=1)\n"
            "for e in range(1, 4):\n"
            "    p.write(json.dumps({'epoch': e, 'loss': 1 / e}) + '\\n')\n"
            "    time.sleep(0.4)   # a training step; the node reads the file every 200 ms\n")
    job = tc.submit_task(IMAGE, ["python3", "-c", code])
    seen = [ev.progress for ev in job.events() if ev.event == "progress"]
    assert job.state == "succeeded", job.data
    assert seen and seen[-1] == {"epoch": 3, "loss": 1 / 3}, seen
    assert [p["epoch"] for p in seen] == sorted(p["epoch"] for p in seen)
    assert job.refresh().progress == {"epoch": 3, "loss": 1 / 3}
