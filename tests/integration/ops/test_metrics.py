"""GET /metrics on the gateway and on the nodes: Prometheus text that
promtool accepts, counters that move as jobs run, the cluster's state
counted from PostgreSQL, GPU figures from NVML where it answers (a stand-in
libnvidia-ml built here), and access: the cluster token or an admin key
unless --metrics-public."""

import os
import re
import shutil
import subprocess
import tempfile

import pytest
import requests

from stack import free_port, wait_until

PROMTOOL = shutil.which("promtool")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def parse(text):
    """{(name, frozenset of (label, value)): float} of every sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset((k, re.sub(r'\\(.)', lambda e: {"n": "\n"}.get(e[1], e[1]), v))
                           for k, v in _LABEL.findall(m[2] or ""))
        out[(m[1], labels)] = float(m[3])
    return out


def value(samples, metric, **labels):
    """The sample of metric with exactly these labels; 0 when absent."""
    return samples.get((metric, frozenset(labels.items())), 0.0)


def total(samples, metric, **labels):
    """The sum of every sample of metric whose labels include these."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == metric and want <= ls)


def scrape(url, token, **kw):
    r = requests.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {},
                     timeout=10, **kw)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["Content-Type"] == CONTENT_TYPE
    return r.text


def promtool_check(text):
    if PROMTOOL is None:
        pytest.fail("promtool is missing: scripts/install-deps.sh installs Debian's prometheus")
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, f"promtool check metrics: {r.stdout}{r.stderr}"


def test_gateway_and_node_expositions_pass_promtool(stack):
    gw = scrape(stack.cluster_base, stack.cluster_token)
    promtool_check(gw)
    s = parse(gw)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_threads", "kowloon_pg_pool_connections",
                 "kowloon_cluster_state_age_seconds"):
        assert any(n == name for n, _ in s), f"{name} missing from the gateway's /metrics"
    assert value(s, "kowloon_redis_pool_connections", pool="queue") > 0
    assert value(s, "kowloon_queue_depth", priority="9") >= 0
    assert value(s, "kowloon_cluster_node_up", node="node-a", backend="cpu") == 1
    for node in stack.node_names:
        text = scrape(stack.node_url(node), stack.cluster_token)
        promtool_check(text)
        n = parse(text)
        assert value(n, "kowloon_node_slots") == 1
        assert value(n, "kowloon_node_cpu_cores") == os.cpu_count()
        assert any(k == "kowloon_node_load1" for k, _ in n)
        assert value(n, "kowloon_node_info", node=node, backend="cpu", version="0.1.0") == 1
        # no NVML on a CPU host: no GPU series, and no error for it
        assert not any(k.startswith("kowloon_gpu_") for k, _ in n)


