#!/usr/bin/env python3
"""bench/klbench.py — the client side of `make bench` (driven by bench/run.sh).

Subcommands (each prints its section and, with --json FILE, saves its figures):
  body        write a saxpy n=1024 POST /v1/jobs body (inputs in b64) for wrk
  throughput  end-to-end backlog (phase 3): submit N saxpy jobs with a pool of
              concurrent clients, wait until none is queued or running, check
              every job succeeded and a sample of results is right; --ids
              writes the finished jobs' ids for phase 5
  latency     end-to-end latency at a fixed rate (phase 4): open-loop
              submission; each client waits on its job with `Prefer: wait`
              where the gateway answers Preference-Applied, else polls GET
              every ~1 ms (and says so); plus the server's own
              finished_at - created_at
  wrk         parse a wrk run of bench/wrk.lua (submits or GETs) into figures
  pgbench     parse pgbench output (INSERT or select-only) into figures
  cpu         sample per-process CPU over a window (gateway, nodes, postgres...)
              and, with --watch, one process's threads and RSS
  perf        print the top of a flat perf report
  summary     print the final table (every row, ratio, target, met or not)
Phase 6 (idle connections and running jobs) is bench/klidle.py, built on the
client here.

The HTTP client is a small asyncio HTTP/1.1 keep-alive client on the standard
library: on a 2-core machine the client's own CPU is part of what is
measured, so it stays as thin as it can. Only numpy is needed beyond stdlib.
"""

import argparse
import asyncio
import base64
import json
import math
import os
import random
import re
import sys
import time
import uuid
from datetime import datetime, timezone

import numpy as np

N_ELEMS = 1024
VARIANTS = 8          # distinct saxpy inputs, so result checks mean something
TERMINAL = ("succeeded", "failed", "cancelled")


# ---------------------------------------------------------------- payloads

def saxpy_variant(v, n=N_ELEMS):
    """(a, x, y) of variant v: deterministic, so any process can rebuild them."""
    rng = np.random.default_rng(1000 + v)
    a = float(v + 1) * 0.5
    x = rng.standard_normal(n).astype("<f4")
    y = rng.standard_normal(n).astype("<f4")
    return a, x, y


def saxpy_body(v, labels=None, n=N_ELEMS):
    a, x, y = saxpy_variant(v, n)
    doc = {
        "kernel": "saxpy",
        "params": {"a": a},
        "inputs": {
            "x": {"dtype": "float32", "shape": [n], "b64": base64.b64encode(x.tobytes()).decode()},
            "y": {"dtype": "float32", "shape": [n], "b64": base64.b64encode(y.tobytes()).decode()},
        },
    }
    if labels:
        doc["labels"] = labels
    return json.dumps(doc, separators=(",", ":")).encode()


def saxpy_expected(v):
    a, x, y = saxpy_variant(v)
    return (np.float32(a) * x + y).astype("<f4")


def decode_tensor(t):
    dt = {"float32": "<f4", "float64": "<f8", "int32": "<i4"}[t["dtype"]]
    if "b64" in t:
        a = np.frombuffer(base64.b64decode(t["b64"]), dtype=dt)
    else:
        a = np.asarray(t["data"], dtype=dt)
    return a.reshape(t["shape"])


def parse_ts(s):
    """RFC3339 (ms, Z) -> seconds since the epoch (float); None stays None."""
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    return datetime.fromisoformat(s).timestamp()


