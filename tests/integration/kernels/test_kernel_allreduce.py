"""allreduce end to end through gateway and CPU nodes: resources.gpus ranks
(threads on a CPU node) reduce inputs built so the result is exact, so
`wrong` must be 0 for every op and dtype; time, algbw and busbw follow
nccl-tests' definitions; the result's info says how many ranks ran; the
catalog shows the limits; bad requests are 422s naming the field; a running
all-reduce stops on cancel."""

import time

import pytest

from stack import decode

OUTPUTS = {"time_us": "float64", "algbw_gbps": "float64", "busbw_gbps": "float64", "wrong": "int32"}


def figures(client, job_id):
    """{name: scalar} from the result, read in both encodings, which must
    agree exactly; plus the result's info object."""
    js, bs = client.outputs(job_id, "json"), client.outputs(job_id, "b64")
    assert set(js) == set(bs) == set(OUTPUTS), (js.keys(), bs.keys())
    out = {}
    for name, dtype in OUTPUTS.items():
        assert js[name]["dtype"] == bs[name]["dtype"] == dtype, (name, js[name], bs[name])
        a, b = decode(js[name]), decode(bs[name])
        assert a.shape == b.shape == (1,)
        assert a[0] == b[0], (name, a, b)
        out[name] = a[0].item()
    r = client.result(job_id)
    assert r.status_code == 200, r.text
    return out, r.json().get("info", {})


def check_figures(f, count, itemsize, ranks):
    assert f["wrong"] == 0, f
    assert f["time_us"] > 0, f
    algbw = count * itemsize / (f["time_us"] * 1e-6) / 1e9
    assert f["algbw_gbps"] == pytest.approx(algbw, rel=1e-9)
    assert f["busbw_gbps"] == pytest.approx(f["algbw_gbps"] * 2 * (ranks - 1) / ranks, rel=1e-12, abs=0)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_allreduce_float32_is_exact_on_cpu_ranks(A, ranks, op):
    count = 10007  # prime: the ranks' segments differ in length
    j = A.run("allreduce", {"count": count, "dtype": "float32", "op": op, "iters": 5},
              resources={"backend": "cpu", "gpus": ranks})
    assert j["backend"] == "cpu"
    f, info = figures(A, j["id"])
    check_figures(f, count, 4, ranks)
    assert info.get("ranks") == str(ranks), info
    if ranks == 1:
        assert f["busbw_gbps"] == 0  # nothing crosses between ranks


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_allreduce_float64_is_exact_on_two_ranks(A, op):
    j = A.run("allreduce", {"count": 4099, "dtype": "float64", "op": op, "iters": 3},
              resources={"backend": "cpu", "gpus": 2})
    f, _ = figures(A, j["id"])
    check_figures(f, 4099, 8, 2)


def test_allreduce_defaults_and_more_ranks_than_elements(A):
    # defaults: float32 sum, 20 iterations; 1 element on 4 ranks leaves
    # three ranks an empty segment
    j = A.run("allreduce", {"count": 1}, resources={"backend": "cpu", "gpus": 4})
    f, info = figures(A, j["id"])
    check_figures(f, 1, 4, 4)
    assert info.get("ranks") == "4"


def test_allreduce_in_catalog_with_limits(A):
    r = A.get("/v1/kernels")
    assert r.status_code == 200, r.text
    k = {k["name"]: k for k in r.json()["kernels"]}["allreduce"]
    params = {p["name"]: p for p in k["params"]}
    assert params["count"]["minimum"] == 1 and params["count"]["maximum"] == 2 ** 26
    assert params["iters"]["minimum"] == 1 and params["iters"]["maximum"] == 1000
    assert params["dtype"]["choices"] == ["float32", "float64"]
    assert params["op"]["choices"] == ["sum", "max", "min"] and params["op"]["default"] == "sum"
    assert k["inputs"] == []
    assert [(o["name"], o["dtype"]) for o in k["outputs"]] == list(OUTPUTS.items())


@pytest.mark.parametrize("params,gpus,field", [
    ({"count": 0}, 1, "params.count"),
    ({"count": 2 ** 26 + 1}, 1, "params.count"),
    ({"count": 2 ** 26}, 8, "params.count"),  # count * ranks past 2^28
    ({"count": 1.5}, 1, "params.count"),
    ({"count": 16, "iters": 0}, 1, "params.iters"),
    ({"count": 16, "iters": 1001}, 1, "params.iters"),
    ({"count": 16, "op": "prod"}, 1, "params.op"),
    ({"count": 16, "dtype": "int32"}, 1, "params.dtype"),
], ids=["count_zero", "count_over_max", "count_times_ranks", "count_fraction", "iters_zero",
        "iters_over_max", "op_unknown", "dtype_int32"])
def test_allreduce_bad_request_is_422_naming_the_field(A, stack, params, gpus, field):
    before = stack.count_jobs()
    r = A.post_job({"kernel": "allreduce", "params": params, "resources": {"backend": "cpu", "gpus": gpus}})
    assert r.status_code in ({400, 422} if field == "params.count" and params["count"] == 1.5 else {422}), r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_argument", r.text
    assert err["field"] == field, r.text
    assert field in err["message"], r.text
    assert stack.count_jobs() == before


def test_allreduce_running_is_cancelled_within_seconds(A):
    # 1000 all-reduces of 4 x 64 MiB would take minutes on two cores
    j = A.submit("allreduce", {"count": 2 ** 24, "iters": 1000}, resources={"backend": "cpu", "gpus": 4})
    A.wait(j["id"], 10, states=("running",))
    time.sleep(0.3)
    t0 = time.monotonic()
    r = A.cancel(j["id"])
    assert r.status_code == 200, r.text
    got = A.wait(j["id"], 5)
    assert got["state"] == "cancelled", got
    assert time.monotonic() - t0 < 5
