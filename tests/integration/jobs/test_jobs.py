"""The job object: fields, timestamps, Location header, defaults, and the
result endpoint before a job has succeeded."""

import re
from datetime import datetime

import numpy as np
import requests

from stack import decode, tensor, ts, wait_until

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_submit_returns_202_with_location_and_queued_job(A):
    body = {"kernel": "saxpy", "params": {"a": 1.0},
            "inputs": {"x": tensor(np.ones(4)), "y": tensor(np.ones(4))},
            "labels": {"team": "search", "run.id": "r-1"}}
    r = A.post_job(body)
    assert r.status_code == 202, r.text
    j = r.json()
    assert UUID.match(j["id"]), j["id"]
    loc = r.headers.get("Location")
    assert loc is not None, "202 without Location header"
    assert loc == f"/v1/jobs/{j['id']}" or loc.endswith(f"/v1/jobs/{j['id']}"), loc
    assert j["state"] in ("queued", "running", "succeeded"), j
    assert j["kernel"] == "saxpy"
    assert j["priority"] == 5
    assert j["max_attempts"] == 3
    assert j["timeout_s"] == 3600
    assert j["resources"] == {"backend": "any", "gpus": 1, "nodes": 1}
    assert j["labels"] == {"team": "search", "run.id": "r-1"}
    assert j["params"] == {"a": 1.0}
    ts(j["created_at"])
    assert "inputs" not in j or j["inputs"] is None, "job object should not echo input tensors"


def test_succeeded_job_has_every_field(A, stack):
    j = A.submit("sleep", {"seconds": 0.2}, priority=7, timeout_s=120, max_attempts=2,
                 labels={"k": "v"}, resources={"backend": "cpu", "gpus": 1})
    j = A.wait(j["id"], 20)
    assert j["state"] == "succeeded", j
    assert j["kernel"] == "sleep"
    assert j["priority"] == 7
    assert j["timeout_s"] == 120
    assert j["max_attempts"] == 2
    assert j["attempts"] == 1
    assert j["labels"] == {"k": "v"}
    assert j["resources"] == {"backend": "cpu", "gpus": 1, "nodes": 1}
    assert j["node"] in stack.node_names, j["node"]
    assert j["backend"] == "cpu"
    assert j["error"] is None
    c, s, f = ts(j["created_at"]), ts(j["started_at"]), ts(j["finished_at"])
    assert c <= s <= f, (c, s, f)
    assert (f - s).total_seconds() >= 0.19, f"sleep 0.2 ran {f - s}"
    assert abs((datetime.utcnow() - f).total_seconds()) < 60, "finished_at is not UTC now"
    # GET returns the same object
    again = A.job(j["id"])
    assert again == j


def test_queued_job_has_null_start_and_finish(A, stack):
    # both nodes busy so the third job must wait
    busy = [A.submit("sleep", {"seconds": 3}) for _ in stack.node_names]
    for b in busy:
        A.wait(b["id"], 10, states=("running",))
    j = A.submit("sleep", {"seconds": 0})
    j = A.job(j["id"])
    assert j["state"] == "queued", j
    assert j["started_at"] is None and j["finished_at"] is None
    assert j["attempts"] == 0
    assert j["node"] is None
    assert j["backend"] is None
    r = A.result(j["id"])
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["error"]["code"] == "conflict"
    assert body.get("state") == "queued", f"409 must say the state: {body}"


def test_result_of_running_job_is_409_with_state(A):
    j = A.submit("sleep", {"seconds": 3})
    A.wait(j["id"], 10, states=("running",))
    r = A.result(j["id"], "json")
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "conflict"
    assert r.json().get("state") == "running", r.text
    A.cancel(j["id"])


def test_job_past_its_timeout_fails_with_timeout_error(A):
    j = A.submit("sleep", {"seconds": 10}, timeout_s=1)
    j = A.wait(j["id"], 20)
    assert j["state"] == "failed", j
    assert j["error"] and j["error"]["code"] == "timeout", j["error"]
    assert isinstance(j["error"].get("message"), str)
    assert j["attempts"] == 1, "timeout is final: no retry"
    r = A.result(j["id"])
    assert r.status_code == 409 and r.json().get("state") == "failed", r.text


def test_charset_in_content_type_is_accepted(A):
    import json
    body = json.dumps({"kernel": "sleep", "params": {"seconds": 0}})
    r = A.post("/v1/jobs", data=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 202, r.text
    A.tracker.append((A, r.json()["id"]))


def test_float_inputs_given_as_integers_in_data_are_accepted(A):
    # JSON has one number type: 2 is a valid float32 element
    j = A.run("saxpy", {"a": 2}, {"x": {"dtype": "float32", "shape": [2], "data": [1, 2]},
                                  "y": {"dtype": "float32", "shape": [2], "data": [0, 1]}})
    np.testing.assert_allclose(decode(A.outputs(j["id"])["y"]), [2, 5])


def test_job_row_is_in_postgres_when_202_returns(A, stack):
    j = A.submit("sleep", {"seconds": 0})
    n = stack.psql_value(f"SELECT count(*) FROM jobs WHERE id = '{j['id']}'")
    assert n == "1"


def test_node_frees_a_run_once_the_gateway_has_recorded_it(A, stack):
    """After storing a result the gateway releases the run on its node
    (POST /v1/runs/{id}/release): the node frees it after a short grace
    instead of holding the outputs for 15 minutes. A run that has not
    finished cannot be released."""
    hdr = {"Authorization": "Bearer " + stack.cluster_token}
    long = stack.wait_run_on_node(A.wait(A.submit("sleep", {"seconds": 2})["id"], 10,
                                         states=("running",)))
    run_url = f"{stack.node_url(long['node'])}/v1/runs/{long['id']}.{long['attempts']}"
    r = requests.post(run_url + "/release", headers=hdr, timeout=5)
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict", r.text
    r = requests.post(f"{stack.node_url(long['node'])}/v1/runs/nope.1/release", headers=hdr, timeout=5)
    assert r.status_code == 404, r.text
    assert requests.post(run_url + "/release", timeout=5).status_code == 401
    assert A.wait(long["id"], 10)["state"] == "succeeded"

    def released():
        got = requests.get(run_url, headers=hdr, timeout=5)
        return got.status_code == 404 or got.json().get("released") is True
    wait_until(released, 5, 0.1, "the run released on its node")
