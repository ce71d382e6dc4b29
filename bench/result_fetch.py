#!/usr/bin/env python3
"""bench/result_fetch.py — a small request with a huge answer: runs gemm
a[4096,1]·b[1,4096] (a 64 MiB float32 result) on a private stack and prints,
for GET /v1/jobs/{id}/result as JSON and as b64, the median of N fetches of
the wall time and of the gateway's peak RSS growth during the fetch (VmHWM,
reset through /proc/<pid>/clear_refs before each), plus the gateway's RSS
15 s after the last one. KOWLOON_TEST_ROOT=<tree> measures another build
(its bin/); KL_BENCH_FETCHES [3] sets N. Never fails on time."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))

import numpy as np  # noqa: E402
import requests  # noqa: E402

import stack as stk  # noqa: E402


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    n = int(os.environ.get("KL_BENCH_FETCHES", "3"))
    s = stk.Stack()
    try:
        s.start()
        A = s.client("A")
        a = np.random.default_rng(1).standard_normal((4096, 1)).astype(np.float32)
        b = np.random.default_rng(2).standard_normal((1, 4096)).astype(np.float32)
        j = A.submit("gemm", inputs={"a": stk.tensor(a, b64=True), "b": stk.tensor(b, b64=True)})
        A.wait(j["id"], timeout=300, states=("succeeded",))
        pid = s.gateway.pid
        url = f"{A.base}/v1/jobs/{j['id']}/result"
        print(f"result-fetch: gemm [4096,1]x[1,4096], c = 64 MiB float32; gateway {stk.GATEWAY_BIN}")
        for enc in ("json", "b64"):
            times, peaks, sizes = [], [], []
            for _ in range(n):
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
                rss0 = status_kb(pid, "VmRSS")
                t0 = time.monotonic()
                r = requests.get(url, params={"encoding": enc}, headers=A.headers(), timeout=600)
                times.append(time.monotonic() - t0)
                assert r.status_code == 200, r.text[:200]
                sizes.append(len(r.content))
                peaks.append((status_kb(pid, "VmHWM") - rss0) / 1024)
                del r
            print(f"result-fetch {enc:4s}: {statistics.median(times):6.2f} s  peak RSS growth "
                  f"{statistics.median(peaks):6.0f} MiB  body {sizes[0] / 2**20:6.1f} MiB  "
                  f"(median of {n}; times {' '.join(f'{t:.2f}' for t in times)}; "
                  f"peaks {' '.join(f'{p:.0f}' for p in peaks)} MiB)")
        time.sleep(15)
        print(f"result-fetch: gateway RSS 15 s after the last fetch {status_kb(pid, 'VmRSS') / 1024:.0f} MiB")
    finally:
        s.close()
        s.remove()


if __name__ == "__main__":
    main()
