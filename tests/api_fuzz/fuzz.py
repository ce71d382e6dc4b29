#!/usr/bin/env python3
"""API fuzzing of the gateway with schemathesis against openapi/openapi.yaml.

Starts a throwaway stack (PostgreSQL, Redis, one gateway, one compute node
used only to seed jobs, all on free loopback ports; see
tests/integration/stack.py), then runs `schemathesis run` over every
operation of the spec in rounds, one per credential and listener (the
cluster operations, tag `cluster`, on the gateway's cluster listener; the
rest on its public one):

  cluster    node registration with the cluster token, then every other
             cluster operation with the credential of a node the fuzz
             registered (hooks.py points a path's node id at that node)
  tenant     every other operation with a valid tenant key (the admin
             operations must refuse it: no 2xx there)
  anonymous  every operation without an Authorization header (no 2xx but
             on /healthz, /readyz, /openapi.yaml and the dashboard's files)
  crossed    tenant operations with the cluster token, cluster operations
             with a tenant key, cluster operations but registration with
             the cluster token (each must refuse the other's credential)
  admin      the admin operations (tag `admin`) with an admin key; last,
             as it may change any tenant's limits and revoke keys

The tenant round (without GET /v1/events), two rounds of GET /v1/events
alone (its cases hold a second each: one for the examples and coverage
phases, one for fuzzing) and the anonymous and crossed rounds, which
change nothing, run side by side, each one schemathesis process; tenant A,
whose key the tenant rounds send, has no rate limit for the run.

Every response goes through all of schemathesis's checks (no 5xx; status
code, content type, headers and body conform to the spec; schema-invalid
requests refused, schema-valid ones accepted, auth enforced, 405 + Allow
for other methods...), with the exceptions set per operation in
schemathesis.toml. Before the admin round, "pinned" requests validate the
responses that random ids cannot reach: the result, job and cancel replies
of seeded jobs in every terminal state, filtered lists, the node list.

The nodes that the cluster round registers (their URLs are rewritten to a
loopback port where nothing listens, see hooks.py) are deleted right after
that round, before any job is queued, and the whole stack is thrown away at
the end. The gateway must still be alive and ready after every round.

Prints one totals line:
  api-fuzz: requests=N 2xx=.. 3xx=.. 4xx=.. 5xx=0 other=0 failures=0 ...
and exits 1 when there is a failure, a 5xx, a dead gateway, or fewer
requests than the mode's minimum (short: 1000).

  python3 tests/api_fuzz/fuzz.py            # short (inside `make test`)
  python3 tests/api_fuzz/fuzz.py --full     # `make fuzz-api`
Environment: KOWLOON_FUZZ_SEED (a fixed seed; short mode defaults to a fixed
one so `make test` is reproducible), KOWLOON_FUZZ_KEEP=1 (keep the stack's
files), KOWLOON_TEST_ROOT (another build tree, as for the integration tests).
"""

import argparse
import collections
import concurrent.futures
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import uuid
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SPEC = os.path.join(REPO, "openapi", "openapi.yaml")
CONFIG = os.path.join(HERE, "schemathesis.toml")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import stack as stk  # noqa: E402  (the integration suite's stack; not edited here)

SEED_NODE = "fuzz-seed"
# The fuzz gateway's per-key rate limits (writes and reads alike), set
# explicitly: the pinned requests check a 429 on purpose, with tenant B's
# key. The fuzz should reach the handlers, not the limiter: tenant A, whose
# key the tenant rounds use, has no rate limit (unthrottle), and the admin
# round, which may set any tenant's limits (its own included), stays under
# the defaults (CLIENT_RATE).
GATEWAY_ENV = {"KOWLOON_RATE_LIMIT_RPS": "50", "KOWLOON_RATE_LIMIT_BURST": "100",
               "KOWLOON_READ_RATE_LIMIT_RPS": "50", "KOWLOON_READ_RATE_LIMIT_BURST": "100"}
CLIENT_RATE = "40/s"

