#!/usr/bin/env python3
"""bench/tasks_engine.py — the node side of tasks against the bare engine
(issue 18's benchmark, node half): a real kowloon-compute and podman, with
tests/integration/fakegateway.py in the gateway's place (the real gateway
takes no tasks yet), so the figures are the node's own cost, not the
gateway's.

  1. start overhead, a trivial task (python3 -c 'print(1)'), N times each:
     run request handed out by the lease -> first output line at the
     gateway (live log) -> result reported; against a bare
     `podman run --rm IMAGE python3 -c 'print(1)'` of the same image and
     command in the same run: start -> first line on its stdout -> exit.
     Medians, and Kowloon's added time at the median.
  2. input bytes into a task: a 1 GiB input (a blob of the shared store,
     bind-mounted read-only) read inside the container, as a rate against
     reading the same file on the host with the same code; warm page cache
     for both (read once first), so the figure is the mount's cost, not the
     disk's. Target >= 0.9.

Prints figures only; never fails on time. Exits 1 when a result is wrong.
usage: bench/tasks_engine.py [--runs 10] [--gib 1]"""

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

import stack as stk  # noqa: E402
from fakegateway import FakeGateway  # noqa: E402

IMAGE = "localhost/kowloon-python:1"
READ = """
import os, sys, time
f = os.open(sys.argv[1], os.O_RDONLY)
buf = bytearray(16 << 20)
mv = memoryview(buf)
t0 = time.perf_counter(); n = 0
while True:
    r = os.readv(f, [mv])
    if r == 0:
        break
    n += r
dt = time.perf_counter() - t0
print('read', n, dt, flush=True)
"""


def host_read_rate(path):
    """Bytes per second of READ reading path on the host: the median of two
    runs after a first that warms the page cache."""
    rates = []
    for _ in range(3):
        w = subprocess.run([sys.executable, "-c", READ, path], capture_output=True,
                           text=True).stdout.split()
        rates.append(int(w[1]) / float(w[2]))
    return statistics.median(rates[1:])


def ms(x):
    return f"{x * 1000:7.1f} ms"


