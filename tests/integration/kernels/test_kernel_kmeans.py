"""kmeans end to end through gateway and CPU nodes: recovery of separable
clusters from the seeded k-means++ start, a run from `init` against a numpy
Lloyd loop written from the contract, the stopping rules, determinism for a
seed, the catalog entry, and 422s that name the field."""

import numpy as np
import pytest

from stack import decode, tensor

rng = np.random.default_rng(20261203)


def blobs(n, d, k, spread=10.0, sigma=0.05):
    centers = rng.uniform(-spread, spread, (k, d)).astype(np.float32)
    pts = centers[np.arange(n) % k] + rng.normal(0, sigma, (n, d)).astype(np.float32)
    return pts.astype(np.float32), centers


def outputs(client, job_id, encoding="b64"):
    out = {n: decode(t) for n, t in client.outputs(job_id, encoding).items()}
    assert set(out) == {"centroids", "labels", "inertia", "iterations_run"}
    assert out["centroids"].dtype == np.float32
    assert out["labels"].dtype == np.int32 and out["iterations_run"].dtype == np.int32
    assert out["inertia"].shape == (1,) and out["iterations_run"].shape == (1,)
    return out


def sqdist(x, c):
    """float32 squared distances (n, k), summed over d in order as the kernel does."""
    diff = x[:, None, :] - c[None, :, :]
    sq = diff * diff
    acc = np.zeros(sq.shape[:2], np.float32)
    for q in range(x.shape[1]):
        acc = acc + sq[:, :, q]
    return acc


def lloyd(x, init, iterations, tol):
    """The contract in numpy: assign (ties to the lowest index), update with
    double sums (an empty cluster stays), stop on unchanged labels, on a
    shift <= tol, or after `iterations`; labels are for the final centroids."""
    c = init.copy()
    labels = np.full(len(x), -1)
    it = 0
    while it < iterations:
        dist = sqdist(x, c)
        new = dist.argmin(axis=1)  # argmin takes the first of equal values
        it += 1
        if np.array_equal(new, labels):
            return c, labels, float(dist.min(axis=1).astype(np.float64).sum()), it
        labels = new
        old = c.copy()
        for j in range(len(c)):
            members = x[labels == j].astype(np.float64)
            if len(members):
                c[j] = (members.sum(axis=0) / len(members)).astype(np.float32)
        if np.sqrt(((c.astype(np.float64) - old) ** 2).sum(axis=1).max()) <= tol:
            break
    dist = sqdist(x, c)
    labels = dist.argmin(axis=1)
    return c, labels, float(dist.min(axis=1).astype(np.float64).sum()), it


