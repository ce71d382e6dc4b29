#!/usr/bin/env python3
"""bench/dist.py — the figures of jobs that span nodes (issue "distributed
jobs"), against a running stack of at least three CPU nodes (bench/run.sh
starts one and calls this):

  1. CPU all-reduce across 2 nodes (one rank each), 1 KiB .. 256 MiB: the
     busbw the allreduce kernel measures inside a Kowloon job, next to Gloo
     driven directly by bench/gloo_allreduce (two processes on loopback, no
     Kowloon: the median of single all-reduces, and the mean of a loop of
     them timed as the kernel times its own), their ratio, and the job's
     wall time
  2. rendezvous time of a 2- and a 3-node job: what node_rank 0's kernel
     reports it spent meeting the others (the gateway's store, then Gloo's
     TCP mesh), median of a few jobs
  3. train_mlp samples/s on 1 node (2 ranks) and 2 nodes (1 rank each),
     the same world, seed and data (blob inputs; each node fetches its rows),
     at batch 512 and 4096

Prints figures only; never fails on time. Exits 1 when a result is wrong."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime

import numpy as np
import requests

from klbench import save

SIZES = [1 << k for k in range(10, 29, 2)]   # 1 KiB .. 256 MiB, powers of 4


def fmt_bytes(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n // div} {unit}"
    return f"{n} B"


class Bench:
    def __init__(self, a):
        self.url = a.url.rstrip("/")
        self.h = {"Authorization": f"Bearer {a.key}"}
        self.gloo = a.gloo
        self.wrong = 0
        self.out = {}

    def submit(self, body):
        r = requests.post(self.url + "/v1/jobs", json=body, headers=self.h, timeout=60)
        if r.status_code != 202:
            raise RuntimeError(f"submit -> {r.status_code} {r.text[:300]}")
        return r.json()["id"]

    def wait(self, jid, timeout=600):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = requests.get(f"{self.url}/v1/jobs/{jid}", headers={**self.h, "Prefer": "wait=20"},
                             timeout=30)
            j = r.json()
            if j["state"] in ("succeeded", "failed", "cancelled"):
                return j
        raise RuntimeError(f"job {jid} did not end within {timeout} s")

    def outputs(self, jid):
        r = requests.get(f"{self.url}/v1/jobs/{jid}/result", headers=self.h, timeout=60)
        r.raise_for_status()
        return {k: v.get("data") for k, v in r.json()["outputs"].items()}

    def upload(self, arr):
        r = requests.post(self.url + "/v1/blobs", data=arr.tobytes(), timeout=120,
                          headers={**self.h, "Content-Type": "application/octet-stream"})
        r.raise_for_status()
        return r.json()["id"]

    def run(self, body, timeout=600):
        jid = self.submit(body)
        t0 = time.monotonic()
        j = self.wait(jid, timeout)
        wall = time.monotonic() - t0
        if j["state"] != "succeeded":
            print(f"   job {jid} {j['state']}: {json.dumps(j.get('error'))}")
            self.wrong += 1
            return j, None, wall
        return j, self.outputs(jid), wall

    # ------------------------------------------------------------ 1. all-reduce
    def gloo_direct(self):
        if not self.gloo or not os.access(self.gloo, os.X_OK):
            print(f"   (no Gloo bench program at {self.gloo}: built only where libgloo-dev is)")
            return {}
        p = subprocess.run([self.gloo, "2", str(SIZES[-1])], capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            print(f"   (gloo_allreduce failed: {p.stderr.strip()[:300]})")
            return {}
        got = {}
        for line in p.stdout.splitlines():
            f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if "bytes" in f and "busbw_gbps" in f:
                got[int(f["bytes"])] = f
        return got

    def allreduce(self):
        print("== 1. CPU all-reduce across 2 nodes (1 rank each; float32 sum; busbw as nccl-tests)")
        direct = self.gloo_direct()
        print("   Gloo's figures: the median of single all-reduces each after a barrier, and (loop) the mean")
        print("   of as many back to back, which is how the allreduce kernel times itself; the ratio is")
        print("   Gloo loop time / Kowloon time (busbw ratio; 1 = no cost)")
        print(f"   {'size':>8} {'Kowloon us':>11} {'busbw GB/s':>10}   {'Gloo us':>9} {'busbw GB/s':>10}"
              f" {'Gloo loop us':>12}   {'ratio':>5} {'job wall s':>10}")
        rows = []
        for size in SIZES:
            iters = 50 if size <= (1 << 20) else (10 if size <= (16 << 20) else 5)
            _, o, wall = self.run({"kernel": "allreduce",
                                   "params": {"count": size // 4, "dtype": "float32", "op": "sum",
                                              "iters": iters},
                                   "resources": {"nodes": 2, "gpus": 1, "backend": "cpu"},
                                   "timeout_s": 600})
            if o is None:
                continue
            wrong = int(o["wrong"][0])
            self.wrong += wrong != 0
            bus, t_us = o["busbw_gbps"][0], o["time_us"][0]
            d = direct.get(size) or {}
            d_us = float(d["time_us"]) if "time_us" in d else None
            d_bus = float(d["busbw_gbps"]) if "busbw_gbps" in d else None
            d_loop = float(d["loop_us"]) if "loop_us" in d else None
            ratio = d_loop / t_us if d_loop and t_us > 0 else None
            rows.append({"bytes": size, "busbw_gbps": bus, "time_us": t_us, "wrong": wrong,
                         "gloo_time_us": d_us, "gloo_busbw_gbps": d_bus, "gloo_loop_us": d_loop,
                         "ratio": ratio, "job_wall_s": wall, "iters": iters})
            print(f"   {fmt_bytes(size):>8} {t_us:>11.1f} {bus:>10.3f}   "
                  f"{('%.1f' % d_us) if d_us else '-':>9} {('%.3f' % d_bus) if d_bus is not None else '-':>10}"
                  f" {('%.1f' % d_loop) if d_loop else '-':>12}   {('%.2f' % ratio) if ratio else '-':>5}"
                  f" {wall:>10.2f}" + ("" if wrong == 0 else f"   WRONG: {wrong} elements"))
        self.out["allreduce"] = rows

    # ------------------------------------------------------------ 2. rendezvous
    def rendezvous(self, repeat=5):
        print("== 2. rendezvous: node_rank 0's time meeting the others (store + TCP mesh), median of",
              repeat)
        res = {}
        for nodes in (2, 3):
            meet = []
            for _ in range(repeat):
                j, o, _ = self.run({"kernel": "allreduce",
                                    "params": {"count": 1024, "iters": 1},
                                    "resources": {"nodes": nodes, "gpus": 1, "backend": "cpu"}})
                if o is None:
                    continue
                info = j.get("info") or {}
                if "rendezvous_ms" in info:
                    meet.append(float(info["rendezvous_ms"]))
            if meet:
                res[nodes] = {"rendezvous_ms_median": statistics.median(meet), "samples": meet}
                print(f"   {nodes} nodes: {statistics.median(meet):.1f} ms (of {len(meet)}: "
                      f"{', '.join('%.1f' % m for m in meet)})")
            else:
                print(f"   {nodes} nodes: no rendezvous_ms in the jobs' info")
        self.out["rendezvous"] = res

    # ------------------------------------------------------------ 3. train_mlp
    def train(self, n=120000, d=64, classes=10, epochs=3):
        print(f"== 3. train_mlp samples/s: {n} rows x {d}, {classes} classes, {epochs} epochs, world of 2,"
              " blob inputs")
        rng = np.random.default_rng(7)
        x = rng.standard_normal((n, d), dtype=np.float32)
        y = (np.abs(x[:, :classes]).argmax(axis=1)).astype(np.int32)
        xb, yb = self.upload(x), self.upload(y)
        inputs = {"x": {"dtype": "float32", "shape": [n, d], "blob": xb},
                  "y": {"dtype": "int32", "shape": [n], "blob": yb}}
        res = {}
        for batch in (512, 4096):
            params = {"hidden": 64, "classes": classes, "epochs": epochs, "batch_size": batch, "lr": 0.05,
                      "seed": 3}
            weights, runs = {}, {}
            for label, resources in (("1 node x 2 ranks", {"nodes": 1, "gpus": 2}),
                                     ("2 nodes x 1 rank", {"nodes": 2, "gpus": 1})):
                j, o, wall = self.run({"kernel": "train_mlp", "params": params, "inputs": inputs,
                                       "resources": {**resources, "backend": "cpu"}, "timeout_s": 900})
                if o is None:
                    continue
                run_s = (datetime.fromisoformat(j["finished_at"].replace("Z", "+00:00")) -
                         datetime.fromisoformat(j["started_at"].replace("Z", "+00:00"))).total_seconds()
                steps = int((j.get("info") or {}).get("steps", 0))
                weights[label] = np.array(o["w1"], dtype=np.float32)
                runs[label] = {"run_s": run_s, "samples_per_s": n * epochs / run_s, "steps": steps,
                               "accuracy": o["accuracy"][0], "job_wall_s": wall}
                print(f"   batch {batch:>5}, {label}: {n * epochs / run_s:>10,.0f} samples/s (run {run_s:.2f} s,"
                      f" {steps} steps, accuracy {o['accuracy'][0]:.4f})")
            if len(runs) == 2:
                one, two = runs["1 node x 2 ranks"], runs["2 nodes x 1 rank"]
                if two["steps"]:
                    print(f"   batch {batch:>5}: 2 nodes cost {(two['run_s'] - one['run_s']) / two['steps'] * 1e3:.2f}"
                          " ms more per step (the gradient's all-reduce between processes)")
                a, b = weights.values()
                diff = float(np.max(np.abs(a - b)))
                runs["max_abs_weight_diff"] = diff
                print(f"   batch {batch:>5}: the two runs' weights differ by at most {diff:.2e}")
                if not np.allclose(a, b, rtol=1e-3, atol=1e-4):
                    print("   WRONG: the 2-node weights do not match the 1-node run")
                    self.wrong += 1
            res[f"batch_{batch}"] = runs
        self.out["train_mlp"] = res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--gloo", default="")
    p.add_argument("--json")
    a = p.parse_args()
    b = Bench(a)
    b.allreduce()
    b.rendezvous()
    b.train()
    save(a.json, b.out, indent=1)
    if b.wrong:
        print(f"bench: {b.wrong} wrong result(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
