#!/usr/bin/env python3
"""Slurm's start overhead on this machine, for comparison with Kowloon's
tasks (bench/tasks.py): a private one-host slurm-wlm cluster like the one
tests/integration/test_slurm.py starts (munged with a generated key,
slurmctld and slurmd from a generated slurm.conf, free ports, everything
under a temporary directory, removed at the end), then a trivial job N
times:

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
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun",
            "squeue", "sinfo", "scancel")
PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def _bin(name):
    return shutil.which(name, path=PATH)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, interval, what):
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(interval)


class Slurm:
    """munged, slurmctld and slurmd of a one-host cluster under root (the
    same configuration as test_slurm.py's, less its KillWait)."""

    def __init__(self, root, sched_params=None):
        self.root = root
        self.sched_params = sched_params
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(root, "slurm.conf")
        self.munge_dir = os.path.join(root, "munge")
        self.log_dir = os.path.join(root, "log")
        self.pids = {}

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KOWLOON_", "SLURM"))}
        env["SLURM_CONF"] = self.conf
        return env

    def run(self, *argv, check=True, timeout=30):
        r = subprocess.run([_bin(argv[0]), *argv[1:]], env=self.env(), capture_output=True,
                           text=True, timeout=timeout, cwd=self.root)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def _write_conf(self):
        sock = os.path.join(self.munge_dir, "munge.sock")
        state, spool = os.path.join(self.root, "state"), os.path.join(self.root, "spool")
        for d in (state, spool):
            os.makedirs(d, mode=0o755)
        extra = f"SchedulerParameters={self.sched_params}\n" if self.sched_params else ""
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=kowloonbench
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.log_dir}/slurmctld.log
SlurmdLogFile={self.log_dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
{extra}SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
InactiveLimit=0
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=100 State=UNKNOWN
PartitionName=kowloon Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, name, argv, pidfile):
        r = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=30,
                           cwd=self.root)
        if r.returncode != 0:
            raise RuntimeError(f"{name} did not start ({r.returncode}): {r.stderr}")
        wait_until(lambda: os.path.exists(pidfile) and open(pidfile).read().strip(), 10, 0.1,
                   f"{name} pid file")
        self.pids[name] = int(open(pidfile).read().strip())

    def start(self):
        os.makedirs(self.munge_dir, mode=0o755)
        os.makedirs(self.log_dir, mode=0o755)
        key = os.path.join(self.munge_dir, "munge.key")
        subprocess.run([_bin("mungekey"), "--create", f"--keyfile={key}"], check=True,
                       capture_output=True, timeout=30)
        os.chmod(key, 0o400)
        self._daemon("munged", [_bin("munged"), "--force",
                                f"--socket={self.munge_dir}/munge.sock", f"--key-file={key}",
                                f"--log-file={self.log_dir}/munged.log",
                                f"--pid-file={self.munge_dir}/munged.pid",
                                f"--seed-file={self.munge_dir}/munged.seed"],
                     f"{self.munge_dir}/munged.pid")
        self._write_conf()
        self._daemon("slurmctld", [_bin("slurmctld"), "-f", self.conf, "-i"],
                     f"{self.root}/slurmctld.pid")
        self._daemon("slurmd", [_bin("slurmd"), "-f", self.conf], f"{self.root}/slurmd.pid")

        def idle():
            out = self.run("sinfo", "-h", "-o", "%t", check=False).stdout.split()
            return out and out[0] == "idle"
        wait_until(idle, 30, 0.3, "the slurm node to be idle")
        return self

    def stop(self):
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)


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
    s = Slurm(root, sched_params)
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
    missing = [b for b in BINARIES if not _bin(b)]
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
