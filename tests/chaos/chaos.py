"""Chaos test: a private stack (PostgreSQL, Redis, one gateway, three nodes
with two slots each) takes jobs at a steady rate while nodes and the gateway
are killed with SIGKILL and restarted, Redis is flushed and PostgreSQL is
restarted, at random times. At the end it checks, from PostgreSQL and from the
API, that every job that got a 202 is terminal, is recorded once, and that
every succeeded result is numerically right; and it counts the faults from
what the processes and servers show (listener pids, DBSIZE, postmaster start
time), not from what it meant to do. The last line printed is the summary:

  accepted=N terminal=N lost=0 duplicate_results=0 wrong_results=0 faults: node_kill=a gateway_kill=b redis_flush=c pg_restart=d

  accepted   jobs that got a 202 (a body retried after a 503 or a cut
             connection counts once, when it gets its 202)
  terminal   accepted jobs that PostgreSQL and the API both show in the same
             terminal state
  lost       accepted jobs missing from PostgreSQL, not terminal once the
             bounded wait is over, or that the API does not show as PostgreSQL does
  duplicate_results  extra records of an outcome: job_results rows beyond one
             per job, job_results rows of jobs that did not succeed, and
             terminal job_events beyond one per job
  wrong_results  succeeded jobs whose result is missing or differs from numpy
             (every one is checked, jobs committed without a 202 too)

Exit 0 only when nothing is lost, duplicated or wrong and every fault kind
happened at least the target number of times. Short run by default (about
200 jobs, one fault of each kind); --full: 2,000 jobs, six of each."""

import argparse
import collections
import importlib.util
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "kowloon_stack", os.path.join(HERE, "..", "integration", "stack.py"))
stk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stk)

TERMINAL = ("succeeded", "failed", "cancelled")
KINDS = ("node_kill", "gateway_kill", "redis_flush", "pg_restart")
NODE_TIMEOUT_S = 3


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- the stack

class ChaosStack(stk.Stack):
    """The integration stack with chaos settings: nodes with two slots and
    one CPU thread per run, one-second heartbeats and reconciles."""

    def gateway_env(self, **extra):
        env = super().gateway_env(**extra)
        env.update({"KOWLOON_HEARTBEAT_S": "1", "KOWLOON_RECONCILE_INTERVAL_S": "1",
                    "KOWLOON_NODE_TIMEOUT_S": str(NODE_TIMEOUT_S),
                    # the final check reads thousands of jobs; 429s are still retried
                    "KOWLOON_RATE_LIMIT_RPS": "1000", "KOWLOON_RATE_LIMIT_BURST": "1000"})
        return env

    def start_node(self, name, port=None, backend="auto", extra_args=(), proc_name=None):
        if port is None:
            port = self.node_ports[name]
        env = stk._clean_env()
        env.update({"KOWLOON_CLUSTER_TOKEN": self.cluster_token, "KOWLOON_LOG_LEVEL": "debug"})
        # the gateway's cluster listener; the credential kept in the stack's
        # state directory, so that a node killed and restarted is known at once
        argv = [stk.COMPUTE_BIN, "--slots", "2", "--threads", "1", "--backend", "cpu",
                "--name", name, "--listen", f"127.0.0.1:{port}", "--gateway", self.cluster_base,
                "--state-dir", self.state_dir, "--heartbeat-s", "1", *extra_args]
        return self._proc(proc_name or name, argv, env)

    def restart_gateway(self):
        return self.start_gateway("gateway", self.gw_port)


# Entries in every tenant's ready set (the gateway's queue.c keeps one per tenant).
READY_COUNT = ("local n = 0 for _, t in ipairs(redis.call('SMEMBERS', KEYS[1])) do"
               " n = n + redis.call('ZCARD', 'kowloon:ready:' .. t) end return n")


