"""Multi-node jobs on real CPU nodes: four kowloon-compute processes on this
machine whose ranks talk over loopback TCP (Gloo), placed by the real
scheduler, meeting through the gateway's rendezvous. allreduce over 2 and
3 nodes is exact; train_mlp on 2 nodes (blob inputs, each node keeping its
rows) gives the single-node weights; kill -9 of a node mid-job ends the
attempt on every node and the job reruns once as a whole elsewhere."""

import os
import time

import numpy as np
import pytest
import requests

import stack as stk
from stack import decode, wait_until, started

NODES = ("mn-a", "mn-b", "mn-c", "mn-d")
OCTET = {"Content-Type": "application/octet-stream"}


class HttpBlobStack(stk.Stack):
    """Nodes that move every byte over HTTP (--blob-dir none), so that a
    node's part of a job fetches only its rows of a blob, by Range."""

    def start_node(self, name, **kw):
        kw.setdefault("shared_blobs", False)
        return super().start_node(name, **kw)


@pytest.fixture(scope="module")
def cluster():
    yield from started(HttpBlobStack(node_names=NODES))


@pytest.fixture
def C(cluster):
    return cluster.client("A")


def computing(cluster, job_id, attempt=1):
    """The job when every part of attempt runs its kernel past the
    communicator's set-up (a second in: on loopback it takes milliseconds;
    Gloo's connect cannot be interrupted, so a peer lost or a cancel during
    it is noticed at the timeout, --dist-timeout-s); else None."""
    hdr = {"Authorization": f"Bearer {cluster.cluster_token}"}
    job = requests.get(f"{cluster.base}/v1/jobs/{job_id}",
                       headers={"Authorization": f"Bearer {cluster.keys['A']}"}, timeout=5).json()
    if job["state"] != "running" or job["attempts"] != attempt or not job["placement"]:
        return None
    for p in job["placement"]:
        run = requests.get(f"{cluster.node_url(p['node'])}/v1/runs/{job_id}.{attempt}", headers=hdr,
                           timeout=2)
        if run.status_code != 200 or run.json().get("phase") != "compute" or \
                run.json().get("elapsed_ms", 0) < 1000:
            return None
    return job


def node_log(cluster, name):
    with open(os.path.join(cluster.logs, name + ".log"), errors="replace") as f:
        return f.read()


def scalars(client, job_id):
    out = client.outputs(job_id, "json")
    return {k: decode(v)[0].item() for k, v in out.items()}


@pytest.mark.parametrize("nodes", [2, 3])
def test_allreduce_across_nodes_is_exact_and_reports_bandwidth(C, nodes):
    count = 10007
    j = C.run("allreduce", {"count": count, "dtype": "float32", "op": "sum", "iters": 5},
              resources={"backend": "cpu", "gpus": 2, "nodes": nodes}, timeout=120)
    f = scalars(C, j["id"])
    assert f["wrong"] == 0, f
    world = 2 * nodes
    assert f["time_us"] > 0 and f["algbw_gbps"] > 0, f
    assert f["busbw_gbps"] == pytest.approx(f["algbw_gbps"] * 2 * (world - 1) / world, rel=1e-9)
    pl = j["placement"]
    assert [p["node_rank"] for p in pl] == list(range(nodes))
    assert [p["ranks"] for p in pl] == [[2 * g, 2 * g + 1] for g in range(nodes)]
    assert len({p["node"] for p in pl}) == nodes and all(p["gpus"] == [] for p in pl)
    assert pl[0]["node"] == j["node"] and j["attempts"] == 1
    assert j["resources"]["nodes"] == nodes
    info = C.result(j["id"]).json().get("info", {})
    print(f"allreduce {nodes} nodes x 2 ranks: rendezvous_ms={info.get('rendezvous_ms')} "
          f"busbw_gbps={f['busbw_gbps']:.3f}")


def blobs_of(client, arrs):
    ids = {}
    for name, a in arrs.items():
        r = client.post("/v1/blobs", data=a.tobytes(), headers=OCTET)
        assert r.status_code in (200, 201), r.text
        ids[name] = {"dtype": {np.float32: "float32", np.int32: "int32"}[a.dtype.type],
                     "shape": list(a.shape), "blob": r.json()["id"]}
    return ids


