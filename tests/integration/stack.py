"""A private Kowloon stack for black-box tests: PostgreSQL 15, Redis, one
gateway and two compute nodes, all on free loopback ports, plus a small HTTP
client and the tensor codec the tests use. Everything has a timeout: a test
that waits on a broken server fails, it never hangs."""

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import psycopg
import psycopg.adapt
import psycopg.types.string
import requests

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# KOWLOON_TEST_ROOT points the suite at another build tree (default: this repo)
BUILD_ROOT = os.path.abspath(os.environ.get("KOWLOON_TEST_ROOT", REPO))
GATEWAY_BIN = os.path.join(BUILD_ROOT, "bin", "kowloon-gateway")
COMPUTE_BIN = os.path.join(BUILD_ROOT, "bin", "kowloon-compute")
PLUGIN = os.path.join(BUILD_ROOT, "lib", "kowloon-cuda.so")
PG_BIN = os.environ.get("KOWLOON_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")

TERMINAL = ("succeeded", "failed", "cancelled")
# the gateway's price table (--prices): per CPU-core-hour, per GPU-hour
PRICES = "cpu=3600, cuda=360, cuda:Fake GPU=7200"
HTTP_TIMEOUT = 15  # seconds for any single request
# the gateway's --stats-cache-ms: a test waits this long (polling) for a
# fresh GET /v1/stats/history, not the default 5 s
STATS_CACHE_MS = 1000

DTYPES = {"float32": "<f4", "float64": "<f8", "int32": "<i4"}


class HookReceiver:
    """A webhook receiver on 127.0.0.1 that answers fail_first requests
    with 500, then 204; it keeps every request (headers and body)."""

    def __init__(self, fail_first=0):
        self.fail_first = fail_first
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    outer.requests.append((dict(self.headers.items()), body))
                    n = len(outer.requests)
                self.send_response(500 if n <= outer.fail_first else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self):
        """The bodies received so far, as JSON."""
        with self.lock:
            return [json.loads(b) for _, b in self.requests]

    def count(self):
        with self.lock:
            return len(self.requests)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class StackError(RuntimeError):
    pass


# ---------------------------------------------------------------- tensors

def tensor(arr, b64=False, dtype=None):
    """Wire form of a numpy array: flat "data" or little-endian "b64"."""
    arr = np.asarray(arr)
    if dtype is None:
        dtype = {"f": "float32", "i": "int32"}.get(arr.dtype.kind, "float32")
        if arr.dtype == np.float64:
            dtype = "float32"  # numpy literals default to f64; kernels want f32
    a = np.ascontiguousarray(arr, dtype=DTYPES[dtype])
    t = {"dtype": dtype, "shape": list(a.shape)}
    if b64:
        t["b64"] = base64.b64encode(a.tobytes()).decode("ascii")
    else:
        t["data"] = a.ravel().tolist()
    return t


def decode(t):
    """numpy array from a wire tensor (either encoding); checks its size."""
    assert isinstance(t, dict), f"tensor is not an object: {t!r}"
    assert t.get("dtype") in DTYPES, f"bad dtype in {t!r}"
    shape = t.get("shape")
    assert isinstance(shape, list), f"bad shape in {t!r}"
    n = int(np.prod(shape)) if shape else 1
    dt = np.dtype(DTYPES[t["dtype"]])
    if "b64" in t:
        raw = base64.b64decode(t["b64"], validate=True)
        assert len(raw) == n * dt.itemsize, (
            f"b64 holds {len(raw)} bytes, shape {shape} needs {n * dt.itemsize}")
        a = np.frombuffer(raw, dtype=dt)
    else:
        assert "data" in t, f"tensor has neither data nor b64: {t!r}"
        a = np.asarray(t["data"], dtype=dt)
        assert a.ndim == 1 and a.size == n, (
            f"data has {a.size} elements (flat expected), shape {shape} needs {n}")
    return a.reshape(shape)


