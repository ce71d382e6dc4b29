"""montecarlo_option end to end through gateway and CPU nodes: European
prices within 3 standard errors of Black–Scholes, put-call parity, an Asian
call below the European one, the same seed giving the same bits, the run's
info, the catalog entry with its limits, and 422s that name the field and
leave no job behind."""

import math

import pytest

from stack import decode

S0, K, R, SIGMA, T = 100.0, 100.0, 0.05, 0.2, 1.0
ATM = {"s0": S0, "strike": K, "rate": R, "sigma": SIGMA, "maturity": T}


def black_scholes(kind, s0, k, r, sigma, t):
    n = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
    d1 = (math.log(s0 / k) + (r + sigma * sigma / 2) * t) / (sigma * math.sqrt(t))
    d2 = d1 - sigma * math.sqrt(t)
    if kind == "call":
        return s0 * n(d1) - k * math.exp(-r * t) * n(d2)
    return k * math.exp(-r * t) * n(-d2) - s0 * n(-d1)


def price(client, **params):
    """(price, std_error, job) of one run, the outputs read in both encodings."""
    j = client.run("montecarlo_option", dict(ATM, **params))
    got = {}
    for enc in ("json", "b64"):
        outs = client.outputs(j["id"], enc)
        assert set(outs) == {"price", "std_error"}
        for name, t in outs.items():
            assert t["dtype"] == "float32" and t["shape"] == [1], t
        got[enc] = (float(decode(outs["price"])[0]), float(decode(outs["std_error"])[0]))
    assert got["json"] == got["b64"]
    return got["json"][0], got["json"][1], j


@pytest.mark.parametrize("kind", ["call", "put"])
def test_european_within_3_std_errors_of_black_scholes(A, kind):
    p, se, _ = price(A, type=kind, paths=200000, seed=5)
    bs = black_scholes(kind, S0, K, R, SIGMA, T)
    assert 0 < se < 0.02, se
    assert abs(p - bs) <= 3 * se, f"{kind}: {p} vs Black-Scholes {bs} (std_error {se})"


def test_european_out_of_the_money_put_over_several_steps(A):
    params = {"s0": 50.0, "strike": 40.0, "rate": -0.01, "sigma": 0.35, "maturity": 2.5}
    j = A.run("montecarlo_option", dict(params, type="put", paths=100000, steps=7, seed=3))
    outs = A.outputs(j["id"])
    p, se = float(decode(outs["price"])[0]), float(decode(outs["std_error"])[0])
    bs = black_scholes("put", 50.0, 40.0, -0.01, 0.35, 2.5)
    assert abs(p - bs) <= 3 * se, f"{p} vs {bs} ± {se}"


def test_put_call_parity(A):
    c, sc, _ = price(A, type="call", paths=200000, seed=9)
    p, sp, _ = price(A, type="put", paths=200000, seed=9)
    assert abs((c - p) - (S0 - K * math.exp(-R * T))) <= 3 * math.hypot(sc, sp)


def test_asian_call_is_below_european_call(A):
    e, se_e, _ = price(A, paths=50000, seed=2)
    a, se_a, _ = price(A, style="asian", steps=50, paths=20000, seed=2)
    assert a + 3 * se_a < e - 3 * se_e, f"asian {a} ± {se_a}, european {e} ± {se_e}"
    assert 5.0 < a < 6.5  # ~5.8 for these parameters with 50 dates


def test_same_seed_same_bits_other_seed_differs(A):
    one = price(A, style="asian", steps=12, paths=5000, seed=42)
    two = price(A, style="asian", steps=12, paths=5000, seed=42)
    other = price(A, style="asian", steps=12, paths=5000, seed=43)
    assert one[:2] == two[:2]
    assert other[0] != one[0] and other[1] != one[1]


def test_defaults_and_info(A):
    """Only the option is required: one million antithetic pairs, one step."""
    j = A.run("montecarlo_option", dict(ATM))
    outs = A.outputs(j["id"])
    p, se = float(decode(outs["price"])[0]), float(decode(outs["std_error"])[0])
    assert abs(p - black_scholes("call", S0, K, R, SIGMA, T)) <= 3 * se
    r = A.result(j["id"])
    assert r.status_code == 200
    assert r.json()["info"].get("simulated_paths", "").startswith("2000000 "), r.json()


def test_montecarlo_in_catalog_with_limits(A):
    r = A.get("/v1/kernels")
    assert r.status_code == 200, r.text
    k = {k["name"]: k for k in r.json()["kernels"]}["montecarlo_option"]
    params = {p["name"]: p for p in k["params"]}
    assert list(params) == ["type", "style", "s0", "strike", "rate", "sigma", "maturity", "paths", "steps",
                            "seed"]
    assert params["paths"]["maximum"] == 1e9 and params["paths"]["minimum"] == 2
    assert params["steps"]["maximum"] == 10000 and params["steps"]["default"] == 1
    assert params["sigma"]["minimum"] == 0 and params["sigma"]["required"]
    assert k["inputs"] == []
    assert [o["name"] for o in k["outputs"]] == ["price", "std_error"]


@pytest.mark.parametrize("params,field", [
    ({"paths": 0}, "params.paths"),
    ({"paths": 1}, "params.paths"),
    ({"paths": 1e9 + 1}, "params.paths"),
    ({"paths": 1e9, "steps": 1001}, "params.paths"),  # paths * steps > 1e12
    ({"sigma": -0.1}, "params.sigma"),
    ({"sigma": 2.0, "maturity": 30.0}, "params.sigma"),  # float32 paths would overflow
    ({"steps": 0}, "params.steps"),
    ({"steps": 10001}, "params.steps"),
    ({"s0": 0.0}, "params.s0"),
    ({"maturity": 0.0}, "params.maturity"),
    ({"seed": -1}, "params.seed"),
    ({"type": "binary"}, "params.type"),
    ({"style": "bermudan"}, "params.style"),
], ids=["paths_zero", "paths_one", "paths_over_1e9", "path_steps_over_1e12", "sigma_negative",
        "log_move_too_wide", "steps_zero", "steps_over_10000", "s0_zero", "maturity_zero", "seed_negative",
        "type_unknown", "style_unknown"])
def test_montecarlo_bad_request_is_422_naming_the_field(A, stack, params, field):
    before = stack.count_jobs()
    r = A.post_job({"kernel": "montecarlo_option", "params": dict(ATM, **params)})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_argument", r.text
    assert err["field"] == field, r.text
    assert field in err["message"], r.text
    assert stack.count_jobs() == before


def test_montecarlo_missing_sigma_names_it(A):
    params = dict(ATM)
    del params["sigma"]
    r = A.post_job({"kernel": "montecarlo_option", "params": params})
    assert r.status_code in (400, 422), r.text
    assert r.json()["error"]["field"] == "params.sigma"
