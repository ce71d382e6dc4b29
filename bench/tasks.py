#!/usr/bin/env python3
"""bench/tasks.py — tasks through the whole service (issue 18's benchmark),
against a running stack whose nodes run podman (bench/run.sh starts one
and calls this; bench/tasks_engine.py measures the node alone):

  1. start overhead of a trivial task (python3 -c 'print(1)'), N times:
     POST /v1/jobs -> the first line of its output (its `event: log` on the
     tenant's event stream, opened before) and -> its terminal state event;
     against `podman run --rm` of the same image and command in the same
     run (start -> first line on stdout -> exit). Medians, and what Kowloon
     adds at the median (target <= +100 ms).
  2. a 1 GiB input (uploaded once as a blob) read inside a task in 16 MiB
     reads, against the same code reading the same file (the store's) on
     the host; warm page cache for both. Target >= 0.9x.
  3. a backlog of 200 short tasks (`true`) on the nodes: tasks/s from the
     first submit to the last end, against the engine's own rate: the same
     200 containers by `podman run --rm`, as many at a time as the nodes
     have slots.

Prints figures only; never fails on time. Exits 1 when a result is wrong.
usage: bench/tasks.py --url URL --key KEY --blob-dir DIR --conf CONTAINERS_CONF
                      [--slots N] [--runs 10] [--gib 1] [--backlog 200] [--json FILE]"""

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tasks_engine import IMAGE, READ, bare_run, host_read_rate, ms  # noqa: E402

TERMINAL = ("succeeded", "failed", "cancelled")