# max_examples: per operation and phase; workers: schemathesis's own (more
# than 1 is not safe: Hypothesis fails in threads now and then); max_time:
# seconds of each round
# (its fuzzing and stateful phases repeat until they are spent; none: one
# pass); cluster_passes: cluster rounds, each followed by removing the nodes
# it registered; timeout: the hard limit of one schemathesis process (over
# max_time: the last test case and the reports still have to finish).
MODES = {
    "short": {"max_examples": 25, "max_time": {}, "cluster_passes": 1, "timeout": 300,
              "workers": 1, "min_requests": 1000, "seed": 20261202},
    "full": {"max_examples": 200, "cluster_passes": 3, "timeout": 600, "workers": 1,
             "max_time": {"cluster": 40, "tenant": 300, "tenant-delete": 30, "anonymous": 90, "crossed-tenant": 45,
                          "anonymous-cluster": 30, "crossed-cluster": 30, "crossed-token": 30,
                          "events-cover": 120, "events-fuzz": 120,
                          "admin": 90},
             "min_requests": 10000, "seed": None},
}


def log(msg):
    print(msg, flush=True)


class FuzzError(Exception):
    pass


class FuzzStack(stk.Stack):
    """The integration stack, with the gateway settings of GATEWAY_ENV."""

    def gateway_env(self, **extra):
        return super().gateway_env(**{**GATEWAY_ENV, **extra})


# ---------------------------------------------------------------- seeding

def seed_jobs(s):
    """Jobs of tenant A in each terminal state, run by the seed node.
    Returns {state: [job ids]}."""
    A = s.client("A")
    out = collections.defaultdict(list)
    x = [1.0, 2.0, 3.0, 4.0]
    j = A.run("saxpy", {"a": 2.0}, {"x": stk.tensor(x), "y": stk.tensor(x)},
              labels={"fuzz": "seed", "kind": "saxpy"})
    out[j["state"]].append(j["id"])
    j = A.run("gemm", {"alpha": 1.0}, {"a": stk.tensor([[1.0, 2.0], [3.0, 4.0]], b64=True),
                                       "b": stk.tensor([[1.0, 0.0], [0.0, 1.0]], b64=True)})
    out[j["state"]].append(j["id"])
    j = A.run("reduce", {"op": "mean"}, {"x": stk.tensor([[1.0, 2.0], [3.0, 4.0]])})
    out[j["state"]].append(j["id"])
    # a run that ends failed (timeout) and one cancelled while running
    f = A.submit("sleep", {"seconds": 30}, timeout_s=1, max_attempts=1, labels={"fuzz": "seed"})
    c = A.submit("sleep", {"seconds": 30}, max_attempts=1)
    A.wait(c["id"], timeout=30, states=("running",))
    r = A.cancel(c["id"])
    if r.status_code != 200:
        raise FuzzError(f"cancel of seed job {c['id']} -> {r.status_code} {r.text[:300]}")
    for jid in (f["id"], c["id"]):
        j = A.wait(jid, timeout=45)
        out[j["state"]].append(jid)
    missing = {"succeeded", "failed", "cancelled"} - set(out)
    if missing:
        raise FuzzError(f"seeding did not reach the states {sorted(missing)}: {dict(out)}")
    return out


def stop_seed_node(s):
    """SIGTERM: the node drains, deregisters and exits; it must show down."""
    s.procs[SEED_NODE].stop()

    def down():
        return all(n["state"] == "down" for n in s.admin.nodes())
    stk.wait_until(down, 30, 0.2, "the seed node to be down")


# ---------------------------------------------------------------- rounds

def closed_port():
    """A loopback port bound by us but not listening: connections to it are
    refused for as long as the socket lives."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


OPEN_PATHS = ("/healthz", "/readyz", "/openapi.yaml", "/", "/ui")
# the dashboard's static files (tag dashboard): public, they hold no data
OPEN_PREFIX = "/ui/"
# what a tenant key must not pass: the admin operations, and /metrics (an
# admin key on the public listener)
ADMIN_PATH = re.compile(r"^/v1/(tenants|keys)(/|$)|^/v1/nodes/[^/]+/drain$|^/metrics$")
REGISTER = "/v1/cluster/nodes/register"
FUZZ_NODE = "fuzz-node"


CHILDREN = []  # the schemathesis process running now, for SIGTERM


def all_but_open(path):
    return path not in OPEN_PATHS and not path.startswith(OPEN_PREFIX)


def all_but_register(path):
    """What the cluster token must not pass on the cluster listener: all but
    registration and the open paths."""
    return all_but_open(path) and path != REGISTER


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def unthrottle(s, tenant):
    """Lifts tenant's rate limit (rate_rps 0: none), from its next request on."""
    r = s.admin.post("/v1/tenants", json={"name": tenant, "rate_rps": 0})
    if r.status_code != 200 or r.json().get("rate_rps") != 0:
        raise FuzzError(f"POST /v1/tenants {tenant} rate_rps=0 -> {r.status_code} {r.text[:200]}")


