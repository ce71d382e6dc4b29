"""A node that restarts counts its ended runs (the lease poll's seq) from 0
again. What its previous process last reported (a high seq, no free slot)
must not make the gateway hand the new process nothing (gateway/sched/lease.c)."""

import requests


def test_a_restarted_node_gets_runs_despite_its_old_report(A, stack):
    reg = {"name": "node-restarted", "url": "http://127.0.0.1:9", "backend": "cuda", "slots": 1,
           "kernels": ["sleep"], "gpus": [{"name": "Fake GPU", "memory_bytes": 1 << 30}]}
    tok = {"Authorization": f"Bearer {stack.cluster_token}"}
    base = stack.cluster_base
    r = requests.post(f"{base}/v1/cluster/nodes/register", headers=tok, json=reg, timeout=5)
    assert r.status_code == 200, r.text
    node, cred = r.json()["id"], r.json()["credential"]
    h = {"Authorization": f"Bearer {cred}"}
    job = None
    try:
        # the old process: many runs ended, no room
        r = requests.post(f"{base}/v1/cluster/nodes/{node}/results", headers=h, timeout=5,
                          json={"results": [], "free": 0, "seq": 1000})
        assert r.status_code == 200, r.text
        # the new process registers again (same name, its credential: same id) and polls from seq 0
        r = requests.post(f"{base}/v1/cluster/nodes/register", headers=tok,
                          json=dict(reg, credential=cred), timeout=5)
        assert r.status_code == 200 and r.json()["id"] == node, r.text
        job = A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})
        r = requests.post(f"{base}/v1/cluster/nodes/{node}/lease", headers=h, timeout=15,
                          json={"max": 1, "wait_ms": 5000, "seq": 0})
        assert r.status_code == 200, r.text
        runs = r.json()["runs"]
        assert [x["job_id"] for x in runs] == [job["id"]], r.json()
    finally:
        if job:
            A.cancel(job["id"])
        requests.delete(f"{base}/v1/cluster/nodes/{node}", headers=h, timeout=5)
