#!/usr/bin/env python3
"""philly.py — the cluster-scale bench's workload (issue 20): jobs shaped
after the Microsoft Philly trace, and an offline packer that says what
utilisation a clairvoyant scheduler reaches on the same jobs.

Where the figures come from:
  * GPUs per job: Gavel (Narayanan et al., OSDI'20), scheduler/utils.py,
    _generate_scale_factor, "sampled from the Philly distribution": 1 GPU
    w.p. 0.70, 2 w.p. 0.10, 4 w.p. 0.15, 8 w.p. 0.05. Jeon et al. (ATC'19,
    "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
    Workloads") report the same shape: most jobs take one GPU, and jobs
    beyond one 8-GPU server are few but hold a large share of GPU time.
    Philly-derived generators with a 16-GPU class put about 1% of jobs
    there. Our mix keeps Gavel's 1/2/8 shares, takes 3 points of the
    4-GPU share for gangs of 2, 4, 8 and 16 whole 8-GPU nodes (1.2%, 0.8%,
    0.6%, 0.4%: our choice, sized after that ~1% tail), so that the issue's
    three kinds are all there: 1-GPU, 8-GPU one-node, 2-16-node gangs.
  * Duration: Gavel's _generate_duration, "from the Philly distribution":
    60 * 10^U(1.5, 3) s w.p. 0.8, 60 * 10^U(3, 4) s w.p. 0.2 (31.6 min to
    16.7 h, and 16.7 h to 6.9 days); mean 1,006 min. Independent of size.
  * Arrivals: a backlog (every job queued at t=0), as the issue asks; the
    Poisson rate of Gavel's traces (lam) is not used.
  * Tenants: 50, weights 1, 2, 3, 4 in turn (Philly's virtual clusters had
    quotas; the weights are ours), each with the same share of the jobs in
    an interleaved order.
Time is compressed by one factor so that the mean duration is --mean-s
(the factor is printed, and in the job file's header line).

  philly.py gen --jobs N --mean-s 60 --seed 1 --out jobs.jsonl
  philly.py pack --jobs jobs.jsonl --nodes N --gpus 8 --window S
"""

import argparse
import heapq
import json
import math
import random
import sys

TENANTS = 50
# (gpus per node, nodes, probability)
SHAPES = [(1, 1, 0.70), (2, 1, 0.10), (4, 1, 0.12), (8, 1, 0.05),
          (8, 2, 0.012), (8, 4, 0.008), (8, 8, 0.006), (8, 16, 0.004)]
# The trace's mean duration in seconds: 0.8 * E[60 * 10^U(1.5,3)] + 0.2 * E[60 * 10^U(3,4)].
TRACE_MEAN_S = 60 * (0.8 * (10 ** 3 - 10 ** 1.5) / (1.5 * math.log(10)) +
                     0.2 * (10 ** 4 - 10 ** 3) / (1.0 * math.log(10)))


def tenant_weight(t):
    return 1 + t % 4


def tenant_name(t):
    return "scale-t%02d" % t


def draw_shape(rng):
    r, acc = rng.random(), 0.0
    for g, n, p in SHAPES:
        acc += p
        if r < acc:
            return g, n
    return SHAPES[-1][0], SHAPES[-1][1]


def draw_trace_s(rng):
    if rng.random() >= 0.8:
        return 60 * 10 ** rng.uniform(3, 4)
    return 60 * 10 ** rng.uniform(1.5, 3)


def generate(n, mean_s, seed=1, tenants=TENANTS, shapes="philly"):
    """n jobs, tenants interleaved (job i is tenant i % tenants), time
    compressed so that the trace's mean duration is mean_s. Returns (factor,
    jobs): each job a dict i, tenant, weight, gpus, nodes, trace_s, seconds.
    shapes "single": every job one GPU on one node, the trace's durations
    (the control path's ceiling: how many starts a second it sustains when
    the GPUs' count never binds, and no job's size makes others wait)."""
    rng = random.Random(seed)
    factor = TRACE_MEAN_S / mean_s
    jobs = []
    for i in range(n):
        g, nodes = draw_shape(rng)
        if shapes == "single":
            g, nodes = 1, 1
        trace_s = draw_trace_s(rng)
        t = i % tenants
        jobs.append({"i": i, "tenant": tenant_name(t), "weight": tenant_weight(t), "gpus": g,
                     "nodes": nodes, "trace_s": round(trace_s, 3),
                     "seconds": round(trace_s / factor, 3)})
    return factor, jobs


