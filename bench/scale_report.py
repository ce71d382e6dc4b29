#!/usr/bin/env python3
"""scale_report.py — the helpers and the figures of bench/scale.sh (issue 20).

  wait-nodes  until the gateway lists --nodes nodes up
  tenants     makes the job file's tenants (weights) and a key each, and
              writes kl-scalesim's submit file ("key<TAB>body" per job)
  snap        CPU ticks of the gateway, PostgreSQL (postmaster and children)
              and the simulator, and their RSS, now
  report      figures 1-6 of one size from what the run left in --dir
  summary     the table of every size under --out

Definitions (report):
  window      from the end of the backlog's submission to the end of the
              measurement (snap0 to snap1)
  1 util      busy GPU-seconds in the window / (GPUs x window): a part is
              busy from its start (after its gang's rendezvous) to its end
              (or the stop); the packer (philly.py pack) on the same jobs
              from the moment submission began, over the same window
  2 starts/s  jobs (gangs once) whose run reached their nodes in the window,
              per second; and the most in any 5 s since submission began
  3 latency   per job started in the window: when its last part reached its
              node, less when the last of the devices it got had become free
              (runnable -> running, as the nodes saw it)
  4 fairness  GPU-seconds of each tenant with a backlog (a job not yet
              started at the end) in the window, against its weight's share
              among those: |share / fair share - 1|, worst and mean; and the
              same within each 30 s slice of the window (when the error
              arises: a profile, not the figure)
  5 gangs     queue wait (submitted -> last part on its node) of 16-node
              gangs, against 1-GPU and 8-GPU one-node jobs of the same run;
              and how many were passed over (still queued, or started,
              after a later job of their tenant had started)
  6 cost      gateway and PostgreSQL CPU per job started in the window;
              gateway RSS (max); PostgreSQL's rows written, commits and WAL
              per second; updates of the nodes table per second (heartbeats)
"""

import argparse
import json
import os
import sys
import time
import concurrent.futures
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import philly  # noqa: E402
from klbench import proc_children, proc_status, proc_ticks  # noqa: E402


def api(url, key, method="GET", body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


def cmd_wait_nodes(a):
    deadline = time.monotonic() + a.timeout
    up = 0
    while time.monotonic() < deadline:
        try:
            nodes = api(a.url + "/v1/nodes", a.key).get("nodes", [])
            up = sum(1 for n in nodes if n.get("state") == "up")
            if up >= a.nodes:
                print("   %d nodes up" % up)
                return 0
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    print("   only %d of %d nodes up after %d s" % (up, a.nodes, a.timeout), file=sys.stderr)
    return 1


def cmd_drain(a):
    """Drains every node (--on) or lets them take work again (--off), 16
    at a time: with KL_SCALE_QUEUE_FIRST the backlog is queued while the
    nodes take none, so that the window starts with all of it waiting."""
    nodes = api(a.url + "/v1/nodes", a.key).get("nodes", [])
    method = "POST" if a.on else "DELETE"

    def one(n):
        api("%s/v1/nodes/%s/drain" % (a.url, n["id"]), a.key, method)

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(one, nodes))
    print("   %d nodes %s" % (len(nodes), "drained" if a.on else "taking work again"))
    return 0


def read_jobs(path):
    with open(path) as f:
        head = json.loads(f.readline())
        return head, [json.loads(line) for line in f]


def cmd_tenants(a):
    _, jobs = read_jobs(a.jobs)
    keys = {}
    for j in jobs:
        t = j["tenant"]
        if t in keys:
            continue
        api(a.url + "/v1/tenants", a.key, "POST", {"name": t, "weight": j["weight"]})
        keys[t] = api(a.url + "/v1/keys", a.key, "POST", {"tenant": t})["key"]
    with open(a.out, "w") as f:
        for j in jobs:
            f.write(keys[j["tenant"]] + "\t" + json.dumps(philly.job_body(j), separators=(",", ":")) + "\n")
    return 0


def ticks(pid):
    return proc_ticks(pid) or 0


def rss_kb(pid):
    return proc_status(pid).get("rss_kb", 0)


