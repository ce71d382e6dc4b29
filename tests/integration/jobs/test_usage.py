"""Usage and cost: every job that ran and ended carries `usage` (queue
wait, run time, GPU- and CPU-seconds, bytes in and out, cost in the
configured currency), and GET /v1/usage sums a tenant's jobs in a time
range, grouped by kernel, label or day; another tenant sees nothing, an
admin may ask for any tenant, and bad arguments get a 400 naming the field.
Prices (stack.PRICES): a CPU-second costs 1 EUR, a GPU-second 0.1, or 2 on
the fake nodes' "Fake GPU"."""

import asyncio
import datetime
import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

from stack import REPO

SDK_SRC = os.path.join(REPO, "sdk", "python", "src")
sys.path.insert(0, SDK_SRC)

import kowloon  # noqa: E402

X = {"x": {"dtype": "float32", "shape": [4], "data": [1, 2, 3, 4]},
     "y": {"dtype": "float32", "shape": [4], "data": [5, 6, 7, 8]}}
MC = {"s0": 100.0, "strike": 100.0, "rate": 0.05, "sigma": 0.2, "maturity": 1.0,
      "paths": 400000, "steps": 16}
SUMS = ("queue_s", "run_s", "gpu_s", "cpu_s", "bytes_in", "bytes_out", "cost")


def utc_day(offset_days=0):
    d = datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=offset_days)
    return d.isoformat()


def usage(client, **q):
    r = client.get("/v1/usage", params=q)
    assert r.status_code == 200, r.text
    return r.json()


def check_job_usage(j, kernel_inputs_bytes, outputs_bytes):
    u = j["usage"]
    assert u is not None, j
    assert u["backend"] == "cpu" and u["gpus"] == 0 and u["gpu_s"] == 0
    assert "gpu_model" not in u
    assert u["queue_s"] >= 0 and u["run_s"] >= 0 and u["cpu_s"] >= 0
    assert u["bytes_in"] == kernel_inputs_bytes and u["bytes_out"] == outputs_bytes
    assert u["currency"] == "EUR"
    # a CPU-second costs 1: the cost is the CPU time, rounded to 1e-9
    assert abs(u["cost"] - u["cpu_s"]) <= 2e-6, u


def test_jobs_record_usage_and_usage_sums_by_kernel_label_and_day(stack, tenant, B):
    name, T = tenant
    # B may have jobs of its own with these labels (other test files): it
    # must see the same sums after T's jobs as before them
    b_before = usage(B, group_by="label:team")
    red = [T.run("saxpy", {"a": 2.0}, X, labels={"team": "red"}) for _ in range(2)]
    mc = T.run("montecarlo_option", MC, labels={"team": "blue"}, timeout=60)
    plain = T.run("saxpy", {"a": 1.0}, X)
    for j in red + [plain]:
        check_job_usage(j, 32, 16)          # x and y in, y out: 4 float32 each
    check_job_usage(mc, 0, 8)               # no inputs; price and std_error float32
    # Monte Carlo's 6.4 M path steps take real CPU time (that its helper
    # threads count is test_kl_cputime's: on a shared machine the wall
    # clock says little about CPU time)
    assert mc["usage"]["cpu_s"] > 0.02, mc["usage"]
    jobs = red + [mc, plain]

    def total(key, js):
        return sum(j["usage"][key] for j in js)

    body = usage(T, group_by="kernel")
    assert body["tenant"] == name and body["currency"] == "EUR" and body["group_by"] == "kernel"
    assert body["totals"]["jobs"] == 4
    for k in SUMS:
        assert body["totals"][k] == pytest.approx(total(k, jobs), abs=1e-5), k
    groups = {g["key"]: g for g in body["groups"]}
    assert set(groups) == {"saxpy", "montecarlo_option"}
    assert groups["saxpy"]["jobs"] == 3 and groups["montecarlo_option"]["jobs"] == 1
    assert groups["saxpy"]["cpu_s"] == pytest.approx(total("cpu_s", red + [plain]), abs=1e-5)
    assert groups["montecarlo_option"]["cost"] == pytest.approx(mc["usage"]["cost"], abs=1e-8)

    body = usage(T, group_by="label:team")
    groups = [(g["key"], g["jobs"]) for g in body["groups"]]
    assert groups == [("blue", 1), ("red", 2), (None, 1)], body   # by key, unlabelled last
    assert body["groups"][1]["bytes_in"] == 64

    body = usage(T, group_by="day", **{"from": utc_day(-1), "to": utc_day(1)})
    assert [g["key"] for g in body["groups"]] == [utc_day()]
    assert body["groups"][0]["jobs"] == 4
    # no group_by: totals only
    body = usage(T)
    assert body["groups"] == [] and body["group_by"] is None and body["totals"]["jobs"] == 4
    # a range that ends before the jobs ended holds none of them
    body = usage(T, **{"from": utc_day(-3), "to": utc_day(-1)})
    assert body["totals"] == {"jobs": 0, **{k: 0 for k in SUMS}}
    # another tenant sees nothing of these jobs
    _, other = stack.new_tenant("usage-other")
    seen = usage(other, group_by="label:team")
    assert seen["totals"]["jobs"] == 0 and seen["groups"] == [], seen
    seen = usage(B, group_by="label:team")
    assert (seen["totals"], seen["groups"]) == (b_before["totals"], b_before["groups"]), seen


