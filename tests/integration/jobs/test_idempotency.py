"""Idempotency-Key on POST /v1/jobs (the IETF httpapi idempotency-key
draft): the same key and request within 24 hours answer the first job and
make no second row, whatever gateway answers and even after one crashed;
the same key with another request is 422 and changes nothing; concurrent
duplicates make one job; expired keys are taken over and swept; the SDK's
retry after a lost reply finds its job."""

import base64
import json
import os
import sys
import threading
import time
import uuid

import httpx
import numpy as np
import pytest
import requests

from stack import REPO, tensor, wait_until

sys.path.insert(0, os.path.join(REPO, "sdk", "python", "src"))
import kowloon  # noqa: E402


def body(run, a=2.0, n=8, b64=False):
    x = np.arange(n, dtype=np.float32)
    return {"kernel": "saxpy", "params": {"a": a},
            "inputs": {"x": tensor(x, b64=b64), "y": tensor(x, b64=b64)}, "labels": {"run": run}}


def post(client, b, key, **headers):
    return client.post("/v1/jobs", json=b, headers={"Idempotency-Key": key, **headers})


def jobs_of_run(stack, run):
    return int(stack.psql_value(f"SELECT count(*) FROM jobs WHERE labels->>'run' = '{run}'"))


def test_same_key_and_request_answer_the_first_job_and_make_no_second_row(A, stack):
    run, key = uuid.uuid4().hex, str(uuid.uuid4())
    r1 = post(A, body(run), key)
    assert r1.status_code == 202, r1.text
    assert "Idempotent-Replayed" not in r1.headers
    first = r1.json()
    # the same request spelled otherwise (base64 tensors, keys in another
    # order, the key as the draft's quoted string) is the same request
    b = body(run, b64=True)
    b = dict(reversed(list(b.items())))
    r2 = post(A, b, f'"{key}"')
    assert r2.status_code in (200, 202), r2.text
    assert r2.json()["id"] == first["id"]
    assert r2.headers["Idempotent-Replayed"] == "true"
    assert r2.headers["Location"] == f"/v1/jobs/{first['id']}"
    assert r2.status_code == (202 if r2.json()["state"] in ("queued", "running") else 200)
    assert jobs_of_run(stack, run) == 1
    assert int(stack.psql_value(f"SELECT count(*) FROM job_events WHERE job_id = '{first['id']}'"
                                " AND state = 'queued'")) == 1
    done = A.wait(first["id"])
    assert done["state"] == "succeeded"
    # once the job has ended, the replay is 200 with the ended job
    r3 = post(A, body(run), key)
    assert r3.status_code == 200, r3.text
    assert r3.json()["id"] == first["id"] and r3.json()["state"] == "succeeded"
    assert jobs_of_run(stack, run) == 1


def test_a_replay_with_prefer_wait_answers_when_the_job_ends(A, stack):
    run, key = uuid.uuid4().hex, str(uuid.uuid4())
    b = {"kernel": "sleep", "params": {"seconds": 1}, "labels": {"run": run},
         "resources": {"backend": "cpu"}}
    first = post(A, b, key)
    assert first.status_code == 202, first.text
    r = post(A, b, key, Prefer="wait=20")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == first.json()["id"] and r.json()["state"] == "succeeded"
    assert r.headers["Idempotent-Replayed"] == "true"
    assert r.headers["Preference-Applied"] == "wait=20"
    assert jobs_of_run(stack, run) == 1


def test_same_key_with_another_request_is_422_and_changes_nothing(A, stack):
    run, key = uuid.uuid4().hex, str(uuid.uuid4())
    first = post(A, body(run), key).json()
    row = stack.psql(f"SELECT job_id, body_hash, created_at FROM job_idempotency WHERE key = '{key}'")
    for other in (body(run, a=3.0), body(run, n=9), {**body(run), "priority": 1}):
        r = post(A, other, key)
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "idempotency_key_reused" and err["field"] == "Idempotency-Key"
        assert first["id"] in err["message"]
    assert jobs_of_run(stack, run) == 1
    assert stack.psql(f"SELECT job_id, body_hash, created_at FROM job_idempotency"
                      f" WHERE key = '{key}'") == row
    # the first request still answers its job
    assert post(A, body(run), key).json()["id"] == first["id"]


def test_keys_belong_to_their_tenant(A, B, stack):
    run, key = uuid.uuid4().hex, str(uuid.uuid4())
    ra, rb = post(A, body(run), key), post(B, body(run), key)
    assert ra.status_code == rb.status_code == 202
    assert ra.json()["id"] != rb.json()["id"]
    assert jobs_of_run(stack, run) == 2


