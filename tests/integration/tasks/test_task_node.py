"""The node side of tasks (issue 18, docs/tasks_contract.md §2-§7), against a
real kowloon-compute and a real podman, with tests/integration/fakegateway.py
in the gateway's place (the real gateway takes no tasks yet): the node takes
task runs from its lease poll exactly as the contract writes them and
reports them through its results, live logs, progress and blob pushes.
Skipped, with the reason, where podman is missing or cannot build the
test image (scripts/task-image.sh, cached: ~40 s the first time)."""

import base64
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest
import requests

import stack as stk
from fakegateway import FakeGateway
from task_engine import IMAGE, containers, engine_env, image_conf, node_tag as tag

TOKEN = "task-node-test-token"


@pytest.fixture(scope="module")
def conf():
    """The engine's containers.conf, once the test image exists."""
    return image_conf()


class Node:
    """A kowloon-compute process talking to a FakeGateway."""

    def __init__(self, gw, conf, root, name=None, extra=(), slots=4, shared=True):
        self.gw, self.conf, self.root = gw, conf, root
        self.name = name or "tn-" + os.urandom(3).hex()
        self.port = stk.free_port()
        self.log = os.path.join(root, f"{self.name}.log")
        self.argv = [stk.COMPUTE_BIN, "--name", self.name, "--listen", f"127.0.0.1:{self.port}",
                     "--gateway", gw.url, "--slots", str(slots), "--heartbeat-s", "1",
                     "--backend", "cpu", "--task-containers-conf", conf,
                     "--task-scratch", os.path.join(root, "scratch"), "--task-grace-s", "2",
                     "--blob-dir", "auto" if shared else "none", "--dist-timeout-s", "20",
                     "--state-dir", os.path.join(root, "state", self.name),
                     *extra]
        self.proc = None

    def start(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KOWLOON_")}
        env.update({"KOWLOON_CLUSTER_TOKEN": self.gw.token, "KOWLOON_LOG_LEVEL": "debug"})
        self.proc = stk.Proc(self.name, self.argv, env, self.log).start()
        self.gw.wait_registered(self.name)
        return self

    def kill9(self):
        """SIGKILL to the node alone: its engine processes live on, as after
        an OOM kill or a crash of the node."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.popen.wait(timeout=10)

    def stop(self):
        if self.proc:
            self.proc.stop()

    def info(self):
        return requests.get(f"http://127.0.0.1:{self.port}/v1/info", timeout=5,
                            headers={"Authorization": f"Bearer {self.gw.token}"}).json()

    def post_run(self, body):
        return requests.post(f"http://127.0.0.1:{self.port}/v1/runs", json=body, timeout=10,
                             headers={"Authorization": f"Bearer {self.gw.token}"})


@pytest.fixture(scope="module")
def root():
    d = tempfile.mkdtemp(prefix="kowloon-tasknode-")
    stk.Stack.log_dirs.add(d)      # the nodes' logs, printed when a test fails
    yield d
    stk.Stack.log_dirs.discard(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def gw(root):
    g = FakeGateway(blob_dir=os.path.join(root, "blobs"), token=TOKEN)
    yield g
    g.close()


@pytest.fixture(scope="module")
def node(gw, conf, root):
    n = Node(gw, conf, root).start()
    yield n
    n.stop()
    if os.environ.get("KOWLOON_TEST_KEEP") is None:
        pass


_seq = [0]


def job(prefix="t"):
    _seq[0] += 1
    return f"{prefix}{_seq[0]}-{os.urandom(2).hex()}"


def run_task(gw, node, task, timeout_s=60, wait=60, **extra):
    jid = job()
    body = {"job_id": jid, "attempt": 1, "timeout_s": timeout_s, "gpus": 0, "task": task, **extra}
    gw.submit(node.name, body)
    return jid, gw.wait_result(f"{jid}.1", wait)


def py(code, **task):
    return {"image": IMAGE, "command": ["python3", "-c", code], **task}


def log_text(gw, res):
    assert res["logs"] and res["logs"]["blob"].startswith("sha256:"), res
    return gw.blob(res["logs"]["blob"]).decode("utf-8", "replace")


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


# ---------------------------------------------------------------- data in and out

def test_task_reads_two_inputs_and_writes_an_npy_output_equal_to_numpy(gw, node):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    aid = gw.put_blob(a.tobytes())
    code = """
import json, numpy as np
m = json.load(open('/kowloon/in/manifest.json'))
a = np.fromfile(m['a']['path'], dtype=m['a']['dtype']).reshape(m['a']['shape'])
b = np.load('/kowloon/in/b.npy')
# elementwise IEEE arithmetic: the same bits whatever BLAS either numpy has
np.save('/kowloon/out/y.npy', a * 2 + b)
print('done', a.shape, b.shape)
"""
    task = py(code, inputs={
        "a": {"dtype": "float32", "shape": [64, 32], "blob": aid, "size": a.nbytes},
        "b": {"dtype": "float32", "shape": [64, 32], "format": "npy",
              "b64": base64.b64encode(b.tobytes()).decode()}})
    _, res = run_task(gw, node, task)
    assert res["state"] == "succeeded", json.dumps(res)
    assert res["exit_code"] == 0
    y = res["outputs"]["y.npy"]
    assert y["npy"] == {"dtype": "float32", "shape": [64, 32]}
    got = gw.blob(y["blob"])
    assert y["bytes"] == len(got)
    assert got == npy_bytes(a * 2 + b)
    assert "done (64, 32) (64, 32)" in log_text(gw, res)


def test_program_sees_its_environment_files_and_no_secret(gw, node):
    code = """
import os, json
print(json.dumps({"env": dict(os.environ), "uid": os.getuid(), "gid": os.getgid(),
                  "cwd": os.getcwd(), "cfg": open('conf/app.cfg').read(),
                  "ro": os.access('/', os.W_OK), "work": os.access('/kowloon/work', os.W_OK)}))
"""
    task = py(code, env={"LR": "0.01"}, files={"conf/app.cfg": {"b64": base64.b64encode(b"k=v").decode()}},
              inputs={"x": {"dtype": "int32", "shape": [2], "b64": base64.b64encode(b"\1\0\0\0\2\0\0\0").decode()},
                      "w-1.bin": {"b64": base64.b64encode(b"raw").decode()}})
    _, res = run_task(gw, node, task)
    assert res["state"] == "succeeded", json.dumps(res)
    seen = json.loads(log_text(gw, res).strip().splitlines()[0])
    env = seen["env"]
    assert env["LR"] == "0.01"
    assert env["KOWLOON_INPUT_X"] == "/kowloon/in/x"
    assert env["KOWLOON_INPUT_W_1_BIN"] == "/kowloon/in/w-1.bin"
    assert env["HOME"] == "/kowloon/work"
    assert env["KOWLOON_PROGRESS"] == "/kowloon/meta/progress.jsonl"
    assert env["KOWLOON_OUT"] == "/kowloon/out"
    assert env["NNODES"] == "1" and env["NODE_RANK"] == "0" and env["WORLD_SIZE"] == "1"
    assert "MASTER_ADDR" not in env
    assert not any(TOKEN in v for v in env.values()), "the cluster token leaked in"
    assert not any(k.startswith("KOWLOON_CLUSTER") for k in env)
    assert seen["uid"] == 65534 and seen["gid"] == 65534
    assert seen["cwd"] == "/kowloon/work" and seen["cfg"] == "k=v"
    assert seen["ro"] is False and seen["work"] is True


def test_a_big_input_reused_by_ten_tasks_is_the_store_file_itself(gw, node, root):
    data = np.arange(64 << 20, dtype=np.float32)   # 256 MiB
    bid = gw.put_blob(data.tobytes())
    host = os.stat(gw.blob_path(bid))
    code = """
import os, numpy as np
st = os.stat('/kowloon/in/x')
x = np.memmap('/kowloon/in/x', dtype=np.float32, mode='r')
print(st.st_ino, st.st_size, float(x[-1]))
"""
    task = py(code, inputs={"x": {"dtype": "float32", "shape": [64 << 20], "blob": bid,
                                  "size": data.nbytes}})
    jids = []
    for _ in range(10):
        jid = job()
        jids.append(jid)
        gw.submit(node.name, {"job_id": jid, "attempt": 1, "timeout_s": 120, "task": task})
    scratch = os.path.join(node.root, "scratch")
    biggest = 0
    for jid in jids:
        res = gw.wait_result(f"{jid}.1", 120)
        assert res["state"] == "succeeded", json.dumps(res)
        ino, size, last = log_text(gw, res).split()[:3]
        # the same inode as the store's file: a mount, never a copy
        assert int(ino) == host.st_ino and int(size) == host.st_size
        assert float(last) == float(data[-1])
        for dp, _, fs in os.walk(scratch):
            for f in fs:
                try:
                    biggest = max(biggest, os.lstat(os.path.join(dp, f)).st_size)
                except OSError:
                    pass
    assert biggest < 1 << 20, f"a file of {biggest} bytes in the scratch: an input was copied"


def test_without_a_shared_store_an_input_is_fetched_once_and_mounted(conf, root):
    g = FakeGateway(token=TOKEN)   # no blob directory: everything over HTTP
    n = Node(g, conf, root, shared=False).start()
    try:
        data = os.urandom(3 << 20)
        bid = g.put_blob(data)
        code = "import os, hashlib; print(os.stat('/kowloon/in/x').st_ino, hashlib.sha256(open('/kowloon/in/x','rb').read()).hexdigest())"
        inodes = set()
        for _ in range(3):
            _, res = run_task(g, n, py(code, inputs={"x": {"blob": bid, "size": len(data)}}))
            assert res["state"] == "succeeded", json.dumps(res)
            ino, digest = log_text(g, res).split()[:2]
            assert digest == hashlib.sha256(data).hexdigest()
            inodes.add(ino)
        assert len(inodes) == 1, "each run should mount the node's one cached file"
        assert g.blob_gets == 1, f"fetched {g.blob_gets} times"
        # outputs go back over HTTP too
        _, res = run_task(g, n, py("open('/kowloon/out/o.bin','wb').write(b'xyz')"))
        assert g.blob(res["outputs"]["o.bin"]["blob"]) == b"xyz"
    finally:
        n.stop()
        g.close()


# ---------------------------------------------------------------- logs and progress

def test_log_flood_is_capped_and_says_what_was_dropped(gw, node):
    code = "import sys\nfor i in range(200000): sys.stdout.write('x' * 99 + '\\n')\nprint('end')"
    _, res = run_task(gw, node, py(code, limits={"log_bytes": 65536}))
    assert res["state"] == "succeeded", json.dumps(res)
    logs = res["logs"]
    assert logs["dropped"] == 200000 * 100 + 4 - 65536
    text = log_text(gw, res)
    assert len(text) < 65536 + 1024
    assert f"dropped {logs['dropped']} bytes of output past the cap of 65536 bytes" in text


def test_logs_and_progress_arrive_while_the_task_runs(gw, node):
    code = """
import json, os, sys, time
for epoch in range(3):
    print('epoch', epoch, flush=True)
    with open(os.environ['KOWLOON_PROGRESS'], 'a') as f:
        f.write(json.dumps({'epoch': epoch, 'loss': 1.0 / (epoch + 1)}) + '\\n')
    time.sleep(0.6)
print('not json', file=open(os.environ['KOWLOON_PROGRESS'], 'a'))
time.sleep(0.6)
"""
    jid = job()
    gw.submit(node.name, {"job_id": jid, "attempt": 1, "timeout_s": 60, "task": py(code)})
    live = gw.wait_live_log((jid, 1, 0), lambda b: b"epoch 1" in b, 20)
    assert jid + ".1" not in gw.results, "the log should arrive before the run ends"
    assert live.startswith(b"epoch 0\n")
    gw.wait_progress(jid, lambda p: p.get("epoch") == 2 and p.get("loss") == pytest.approx(1 / 3))
    res = gw.wait_result(f"{jid}.1")
    assert res["state"] == "succeeded"
    assert res["progress"] == {"epoch": 2, "loss": pytest.approx(1 / 3)}
    text = log_text(gw, res)
    assert "1 progress line(s) were not JSON objects" in text
    # the live copy ends up equal to the stored log
    gw.wait_live_log((jid, 1, 0), lambda b: b == text.encode(), 20)


# ---------------------------------------------------------------- failures

def test_nonzero_exit_fails_with_the_exit_code_and_the_end_of_stderr(gw, node):
    code = "import sys\nprint('some output')\nprint('first problem', file=sys.stderr)\nprint('Traceback: boom', file=sys.stderr)\nsys.exit(3)"
    _, res = run_task(gw, node, py(code))
    assert res["state"] == "failed"
    assert res["exit_code"] == 3
    assert res["error"]["code"] == "task_failed"
    assert "exited with code 3" in res["error"]["message"]
    assert "Traceback: boom" in res["error"]["message"]
    assert "some output" not in res["error"]["message"]
    assert "outputs" not in res


def test_memory_limit_exceeded_fails_oom(gw, node):
    code = "x = bytearray(512 << 20)\nprint('survived', len(x))"
    _, res = run_task(gw, node, py(code, limits={"memory_bytes": 64 << 20}))
    assert res["state"] == "failed", res
    assert res["error"]["code"] == "oom", res["error"]
    assert "ran out of memory" in res["error"]["message"]


def test_fork_bomb_stops_at_the_pids_limit_and_the_node_keeps_serving(gw, node):
    code = """
import os, time
made = failed = 0
for i in range(2000):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        made += 1
    except OSError:
        failed += 1
print('made', made, 'failed', failed, flush=True)
"""
    jid = job()
    gw.submit(node.name, {"job_id": jid, "attempt": 1, "timeout_s": 60,
                          "task": py(code, limits={"pids": 64})})
    t0 = time.monotonic()
    while jid + ".1" not in gw.results and time.monotonic() - t0 < 30:
        t = time.monotonic()
        assert node.info()["name"] == node.name
        assert time.monotonic() - t < 2, "the node stopped answering"
        time.sleep(0.2)
    res = gw.wait_result(f"{jid}.1")
    assert res["state"] == "succeeded", json.dumps(res)
    made, failed = [int(w) for w in log_text(gw, res).split()[1::2][:2]]
    assert made < 64 and failed > 0


def test_program_ignoring_sigterm_is_killed_after_the_grace_and_removed(gw, node, conf):
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"
    jid = job()
    gw.submit(node.name, {"job_id": jid, "attempt": 1, "timeout_s": 60, "task": py(code)})
    gw.wait_live_log((jid, 1, 0), lambda b: b"ready" in b)
    assert containers(conf, run=f"{jid}.1"), "the container should be running"
    t0 = time.monotonic()
    gw.cancel(node.name, jid)
    res = gw.wait_result(f"{jid}.1", 30)
    took = time.monotonic() - t0
    assert res["state"] == "cancelled", res
    assert 2 <= took < 2 + 10, took   # --task-grace-s 2, then SIGKILL
    assert containers(conf, run=f"{jid}.1") == []
    assert "SIGKILL sent" in log_text(gw, res)


def test_cancel_stops_a_program_at_once_and_removes_its_container(gw, node, conf):
    jid = job()
    gw.submit(node.name, {"job_id": jid, "attempt": 1, "timeout_s": 60,
                          "task": py("import time\nprint('ready', flush=True)\ntime.sleep(60)")})
    gw.wait_live_log((jid, 1, 0), lambda b: b"ready" in b)
    t0 = time.monotonic()
    gw.cancel(node.name, jid)
    res = gw.wait_result(f"{jid}.1", 30)
    assert res["state"] == "cancelled" and res["error"]["code"] == "cancelled"
    assert time.monotonic() - t0 < 2, "SIGTERM ends a program that does not ignore it"
    assert containers(conf, run=f"{jid}.1") == []
    assert res["logs"]["blob"]


def test_timeout_fails_the_run_and_removes_its_container(gw, node, conf):
    jid, res = run_task(gw, node, py("import time\ntime.sleep(60)"), timeout_s=2, wait=30)
    assert res["state"] == "failed"
    assert res["error"]["code"] == "timeout", res["error"]
    assert containers(conf, run=f"{jid}.1") == []


def test_missing_image_fails_for_good_with_a_clear_reason(gw, node):
    _, res = run_task(gw, node, {"image": "localhost/no-such-image:1", "command": ["true"]})
    assert res["state"] == "failed"
    assert res["error"]["code"] == "image_not_found", res["error"]
    assert "localhost/no-such-image:1 is not on this node" in res["error"]["message"]
    assert res["exit_code"] is None


def test_output_quota_exceeded_fails_and_keeps_no_output(gw, node):
    code = "open('/kowloon/out/small.txt','w').write('x')\nopen('/kowloon/out/big.bin','wb').write(b'0' * (3 << 20))"
    _, res = run_task(gw, node, py(code, limits={"output_bytes": 1 << 20}))
    assert res["state"] == "failed"
    assert res["error"]["code"] == "output_quota", res["error"]
    assert "outputs" not in res


def test_outputs_are_regular_files_only_named_by_their_path(gw, node):
    code = """
import os
os.makedirs('/kowloon/out/a/b')
open('/kowloon/out/a/b/c.txt', 'w').write('deep')
os.symlink('/etc/passwd', '/kowloon/out/passwd')
os.mkfifo('/kowloon/out/fifo')
"""
    _, res = run_task(gw, node, py(code))
    assert res["state"] == "succeeded", json.dumps(res)
    assert set(res["outputs"]) == {"a/b/c.txt"}
    assert gw.blob(res["outputs"]["a/b/c.txt"]["blob"]) == b"deep"
    assert "2 entries under /kowloon/out are not regular files" in log_text(gw, res)


@pytest.mark.parametrize("task, field", [
    ({"files": {"../evil": {"b64": ""}}}, "task.files.../evil"),
    ({"files": {"/etc/passwd": {"b64": ""}}}, "task.files./etc/passwd"),
    ({"env": {"KOWLOON_JOB_ID": "x"}}, "task.env.KOWLOON_JOB_ID"),
    ({"env": {"MASTER_PORT": "1"}}, "task.env.MASTER_PORT"),
    ({"env": {"1BAD": "x"}}, "task.env.1BAD"),
    ({"command": []}, "task.command"),
    ({"image": "--privileged"}, "task.image"),
])
def test_bad_task_is_refused_with_422_naming_the_field(node, task, field):
    body = {"job_id": job(), "attempt": 1, "task": {**py("print(1)"), **task}}
    r = node.post_run(body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field


# ---------------------------------------------------------------- registration

def test_node_announces_its_engine_and_images_and_sends_new_ones(gw, conf, root):
    n = Node(gw, conf, root, extra=("--task-images-refresh-s", "1")).start()
    tag = f"localhost/kowloon-tagtest:{os.urandom(3).hex()}"
    try:
        reg = [b for b in gw.registered if b["name"] == n.name][-1]
        assert reg["tasks"]["engine"] == "podman"
        assert reg["tasks"]["version"]
        assert IMAGE in reg["tasks"]["images"]
        assert reg["tasks"]["gang_network"] == "host+iptables"
        assert n.info()["tasks"]["engine"] == "podman"
        # beats say nothing of tasks while nothing changes...
        gw.wait_heartbeat(n.name, lambda b: "running" in b)
        assert not any("tasks" in b for name, b in gw.heartbeats if name == n.name)
        # ... and the new list once an image is loaded
        subprocess.run(["podman", "tag", IMAGE, tag], check=True, env=engine_env(conf))
        gw.wait_heartbeat(n.name, lambda b: tag in b.get("tasks", {}).get("images", []))
    finally:
        subprocess.run(["podman", "rmi", tag], env=engine_env(conf), capture_output=True)
        n.stop()


def test_a_node_without_an_engine_refuses_tasks_and_says_why(gw, conf, root):
    n = Node(gw, conf, root, extra=("--task-engine", "none")).start()
    try:
        assert n.info()["tasks"] == {"engine": "none", "reason": "--task-engine none"}
        r = n.post_run({"job_id": job(), "attempt": 1, "task": py("print(1)")})
        assert r.status_code == 409, r.text
        assert r.json()["error"]["field"] == "task"
    finally:
        n.stop()


def test_an_engine_asked_for_by_name_that_does_not_answer_stops_the_node(gw, conf, root):
    fake = os.path.join(root, "fake-docker")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho 28.2.2\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    os.chmod(fake, 0o755)
    n = Node(gw, conf, root, extra=("--task-engine", "docker", "--task-engine-cmd", fake))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOWLOON_")}
    env["KOWLOON_CLUSTER_TOKEN"] = gw.token
    p = subprocess.run(n.argv, env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "--task-engine docker" in p.stderr and "Cannot connect to the Docker daemon" in p.stderr


def test_a_node_runs_only_the_images_it_allows(gw, conf, root):
    n = Node(gw, conf, root, extra=("--task-images", "localhost/other-*")).start()
    try:
        r = n.post_run({"job_id": job(), "attempt": 1, "task": py("print(1)")})
        assert r.status_code == 409, r.text
        assert r.json()["error"]["field"] == "task.image"
    finally:
        n.stop()


# ---------------------------------------------------------------- restarts

def test_node_killed_mid_task_finds_and_removes_its_orphan_on_restart(gw, conf, root):
    n = Node(gw, conf, root).start()
    jid = job()
    gw.submit(n.name, {"job_id": jid, "attempt": 1, "timeout_s": 120,
                       "task": py("import time\nprint('ready', flush=True)\ntime.sleep(120)")})
    gw.wait_live_log((jid, 1, 0), lambda b: b"ready" in b)
    n.kill9()
    assert containers(conf, run=f"{jid}.1"), "the container outlives its node"
    n.start()
    try:
        stk.wait_until(lambda: containers(conf, run=f"{jid}.1") == [], 30, 0.2, "orphan removal")

        def logged():
            with open(n.log) as f:
                return f"removed orphaned task container kowloon-" in f.read()
        stk.wait_until(logged, 10, 0.1, "the removal in the node's log")
    finally:
        n.stop()


def test_node_stopping_ends_its_tasks_within_their_grace_and_gives_them_back(gw, conf, root):
    n = Node(gw, conf, root, extra=("--drain-grace-s", "0")).start()
    jid = job()
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"
    gw.submit(n.name, {"job_id": jid, "attempt": 1, "timeout_s": 60, "task": py(code)})
    gw.wait_live_log((jid, 1, 0), lambda b: b"ready" in b)
    n.proc.popen.send_signal(signal.SIGTERM)
    n.proc.popen.wait(timeout=20)
    # the program was killed after the grace, not left behind, and the run
    # was reported as a retryable failure the gateway requeues
    assert containers(conf, run=f"{jid}.1") == []
    res = gw.wait_result(f"{jid}.1", 5)
    assert res["state"] == "failed"
    assert res["error"]["code"] == "backend_error", res["error"]
    assert "shut down" in res["error"]["message"]


# ---------------------------------------------------------------- gangs and network

class Listener:
    """A TCP port on the host standing in for the gateway, PostgreSQL..."""

    def __init__(self):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(16)
        self.port = self.s.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                c, _ = self.s.accept()
            except OSError:
                return
            self.accepted += 1
            c.close()

    def close(self):
        self.s.close()


PROBE = """
import socket
def probe(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return 'open'
    except ConnectionRefusedError:
        return 'refused'
    except OSError as e:
        return type(e).__name__
"""


def test_single_node_task_has_no_network(gw, node):
    lst = Listener()
    try:
        code = PROBE + f"print(probe('127.0.0.1', {lst.port}), probe('127.0.0.1', {node.port}))"
        _, res = run_task(gw, node, py(code))
        assert res["state"] == "succeeded", json.dumps(res)
        assert log_text(gw, res).split()[:2] == ["refused", "refused"]
        assert lst.accepted == 0
    finally:
        lst.close()


def test_a_gang_part_whose_rank_0_never_comes_fails_peer_lost(gw, conf, root):
    if os.geteuid() != 0 or not shutil.which("iptables"):
        pytest.skip("the gang firewall needs root and iptables")
    n = Node(gw, conf, root, extra=("--dist-timeout-s", "2")).start()
    try:
        jid = job("lone")
        gw.submit(n.name, {"job_id": jid, "attempt": 1, "timeout_s": 60,
                           "dist": {"nodes": 2, "node_rank": 1}, "task": py("print(1)")})
        res = gw.wait_result(f"{jid}.1.p1", 30)
        assert res["state"] == "failed"
        assert res["error"]["code"] == "peer_lost", res["error"]   # the gateway reruns the gang
        assert containers(conf, run=f"{jid}.1.p1") == []
    finally:
        n.stop()


def test_egress_gets_the_engines_network_and_none_only_loopback(gw, node):
    code = "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))"
    _, res = run_task(gw, node, py(code, network="egress"))
    assert res["state"] == "succeeded", json.dumps(res)
    assert "eth0" in log_text(gw, res)
    _, res = run_task(gw, node, py(code))
    assert log_text(gw, res).strip() == "['lo']"


@pytest.mark.timeout(300)
def test_gang_parts_reach_each_other_but_not_the_cluster_services(gw, conf, root):
    if os.geteuid() != 0 or not shutil.which("iptables"):
        pytest.skip("the gang firewall needs root and iptables (a node without them refuses gangs)")
    db = Listener()        # stands in for PostgreSQL, listed in --task-deny
    other = Listener()     # any other port of the host: a peer's
    gwport = int(gw.url.rsplit(":", 1)[1])
    deny = ("--task-deny", f"127.0.0.1:{db.port}")
    a = Node(gw, conf, root, extra=deny).start()
    b = Node(gw, conf, root, extra=deny).start()
    code = PROBE + f"""
import os, socket, struct, numpy as np
rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
addr, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])
print('env', rank, world, os.environ['NNODES'], os.environ['NODE_RANK'], addr, port, flush=True)
print('probe', probe('127.0.0.1', {db.port}), probe('127.0.0.1', {gwport}),
      probe('127.0.0.1', int(os.environ['NODE_API'])), probe('127.0.0.1', {other.port}), flush=True)