def test_admin_reads_any_tenant_and_others_may_not(stack, tenant, admin, B):
    name, T = tenant
    T.run("saxpy", {"a": 2.0}, X, labels={"team": "red"})
    body = usage(admin, tenant=name, group_by="kernel")
    assert body["tenant"] == name and body["totals"]["jobs"] == 1
    assert [g["key"] for g in body["groups"]] == ["saxpy"]
    r = B.get("/v1/usage", params={"tenant": name})
    assert r.status_code == 403 and r.json()["error"]["field"] == "tenant", r.text
    r = admin.get("/v1/usage", params={"tenant": "no-such-tenant-" + uuid.uuid4().hex[:6]})
    assert r.status_code == 404 and r.json()["error"]["field"] == "tenant", r.text


@pytest.mark.parametrize("q, field", [
    ({"from": "yesterday"}, "from"),
    ({"to": "2026-13-01"}, "to"),
    ({"to": "2026-02-30"}, "to"),
    ({"from": "2026-01-01T25:00:00Z"}, "from"),
    ({"from": "2026-01-01T10:00:00"}, "from"),          # no zone
    ({"from": "2026-03-02", "to": "2026-03-01"}, "from"),
    ({"from": "2024-01-01", "to": "2026-01-01"}, "from"),  # over 366 days
    ({"group_by": "node"}, "group_by"),
    ({"group_by": "label:"}, "group_by"),
    ({"group_by": "label:bad key"}, "group_by"),
])
def test_bad_arguments_get_400_naming_the_field(A, q, field):
    r = A.get("/v1/usage", params=q)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_argument" and err["field"] == field, err


def test_times_with_zones_and_fractions_are_read(A):
    body = usage(A, **{"from": "2026-01-01T10:00:00.250+02:00", "to": "2026-01-02T00:00:00Z"})
    assert body["from"] == "2026-01-01T08:00:00.250Z" and body["to"] == "2026-01-02T00:00:00.000Z"


def test_gpu_runs_are_billed_per_gpu_second_at_the_models_rate(stack, tenant):
    """A CUDA node (scripted) that reports its measurements: gpu_s is GPUs ×
    run time, billed at the "Fake GPU" rate (2 per GPU-second); one that
    reports none is billed from the gateway's own clock, its model taken
    from the node's registration."""
    name, T = tenant
    measured = {"run_s": 1.5, "cpu_s": 0.25, "gpus": 1, "gpu_model": "Fake GPU"}
    with stack.fake_node("fake-usage", run_s=0.3, usage=measured) as node:
        j = T.submit("sleep", {"seconds": 0.1}, resources={"backend": "cuda", "gpus": 1})
        j = T.wait(j["id"], 20)
        assert j["state"] == "succeeded", j
        u = j["usage"]
        assert u["backend"] == "cuda" and u["gpus"] == 1 and u["gpu_model"] == "Fake GPU", u
        assert u["run_s"] == 1.5 and u["gpu_s"] == 1.5 and u["cpu_s"] == 0.25
        assert u["cost"] == pytest.approx(3.0), u
        node.usage = None
        j = T.submit("sleep", {"seconds": 0.1}, resources={"backend": "cuda", "gpus": 1})
        j = T.wait(j["id"], 20)
        u = j["usage"]
        assert u["gpu_model"] == "Fake GPU" and u["gpus"] == 1 and u["cpu_s"] == 0, u
        assert 0.2 <= u["run_s"] <= 10 and u["gpu_s"] == u["run_s"]
        assert u["cost"] == pytest.approx(2 * u["run_s"], abs=2e-3), u   # run_s shown to the ms
    body = usage(T, group_by="kernel")
    assert body["totals"]["gpu_s"] == pytest.approx(1.5 + u["gpu_s"], abs=1e-3)