def cmd_snap(a):
    pg = [a.pg] + proc_children(a.pg)
    snap = {"t_ms": int(time.time() * 1000), "hz": os.sysconf("SC_CLK_TCK"),
            "gw_ticks": ticks(a.gw), "pg_ticks": {str(p): ticks(p) for p in pg},
            "sim_ticks": ticks(a.sim), "gw_rss_kb": rss_kb(a.gw), "sim_rss_kb": rss_kb(a.sim)}
    with open(a.out, "w") as f:
        json.dump(snap, f)
    return 0


def pct(v, p):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def overlap(a0, a1, b0, b1):
    return max(0, min(a1, b1) - max(a0, b0))


# The slices of the window in which the fairness profile is worked out.
FAIR_SLICE_S = 30


def share_ratios(gs, weights):
    """Each tenant's share of the GPU-seconds gs (tenant -> seconds) over
    its fair share among weights (tenant -> weight): 1 is fair."""
    wsum = sum(weights.values())
    gsum = sum(gs.get(t, 0.0) for t in weights)
    return {t: (gs.get(t, 0.0) / gsum if gsum else 0) / (w / wsum) for t, w in weights.items()}


def fair_slices(parts, weights, w0, w1, slice_ms=FAIR_SLICE_S * 1000):
    """[worst, mean] of |share / fair share - 1| among weights' tenants in
    each slice of [w0, w1] (the last one ends at w1; what is left past the
    last whole slice is a slice of its own when it is half one or more);
    parts: (tenant, gpus, t_start, t_end)."""
    n = int((w1 - w0 + slice_ms // 2) // slice_ms)
    gs = [{} for _ in range(n)]
    for t, ngpu, a, b in parts:
        if t not in weights:
            continue
        for k in range(max(0, int((a - w0) // slice_ms)), min(n, int((b - w0) // slice_ms) + 1)):
            s0 = w0 + k * slice_ms
            s1 = w1 if k == n - 1 else s0 + slice_ms
            gs[k][t] = gs[k].get(t, 0.0) + ngpu * overlap(a, b, s0, s1) / 1000.0
    out = []
    for g in gs:
        errs = [abs(r - 1) for r in share_ratios(g, weights).values()]
        out.append([round(max(errs), 3), round(sum(errs) / len(errs), 3)] if errs else [None, None])
    return out


def passed_over(jobs, first_start, end, nodes=16):
    """How many of jobs' gangs of `nodes` nodes were passed over: still
    queued at end, or started, after a later job of their tenant (in
    submission order) had started. jobs: (tenant, order, job_id, nodes);
    first_start: job_id -> its first start (absent: not started)."""
    later_first = {}   # tenant -> the earliest start among its jobs seen (walking back)
    n = 0
    for tenant, _, jid, k in sorted(jobs, key=lambda j: (j[0], -j[1])):
        soonest = later_first.get(tenant)
        t = first_start.get(jid)
        if t is not None and t > end:
            t = None
        if k == nodes and soonest is not None and (t is None or soonest < t):
            n += 1
        if t is not None and (soonest is None or t < soonest):
            later_first[tenant] = t
    return n


def load_runs(path):
    """(job_id, attempt) -> list of parts."""
    runs = {}
    with open(path) as f:
        for line in f:
            x = line.rstrip("\n").split("\t")
            if len(x) < 13:
                continue
            part = {"node": int(x[2]), "rank": int(x[3]), "nodes": int(x[4]), "ngpu": int(x[5]),
                    "t_lease": int(x[6]), "t_start": int(x[7]), "t_end": int(x[8]),
                    "runnable": int(x[9]), "overcommit": int(x[10]), "state": x[11]}
            runs.setdefault((x[0], int(x[1])), []).append(part)
    return runs


def stopped_runs(runs, w0, w1):
    """(how many, GPU-seconds within [w0, w1]) of the run parts a cancel
    stopped within [w0, w1]: the bench cancels nothing, so with
    --fair-preempt these are the preempted runs and the work they lost."""
    n, gs = 0, 0.0
    for parts in runs.values():
        for p in parts:
            if p["state"] == "cancelled" and w0 <= p["t_end"] <= w1:
                n += 1
                gs += p["ngpu"] * overlap(p["t_start"], p["t_end"], w0, w1) / 1000.0
    return n, gs


SHAPES = ("1gpu", "multi_gpu", "8gpu", "gang")


def shape_of(part):
    """Which of SHAPES a job is, from one of its parts."""
    if part["nodes"] > 1:
        return "gang"
    return "1gpu" if part["ngpu"] <= 1 else "8gpu" if part["ngpu"] >= 8 else "multi_gpu"


def figures(d, nodes, gpus):
    head, jobs = read_jobs(os.path.join(d, "jobs.jsonl"))
    with open(os.path.join(d, "window.json")) as f:
        win = json.load(f)
    with open(os.path.join(d, "snap0.json")) as f:
        s0 = json.load(f)
    with open(os.path.join(d, "snap1.json")) as f:
        s1 = json.load(f)
    with open(os.path.join(d, "sim.json")) as f:
        sim = json.load(f)
    submit = {}
    with open(os.path.join(d, "ids.tsv")) as f:
        for line in f:
            ln, status, jid, t = line.rstrip("\n").split("\t")
            if jid != "-":
                submit[jid] = (jobs[int(ln) - 1], int(t))
    runs = load_runs(os.path.join(d, "runs.tsv"))
    w0, w1 = s0["t_ms"], s1["t_ms"]
    W = (w1 - w0) / 1000.0
    t_sub0 = win["t_submit0"]

    # 1. utilisation, and the packer on the same jobs (in submission order)
    busy = 0.0
    tenant_gs = {}
    tenant_parts = []
    stopped, stopped_gs = stopped_runs(runs, w0, w1)
    for (jid, _), parts in runs.items():
        for p in parts:
            gs = p["ngpu"] * overlap(p["t_start"], p["t_end"], w0, w1) / 1000.0
            busy += gs
            if jid in submit:
                t = submit[jid][0]["tenant"]
                tenant_gs[t] = tenant_gs.get(t, 0.0) + gs
                tenant_parts.append((t, p["ngpu"], p["t_start"], p["t_end"]))
    util = busy / (nodes * gpus * W) if W > 0 else 0
    submitted = [jobs[int(line.split("\t")[0]) - 1] for line in open(os.path.join(d, "ids.tsv"))
                 if line.split("\t")[2] != "-"]
    packer = philly.pack(submitted, nodes, gpus, (w1 - t_sub0) / 1000.0,
                         start_s=(w0 - t_sub0) / 1000.0)[0]

    # 2, 3, 5: per job attempt, its last part's arrival
    starts, lat, started_jobs, first_start = [], [], set(), {}
    lat_by = {k: [] for k in SHAPES}
    waits = {"1gpu": [], "8gpu": [], "gang16": [], "all": []}
    for (jid, att), parts in runs.items():
        t_run = max(p["t_lease"] for p in parts)
        nparts = parts[0]["nodes"]
        if len(parts) < nparts:
            continue   # a gang whose parts did not all arrive (stopped meanwhile)
        started_jobs.add(jid)
        first_start[jid] = min(t_run, first_start.get(jid, t_run))
        starts.append(t_run)
        if w0 <= t_run <= w1:
            lat.append(t_run - max(p["runnable"] for p in parts))
            lat_by[shape_of(parts[0])].append(lat[-1])
        if jid in submit and att == 1:
            job, t_sub = submit[jid]
            wait = (t_run - t_sub) / 1000.0
            waits["all"].append(wait)
            if job["nodes"] == 16:
                waits["gang16"].append(wait)
            elif job["nodes"] == 1 and job["gpus"] == 1:
                waits["1gpu"].append(wait)
            elif job["nodes"] == 1 and job["gpus"] == 8:
                waits["8gpu"].append(wait)
    in_win = sum(1 for t in starts if w0 <= t <= w1)
    # The backlog left at the window's end (submitted, not started by
    # then). None left: the window's last seconds started what retries
    # and stragglers there were, and the starts/s figure is the jobs',
    # not the control path's; the rate until the last first start is.
    left = sum(1 for jid in submit if first_start.get(jid, w1 + 1) > w1)
    t_dry = max(first_start.values()) if first_start and not left else None
    dry_rate = None
    if t_dry is not None and w0 < t_dry < w1:
        dry_rate = round(sum(1 for t in starts if w0 <= t <= t_dry) * 1000.0 / (t_dry - w0), 1)
    buckets = {}
    for t in starts:
        if t >= t_sub0:
            buckets[(t - t_sub0) // 5000] = buckets.get((t - t_sub0) // 5000, 0) + 1
    peak5 = max(buckets.values()) / 5.0 if buckets else 0

    # 4. fairness among tenants with a backlog at the end
    backlog = {}
    for jid, (job, _) in submit.items():
        if jid not in started_jobs:
            backlog[job["tenant"]] = job["weight"]
    errs, ratios = {}, {}
    for t, r in share_ratios(tenant_gs, backlog).items():
        errs[t] = abs(r - 1)
        ratios[t] = (backlog[t], round(r, 3))
    by_slice = fair_slices(tenant_parts, backlog, w0, w1)
    gang16_sub = sum(1 for job, _ in submit.values() if job["nodes"] == 16)
    gang16_passed = passed_over([(job["tenant"], job["i"], jid, job["nodes"])
                                 for jid, (job, _) in submit.items()], first_start, w1)
    gang16_queued = [(w1 - t) / 1000.0 for jid, (job, t) in submit.items()
                     if job["nodes"] == 16 and jid not in started_jobs]

    # 6. cost
    hz = s0["hz"]
    gw_cpu = (s1["gw_ticks"] - s0["gw_ticks"]) / hz
    pg_cpu = sum(v - s0["pg_ticks"].get(p, 0) for p, v in s1["pg_ticks"].items()) / hz
    sim_cpu = (s1["sim_ticks"] - s0["sim_ticks"]) / hz
    pg0, pg1 = win["pg0"], win["pg1"]
    per_s = lambda k: (pg1[k] - pg0[k]) / W if W else 0  # noqa: E731

    def stats(v):
        return {"n": len(v), "mean": round(sum(v) / len(v), 3) if v else None,
                "p50": pct(v, 50), "p99": pct(v, 99)}
    return {
        "nodes": nodes, "gpus": nodes * gpus, "jobs_submitted": len(submit),
        "factor": head.get("factor"), "mean_s": head.get("mean_s"), "window_s": round(W, 1),
        "util": round(util, 4), "packer_util": round(packer, 4),
        "util_vs_packer": round(util / packer, 4) if packer else None,
        "starts_per_s": round(in_win / W, 1) if W else 0, "starts_in_window": in_win,
        "peak_starts_per_s_5s": round(peak5, 1),
        "backlog_at_end": left,
        "backlog_ran_out_s_before_end": round((w1 - t_dry) / 1000.0, 1) if dry_rate else None,
        "starts_per_s_until_it_ran_out": dry_rate,
        "latency_ms": {"n": len(lat), "p50": pct(lat, 50), "p99": pct(lat, 99)},
        "latency_ms_by_shape": {k: {"n": len(v), "p50": pct(v, 50), "p99": pct(v, 99),
                                    "over_500": sum(1 for x in v if x > 500)}
                                for k, v in lat_by.items()},
        "tenant_share_ratios": {t: {"weight": w, "share_over_fair": r}
                                for t, (w, r) in sorted(ratios.items(), key=lambda x: x[1][1])},
        "fair_worst_rel_err": round(max(errs.values()), 4) if errs else None,
        "fair_mean_rel_err": round(sum(errs.values()) / len(errs), 4) if errs else None,
        "fair_by_slice": {"slice_s": FAIR_SLICE_S, "worst_mean": by_slice},
        "tenants_with_backlog": len(backlog),
        "stopped_runs": stopped,
        "stopped_gpu_s_share": round(stopped_gs / busy, 4) if busy else 0,
        "wait_s": {k: stats(v) for k, v in waits.items()},
        "gang16": {"submitted": gang16_sub, "started": len(waits["gang16"]), "passed_over": gang16_passed,
                   "oldest_queued_s": round(max(gang16_queued), 1) if gang16_queued else None},
        "gw_cpu_ms_per_start": round(1000 * gw_cpu / in_win, 3) if in_win else None,
        "pg_cpu_ms_per_start": round(1000 * pg_cpu / in_win, 3) if in_win else None,
        "gw_cpu_pct": round(100 * gw_cpu / W, 1), "pg_cpu_pct": round(100 * pg_cpu / W, 1),
        "sim_cpu_pct": round(100 * sim_cpu / W, 1), "sim_rss_mb": round(s1["sim_rss_kb"] / 1024, 1),
        "gw_rss_max_mb": round(win["gw_rss_max_kb"] / 1024, 1),
        "pg_rows_written_per_s": round(per_s("tup_written"), 1),
        "pg_commits_per_s": round(per_s("xact_commit"), 1),
        "pg_wal_kb_per_s": round(per_s("wal_bytes") / 1024, 1),
        "pg_nodes_updates_per_s": round(per_s("nodes_upd"), 1),
        "pg_jobs_updates_per_s": round(per_s("jobs_upd"), 1),
        "heartbeats_per_s": round(sim["requests"]["heartbeat"]["sent"] / sim["wall_s"], 1) if sim["wall_s"] else None,
        "overcommit_runs": sim["overcommit_runs"], "slot_overcommits": sim["slot_overcommits"],
        "sim": {k: sim[k] for k in ("runs_taken", "runs_ended", "runs_refused", "rdv_failed", "cancels")},
        "sim_errors": {k: v for k, v in sim["requests"].items() if v["transport_errors"] or v["other_status"]},
    }


def print_figures(f):
    print("   1 GPU utilisation %.3f; packer's bound on the same jobs %.3f; ratio %s (target >= 0.95 at 60 s, 0.90 at 10 s)"
          % (f["util"], f["packer_util"], f["util_vs_packer"]))
    print("   2 starts/s in the window %.1f (%d starts in %.0f s); most in 5 s since submission began %.1f/s"
          % (f["starts_per_s"], f["starts_in_window"], f["window_s"], f["peak_starts_per_s_5s"]))
    if f.get("starts_per_s_until_it_ran_out"):
        print("     the backlog ran out %.1f s before the window's end: %.1f starts/s until then; the figure "
              "above is bounded by the jobs (raise KL_SCALE_JOBS_PER_NODE)"
              % (f["backlog_ran_out_s_before_end"], f["starts_per_s_until_it_ran_out"]))
    else:
        print("     %d jobs of the backlog not yet started at the window's end" % f.get("backlog_at_end", -1))
    lt = f["latency_ms"]
    print("   3 runnable -> running p50 %s ms, p99 %s ms (%d jobs; target 50 / 500)" % (lt["p50"], lt["p99"], lt["n"]))
    print("     by shape (n / p50 / p99 / over 500 ms): " + "; ".join(
        "%s %d / %s / %s / %d" % (k, v["n"], v["p50"], v["p99"], v["over_500"])
        for k, v in f.get("latency_ms_by_shape", {}).items()))
    print("   4 fairness: worst relative error %s, mean %s, among %d tenants with a backlog (target <= 0.05)"
          % (f["fair_worst_rel_err"], f["fair_mean_rel_err"], f["tenants_with_backlog"]))
    sl = f.get("fair_by_slice")
    if sl and sl["worst_mean"]:
        print("     within each %d s slice (worst/mean): %s" % (sl["slice_s"], " ".join(
            "%s/%s" % (w, m) for w, m in sl["worst_mean"])))
    if f.get("stopped_runs"):
        print("     runs stopped by a cancel in the window (preempted): %d, %.2f%% of the busy GPU-seconds"
              % (f["stopped_runs"], 100 * f["stopped_gpu_s_share"]))
    r = list(f.get("tenant_share_ratios", {}).items())
    if r:
        print("     share / fair share, lowest and highest (tenant weight): "
              + ", ".join("%s (w%s) %.2f" % (t, v["weight"], v["share_over_fair"]) for t, v in r[:3] + r[-3:]))
    w = f["wait_s"]
    print("   5 queue wait s (mean / p99 / n): 16-node gangs %s / %s / %d; 8-GPU %s / %s / %d; 1-GPU %s / %s / %d; "
          "16-node gangs started %d of %d, oldest still queued %s s, passed over %s (a later job of "
          "their tenant started before them)"
          % (w["gang16"]["mean"], w["gang16"]["p99"], w["gang16"]["n"], w["8gpu"]["mean"], w["8gpu"]["p99"],
             w["8gpu"]["n"], w["1gpu"]["mean"], w["1gpu"]["p99"], w["1gpu"]["n"], f["gang16"]["started"],
             f["gang16"]["submitted"], f["gang16"]["oldest_queued_s"], f["gang16"].get("passed_over")))
    print("   6 gateway %s ms CPU per start (%s%% of a core), PostgreSQL %s ms (%s%%); gateway RSS max %s MiB; "
          "PostgreSQL %s rows/s, %s commits/s, %s KiB WAL/s; nodes-table updates %s/s for %s heartbeats/s"
          % (f["gw_cpu_ms_per_start"], f["gw_cpu_pct"], f["pg_cpu_ms_per_start"], f["pg_cpu_pct"],
             f["gw_rss_max_mb"], f["pg_rows_written_per_s"], f["pg_commits_per_s"], f["pg_wal_kb_per_s"],
             f["pg_nodes_updates_per_s"], f["heartbeats_per_s"]))
    print("     simulator: %s%% of a core, %s MiB RSS for %d nodes" % (f["sim_cpu_pct"], f["sim_rss_mb"], f["nodes"]))
    print("   correctness: %d runs placed on busy GPUs, %d runs past a node's slots%s"
          % (f["overcommit_runs"], f["slot_overcommits"],
             "" if not f["sim_errors"] else "; exchanges that failed: %s" % json.dumps(f["sim_errors"])))


def cmd_report(a):
    f = figures(a.dir, a.nodes, a.gpus)
    with open(os.path.join(a.dir, "result.json"), "w") as out:
        json.dump(f, out, indent=1)
    print_figures(f)
    return 1 if f["overcommit_runs"] or f["slot_overcommits"] else 0


def cmd_summary(a):
    rows = []
    for name in sorted(os.listdir(a.out), key=lambda s: int(s[1:]) if s[1:].isdigit() else 0):
        p = os.path.join(a.out, name, "result.json")
        if os.path.exists(p):
            with open(p) as f:
                rows.append(json.load(f))
    if not rows:
        return 0
    print("")
    print("== scale summary (time compressed x%.0f: mean job %s s)" % (rows[0]["factor"], rows[0]["mean_s"]))
    cols = [("nodes", "nodes"), ("util", "util"), ("packer", "packer_util"), ("ratio", "util_vs_packer"),
            ("starts/s", "starts_per_s"), ("peak/s", "peak_starts_per_s_5s"),
            ("lat p50 ms", lambda r: r["latency_ms"]["p50"]), ("lat p99 ms", lambda r: r["latency_ms"]["p99"]),
            ("fair worst", "fair_worst_rel_err"), ("fair mean", "fair_mean_rel_err"),
            ("g16 wait mean", lambda r: r["wait_s"]["gang16"]["mean"]),
            ("g16 p99", lambda r: r["wait_s"]["gang16"]["p99"]),
            ("g16 passed", lambda r: r["gang16"].get("passed_over")), ("gw ms/start", "gw_cpu_ms_per_start"),
            ("pg ms/start", "pg_cpu_ms_per_start"), ("gw RSS MiB", "gw_rss_max_mb"),
            ("pg rows/s", "pg_rows_written_per_s"), ("hb upd/s", "pg_nodes_updates_per_s"),
            ("stopped", "stopped_runs"), ("overcommit", "overcommit_runs")]
    print("  ".join("%12s" % c for c, _ in cols))
    for r in rows:
        print("  ".join("%12s" % (k(r) if callable(k) else r.get(k)) for _, k in cols))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("wait-nodes")
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--timeout", type=int, default=120)
    p = sub.add_parser("drain")
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--on", action="store_true")
    g.add_argument("--off", action="store_true")
    p = sub.add_parser("tenants")
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--jobs", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("snap")
    p.add_argument("--gw", type=int, required=True)
    p.add_argument("--pg", type=int, required=True)
    p.add_argument("--sim", type=int, required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("--dir", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus", type=int, default=8)
    p = sub.add_parser("summary")
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    return {"wait-nodes": cmd_wait_nodes, "drain": cmd_drain, "tenants": cmd_tenants, "snap": cmd_snap,
            "report": cmd_report, "summary": cmd_summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
