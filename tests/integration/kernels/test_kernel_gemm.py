"""gemm's precision param and batched form, end to end on the CPU nodes:
every precision computes in fp32 there, and both the job (GET /v1/jobs/{id})
and its result carry info.precision == "fp32" with the precision asked for;
batched inputs [batch,m,k] @ [batch,k,n] match numpy; mixed ranks, batch
mismatches and unknown precisions are 422s naming the field."""

import numpy as np
import pytest

from stack import decode, tensor

rng = np.random.default_rng(20260303)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def check(got, want, atol=1e-4, rtol=1e-4):
    want = np.asarray(want, dtype=np.float32)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def result(client, job_id, encoding="json"):
    r = client.result(job_id, encoding)
    assert r.status_code == 200, r.text
    return r.json()


def test_catalog_shows_precision_and_batched_shapes(A):
    ks = {k["name"]: k for k in A.get("/v1/kernels").json()["kernels"]}
    g = ks["gemm"]
    params = {p["name"]: p for p in g["params"]}
    assert [p["name"] for p in g["params"]][:2] == ["alpha", "beta"], "alpha and beta keep their places"
    p = params["precision"]
    assert p["type"] == "enum" and p["choices"] == ["fp32", "tf32", "bf16"], p
    assert p["default"] == "fp32" and p["required"] is False
    shapes = {t["name"]: t["shape"] for t in g["inputs"]}
    assert shapes == {"a": "[m,k] or [batch,m,k]", "b": "[k,n] or [batch,k,n]", "c": "[m,n] or [batch,m,n]"}
    assert g["outputs"][0]["shape"] == "[m,n] or [batch,m,n]"


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_tensor_core_precision_on_a_cpu_node_runs_fp32_and_says_so(A, precision):
    a, b = rand(24, 40), rand(40, 12)
    j = A.run("gemm", {"precision": precision}, {"a": tensor(a), "b": tensor(b)})
    assert j["backend"] == "cpu"
    want_info = {"precision": "fp32", "requested_precision": precision}
    job = A.job(j["id"])
    assert {k: job["info"].get(k) for k in want_info} == want_info, job
    body = result(A, j["id"])
    assert {k: body["info"].get(k) for k in want_info} == want_info, body
    # fp32 arithmetic: as close to float64 numpy as the default precision is
    check(decode(body["outputs"]["c"]), a.astype(np.float64) @ b)


def test_default_precision_is_fp32_with_no_requested_precision(A):
    a, b = rand(5, 7), rand(7, 3)
    j = A.run("gemm", {}, {"a": tensor(a), "b": tensor(b)})
    for where in (A.job(j["id"]), result(A, j["id"])):
        assert where["info"].get("precision") == "fp32", where
        assert "requested_precision" not in where["info"], where
    j = A.run("gemm", {"precision": "fp32"}, {"a": tensor(a), "b": tensor(b)})
    assert A.job(j["id"])["info"] == {"precision": "fp32"}


@pytest.mark.parametrize("b64", [False, True], ids=["data", "b64"])
def test_batched_with_c_alpha_beta_matches_numpy(A, b64):
    a, b, c = rand(6, 9, 5), rand(6, 5, 7), rand(6, 9, 7)  # non-square: catches transposed layouts
    j = A.run("gemm", {"alpha": 0.5, "beta": -2.0, "precision": "bf16"},
              {"a": tensor(a, b64), "b": tensor(b, b64), "c": tensor(c, b64)})
    body = result(A, j["id"], "b64" if b64 else "json")
    out = body["outputs"]["c"]
    assert out["shape"] == [6, 9, 7]
    check(decode(out), 0.5 * np.matmul(a.astype(np.float64), b) - 2.0 * c)
    assert body["info"]["precision"] == "fp32"


def test_batched_without_c_and_batch_of_one_match_numpy(A):
    a, b = rand(40, 16, 24), rand(40, 24, 8)  # many small matrices
    j = A.run("gemm", {"alpha": 1.5}, {"a": tensor(a, True), "b": tensor(b, True)})
    check(decode(result(A, j["id"])["outputs"]["c"]), 1.5 * np.matmul(a.astype(np.float64), b))
    a, b = rand(1, 3, 4), rand(1, 4, 2)
    j = A.run("gemm", {}, {"a": tensor(a), "b": tensor(b)})
    check(decode(result(A, j["id"])["outputs"]["c"]), np.matmul(a.astype(np.float64), b))


def test_batched_empty_inner_dimension_gives_beta_c(A):
    c = rand(3, 2, 4)
    j = A.run("gemm", {"beta": 3.0}, {"a": tensor(np.zeros((3, 2, 0), np.float32)),
                                      "b": tensor(np.zeros((3, 0, 4), np.float32)), "c": tensor(c)})
    check(decode(result(A, j["id"])["outputs"]["c"]), 3.0 * c)


def ones(*shape):
    return tensor(np.ones(shape, np.float32))


@pytest.mark.parametrize("case", [
    ("a_rank_3_b_rank_2", {}, {"a": ones(2, 3, 4), "b": ones(4, 5)}, "inputs.b"),
    ("a_rank_2_b_rank_3", {}, {"a": ones(3, 4), "b": ones(2, 4, 5)}, "inputs.b"),
    ("c_rank_2_in_a_batch", {}, {"a": ones(2, 3, 4), "b": ones(2, 4, 5), "c": ones(3, 5)}, "inputs.c"),
    ("b_batch_differs", {}, {"a": ones(2, 3, 4), "b": ones(3, 4, 5)}, "inputs.b"),
    ("c_batch_differs", {}, {"a": ones(2, 3, 4), "b": ones(2, 4, 5), "c": ones(4, 3, 5)}, "inputs.c"),
    ("batched_inner_dims_differ", {}, {"a": ones(2, 3, 4), "b": ones(2, 6, 5)}, "inputs.b"),
    ("rank_4", {}, {"a": ones(1, 2, 3, 4), "b": ones(1, 2, 4, 5)}, "inputs.a"),
    ("unknown_precision", {"precision": "fp16"}, {"a": ones(3, 4), "b": ones(4, 5)}, "params.precision"),
], ids=lambda c: c[0])
def test_bad_gemm_is_422_naming_the_field(A, stack, case):
    _, params, inputs, field = case
    before = stack.count_jobs()
    r = A.post_job({"kernel": "gemm", "params": params, "inputs": inputs})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_argument" and err["field"] == field, err
    assert stack.count_jobs() == before