class EventClock:
    """Reads GET /v1/events in a thread and notes, per job, when its first
    log text and its terminal state arrived (monotonic seconds)."""

    def __init__(self, url, key):
        self.first_log, self.ended, self.states = {}, {}, {}
        self.cv = threading.Condition()
        self.open = threading.Event()
        self.resp = requests.get(f"{url}/v1/events", stream=True, timeout=(5, 600),
                                 headers={"Authorization": f"Bearer {key}",
                                          "Accept": "text/event-stream"})
        self.resp.raise_for_status()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        ev, data = "message", []
        try:
            for line in self.resp.iter_lines(chunk_size=1, decode_unicode=True):
                self.open.set()
                if line == "":
                    if data:
                        self._event(ev, "\n".join(data), time.monotonic())
                    ev, data = "message", []
                elif line.startswith("event:"):
                    ev = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
        except (requests.RequestException, AttributeError):
            pass

    def _event(self, ev, text, t):
        try:
            d = json.loads(text)
        except ValueError:
            return
        jid = d.get("job_id")
        with self.cv:
            if ev == "log" and "\n" in d.get("text", ""):
                self.first_log.setdefault(jid, t)
            elif d.get("state") in TERMINAL and ev != "progress":
                self.ended.setdefault(jid, t)
                self.states[jid] = d["state"]
            self.cv.notify_all()

    def wait(self, what, jids, timeout):
        with self.cv:
            ok = self.cv.wait_for(lambda: all(j in what for j in jids), timeout)
        if not ok:
            raise TimeoutError(f"{sum(j not in what for j in jids)} of {len(jids)} jobs not seen in {timeout}s")

    def close(self):
        self.resp.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--blob-dir", required=True, help="the gateway's --blob-dir (the host read)")
    ap.add_argument("--conf", required=True, help="podman's containers.conf (scripts/task-image.sh)")
    ap.add_argument("--slots", type=int, default=8, help="task slots of all the nodes together")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--backlog", type=int, default=200)
    ap.add_argument("--json")
    a = ap.parse_args()
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {a.key}"
    out, bad = {}, 0
    clock = EventClock(a.url, a.key)
    med = statistics.median

    def submit(task, **extra):
        r = s.post(f"{a.url}/v1/jobs", json={"task": task, **extra}, timeout=30)
        if r.status_code not in (200, 201, 202):
            raise RuntimeError(f"submit: {r.status_code} {r.text[:300]}")
        return r.json()["id"]

    try:
        # ------------------------------------------------------------ 1
        cmd = ["python3", "-c", "print(1)"]
        bare_run(a.conf, cmd)                       # warm the image's files
        jid = submit({"image": IMAGE, "command": cmd})
        clock.wait(clock.ended, [jid], 120)         # and the nodes' path
        first_k, end_k, first_b, end_b = [], [], [], []
        for _ in range(a.runs):
            t0 = time.monotonic()
            jid = submit({"image": IMAGE, "command": cmd})
            clock.wait(clock.ended, [jid], 120)
            if clock.states[jid] != "succeeded":
                print("task", jid, clock.states[jid], s.get(f"{a.url}/v1/jobs/{jid}").text[:400])
                bad = 1
                continue
            clock.wait(clock.first_log, [jid], 10)
            first_k.append(clock.first_log[jid] - t0)
            end_k.append(clock.ended[jid] - t0)
            f, e = bare_run(a.conf, cmd)
            first_b.append(f)
            end_b.append(e)
        if first_k:
            out["start"] = {"runs": len(first_k), "kowloon_first_line_s": med(first_k),
                            "kowloon_result_s": med(end_k), "podman_first_line_s": med(first_b),
                            "podman_exit_s": med(end_b)}
            add_f, add_e = med(first_k) - med(first_b), med(end_k) - med(end_b)
            print(f"1. start overhead through the gateway, {len(first_k)} runs of python3 -c 'print(1)', medians")
            print(f"   Kowloon: submit -> first line {ms(med(first_k))}   submit -> result {ms(med(end_k))}")
            print(f"   podman run --rm: start -> first line {ms(med(first_b))}   start -> exit {ms(med(end_b))}")
            print(f"   added by Kowloon: first line {ms(add_f)}, result {ms(add_e)} "
                  f"(target <= +100 ms: {'MET' if add_f <= 0.1 and add_e <= 0.1 else 'NOT MET'})")

        # ------------------------------------------------------------ 2
        n = int(a.gib * (1 << 30))
        chunk = os.urandom(1 << 20)
        h = hashlib.sha256()
        for _ in range(n >> 20):
            h.update(chunk)
        bid = "sha256:" + h.hexdigest()

        # a file, so that requests sends its Content-Length (not chunked)
        with tempfile.TemporaryFile() as f:
            for _ in range(n >> 20):
                f.write(chunk)
            f.seek(0)
            t0 = time.monotonic()
            r = s.post(f"{a.url}/v1/blobs", data=f, timeout=600,
                       headers={"Content-Type": "application/octet-stream"})
            up = time.monotonic() - t0
        if r.status_code not in (200, 201) or r.json().get("id") != bid:
            print("blob upload:", r.status_code, r.text[:300])
            return 1
        path = os.path.join(a.blob_dir, "sha256", bid[7:9], bid[7:])
        hr = host_read_rate(path)
        inside = []
        for _ in range(3):
            jid = submit({"image": IMAGE, "command": ["python3", "-c", READ, "/kowloon/in/x"],
                          "inputs": {"x": {"dtype": "uint8", "shape": [n], "blob": bid}}},
                         timeout_s=600)
            clock.wait(clock.ended, [jid], 600)
            logs = s.get(f"{a.url}/v1/jobs/{jid}/logs", timeout=30).text.split()
            if clock.states[jid] != "succeeded" or len(logs) < 3 or int(logs[1]) != n:
                print("read task:", clock.states[jid], logs[:6], s.get(f"{a.url}/v1/jobs/{jid}").text[:400])
                bad = 1
                break
            inside.append(int(logs[1]) / float(logs[2]))
        if inside:
            cr = med(inside)
            out["input"] = {"gib": a.gib, "host_gbps": hr / 1e9, "task_gbps": cr / 1e9,
                            "ratio": cr / hr, "upload_s": up}
            print(f"2. a {a.gib:g} GiB input (uploaded in {up:.1f} s) read in 16 MiB reads, warm cache, medians")
            print(f"   on the host {hr / 1e9:6.2f} GB/s; inside the task {cr / 1e9:6.2f} GB/s; "
                  f"ratio {cr / hr:.2f} (target >= 0.9: {'MET' if cr / hr >= 0.9 else 'NOT MET'})")

        # ------------------------------------------------------------ 3
        k = a.backlog
        t0 = time.monotonic()
        with cf.ThreadPoolExecutor(8) as ex:
            jids = list(ex.map(lambda _: submit({"image": IMAGE, "command": ["true"]}), range(k)))
        t_sub = time.monotonic() - t0
        clock.wait(clock.ended, jids, 1800)
        t_k = max(clock.ended[j] for j in jids) - t0
        failed = [j for j in jids if clock.states[j] != "succeeded"]
        if failed:
            print(f"{len(failed)} backlog tasks did not succeed, e.g.", s.get(f"{a.url}/v1/jobs/{failed[0]}").text[:400])
            bad = 1
        env = dict(os.environ, CONTAINERS_CONF=a.conf)

        def engine_one(_):
            return subprocess.run(["podman", "run", "--rm", "--network=none", IMAGE, "true"],
                                  env=env, capture_output=True).returncode
        t0 = time.monotonic()
        with cf.ThreadPoolExecutor(a.slots) as ex:
            rcs = list(ex.map(engine_one, range(k)))
        t_e = time.monotonic() - t0
        if any(rcs):
            print(f"{sum(1 for x in rcs if x)} bare podman runs failed")
        out["backlog"] = {"tasks": k, "kowloon_s": t_k, "kowloon_tps": k / t_k, "submit_s": t_sub,
                          "engine_s": t_e, "engine_tps": k / t_e, "parallel": a.slots}
        print(f"3. a backlog of {k} short tasks (`true`) on the nodes ({a.slots} slots in all)")
        print(f"   Kowloon: {k / t_k:6.1f} tasks/s ({t_k:.1f} s from the first submit to the last end; "
              f"submits took {t_sub:.1f} s)")
        print(f"   podman run --rm, {a.slots} at a time: {k / t_e:6.1f} tasks/s ({t_e:.1f} s)")
        print(f"   ratio {(k / t_k) / (k / t_e):.2f}")
    finally:
        clock.close()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    return bad


if __name__ == "__main__":
    sys.exit(main())