def run_round(name, s, workdir, mode, seed, auth, filters, rate=None, refused=None, url=None,
              wait=1):
    """One `schemathesis run` against url (the public listener by default);
    returns its figures. refused(path): true for the paths the credential
    must not pass, where a 2xx is a failure (an authentication or
    authorization bypass). wait: the seconds of every Prefer: wait (hooks.py)."""
    rdir = os.path.join(workdir, name)
    os.makedirs(rdir, exist_ok=True)
    argv = ["schemathesis", "--config-file", CONFIG, "run", SPEC, "--url", url or s.base,
            "--checks", "all", "--max-examples", str(mode["max_examples"]),
            "--seed", str(seed), "--workers", str(mode["workers"]),
            "--report", "har,json", "--report-dir", rdir,
            "--request-timeout", "15", "--continue-on-failure", "--no-color",
            "--generation-database", "none", "--generation-allow-x00", "false", *filters]
    max_time = mode["max_time"].get(name.split(".")[0])
    if max_time:
        argv += ["--max-time", str(max_time)]
    if auth:
        argv += ["--header", f"Authorization: Bearer {auth}"]
    if rate:
        argv += ["--rate-limit", rate]
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SCHEMATHESIS_HOOKS"] = "hooks"
    env.setdefault("KOWLOON_FUZZ_NODE_URL", "http://127.0.0.1:9/")
    env["KOWLOON_FUZZ_PROTECTED_TENANTS"] = "A,B,ops"  # the tenants of Stack's keys
    env["KOWLOON_FUZZ_WAIT"] = str(wait)
    out_path = os.path.join(rdir, "schemathesis.out")
    t0 = time.monotonic()
    with open(out_path, "w") as out:
        p = subprocess.Popen(argv, cwd=rdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        CHILDREN.append(p)
        try:
            rc = p.wait(timeout=mode["timeout"])
        except subprocess.TimeoutExpired:
            kill_group(p)
            rc = "timeout"
        finally:
            CHILDREN.remove(p)
    wall = time.monotonic() - t0
    statuses = collections.Counter()
    bypass = []
    for har in glob.glob(os.path.join(rdir, "har-*.json")):
        with open(har) as f:
            for e in json.load(f)["log"]["entries"]:
                code = int(e["response"]["status"])
                statuses[code] += 1
                path = urlsplit(e["request"]["url"]).path
                if refused and 200 <= code < 300 and refused(path):
                    bypass.append(f"{e['request']['method']} {path} -> {code}")
    report = {}
    for rep in glob.glob(os.path.join(rdir, "json-*.json")):
        with open(rep) as f:
            report = json.load(f)
    failures = sum(f.get("count", 1) for f in report.get("failures", [])) + len(bypass)
    errors = len(report.get("errors", []))
    fig = {"name": name, "rc": rc, "wall": wall, "statuses": statuses, "failures": failures,
           "errors": errors, "generated": report.get("test_cases", {}).get("generated", 0),
           "out": out_path, "failure_kinds": report.get("failures", []),
           "operations": report.get("operations", {})}
    ok = rc == 0 and failures == 0 and errors == 0
    for b in bypass[:20]:
        log(f"    accepted without a valid credential: {b}")
    log(f"  {name:<16} {sum(statuses.values()):>6} requests  {classes_str(statuses)}  "
        f"failures={failures} errors={errors}  ops={fig['operations'].get('tested', '?')}  "
        f"{wall:.0f}s  {'ok' if ok else 'FAILED (exit ' + str(rc) + ')'}")
    if not ok:
        with open(out_path) as f:
            text = f.read()
        cut = text.find("=== FAILURES")
        if cut < 0:
            cut = text.find("=== ERRORS")
        log(text[max(0, cut - 2):] if cut >= 0 else text[-6000:])
    return fig


def classes_str(statuses):
    c = status_classes(statuses)
    return " ".join(f"{k}={c[k]}" for k in ("2xx", "3xx", "4xx", "5xx", "other"))


def status_classes(statuses):
    c = collections.Counter()
    for code, n in statuses.items():
        k = f"{code // 100}xx" if 200 <= code < 600 else "other"
        c[k] += n
    return c


def check_gateway(s, after):
    if not s.gateway.alive():
        raise FuzzError(f"the gateway died during {after} (exit {s.gateway.popen.returncode}):\n"
                        f"{stk.tail(s.gateway.log_path)}")
    r = stk.requests.get(s.base + "/readyz", timeout=10)
    if r.status_code != 200:
        raise FuzzError(f"/readyz after {after}: {r.status_code} {r.text[:300]}")


def register_fuzz_node(s, node=None):
    """The node whose credential the cluster round fuzzes with: (id,
    credential), registered again with the credential it holds (node) when
    it has one. Drained: nothing is placed on it."""
    r = s.register_node(FUZZ_NODE, backend="cuda", gpus=[{"name": "Fuzz GPU", "memory_bytes": 1}],
                        credential=node[1] if node else None)
    if r.status_code != 200:
        raise FuzzError(f"registering the fuzz node: {r.status_code} {r.text[:300]}")
    return r.json()["id"], r.json().get("credential") or node[1]


def remove_fuzzed_nodes(s, keep=()):
    """Removes the nodes a round registered (but keep): marked down and
    deleted from PostgreSQL (the fuzz has none of their credentials to
    deregister them with; no job is queued while they exist, and the
    scheduler rereads the nodes every second). Returns how many there
    were."""
    names = ", ".join(f"'{n}'" for n in (SEED_NODE, *keep))
    n = int(s.psql_value(f"SELECT count(*) FROM nodes WHERE name NOT IN ({names})"))
    s.psql(f"UPDATE nodes SET state = 'down', credential_hash = NULL WHERE name NOT IN ({names});"
           f" DELETE FROM nodes WHERE name NOT IN ({names})")
    up = int(s.psql_value(f"SELECT count(*) FROM nodes WHERE state = 'up' AND name NOT IN ({names})"))
    if up:
        raise FuzzError(f"{up} node(s) still up after removing the fuzzed ones")
    return n


# ---------------------------------------------------------------- pinned checks

class Pinned:
    """Requests with chosen data, validated like the fuzzed ones."""

    def __init__(self, s, node=None):
        import schemathesis
        from schemathesis.checks import not_a_server_error
        from schemathesis.specs.openapi import checks as oc
        self.s = s
        self.node = node   # (id, credential) of the fuzz node
        self.schema = schemathesis.openapi.from_path(SPEC)
        self.checks = [not_a_server_error, oc.status_code_conformance, oc.content_type_conformance,
                       oc.response_headers_conformance, oc.response_schema_conformance]
        self.statuses = collections.Counter()
        self.failures = []

    def call(self, path, method, key, expect, path_parameters=None, query=None, body=None):
        op = self.schema[path][method]
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        kw = {"path_parameters": path_parameters, "query": query, "headers": headers}
        if body is not None:
            kw["body"] = body
            kw["media_type"] = "application/json"
        case = op.Case(**kw)
        what = f"{method} {path} {path_parameters or ''} {query or ''}".strip()
        base = self.s.cluster_base if path.startswith("/v1/cluster/") else self.s.base
        try:
            resp = case.call(base_url=base, timeout=15)
        except Exception as e:  # noqa: BLE001 — a failed call is a finding
            self.failures.append(f"{what}: {e!r}")
            return None
        self.statuses[resp.status_code] += 1
        try:
            case.validate_response(resp, checks=self.checks)
        except (Exception, BaseExceptionGroup) as e:  # noqa: BLE001 — FailureGroup and friends
            self.failures.append(f"{what} -> {resp.status_code}: {failure_text(e)}")
        if expect is not None and resp.status_code != expect:
            self.failures.append(f"{what} -> {resp.status_code}, expected {expect}: {resp.text[:300]}")
        return resp

    def raw(self, path, method, url, key, expect, headers=None, data=None, base=None):
        """A request that schemathesis cannot build (bytes that are not
        UTF-8, a method the spec does not list), sent as is to base (the
        listener the path is served on by default); its response is
        validated against the spec's responses of path/method."""
        base = base or (self.s.cluster_base if url.startswith("/v1/cluster/") else self.s.base)
        h = {"Authorization": f"Bearer {key}"} if isinstance(key, str) else {}
        if isinstance(key, bytes):
            h = {"Authorization": b"Bearer " + key}
        h.update(headers or {})
        what = f"{method} {url} (raw)"
        try:
            resp = stk.requests.request(method, base + url, headers=h, data=data,
                                        timeout=15, allow_redirects=False)
        except stk.requests.RequestException as e:
            self.failures.append(f"{what}: {e!r}")
            return None
        self.statuses[resp.status_code] += 1
        self.validate(path, method, resp, what, expect)
        return resp

    def validate(self, path, method, resp, what, expect):
        """A response of path/method against the spec, and its status."""
        if resp.status_code != expect:
            self.failures.append(f"{what} -> {resp.status_code}, expected {expect}: {resp.text[:300]}")
        try:
            if resp.status_code == 405:
                if "Allow" not in resp.headers:
                    self.failures.append(f"{what} -> 405 without Allow")
                return
            op = self.schema[path][method]
            if str(resp.status_code) not in op.definition.raw.get("responses", {}):
                self.failures.append(f"{what} -> {resp.status_code}: not a documented status")
            op.validate_response(resp)
        except (Exception, BaseExceptionGroup) as e:  # noqa: BLE001
            self.failures.append(f"{what} -> {resp.status_code}: {failure_text(e)}")

    def hostile(self):
        """Bytes that are not UTF-8 where the gateway passes text on to
        PostgreSQL, and routing corners."""
        key, token = self.s.keys["A"], self.s.cluster_token
        for q in ("kernel=%ff", "label=k:%ff", "label=%ff:v", "label=k%20k:v", "cursor=%2B5",
                  "cursor=0", "limit=%2B5", "limit=%205", "state=%ff"):
            self.raw("/v1/jobs", "GET", f"/v1/jobs?{q}", key, 400)
        self.raw("/v1/jobs", "GET", "/v1/jobs", b"kl_\xff\xfe", 401)
        self.raw(REGISTER, "POST", REGISTER, b"\xff" * 20, 401,
                 headers={"Content-Type": "application/json"}, data=b"{}")
        r = self.raw(REGISTER, "DELETE", REGISTER, token, 405)
        if r is not None and r.headers.get("Allow") != "POST":
            self.failures.append(f"DELETE {REGISTER}: Allow is {r.headers.get('Allow')!r}")
        bad_nodes = [{"gpus": [{"name": 1, "memory_bytes": 1}]}, {"gpus": [{"name": "g"}]},
                     {"kernels": [1]}, {"kernels": None}, {"backend_reason": 5},
                     {"url": "httpx://x"}, {"slots": 1025}, {"name": "n" * 121}]
        for bad in bad_nodes:
            body = {"name": "fuzz-bad", "url": "http://127.0.0.1:9/", "backend": "cpu",
                    "slots": 1, "kernels": [], **bad}
            self.raw(REGISTER, "POST", REGISTER, token, 400,
                     headers={"Content-Type": "application/json"}, data=json.dumps(body))
        # label values: at most 256 characters, however many bytes
        job = {"kernel": "saxpy", "params": {"a": 1.0},
               "inputs": {"x": stk.tensor([1.0]), "y": stk.tensor([1.0])}}
        self.call("/v1/jobs", "POST", key, 202, body={**job, "labels": {"l": "\u00e9" * 256}})
        self.call("/v1/jobs", "POST", key, 400, body={**job, "labels": {"l": "\u00e9" * 257}})
        self.call("/v1/jobs", "GET", key, 200, query={"label": "l:" + "\u00e9" * 256})
        self.call("/v1/jobs", "GET", key, 400, query={"label": "l:" + "\u00e9" * 257})
        nid, cred = self.node
        hb = "/v1/cluster/nodes/{node}/heartbeat"
        for bad in ({"running": 1, "slots": 1}, {"running": -1, "slots": 1, "runs": []},
                    {"running": 1, "slots": 1, "runs": [1]},
                    {"running": 1, "slots": 1, "runs": [], "draining": "yes"}):
            self.raw(hb, "POST", f"/v1/cluster/nodes/{nid}/heartbeat", cred, 400,
                     headers={"Content-Type": "application/json"}, data=json.dumps(bad))
        # the node's credential acts for no other node; the token for none
        ok = {"running": 0, "slots": 1, "runs": []}
        self.raw(hb, "POST", f"/v1/cluster/nodes/{uuid.uuid4()}/heartbeat", cred, 403,
                 headers={"Content-Type": "application/json"}, data=json.dumps(ok))
        self.raw(hb, "POST", f"/v1/cluster/nodes/{nid}/heartbeat", token, 401,
                 headers={"Content-Type": "application/json"}, data=json.dumps(ok))
        # no cluster route on the public listener
        r = stk.requests.post(self.s.base + REGISTER, json={}, timeout=15,
                              headers={"Authorization": f"Bearer {token}"})
        self.statuses[r.status_code] += 1
        if r.status_code != 404:
            self.failures.append(f"POST {REGISTER} on the public listener -> {r.status_code}")

    def rate_limited(self, key, most=600):
        """Spends key's token bucket until a 429 comes; validates that one."""
        http = stk.requests.Session()
        url = self.s.base + "/v1/kernels"
        for i in range(most):
            r = http.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=15)
            self.statuses[r.status_code] += 1
            if r.status_code == 429:
                self.validate("/v1/kernels", "GET", r, "GET /v1/kernels (over the rate)", 429)
                if "Retry-After" not in r.headers:
                    self.failures.append("429 without Retry-After")
                return
            if r.status_code != 200:
                self.failures.append(f"GET /v1/kernels -> {r.status_code} while spending the bucket")
                return
        log(f"  note: no 429 after {most} requests (the machine is slower than the rate limit)")

    def run(self, seeded):
        key = self.s.keys["A"]
        job, result, cancel = "/v1/jobs/{id}", "/v1/jobs/{id}/result", "/v1/jobs/{id}/cancel"
        for state, ids in seeded.items():
            for jid in ids:
                p = {"id": jid}
                self.call(job, "GET", key, 200, p)
                self.call(job, "GET", self.s.keys["B"], 404, p)   # another tenant's job
                self.call(job, "GET", None, 401, p)
                want = 200 if state == "succeeded" else 409
                self.call(result, "GET", key, want, p)
                self.call(result, "GET", key, want, p, {"encoding": "b64"})
                self.call(result, "GET", key, want, p, {"encoding": "json"})
                self.call(result, "GET", key, 400, p, {"encoding": "hex"})
                want = 200 if state == "queued" else 409
                self.call(cancel, "POST", key, want, p)
                self.call(cancel, "POST", key, 409, p)  # now terminal whatever it was
        for st in ("queued", "running", "succeeded", "failed", "cancelled"):
            self.call("/v1/jobs", "GET", key, 200, query={"state": st})
        self.call("/v1/jobs", "GET", key, 200, query={"label": "fuzz:seed", "limit": 1})
        r = self.call("/v1/jobs", "GET", key, 200, query={"limit": 2})
        if r is not None and r.status_code == 200 and r.json().get("next_cursor"):
            self.call("/v1/jobs", "GET", key, 200, query={"limit": 2, "cursor": r.json()["next_cursor"]})
        self.call("/v1/nodes", "GET", key, 200)
        self.call("/v1/kernels", "GET", key, 200)
        # integer literals past int64: refused as a whole (400 invalid_json)
        self.call("/v1/jobs", "POST", key, 400, body={"kernel": "saxpy", "priority": 10**24})
        self.call("/v1/jobs", "POST", key, 400, body={"kernel": "saxpy", "labels": {"n": "1"},
                                                       "params": {"a": -(10**30)}})
        # U+0000 in a string or key: refused (400 invalid_json)
        self.call("/v1/jobs", "POST", key, 400, body={"kernel": "sa\u0000xpy"})
        self.call("/v1/jobs", "POST", key, 400, body={"kernel": "saxpy", "labels": {"a\u0000": "b"}})
        self.call(REGISTER, "POST", self.s.cluster_token, 400,
                  body={"name": "n\u0000", "url": "http://127.0.0.1:9/", "backend": "cpu",
                        "slots": 1, "kernels": []})
        # the fuzz node's name is held: another registration is refused
        self.call(REGISTER, "POST", self.s.cluster_token, 409,
                  body={"name": FUZZ_NODE, "url": "http://127.0.0.1:9/", "backend": "cpu",
                        "slots": 1, "kernels": []})
        self.hostile()
        self.rate_limited(self.s.keys["B"])
        self.call("/healthz", "GET", None, 200)
        self.call("/readyz", "GET", None, 200)
        self.call("/openapi.yaml", "GET", None, 200)
        # the cluster token is for the cluster listener's /metrics only
        self.call("/metrics", "GET", self.s.cluster_token, 401)
        self.raw("/metrics", "GET", "/metrics", self.s.cluster_token, 200, base=self.s.cluster_base)
        self.call("/metrics", "GET", self.s.keys["admin"], 200)
        self.call("/metrics", "GET", key, 403)
        self.call("/metrics", "GET", None, 401)
        # last: the fuzz node leaves; its credential is then worth nothing
        nid, cred = self.node
        self.call("/v1/cluster/nodes/{node}", "DELETE", cred, 200, {"node": nid})
        self.call("/v1/cluster/nodes/{node}", "DELETE", cred, 401, {"node": nid})


