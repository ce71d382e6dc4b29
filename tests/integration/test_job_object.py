"""The job object reads in one fixed order on every endpoint that returns
one — id, state, kernel, params, labels, the envelope, where and how it ran,
the timestamps, and error last — not in jsonb's order of key lengths."""

import uuid

import pytest

from stack import wait_until

ORDER = ["id", "state", "kernel", "params", "labels", "priority", "resources", "timeout_s",
         "max_attempts", "attempts", "cancel_requested", "node", "placement", "backend", "info", "progress", "usage",
         "created_at", "started_at", "finished_at", "error"]
PARKED = {"kernel": "sleep", "params": {"seconds": 0}, "priority": 0,
          "resources": {"backend": "cuda", "gpus": 16}}


def keys(job):
    """The members in the order the server wrote them, without those added
    by features that are not about order (a queued job's queue)."""
    return [k for k in job if k != "queue"]


def test_every_endpoint_writes_the_job_in_the_same_order(A):
    run = uuid.uuid4().hex
    r = A.post("/v1/jobs", json={**PARKED, "labels": {"run": run, "a": "1"}},
               headers={"Idempotency-Key": run})
    assert r.status_code == 202, r.text
    job = r.json()
    seen = {"submit 202": job}
    seen["GET"] = A.get(f"/v1/jobs/{job['id']}").json()
    seen["GET Prefer: wait"] = A.get(f"/v1/jobs/{job['id']}", headers={"Prefer": "wait=1"}).json()
    seen["list"] = A.get("/v1/jobs", params={"label": f"run:{run}"}).json()["jobs"][0]
    seen["replay"] = A.post("/v1/jobs", json={**PARKED, "labels": {"run": run, "a": "1"}},
                            headers={"Idempotency-Key": run}).json()
    seen["cancel"] = A.post(f"/v1/jobs/{job['id']}/cancel").json()
    for where, j in seen.items():
        assert keys(j) == ORDER, (where, list(j))
    assert list(seen["cancel"]["resources"]) == ["backend", "gpus", "nodes"]


def test_a_failed_job_ends_with_its_error(A):
    # a job that runs past its timeout fails with an error object
    r = A.post_job({"kernel": "sleep", "params": {"seconds": 5}, "timeout_s": 1,
                    "max_attempts": 1, "resources": {"backend": "cpu"}})
    assert r.status_code == 202, r.text
    done = A.wait(r.json()["id"], timeout=30)
    assert done["state"] == "failed" and done["error"]["code"], done
    assert keys(done) == ORDER and list(done["error"]) == ["code", "message"]
