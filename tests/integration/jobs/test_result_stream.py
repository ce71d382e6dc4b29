"""Results are streamed: a small request with a huge answer (gemm
a[4096,1]·b[1,4096], a 64 MiB float32 c) comes back right as JSON and as
b64 while the gateway's memory grows by about the stored bytes, never by the
text of the document; non-finite values are distinct JSON strings; and a job
whose outputs would pass the gateway's --max-output-mb is refused at submit.

Memory bound (README, "The result"): fetching a result of R raw bytes raises
the gateway's peak RSS (VmHWM, reset through /proc/<pid>/clear_refs just
before) by less than 2.5·R + 64 MiB. Measured on this result: 2·R (the
stored bytes, in libpq's result and copied out of it); the JSON fetch took
12.6·R before results were streamed (bench/result_fetch.py)."""

import json

import numpy as np
import pytest

from stack import decode, reset_peak as _reset_peak, status_kb as _status_kb, tensor

MIB = 1 << 20




_BIG = {}


@pytest.fixture
def big_gemm(stack, A):
    """Runs the gemm once for the module's tests (A is per test)."""
    if "job" in _BIG:
        return _BIG["job"]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4096, 1)).astype(np.float32)
    b = rng.standard_normal((1, 4096)).astype(np.float32)
    j = A.submit("gemm", inputs={"a": tensor(a, b64=True), "b": tensor(b, b64=True)},
                 resources={"backend": "cpu"})
    A.wait(j["id"], timeout=120, states=("succeeded",))
    # CPU reference: with k = 1 every element is one float32 product.
    _BIG["job"] = j["id"], a @ b
    return _BIG["job"]


def _fetch(stack, A, job_id, encoding):
    """GET .../result; returns (body text, peak RSS growth in bytes)."""
    pid = stack.gateway.pid
    _reset_peak(pid)
    before = _status_kb(pid, "VmRSS")
    r = A.get(f"/v1/jobs/{job_id}/result?encoding={encoding}", timeout=120)
    assert r.status_code == 200, r.text[:300]
    assert r.headers.get("Content-Type") == "application/json"
    assert r.headers.get("Transfer-Encoding") == "chunked"
    peak = _status_kb(pid, "VmHWM")
    return r.text, (peak - before) * 1024


@pytest.mark.timeout(240)
def test_large_result_as_json_is_right_and_streamed(stack, A, big_gemm):
    job_id, want = big_gemm
    text, growth = _fetch(stack, A, job_id, "json")
    head = f'{{"id":"{job_id}","outputs":{{"c":{{"dtype":"float32","shape":[4096,4096],"data":['
    assert text.startswith(head), text[:200]
    end = text.index("]}}", len(head))
    tail = json.loads(text[end + 3:].removeprefix(',"info":').removesuffix("}"))
    assert tail.get("precision") == "fp32", text[end:end + 200]
    # Shortest round-trip text: parsed back and narrowed, every value is exact.
    got = np.array(text[len(head):end].split(","), dtype=np.float64).astype(np.float32)
    assert got.size == want.size
    assert np.array_equal(got.reshape(want.shape), want)
    raw = want.nbytes
    assert growth < 2.5 * raw + 64 * MIB, f"peak RSS grew by {growth / MIB:.0f} MiB"


@pytest.mark.timeout(240)
def test_large_result_as_b64_is_right_and_streamed(stack, A, big_gemm):
    job_id, want = big_gemm
    text, growth = _fetch(stack, A, job_id, "b64")
    body = json.loads(text)
    assert list(body) == ["id", "outputs", "info"]
    c = decode(body["outputs"]["c"])
    assert c.shape == (4096, 4096)
    assert np.array_equal(c, want)
    raw = want.nbytes
    assert growth < 2.5 * raw + 64 * MIB, f"peak RSS grew by {growth / MIB:.0f} MiB"


def test_non_finite_results_are_distinct_strings(A):
    # b64 inputs are taken as they are, NaN included; a*x overflows to ±inf.
    x = np.array([np.nan, 1e38, -1e38, 1.0], dtype=np.float32)
    y = np.array([0.0, 0.0, 0.0, 0.5], dtype=np.float32)
    j = A.run("saxpy", params={"a": 10.0},
              inputs={"x": tensor(x, b64=True), "y": tensor(y, b64=True)})
    r = A.result(j["id"], "json")
    assert r.status_code == 200
    assert r.json()["outputs"]["y"]["data"] == ["NaN", "Infinity", "-Infinity", 10.5]
    got = decode(A.outputs(j["id"], "b64")["y"])
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == -np.inf and got[3] == 10.5


def test_nan_from_finite_inputs_is_the_string_nan(A):
    # heat2d: the centre of a 3x3 grid of 3e38 sums its neighbours to inf and
    # subtracts 4u = inf: inf - inf is NaN.
    g = np.full((3, 3), 3e38, dtype=np.float32)
    j = A.run("heat2d", params={"alpha": 0.25, "steps": 1}, inputs={"grid": tensor(g)})
    grid = A.outputs(j["id"], "json")["grid"]["data"]
    assert grid[4] == "NaN"
    assert grid[:4] == [3e38] * 4  # boundary cells are fixed (float32 3e38 reads back as 3e38)


def test_outputs_over_the_limit_are_refused_at_submit(stack, A):
    # 16384 x 16384 float32 is 1 GiB, over the default 256 MiB; the inputs are 64 KiB each.
    a = np.ones((16384, 1), dtype=np.float32)
    b = np.ones((1, 16384), dtype=np.float32)
    before = stack.count_jobs()
    r = A.post_job({"kernel": "gemm", "inputs": {"a": tensor(a, b64=True), "b": tensor(b, b64=True)}})
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert err["code"] == "invalid_argument"
    assert err["field"] == "inputs.b"
    assert "max-output-mb" in err["message"]
    assert stack.count_jobs() == before
