"""The job object reads in one fixed order on every endpoint that returns
one — id, state, kernel, params, labels, the envelope, where and how it ran,
the timestamps, and error last — not in jsonb's order of key lengths."""

import json
import re
import uuid

import pytest

from stack import wait_until

ORDER = ["id", "state", "kind", "kernel", "task", "params", "labels", "priority", "resources",
         "timeout_s", "max_attempts", "attempts", "preemptions", "cancel_requested", "node", "placement", "backend",
         "info", "progress", "usage", "exit_code", "logs", "created_at", "started_at",
         "finished_at", "error"]
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


def long_reals(text):
    """The numbers of a JSON text written with more significant digits than
    the shortest form that reads back as the same double: what a double
    printed with 17 digits looks like (0.006 came out as
    0.0060000000000000001). Some doubles need 16 or 17 digits even at their
    shortest (a queue_s of 132.1243950384669): those are fine."""
    def significant(t):
        return len(t.lstrip("-").split("e")[0].split("E")[0].replace(".", "").lstrip("0").rstrip("0"))
    out = []
    for m in re.finditer(r'(?<![\w."])-?\d+\.\d+(?:[eE][-+]?\d+)?', text):
        if significant(m.group()) >= 16 and significant(m.group()) > significant(repr(float(m.group()))):
            out.append(m.group())
    return out


def test_job_objects_write_numbers_in_their_shortest_exact_form(A, stack):
    """usage's queue_s, cpu_s and cost, and gpu_memory_gb, read back as
    the very numbers PostgreSQL holds, in their shortest form: on GET, the
    list, Prefer: wait and the job's event stream alike."""
    parked = A.post_job({**PARKED, "resources": {"backend": "cuda", "gpus": 16,
                                                 "gpu_memory_gb": 0.1}})
    assert parked.status_code == 202, parked.text
    for t in (parked.text, A.get(f"/v1/jobs/{parked.json()['id']}").text):
        assert long_reals(t) == [] and '"gpu_memory_gb":0.1' in t, t
    A.cancel(parked.json()["id"])
    r = A.post_job({"kernel": "saxpy", "params": {"a": 1.0},
                    "inputs": {"x": {"dtype": "float32", "shape": [4], "data": [1, 2, 3, 4]},
                               "y": {"dtype": "float32", "shape": [4], "data": [1, 1, 1, 1]}}})
    assert r.status_code == 202, r.text
    job = A.wait(r.json()["id"])
    texts = [A.get(f"/v1/jobs/{job['id']}").text,
             A.get(f"/v1/jobs/{job['id']}", headers={"Prefer": "wait=1"}).text,
             A.get("/v1/jobs", params={"limit": 5}).text]
    usage = json.loads(texts[0])["usage"]
    assert usage and "queue_s" in usage and "cpu_s" in usage, usage
    pg = stack.psql(f"SELECT (usage->>'queue_s')::text, (usage->>'cpu_s')::text"
                    f" FROM jobs WHERE id = '{job['id']}'")[0]
    assert usage["queue_s"] == float(pg[0]) and usage["cpu_s"] == float(pg[1]), (usage, pg)
    for t in texts:
        assert long_reals(t) == [], t[:400]
    # the unit fixes the form: 0.006, never 0.0060000000000000001
    assert long_reals('{"queue_s":0.0060000000000000001}') == ["0.0060000000000000001"]
    assert long_reals('{"queue_s":132.1243950384669}') == []  # shortest already