def pct(values, p):
    """Percentile p (0..100) by nearest rank; None for no values."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(math.ceil(p / 100.0 * len(v))) - 1))
    return v[k]


def fmt_ms(x):
    """Seconds as ms; infinity stands for a job the client gave up on."""
    if x == math.inf:
        return "not ended"
    return "n/a" if x is None else "%.2f ms" % (x * 1000.0)


# ---------------------------------------------------------------- HTTP client

class HttpError(Exception):
    pass


class Conn:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.r = self.w = None

    async def open(self):
        self.r, self.w = await asyncio.open_connection(self.host, self.port)

    def close(self):
        if self.w:
            self.w.close()
        self.r = self.w = None

    async def request(self, head, body):
        self.w.write(head + body if body else head)
        raw = await self.r.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HttpError("bad status line %r" % lines[0])
        status = int(parts[1])
        hdrs = {}
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        keep = hdrs.get("connection", "").lower() != "close"
        if "content-length" in hdrs:
            data = await self.r.readexactly(int(hdrs["content-length"]))
        elif hdrs.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self.r.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.r.readuntil(b"\r\n")   # (no trailers expected)
                    break
                chunks.append(await self.r.readexactly(size))
                await self.r.readexactly(2)
            data = b"".join(chunks)
        else:
            data = await self.r.read()
            keep = False
        return status, hdrs, data, keep


class Client:
    """Keep-alive connection pool; one request per connection at a time."""

    def __init__(self, url, key):
        m = re.match(r"http://([^:/]+):(\d+)", url)
        if not m:
            raise SystemExit("bad --url %s" % url)
        self.host, self.port = m.group(1), int(m.group(2))
        self.key = key
        self.idle = []
        self.opened = 0

    async def warm(self, n):
        conns = []
        for _ in range(n):
            c = Conn(self.host, self.port)
            await c.open()
            conns.append(c)
        self.idle.extend(conns)
        self.opened += n

    def close(self):
        for c in self.idle:
            c.close()
        self.idle = []

    async def request(self, method, path, body=None, headers=()):
        """One request on a pooled connection: (status, headers, body bytes);
        header names are lower case. HEADERS: extra "Name: value" lines."""
        head = ["%s %s HTTP/1.1" % (method, path), "Host: %s:%d" % (self.host, self.port),
                "Authorization: Bearer %s" % self.key]
        head.extend(headers)
        if body is not None:
            head.append("Content-Type: application/json")
            head.append("Content-Length: %d" % len(body))
        head = ("\r\n".join(head) + "\r\n\r\n").encode()
        for attempt in range(2):
            reused = bool(self.idle)
            if reused:
                c = self.idle.pop()
            else:
                c = Conn(self.host, self.port)
                await c.open()
                self.opened += 1
            try:
                status, hdrs, data, keep = await c.request(head, body)
            except (ConnectionError, asyncio.IncompleteReadError, HttpError):
                c.close()
                # A kept-alive connection the server had closed: a GET may be
                # repeated; a POST is not (it could make a second job).
                if reused and attempt == 0 and method == "GET":
                    continue
                raise
            if keep:
                self.idle.append(c)
            else:
                c.close()
            return status, hdrs, data
        raise HttpError("unreachable")

    async def call(self, method, path, body=None):
        status, _, data = await self.request(method, path, body)
        return status, data

    async def json_h(self, method, path, body=None, headers=()):
        """(status, headers, parsed JSON body or None)."""
        status, hdrs, data = await self.request(method, path, body, headers)
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = None
        return status, hdrs, doc

    async def json(self, method, path, body=None):
        status, _, doc = await self.json_h(method, path, body)
        return status, doc


async def check_results(cl, jobs, sample):
    """GETs the result of up to SAMPLE of JOBS ({id: variant}); returns the
    list of problems (empty when every sampled result is right)."""
    bad = []
    ids = list(jobs)
    random.Random(7).shuffle(ids)
    for jid in ids[:sample]:
        status, doc = await cl.json("GET", "/v1/jobs/%s/result?encoding=b64" % jid)
        if status != 200:
            bad.append("%s: result status %d" % (jid, status))
            continue
        try:
            got = decode_tensor(doc["outputs"]["y"])
        except (KeyError, TypeError, ValueError) as e:
            bad.append("%s: malformed result (%s)" % (jid, e))
            continue
        want = saxpy_expected(jobs[jid])
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            bad.append("%s: wrong saxpy result (max error %s)" % (
                jid, np.max(np.abs(got.astype(np.float64) - want)) if got.shape == want.shape else "shape"))
    return bad


async def list_label(cl, label, state=None, limit=1000):
    """Every job with LABEL (k:v), optionally in STATE, following cursors."""
    out, cursor = [], None
    while True:
        q = "/v1/jobs?label=%s&limit=%d" % (label, limit)
        if state:
            q += "&state=" + state
        if cursor:
            q += "&cursor=" + cursor
        status, doc = await cl.json("GET", q)
        if status != 200:
            raise HttpError("list jobs: status %d" % status)
        out.extend(doc["jobs"])
        cursor = doc.get("next_cursor")
        if not cursor:
            return out


async def any_in_state(cl, label, state):
    status, doc = await cl.json("GET", "/v1/jobs?label=%s&state=%s&limit=1" % (label, state))
    if status != 200:
        raise HttpError("list jobs: status %d" % status)
    return bool(doc["jobs"])


def save(path, doc, indent=None):
    """Writes doc to path as JSON; no path, nothing."""
    if path:
        with open(path, "w") as f:
            json.dump(doc, f, indent=indent)


# ---------------------------------------------------------------- throughput

async def throughput(args):
    cl = Client(args.url, os.environ["KL_BENCH_KEY"])
    tag = "tput-" + uuid.uuid4().hex[:8]
    label = "bench:" + tag
    bodies = [saxpy_body(v, {"bench": tag}) for v in range(VARIANTS)]
    await cl.warm(args.concurrency + 2)
    jobs, errors = {}, []
    next_i = 0
    t_first = time.time()

    async def submitter():
        nonlocal next_i
        while next_i < args.n:
            i = next_i
            next_i += 1
            v = i % VARIANTS
            try:
                status, doc = await cl.json("POST", "/v1/jobs", bodies[v])
            except Exception as e:   # noqa: BLE001 - reported, not raised
                errors.append("submit: %r" % e)
                continue
            if status != 202 or not doc or "id" not in doc:
                errors.append("submit: status %d %s" % (status, (doc or {}).get("error")))
                continue
            jobs[doc["id"]] = v

    await asyncio.gather(*(submitter() for _ in range(args.concurrency)))
    t_submitted = time.time()
    # Every job is submitted: wait until none is queued, then none running
    # (in that order: once none is queued, none can start afterwards).
    deadline = t_first + args.max_wait
    done = False
    while time.time() < deadline:
        if not await any_in_state(cl, label, "queued") and not await any_in_state(cl, label, "running"):
            done = True
            break
        # 100 ms: an error under 1% on a run of ten seconds or more. Each
        # look is a listing with a label and a state filter, which reads
        # more jobs the more have ended: every 10 ms it was a load of its
        # own on the stack being measured. The server-side figure (first
        # created_at to last finished_at) has no such error at all.
        await asyncio.sleep(0.1)
    t_done = time.time()

    listed = await list_label(cl, label)
    states = {}
    for j in listed:
        states[j["state"]] = states.get(j["state"], 0) + 1
    ok = [j for j in listed if j["state"] == "succeeded"]
    created = [parse_ts(j["created_at"]) for j in listed]
    finished = [parse_ts(j["finished_at"]) for j in ok if j.get("finished_at")]
    problems = list(errors[:5])
    if len(errors) > 5:
        problems.append("... %d submit errors in all" % len(errors))
    if len(listed) != len(jobs):
        problems.append("%d jobs accepted but %d listed" % (len(jobs), len(listed)))
    for j in listed:
        if j["state"] in ("failed", "cancelled"):
            problems.append("job %s %s: %s" % (j["id"], j["state"], j.get("error")))
            if len(problems) > 10:
                break
    problems += await check_results(cl, {j["id"]: jobs[j["id"]] for j in ok if j["id"] in jobs},
                                    args.sample)
    cl.close()
    if args.ids:
        with open(args.ids, "w") as f:
            f.writelines(j["id"] + "\n" for j in ok)

    wall = t_done - t_first
    server_wall = (max(finished) - min(created)) if finished and created else None
    res = {
        "n": args.n, "accepted": len(jobs), "succeeded": len(ok), "states": states,
        "complete": done and len(ok) == args.n,
        "concurrency": args.concurrency, "nodes": args.nodes, "slots": args.slots,
        "submit_s": t_submitted - t_first, "wall_s": wall,
        "jobs_per_s": len(ok) / wall if wall > 0 else None,
        "server_wall_s": server_wall,
        "server_jobs_per_s": len(ok) / server_wall if server_wall else None,
        "checked": min(args.sample, len(ok)), "problems": problems,
    }
    print("== 3. end-to-end backlog: %d saxpy n=%d jobs on %s nodes x %s slots (%d concurrent "
          "submitters, then wait for all)" % (args.n, N_ELEMS, args.nodes, args.slots, args.concurrency))
    print("   submitted all %d in %.2f s (%.0f submits/s while nodes ran them)"
          % (len(jobs), res["submit_s"], len(jobs) / res["submit_s"] if res["submit_s"] else 0))
    print("   %s: %d/%d succeeded, states %s" % ("complete" if res["complete"] else
                                                 "INCOMPLETE after %.0f s" % args.max_wait,
                                                 len(ok), args.n, states))
    print("   client: first submit -> last completion seen: %.2f s  => %.1f jobs/s"
          % (wall, res["jobs_per_s"] or 0))
    if server_wall:
        print("   server: min(created_at) -> max(finished_at): %.2f s  => %.1f jobs/s"
              % (server_wall, res["server_jobs_per_s"]))
    return checked_and_saved(args, res, problems)


# ---------------------------------------------------------------- latency

def prefer_applied(hdrs):
    """True when the answer says it honoured our `Prefer: wait` (RFC 7240)."""
    return "wait" in hdrs.get("preference-applied", "").lower()


async def latency(args):
    cl = Client(args.url, os.environ["KL_BENCH_KEY"])
    tag = "lat-" + uuid.uuid4().hex[:8]
    bodies = [saxpy_body(v, {"bench": tag}) for v in range(VARIANTS)]
    await cl.warm(16)
    total = int(round(args.rate * args.duration))
    recs = [None] * total
    errors = []
    unfinished = []   # slow, not wrong: they count as infinite latency
    polls = 0
    wait_s = max(1, min(60, int(args.max_wait)))
    prefer = ("Prefer: wait=%d" % wait_s,)

    # How can a client wait here? One probe job says. Best, the submit is
    # held until the job ends (Preference-Applied on the POST); else a GET
    # that honours Prefer: wait (a long poll); else the client polls, as in
    # the first gateway.
    status, hdrs, doc = await cl.json_h("POST", "/v1/jobs", bodies[0], prefer)
    if status not in (200, 201, 202) or not doc or "id" not in doc:
        print("== 4. end-to-end latency: the probe submit failed (status %d %s)"
              % (status, (doc or {}).get("error")))
        save(args.json, {"rate": args.rate, "problems": ["probe submit: status %d" % status]})
        return 1
    applied = hdrs.get("preference-applied") if prefer_applied(hdrs) else None
    mode = "prefer-wait" if applied else "poll"
    if not applied:
        st, h, _ = await cl.json_h("GET", "/v1/jobs/" + doc["id"], None, prefer)
        if st == 200 and prefer_applied(h):
            applied, mode = h.get("preference-applied"), "get-wait"
    if args.poll:
        mode = "poll"
    waiting = mode != "poll"

    async def wait_end(jid, t_sub):
        """Waits for job JID to end: GET with Prefer: wait, or polling GET
        ~every ms while it is young. Returns (job, seen) or (None, None)."""
        nonlocal polls
        path = "/v1/jobs/" + jid
        while True:
            try:
                status, _, job = await cl.json_h("GET", path, None, prefer if waiting else ())
            except Exception as e:   # noqa: BLE001
                errors.append("get %s: %r" % (jid, e))
                return None, None
            polls += 1
            t_seen = time.monotonic()
            if status != 200 or not job:
                errors.append("get %s: status %d" % (jid, status))
                return None, None
            if job["state"] in TERMINAL:
                return job, t_seen
            if t_seen - t_sub > args.max_wait:
                unfinished.append("%s still %s after %.0f s" % (jid, job["state"], args.max_wait))
                return None, None
            if not waiting:
                # back off as the job ages, so that a backlog does not turn
                # into a storm of GETs that slows the gateway further (past
                # 1 s the target is missed anyway; 50 ms is then precise enough)
                age = t_seen - t_sub
                await asyncio.sleep(0.001 if age < 0.05 else 0.002 if age < 0.2 else
                                    0.01 if age < 1.0 else 0.05)

    async def one(i):
        v = i % VARIANTS
        t_sub = time.monotonic()
        try:
            status, hdrs, doc = await cl.json_h("POST", "/v1/jobs", bodies[v],
                                                prefer if mode == "prefer-wait" else ())
        except Exception as e:   # noqa: BLE001
            errors.append("submit: %r" % e)
            return
        t_ack = time.monotonic()
        if status not in (200, 201, 202) or not doc or "id" not in doc:
            errors.append("submit: status %d %s" % (status, (doc or {}).get("error")))
            return
        if doc.get("state") in TERMINAL and "created_at" in doc:
            job, t_seen = doc, t_ack
        else:
            job, t_seen = await wait_end(doc["id"], t_sub)
            if job is None:
                return
        recs[i] = {"id": job["id"], "v": v, "state": job["state"], "error": job.get("error"),
                   "client": t_seen - t_sub, "ack": t_ack - t_sub,
                   "created": parse_ts(job["created_at"]), "started": parse_ts(job.get("started_at")),
                   "finished": parse_ts(job.get("finished_at"))}

    await wait_end(doc["id"], time.monotonic())   # the probe: out of the way first
    polls = 0
    tasks = []
    start = time.monotonic() + 0.05
    slip = []
    for i in range(total):
        target = start + i / args.rate
        d = target - time.monotonic()
        if d > 0:
            await asyncio.sleep(d)
        slip.append(time.monotonic() - target)
        tasks.append(asyncio.ensure_future(one(i)))
    t_last = time.monotonic()
    await asyncio.gather(*tasks)
    offered = (total - 1) / (t_last - start) if total > 1 else 0.0

    done = [r for r in recs if r]
    ok = [r for r in done if r["state"] == "succeeded"]
    problems = list(errors[:5])
    if len(errors) > 5:
        problems.append("... %d errors in all" % len(errors))
    for r in done:
        if r["state"] != "succeeded" and len(problems) < 10:
            problems.append("job %s %s: %s" % (r["id"], r["state"], r["error"]))
    problems += await check_results(cl, {r["id"]: r["v"] for r in ok}, args.sample)
    cl.close()

    client = [r["client"] for r in ok] + [math.inf] * len(unfinished)
    server = [r["finished"] - r["created"] for r in ok if r["finished"] and r["created"]]
    wait = [r["started"] - r["created"] for r in ok if r["started"] and r["created"]]
    run = [r["finished"] - r["started"] for r in ok if r["finished"] and r["started"]]
    ack = [r["ack"] for r in ok]
    res = {
        "rate": args.rate, "duration_s": args.duration, "jobs": total, "succeeded": len(ok),
        "mode": mode, "prefer_applied": applied, "unfinished": len(unfinished),
        "max_wait_s": args.max_wait,
        "offered_rate": offered, "max_slip_s": max(slip) if slip else None,
        "gets": polls,
        "client_p50_s": pct(client, 50), "client_p90_s": pct(client, 90),
        "client_p99_s": pct(client, 99), "client_max_s": max(client) if client else None,
        "server_p50_s": pct(server, 50), "server_p99_s": pct(server, 99),
        "ack_p50_s": pct(ack, 50), "ack_p99_s": pct(ack, 99),
        "wait_p50_s": pct(wait, 50), "wait_p99_s": pct(wait, 99),
        "run_p50_s": pct(run, 50), "run_p99_s": pct(run, 99),
        "checked": min(args.sample, len(ok)), "problems": problems,
    }
    print("== 4. end-to-end latency at a fixed %.0f jobs/s for %.0f s (open loop, saxpy n=%d)"
          % (args.rate, args.duration, N_ELEMS))
    if mode == "prefer-wait":
        print("   client waits without polling: POST /v1/jobs with `Prefer: wait=%d` (the gateway "
              "answered Preference-Applied: %s)" % (wait_s, applied))
    elif mode == "get-wait":
        print("   the submit ignores `Prefer: wait` (no Preference-Applied), so the client submits, then"
              " waits without polling\n   in GET /v1/jobs/{id} with `Prefer: wait=%d` (a long poll; "
              "Preference-Applied: %s)" % (wait_s, applied))
    elif args.poll:
        print("   client POLLS (--poll): GET /v1/jobs/{id} every 1 ms while the job is young (backing"
              " off to 50 ms past 1 s)")
    else:
        print("   FALLBACK: the gateway ignored `Prefer: wait` (no Preference-Applied header), so the"
              " client POLLS\n   GET /v1/jobs/{id} every 1 ms while the job is young (backing off to"
              " 50 ms past 1 s) until it ends")
    print("   offered %.1f jobs/s (max schedule slip %s), %d/%d succeeded, %d GETs after the submits"
          % (offered, fmt_ms(res["max_slip_s"]), len(ok), total, polls))
    print("   client-observed (submit -> ended job in hand): p50 %s  p90 %s  p99 %s  max %s"
          % (fmt_ms(res["client_p50_s"]), fmt_ms(res["client_p90_s"]),
             fmt_ms(res["client_p99_s"]), fmt_ms(res["client_max_s"])))
    if unfinished:
        print("   %d job(s) had not ended when the client gave up after %.0f s (counted as never "
              "ending above), e.g. %s" % (len(unfinished), args.max_wait, unfinished[0]))
    print("   server-side (finished_at - created_at, 1 ms resolution): p50 %s  p99 %s"
          % (fmt_ms(res["server_p50_s"]), fmt_ms(res["server_p99_s"])))
    print("     of which: POST answered p50 %s p99 %s | queued (started-created) p50 %s p99 %s |"
          " running (finished-started) p50 %s p99 %s"
          % (fmt_ms(res["ack_p50_s"]), fmt_ms(res["ack_p99_s"]), fmt_ms(res["wait_p50_s"]),
             fmt_ms(res["wait_p99_s"]), fmt_ms(res["run_p50_s"]), fmt_ms(res["run_p99_s"])))
    return checked_and_saved(args, res, problems)


def checked_and_saved(args, res, problems):
    """Prints what the result checks found, saves res; 1 if any was wrong."""
    print("   results checked: %d sampled, %s" % (res["checked"], "all correct" if not problems
                                                  else "%d PROBLEM(S)" % len(problems)))
    for p in problems[:10]:
        print("     ! " + p)
    save(args.json, res)
    return 1 if problems else 0


# ---------------------------------------------------------------- wrk, pgbench

WRK_TITLES = {
    "submit": "accepted submits/s, POST /v1/jobs saxpy n=%d b64" % N_ELEMS,
    "get": "GET /v1/jobs/{id} of finished jobs",
}


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return {}


def cmd_wrk(args):
    text = open(args.file).read()
    m = re.search(r"^KLWRK (.*)$", text, re.M)
    title = WRK_TITLES[args.kind]
    if not m:
        print("== %s. %s, %d connections: wrk printed no KLWRK line; its output:\n%s"
              % (args.phase, title, args.connections, text))
        save(args.json, {"connections": args.connections, "error": "no wrk figures"})
        return 0
    f = {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    dur = f["duration_us"] / 1e6
    ok = max(0, int(f["requests"] - f["non2xx"]))
    res = {"kind": args.kind, "connections": args.connections, "rps": f["rps"],
           "ok_rps": ok / dur if dur > 0 else None, "requests": int(f["requests"]),
           "duration_s": dur, "p50_s": f["p50_us"] / 1e6,
           "p90_s": f["p90_us"] / 1e6, "p99_s": f["p99_us"] / 1e6, "max_s": f["max_us"] / 1e6,
           "non2xx": int(f["non2xx"]),
           "socket_errors": int(f["connect_err"] + f["read_err"] + f["write_err"] + f["timeout_err"]),
           "jobs_rows": args.jobs_rows, "ids": args.ids}
    cpu = load_json(args.cpu_json) if args.cpu_json else {}
    res["gw_threads_max"] = cpu.get("threads_max")
    res["gw_threads_before"] = cpu.get("threads_before")
    res["gw_rss_max_kb"] = cpu.get("rss_max_kb")
    print("== %s. %s, %d connections, %.1f s (wrk -t2)" % (args.phase, title, args.connections, dur))
    if args.ids:
        print("   cycling over %d ids of finished jobs (phase 3's)" % args.ids)
    print("   2xx/s %.1f (all replies %.1f/s)   latency p50 %s  p90 %s  p99 %s  max %s"
          % (res["ok_rps"] or 0, res["rps"], fmt_ms(res["p50_s"]), fmt_ms(res["p90_s"]),
             fmt_ms(res["p99_s"]), fmt_ms(res["max_s"])))
    print("   requests %d, status >= 400: %d, socket errors %d (connect %d read %d write %d timeout %d)"
          % (res["requests"], res["non2xx"], res["socket_errors"], f["connect_err"], f["read_err"],
             f["write_err"], f["timeout_err"]))
    if args.jobs_rows is not None:
        print("   jobs rows added in PostgreSQL during the run: %d" % args.jobs_rows)
    save(args.json, res)
    return 0


def cmd_pgbench(args):
    text = open(args.file).read()
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", text) or \
        re.search(r"tps = ([0-9.]+)", text)
    lat = re.search(r"latency average = ([0-9.]+) ms", text)
    xacts = re.search(r"number of transactions actually processed: (\d+)", text)
    failed = re.search(r"number of failed transactions: (\d+)", text)
    res = {"mode": args.mode, "tps": float(m.group(1)) if m else None,
           "latency_avg_ms": float(lat.group(1)) if lat else None,
           "transactions": int(xacts.group(1)) if xacts else None,
           "failed": int(failed.group(1)) if failed else 0}
    if args.mode == "insert":
        print("== pgbench: single-row INSERT, -c 16 -j 2 -T %s -n, same PostgreSQL (fsync on, "
              "synchronous_commit %s): the reference of rows 1 and 3" % (args.seconds, args.sync))
    else:
        print("== pgbench: select-only (-S, scale 1, its own database), -c 16 -j 2 -T %s, same "
              "PostgreSQL: the reference of row 5" % args.seconds)
    if res["tps"] is None:
        print("   pgbench printed no tps; its output:\n" + text)
    else:
        print("   tps %.1f   latency avg %s ms   transactions %s   failed %d"
              % (res["tps"], res["latency_avg_ms"], res["transactions"], res["failed"]))
    save(args.json, res)
    return 0


# ---------------------------------------------------------------- CPU sampling

def proc_ticks(pid):
    """utime + stime of PID in clock ticks (None when it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])   # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def proc_children(ppid):
    """The pids whose parent is PPID."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _total_ticks():
    """/proc/stat's first line: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def proc_status(pid):
    """{"threads": N, "rss_kb": N, "hwm_kb": N} of PID from /proc/PID/status
    ({} when it is gone)."""
    out = {}
    keys = {"Threads": "threads", "VmRSS": "rss_kb", "VmHWM": "hwm_kb"}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in keys:
                    out[keys[k]] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return {}
    return out