def bare_run(conf, cmd, flags=()):
    """podman run --rm of cmd: (first line, exit) seconds after the start."""
    env = dict(os.environ, CONTAINERS_CONF=conf)
    t0 = time.monotonic()
    p = subprocess.Popen(["podman", "run", "--rm", "--network=none", *flags, IMAGE, *cmd],
                         stdout=subprocess.PIPE, env=env)
    p.stdout.readline()
    first = time.monotonic() - t0
    p.stdout.read()
    p.wait()
    return first, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--gib", type=float, default=1.0)
    a = ap.parse_args()
    if not shutil.which("podman"):
        print("tasks_engine: podman is not installed: nothing to measure")
        return 0
    p = subprocess.run([os.path.join(HERE, "..", "scripts", "task-image.sh"), IMAGE],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(f"tasks_engine: no task image: {p.stderr[-400:]}")
        return 0
    conf = p.stdout.strip().splitlines()[-1]
    root = tempfile.mkdtemp(prefix="kowloon-bench-tasks-")
    gw = FakeGateway(blob_dir=os.path.join(root, "blobs"), token="bench")
    name = "bench-" + os.urandom(3).hex()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOWLOON_")}
    env["KOWLOON_CLUSTER_TOKEN"] = gw.token
    node = stk.Proc(name, [stk.COMPUTE_BIN, "--name", name, "--listen", f"127.0.0.1:{stk.free_port()}",
                           "--gateway", gw.url, "--slots", "2", "--backend", "cpu",
                           "--task-containers-conf", conf,
                           "--task-scratch", os.path.join(root, "scratch"), "--blob-dir", "auto"],
                    env, os.path.join(root, "node.log")).start()
    bad = 0
    try:
        gw.wait_registered(name)
        cmd = ["python3", "-c", "print(1)"]
        bare_run(conf, cmd)   # warm: the image's layers in the page cache
        # the isolation the node adds (compute/task/task_argv.c), on dirs like a part's
        part = os.path.join(root, "part")
        for d in ("in", "work", "out", "meta"):
            os.makedirs(os.path.join(part, d))
            if d != "in":
                os.chown(os.path.join(part, d), 65534, 65534)
        iso = ["--init", "--log-driver=none", "--pull=never", "--user=65534:65534", "--read-only",
               "--security-opt=no-new-privileges", "--cap-drop=ALL", "--pids-limit=1024",
               "--tmpfs=/tmp:rw,nosuid,nodev,size=4294967296,mode=1777",
               "--shm-size=4294967296", "--workdir=/kowloon/work"]
        iso += [f"--volume={part}/{d}:/kowloon/{d}:{'ro' if d == 'in' else 'rw'}"
                for d in ("in", "work", "out", "meta")]
        first_k, end_k, first_b, end_b, phases = [], [], [], [], []
        first_i, end_i = [], []
        for i in range(a.runs):
            jid = f"bench{i}-{os.urandom(2).hex()}"
            t0 = time.monotonic()
            gw.submit(name, {"job_id": jid, "attempt": 1, "timeout_s": 60,
                             "task": {"image": IMAGE, "command": cmd}})
            gw.wait_live_log((jid, 1, 0), lambda b: b"\n" in b, 30)
            first_k.append(time.monotonic() - t0)
            res = gw.wait_result(f"{jid}.1", 60)
            end_k.append(time.monotonic() - t0)
            if res["state"] != "succeeded":
                print("task failed:", res)
                bad = 1
            phases.append(res.get("phases_ms", {}))
            f, e = bare_run(conf, cmd)
            first_b.append(f)
            end_b.append(e)
            f, e = bare_run(conf, cmd, iso)
            first_i.append(f)
            end_i.append(e)
        med = statistics.median
        print(f"1. start overhead, {a.runs} runs of python3 -c 'print(1)', medians")
        print(f"   Kowloon node: request -> first line {ms(med(first_k))}   request -> result {ms(med(end_k))}")
        print(f"   bare podman:  start   -> first line {ms(med(first_b))}   start   -> exit   {ms(med(end_b))}")
        print("   bare podman with the node's isolation flags (no cgroup parent):")
        print(f"                 start   -> first line {ms(med(first_i))}   start   -> exit   {ms(med(end_i))}")
        print(f"   added by Kowloon over bare podman: first line {ms(med(first_k) - med(first_b))}, "
              f"result {ms(med(end_k) - med(end_b))}")
        print(f"   of which the isolation flags: first line {ms(med(first_i) - med(first_b))}, "
              f"exit {ms(med(end_i) - med(end_b))}")
        for k in ("inputs", "compute", "outputs"):
            print(f"   node phase {k:8s} median {med([p.get(k, 0) for p in phases]):6.0f} ms")

        n = int(a.gib * (1 << 30))
        path = os.path.join(root, "big")
        with open(path, "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(n >> 20):
                f.write(chunk)
        # the blob's file is the store's: moved in under its name
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while True:
                b = f.read(16 << 20)
                if not b:
                    break
                h.update(b)
        bid = "sha256:" + h.hexdigest()
        dst = gw.blob_path(bid)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(path, dst)
        os.chmod(dst, 0o640)
        hr = host_read_rate(dst)
        inside = []
        for _ in range(3):
            jid = f"read-{os.urandom(2).hex()}"
            gw.submit(name, {"job_id": jid, "attempt": 1, "timeout_s": 300, "task": {
                "image": IMAGE, "command": ["python3", "-c", READ, "/kowloon/in/x"],
                "inputs": {"x": {"blob": bid, "size": n}}}})
            res = gw.wait_result(f"{jid}.1", 300)
            if res["state"] != "succeeded":
                print("read task failed:", res)
                bad = 1
                break
            words = gw.blob(res["logs"]["blob"]).decode().split()
            if int(words[1]) != n:
                print("the task read", words[1], "bytes, not", n)
                bad = 1
            inside.append(int(words[1]) / float(words[2]))
        if inside:
            cr = statistics.median(inside)
            print(f"2. a {a.gib:g} GiB input read in 16 MiB reads (warm page cache), medians of 2-3")
            print(f"   on the host        {hr / 1e9:6.2f} GB/s")
            print(f"   inside the task    {cr / 1e9:6.2f} GB/s (the store's file, mounted read-only)")
            print(f"   ratio {cr / hr:.2f} (target >= 0.9: {'MET' if cr / hr >= 0.9 else 'NOT MET'})")
    finally:
        node.stop()
        gw.close()
        shutil.rmtree(root, ignore_errors=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
