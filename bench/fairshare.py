#!/usr/bin/env python3
"""fairshare.py — the scheduler's weighted fair share, offline, on a job
file of philly.py: how far from their weights' shares the tenants' GPU-
seconds land over a window when every job's duration is exact and no
control path delays a start (issue 20, figure 4). It answers whether an
error the bench measures is the control path's or the policy's.

The model (as gateway/sched places, less its windows and reservations):
all jobs queued at t=0, each tenant's in file order; at t=0 and at every
end the tenant furthest below its target (the GPUs shared by weight among
the tenants; held GPUs subtracted) places its first job that fits within
its first --look entries (a one-node job best fit, a gang on whole free
nodes), until none fits. --lumps yield: a job of more than half its
tenant's target that would take the tenant past it is passed over while
another tenant below its target has a job that fits, for --lump-wait s at
most from the first time it was (scheduler.c, LUMP_WAIT_MS).

  fairshare.py --jobs jobs.jsonl --nodes 1000 --gpus 8 --window 120 [--lumps yield]

prints {"worst": ..., "mean": ..., "util": ..., "gang16_started": ...}.
"""

import argparse
import collections
import heapq
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from philly import Cluster  # noqa: E402


class FairShare:
    """The tenants' queues, targets and holdings, and the window's GPU-seconds."""

    def __init__(self, jobs, cluster, nodes, window, lumps="none", lump_wait=30.0, look=64):
        self.c, self.window = cluster, window
        self.lumps, self.lump_wait, self.look = lumps, lump_wait, look
        self.queues = collections.OrderedDict()
        for j in jobs:
            self.queues.setdefault(j["tenant"], collections.deque()).append(j)
        self.weight = {t: q[0]["weight"] for t, q in self.queues.items()}
        wsum = sum(self.weight.values())
        self.target = {t: nodes * cluster.gpus * w / wsum for t, w in self.weight.items()}
        self.held = dict.fromkeys(self.weight, 0)
        self.gs = dict.fromkeys(self.weight, 0.0)
        self.first_passed = {}
        self.ends = []
        self.gang16 = 0

    def is_lump(self, t, job, now, others_below):
        """True when job, tenant t's, yields now (--lumps yield)."""
        units = job["gpus"] * job["nodes"]
        if self.lumps != "yield" or not others_below:
            return False
        if units <= self.target[t] / 2 or self.held[t] + units <= self.target[t]:
            return False
        return now - self.first_passed.setdefault(job["i"], now) < self.lump_wait

    def take(self, t, now, others_below):
        """Starts tenant t's first job that fits (lumps passed over); False
        when none does."""
        q = self.queues[t]
        for idx in range(min(self.look, len(q))):
            job = q[idx]
            if self.is_lump(t, job, now, others_below):
                continue
            took = self.c.fit(job)
            if took:
                del q[idx]
                self.start(t, job, took, now)
                return True
        return False

    def start(self, t, job, took, now):
        for node, d in took:
            self.c.move(node, -d)
        units = job["gpus"] * job["nodes"]
        self.held[t] += units
        self.gang16 += job["nodes"] == 16
        end = now + job["seconds"]
        self.gs[t] += units * max(0.0, min(end, self.window) - now)
        heapq.heappush(self.ends, (end, job["i"], took, t, units))

    def fill(self, now):
        """Places until no tenant's job fits, furthest below its target
        first; then the lumps passed over, in the room left."""
        for lumps_too in (False, True):
            out = set()
            while len(out) < len(self.queues):
                t = max((x for x in self.queues if x not in out),
                        key=lambda x: self.target[x] - self.held[x])
                below = not lumps_too and any(x not in out and x != t and
                                              self.held[x] < self.target[x] for x in self.queues)
                if not self.take(t, now, below):
                    out.add(t)

    def end_until(self, now):
        """Frees what every run ended by now held."""
        while self.ends and self.ends[0][0] <= now:
            _, _, took, t, units = heapq.heappop(self.ends)
            for node, d in took:
                self.c.move(node, d)
            self.held[t] -= units


def run(jobs, nodes, gpus, window, lumps="none", lump_wait=30.0, look=64):
    """The fair-share model over [0, window]: the worst and mean |share /
    fair share - 1| of the tenants, utilisation, 16-node gangs started."""
    fs = FairShare(jobs, Cluster(nodes, gpus), nodes, window, lumps, lump_wait, look)
    t = 0.0
    while t < window:
        fs.fill(t)
        if not fs.ends:
            break
        t = min(fs.ends[0][0], window)
        fs.end_until(t)
    total = sum(fs.gs.values())
    wsum = sum(fs.weight.values())
    errs = [abs(fs.gs[x] / total / (w / wsum) - 1) if total else 1.0 for x, w in fs.weight.items()]
    return {"worst": round(max(errs), 4), "mean": round(sum(errs) / len(errs), 4),
            "util": round(total / (nodes * gpus * window), 4), "gang16_started": fs.gang16}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", required=True, help="a job file of philly.py gen")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--window", type=float, default=120)
    ap.add_argument("--lumps", choices=("none", "yield"), default="none")
    ap.add_argument("--lump-wait", type=float, default=30.0)
    a = ap.parse_args()
    with open(a.jobs) as f:
        f.readline()
        jobs = [json.loads(line) for line in f]
    print(json.dumps(run(jobs, a.nodes, a.gpus, a.window, a.lumps, a.lump_wait)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