def cmd_cpu(args):
    """Samples CPU of named processes over --seconds (after --delay); prints a line.
    --proc NAME=PID (repeatable); --pg POSTMASTER_PID sums the postmaster and
    its children (backends); --comm NAME sums every process with that comm;
    --watch NAME=PID also follows that process's threads and RSS (max over the
    window, read every 0.1 s)."""
    time.sleep(args.delay)
    hz = os.sysconf("SC_CLK_TCK")
    groups = {}
    for p in args.proc or []:
        name, pid = p.split("=")
        groups.setdefault(name, []).append(int(pid))

    def pids_now():
        g = {k: list(v) for k, v in groups.items()}
        if args.pg:
            g["postgres"] = [args.pg] + proc_children(args.pg)
        for comm in args.comm or []:
            for d in os.listdir("/proc"):
                if d.isdigit():
                    try:
                        with open("/proc/%s/comm" % d) as f:
                            if f.read().strip() == comm:
                                g.setdefault(comm, []).append(int(d))
                    except OSError:
                        pass
        return g

    watch_name, watch_pid = (args.watch.split("=") if args.watch else (None, 0))
    threads_max = rss_max = 0
    g0 = pids_now()
    t0 = {k: {p: proc_ticks(p) for p in v} for k, v in g0.items()}
    m0 = _total_ticks()
    w0 = time.monotonic()
    while True:
        if watch_name:
            st = proc_status(int(watch_pid))
            threads_max = max(threads_max, st.get("threads", 0))
            rss_max = max(rss_max, st.get("rss_kb", 0))
        left = args.seconds - (time.monotonic() - w0)
        if left <= 0:
            break
        time.sleep(min(0.1, left) if watch_name else left)
    g1 = pids_now()
    m1 = _total_ticks()
    w1 = time.monotonic()
    parts = []
    for k, v in g1.items():
        used = 0
        for p in v:
            b = proc_ticks(p)
            a = t0.get(k, {}).get(p, 0) or 0
            if b is not None:
                used += b - a
        parts.append((used, k))
    parts.sort(reverse=True)
    d = [b - a for a, b in zip(m0, m1)]
    tot = max(1, sum(d))
    share = lambda *ix: 100.0 * sum(d[i] for i in ix) / tot   # noqa: E731
    # What the machine spent beyond the processes named: the kernel's own
    # threads, and anything else running here (other users' jobs skew figures).
    other = sum(d) - d[3] - d[4] - sum(u for u, _ in parts)
    secs = w1 - w0
    line = "   CPU over %.1f s (%% of one core): " % secs + "".join(
        "%s %.0f%%, " % (k, 100.0 * u / hz / secs) for u, k in parts)
    line += "everything else %.0f%%" % max(0.0, 100.0 * other / hz / secs)
    print(line)
    print("   machine (%d cores): user %.0f%% system %.0f%% softirq %.0f%% iowait %.0f%% "
          "steal %.0f%% idle %.0f%%" % (os.cpu_count(), share(0, 1), share(2, 5), share(6),
                                        share(4), share(7), share(3)))
    res = {"busy_pct": 100.0 - share(3, 4), "seconds": secs}
    if watch_name:
        res.update(threads_max=threads_max, rss_max_kb=rss_max, threads_before=args.watch_before)
        print("   %s threads: %s before the load, %d at most during it; RSS up to %.0f MiB"
              % (watch_name, "?" if args.watch_before is None else args.watch_before, threads_max,
                 rss_max / 1024.0))
    sys.stdout.flush()
    save(args.json, res)
    return 0