def test_timed_out_and_cancelled_running_jobs_have_usage(stack, tenant):
    name, T = tenant
    j = T.submit("sleep", {"seconds": 30}, timeout_s=1, max_attempts=1)
    j = T.wait(j["id"], 30)
    assert j["state"] == "failed" and j["error"]["code"] == "timeout", j
    assert j["usage"] is not None and j["usage"]["run_s"] >= 0.9, j
    # cancelled while running: it used the node, so it has usage
    j = T.submit("sleep", {"seconds": 30})
    stack_wait_running(T, j["id"])
    assert T.cancel(j["id"]).status_code == 200
    j = T.wait(j["id"], 30)
    assert j["state"] == "cancelled" and j["usage"] is not None, j
    body = usage(T)
    assert body["totals"]["jobs"] == 2


def stack_wait_running(client, job_id, timeout=20):
    import time
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if client.job(job_id)["state"] == "running":
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never ran")


def test_sdk_and_cli_read_usage(stack, tenant):
    """client.usage and AsyncClient.usage answer what GET /v1/usage does;
    `kowloon usage` prints it as JSON or as a table with a TOTAL row; an
    admin's tenant= and bad arguments come through as the API says."""
    name, T = tenant
    T.run("saxpy", {"a": 2.0}, X, labels={"team": "red"})
    key = T.key
    with kowloon.Client(stack.base, key) as kl:
        u = kl.usage(group_by="label:team", from_=datetime.date.today() - datetime.timedelta(days=1),
                     to=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5))
        assert u["tenant"] == name and u["currency"] == "EUR"
        assert [(g["key"], g["jobs"]) for g in u["groups"]] == [("red", 1)]
        with pytest.raises(kowloon.BadRequestError) as ei:
            kl.usage(to="2026-02-30")
        assert ei.value.field == "to"

    async def aio():
        async with kowloon.AsyncClient(stack.base, key) as ak:
            return await ak.usage(group_by="kernel")
    u = asyncio.run(aio())
    assert [g["key"] for g in u["groups"]] == ["saxpy"] and u["totals"]["jobs"] == 1

    with kowloon.Client(stack.base, stack.keys["admin"]) as adm:
        assert adm.usage(tenant=name)["totals"]["jobs"] == 1
        with pytest.raises(kowloon.NotFoundError) as ei:
            adm.usage(tenant="no-such-" + uuid.uuid4().hex[:6])
        assert not isinstance(ei.value, kowloon.NotOfferedError) and ei.value.field == "tenant"

    env = dict(os.environ, KOWLOON_URL=stack.base, KOWLOON_API_KEY=key,
               PYTHONPATH=SDK_SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "kowloon", "usage", *args], env=env,
                              capture_output=True, text=True, timeout=60)
    r = cli("--json", "--group-by", "kernel")
    assert r.returncode == 0, r.stderr
    body = json.loads(r.stdout)
    assert body["totals"]["jobs"] == 1 and body["groups"][0]["key"] == "saxpy"
    r = cli("--group-by", "label:team")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "EUR" in lines[0] and lines[1].split()[:2] == ["LABEL:TEAM", "JOBS"], r.stdout
    assert lines[2].split()[:2] == ["red", "1"] and lines[3].split()[:2] == ["TOTAL", "1"], r.stdout
    r = cli("--json", "--group-by", "node")
    assert r.returncode == 3 and json.loads(r.stdout)["error"]["field"] == "group_by", r.stdout
    # the SDK's job shows its usage once it has ended
    with kowloon.Client(stack.base, key) as kl:
        job = kl.submit("saxpy", params={"a": 1.0}, x=np.ones(4, np.float32),
                        y=np.ones(4, np.float32))
        assert job.usage is None
        job.wait(30)
        assert job.usage["bytes_in"] == 32 and job.usage["currency"] == "EUR", job.usage
