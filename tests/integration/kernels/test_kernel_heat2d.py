"""heat2d end to end through gateway and CPU nodes, against numpy doing the
same float32 operations in the same order (each ufunc rounds apart, like
the kernel), so the grid must match bit for bit in both encodings; plus
the residual, the fixed boundary, a constant grid, the catalog entry and
the 422s that name the field."""

import numpy as np
import pytest

from stack import decode, tensor

rng = np.random.default_rng(20260303)


def rand_grid(h, w):
    return rng.uniform(-1, 1, (h, w)).astype(np.float32)


def numpy_heat(u, alpha, steps):
    """(grid, residual) after `steps` updates u + alpha*(((N + S) + (W + E)) - 4u)
    of the interior, in float32 with every operation rounded apart."""
    u = u.astype(np.float32).copy()
    a = np.float32(alpha)
    resid = np.float32(0)
    for _ in range(steps):
        c = u[1:-1, 1:-1]
        lap = ((u[:-2, 1:-1] + u[2:, 1:-1]) + (u[1:-1, :-2] + u[1:-1, 2:])) - np.float32(4) * c
        new = c + a * lap
        resid = np.abs(new - c).max()
        u[1:-1, 1:-1] = new
    return u, resid


def outputs_both(client, job_id):
    """{name: (from ?encoding=json, from ?encoding=b64)}"""
    js, bs = client.outputs(job_id, "json"), client.outputs(job_id, "b64")
    assert set(js) == set(bs) == {"grid", "residual"}, (js.keys(), bs.keys())
    for name in js:
        assert js[name]["dtype"] == bs[name]["dtype"] == "float32"
    return {n: (decode(js[n]), decode(bs[n])) for n in js}


@pytest.mark.parametrize("b64", [False, True], ids=["data", "b64"])
def test_heat2d_matches_numpy_bit_for_bit(A, b64):
    g = rand_grid(21, 34)  # interior rows and columns not a multiple of any block
    j = A.run("heat2d", {"alpha": 0.2, "steps": 13}, {"grid": tensor(g, b64)})
    out = outputs_both(A, j["id"])
    want, want_resid = numpy_heat(g, 0.2, 13)
    for got in out["grid"]:
        assert got.shape == (21, 34)
        np.testing.assert_array_equal(got, want)
    for got in out["residual"]:
        assert got.shape == (1,)
        assert got[0] == want_resid, f"residual {got[0]!r}, numpy {want_resid!r}"
    assert j["backend"] == "cpu"


def test_heat2d_boundary_is_fixed_and_residual_is_of_the_last_step(A):
    g = rand_grid(16, 19)
    prev = A.run("heat2d", {"alpha": 0.25, "steps": 39}, {"grid": tensor(g, True)})
    last = A.run("heat2d", {"alpha": 0.25, "steps": 40}, {"grid": tensor(g, True)})
    p, _ = outputs_both(A, prev["id"])["grid"]
    out = outputs_both(A, last["id"])
    u, _ = out["grid"]
    for edge in (np.s_[0, :], np.s_[-1, :], np.s_[:, 0], np.s_[:, -1]):
        np.testing.assert_array_equal(u[edge], g[edge])
    assert not np.array_equal(u[1:-1, 1:-1], g[1:-1, 1:-1])
    resid = out["residual"][1][0]
    assert resid == np.abs(u - p).max()
    assert 0 < resid < 0.5 * np.abs(g).max()


def test_heat2d_constant_grid_stays_constant_with_zero_residual(A):
    g = np.full((9, 12), 1.5, np.float32)
    j = A.run("heat2d", {"alpha": 0.25, "steps": 50}, {"grid": tensor(g)})
    out = outputs_both(A, j["id"])
    for got in out["grid"]:
        np.testing.assert_array_equal(got, g)
    assert out["residual"][0][0] == 0 and out["residual"][1][0] == 0


def test_heat2d_single_step_spike_by_default(A):
    """steps defaults to 1: a unit spike keeps 1 - 4a and gives a to each
    neighbour; the residual is 4a (exact for a = 1/8)."""
    g = np.zeros((5, 5), np.float32)
    g[2, 2] = 1
    j = A.run("heat2d", {"alpha": 0.125}, {"grid": tensor(g)})
    out = outputs_both(A, j["id"])
    want = np.zeros((5, 5), np.float32)
    want[2, 2] = 0.5
    want[1, 2] = want[3, 2] = want[2, 1] = want[2, 3] = 0.125
    np.testing.assert_array_equal(out["grid"][0], want)
    assert out["residual"][0][0] == 0.5


def test_heat2d_in_catalog_with_limits(A):
    r = A.get("/v1/kernels")
    assert r.status_code == 200, r.text
    k = {k["name"]: k for k in r.json()["kernels"]}["heat2d"]
    params = {p["name"]: p for p in k["params"]}
    assert params["alpha"]["maximum"] == 0.25 and params["alpha"]["required"]
    assert params["steps"]["minimum"] == 1 and params["steps"]["maximum"] == 100000
    assert params["steps"]["default"] == 1
    assert [i["name"] for i in k["inputs"]] == ["grid"] and k["inputs"][0]["max_elements"] > 0
    assert [o["name"] for o in k["outputs"]] == ["grid", "residual"]


@pytest.mark.parametrize("params,grid,field", [
    ({"alpha": 0.3}, np.zeros((4, 4)), "params.alpha"),
    ({"alpha": 0}, np.zeros((4, 4)), "params.alpha"),
    ({}, np.zeros((4, 4)), "params.alpha"),
    ({"alpha": 0.1, "steps": 0}, np.zeros((4, 4)), "params.steps"),
    ({"alpha": 0.1, "steps": 100001}, np.zeros((4, 4)), "params.steps"),
    ({"alpha": 0.1}, np.zeros((2, 5)), "inputs.grid"),
    ({"alpha": 0.1}, np.zeros(9), "inputs.grid"),
], ids=["alpha_over_0.25", "alpha_zero", "alpha_missing", "steps_zero", "steps_over_max",
        "grid_2_rows", "grid_rank_1"])
def test_heat2d_bad_request_is_422_naming_the_field(A, stack, params, grid, field):
    before = stack.count_jobs()
    r = A.post_job({"kernel": "heat2d", "params": params, "inputs": {"grid": tensor(grid)}})
    assert r.status_code in ({400, 422} if field == "params.alpha" and not params else {422}), r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_argument", r.text
    assert err["field"] == field, r.text
    assert field in err["message"], r.text
    assert stack.count_jobs() == before


def test_heat2d_int32_grid_is_422(A):
    r = A.post_job({"kernel": "heat2d", "params": {"alpha": 0.1},
                    "inputs": {"grid": tensor(np.zeros((4, 4), np.int32))}})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "inputs.grid"