def job_body(job):
    """The POST /v1/jobs body of a job: the sleep kernel for its compressed
    duration, on its GPUs and nodes; timeout_s is the duration rounded up
    plus 2 s (what backfill plans with: a user's honest estimate)."""
    res = {"backend": "cuda", "gpus": job["gpus"]}
    if job["nodes"] > 1:
        res["nodes"] = job["nodes"]
    return {"kernel": "sleep", "params": {"seconds": job["seconds"]}, "resources": res,
            "timeout_s": int(math.ceil(job["seconds"])) + 2}


class Cluster:
    """Nodes of gpus devices, kept in buckets by their free devices, so
    that a one-node job finds the node it fills best without a scan."""

    def __init__(self, nodes, gpus):
        self.gpus = gpus
        self.free = [gpus] * nodes
        self.total_free = nodes * gpus
        self.buckets = [set() for _ in range(gpus + 1)]
        self.buckets[gpus] = set(range(nodes))

    def move(self, node, delta):
        """Gives node delta devices back (negative: takes them)."""
        self.buckets[self.free[node]].discard(node)
        self.free[node] += delta
        self.total_free += delta
        self.buckets[self.free[node]].add(node)

    def fit(self, job):
        """[(node, devices)] where job fits now, or None: a one-node job on
        the node with the fewest free devices that holds it (best fit), a
        gang of whole nodes on whole free nodes, a gang of smaller parts on
        nodes with room for a part."""
        g, n = job["gpus"], job["nodes"]
        if n == 1:
            for k in range(g, self.gpus + 1):
                if self.buckets[k]:
                    return [(next(iter(self.buckets[k])), g)]
            return None
        if g == self.gpus:
            cand = list(self.buckets[self.gpus])[:n]
        else:
            cand = [x for k in range(g, self.gpus + 1) for x in self.buckets[k]][:n]
        return [(node, g) for node in cand] if len(cand) == n else None


def pack(jobs, nodes, gpus, window_s, lookahead=4096, start_s=0.0):
    """Offline packing of jobs (in their order, all queued at t=0) on nodes
    of gpus devices for window_s seconds: at t=0 and at every end, walks the
    queue's first `lookahead` waiting jobs and starts each that fits now —
    a one-node job on the node with the fewest free devices that holds it
    (best fit), a gang on whole free nodes — with exact durations and no
    control-path delay. Returns busy GPU-seconds / (nodes * gpus * (window_s
    - start_s)) within [start_s, window_s], and how many jobs started."""
    c = Cluster(nodes, gpus)
    waiting = list(range(len(jobs)))
    ends = []     # (end time, seq, [(node, gpus)])
    busy = 0.0
    started = 0
    seq = 0
    t = 0.0
    while t < window_s:
        kept = []
        scanned = 0
        for pos, j in enumerate(waiting):
            if c.total_free == 0 or scanned >= lookahead:
                kept.extend(waiting[pos:])
                break
            scanned += 1
            job = jobs[j]
            g, n = job["gpus"], job["nodes"]
            took = c.fit(job)
            if took is None:
                kept.append(j)
                continue
            for node, d in took:
                c.move(node, -d)
            end = t + job["seconds"]
            busy += max(0.0, min(end, window_s) - max(t, start_s)) * g * n
            started += 1
            seq += 1
            heapq.heappush(ends, (end, seq, took))
        waiting = kept
        if not ends:
            break
        t = ends[0][0]
        while ends and ends[0][0] <= t:
            _, _, took = heapq.heappop(ends)
            for node, d in took:
                c.move(node, d)
    return busy / (nodes * gpus * (window_s - start_s)), started


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--jobs", type=int, required=True)
    g.add_argument("--mean-s", type=float, default=60)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--shapes", choices=("philly", "single"), default="philly",
                   help="single: every job 1 GPU on 1 node")
    g.add_argument("--out", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--jobs", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--window", type=float, required=True)
    p.add_argument("--limit", type=int, default=0, help="only the first N jobs (those submitted)")
    a = ap.parse_args()
    if a.cmd == "gen":
        factor, jobs = generate(a.jobs, a.mean_s, a.seed, shapes=a.shapes)
        with open(a.out, "w") as f:
            f.write(json.dumps({"factor": factor, "mean_s": a.mean_s, "trace_mean_s": TRACE_MEAN_S,
                                "seed": a.seed, "jobs": a.jobs, "shapes": a.shapes}) + "\n")
            for j in jobs:
                f.write(json.dumps(j) + "\n")
        print(json.dumps({"factor": round(factor, 2), "jobs": len(jobs), "shapes": a.shapes}))
    else:
        with open(a.jobs) as f:
            head = json.loads(f.readline())
            jobs = [json.loads(line) for line in f]
        if a.limit:
            jobs = jobs[:a.limit]
        util, started = pack(jobs, a.nodes, a.gpus, a.window)
        print(json.dumps({"packer_util": round(util, 4), "packer_started": started,
                          "factor": head.get("factor")}))


if __name__ == "__main__":
    sys.exit(main())
