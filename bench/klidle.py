#!/usr/bin/env python3
"""bench/klidle.py — phase 6 of `make bench`: what the gateway's threads and
memory do under many idle connections and many running jobs.

Reads the gateway's Threads and VmRSS (/proc/PID/status) at rest; opens
--conns keep-alive connections, each with one completed GET /healthz and then
left idle; submits --jobs `sleep` jobs (--job-s seconds each: long enough to
be running all at once, on nodes the caller started with enough slots) and
waits until they run; reads the figures again and holds a few seconds; checks
that every idle connection still answers; then closes them, cancels the jobs
(through the API, so cancel reaches the running kernels) and waits for them to
end. The target is the issue's: threads constant (growth at most
--threads-slack over rest), RSS <= 256 MiB.

Never fails on time. Exits 1 only when a result is wrong: a sleep job that
failed, or ended in another state than cancelled or succeeded.
"""

import argparse
import asyncio
import os
import resource
import sys
import time
import uuid
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from klbench import Client, Conn, any_in_state, list_label, proc_status, save  # noqa: E402


def mib(kb):
    return "?" if kb is None else "%.0f MiB" % (kb / 1024.0)


def meminfo_kb(field):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def raise_nofile(need):
    """Raises this process's open-file limit towards NEED; returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


class Sampler:
    """Follows the gateway's threads and RSS every 0.1 s while it runs."""

    def __init__(self, pid):
        self.pid = pid
        self.threads_max = self.rss_max = 0
        self.task = None

    def now(self):
        st = proc_status(self.pid)
        self.threads_max = max(self.threads_max, st.get("threads", 0))
        self.rss_max = max(self.rss_max, st.get("rss_kb", 0))
        return st

    async def _loop(self):
        while True:
            self.now()
            await asyncio.sleep(0.1)

    def start(self):
        self.threads_max = self.rss_max = 0
        self.task = asyncio.ensure_future(self._loop())

    async def stop(self):
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


async def healthz_all(conns, head, conc, errors):
    """One GET /healthz on each of CONNS (at most CONC at once); returns the
    connections that answered 200 and stay open. The others are closed, and
    why is counted in ERRORS."""
    sem = asyncio.Semaphore(conc)
    kept = []

    async def one(c):
        async with sem:
            try:
                if c.r is None:
                    await asyncio.wait_for(c.open(), 15)
                status, _, _, keep = await asyncio.wait_for(c.request(head, None), 15)
            except Exception as e:   # noqa: BLE001 - counted, not raised
                errors[type(e).__name__] += 1
                c.close()
                return
            if status != 200 or not keep:
                errors["status %d%s" % (status, "" if keep else ", closed")] += 1
                c.close()
                return
            kept.append(c)

    await asyncio.gather(*(one(c) for c in conns))
    return kept


