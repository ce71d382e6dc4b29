#!/usr/bin/env python3
"""bench/events_catchup.py — what a stream resumed from the start of the
event log (Last-Event-ID: 0) costs the other streams of its gateway. On a
private stack (no nodes: jobs stay queued), tenant B gets 1,000 jobs and a
million events inserted with SQL; tenant A has a few jobs. Then, for each
scenario, a live stream of tenant A is open while another stream resumes
from 0 — A's own (sparse: the log is almost all B's) or B's (dense) — and a
job of A is submitted every 100 ms: printed are the live stream's latency
(submit to its `queued` event: median, p90, max) during the catch-up, and
how long the resumed stream took to reach live events (or, for the dense
one, how many events it read in its first seconds). KOWLOON_TEST_ROOT=<tree>
measures another build; KL_BENCH_EVENTS [1000000] sets the log's size.
Never fails on time."""

import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))

import requests  # noqa: E402

import stack as stk  # noqa: E402


class Reader:
    """Reads an event stream on a thread: (monotonic time, event, data)."""

    def __init__(self, base, key, last_event_id=None):
        h = {"Authorization": "Bearer " + key, "Accept": "text/event-stream"}
        if last_event_id is not None:
            h["Last-Event-ID"] = str(last_event_id)
        self.r = requests.get(base + "/v1/events", headers=h, stream=True, timeout=(5, 600))
        assert self.r.status_code == 200, self.r.text
        self.events, self.count, self.stop = [], 0, False
        self.seen = {}  # job id -> time its queued event came
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        event = None
        try:
            for line in self.r.iter_lines(chunk_size=65536, decode_unicode=True):
                if self.stop:
                    break
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "state":
                    self.count += 1
                    d = json.loads(line[5:])
                    if d.get("state") == "queued" and d["job_id"] not in self.seen:
                        self.seen[d["job_id"]] = time.monotonic()
        except (requests.RequestException, ValueError, AttributeError):
            pass  # closed under the reader

    def close(self):
        self.stop = True
        self.r.close()


def submit(client):
    r = client.post_job({"kernel": "sleep", "params": {"seconds": 0}})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def scenario(s, name, resume_key, dense, seconds=20):
    A = s.client("A")
    live = Reader(s.base, s.keys["A"])
    time.sleep(0.5)
    t0 = time.monotonic()
    resumed = Reader(s.base, resume_key, last_event_id=0)
    caught = None
    ids = []
    end = t0 + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        ids.append((submit(A), t))
        time.sleep(0.1)
        if not dense and caught is None and any(j in resumed.seen for j, _ in ids):
            caught = min(resumed.seen[j] for j, _ in ids if j in resumed.seen) - t0
            end = min(end, time.monotonic() + 1.0)
    stk.wait_until(lambda: all(j in live.seen for j, _ in ids), 30, 0.05, "the live events")
    lats = sorted(live.seen[j] - ts for j, ts in ids)
    read = resumed.count
    live.close()
    resumed.close()
    p90 = lats[int(0.9 * (len(lats) - 1))]
    print(f"events-catchup {name:6s}: live latency median {statistics.median(lats) * 1000:7.1f} ms"
          f"  p90 {p90 * 1000:7.1f} ms  max {lats[-1] * 1000:7.1f} ms over {len(lats)} submits; "
          + (f"resumed stream read {read} events in {seconds} s" if dense else
             f"resumed stream live after {caught:.2f} s" if caught is not None else
             f"resumed stream not live after {seconds} s"))


def main():
    n = int(os.environ.get("KL_BENCH_EVENTS", "1000000"))
    s = stk.Stack(node_names=())
    try:
        s.start()
        B = s.client("B")
        A = s.client("A")
        for _ in range(20):
            submit(A)
        for _ in range(1000):
            submit(B)
        per = max(1, n // 1000)
        t = time.monotonic()
        s.psql("INSERT INTO job_events (job_id, state, attempt)"
               " SELECT j.id, 'running', g FROM jobs j CROSS JOIN generate_series(1, %d) g"
               " WHERE j.tenant_id = (SELECT id FROM tenants WHERE name = 'B')" % per, timeout=600)
        s.psql("ANALYZE job_events", timeout=600)
        s.psql("ANALYZE jobs", timeout=600)
        total = s.psql_value("SELECT count(*) FROM job_events")
        # the gateway's log reader, with no stream open, moves past the
        # insert at its next poll (4 x --events-poll-ms with Redis up);
        # a stream open before that would take the million as live events
        time.sleep(3)
        print(f"events-catchup: {total} events in the log ({time.monotonic() - t:.1f} s to insert); "
              f"gateway {stk.GATEWAY_BIN}")
        scenario(s, "sparse", s.keys["A"], dense=False)
        scenario(s, "dense", s.keys["B"], dense=True, seconds=10)
    finally:
        s.close()
        s.remove()


if __name__ == "__main__":
    main()