# a tiny all-reduce over MASTER_ADDR:MASTER_PORT: rank 0 sums, sends back
x = np.full(4, rank + 1, dtype=np.float64)
if rank == 0:
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(('0.0.0.0', port)); srv.listen(world)
    peers = [srv.accept()[0] for _ in range(world - 1)]
    total = x.copy()
    for c in peers:
        total += np.frombuffer(c.recv(32, socket.MSG_WAITALL), dtype=np.float64)
    for c in peers:
        c.sendall(total.tobytes())
else:
    import time
    for i in range(1200):        # rank 0's container may start a minute later on a busy host
        try:
            c = socket.create_connection((addr, port), timeout=5); break
        except OSError:
            time.sleep(0.1)
    c.sendall(x.tobytes())
    total = np.frombuffer(c.recv(32, socket.MSG_WAITALL), dtype=np.float64)
print('sum', *total, flush=True)
"""
    jid = job("gang")
    try:
        for rank, n in enumerate((a, b)):
            task = py(code, env={"NODE_API": str(n.port)}, network="peers")
            gw.submit(n.name, {"job_id": jid, "attempt": 1, "timeout_s": 140, "gpus": 0,
                               "dist": {"nodes": 2, "node_rank": rank, "world": 2}, "task": task})
        res = [gw.wait_result(f"{jid}.1.p{r}", 150) for r in (0, 1)]
        for r, one in enumerate(res):
            assert one["state"] == "succeeded", one
            lines = {l.split()[0]: l.split()[1:] for l in log_text(gw, one).splitlines() if l}
            assert lines["env"][:4] == [str(r), "2", "2", str(r)]
            assert lines["env"][4] == "127.0.0.1"
            # the deny list, the gateway and the node's API: refused; a peer: open
            assert lines["probe"] == ["refused", "refused", "refused", "open"], lines
            assert [float(v) for v in lines["sum"]] == [3.0] * 4
        assert db.accepted == 0
    finally:
        a.stop()
        b.stop()
        db.close()
        other.close()
    # each node removed its chain when it stopped
    out = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    for n in (a, b):
        assert f"KOWLOON-{tag(n.name, gw.url)}" not in out, out