def failure_text(e):
    """The titles and messages of a schemathesis FailureGroup (or any error)."""
    subs = getattr(e, "exceptions", None)
    if not subs:
        return str(e)[:1500]
    return "; ".join(f"{getattr(x, 'title', type(x).__name__)}: {str(x)[:700]}" for x in subs)


def queued_job(s):
    """One job left queued (no node is up any more)."""
    return s.client("A").submit("saxpy", {"a": 1.0}, {"x": stk.tensor([1.0]),
                                                      "y": stk.tensor([2.0])})["id"]


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="the long run of `make fuzz-api`")
    args = ap.parse_args()
    mode_name = "full" if args.full else "short"
    mode = MODES[mode_name]
    seed = int(os.environ.get("KOWLOON_FUZZ_SEED") or mode["seed"] or random.randrange(1, 2**31))
    if shutil.which("schemathesis") is None:
        log("api-fuzz: schemathesis is not installed (scripts/install-deps.sh installs it)")
        return 2
    log(f"api-fuzz: mode={mode_name} seed={seed} spec={os.path.relpath(SPEC, REPO)}")

    s = FuzzStack(node_names=(SEED_NODE,))

    def on_term(*_):
        for p in list(CHILDREN):
            kill_group(p)
        s.close()
        if not os.environ.get("KOWLOON_FUZZ_KEEP"):
            s.remove()
        os._exit(143)
    signal.signal(signal.SIGTERM, on_term)
    ok = False
    figs = []
    pinned = None
    t0 = time.monotonic()
    sock, port = closed_port()
    os.environ["KOWLOON_FUZZ_NODE_URL"] = f"http://127.0.0.1:{port}/"
    try:
        s.start()
        seeded = seed_jobs(s)
        stop_seed_node(s)
        log(f"  seeded jobs: {json.dumps({k: len(v) for k, v in seeded.items()})}; "
            f"seed node stopped (nodes up: 0)")
        work = os.path.join(s.root, "api_fuzz")
        A, token = s.keys["A"], s.cluster_token
        node = register_fuzz_node(s)
        os.environ["KOWLOON_FUZZ_NODE_ID"] = node[0]
        cluster = s.cluster_base

        pinned = Pinned(s, node)
        for i in range(mode["cluster_passes"]):
            name = "cluster" if mode["cluster_passes"] == 1 else f"cluster.{i + 1}"
            # alone: its links lead to operations of the other round
            figs.append(run_round(name + "-register", s, work, mode, seed + i, token,
                                  ["--include-operation-id", "registerNode",
                                   "--phases", "examples,coverage,fuzzing"], url=cluster))
            # its deregistration is the pinned requests' (it would end the round's credential)
            node = register_fuzz_node(s, node)
            figs.append(run_round(name, s, work, mode, seed + i, node[1],
                                  ["--include-tag", "cluster", "--exclude-operation-id",
                                   "registerNode", "--exclude-operation-id", "deregisterNode"],
                                  url=cluster))
            check_gateway(s, f"the {name} round")
            pinned.call("/v1/nodes", "GET", A, 200)  # every fuzzed registration lists per spec
            log(f"  removed {remove_fuzzed_nodes(s, keep=(FUZZ_NODE,))} fuzzed node registrations")

        unthrottle(s, "A")

        def anonymous():
            """The rounds whose every request must be refused change nothing,
            so they run beside the tenant round (its event streams and
            Prefer: wait requests hold a second each), in two lines: the
            anonymous ones, and the crossed ones (crossed())."""
            return [run_round("anonymous", s, work, mode, seed, None, ["--exclude-tag", "cluster"],
                              refused=all_but_open),
                    run_round("anonymous-cluster", s, work, mode, seed, None,
                              ["--include-tag", "cluster"], refused=all_but_open, url=cluster)]

        def crossed():
            return [run_round("crossed-tenant", s, work, mode, seed, token,
                              ["--exclude-tag", "cluster"], refused=all_but_open),
                    run_round("crossed-cluster", s, work, mode, seed, A,
                              ["--include-tag", "cluster"], refused=all_but_open, url=cluster),
                    run_round("crossed-token", s, work, mode, seed, token,
                              ["--include-tag", "cluster", "--exclude-operation-id",
                               "registerNode"], refused=all_but_register, url=cluster)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            refused_rounds = [pool.submit(anonymous), pool.submit(crossed)]
            # The tenant's event stream (no id: nothing links to it) in two
            # rounds of its own beside the rest, each of its cases held a second.
            streams = [pool.submit(run_round, name, s, work, mode, seed, A,
                                   ["--include-operation-id", "streamEvents", "--phases", phases],
                                   refused=ADMIN_PATH.search)
                       for name, phases in (("events-cover", "examples,coverage"), ("events-fuzz", "fuzzing"))]
            # deleteJob waits for the end: it would take the seeded jobs the
            # pinned requests read
            figs.append(run_round("tenant", s, work, mode, seed, A,
                                  ["--exclude-tag", "cluster", "--exclude-operation-id", "deleteJob",
                                   "--exclude-operation-id", "streamEvents"],
                                  refused=ADMIN_PATH.search))
            figs.extend(f.result() for f in streams)
            for f in refused_rounds:
                figs.extend(f.result())
        check_gateway(s, "the tenant, anonymous and crossed rounds")
        n = remove_fuzzed_nodes(s, keep=(FUZZ_NODE,))
        if n:
            raise FuzzError(f"{n} node(s) registered without the cluster token")

        seeded["queued"].append(queued_job(s))
        pinned.node = register_fuzz_node(s, node)
        pinned.run(seeded)
        check_gateway(s, "the pinned requests")
        figs.append(run_round("tenant-delete", s, work, mode, seed, A,
                              ["--include-operation-id", "deleteJob", "--include-operation-id",
                               "createJob", "--include-operation-id", "listJobs"],
                              refused=ADMIN_PATH.search, wait=0))
        check_gateway(s, "the tenant-delete round")
        # Last: it may change any tenant's limits (tenants A and B included)
        # and revoke keys.
        figs.append(run_round("admin", s, work, mode, seed, s.keys["admin"],
                              ["--include-tag", "admin"], rate=CLIENT_RATE))
        check_gateway(s, "the admin round")
        ok = True
    except (FuzzError, stk.StackError, stk.ApiError, stk.requests.RequestException, OSError) as e:
        log(f"api-fuzz: ERROR: {e}")
        traceback.print_exc(limit=3)
    finally:
        s.close()
        sock.close()

    total = collections.Counter()
    failures = 0
    for f in figs:
        total.update(f["statuses"])
        # an exit other than 0 with nothing reported: a crash or a timeout
        failures += f["failures"] + f["errors"] or (0 if f["rc"] == 0 else 1)
    if pinned is not None:
        total.update(pinned.statuses)
        failures += len(pinned.failures)
        log(f"  {'pinned':<16} {sum(pinned.statuses.values()):>6} requests  "
            f"{classes_str(pinned.statuses)}  failures={len(pinned.failures)}")
        for msg in pinned.failures:
            log(f"    pinned failure: {msg[:2000]}")
    n = sum(total.values())
    c = status_classes(total)
    codes = " ".join(f"{k}:{v}" for k, v in sorted(total.items()))
    log(f"api-fuzz: requests={n} 2xx={c['2xx']} 3xx={c['3xx']} 4xx={c['4xx']} 5xx={c['5xx']} "
        f"other={c['other']} failures={failures} mode={mode_name} seed={seed} "
        f"{time.monotonic() - t0:.0f}s")
    log(f"api-fuzz: by status: {codes}")
    problems = []
    if not ok:
        problems.append("the run did not complete")
    if failures:
        problems.append(f"{failures} failure(s)")
    if c["5xx"] or c["other"]:
        problems.append(f"{c['5xx']} 5xx response(s)")
    if n < mode["min_requests"]:
        problems.append(f"only {n} requests (at least {mode['min_requests']} wanted)")
    if problems:
        log("api-fuzz: FAILED: " + "; ".join(problems))
        log(f"api-fuzz: stack files kept in {s.root}")
        return 1
    if os.environ.get("KOWLOON_FUZZ_KEEP"):
        log(f"api-fuzz: stack files kept in {s.root}")
    else:
        s.remove()
    log("api-fuzz: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