def redis_cmds(port, *cmds):
    """Sends Redis commands in one pipeline; returns the raw reply lines of each."""
    out = b""
    for args in cmds:
        out += f"*{len(args)}\r\n".encode() + b"".join(
            f"${len(str(a))}\r\n{a}\r\n".encode() for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(out)
        buf = b""
        replies = []
        while len(replies) < len(cmds):
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("redis closed the connection")
            buf += chunk
            replies = _parse_replies(buf, len(cmds))
        return replies


def _parse_replies(buf, want):
    """Parses up to want RESP replies of the kinds we use (+, -, :, $);
    fewer when buf does not hold them all yet."""
    replies, pos = [], 0
    while len(replies) < want:
        end = buf.find(b"\r\n", pos)
        if end < 0:
            break
        kind, line = buf[pos:pos + 1], buf[pos + 1:end].decode("latin-1")
        if kind == b"$":
            n = int(line)
            if n < 0:
                replies.append(None)
                pos = end + 2
                continue
            if len(buf) < end + 2 + n + 2:
                break
            replies.append(buf[end + 2:end + 2 + n].decode("latin-1"))
            pos = end + 2 + n + 2
        else:
            replies.append(line if kind != b":" else int(line))
            pos = end + 2
    return replies


def listener_pid(port):
    """Pid of the process (one of our children) listening on 127.0.0.1:port,
    found through /proc: the socket's inode in /proc/net/tcp, then the child
    that holds it. None when nothing listens."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if p[3] == "0A" and int(p[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(p[9])
        except OSError:
            pass
    if not inodes:
        return None
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != me:
                continue
            for fd in os.listdir(f"/proc/{d}/fd"):
                link = os.readlink(f"/proc/{d}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(d)
        except (OSError, IndexError, ValueError):
            continue
    return None


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- jobs

class JobSpec:
    """One job body, regenerated from (seed, index) so that nothing large is
    kept in memory: the same arrays serve the submit and the check."""

    def __init__(self, run_seed, idx):
        self.idx = idx
        self.seed = run_seed * 1_000_003 + idx
        r = random.Random(self.seed)
        u = r.random()
        self.kind = ("sleep" if u < 0.08 else "saxpy" if u < 0.36 else
                     "reduce" if u < 0.68 else "gemm")
        self.priority = r.randint(0, 9)
        self.max_attempts = r.choice((3, 5, 5, 10))
        self.b64 = r.random() < 0.5
        # a third of the jobs with inputs upload them as blobs first (drawn
        # apart, so that the other draws stay what they were)
        self.blob = random.Random(self.seed ^ 0xB10B).random() < 0.33
        self.r = r

    def rng(self):
        return np.random.default_rng(self.seed)

    def _arrays(self):
        """The kernel, params and input arrays (float32)."""
        g, r = self.rng(), random.Random(self.seed ^ 0x5EED)
        if self.kind == "saxpy":
            n = int(g.integers(1, 16385)) if r.random() < 0.7 else int(g.integers(1, 64))
            a = float(np.float32(g.uniform(-4, 4)))
            return {"a": a}, {"x": g.standard_normal(n, dtype=np.float32),
                              "y": g.standard_normal(n, dtype=np.float32)}
        if self.kind == "reduce":
            op = r.choice(("sum", "min", "max", "mean"))
            shape = ([int(g.integers(1, 40000))] if r.random() < 0.6 else
                     [int(g.integers(1, 200)), int(g.integers(1, 200))])
            return {"op": op}, {"x": g.uniform(-10, 10, size=shape).astype(np.float32)}
        if self.kind == "gemm":
            big = r.random() < 0.15
            hi = 257 if big else 65
            m, k, n = (int(g.integers(1, hi)) for _ in range(3))
            alpha = float(np.float32(g.uniform(-2, 2)))
            params = {"alpha": alpha}
            batch = [int(g.integers(2, 4))] if r.random() < 0.15 and not big else []
            inputs = {"a": g.standard_normal(batch + [m, k], dtype=np.float32),
                      "b": g.standard_normal(batch + [k, n], dtype=np.float32)}
            if r.random() < 0.4:
                params["beta"] = float(np.float32(g.uniform(-2, 2)))
                inputs["c"] = g.standard_normal(batch + [m, n], dtype=np.float32)
            return params, inputs
        return {"seconds": round(r.uniform(0.2, 1.0), 3)}, {}

    def blob_inputs(self):
        """The input arrays' raw bytes, by input name, for a blob job."""
        return {k: np.ascontiguousarray(v).tobytes() for k, v in self._arrays()[1].items()}

    def body(self, run_label, blob_ids=None):
        params, inputs = self._arrays()
        def wire(k, v):
            if blob_ids is not None:
                return {"dtype": "float32", "shape": list(v.shape), "blob": blob_ids[k]}
            return stk.tensor(v, b64=self.b64)
        return json.dumps({
            "kernel": self.kind, "params": params,
            "inputs": {k: wire(k, v) for k, v in inputs.items()},
            "priority": self.priority, "timeout_s": 60, "max_attempts": self.max_attempts,
            "resources": {"backend": "any"},
            "labels": {"chaos": run_label, "cid": str(self.idx)},
        }, separators=(",", ":"))

    def check(self, outputs):
        """None when outputs are right, else a short reason."""
        params, inputs = self._arrays()
        try:
            if self.kind == "sleep":
                v = stk.decode(outputs["slept"])
                if v.shape != (1,) or not (params["seconds"] * 0.9 - 0.01 <= float(v[0]) < 60):
                    return f"slept {v.tolist()} for seconds={params['seconds']}"
                return None
            if self.kind == "saxpy":
                x, y = (inputs[k].astype(np.float64) for k in ("x", "y"))
                ref = params["a"] * x + y
                got = stk.decode(outputs["y"])
                tol = 1e-6 * (np.abs(params["a"] * x) + np.abs(y)) + 1e-30
            elif self.kind == "reduce":
                x = inputs["x"].astype(np.float64)
                op = params["op"]
                ref = np.array([{"sum": x.sum(), "min": x.min(), "max": x.max(),
                                 "mean": x.mean()}[op]])
                scale = np.abs(x).sum() / (x.size if op == "mean" else 1)
                got = stk.decode(outputs["value"])
                tol = (1e-5 * scale + 1e-6) if op in ("sum", "mean") else 0.0
            else:
                a, b = inputs["a"].astype(np.float64), inputs["b"].astype(np.float64)
                alpha, beta = params["alpha"], params.get("beta", 0.0)
                ref = alpha * (a @ b)
                mag = abs(alpha) * (np.abs(a) @ np.abs(b))
                if "c" in inputs:
                    c = inputs["c"].astype(np.float64)
                    ref, mag = ref + beta * c, mag + abs(beta) * np.abs(c)
                got = stk.decode(outputs["c"])
                tol = 1e-4 * mag + 1e-5
            if got.shape != ref.shape:
                return f"shape {list(got.shape)}, expected {list(ref.shape)}"
            bad = np.abs(got.astype(np.float64) - ref) > tol
            if bad.any():
                i = int(np.flatnonzero(bad.ravel())[0])
                return (f"{int(bad.sum())} of {bad.size} elements off; first at {i}: "
                        f"got {got.ravel()[i]!r}, expected {ref.ravel()[i]!r}")
            return None
        except (KeyError, AssertionError, ValueError, TypeError) as e:
            return f"malformed outputs ({e}): keys {sorted(outputs)}"


# ---------------------------------------------------------------- submitting

class Submitter:
    """Feeds jobs at a steady rate to a pool of workers. A 503 or a failed
    connection is retried later with the same body; each 202 counts once."""

    def __init__(self, stack, specs, rate, run_label, deadline, workers=8):
        self.stack, self.specs, self.rate = stack, specs, rate
        self.run_label, self.deadline = run_label, deadline
        self.q = queue.Queue()
        self.accepted = {}           # idx -> job id
        self.stats = collections.Counter()
        self.mu = threading.Lock()
        self.threads = [threading.Thread(target=self._feed, daemon=True)]
        self.threads += [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]
        self.nworkers = workers

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def join(self):
        for t in self.threads:
            t.join(max(0.0, self.deadline - time.monotonic()) + 20)

    def _feed(self):
        t0 = time.monotonic()
        for i, spec in enumerate(self.specs):
            due = t0 + i / self.rate
            while time.monotonic() < due:
                time.sleep(min(0.05, due - time.monotonic() + 0.001))
            self.q.put(spec)
        for _ in range(self.nworkers):
            self.q.put(None)

    def _upload(self, http, key, spec):
        """Uploads a blob job's inputs through the faults (retrying like a
        submit); their ids by input name, or None past the deadline."""
        ids = {}
        hdr = {"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"}
        for name, data in spec.blob_inputs().items():
            while name not in ids:
                if time.monotonic() >= self.deadline:
                    return None
                try:
                    r = http.post(self.stack.base + "/v1/blobs", data=data, headers=hdr, timeout=10)
                    code = r.status_code
                except requests.RequestException:
                    code, r = "conn", None
                if code in (200, 201):
                    ids[name] = r.json()["id"]
                    with self.mu:
                        self.stats["blob_uploads"] += 1
                    continue
                time.sleep(retry_after(r) if code in (503, 429) else 0.5)
        return ids

    def _work(self):
        http = requests.Session()
        key = self.stack.keys["A"]
        url = self.stack.base + "/v1/jobs"
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        while True:
            spec = self.q.get()
            if spec is None:
                return
            blob_ids = None
            if spec.blob and spec.kind != "sleep":
                blob_ids = self._upload(http, key, spec)
                if blob_ids is None:
                    continue
            body = spec.body(self.run_label, blob_ids)
            while time.monotonic() < self.deadline:
                delay = 0.5
                try:
                    r = http.post(url, data=body, headers=headers, timeout=10)
                    code = r.status_code
                except requests.RequestException:
                    code = "conn"  # refused, reset or timed out: maybe committed
                    http = requests.Session()
                if code == 202:
                    jid = r.json()["id"]
                    with self.mu:
                        self.accepted[spec.idx] = jid
                        self.stats["202"] += 1
                    break
                with self.mu:
                    self.stats[str(code)] += 1
                if code in (503, 429):
                    delay = retry_after(r)
                elif code != "conn":
                    with self.mu:
                        self.stats["refused"] += 1
                    log(f"submit {spec.idx} ({spec.kind}) answered {code}: {r.text[:300]}")
                    break  # a 4xx is the test's bug, not an outage: do not retry
                time.sleep(delay)


# ---------------------------------------------------------------- faults

class Chaos:
    """Injects the faults at random times, one thread per kind, so that they
    sometimes overlap (a node restarting while PostgreSQL is down, say), and
    counts each one from what the system shows afterwards."""

    def __init__(self, stack, per_kind, t_end, rnd, kinds=KINDS):
        self.stack, self.per_kind, self.t_end = stack, per_kind, t_end
        self.count = collections.Counter()
        self.unverified = []
        self.node_kills = []          # (node name, wall-clock time of the SIGKILL)
        self.mu = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._main, args=(k, random.Random(rnd.random())),
                                         daemon=True) for k in kinds]
        self.local = threading.local()

    @property
    def rnd(self):
        return self.local.rnd

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def alive(self):
        return any(t.is_alive() for t in self.threads)

    def join(self, timeout):
        until = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, until - time.monotonic()))

    def _main(self, kind, rnd):
        self.local.rnd = rnd
        t0 = time.monotonic()
        span = self.t_end - t0
        n = self.per_kind
        for i in range(n):
            # a random moment in this fault's share of the run
            at = t0 + span * (i + rnd.uniform(0.05, 0.95)) / n
            while time.monotonic() < at and not self.stop.is_set():
                time.sleep(0.05)
            if self.stop.is_set():
                return
            try:
                ok, what = getattr(self, "_" + kind)()
            except Exception as e:  # noqa: BLE001 - a fault that broke the harness is reported
                ok, what = False, f"{type(e).__name__}: {e}"
            with self.mu:
                if ok:
                    self.count[kind] += 1
                else:
                    self.unverified.append(f"{kind}: {what}")
            log(f"{kind} {i + 1}/{n}: {what}{'' if ok else '  (NOT counted)'}")

    def _wait_listener(self, port, old, timeout=30):
        def new_pid():
            p = listener_pid(port)
            return p if p and p != old else None
        return stk.wait_until(new_pid, timeout, 0.1, f"a new listener on port {port}")

    def _running_by_node(self, wait_s=6):
        """{node name: running jobs} from PostgreSQL, waiting up to wait_s
        for some job to be running, so that the fault hits work in flight."""
        until, by = time.monotonic() + wait_s, {}
        while True:
            try:
                by = {n: int(c) for n, c in self.stack.psql(
                    "SELECT node_name, count(*) FROM jobs WHERE state = 'running'"
                    " AND node_name IS NOT NULL GROUP BY 1")}
            except stk.StackError:
                by = {}
            if by or time.monotonic() >= until:
                return by
            time.sleep(0.05)

    def _node_kill(self):
        s = self.stack
        pids = {n: listener_pid(s.node_ports[n]) for n in s.node_names}
        by = self._running_by_node()
        busy = [n for n in by if n in s.node_names]
        name = self.rnd.choice(busy if busy and self.rnd.random() < 0.75 else s.node_names)
        running, port, old = by.get(name, 0), s.node_ports[name], pids[name]
        if old is None:
            return False, f"{name}: nothing listens on {port} before the kill"
        with self.mu:
            self.node_kills.append((name, time.time()))
        s.kill_node(name)
        # Sometimes back before the gateway notices (the restarted node does
        # not know its runs), sometimes after it has been marked down.
        down = self.rnd.choice((0.2, 1.0, NODE_TIMEOUT_S + 1.5, NODE_TIMEOUT_S + 3))
        time.sleep(down)
        s.start_node(name)
        new = self._wait_listener(port, old)
        ok = new != old and not pid_alive(old)
        return ok, f"{name} pid {old} -> {new} (down {down:.1f}s, ~{running} job(s) running on it)"

    def _gateway_kill(self):
        s = self.stack
        old = listener_pid(s.gw_port)
        running = sum(self._running_by_node().values())
        if old is None:
            return False, "nothing listens on the gateway port before the kill"
        s.gateway.kill9()
        # now and then longer than --node-timeout-s: the nodes' heartbeats fail meanwhile
        down = self.rnd.uniform(0.1, 2.0) if self.rnd.random() < 0.75 else NODE_TIMEOUT_S + 1.5
        time.sleep(down)
        for attempt in range(3):
            try:
                s.gateway = s.restart_gateway()
                break
            except stk.StackError as e:
                if attempt == 2:
                    raise
                log(f"gateway restart failed, retrying: {str(e)[:300]}")
                time.sleep(1)
        new = self._wait_listener(s.gw_port, old)
        ok = new != old and not pid_alive(old)
        return ok, f"pid {old} -> {new} (down {down:.1f}s, ~{running} job(s) running)"

    def _redis_flush(self):
        # A flush bites hardest while jobs wait in Redis: give one a few
        # seconds to show up in the ready or delayed set.
        # Redis can also be empty for a moment (the gateway down past its
        # lock's TTL, no submit for a while): a flush of nothing proves
        # nothing, so wait up to 20 s for some key before flushing.
        port, waiting = self.stack.redis_port, 0
        t0 = time.monotonic()
        while time.monotonic() < t0 + 20:
            ready, delayed, size = redis_cmds(port, ("EVAL", READY_COUNT, "1", "kowloon:ready-tenants"),
                                              ("ZCARD", "kowloon:delayed"), ("DBSIZE",))
            waiting = ready + delayed
            if waiting or (size and time.monotonic() >= t0 + 5):
                break
            time.sleep(0.01)
        before, ok_reply, after = redis_cmds(port, ("DBSIZE",), ("FLUSHALL",), ("DBSIZE",))
        ok = ok_reply == "OK" and before > 0 and after < before
        return ok, f"DBSIZE {before} -> {after} ({waiting} job(s) were waiting in Redis)"

    def _pg_start_time(self):
        return self.stack.psql_value("SELECT pg_postmaster_start_time()::text")

    def _postmaster_pid(self):
        with open(os.path.join(self.stack.root, "pgdata", "postmaster.pid")) as f:
            return int(f.readline())

    def _pg_restart(self):
        s = self.stack
        running = sum(self._running_by_node().values())
        t_before, pid_before = self._pg_start_time(), self._postmaster_pid()
        pg = s.procs["postgres"]
        pg.stop(signal.SIGINT, grace=20)  # fast shutdown: sessions are closed
        down = self.rnd.choice((0.5, 2.0, 5.0, 10.0))
        time.sleep(down)
        pg.start()

        def back():
            if not pg.alive():
                raise stk.StackError(f"postgres exited:\n{stk.tail(pg.log_path)}")
            try:
                return self._pg_start_time()
            except stk.StackError:
                return None  # still starting up
        t_after = stk.wait_until(back, 30, 0.2, "postgres back")
        pid_after = self._postmaster_pid()
        ok = t_after != t_before and pid_after != pid_before
        return ok, (f"postmaster pid {pid_before} -> {pid_after}, started {t_after} "
                    f"(down {down:.1f}s, ~{running} job(s) running)")