def test_metrics_need_an_admin_key_or_on_the_cluster_listener_the_cluster_token(stack, A, admin,
                                                                                anon):
    assert anon.get("/metrics").status_code == 401
    r = A.get("/metrics")
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    wrong = requests.get(stack.base + "/metrics", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthenticated"
    r = admin.get("/metrics")
    assert r.status_code == 200 and "kowloon_http_requests_total" in r.text
    # the cluster token is never taken on the public listener
    r = requests.get(stack.base + "/metrics", timeout=10,
                     headers={"Authorization": "Bearer " + stack.cluster_token})
    assert r.status_code == 401, r.text
    # Prometheus scrapes the cluster listener with it, as it scrapes the nodes
    assert requests.get(stack.cluster_base + "/metrics", timeout=10).status_code == 401
    assert requests.get(stack.cluster_base + "/metrics", timeout=10,
                        headers={"Authorization": "Bearer " + stack.keys["admin"]}).status_code == 401
    node = stack.node_url("node-a")
    assert requests.get(node + "/metrics", timeout=10).status_code == 401
    assert requests.get(node + "/metrics", headers={"Authorization": "Bearer " + stack.keys["admin"]},
                        timeout=10).status_code == 401


def test_counters_move_as_jobs_run(stack, A):
    def both():
        gw = parse(scrape(stack.cluster_base, stack.cluster_token))
        nodes = [parse(scrape(stack.node_url(n), stack.cluster_token)) for n in stack.node_names]
        return gw, nodes

    gw0, nodes0 = both()
    jobs = [A.submit("sleep", {"seconds": 0.05}) for _ in range(3)]
    done = [A.wait(j["id"], 30) for j in jobs]
    assert all(j["state"] == "succeeded" for j in done), done
    for j in jobs:
        assert A.get(f"/v1/jobs/{j['id']}").status_code == 200

    want = {  # (series, labels): how much it must have grown
        ("kowloon_job_submits_total", (("kernel", "sleep"),)): 3,
        ("kowloon_job_results_total", (("kernel", "sleep"), ("state", "succeeded"))): 3,
        ("kowloon_job_run_seconds_count", (("kernel", "sleep"),)): 3,
        ("kowloon_job_queue_wait_seconds_count", (("kernel", "sleep"),)): 3,
        ("kowloon_http_requests_total",
         (("method", "POST"), ("route", "/v1/jobs"), ("status", "202"))): 3,
        ("kowloon_http_request_duration_seconds_count",
         (("method", "POST"), ("route", "/v1/jobs"))): 3,
    }
    node_runs = lambda ns: sum(total(n, "kowloon_node_runs_total", kernel="sleep",  # noqa: E731
                                     state="succeeded") for n in ns)
    seen = {}

    def moved():
        # the daemons count a request once its reply is out, a result once
        # it is recorded: a moment after the client has seen either
        gw, nodes = both()
        seen.update(gw=gw, nodes=nodes)
        return all(value(gw, n, **dict(l)) - value(gw0, n, **dict(l)) >= k
                   for (n, l), k in want.items()) and node_runs(nodes) - node_runs(nodes0) >= 3
    wait_until(moved, 10, 0.2, "the counters to move")
    gw1 = seen["gw"]
    for (n, l), k in want.items():
        assert value(gw1, n, **dict(l)) - value(gw0, n, **dict(l)) == k, (n, l)
    assert node_runs(seen["nodes"]) - node_runs(nodes0) == 3
    d = lambda metric, **l: value(gw1, metric, **l) - value(gw0, metric, **l)  # noqa: E731
    # the sum carries every earlier run of the process: compare with slack
    assert d("kowloon_job_run_seconds_sum", kernel="sleep") >= 3 * 0.05 - 1e-6
    assert d("kowloon_http_requests_total", method="GET", route="/v1/jobs/{id}", status="200") >= 3
    text = scrape(stack.cluster_base, stack.cluster_token)
    for j in jobs:
        assert j["id"] not in text, "a raw path reached a label: routes must be patterns"


def test_jobs_and_queue_depth_are_counted_from_postgresql(stack, A):
    """Jobs that no node can take stay queued and show in the gauges once
    the figures are refreshed (a second gateway asks every second)."""
    stuck = [A.submit("sleep", {"seconds": 0}, priority=7, resources={"backend": "cuda", "gpus": 1})
             for _ in range(2)]
    try:
        with stack.second_gateway("gateway-metrics", KOWLOON_METRICS_REFRESH_S=1) as base:
            def counted():
                s = parse(scrape(base, stack.keys["admin"]))
                return (value(s, "kowloon_jobs", state="queued", kernel="sleep") >= 2 and
                        value(s, "kowloon_queue_depth", priority="7") >= 2)
            wait_until(counted, 10, 0.3, "queued jobs in kowloon_jobs and kowloon_queue_depth")
            for s in stuck:
                A.cancel(s["id"])

            def gone():
                s = parse(scrape(base, stack.keys["admin"]))
                return value(s, "kowloon_queue_depth", priority="7") == 0
            wait_until(gone, 10, 0.3, "the cancelled jobs to leave kowloon_queue_depth")
    finally:
        for s in stuck:
            A.cancel(s["id"])


def test_metrics_public_serves_anyone(stack):
    with stack.second_gateway("gateway-public", KOWLOON_METRICS_PUBLIC=1) as base:
        r = requests.get(base + "/metrics", timeout=10)
        assert r.status_code == 200
        promtool_check(r.text)
        # only /metrics: the rest still needs a key
        assert requests.get(base + "/v1/jobs", timeout=10).status_code == 401


FAKE_NVML = r"""
/* A stand-in for libnvidia-ml.so.1: two GPUs with fixed figures. */
#include <stdio.h>
#include <string.h>
typedef struct { unsigned int gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **d) { *d = (void *)(long)(i + 1); return 0; }
int nvmlDeviceGetName(void *d, char *s, unsigned int n)
{ snprintf(s, n, "Fake \"H200\" %ld", (long)d); return 0; }
int nvmlDeviceGetUUID(void *d, char *s, unsigned int n) { snprintf(s, n, "GPU-fake-%ld", (long)d); return 0; }
int nvmlDeviceGetUtilizationRates(void *d, util_t *u) { u->gpu = 42 * (long)d; u->memory = 7; return 0; }
int nvmlDeviceGetMemoryInfo(void *d, mem_t *m)
{ m->total = 141ull << 30; m->used = (long)d << 30; m->free = m->total - m->used; return 0; }
int nvmlDeviceGetTemperature(void *d, int sensor, unsigned int *t) { (void)d; (void)sensor; *t = 55; return 0; }
int nvmlDeviceGetPowerUsage(void *d, unsigned int *mw) { (void)d; *mw = 300500; return 0; }
"""


def test_gpu_figures_come_from_nvml_where_it_answers(stack):
    tmp = tempfile.mkdtemp(prefix="fake-nvml-", dir=stack.root)
    src, lib = os.path.join(tmp, "nvml.c"), os.path.join(tmp, "libnvidia-ml.so.1")
    with open(src, "w") as f:
        f.write(FAKE_NVML)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True, timeout=60)
    port = free_port()
    name = "node-gpu-metrics"
    stack.node_ports[name] = port
    p = stack.start_node(name, port=port, extra_args=("--nvml", lib, "--metrics-public"))
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: requests.get(url + "/healthz", timeout=2).status_code == 200, 15, 0.1,
                   "the node to listen")
        r = requests.get(url + "/metrics", timeout=10)  # --metrics-public: no token
        assert r.status_code == 200
        promtool_check(r.text)
        s = parse(r.text)
        g1 = {"gpu": "1", "name": 'Fake "H200" 2', "uuid": "GPU-fake-2"}
        assert value(s, "kowloon_gpu_utilization_ratio", **g1) == pytest.approx(0.84)
        assert value(s, "kowloon_gpu_memory_used_bytes", **g1) == 2 << 30
        assert value(s, "kowloon_gpu_memory_total_bytes", **g1) == 141 << 30
        assert value(s, "kowloon_gpu_temperature_celsius", gpu="0", name='Fake "H200" 1',
                     uuid="GPU-fake-1") == 55
        assert value(s, "kowloon_gpu_power_watts", gpu="0", name='Fake "H200" 1',
                     uuid="GPU-fake-1") == pytest.approx(300.5)
    finally:
        p.stop()
        stack.procs.pop(name, None)
        stack.node_ports.pop(name, None)