# ---------------------------------------------------------------- helpers

RFC3339_MS_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def ts(s):
    """datetime of an RFC3339 UTC timestamp with milliseconds; asserts the form."""
    assert isinstance(s, str) and RFC3339_MS_Z.match(s), f"not RFC3339 with ms and Z: {s!r}"
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")


def status_kb(pid, field):
    """A kB figure (VmRSS, VmHWM) of /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def reset_peak(pid):
    """Sets VmHWM back to the current RSS (Linux >= 4.0; the test's own
    process or root)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


_PORTS_GIVEN = set()


def free_port():
    """A port free now that this process has not handed out before: the
    kernel may give the same free port to two binds in a row, and a caller
    that asks for two (a gateway's API and cluster listeners) binds neither
    until it starts the daemon (a CI run once saw both on one port)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


def tail(path, lines=60):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
        return "\n".join(data.splitlines()[-lines:])
    except OSError as e:
        return f"<cannot read {path}: {e}>"


def log_tails(directory, lines=60, only=None):
    """The last lines of each file in directory (those whose name ends with
    only, when given), each under a header naming it."""
    names = sorted(n for n in os.listdir(directory) if only is None or n.endswith(only))
    return "\n".join(f"----- {n} (last {lines} lines) -----\n" + tail(os.path.join(directory, n), lines)
                     for n in names)


def started(s):
    """A module fixture's stack: yields s started, then stops it and removes
    its directory (kept when KOWLOON_TEST_KEEP is set). A start that fails
    closes what it began."""
    try:
        s.start()
    except Exception:
        s.close()
        raise
    yield s
    s.close()
    if not os.environ.get("KOWLOON_TEST_KEEP"):
        s.remove()


def capacity(client, model):
    """GET /v1/nodes' capacity entries of one GPU model."""
    r = client.get("/v1/nodes")
    assert r.status_code == 200, r.text
    return [c for c in r.json()["capacity"] if c.get("gpu_model") == model]


@contextlib.contextmanager
def nodes_drained(admin, keep=lambda n: False):
    """Every node that takes work (not draining, not kept by keep(node))
    drained while the block runs, then taking work again: what is
    submitted meanwhile waits queued. Nodes drained before (other tests'
    hand-registered ones) stay drained."""
    ids = [n["id"] for n in admin.nodes() if not n["draining"] and not keep(n)]
    try:
        for i in ids:
            r = admin.post(f"/v1/nodes/{i}/drain")
            assert r.status_code == 200, r.text
        yield
    finally:
        for i in ids:
            admin.request("DELETE", f"/v1/nodes/{i}/drain")


def wait_until(pred, timeout, interval=0.1, what="condition"):
    """Polls pred() until it returns something truthy; returns that value."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = pred()
            if last:
                return last
        except (requests.RequestException, OSError, ValueError, ApiError,
                subprocess.SubprocessError) as e:
            last = e
        if time.monotonic() >= deadline:
            raise StackError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def _clean_env():
    """The parent's environment without any KOWLOON_* setting leaking in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KOWLOON_")}


class Proc:
    """A daemon started in its own session so that it (and anything it
    forks) can be signalled as a group."""

    def __init__(self, name, argv, env, log_path, user=None):
        self.name, self.argv, self.env, self.log_path = name, argv, env, log_path
        self.user = user
        self.popen = None

    def start(self):
        log = open(self.log_path, "ab")
        log.write(f"\n===== start {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
        log.flush()
        kw = {}
        if self.user:
            kw = {"user": self.user, "group": self.user, "extra_groups": []}
        self.popen = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=log,
                                      stdin=subprocess.DEVNULL, cwd=REPO,
                                      start_new_session=True, **kw)
        log.close()
        return self

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def kill9(self):
        """SIGKILL the whole group; waits for the process to be reaped."""
        if not self.popen:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, sig=signal.SIGTERM, grace=8):
        if not self.popen:
            return
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # anything left in the group (children) goes too
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


