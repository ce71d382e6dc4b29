"""Chaos on a simulated cluster (issue 20): kl-scalesim's nodes (the real
cluster protocol: per-node credentials, heartbeats, lease polls, gang
rendezvous, batched results) run a Philly-shaped mix of 1-GPU, multi-GPU,
8-GPU and 2-16-node gang jobs from four tenants (bench/philly.py) while the
gateway is killed with SIGKILL and restarted, Redis is flushed and
PostgreSQL is restarted, at random times (tests/chaos/chaos.py's faults).
Jobs are submitted through the outages, each body with its own
Idempotency-Key, retried until it gets its 202. Then, from PostgreSQL and
from the simulator's record of every run part it ended:

  lost               accepted jobs missing from PostgreSQL or not terminal
                     once the bounded wait is over
  duplicate_results  job_results rows beyond one per job (or of a job that
                     did not succeed) and terminal job_events beyond one
  unrun_successes    succeeded jobs whose succeeding attempt the nodes did
                     not run whole (a part of it missing or not succeeded)
  double_parts       run parts (job, attempt, rank) the nodes ended twice
  overcommits        leases that gave a node more GPUs than it had free,
                     or a device already busy (the simulator counts them)

The last line printed is the summary:

  accepted=N terminal=N lost=0 duplicate_results=0 unrun_successes=0 double_parts=0 overcommits=0 faults: gateway_kill=a redis_flush=b pg_restart=c

Exit 0 only when all five are 0 and every fault kind happened at least the
target number of times. Short run by default (16 nodes of 8 GPUs, 600 jobs
of 1 s mean over 30 s, one fault of each kind: the GPUs half busy); --full
(make chaos): 24 nodes, 4,000 jobs of 2 s mean over 120 s, three of each:
80-90 % busy. Node kills are chaos.py's part: a killed
simulator would take its record of the runs with it."""

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chaos as ch  # noqa: E402

stk = ch.stk
sys.path.insert(0, os.path.join(stk.REPO, "bench"))
import philly  # noqa: E402

SIM_BIN = os.path.join(stk.BUILD_ROOT, "bin", "kl-scalesim")
KINDS = ("gateway_kill", "redis_flush", "pg_restart")
GPUS = 8
TENANTS = {"sim-w1": 1, "sim-w2": 2, "sim-w3": 3, "sim-w4": 4}
log = ch.log


class SimChaosStack(ch.ChaosStack):
    """chaos.py's stack without nodes of its own, its gateway open to a
    simulator's many nodes on one address and to a fast submitter."""

    def gateway_env(self, **extra):
        env = super().gateway_env(**extra)
        env.update({"KOWLOON_RATE_LIMIT_RPS": "0", "KOWLOON_MAX_CONNS_PER_IP": "0",
                    "KOWLOON_MAX_QUEUED_PER_TENANT": "0", "KOWLOON_MAX_RUNNING_PER_TENANT": "0",
                    "KOWLOON_MAX_CONNECTIONS": "4096", "KOWLOON_LOG_LEVEL": "info"})
        return env


class Submitter:
    """Posts the jobs at a steady rate from two threads; a body is retried
    with its Idempotency-Key after a 429, a 503 or a cut connection until
    it gets its 202 (then it counts once) or the deadline passes."""

    def __init__(self, stack, keys, bodies, rate, deadline):
        self.stack, self.keys, self.bodies = stack, keys, bodies
        self.rate, self.deadline = rate, deadline
        self.accepted = {}                 # job id -> body index
        self.refused = []                  # (index, status, text): a 4xx that is not 429
        self.stats = collections.Counter()
        self.mu = threading.Lock()
        self.threads = [threading.Thread(target=self._work, args=(k,), daemon=True) for k in range(2)]

    def start(self):
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def join(self):
        for t in self.threads:
            t.join()

    def alive(self):
        return any(t.is_alive() for t in self.threads)

    def _work(self, k):
        http = requests.Session()
        for i in range(k, len(self.bodies), len(self.threads)):
            at = self.t0 + i / self.rate
            while time.monotonic() < at:
                time.sleep(0.01)
            self._one(http, i)

    def _one(self, http, i):
        tenant, body, idem = self.bodies[i]
        h = {"Authorization": f"Bearer {self.keys[tenant]}", "Idempotency-Key": idem}
        while time.monotonic() < self.deadline:
            try:
                r = http.post(f"{self.stack.base}/v1/jobs", json=body, headers=h, timeout=15)
            except requests.RequestException:
                with self.mu:
                    self.stats["cut"] += 1
                time.sleep(0.3)
                continue
            with self.mu:
                self.stats[str(r.status_code)] += 1
            if r.status_code in (200, 201, 202):
                with self.mu:
                    self.accepted[r.json()["id"]] = i
                return
            if r.status_code not in (429, 503):
                with self.mu:
                    self.refused.append((i, r.status_code, r.text[:200]))
                return
            time.sleep(ch.retry_after(r))