async def run(args):
    limit = raise_nofile(args.conns + 256)
    conns_target = args.conns
    capped = None
    if limit != resource.RLIM_INFINITY and limit < args.conns + 256:
        capped = args.conns
        args.conns = max(0, limit - 256)
    cl = Client(args.url, os.environ["KL_BENCH_KEY"])
    head = ("GET /healthz HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (cl.host, cl.port)).encode()
    sampler = Sampler(args.gw_pid)
    problems = []
    res = {"conns_target": conns_target, "jobs_target": args.jobs, "job_s": args.job_s,
           "threads_slack": args.threads_slack}

    print("== 6. gateway threads and RSS: %d idle keep-alive connections, %d running jobs "
          "(sleep %.0f s, cancelled after)" % (conns_target, args.jobs, args.job_s))
    if capped:
        print("   NOTE: open-file limit %d: only %d connections can be opened here" % (limit, args.conns))

    await asyncio.sleep(args.settle)
    rest = sampler.now()
    res["threads_before"], res["rss_before_kb"] = rest.get("threads"), rest.get("rss_kb")
    print("   at rest:                        threads %6s   RSS %s"
          % (rest.get("threads", "?"), mib(rest.get("rss_kb"))))
    sampler.start()

    # -- the idle connections, in chunks: this machine may be shared, and a
    # gateway that spends much memory per connection must not exhaust it
    floor = max(2 << 20, meminfo_kb("MemTotal") // 10)
    t0 = time.monotonic()
    errors = Counter()
    idle = []
    while len(idle) + sum(errors.values()) < args.conns:
        n = min(args.chunk, args.conns - len(idle) - sum(errors.values()))
        idle += await healthz_all([Conn(cl.host, cl.port) for _ in range(n)], head,
                                  args.open_conc, errors)
        per_conn = (sampler.now().get("rss_kb", 0) - (rest.get("rss_kb") or 0)) / max(1, len(idle))
        left = args.conns - len(idle) - sum(errors.values())
        avail = meminfo_kb("MemAvailable")
        if left > 0 and avail - per_conn * min(left, args.chunk) < floor:
            print("   NOTE: stopped opening at %d connections: the gateway holds %.0f KiB more RSS per "
                  "connection, and this machine has %.0f MiB available (keeping %.0f MiB free)"
                  % (len(idle), per_conn, avail / 1024.0, floor / 1024.0))
            res["memory_stop"] = True
            break
    t_open = time.monotonic() - t0
    await asyncio.sleep(1.0)
    st = sampler.now()
    res.update(conns_opened=len(idle), open_s=t_open, threads_conns=st.get("threads"),
               rss_conns_kb=st.get("rss_kb"), open_errors=dict(errors))
    print("   + %5d idle connections:        threads %6s   RSS %s   (opened %d/%d in %.1f s%s)"
          % (args.conns, st.get("threads", "?"), mib(st.get("rss_kb")), len(idle), args.conns, t_open,
             "; failures: " + ", ".join("%s %d" % kv for kv in errors.most_common()) if errors else ""))

    # -- the running jobs
    tag = "idle-" + uuid.uuid4().hex[:8]
    label = "bench:" + tag
    status, doc = await cl.json("GET", "/v1/kernels")
    names = [k.get("name") for k in (doc or {}).get("kernels", [])] if status == 200 else []
    ids = []
    running_max = 0
    t_run = None
    if "sleep" not in names:
        print("   the catalog has no `sleep` kernel (GET /v1/kernels: %d): no running jobs in this phase"
              % status)
    else:
        await cl.warm(args.submit_conc)
        body = ('{"kernel":"sleep","params":{"seconds":%g},"inputs":{},"labels":{"bench":"%s"}}'
                % (args.job_s, tag)).encode()
        left = args.jobs
        t0 = time.monotonic()

        async def submitter():
            nonlocal left
            while left > 0:
                left -= 1
                try:
                    status, doc = await cl.json("POST", "/v1/jobs", body)
                except Exception as e:   # noqa: BLE001
                    problems.append("submit sleep: %r" % e)
                    continue
                if status not in (200, 201, 202) or not doc or "id" not in doc:
                    problems.append("submit sleep: status %d %s" % (status, (doc or {}).get("error")))
                    continue
                ids.append(doc["id"])

        await asyncio.gather(*(submitter() for _ in range(args.submit_conc)))
        t_sub = time.monotonic() - t0
        # until all run, none is left queued, or the wait is over
        deadline = time.monotonic() + args.wait_s
        t_said = time.monotonic()
        while True:
            n = len(await list_label(cl, label, "running"))
            running_max = max(running_max, n)
            if n >= len(ids):
                t_run = time.monotonic() - t0
                break
            if time.monotonic() > deadline or not await any_in_state(cl, label, "queued"):
                break
            if time.monotonic() - t_said >= 10:
                t_said = time.monotonic()
                print("     (%d of %d running %.0f s after the first submit)"
                      % (n, len(ids), t_said - t0), flush=True)
            await asyncio.sleep(0.5)
        waited = running_max
        await asyncio.sleep(args.hold_s)
        n = len(await list_label(cl, label, "running"))
        running_max = max(running_max, n)
        if t_run is None and n >= len(ids):
            t_run = time.monotonic() - t0   # (at most: they got there during the hold)
        st = sampler.now()
        print("   + %5d running jobs:            threads %6s   RSS %s   (submitted in %.1f s; %s)"
              % (len(ids), st.get("threads", "?"), mib(st.get("rss_kb")), t_sub,
                 "all running %.1f s after the first submit" % t_run if t_run is not None and
                 waited >= len(ids) else
                 "%d running at most within the %.0f s wait" % (waited, args.wait_s)))
        print("     (%d running after holding %.0f s more)" % (n, args.hold_s))
    st = sampler.now()
    res.update(jobs=len(ids), running_max=running_max, all_running_s=t_run,
               threads_during=st.get("threads"), rss_now_kb=st.get("rss_kb"))

    # -- do the idle connections still answer?
    errors = Counter()
    alive = await healthz_all(idle, head, args.open_conc, errors)
    res["conns_open"] = len(alive)
    print("   idle connections that still answer a GET /healthz afterwards: %d/%d%s"
          % (len(alive), args.conns, "; failures: " + ", ".join("%s %d" % kv for kv in errors.most_common())
             if errors else ""))
    await sampler.stop()
    res.update(threads_max=sampler.threads_max, rss_during_kb=sampler.rss_max)
    print("   most seen under load:           threads %6d   RSS %s"
          % (sampler.threads_max, mib(sampler.rss_max)))
    for c in alive:
        c.close()

    # -- cancel the jobs, wait for them to end, check how they ended
    if ids:
        t0 = time.monotonic()
        sem = asyncio.Semaphore(args.submit_conc)
        cancel_bad = Counter()

        async def cancel(jid):
            async with sem:
                try:
                    status, _ = await cl.json("POST", "/v1/jobs/%s/cancel" % jid)
                except Exception as e:   # noqa: BLE001
                    cancel_bad[type(e).__name__] += 1
                    return
                if status not in (200, 202, 409):   # 409: it had already ended
                    cancel_bad["status %d" % status] += 1

        await asyncio.gather(*(cancel(j) for j in ids))
        t_cancel = time.monotonic() - t0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not await any_in_state(cl, label, "queued") and not await any_in_state(cl, label, "running"):
                break
            await asyncio.sleep(0.2)
        t_end = time.monotonic() - t0
        states = Counter(j["state"] for j in await list_label(cl, label))
        for j in await list_label(cl, label, "failed"):
            if len(problems) < 10:
                problems.append("sleep job %s failed: %s" % (j["id"], j.get("error")))
        pending = {s: n for s, n in states.items() if s in ("queued", "running")}
        if pending:
            # not ended a minute after the cancels: slow, not wrong
            print("   NOTE: %s not ended 60 s after the cancels" % pending)
        print("   cancelled %d jobs in %.1f s (cancel errors: %s), all ended %.1f s after the first "
              "cancel; states %s" % (len(ids), t_cancel, dict(cancel_bad) or "none", t_end, dict(states)))
        res.update(cancel_s=t_cancel, end_s=t_end, states=dict(states))
    cl.close()
    await asyncio.sleep(args.settle)
    st = sampler.now()
    res.update(threads_after=st.get("threads"), rss_after_kb=st.get("rss_kb"))
    print("   after closing them and the jobs' end: threads %s   RSS %s"
          % (st.get("threads", "?"), mib(st.get("rss_kb"))))

    res["complete"] = bool(res["conns_opened"] >= conns_target and res["conns_open"] >= conns_target
                           and running_max >= args.jobs)
    if res["threads_before"] is not None:
        res["threads_growth"] = res["threads_max"] - res["threads_before"]
    ok = (res["complete"] and res.get("threads_growth") is not None
          and res["threads_growth"] <= args.threads_slack and res["rss_during_kb"] <= 256 * 1024)
    print("   target: threads constant (at most +%d over rest: %s), RSS <= 256 MiB (%s)%s: %s"
          % (args.threads_slack, "+%s" % res.get("threads_growth", "?"), mib(res["rss_during_kb"]),
             "" if res["complete"] else ", under the full load", "MET" if ok else "NOT MET"))
    res["problems"] = problems
    for p in problems[:10]:
        print("     ! " + p)
    save(args.json, res)
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--gw-pid", type=int, required=True)
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--job-s", type=float, default=300.0, help="how long each sleep job would run")
    ap.add_argument("--wait-s", type=float, default=60.0, help="longest wait for every job to run")
    ap.add_argument("--hold-s", type=float, default=3.0, help="time under the full load")
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--open-conc", type=int, default=200, help="connections opened at once")
    ap.add_argument("--chunk", type=int, default=1000,
                    help="connections opened between two looks at the memory left")
    ap.add_argument("--submit-conc", type=int, default=32)
    ap.add_argument("--threads-slack", type=int, default=16,
                    help="thread growth still called constant (lazily started pool threads)")
    ap.add_argument("--json")
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