# ---------------------------------------------------------------- checking

def fetch_pg_jobs(stack, run_label):
    """Every job of this run in PostgreSQL, with its result and terminal-event counts."""
    rows = stack.psql(
        "SELECT j.id, j.labels->>'cid', j.state, coalesce(j.error_code, ''), j.attempts,"
        " j.max_attempts,"
        " (SELECT count(*) FROM job_results r WHERE r.job_id = j.id),"
        " (SELECT count(*) FROM job_events e WHERE e.job_id = j.id"
        "   AND e.state IN ('succeeded', 'failed', 'cancelled'))"
        f" FROM jobs j WHERE j.labels->>'chaos' = '{run_label}'", timeout=60)
    out = {}
    for jid, cid, state, code, att, maxatt, nres, nterm in rows:
        out[jid] = {"cid": int(cid), "state": state, "code": code, "attempts": int(att),
                    "max_attempts": int(maxatt), "results": int(nres), "terminal_events": int(nterm)}
    return out


def unexplained_node_lost(stack, run_label, node_kills):
    """Attempts that ended node_lost (re-queued or failed) although their node
    was not killed while they ran: a live node the gateway gave up on."""
    rows = stack.psql(
        "SELECT e.job_id, e.attempt, r.node_name, extract(epoch FROM r.at),"
        " extract(epoch FROM e.at), e.detail"
        " FROM job_events e JOIN jobs j ON j.id = e.job_id"
        " JOIN job_events r ON r.job_id = e.job_id AND r.attempt = e.attempt AND r.state = 'running'"
        f" WHERE j.labels->>'chaos' = '{run_label}' AND e.detail LIKE 'node_lost%'", timeout=60)
    out = []
    for jid, att, node, t_run, t_lost, detail in rows:
        t_run, t_lost = float(t_run), float(t_lost)
        if not any(n == node and t_run - 1 <= t <= t_lost + 1 for n, t in node_kills):
            out.append(f"{jid} attempt {att} on {node}: {detail}")
    return out


