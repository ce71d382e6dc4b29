"""Every kernel, end to end through gateway and node, against numpy: inputs
sent as flat "data" and as "b64", results read back in both encodings."""

import numpy as np
import pytest

from stack import decode, tensor

RTOL = 1e-4
ATOL = 1e-5

rng = np.random.default_rng(20261202)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def outputs_both(client, job_id):
    """The outputs fetched with ?encoding=json and ?encoding=b64, checked to
    carry the promised encoding and to agree exactly."""
    js = client.outputs(job_id, "json")
    bs = client.outputs(job_id, "b64")
    assert set(js) == set(bs)
    for name in js:
        assert "data" in js[name] and "b64" not in js[name], f"encoding=json gave {js[name]}"
        assert "b64" in bs[name] and "data" not in bs[name], f"encoding=b64 gave {bs[name]}"
        assert js[name]["dtype"] == bs[name]["dtype"] == "float32"
        assert js[name]["shape"] == bs[name]["shape"]
    return {n: (decode(js[n]), decode(bs[n])) for n in js}


def check(out, want, rtol=RTOL, atol=ATOL):
    got_json, got_b64 = out
    want = np.asarray(want, dtype=np.float32)
    assert got_json.shape == want.shape, f"shape {got_json.shape} != {want.shape}"
    np.testing.assert_allclose(got_b64, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(got_json, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("b64", [False, True], ids=["data", "b64"])
def test_saxpy_matches_numpy(A, b64):
    x, y = rand(1000), rand(1000)
    j = A.run("saxpy", {"a": 2.5}, {"x": tensor(x, b64), "y": tensor(y, b64)})
    out = outputs_both(A, j["id"])
    assert set(out) == {"y"}
    check(out["y"], np.float32(2.5) * x + y)


def test_saxpy_negative_scale_and_single_element(A):
    x, y = np.array([3.0], np.float32), np.array([-1.0], np.float32)
    j = A.run("saxpy", {"a": -0.5}, {"x": tensor(x), "y": tensor(y)})
    check(outputs_both(A, j["id"])["y"], [-2.5])


@pytest.mark.parametrize("op", ["sum", "min", "max", "mean"])
@pytest.mark.parametrize("b64", [False, True], ids=["data", "b64"])
def test_reduce_matches_numpy(A, op, b64):
    x = rand(4, 5, 6)  # rank 3: reduce is over every element
    j = A.run("reduce", {"op": op}, {"x": tensor(x, b64)})
    out = outputs_both(A, j["id"])
    assert set(out) == {"value"}
    want = {"sum": np.sum, "min": np.min, "max": np.max, "mean": np.mean}[op](x.astype(np.float64))
    check(out["value"], [want], rtol=RTOL, atol=1e-4)


def test_reduce_default_op_is_sum(A):
    x = rand(257)
    j = A.run("reduce", {}, {"x": tensor(x)})
    check(outputs_both(A, j["id"])["value"], [x.astype(np.float64).sum()], atol=1e-4)


def test_reduce_rank_one_single_element(A):
    j = A.run("reduce", {"op": "mean"}, {"x": tensor(np.array([7.25], np.float32))})
    check(outputs_both(A, j["id"])["value"], [7.25])


@pytest.mark.parametrize("b64", [False, True], ids=["data", "b64"])
def test_gemm_without_c_matches_numpy(A, b64):
    a, b = rand(5, 7), rand(7, 3)  # non-square: catches transposed layouts
    j = A.run("gemm", {}, {"a": tensor(a, b64), "b": tensor(b, b64)})
    out = outputs_both(A, j["id"])
    assert set(out) == {"c"}
    check(out["c"], a.astype(np.float64) @ b)


@pytest.mark.parametrize("b64", [False, True], ids=["data", "b64"])
def test_gemm_with_c_alpha_beta_matches_numpy(A, b64):
    a, b, c = rand(6, 4), rand(4, 9), rand(6, 9)
    j = A.run("gemm", {"alpha": 0.75, "beta": -1.5},
              {"a": tensor(a, b64), "b": tensor(b, b64), "c": tensor(c, b64)})
    check(outputs_both(A, j["id"])["c"], 0.75 * (a.astype(np.float64) @ b) - 1.5 * c)


def test_gemm_alpha_only_ignores_absent_c(A):
    a, b = rand(3, 2), rand(2, 4)
    j = A.run("gemm", {"alpha": 2.0, "beta": 3.0}, {"a": tensor(a), "b": tensor(b)})
    check(outputs_both(A, j["id"])["c"], 2.0 * (a.astype(np.float64) @ b))


def test_gemm_with_c_default_beta_zero_ignores_c(A):
    a, b, c = rand(2, 3), rand(3, 2), rand(2, 2)
    j = A.run("gemm", {}, {"a": tensor(a), "b": tensor(b), "c": tensor(c)})
    check(outputs_both(A, j["id"])["c"], a.astype(np.float64) @ b)


def test_gemm_larger_b64_matches_numpy(A):
    a, b = rand(128, 96), rand(96, 64)
    j = A.run("gemm", {"alpha": 1.0}, {"a": tensor(a, True), "b": tensor(b, True)})
    check(outputs_both(A, j["id"])["c"], a.astype(np.float64) @ b, atol=1e-4)


def test_sleep_reports_seconds_slept(A):
    j = A.run("sleep", {"seconds": 0.3})
    (got, got_b64), = outputs_both(A, j["id"]).values()
    assert got.shape == (1,)
    assert 0.3 - 1e-3 <= float(got[0]) < 1.3, f"slept {got[0]}"
    assert float(got[0]) == pytest.approx(float(got_b64[0]))


def test_sleep_zero_seconds_succeeds(A):
    j = A.run("sleep", {"seconds": 0})
    got, _ = outputs_both(A, j["id"])["slept"]
    assert 0 <= float(got[0]) < 1.0


def test_result_default_encoding_is_a_valid_tensor(A):
    x, y = rand(8), rand(8)
    j = A.run("saxpy", {"a": 1.0}, {"x": tensor(x), "y": tensor(y)})
    r = A.result(j["id"])
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(decode(r.json()["outputs"]["y"]), x + y, rtol=RTOL, atol=ATOL)


def test_result_unknown_encoding_is_400(A):
    j = A.run("sleep", {"seconds": 0})
    r = A.result(j["id"], "xml")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_argument"


def test_ran_on_cpu_backend(A):
    j = A.run("sleep", {"seconds": 0})
    assert j["backend"] == "cpu"