# ---------------------------------------------------------------- perf

def cmd_perf(args):
    """Prints the top --top lines of a flat `perf report --stdio --no-children`
    (FILE), and saves them."""
    rows = []
    samples = None
    for line in open(args.report, errors="replace"):
        m = re.match(r"#\s*Samples:\s*(\S+)", line)
        if m and samples is None:
            samples = m.group(1)
        if re.match(r"\s+[0-9.]+%\s", line):
            rows.append(line.rstrip())
    print("   top %d of %d symbols by self time (%s samples; the whole report: %s)"
          % (min(args.top, len(rows)), len(rows), samples or "?", args.full or args.report))
    for r in rows[:args.top]:
        print("   " + r)
    calls = []
    if args.children:
        # Inclusive time says which calls the self time above sits under.
        # The frames every sample has (thread start, syscall entry) say
        # nothing: only the ones with some self time of their own, or that
        # are system calls or the program's own functions, are shown.
        for line in open(args.children, errors="replace"):
            m = re.match(r"\s+([0-9.]+)%\s+([0-9.]+)%\s+\[(.)\]\s+(\S+)", line)
            if not m:
                continue
            incl, sym = float(m.group(1)), m.group(4)
            if re.match(r"(__x64_sys_|svc_|gw_|cn_|kl_|MHD_|PQ|redis)", sym):
                calls.append("%6.2f%%  %s" % (incl, sym))
        print("   inclusive time of system calls and the program's own functions (%s):" % args.children)
        for c in calls[:args.top // 2]:
            print("     " + c)
    save(args.json, {"samples": samples, "top": rows[:args.top], "report": args.full or args.report,
                     "calls": calls[:args.top // 2], "connections": args.connections})
    return 0


# ---------------------------------------------------------------- summary

def num(x, f="%.1f"):
    return "n/a" if x is None else f % x


def met(ok):
    return "n/a" if ok is None else ("MET" if ok else "NOT MET")


def div(a, b):
    return a / b if (a is not None and b) else None


def cmd_summary(args):
    def load(name):
        return load_json(os.path.join(args.dir, name + ".json"))

    w16, w256, get = load("wrk16"), load("wrk256"), load("get16")
    ins, sel = load("pgbench_insert"), load("pgbench_select")
    tp, lat, idle, prof = load("throughput"), load("latency"), load("idle"), load("perf")
    ins_tps, sel_tps = ins.get("tps"), sel.get("tps")
    W = 78

    print()
    print("=" * W)
    print("KOWLOON BENCH SUMMARY  (%s, %d cores, PostgreSQL fsync=%s synchronous_commit=%s)"
          % (datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), os.cpu_count(),
             args.fsync, args.sync))
    bg = load("background")
    if bg.get("busy_pct") is not None:
        print("machine %.0f%% busy just before the run (anything above a few %% is other work on"
              " this machine,\n and it skews every figure below)" % bg["busy_pct"])
    if args.limits:
        print("out of the benchmark's way on purpose: " + args.limits)
    print("-" * W)
    rows = []

    def row(n, title, measured, target, ok, *notes):
        """MEASURED None: the phase did not run (or printed no figure)."""
        rows.append(ok)
        print("%-2s %s" % (n, title))
        print("     %-46s %-18s %s" % ("not measured" if measured is None else measured, target, met(ok)))
        for note in notes if measured is not None else ():
            if note:
                print("     " + note)

    def ratio_text(a, b, r, unit_a, unit_b, f="%.2f", times="x"):
        return "%s%s / %s%s = %s%s" % (num(a), unit_a, num(b), unit_b, num(r, f), times)

    def threads_note(w):
        if w.get("gw_threads_max") is None:
            return None
        return "gateway threads: %s before, %s at most during the run" % (
            w.get("gw_threads_before", "?"), w["gw_threads_max"])

    def wrk_note(w):
        if not w:
            return "not measured"
        if w.get("error"):
            return "wrk: " + w["error"]
        return "p50 %s p99 %s, status >= 400: %s, socket errors %s" % (
            fmt_ms(w.get("p50_s")), fmt_ms(w.get("p99_s")), w.get("non2xx"), w.get("socket_errors"))

    s16, s256 = w16.get("ok_rps"), w256.get("ok_rps")
    r1 = div(s16, ins_tps)
    row(1, "accepted submits/s @16 conns / pgbench INSERT tps @16 clients",
        ratio_text(s16, ins_tps, r1, "/s", " tps") if w16 else None, "target >= 1.0x",
        None if r1 is None else r1 >= 1.0, wrk_note(w16), threads_note(w16))
    r2 = div(s256, s16)
    row(2, "accepted submits/s @256 conns / the same @16",
        ratio_text(s256, s16, r2, "/s", "/s", times="") if w256 else None, "target >= 0.9",
        None if r2 is None else r2 >= 0.9, wrk_note(w256), threads_note(w256))
    jps = tp.get("jobs_per_s") if tp.get("complete") else None
    r3 = div(jps, ins_tps)
    row(3, "e2e backlog, %s saxpy n=%d jobs on 2 nodes x %s slots, jobs/s / pgbench INSERT tps"
        % (tp.get("n", args.tput_n), N_ELEMS, tp.get("slots", args.slots)),
        ratio_text(jps, ins_tps, r3, " jobs/s", " tps", "%.3f") if tp else None, "target >= 0.5x",
        None if r3 is None else r3 >= 0.5,
        None if tp.get("complete") or not tp else "INCOMPLETE: %s/%s succeeded, states %s"
        % (tp.get("succeeded"), tp.get("n"), tp.get("states")),
        "server-side %s jobs/s (first created_at to last finished_at)" % num(tp.get("server_jobs_per_s"))
        if tp.get("server_jobs_per_s") else None)
    p50, p99 = lat.get("client_p50_s"), lat.get("client_p99_s")
    mode = {"prefer-wait": "Prefer: wait on the submit",
            "get-wait": "a long poll (GET with Prefer: wait; the submit ignores it)",
            "poll": "POLLING (no Preference-Applied: fallback)"}
    row(4, "e2e latency at a fixed %s jobs/s, client waiting on the result via %s"
        % (num(lat.get("rate", args.lat_rate), "%.0f"), mode.get(lat.get("mode"), "Prefer: wait")),
        "p50 %s  p99 %s" % (fmt_ms(p50), fmt_ms(p99)) if lat else None, "p50<=2 p99<=10 ms",
        None if p50 is None or p99 is None else (p50 <= 0.002 and p99 <= 0.010),
        "server-side finished-created p50 %s p99 %s; %s/%s succeeded%s"
        % (fmt_ms(lat.get("server_p50_s")), fmt_ms(lat.get("server_p99_s")),
           lat.get("succeeded", "?"), lat.get("jobs", "?"),
           ", %d not ended after %.0f s" % (lat["unfinished"], lat.get("max_wait_s", 0))
           if lat.get("unfinished") else ""))
    g = get.get("ok_rps")
    r5 = div(g, sel_tps)
    row(5, "GET /v1/jobs/{id}/s @16 conns / pgbench select-only (-S) tps @16 clients",
        ratio_text(g, sel_tps, r5, "/s", " tps") if get else None, "target >= 0.8x",
        None if r5 is None else r5 >= 0.8, wrk_note(get))
    ok6 = None
    if idle.get("threads_before") is not None:
        ok6 = bool(idle.get("complete") and idle.get("threads_growth") is not None and
                   idle["threads_growth"] <= idle.get("threads_slack", 16) and
                   idle.get("rss_during_kb") is not None and idle["rss_during_kb"] <= 256 * 1024)
    row(6, "gateway threads and RSS with %s idle keep-alive conns and %s running jobs"
        % (idle.get("conns_target", args.idle_conns), idle.get("jobs_target", args.idle_jobs)),
        None if not idle else "threads %s -> %s, RSS %s -> %s MiB" % (
            idle.get("threads_before", "?"), idle.get("threads_max", "?"),
            num(div(idle.get("rss_before_kb"), 1024.0), "%.0f"),
            num(div(idle.get("rss_during_kb"), 1024.0), "%.0f")),
        "threads +<=%s, RSS<=256MiB" % idle.get("threads_slack", 16), ok6,
        "held %s/%s connections, %s/%s jobs running at once, at most %s threads seen%s" % (
            idle.get("conns_open", "?"), idle.get("conns_target", "?"), idle.get("running_max", "?"),
            idle.get("jobs_target", "?"), idle.get("threads_max", "?"),
            "" if idle.get("complete") or not idle else " (INCOMPLETE: the figure is not for the full load)")
        if idle else "not measured")
    print("-" * W)
    if prof.get("top"):
        print("profile of the gateway at the peak of phase 1 (@%s conns), top by self time:"
              % prof.get("connections", "?"))
        for line in prof["top"][:8]:
            print("   " + " ".join(line.split()))
        if prof.get("calls"):
            print("  inclusive: " + ", ".join(" ".join(c.split()) for c in prof["calls"][:6]))
        print("   (top 25 printed above; the report: %s)" % prof.get("report"))
    else:
        print("profile: %s" % (prof.get("skipped") or "not taken"))
    bad = tp.get("problems", []) + lat.get("problems", []) + idle.get("problems", [])
    print("results: %s" % ("correct (every job succeeded, sampled outputs match numpy)" if not bad
                           else "%d PROBLEM(S), see above" % len(bad)))
    print("targets met: %d of %d rows (n/a: %d)" % (sum(1 for r in rows if r), len(rows),
                                                  sum(1 for r in rows if r is None)))
    print("=" * W)
    return 0


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("body")
    b.add_argument("--out", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--url", required=True)
    t.add_argument("--n", type=int, default=2000)
    t.add_argument("--concurrency", type=int, default=32)
    t.add_argument("--max-wait", type=float, default=60.0)
    t.add_argument("--sample", type=int, default=32)
    t.add_argument("--nodes", type=int, default=2, help="(for the heading)")
    t.add_argument("--slots", type=int, default=4, help="(for the heading)")
    t.add_argument("--ids", help="write the succeeded jobs' ids here, one a line")
    t.add_argument("--json")
    la = sub.add_parser("latency")
    la.add_argument("--url", required=True)
    la.add_argument("--rate", type=float, default=100.0)
    la.add_argument("--duration", type=float, default=10.0)
    la.add_argument("--max-wait", type=float, default=30.0)
    la.add_argument("--sample", type=int, default=16)
    la.add_argument("--poll", action="store_true", help="poll even where Prefer: wait is honoured")
    la.add_argument("--json")
    w = sub.add_parser("wrk")
    w.add_argument("--file", required=True)
    w.add_argument("--kind", choices=sorted(WRK_TITLES), default="submit")
    w.add_argument("--phase", default="1", help="(for the heading)")
    w.add_argument("--connections", type=int, required=True)
    w.add_argument("--jobs-rows", type=int)
    w.add_argument("--ids", type=int, help="how many job ids the GETs cycle over (for the heading)")
    w.add_argument("--cpu-json", help="the cpu sampler's figures of the same run (threads)")
    w.add_argument("--json")
    p = sub.add_parser("pgbench")
    p.add_argument("--file", required=True)
    p.add_argument("--mode", choices=("insert", "select"), default="insert")
    p.add_argument("--seconds", default="10")
    p.add_argument("--sync", default="on")
    p.add_argument("--json")
    c = sub.add_parser("cpu")
    c.add_argument("--seconds", type=float, default=5.0)
    c.add_argument("--delay", type=float, default=0.0)
    c.add_argument("--proc", action="append")
    c.add_argument("--pg", type=int)
    c.add_argument("--comm", action="append")
    c.add_argument("--watch", help="NAME=PID whose threads and RSS to follow")
    c.add_argument("--watch-before", type=int, help="its thread count before the load (as given)")
    c.add_argument("--json")
    pf = sub.add_parser("perf")
    pf.add_argument("--report", required=True, help="flat perf report (--stdio --no-children -g none)")
    pf.add_argument("--full", help="the report with call graphs (named in the output)")
    pf.add_argument("--children", help="report with inclusive time (--children --sort sym -g none)")
    pf.add_argument("--top", type=int, default=25)
    pf.add_argument("--connections", type=int)
    pf.add_argument("--json")
    s = sub.add_parser("summary")
    s.add_argument("--dir", required=True)
    s.add_argument("--fsync", default="on")
    s.add_argument("--sync", default="on")
    s.add_argument("--limits", help="what the run turned off, as one line")
    # the knobs, so that a row whose phase did not run still names its load
    s.add_argument("--tput-n", type=int, default=10000)
    s.add_argument("--slots", type=int, default=4)
    s.add_argument("--lat-rate", type=float, default=100.0)
    s.add_argument("--idle-conns", type=int, default=10000)
    s.add_argument("--idle-jobs", type=int, default=1000)
    args = ap.parse_args()

    if args.cmd == "body":
        with open(args.out, "wb") as f:
            f.write(saxpy_body(0))
        return 0
    if args.cmd == "throughput":
        return asyncio.run(throughput(args))
    if args.cmd == "latency":
        return asyncio.run(latency(args))
    return {"wrk": cmd_wrk, "pgbench": cmd_pgbench, "cpu": cmd_cpu, "perf": cmd_perf,
            "summary": cmd_summary}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