def wait_terminal(stack, run_label, accepted_ids, timeout):
    deadline = time.monotonic() + timeout
    last_log, err = 0, None
    while True:
        try:
            pg = fetch_pg_jobs(stack, run_label)
        except (stk.StackError, subprocess.SubprocessError) as e:
            pg, err = None, e
        if pg is not None:
            open_ = [i for i in accepted_ids if pg.get(i, {}).get("state") not in TERMINAL]
            stray = [i for i, j in pg.items() if j["state"] not in TERMINAL]
            if not open_ and not stray:
                return pg
            if time.monotonic() - last_log > 10:
                log(f"waiting for {len(open_)} accepted job(s) to finish "
                    f"({len(stray)} non-terminal in PostgreSQL)")
                last_log = time.monotonic()
        if time.monotonic() >= deadline:
            if pg is None:
                raise stk.StackError(f"PostgreSQL unreadable at the end: {err}")
            return pg
        time.sleep(0.5)


def recorded_twice(pg):
    """What PostgreSQL holds more than once, from fetch_pg_jobs' rows:
    results past a job's first (every result of a job that did not
    succeed) and terminal events past the first, as (count, a line per job
    that has any)."""
    count, detail = 0, []
    for jid, j in pg.items():
        extra = max(0, j["results"] - 1) + (j["results"] if j["state"] != "succeeded" else 0) \
            + max(0, j["terminal_events"] - 1)
        if extra:
            count += extra
            detail.append(f"{jid} {j}")
    return count, detail