def test_train_mlp_on_two_nodes_matches_one_node_of_the_same_world(C, cluster):
    rng = np.random.default_rng(7)
    n, d, classes = 403, 6, 3
    centers = rng.normal(0, 4, (classes, d))
    y = rng.integers(0, classes, n).astype(np.int32)
    x = (centers[y] + rng.normal(0, 1, (n, d))).astype(np.float32)
    params = {"hidden": 16, "classes": classes, "epochs": 5, "batch_size": 40, "lr": 0.05,
              "momentum": 0.9, "seed": 11}
    inputs = blobs_of(C, {"x": x, "y": y})
    one = C.run("train_mlp", params, inputs, resources={"backend": "cpu", "gpus": 4}, timeout=120)
    two = C.run("train_mlp", params, inputs, resources={"backend": "cpu", "gpus": 2, "nodes": 2},
                timeout=120)
    a, b = C.outputs(one["id"]), C.outputs(two["id"])
    assert set(a) == set(b) == {"w1", "b1", "w2", "b2", "loss", "accuracy"}
    for k in a:
        np.testing.assert_allclose(decode(b[k]), decode(a[k]), rtol=1e-4, atol=1e-5, err_msg=k)
    assert decode(b["accuracy"])[0] == decode(a["accuracy"])[0] > 0.9
    # each node fetched only its rows, by Range: node g holds [(2g)*n/4, (2g+2)*n/4)
    for p in two["placement"]:
        g = p["node_rank"]
        lo, hi = (2 * g) * n // 4, (2 * g + 2) * n // 4
        log = node_log(cluster, p["node"])
        assert f"dist run={two['id']}.1 node_rank={g} nodes=2 shard_rows={lo}..{hi}" in log
        for name, row in (("x", d * 4), ("y", 4)):
            line = (f"input {name}: rows {lo}..{hi} of {n} fetched by range "
                    f"({(hi - lo) * row} of {n * row} bytes)")
            assert line in log, (p, line)


# its own waits add up past the suite's default limit (60 s): the second
# attempt runs the whole all-reduce again (minutes under the sanitizers)
@pytest.mark.timeout(300)
def test_kill9_of_a_node_ends_the_attempt_everywhere_and_the_job_reruns_once(C, cluster):
    hdr = {"Authorization": f"Bearer {cluster.cluster_token}"}
    # long enough to be caught mid-run: 3 nodes x 2 ranks, 1 Mi floats, many iterations
    r = C.post_job({"kernel": "allreduce", "params": {"count": 1 << 20, "dtype": "float32",
                                                       "op": "sum", "iters": 1000},
                    "resources": {"backend": "cpu", "gpus": 2, "nodes": 3}, "max_attempts": 3})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]

    job = wait_until(lambda: computing(cluster, job_id), timeout=60, what="every part computing")
    victim = job["placement"][1]["node"]
    others = [p["node"] for p in job["placement"] if p["node"] != victim]
    t0 = time.monotonic()
    cluster.kill_node(victim)

    # every other rank stops within seconds: its run ends, not succeeded
    def ended(name):
        run = requests.get(f"{cluster.node_url(name)}/v1/runs/{job_id}.1", headers=hdr, timeout=2)
        return run.status_code == 404 or run.json()["state"] in ("failed", "cancelled")
    for name in others:
        wait_until(lambda: ended(name), timeout=40, what=f"{name}'s part to end")
    stopped_s = time.monotonic() - t0

    # no rank of the old attempt can meet again (a node of it, with its own credential)
    r = cluster.node_client(others[0]).get(f"/v1/cluster/rendezvous/{job_id}/1/k")
    assert r.status_code == 409, r.text

    done = C.wait(job_id, timeout=180)
    assert done["state"] == "succeeded" and done["attempts"] == 2, done
    assert victim not in {p["node"] for p in done["placement"]}, done["placement"]
    assert scalars(C, job_id)["wrong"] == 0
    print(f"other ranks stopped {stopped_s:.1f} s after the kill")
    cluster.start_node(victim)
    cluster.wait_nodes_up([victim], timeout=30)


def test_cancel_stops_every_node_of_a_running_gang(C, cluster):
    hdr = {"Authorization": f"Bearer {cluster.cluster_token}"}
    r = C.post_job({"kernel": "allreduce", "params": {"count": 1 << 20, "dtype": "float32",
                                                       "op": "sum", "iters": 1000},
                    "resources": {"backend": "cpu", "gpus": 2, "nodes": 2}})
    job_id = r.json()["id"]
    job = wait_until(lambda: computing(cluster, job_id), timeout=60, what="every part computing")
    assert C.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert C.wait(job_id, timeout=30)["state"] == "cancelled"
    for p in job["placement"]:
        def stopped():
            run = requests.get(f"{cluster.node_url(p['node'])}/v1/runs/{job_id}.1", headers=hdr,
                               timeout=2)
            return run.status_code == 404 or run.json()["state"] != "running"
        wait_until(stopped, timeout=20, what=f"{p['node']}'s part to stop")