def test_heartbeats_carry_the_visible_devices_state(stack):
    """GET /v1/nodes shows what each node's last heartbeat said of its
    devices (gpu_state, which placement reads): NVML's figures for the
    devices CUDA_VISIBLE_DEVICES leaves the node, numbered as CUDA numbers
    them, and the CPU's cores and load on every node."""
    tmp = tempfile.mkdtemp(prefix="fake-nvml-", dir=stack.root)
    src, lib = os.path.join(tmp, "nvml.c"), os.path.join(tmp, "libnvidia-ml.so.1")
    with open(src, "w") as f:
        f.write(FAKE_NVML)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True, timeout=60)
    name = "node-gpu-state"
    stack.node_ports[name] = free_port()
    p = stack.start_node(name, extra_args=("--nvml", lib),
                         env_extra={"CUDA_VISIBLE_DEVICES": "GPU-fake-2"})
    try:
        def state():
            n = stack.nodes_by_name().get(name)
            return n and n.get("gpu_state")
        wait_until(state, 20, 0.2, "the node's first heartbeat")
        st = state()
        assert st["gpus"] == [{"index": 0, "model": 'Fake "H200" 2', "memory_total": 141 << 30,
                               "memory_free": 139 << 30, "util": 84}], st
        assert st["cpu"]["cores"] >= 1 and st["cpu"]["load1"] >= 0, st
        plain = stack.nodes_by_name()["node-a"]["gpu_state"]
        assert plain["gpus"] == [] and plain["cpu"]["cores"] >= 1, plain
    finally:
        p.stop()
        stack.procs.pop(name, None)
        stack.node_ports.pop(name, None)