def retry_after(r, cap=2.0):
    """Seconds to wait after a 429/503: its Retry-After, capped, with jitter."""
    try:
        return min(cap, float(r.headers.get("Retry-After", "1"))) * random.uniform(0.3, 1.0)
    except ValueError:
        return 1.0


class Shed(Exception):
    """The gateway shed a request (429/503): ask again after .wait seconds."""

    def __init__(self, text, wait):
        super().__init__(text)
        self.wait = wait


def api_check(stack, specs, jobs_to_check):
    """GETs each job (and its result when it succeeded) through the API.
    Returns {job id: (api state, problem or None)}."""
    base, key = stack.base, stack.keys["A"]
    local = threading.local()

    def one(item):
        jid, idx = item
        http = getattr(local, "http", None) or requests.Session()
        local.http = http
        h = {"Authorization": f"Bearer {key}"}

        def get(path, what, timeout):
            """GET base+path: (its JSON body, None) on a 200, else (None, the
            answer as a problem); raises Shed on a 429/503."""
            r = http.get(f"{base}{path}", headers=h, timeout=timeout)
            if r.status_code == 200:
                return r.json(), None
            answer = f"{what} -> {r.status_code} {r.text[:200]}"
            if r.status_code in (429, 503):
                raise Shed(answer, retry_after(r))
            return None, answer

        err = None
        for attempt in range(10):
            try:
                j, problem = get(f"/v1/jobs/{jid}", "GET job", 15)
                if problem:
                    return jid, (None, problem)
                if j.get("labels", {}).get("cid") != str(idx):
                    return jid, (j.get("state"), f"labels {j.get('labels')} (cid {idx} expected)")
                if j.get("state") != "succeeded":
                    return jid, (j.get("state"), None)
                enc = ("b64", "json")[idx % 2]  # both encodings of the result
                body, problem = get(f"/v1/jobs/{jid}/result?encoding={enc}", "GET result", 30)
                if problem:
                    return jid, ("succeeded", problem)
                if body.get("id") != jid:
                    return jid, ("succeeded", f"result of {body.get('id')} returned for {jid}")
                return jid, ("succeeded", specs[idx].check(body.get("outputs") or {}))
            except Shed as e:
                err = e
                time.sleep(e.wait)
            except (requests.RequestException, ValueError) as e:
                err = e
                time.sleep(0.5)
        return jid, (None, f"API unavailable: {err}")

    with ThreadPoolExecutor(4) as ex:
        return dict(ex.map(one, jobs_to_check))


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="2,000 jobs, six faults of each kind")
    ap.add_argument("--jobs", type=int, help="jobs to submit")
    ap.add_argument("--faults", type=int, help="faults of each kind to inject")
    ap.add_argument("--min-faults", type=int, help="fewest faults of each kind that pass")
    ap.add_argument("--seconds", type=float, help="how long jobs are submitted for")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KOWLOON_CHAOS_SEED", "0")) or None)
    ap.add_argument("--keep", action="store_true", help="keep the stack's files (logs) afterwards")
    a = ap.parse_args()
    jobs = a.jobs or (2000 if a.full else 200)
    per_kind = a.faults or (6 if a.full else 1)
    min_faults = a.min_faults if a.min_faults is not None else (5 if a.full else 1)
    seconds = a.seconds or (300.0 if a.full else 40.0)
    drain_s = 150 if a.full else 30
    seed = a.seed or random.SystemRandom().randrange(1, 2**31)
    rnd = random.Random(seed)
    run_label = f"run{seed}"
    log(f"chaos: {jobs} jobs over {seconds:.0f}s, {per_kind} fault(s) of each kind, "
        f"{a.nodes} nodes x 2 slots, seed {seed} (KOWLOON_CHAOS_SEED={seed} gives the same jobs and fault choices)")

    stack = ChaosStack(node_names=[f"node-{i + 1}" for i in range(a.nodes)],
                       node_timeout_s=NODE_TIMEOUT_S)

    close_on_signals(stack)

    failed, summary, problems = True, None, []
    try:
        t_start = time.monotonic()
        stack.start()
        log(f"stack up in {time.monotonic() - t_start:.1f}s: gateway {stack.base}, "
            f"postgres :{stack.pg_port}, redis :{stack.redis_port}, logs {stack.logs}")
        specs = [JobSpec(seed, i) for i in range(jobs)]
        t0 = time.monotonic()
        # submissions may run late after outages; they stop at this deadline
        sub = Submitter(stack, specs, jobs / seconds, run_label,
                        deadline=t0 + seconds + (120 if a.full else 25)).start()
        chaos = Chaos(stack, per_kind, t0 + seconds, rnd).start()
        last = 0
        while any(t.is_alive() for t in sub.threads) or chaos.alive():
            time.sleep(0.5)
            if time.monotonic() - last >= (30 if a.full else 10):
                last = time.monotonic()
                with sub.mu:
                    st = dict(sub.stats)
                log(f"t={last - t0:.0f}s submits {st} faults {dict(chaos.count)}")
            if time.monotonic() > sub.deadline + 60:
                break
        chaos.stop.set()
        chaos.join(60)
        sub.join()
        t_submitted = time.monotonic()
        accepted = dict(sub.accepted)
        by_id = {jid: idx for idx, jid in accepted.items()}
        log(f"submitted in {t_submitted - t0:.0f}s: {len(accepted)} accepted, "
            f"answers {dict(sub.stats)}; waiting up to {drain_s}s for every job to finish")

        pg = wait_terminal(stack, run_label, list(by_id), drain_s)
        log(f"drained in {time.monotonic() - t_submitted:.0f}s")

        # -- PostgreSQL's view
        missing = [jid for jid in by_id if jid not in pg]
        pg_open = [jid for jid in by_id if jid in pg and pg[jid]["state"] not in TERMINAL]
        mislabelled = [jid for jid in by_id if jid in pg and pg[jid]["cid"] != by_id[jid]]
        unacked = {jid: j for jid, j in pg.items() if jid not in by_id}
        unacked_open = [jid for jid, j in unacked.items() if j["state"] not in TERMINAL]
        duplicates, dup_detail = recorded_twice(pg)
        no_result = [jid for jid, j in pg.items() if j["state"] == "succeeded" and j["results"] == 0]
        over_attempts = [jid for jid, j in pg.items() if j["attempts"] > j["max_attempts"]]

        # -- the API's view, and every succeeded result against numpy
        to_check = [(jid, by_id.get(jid, pg[jid]["cid"]))
                    for jid in list(by_id) + list(unacked) if jid in pg]
        t_api = time.monotonic()
        api = api_check(stack, specs, to_check)
        log(f"API checked {len(api)} job(s) in {time.monotonic() - t_api:.0f}s")
        api_mismatch = [jid for jid, (state, _) in api.items()
                        if state is not None and state != pg[jid]["state"]]
        api_problem = {jid: why for jid, (state, why) in api.items()
                       if why and (state != "succeeded" or jid not in pg)}
        wrong = {jid: why for jid, (state, why) in api.items() if why and state == "succeeded"}
        for jid in no_result:
            wrong.setdefault(jid, "succeeded without a job_results row")

        terminal = sum(1 for jid in by_id if jid in pg and pg[jid]["state"] in TERMINAL
                       and api.get(jid, (None,))[0] == pg[jid]["state"])
        lost_ids = set(missing) | set(pg_open) | {jid for jid in by_id if jid in api_problem}
        lost_ids |= {jid for jid in by_id if jid in api_mismatch}
        lost = len(lost_ids)

        states = collections.Counter(j["state"] + (f"/{j['code']}" if j["code"] else "")
                                     for jid, j in pg.items() if jid in by_id)
        retried = sum(1 for jid in by_id if jid in pg and pg[jid]["attempts"] > 1)
        log(f"outcomes of accepted jobs: {dict(states)}; {retried} ran more than once; "
            f"{len(unacked)} committed without a 202 reaching us (their states "
            f"{dict(collections.Counter(j['state'] for j in unacked.values()))})")
        problems = []
        if len(accepted) < jobs:
            problems.append(f"only {len(accepted)} of {jobs} jobs were accepted by the deadline")
        for what, ids in (("missing from PostgreSQL", missing), ("not terminal", pg_open),
                          ("with another job's labels", mislabelled),
                          ("committed without a 202 and not terminal", unacked_open),
                          ("API state differs from PostgreSQL", api_mismatch),
                          ("attempts above max_attempts", over_attempts)):
            if ids:
                problems.append(f"{len(ids)} job(s) {what}: " + ", ".join(
                    f"{i} {pg.get(i, '')}" for i in ids[:5]))
        if api_problem:
            problems.append(f"{len(api_problem)} API problem(s): " + "; ".join(
                f"{k}: {v}" for k, v in list(api_problem.items())[:5]))
        if wrong:
            problems.append(f"{len(wrong)} wrong result(s): " + "; ".join(
                f"{k} ({specs[by_id.get(k, pg[k]['cid'])].kind}): {v}"
                for k, v in list(wrong.items())[:5]))
        if dup_detail:
            problems.append(f"{duplicates} duplicate record(s): " + "; ".join(dup_detail[:5]))
        for kind in KINDS:
            if chaos.count[kind] < min_faults:
                problems.append(f"{kind}: {chaos.count[kind]} verified, target {min_faults}")
        problems += [f"fault not verified: {u}" for u in chaos.unverified]
        flushes = redis_cmds(stack.redis_port, ("INFO", "commandstats"))[0]
        calls = next((int(l.split("calls=")[1].split(",")[0]) for l in flushes.splitlines()
                      if l.startswith("cmdstat_flushall:")), 0)
        if calls < chaos.count["redis_flush"]:
            problems.append(f"Redis counts {calls} FLUSHALL call(s), fewer than "
                            f"{chaos.count['redis_flush']} verified")
        for p in problems:
            log("PROBLEM: " + p)
        spurious = unexplained_node_lost(stack, run_label, chaos.node_kills)
        if spurious:
            # Not lost, duplicated or wrong, so not a failure here; but a run
            # on a healthy node was given up and its result thrown away.
            log(f"WARNING: {len(spurious)} attempt(s) ended node_lost on a node that was not "
                "killed (a live node marked down, e.g. after a PostgreSQL outage longer than "
                "--node-timeout-s): " + "; ".join(spurious[:5]))
        log(f"total {time.monotonic() - t_start:.0f}s")
        failed = bool(problems)
        c = chaos.count
        summary = (f"accepted={len(accepted)} terminal={terminal} lost={lost} "
                   f"duplicate_results={duplicates} wrong_results={len(wrong)} "
                   f"faults: node_kill={c['node_kill']} gateway_kill={c['gateway_kill']} "
                   f"redis_flush={c['redis_flush']} pg_restart={c['pg_restart']}")
    except (stk.StackError, stk.ApiError, OSError, subprocess.SubprocessError,
            requests.RequestException) as e:
        problems = [f"chaos run broke (no summary): {type(e).__name__}: {e}"]
        log(problems[0])
    finally:
        stack.close()
    return finish(stack, failed, problems, a.keep, summary)


def close_on_signals(stack, before=None):
    """SIGTERM and SIGINT stop the stack's daemons (after before(), when
    given) and exit 128 + the signal: nothing is left running."""
    def on_term(signum, frame):
        if before is not None:
            before()
        stack.close()
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)


def finish(stack, failed, problems, keep, summary):
    """The end of a run whose stack is closed: on failure the daemons' log
    tails, then the problems again (so that they end the output); the
    stack's files removed unless it failed or keep; the summary last.
    The exit status."""
    if failed:
        print(stack.log_tails(40), file=sys.stderr, flush=True)
        for p in problems:
            log("PROBLEM: " + p)
    if failed or keep:
        log(f"stack files kept in {stack.root}")
    else:
        stack.remove()
    if summary:
        print(summary, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
