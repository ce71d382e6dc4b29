"""Health, readiness, the OpenAPI document, the kernel catalog and the node
list."""

import pytest

from stack import ts

KERNELS = {"saxpy", "reduce", "gemm", "sleep", "montecarlo_option", "heat2d", "kmeans", "allreduce",
           "train_mlp"}


def test_healthz_is_200_without_auth(anon):
    r = anon.get("/healthz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok"}


def test_readyz_is_200_with_postgres_and_redis_ok(anon):
    r = anon.get("/readyz")
    assert r.status_code == 200, r.text
    body = r.json()
    assert {k: body.get(k) for k in ("status", "postgres", "redis")} == \
        {"status": "ready", "postgres": "ok", "redis": "ok"}, body


def test_openapi_yaml_is_served_without_auth(anon):
    r = anon.get("/openapi.yaml")
    assert r.status_code == 200, r.text[:200]
    assert "yaml" in r.headers.get("Content-Type", ""), r.headers.get("Content-Type")
    assert r.text.lstrip().startswith("openapi:"), r.text[:100]
    for path in ("/v1/jobs", "/v1/kernels", "/v1/nodes"):
        assert path in r.text, f"{path} missing from openapi.yaml"


def test_kernels_lists_every_kernel_with_cpu_backend(A):
    r = A.get("/v1/kernels")
    assert r.status_code == 200, r.text
    ks = {k["name"]: k for k in r.json()["kernels"]}
    assert set(ks) == KERNELS
    for name, k in ks.items():
        for key in ("description", "params", "inputs", "outputs", "backends"):
            assert key in k, f"{name} lacks {key}"
        assert k["backends"] == ["cpu"], f"{name}: {k['backends']} (no GPU node here)"
        for p in k["params"]:
            assert {"name", "type", "required"} <= set(p), p
            assert p["type"] in ("number", "integer", "enum"), p
        for t in k["inputs"] + k["outputs"]:
            assert {"name", "dtype", "shape"} <= set(t), t


def test_kernel_catalog_matches_contract(A):
    ks = {k["name"]: k for k in A.get("/v1/kernels").json()["kernels"]}

    def params(n):
        return {p["name"]: p for p in ks[n]["params"]}

    def names(n, what):
        return {t["name"]: t for t in ks[n][what]}

    assert params("saxpy")["a"]["required"] is True
    assert set(names("saxpy", "inputs")) == {"x", "y"} and set(names("saxpy", "outputs")) == {"y"}
    op = params("reduce")["op"]
    assert op["type"] == "enum" and set(op["choices"]) == {"sum", "min", "max", "mean"}
    assert op["default"] == "sum" and op["required"] is False
    assert set(names("reduce", "outputs")) == {"value"}
    g = params("gemm")
    assert g["alpha"]["default"] == 1 and g["beta"]["default"] == 0
    gi = names("gemm", "inputs")
    assert set(gi) == {"a", "b", "c"} and gi["c"]["optional"] is True and not gi["a"].get("optional")
    s = params("sleep")["seconds"]
    assert s["required"] is True and s["minimum"] == 0 and s["maximum"] == 3600
    assert set(names("sleep", "inputs")) == set() and set(names("sleep", "outputs")) == {"slept"}


def test_nodes_lists_two_cpu_nodes_up_with_reason(admin, stack):
    nodes = {n["name"]: n for n in admin.nodes()}
    for name in stack.node_names:
        n = nodes.get(name)
        assert n is not None, f"{name} not listed: {list(nodes)}"
        assert n["state"] == "up"
        assert n["backend"] == "cpu"
        assert isinstance(n["backend_reason"], str) and n["backend_reason"], n
        assert n["slots"] == 1
        assert n["gpus"] == []
        assert n["url"] == stack.node_url(name), n["url"]
        assert isinstance(n["id"], str) and n["id"]
        assert isinstance(n["running"], int)
        ts(n["last_heartbeat"])
    assert len({n["id"] for n in nodes.values()}) == len(nodes)


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/kernels"])
def test_errors_and_listings_are_json(A, path):
    r = A.get(path)
    assert r.headers.get("Content-Type", "").startswith("application/json")