@pytest.mark.parametrize("key", ["", "x" * 256, '"unterminated', '"a"b', '"bad\\escape"', "caf\u00e9"])
def test_a_malformed_key_is_400_and_makes_no_job(A, stack, key):
    run = uuid.uuid4().hex
    r = requests.post(A.base + "/v1/jobs", data=json.dumps(body(run)).encode(),
                      headers={"Authorization": "Bearer " + A.key,
                               "Content-Type": "application/json",
                               "Idempotency-Key": key.encode("utf-8")}, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == "Idempotency-Key"
    assert jobs_of_run(stack, run) == 0


def test_a_multipart_submit_with_a_key_is_replayed(A, stack):
    run, key = uuid.uuid4().hex, str(uuid.uuid4())
    x = np.arange(1000, dtype=np.float32)
    job = {"kernel": "saxpy", "params": {"a": 2.0}, "labels": {"run": run}, "inputs": {
        "x": {"dtype": "float32", "shape": [1000], "part": "x"},
        "y": {"dtype": "float32", "shape": [1000], "part": "y"}}}

    def send(y):
        files = [("job", (None, json.dumps(job), "application/json")),
                 ("x", ("x.bin", x.tobytes(), "application/octet-stream")),
                 ("y", ("y.bin", y.tobytes(), "application/octet-stream"))]
        return A.post("/v1/jobs", files=files, headers={"Idempotency-Key": key})
    r1, r2 = send(x), send(x)
    assert r1.status_code == 202 and r2.status_code in (200, 202), (r1.text, r2.text)
    assert r2.json()["id"] == r1.json()["id"]
    # other bytes in a part are another request
    r3 = send(x + 1)
    assert r3.status_code == 422 and r3.json()["error"]["code"] == "idempotency_key_reused"
    assert jobs_of_run(stack, run) == 1


def concurrent_submits(bases, key, api_key, b, n):
    """n identical submits spread over the gateways at bases, sent at
    once while a lock holds the jobs table, so that they pile up into the
    same batches and into concurrent ones. Returns [(status, json)]."""
    sessions = [requests.Session() for _ in range(n)]
    out = [None] * n
    go = threading.Barrier(n)

    def one(i):
        go.wait()
        r = sessions[i].post(bases[i % len(bases)] + "/v1/jobs", json=b, timeout=30,
                             headers={"Authorization": "Bearer " + api_key, "Idempotency-Key": key})
        out[i] = (r.status_code, r.json())
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@pytest.mark.timeout(90)
def test_twenty_concurrent_identical_submits_make_one_job(A, stack):
    run, key = uuid.uuid4().hex, str(uuid.uuid4())
    with stack.second_gateway("gateway-idem-2") as base2:
        holder = stack.psql_background(
            "BEGIN; LOCK TABLE job_idempotency IN SHARE ROW EXCLUSIVE MODE; SELECT pg_sleep(1); COMMIT;")
        wait_until(lambda: stack.psql_value(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE c.relname = 'job_idempotency' AND l.mode = 'ShareRowExclusiveLock'"
            " AND l.granted") == "1", 10, 0.02, "the lock on job_idempotency")
        res = concurrent_submits([stack.base, base2], key, A.key, body(run), 20)
        holder.wait(timeout=30)
    assert all(s in (200, 202) for s, _ in res), res
    ids = {j["id"] for _, j in res}
    assert len(ids) == 1, ids
    assert jobs_of_run(stack, run) == 1
    assert A.wait(ids.pop())["state"] == "succeeded"


@pytest.mark.timeout(90)
def test_a_key_holds_across_gateways_and_a_gateway_crash(A, stack):
    run, key = uuid.uuid4().hex, str(uuid.uuid4())
    with stack.second_gateway("gateway-idem-crash") as base2:
        r1 = requests.post(base2 + "/v1/jobs", json=body(run), timeout=10,
                           headers={"Authorization": "Bearer " + A.key, "Idempotency-Key": key})
        assert r1.status_code == 202, r1.text
        stack.procs["gateway-idem-crash"].kill9()
    # the client never saw the answer, say, and retries on another gateway
    r2 = post(A, body(run), key)
    assert r2.status_code in (200, 202) and r2.json()["id"] == r1.json()["id"]
    assert jobs_of_run(stack, run) == 1


@pytest.mark.timeout(60)
def test_an_expired_key_is_taken_over_and_swept(A, stack):
    run, key, old = uuid.uuid4().hex, str(uuid.uuid4()), str(uuid.uuid4())
    first = post(A, body(run), key).json()
    post(A, body(run, a=5.0), old)
    stack.psql("UPDATE job_idempotency SET created_at = now() - interval '25 hours'"
               f" WHERE key IN ('{key}', '{old}')")
    # past 24 hours the key is free: another request under it is a new job
    r = post(A, body(run, a=3.0), key)
    assert r.status_code == 202, r.text
    assert r.json()["id"] != first["id"] and "Idempotent-Replayed" not in r.headers
    assert post(A, body(run, a=3.0), key).json()["id"] == r.json()["id"]
    # the retention pass deletes the expired key nobody took over
    with stack.second_gateway("gateway-idem-sweep", KOWLOON_BLOB_SWEEP_S=1):
        wait_until(lambda: stack.psql_value(
            f"SELECT count(*) FROM job_idempotency WHERE key = '{old}'") == "0", 15,
            what="the expired key swept")
    assert stack.psql_value(f"SELECT count(*) FROM job_idempotency WHERE key = '{key}'") == "1"


class LoseFirstSubmitReply(httpx.HTTPTransport):
    """Sends every request, but drops the answer to the first POST
    /v1/jobs as a connection reset after the gateway committed it would."""

    def __init__(self):
        super().__init__()
        self.dropped = 0
        self.keys = []

    def handle_request(self, request):
        resp = super().handle_request(request)
        if request.method == "POST" and request.url.path == "/v1/jobs":
            self.keys.append(request.headers.get("idempotency-key"))
            if not self.dropped:
                resp.read()
                resp.close()
                self.dropped = 1
                raise httpx.ReadError("connection reset by the test", request=request)
        return resp


def test_an_sdk_retry_after_a_lost_reply_returns_the_same_job(stack):
    run = uuid.uuid4().hex
    t = LoseFirstSubmitReply()
    with kowloon.Client(stack.base, stack.keys["A"], transport=t, max_retry_s=20) as c:
        job = c.submit("saxpy", x=np.ones(4, np.float32), y=np.ones(4, np.float32), a=1.0,
                       labels={"run": run})
        assert job.wait(30).state == "succeeded"
    assert t.dropped == 1 and len(t.keys) == 2 and t.keys[0] == t.keys[1]
    assert jobs_of_run(stack, run) == 1