def run_parts(path):
    """The simulator's record: {(job, attempt, rank): state}, and how many
    parts it ended more than once."""
    parts, twice = {}, 0
    with open(path) as f:
        for line in f:
            x = line.rstrip("\n").split("\t")
            key = (x[0], int(x[1]), int(x[3]))
            twice += key in parts
            parts[key] = x[11]
    return parts, twice


def check(pg, accepted, jobs, parts):
    """The problems of the run, as (name, count, detail) for the summary."""
    lost = [jid for jid in accepted if jid not in pg or pg[jid]["state"] not in ch.TERMINAL]
    dup, dup_detail = ch.recorded_twice(pg)
    unrun = []
    for jid, j in pg.items():
        if j["state"] != "succeeded":
            continue
        want = jobs[j["cid"]]["nodes"]
        # the simulator writes rank -1 for a one-node job's only part
        got = [parts.get((jid, j["attempts"], r)) for r in (range(want) if want > 1 else (-1,))]
        if any(g != "succeeded" for g in got):
            unrun.append(f"{jid} attempt {j['attempts']}: parts {got}")
    return lost, dup, dup_detail, unrun


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="24 nodes, 4,000 jobs, three faults of each kind")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--faults", type=int, help="faults of each kind to inject")
    ap.add_argument("--seconds", type=float, help="how long jobs are submitted for")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KOWLOON_CHAOS_SEED", "0")) or None)
    ap.add_argument("--keep", action="store_true", help="keep the stack's files (logs) afterwards")
    a = ap.parse_args()
    # a cluster the work keeps busy (half of it in the short run, 80-90 %
    # in the full one), its queue growing in bursts (reservations and
    # backfill at work while the faults hit), with room for 16-node gangs
    nodes = a.nodes or (24 if a.full else 16)
    njobs = a.jobs or (4000 if a.full else 600)
    per_kind = a.faults or (3 if a.full else 1)
    seconds = a.seconds or (120.0 if a.full else 30.0)
    # the trace's mean job, compressed (bench/philly.py)
    mean_s = 2.0 if a.full else 1.0
    drain_s = 240 if a.full else 90
    seed = a.seed or random.SystemRandom().randrange(1, 2**31)
    rnd = random.Random(seed)
    label = f"sim{seed}"
    if not os.access(SIM_BIN, os.X_OK):
        log(f"PROBLEM: {SIM_BIN} is missing: run `make all`")
        return 1
    log(f"sim chaos: {njobs} jobs over {seconds:.0f}s on {nodes} simulated nodes x {GPUS} GPUs, "
        f"{per_kind} fault(s) of each of {', '.join(KINDS)}, mean job {mean_s} s, seed {seed}")

    _, jobs = philly.generate(njobs, mean_s=mean_s, seed=seed, tenants=len(TENANTS))
    names = sorted(TENANTS)
    bodies = []
    for j in jobs:
        body = philly.job_body(j)
        body["labels"] = {"chaos": label, "cid": str(j["i"])}
        bodies.append((names[j["i"] % len(names)], body, f"{label}-{j['i']}"))

    stack = SimChaosStack(node_names=(), node_timeout_s=ch.NODE_TIMEOUT_S)
    sim = None

    ch.close_on_signals(stack, lambda: sim is not None and sim.kill())

    failed, summary, problems = True, None, []
    try:
        t_start = time.monotonic()
        stack.start()
        admin = stack.client("admin")
        keys = {}
        for t, w in TENANTS.items():
            admin.post("/v1/tenants", json={"name": t, "weight": w}).raise_for_status()
            keys[t] = stack.create_key(t)
        runs_path = os.path.join(stack.root, "sim-runs.tsv")
        summary_path = os.path.join(stack.root, "sim-summary.json")
        sim_log = open(os.path.join(stack.logs, "kl-scalesim.log"), "w")
        sim = subprocess.Popen([SIM_BIN, "nodes", "--gateway", stack.cluster_base, "--nodes", str(nodes),
                                "--gpus", str(GPUS), "--runs", runs_path, "--summary", summary_path,
                                "--prefix", "simnode", "--rdv-timeout-s", "120"],
                               env=dict(os.environ, KOWLOON_CLUSTER_TOKEN=stack.cluster_token),
                               stdout=sim_log, stderr=sim_log)
        log(f"stack up in {time.monotonic() - t_start:.1f}s: gateway {stack.base}, "
            f"postgres :{stack.pg_port}, redis :{stack.redis_port}, logs {stack.logs}")
        t0 = time.monotonic()
        sub = Submitter(stack, keys, bodies, njobs / seconds, t0 + seconds + 60).start()
        chaos = ch.Chaos(stack, per_kind, t0 + seconds, rnd, kinds=KINDS).start()
        last = t0
        while sub.alive() or chaos.alive():
            time.sleep(0.5)
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                log(f"t={last - t0:.0f}s accepted {len(sub.accepted)}, answers "
                    f"{dict(sub.stats)}, faults {dict(chaos.count)}")
            if time.monotonic() > sub.deadline + 60:
                break
        chaos.stop.set()
        chaos.join(60)
        sub.join()
        accepted = dict(sub.accepted)
        log(f"submitted in {time.monotonic() - t0:.0f}s: {len(accepted)} accepted, answers "
            f"{dict(sub.stats)}; waiting up to {drain_s}s for every job to finish")
        t_sub = time.monotonic()
        pg = ch.wait_terminal(stack, label, list(accepted), drain_s)
        log(f"drained in {time.monotonic() - t_sub:.0f}s")
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=60)
        if sim.returncode != 0:
            problems.append(f"kl-scalesim exited {sim.returncode}")
        with open(summary_path) as f:
            simsum = json.load(f)
        parts, twice = run_parts(runs_path)

        lost, dup, dup_detail, unrun = check(pg, accepted, jobs, parts)
        overcommits = simsum.get("overcommit_runs", 0) + simsum.get("slot_overcommits", 0)
        unacked_open = [jid for jid, j in pg.items() if jid not in accepted and j["state"] not in ch.TERMINAL]
        over_attempts = [jid for jid, j in pg.items() if j["attempts"] > j["max_attempts"]]
        states = collections.Counter(j["state"] + (f"/{j['code']}" if j["code"] else "")
                                     for jid, j in pg.items() if jid in accepted)
        retried = sum(1 for jid in accepted if jid in pg and pg[jid]["attempts"] > 1)
        log(f"outcomes: {dict(states)}; {retried} ran more than once; simulator: "
            f"{json.dumps({k: simsum.get(k) for k in ('runs_taken', 'runs_refused', 'rdv_failed', 'cancels', 'overcommit_runs', 'slot_overcommits')})}")
        if len(accepted) < njobs:
            problems.append(f"only {len(accepted)} of {njobs} jobs were accepted by the deadline")
        for what, ids in (("not terminal or missing", lost), ("succeeded without their nodes running "
                          "the attempt whole", unrun), ("committed without a 202 and not terminal",
                          unacked_open), ("attempts above max_attempts", over_attempts)):
            if ids:
                problems.append(f"{len(ids)} job(s) {what}: " + "; ".join(
                    f"{i} {pg.get(i, '')}" if i in pg else str(i) for i in ids[:5]))
        if dup:
            problems.append(f"{dup} duplicate record(s): " + "; ".join(dup_detail[:5]))
        if twice:
            problems.append(f"{twice} run part(s) ended twice on the nodes")
        if overcommits:
            problems.append(f"{overcommits} over-commit(s) on the nodes: {simsum}")
        if sub.refused:
            problems.append(f"{len(sub.refused)} submit(s) refused: {sub.refused[:3]}")
        for kind in KINDS:
            if chaos.count[kind] < 1:
                problems.append(f"{kind}: {chaos.count[kind]} verified, target 1")
        problems += [f"fault not verified: {u}" for u in chaos.unverified]
        terminal = sum(1 for jid in accepted if jid in pg and pg[jid]["state"] in ch.TERMINAL)
        c = chaos.count
        summary = (f"accepted={len(accepted)} terminal={terminal} lost={len(lost)} "
                   f"duplicate_results={dup} unrun_successes={len(unrun)} double_parts={twice} "
                   f"overcommits={overcommits} faults: " + " ".join(f"{k}={c[k]}" for k in KINDS))
        for p in problems:
            log("PROBLEM: " + p)
        log(f"total {time.monotonic() - t_start:.0f}s")
        failed = bool(problems)
    except (stk.StackError, stk.ApiError, OSError, subprocess.SubprocessError, ValueError,
            requests.RequestException) as e:
        problems = [f"sim chaos run broke (no summary): {type(e).__name__}: {e}"]
        log(problems[0])
    finally:
        if sim is not None and sim.poll() is None:
            sim.kill()
        stack.close()
    return ch.finish(stack, failed, problems, a.keep, summary)


if __name__ == "__main__":
    sys.exit(main())
