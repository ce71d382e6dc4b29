#!/usr/bin/env python3
"""Slurm's start overhead on this machine, for comparison with Kowloon's
tasks (bench/tasks.py): the private one-host slurm-wlm cluster that
tests/integration/cluster/test_slurm.py starts (tests/integration/slurmstack.py:
munged with a generated key, slurmctld and slurmd from a generated
slurm.conf, free ports, everything under a temporary directory, removed at
the end), then a trivial job N times:

  sbatch -> start   from just before `sbatch --wrap 'date +%s.%N > F; ...'`
                    runs to the time the job writes as its first command;
  sbatch -> end     to the first poll (`squeue -t all`, every 10 ms) that
                    sees the job COMPLETED (what a client waiting on it sees);
  srun -> start     `srun date +%s.%N`: to the time it prints;
  srun true         the wall time of `srun true` (submit -> end).

Before each submit it sleeps a random 0-1 s, so that submits fall at any
point of slurmctld's once-a-second background loop (back to back, each run
would lock onto the same phase of it).

The scheduler settings are Slurm's defaults (SchedulerType=sched/builtin,
no SchedulerParameters). What matters: slurmctld 22.05 does not allocate a
batch job in the submit RPC; its background loop (about once a second)
runs the scheduler for newly submitted jobs once batch_sched_delay (default
3 s) has passed since the last pass — so sbatch -> start is 2-3 s on an idle
cluster. sched_min_interval (default 2 us) throttles event-driven passes,
sched_interval (default 60 s) is the full-queue pass, `defer` (off) would
delay further. srun's allocation is made in the RPC itself, with none of
these waits. --fast adds a second cluster with
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0 (no delay
between passes): then the background loop's tick is what remains.

Needs root (slurmd starts steps as the submitting user) and the slurm-wlm
and munge binaries; exits 0 printing why when they are missing. Prints a
line per cluster, `slurm: sbatch→start median X ms p90 Y ms; ...`;
--json FILE also writes the figures there."""

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from slurmstack import Slurm, missing_binaries  # noqa: E402  (the test cluster's)


def _state(slurm, job):
    return slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T", check=False).stdout.strip()


def sbatch_once(slurm, k):
    out = os.path.join(slurm.root, f"start-{k}")
    time.sleep(random.random())
    t0 = time.time()
    r = slurm.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap",
                  f"date +%s.%N > {out}.tmp; mv {out}.tmp {out}")
    job = r.stdout.strip().split(";")[0]
    while True:
        st = _state(slurm, job)
        if st == "COMPLETED":
            t_end = time.time()
            break
        if st in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"):
            raise RuntimeError(f"job {job} ended {st}")
        if time.time() - t0 > 60:
            raise RuntimeError(f"job {job} still {st!r} after 60 s")
        time.sleep(0.01)
    t_start = float(open(out).read().strip())
    return t_start - t0, t_end - t0


def srun_once(slurm):
    t0 = time.time()
    r = slurm.run("srun", "date", "+%s.%N")
    t_end = time.time()
    return float(r.stdout.strip().splitlines()[0]) - t0, t_end - t0


def srun_true(slurm):
    t0 = time.time()
    slurm.run("srun", "true")
    return time.time() - t0


def stats(xs):
    xs = sorted(x * 1000 for x in xs)
    p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    return {"median_ms": round(statistics.median(xs)), "p90_ms": round(p90),
            "min_ms": round(xs[0]), "max_ms": round(xs[-1]), "n": len(xs)}


def measure(runs, sched_params):
    root = tempfile.mkdtemp(prefix="kowloon-slurmbench-")
    os.chmod(root, 0o755)
    s = Slurm(root, name="kowloonbench", sched_params=sched_params)
    try:
        s.start()
        # one of each first: the first job pays for loading plugins
        sbatch_once(s, "warm")
        srun_true(s)
        b = [sbatch_once(s, k) for k in range(runs)]
        sr = [srun_once(s) for _ in range(runs)]
        st = [srun_true(s) for _ in range(runs)]
    except Exception:
        for n in sorted(os.listdir(s.log_dir)) if os.path.isdir(s.log_dir) else ():
            sys.stderr.write(f"----- {n} -----\n")
            sys.stderr.write(open(os.path.join(s.log_dir, n), errors="replace").read()[-4000:])
        raise
    finally:
        for job in s.run("squeue", "-h", "-o", "%i", check=False).stdout.split() if s.pids else ():
            s.run("scancel", job, check=False)
        s.stop()
        shutil.rmtree(root, ignore_errors=True)
    return {"sched_params": sched_params or "(defaults)",
            "sbatch_start": stats([x[0] for x in b]), "sbatch_end": stats([x[1] for x in b]),
            "srun_start": stats([x[0] for x in sr]), "srun_end": stats([x[1] for x in sr]),
            "srun_true": stats(st)}


def line(r):
    f = lambda k: f"median {r[k]['median_ms']} ms p90 {r[k]['p90_ms']} ms"  # noqa: E731
    return (f"slurm: sbatch→start {f('sbatch_start')}; sbatch→end {f('sbatch_end')}; "
            f"srun→start {f('srun_start')}; srun true {f('srun_true')} "
            f"(n={r['sbatch_start']['n']}, SchedulerParameters {r['sched_params']})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--fast", action="store_true",
                    help="also a run with SchedulerParameters=sched_min_interval=0,batch_sched_delay=0")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    missing = missing_binaries()
    if missing:
        print(f"slurm: skipped, missing {' '.join(missing)} (scripts/install-deps.sh installs them)")
        return 0
    if os.geteuid() != 0:
        print("slurm: skipped, slurmd needs root")
        return 0
    results = [measure(a.runs, None)]
    print(line(results[0]), flush=True)
    if a.fast:
        results.append(measure(a.runs, "sched_min_interval=0,batch_sched_delay=0"))
        print(line(results[1]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
