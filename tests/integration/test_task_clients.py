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
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

import numpy as np
import pytest

from stack import REPO

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