# ---------------------------------------------------------------- client

class ApiError(AssertionError):
    pass


class Client:
    """HTTP client for one API key. Remembers the jobs it submitted so the
    test harness can cancel leftovers between tests."""

    def __init__(self, base, key=None, tracker=None):
        self.base = base.rstrip("/")
        self.key = key
        self.tracker = tracker if tracker is not None else []
        self.http = requests.Session()

    def headers(self, extra=None):
        h = {}
        if self.key:
            h["Authorization"] = f"Bearer {self.key}"
        if extra:
            h.update(extra)
        return h

    def request(self, method, path, headers=None, timeout=HTTP_TIMEOUT, **kw):
        return self.http.request(method, self.base + path, headers=self.headers(headers),
                                 timeout=timeout, allow_redirects=False, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    # -- jobs
    def post_job(self, body):
        """POSTs a job body (a dict) and returns the raw response."""
        r = self.post("/v1/jobs", json=body)
        if r.status_code == 202:
            try:
                self.tracker.append((self, r.json()["id"]))
            except (ValueError, KeyError, TypeError):
                pass
        return r

    def submit(self, kernel, params=None, inputs=None, **kw):
        """Submits a job; asserts 202; returns the job object."""
        body = {"kernel": kernel}
        if params is not None:
            body["params"] = params
        if inputs is not None:
            body["inputs"] = inputs
        body.update(kw)
        r = self.post_job(body)
        if r.status_code != 202:
            raise ApiError(f"submit {kernel} -> {r.status_code} {r.text[:500]}")
        return r.json()

    def job(self, job_id):
        r = self.get(f"/v1/jobs/{job_id}")
        if r.status_code != 200:
            raise ApiError(f"GET job {job_id} -> {r.status_code} {r.text[:500]}")
        return r.json()

    def wait(self, job_id, timeout=30, states=TERMINAL):
        """Polls GET /v1/jobs/{id} until its state is in states."""
        deadline = time.monotonic() + timeout
        j = None
        while True:
            j = self.job(job_id)
            if j.get("state") in states:
                return j
            if time.monotonic() >= deadline:
                raise ApiError(f"job {job_id} not in {states} after {timeout}s: {j}")
            time.sleep(0.05)

    def run(self, kernel, params=None, inputs=None, timeout=30, **kw):
        """Submits and waits; asserts the job succeeded; returns the job."""
        j = self.submit(kernel, params, inputs, **kw)
        j = self.wait(j["id"], timeout)
        if j["state"] != "succeeded":
            raise ApiError(f"job {j['id']} ended {j['state']}: {j.get('error')}")
        return j

    def result(self, job_id, encoding=None):
        q = f"?encoding={encoding}" if encoding else ""
        return self.get(f"/v1/jobs/{job_id}/result{q}")

    def outputs(self, job_id, encoding="json"):
        r = self.result(job_id, encoding)
        if r.status_code != 200:
            raise ApiError(f"result {job_id} -> {r.status_code} {r.text[:500]}")
        body = r.json()
        assert body.get("id") == job_id, body
        return {k: v for k, v in body["outputs"].items()}

    def cancel(self, job_id):
        return self.post(f"/v1/jobs/{job_id}/cancel")

    def list(self, **params):
        return self.get("/v1/jobs", params=params)

    def nodes(self):
        r = self.get("/v1/nodes")
        if r.status_code != 200:
            raise ApiError(f"GET /v1/nodes -> {r.status_code} {r.text[:300]}")
        return r.json()["nodes"]


# ---------------------------------------------------------------- stack

# psql()'s rows are strings as psql prints them: every type PostgreSQL
# sends is loaded as its text.
_PG_TEXT = psycopg.adapt.AdaptersMap(psycopg.adapters)
for _t in psycopg.adapters.types:
    for _oid in (_t.oid, getattr(_t, "array_oid", 0)):
        if _oid:
            _PG_TEXT.register_loader(_oid, psycopg.types.string.TextLoader)


def _pg_rows(conn, sql):
    """The rows of every result of sql, in order."""
    rows = []
    with conn.cursor() as cur:
        cur.execute(sql)
        while True:
            if cur.description is not None:
                rows.extend(cur.fetchall())
            if not cur.nextset():
                return rows


class Stack:
    """Owns every process of the test cluster and its temporary directory."""

    # the stacks started and not yet closed (a failed test prints their
    # log tails: tests/integration/conftest.py)
    live = set()
    # other directories whose *.log files a failed test prints the tails of
    # (the node tests' kowloon-compute processes beside a FakeGateway)
    log_dirs = set()

    def __init__(self, node_names=("node-a", "node-b"), node_timeout_s=3, gateway_env=None):
        """gateway_env: KOWLOON_* settings every gateway of this stack gets
        (a module's own stack shortens a period its tests wait out)."""
        for b in (GATEWAY_BIN, COMPUTE_BIN):
            if not os.access(b, os.X_OK):
                raise StackError(f"{b} is missing; run `make all` first")
        self.root = tempfile.mkdtemp(prefix="kowloon-it-")
        os.chmod(self.root, 0o755)  # postgres must traverse it
        self.logs = os.path.join(self.root, "logs")
        os.makedirs(self.logs)
        self.procs = {}
        self._pg, self._pg_mu, self._pg_port, self._pg_timeout = None, threading.Lock(), None, None
        self.node_names = list(node_names)
        self.node_ports = {}
        self.node_timeout_s = node_timeout_s
        self.gateway_extra = dict(gateway_env or {})
        self.cluster_token = uuid.uuid4().hex + uuid.uuid4().hex
        self.pg_port = self.redis_port = self.gw_port = self.gw_cluster_port = None
        self.tracker = []  # (client, job_id) of every job submitted
        self.keys = {}
        self.is_root = os.geteuid() == 0

    # -- lifecycle
    def start(self):
        Stack.live.add(self)
        self.start_postgres()
        self.start_redis()
        self.gw_port = free_port()
        # the listener nodes call; the public one (base) serves tenants only
        self.gw_cluster_port = free_port()
        self.gateway = self.start_gateway("gateway", self.gw_port)
        self.base = f"http://127.0.0.1:{self.gw_port}"
        self.cluster_base = f"http://127.0.0.1:{self.gw_cluster_port}"
        self.keys["A"] = self.create_key("A")
        self.keys["B"] = self.create_key("B")
        self.keys["admin"] = self.create_key("ops", admin=True)
        self.admin = self.client("admin")
        for name in self.node_names:
            self.node_ports[name] = free_port()
            self.start_node(name)
        self.wait_nodes_up(self.node_names, timeout=30)
        return self

    def close(self):
        Stack.live.discard(self)
        with self._pg_mu:
            if self._pg is not None:
                self._pg_drop()
        for name in list(self.procs)[::-1]:
            p = self.procs[name]
            p.stop(signal.SIGINT if name == "postgres" else signal.SIGTERM)

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tails(self, lines=60):
        return log_tails(self.logs, lines)

    def _proc(self, name, argv, env, user=None):
        p = Proc(name, argv, env, os.path.join(self.logs, name + ".log"), user=user)
        self.procs[name] = p
        return p.start()

    def _die_if_dead(self, p):
        if not p.alive():
            raise StackError(f"{p.name} exited with {p.popen.returncode}:\n{tail(p.log_path)}")

    # -- PostgreSQL
    def _pg_run(self, argv, timeout=60):
        kw = {"user": "postgres", "group": "postgres", "extra_groups": []} if self.is_root else {}
        r = subprocess.run(argv, env=_clean_env(), capture_output=True, text=True,
                           timeout=timeout, cwd=self.root, **kw)
        if r.returncode != 0:
            raise StackError(f"{argv[0]} failed ({r.returncode}): {r.stdout}\n{r.stderr}")
        return r

    def start_postgres(self):
        self.pg_port = free_port()
        data = os.path.join(self.root, "pgdata")
        sock = os.path.join(self.root, "pgsock")
        os.makedirs(data, mode=0o700)
        os.makedirs(sock, mode=0o755)
        if self.is_root:
            for d in (data, sock):
                shutil.chown(d, "postgres", "postgres")
        self._pg_run([os.path.join(PG_BIN, "initdb"), "-D", data, "-A", "trust",
                      "-U", "kowloon", "-E", "UTF8", "--no-sync"])
        p = self._proc("postgres", [os.path.join(PG_BIN, "postgres"), "-D", data,
                                    "-p", str(self.pg_port), "-k", sock,
                                    "-c", "listen_addresses=127.0.0.1",
                                    "-c", "fsync=off", "-c", "max_connections=200"],
                       _clean_env(), user="postgres" if self.is_root else None)

        def ready():
            self._die_if_dead(p)
            return subprocess.run([os.path.join(PG_BIN, "pg_isready"), "-h", "127.0.0.1",
                                   "-p", str(self.pg_port), "-U", "kowloon"], capture_output=True,
                                  timeout=10).returncode == 0
        wait_until(ready, 30, 0.2, "postgres to accept connections")
        r = subprocess.run([os.path.join(PG_BIN, "createdb"), "-h", "127.0.0.1", "-p",
                            str(self.pg_port), "-U", "kowloon", "kowloon"],
                           capture_output=True, text=True, timeout=30, env=_clean_env())
        if r.returncode != 0:
            raise StackError(f"createdb failed: {r.stderr}")
        self.database_url = f"postgresql://kowloon@127.0.0.1:{self.pg_port}/kowloon"

    def psql_background(self, sql):
        """Starts psql on sql without waiting for it; returns the Popen."""
        return subprocess.Popen(["psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "kowloon",
                                 "-d", "kowloon", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=dict(_clean_env(), PGCONNECT_TIMEOUT="5"))

    def psql(self, sql, timeout=15):
        """Runs SQL (one statement or several, autocommitted); returns the
        rows of every result as lists of strings, as `psql -A -t` prints
        them (NULL as "", a row that prints as an empty line left out).
        One connection per stack (psycopg), made again after it broke: a
        psql process and a server backend per call were a tenth of the
        suite's CPU."""
        with self._pg_mu:
            try:
                conn = self._pg_conn()
                if self._pg_timeout != timeout:
                    conn.execute(f"SET statement_timeout = {int(timeout * 1000)}")
                    self._pg_timeout = timeout
                rows = _pg_rows(conn, sql)
            except psycopg.Error as e:
                if self._pg is not None and self._pg.broken:
                    self._pg_drop()
                raise StackError(f"psql failed: {sql!r}: {e}") from None
        text = "\n".join("\t".join("" if v is None else v for v in r) for r in rows)
        return [line.split("\t") for line in text.splitlines() if line != ""]

    def _pg_conn(self):
        """The connection psql() uses: made on first use, and again when the
        last one broke or PostgreSQL moved (a restart on another port); a
        connection a restart closed is found by a ping and made again."""
        if self._pg is not None and (self._pg_port != self.pg_port or self._pg.closed):
            self._pg_drop()
        if self._pg is not None:
            try:
                self._pg.execute("")
            except psycopg.Error:
                self._pg_drop()
        if self._pg is None:
            self._pg = psycopg.connect(host="127.0.0.1", port=self.pg_port, user="kowloon",
                                       dbname="kowloon", connect_timeout=5, autocommit=True,
                                       context=_PG_TEXT)
            self._pg_port, self._pg_timeout = self.pg_port, None
        return self._pg

    def _pg_drop(self):
        try:
            self._pg.close()
        except psycopg.Error:
            pass
        self._pg = None

    def redis_cmd(self, *args):
        """One Redis command over RESP; returns the first reply line."""
        cmd = f"*{len(args)}\r\n" + "".join(f"${len(str(a))}\r\n{a}\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.redis_port), timeout=5) as s:
            s.sendall(cmd.encode())
            return s.recv(4096).decode("latin-1").split("\r\n")[0]

    def psql_value(self, sql):
        rows = self.psql(sql)
        return rows[0][0] if rows else None

    def count_jobs(self):
        return int(self.psql_value("SELECT count(*) FROM jobs"))

    # -- Redis
    def start_redis(self):
        self.redis_port = free_port()
        rdir = os.path.join(self.root, "redis")
        os.makedirs(rdir)
        p = self._proc("redis", ["redis-server", "--port", str(self.redis_port),
                                 "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                 "--dir", rdir], _clean_env())

        def ready():
            self._die_if_dead(p)
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        wait_until(ready, 20, 0.1, "redis to answer PING")
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"

    # -- gateway
    def gateway_env(self, **extra):
        env = _clean_env()
        env.update({
            "KOWLOON_DATABASE_URL": self.database_url,
            "KOWLOON_REDIS_URL": self.redis_url,
            "KOWLOON_CLUSTER_TOKEN": self.cluster_token,
            "KOWLOON_NODE_TIMEOUT_S": str(self.node_timeout_s),
            "KOWLOON_LOG_LEVEL": "debug",
            # the suite drives one key per tenant hard; rate limits stay on
            # but generous (test_access sets tight ones per tenant)
            "KOWLOON_RATE_LIMIT_RPS": "1000",
            "KOWLOON_RATE_LIMIT_BURST": "1000",
            "KOWLOON_READ_RATE_LIMIT_RPS": "1000",
            "KOWLOON_READ_RATE_LIMIT_BURST": "1000",
            # every test refused for its key comes from 127.0.0.1: failed
            # authentications are limited only where a test asks for it
            "KOWLOON_AUTH_FAIL_BURST": "0",
            # every gateway of the stack shares one blob store, as gateways
            # on several hosts share one on a shared filesystem
            "KOWLOON_BLOB_DIR": self.blob_dir,
            # usage is priced (test_usage): a CPU-second costs 1, a
            # GPU-second 0.1, or 2 on the fake nodes' "Fake GPU"
            "KOWLOON_PRICES": PRICES,
            "KOWLOON_CURRENCY": "EUR",
            # webhook receivers of the tests listen on 127.0.0.1 (and only
            # there: the rest of loopback stays refused), and retry soon
            "KOWLOON_WEBHOOK_ALLOW_NETS": "127.0.0.1/32",
            "KOWLOON_WEBHOOK_RETRY_BASE_MS": "3000",
            "KOWLOON_STATS_CACHE_MS": str(STATS_CACHE_MS),
        })
        env.update({k: str(v) for k, v in self.gateway_extra.items()})
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start_gateway(self, name, port, cluster_port=None, **extra_env):
        """Starts a gateway (serve) and waits for /readyz; returns its Proc.
        Its cluster listener is the stack's own for "gateway" (nodes keep
        calling it across restarts), cluster_port or a free one for others
        (Proc.cluster_base says where)."""
        if cluster_port is None:
            cluster_port = self.gw_cluster_port if name == "gateway" else free_port()
        env = self.gateway_env(KOWLOON_LISTEN=f"127.0.0.1:{port}",
                               KOWLOON_CLUSTER_LISTEN=f"127.0.0.1:{cluster_port}", **extra_env)
        p = self._proc(name, [GATEWAY_BIN, "serve"], env)
        url = f"http://127.0.0.1:{port}/readyz"

        def ready():
            self._die_if_dead(p)
            return requests.get(url, timeout=2).status_code == 200
        try:
            wait_until(ready, 30, 0.1, f"{name} /readyz")
        except StackError as e:
            raise StackError(f"{e}\n{tail(p.log_path)}")
        p.cluster_base = f"http://127.0.0.1:{cluster_port}"
        return p

    @contextlib.contextmanager
    def second_gateway(self, name="gateway-2", **extra_env):
        """Another gateway on the same PostgreSQL, Redis and blob store, as a
        second replica behind a load balancer would be; yields its base URL
        and stops it afterwards."""
        port = free_port()
        proc = self.start_gateway(name, port, **extra_env)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.stop()
            self.procs.pop(name, None)

    def gateway_cli(self, *args, timeout=30, input=None):
        return subprocess.run([GATEWAY_BIN, *args], env=self.gateway_env(), capture_output=True,
                              text=True, timeout=timeout, cwd=REPO, input=input)

    def create_key(self, tenant, admin=False):
        args = ["keys", "create", "--tenant", tenant] + (["--admin"] if admin else [])
        r = self.gateway_cli(*args)
        if r.returncode != 0:
            raise StackError(f"keys create {tenant} failed ({r.returncode}): {r.stderr}")
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        if len(lines) != 1:
            raise StackError(f"keys create must print exactly one line, got {r.stdout!r}")
        return lines[0].strip()

    def revoke_key(self, key):
        """Revokes a whole key the way scripts should: on stdin, never in
        the process's arguments."""
        return self.gateway_cli("keys", "revoke", "-", input=key + "\n")

    def client(self, who=None, key=None, base=None):
        """A Client for a named key ("A", "B", "admin"), an explicit key, or none."""
        if who is not None:
            key = self.keys[who]
        return Client(base or self.base, key, self.tracker)

    def new_tenant(self, prefix):
        """A tenant no test has used (PREFIX-<8 hex digits>) and a Client with
        a key of it: (name, client)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        return name, self.client(key=self.create_key(name))

    # -- nodes
    @property
    def blob_dir(self):
        """The gateway's blob store, which the nodes share (one host)."""
        return os.path.join(self.root, "blobs")

    def plant_blob(self, bid, data):
        """Writes data as blob bid's file in the shared blob folder, as a
        node or an operator might (no check that it hashes to bid); its path."""
        d = os.path.join(self.blob_dir, "sha256", bid[7:9])
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, bid[7:])
        with open(path, "wb") as f:
            f.write(data)
        return path

    @property
    def state_dir(self):
        """Where the stack's nodes keep their credentials (--state-dir)."""
        return os.path.join(self.root, "node-state")

    def start_node(self, name, port=None, backend="auto", extra_args=(), proc_name=None,
                   shared_blobs=True, env_extra=None):
        """Starts (or restarts) a compute node; does not wait for it to register.
        With shared_blobs it gets the gateway's blob directory (it maps inputs
        from it and writes outputs to it); without, it moves every byte over
        HTTP (--blob-dir none). It calls the gateway's cluster listener and
        keeps its credential in the stack's state directory, so that a
        restart under the same name is known at once."""
        if port is None:
            port = self.node_ports[name]
        env = _clean_env()
        env.update({"KOWLOON_CLUSTER_TOKEN": self.cluster_token, "KOWLOON_LOG_LEVEL": "debug"})
        env.update(env_extra or {})
        argv = [COMPUTE_BIN, "--slots", "1", "--backend", backend, "--name", name,
                "--listen", f"127.0.0.1:{port}", "--gateway", self.cluster_base,
                "--state-dir", self.state_dir,
                "--heartbeat-s", "1", "--blob-dir", self.blob_dir if shared_blobs else "none",
                *extra_args]
        return self._proc(proc_name or name, argv, env)

    @contextlib.contextmanager
    def fake_node(self, prefix, **kw):
        """A scripted node (fakenode.FakeNode; keywords as there) named
        PREFIX-<6 hex digits>, registered for the with-block and deregistered
        after it."""
        # imported here: tests/chaos loads this file alone, its folder not on sys.path
        from fakenode import FakeNode
        node = FakeNode(self.cluster_base, self.cluster_token,
                        f"{prefix}-{uuid.uuid4().hex[:6]}", **kw).start()
        try:
            yield node
        finally:
            node.close()

    def node_credential(self, name):
        """The credential a real node of the stack keeps in its state file."""
        path = os.path.join(self.state_dir, name + ".credential")
        with open(path) as f:
            return f.read().strip()

    def node_client(self, name):
        """A Client on the cluster listener acting as the stack's node name
        (its own credential)."""
        return Client(self.cluster_base, self.node_credential(name))

    def register_node(self, name, backend="cpu", kernels=("sleep",), slots=1, credential=None,
                      token=None, gpus=None, drain=True, base=None):
        """Registers a node by hand on the cluster listener (base: another
        gateway's; what a scripted node does); returns the response.
        Drained at once unless drain is False: a node that never runs
        anything must not be given the other tests' jobs while it counts
        as up."""
        body = {"name": name, "url": "http://127.0.0.1:9", "backend": backend, "slots": slots,
                "kernels": list(kernels), "gpus": gpus or []}
        if credential:
            body["credential"] = credential
        r = requests.post((base or self.cluster_base) + "/v1/cluster/nodes/register", json=body,
                          headers={"Authorization": f"Bearer {token or self.cluster_token}"},
                          timeout=HTTP_TIMEOUT)
        if r.status_code == 200 and drain:
            d = self.admin.post(f"/v1/nodes/{r.json()['id']}/drain")
            assert d.status_code == 200, d.text
        return r

    def node_url(self, name):
        return f"http://127.0.0.1:{self.node_ports[name]}"

    def kill_node(self, name):
        self.procs[name].kill9()

    def nodes_by_name(self):
        return {n["name"]: n for n in self.admin.nodes()}

    def wait_run_on_node(self, job, timeout=10):
        """Waits until the job's node reports the current attempt's run:
        "running" in the gateway only means the job was claimed, and a fault
        injected before the run reaches its node tests something else."""
        url = f"{self.node_url(job['node'])}/v1/runs/{job['id']}.{job['attempts']}"
        hdr = {"Authorization": "Bearer " + self.cluster_token}

        def started():
            r = requests.get(url, headers=hdr, timeout=2)
            return r.status_code == 200 and r.json().get("state") == "running"
        wait_until(started, timeout, 0.05, f"run {job['id']} on {job['node']}")
        return job

    def wait_nodes_up(self, names, timeout=30):
        def up():
            for n in names:
                p = self.procs.get(n)
                if p is not None:
                    self._die_if_dead(p)
            by = self.nodes_by_name()
            return all(by.get(n, {}).get("state") == "up" for n in names)
        wait_until(up, timeout, 0.2, f"nodes {names} up")

    def wait_idle(self, timeout=15):
        """Cancels every job the tests left unfinished and waits until no
        node reports a running job. Returns True when the cluster is idle."""
        deadline = time.monotonic() + timeout
        for client, job_id in self.tracker:
            if time.monotonic() > deadline:
                break
            try:
                r = client.get(f"/v1/jobs/{job_id}", timeout=3)
                if r.status_code == 200 and r.json().get("state") not in TERMINAL:
                    client.request("POST", f"/v1/jobs/{job_id}/cancel", timeout=3)
            except (requests.RequestException, ValueError):
                pass
        self.tracker.clear()

        def idle():
            r = self.admin.get("/v1/nodes", timeout=3)
            return r.status_code == 200 and all(
                n.get("running", 0) == 0 for n in r.json()["nodes"] if n.get("state") == "up")
        try:
            wait_until(idle, max(1.0, deadline - time.monotonic()), 0.2, "nodes to be idle")
            return True
        except (StackError, ApiError):
            return False