def match(centroids, centers):
    """For each true center, the distance to its nearest centroid; and that
    the matching is one to one."""
    d = np.sqrt(((centroids[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2))
    assert len(set(d.argmin(axis=0))) == len(centers), d
    return d.min(axis=0)


@pytest.mark.parametrize("b64", [False, True], ids=["data", "b64"])
def test_kmeans_recovers_separable_clusters(A, b64):
    x, centers = blobs(400, 2, 4)
    j = A.run("kmeans", {"k": 4, "seed": 3}, {"points": tensor(x, b64)})
    out = outputs(A, j["id"], "b64" if b64 else "json")
    c, labels = out["centroids"], out["labels"]
    assert c.shape == (4, 2) and labels.shape == (400,)
    assert match(c, centers).max() < 0.05
    # each blob is one cluster (point i is in blob i % 4), and the four differ
    assert all((labels[b::4] == labels[b]).all() for b in range(4))
    assert len(set(labels[:4].tolist())) == 4
    # inertia is the sum of squared distances to the returned centroids
    want = ((x.astype(np.float64) - c[labels]) ** 2).sum()
    assert out["inertia"][0] == pytest.approx(want, rel=1e-4)
    assert want < 400 * 2 * 0.05 ** 2 * 1.5
    assert 1 <= out["iterations_run"][0] <= 100
    r = A.result(j["id"]).json()
    assert r["info"].get("init") == "k-means++ (seed 3)", r["info"]


def test_kmeans_from_init_matches_numpy_lloyd(A):
    x = rng.uniform(-1, 1, (300, 3)).astype(np.float32)
    init = x[:5].copy()
    j = A.run("kmeans", {"k": 5, "iterations": 4, "tol": 0},
              {"points": tensor(x, True), "init": tensor(init, True)})
    out = outputs(A, j["id"])
    c, labels, inertia, it = lloyd(x, init, 4, 0.0)
    assert out["iterations_run"][0] == it
    np.testing.assert_allclose(out["centroids"], c, rtol=1e-6, atol=1e-7)
    assert (out["labels"] == labels).all()
    assert out["inertia"][0] == pytest.approx(inertia, rel=1e-6)
    assert A.result(j["id"]).json()["info"].get("init") == "inputs.init"


def test_kmeans_tol_stops_early_and_iterations_cap(A):
    x, _ = blobs(200, 2, 3)
    j = A.run("kmeans", {"k": 3, "tol": 1e9, "seed": 1}, {"points": tensor(x, True)})
    assert outputs(A, j["id"])["iterations_run"][0] == 1
    assert A.result(j["id"]).json()["info"].get("stopped") == "tol"

    u = rng.uniform(-1, 1, (600, 2)).astype(np.float32)
    j = A.run("kmeans", {"k": 30, "iterations": 2, "tol": 0}, {"points": tensor(u, True)})
    assert outputs(A, j["id"])["iterations_run"][0] == 2
    assert A.result(j["id"]).json()["info"].get("stopped") == "iterations"


def test_kmeans_same_seed_gives_the_same_result(A):
    u = rng.uniform(-1, 1, (500, 3)).astype(np.float32)
    runs = [outputs(A, A.run("kmeans", {"k": 8, "iterations": 3, "seed": s},
                             {"points": tensor(u, True)})["id"]) for s in (11, 11, 12)]
    for name in runs[0]:
        assert np.array_equal(runs[0][name], runs[1][name]), name
    assert not np.array_equal(runs[0]["centroids"], runs[2]["centroids"])


def test_kmeans_catalog_entry_shows_params_and_limits(A):
    ks = {k["name"]: k for k in A.get("/v1/kernels").json()["kernels"]}
    km = ks["kmeans"]
    p = {q["name"]: q for q in km["params"]}
    assert p["k"]["required"] is True and p["k"]["minimum"] == 1 and p["k"]["maximum"] == 1024
    assert p["iterations"]["default"] == 100 and p["tol"]["minimum"] == 0
    ins = {t["name"]: t for t in km["inputs"]}
    assert ins["init"]["optional"] is True and ins["points"]["shape"] == "[n,d]"
    assert ins["points"]["max_elements"] > 0
    outs = {t["name"]: t["dtype"] for t in km["outputs"]}
    assert outs == {"centroids": "float32", "labels": "int32", "inertia": "float32",
                    "iterations_run": "int32"}


POINTS = np.arange(12, dtype=np.float32).reshape(6, 2)


@pytest.mark.parametrize("params,inputs,field", [
    ({"k": 7}, {"points": tensor(POINTS)}, "params.k"),  # k > n
    ({"k": 0}, {"points": tensor(POINTS)}, "params.k"),
    ({"k": 2, "tol": -1}, {"points": tensor(POINTS)}, "params.tol"),
    ({"k": 2}, {"points": tensor(POINTS), "init": tensor(np.zeros((3, 2), np.float32))}, "inputs.init"),
    ({"k": 2}, {"points": tensor(POINTS), "init": tensor(np.zeros((2, 3), np.float32))}, "inputs.init"),
    ({"k": 2}, {"points": tensor(np.arange(6, dtype=np.float32))}, "inputs.points"),
], ids=["k_more_than_n", "k_zero", "tol_negative", "init_rows", "init_d_mismatch", "points_rank_1"])
def test_kmeans_rejects_bad_request_with_422_naming_the_field(A, stack, params, inputs, field):
    before = stack.count_jobs()
    r = A.post_job({"kernel": "kmeans", "params": params, "inputs": inputs})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_argument" and err["field"] == field, err
    assert field in err["message"], err
    assert stack.count_jobs() == before
