"""Blob quota and job retention, on a stack of their own (a 4 MiB quota per
tenant, retention passes every second, unreferenced blobs kept 1 s): every
blob byte a tenant causes to be stored counts (uploads, inline inputs that
become blobs, multipart parts, outputs), an upload is judged from its head
and cut off once past the quota with nothing left on disk, DELETE
/v1/jobs/{id} and the retention pass delete a job with its events, results
and blob references, the bytes nobody holds any more are swept (never those
another job or tenant holds), and usage outlives the jobs."""

import glob
import hashlib
import json
import os
import socket
import time

import numpy as np
import pytest
import requests

import stack as stk
from stack import tensor, wait_until, started

OCTET = {"Content-Type": "application/octet-stream"}
QUOTA = 4 << 20
MIB = 1 << 20


class QuotaStack(stk.Stack):
    """Every gateway of this stack (the main one, a second replica) runs
    with the same small quota and fast retention."""

    def gateway_env(self, **extra):
        return super().gateway_env(**{"KOWLOON_BLOB_QUOTA_MB": QUOTA >> 20,
                                      "KOWLOON_BLOB_SWEEP_S": 1, "KOWLOON_BLOB_RETENTION_S": 1,
                                      "KOWLOON_JOB_RETENTION_DAYS": 30, **extra})


@pytest.fixture(scope="module")
def qs():
    yield from started(QuotaStack(node_names=("qnode-a", "qnode-b")))


def tenant(qs, name):
    return qs.client(key=qs.create_key(f"{name}-{os.urandom(3).hex()}"))


def blob_id(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def blob_path(qs, bid):
    return os.path.join(qs.blob_dir, "sha256", bid[7:9], bid[7:])


def blob_files(qs):
    return set(glob.glob(os.path.join(qs.blob_dir, "sha256", "*", "*")))


def tmp_files(qs):
    return set(os.listdir(os.path.join(qs.blob_dir, "tmp")))


def upload(client, data):
    return client.post("/v1/blobs", data=data, headers=OCTET, timeout=60)


def storage(client):
    r = client.get("/v1/usage")
    assert r.status_code == 200, r.text
    return r.json()["storage"]["blob_bytes"]


def f32(n, seed, scale=1000):
    """n float32 small integers: saxpy's a*x + y on them is exact, so the
    bytes of an output (and its blob id) are known in advance."""
    return (np.random.default_rng(seed).integers(0, scale, n)).astype(np.float32)


def ref(arr, bid):
    return {"dtype": "float32", "shape": [arr.size], "blob": bid}


def assert_quota_error(r, remaining):
    assert r.status_code == 413, r.text
    body = r.json()
    assert body["error"]["code"] == "quota_exceeded", body
    assert body["quota_bytes"] == QUOTA and body["remaining_bytes"] == remaining, body


# ---------------------------------------------------------------- the quota

def test_an_upload_past_the_remaining_quota_is_refused_from_its_head(qs):
    T = tenant(qs, "head")
    assert upload(T, os.urandom(3 * MIB)).status_code == 201
    files, tmps = blob_files(qs), tmp_files(qs)
    s = socket.create_connection(("127.0.0.1", qs.gw_port), timeout=10)
    try:
        t0 = time.monotonic()
        s.sendall(b"POST /v1/blobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n"
                  b"Authorization: Bearer " + T.key.encode() + b"\r\n"
                  b"Content-Length: " + str(2 * MIB).encode() + b"\r\n\r\n")
        s.settimeout(5)  # not one byte of the body is sent: the answer must come anyway
        got = b""
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        took_ms = (time.monotonic() - t0) * 1000
    finally:
        s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), got[:300]
    err = json.loads(body)
    assert err["error"]["code"] == "quota_exceeded" and err["remaining_bytes"] == MIB, err
    print(f"quota refusal from the head in {took_ms:.1f} ms")
    assert blob_files(qs) == files and tmp_files(qs) - tmps == set()
    assert storage(T) == 3 * MIB


def test_a_chunked_upload_is_cut_off_once_past_the_quota(qs):
    T = tenant(qs, "chunked")
    assert upload(T, os.urandom(3 * MIB)).status_code == 201
    files, tmps = blob_files(qs), tmp_files(qs)

    def body(total, sent):
        chunk = os.urandom(64 << 10)
        while sent[0] < total:
            sent[0] += len(chunk)
            yield chunk

    # a little past the 1 MiB left: cut there, the rest drained, and 413
    sent = [0]
    r = T.post("/v1/blobs", data=body(MIB + (256 << 10), sent), headers=OCTET, timeout=60)
    assert_quota_error(r, MIB)
    # far past it: the connection is closed long before the body's end
    sent = [0]
    try:
        r = T.post("/v1/blobs", data=body(256 * MIB, sent), headers=OCTET, timeout=60)
        assert_quota_error(r, MIB)
    except requests.ConnectionError:
        pass
    assert sent[0] < 64 * MIB, f"the gateway read {sent[0]} bytes of a body past its quota"
    assert blob_files(qs) == files
    wait_until(lambda: not (tmp_files(qs) - tmps), 5, what="no partial upload left in tmp/")
    assert storage(T) == 3 * MIB


def test_a_multipart_part_past_the_quota_is_cut_off_and_nothing_is_stored(qs):
    T = tenant(qs, "multipart")
    assert upload(T, os.urandom(3 * MIB + MIB // 2)).status_code == 201
    files, tmps, jobs = blob_files(qs), tmp_files(qs), qs.count_jobs()
    x = f32(MIB // 4, 1)
    job = {"kernel": "saxpy", "inputs": {"x": {"dtype": "float32", "shape": [x.size], "part": "x"},
                                         "y": {"dtype": "float32", "shape": [x.size], "part": "x"}}}
    r = T.post("/v1/jobs", files=[("job", (None, json.dumps(job), "application/json")),
                                  ("x", ("x.bin", x.tobytes(), "application/octet-stream"))])
    assert_quota_error(r, MIB // 2)
    assert qs.count_jobs() == jobs
    assert blob_files(qs) == files
    assert blob_path(qs, blob_id(x.tobytes())) not in blob_files(qs)
    wait_until(lambda: not (tmp_files(qs) - tmps), 5, what="no partial part left in tmp/")
    assert storage(T) == 3 * MIB + MIB // 2


def test_inline_inputs_that_become_blobs_count_toward_the_quota(qs):
    T = tenant(qs, "inline")
    x, y = f32(MIB // 4, 2), f32(MIB // 4, 3)
    big = {"x": tensor(x, b64=True), "y": tensor(y, b64=True)}
    T.run("saxpy", {"a": 2.0}, big, timeout=60)
    # x and y became blobs at submit, the output is one too
    assert storage(T) == 3 * MIB
    # two new inputs of 1 MiB with 1 MiB left: refused before a byte is stored
    files, jobs = blob_files(qs), qs.count_jobs()
    r = T.post_job({"kernel": "saxpy", "params": {"a": 2.0},
                    "inputs": {"x": tensor(f32(MIB // 4, 4), b64=True),
                               "y": tensor(f32(MIB // 4, 5), b64=True)}})
    assert_quota_error(r, MIB)
    assert qs.count_jobs() == jobs and blob_files(qs) == files
    assert storage(T) == 3 * MIB
    # inputs the tenant holds already cost nothing: its new output fills the quota
    T.run("saxpy", {"a": 3.0}, big, timeout=60)
    assert storage(T) == QUOTA
    # small inline inputs stay in the job's row and are not blob bytes
    T.run("saxpy", {"a": 1.0}, {"x": tensor(x[:100]), "y": tensor(y[:100])})
    assert storage(T) == QUOTA


def test_outputs_count_and_a_job_whose_outputs_do_not_fit_fails_quota_exceeded(qs):
    T = tenant(qs, "outputs")
    x = f32(MIB // 4, 6)
    bx = upload(T, x.tobytes()).json()["id"]
    j = T.run("saxpy", {"a": 2.0}, {"x": ref(x, bx), "y": ref(x, bx)}, timeout=60)
    assert storage(T) == 2 * MIB  # x, and the output 3x
    assert upload(T, os.urandom(MIB + MIB // 2)).status_code == 201
    assert storage(T) == 3 * MIB + MIB // 2
    # 6x would be 1 MiB more with 0.5 MiB left
    out = (np.float32(5.0) * x + x).tobytes()
    j = T.submit("saxpy", {"a": 5.0}, {"x": ref(x, bx), "y": ref(x, bx)})
    done = T.wait(j["id"], 60)
    assert done["state"] == "failed", done
    assert done["error"]["code"] == "quota_exceeded", done["error"]
    assert "no output was kept" in done["error"]["message"], done["error"]
    assert done["usage"]["bytes_out"] == 0, done["usage"]
    assert T.result(j["id"]).status_code == 409
    assert T.get(f"/v1/jobs/{j['id']}/outputs/y").status_code == 409
    assert storage(T) == 3 * MIB + MIB // 2
    # the bytes the node stored belong to nobody and are swept
    assert qs.psql_value(f"SELECT count(*) FROM job_blob_refs WHERE job_id = '{j['id']}'") == "1"
    wait_until(lambda: not os.path.exists(blob_path(qs, blob_id(out))), 15,
               what="the refused output's bytes to be swept")


def test_an_output_kept_as_a_blob_outlives_its_job(qs):
    T = tenant(qs, "keep")
    x = f32(MIB // 4, 7)
    bx = upload(T, x.tobytes()).json()["id"]
    j = T.run("saxpy", {"a": 2.0}, {"x": ref(x, bx), "y": ref(x, bx)}, timeout=60)
    out = T.result(j["id"], "blob").json()["outputs"]["y"]
    assert T.get("/v1/blobs/" + out["blob"]).status_code == 200
    assert storage(T) == 2 * MIB  # the tenant's own reference costs nothing more
    assert T.request("DELETE", f"/v1/jobs/{j['id']}").status_code == 200
    assert T.get("/v1/blobs/" + out["blob"]).content == (np.float32(2.0) * x + x).tobytes()
    assert storage(T) == 2 * MIB


# ---------------------------------------------------------------- DELETE /v1/jobs/{id}

def rows_of(qs, job_id):
    return {t: int(qs.psql_value(f"SELECT count(*) FROM {t} WHERE job_id = '{job_id}'"))
            for t in ("job_events", "job_inputs", "job_results", "job_blob_refs")}


def test_delete_a_job(qs):
    T, U = tenant(qs, "del"), tenant(qs, "del-other")
    x = f32(MIB // 4, 8)
    bx = upload(T, x.tobytes()).json()["id"]
    key = os.urandom(8).hex()
    body = {"kernel": "saxpy", "params": {"a": 2.0}, "inputs": {"x": ref(x, bx), "y": ref(x, bx)}}
    r = T.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
    assert r.status_code == 202, r.text
    jid = r.json()["id"]
    T.wait(jid, 60)
    assert all(n > 0 for n in rows_of(qs, jid).values()), rows_of(qs, jid)
    with qs.second_gateway() as gw2:
        other = qs.client(key=T.key, base=gw2)
        assert other.get(f"/v1/jobs/{jid}").status_code == 200  # kept in its job cache
        # another tenant's job answers 404 and stays
        assert U.request("DELETE", f"/v1/jobs/{jid}").status_code == 404
        assert T.get(f"/v1/jobs/{jid}").status_code == 200
        r = T.request("DELETE", f"/v1/jobs/{jid.upper()}")
        assert r.status_code == 200 and r.json() == {"id": jid, "deleted": True}, r.text
        assert T.get(f"/v1/jobs/{jid}").status_code == 404
        # the other gateway stops answering it from memory within a key-cache period
        wait_until(lambda: other.get(f"/v1/jobs/{jid}").status_code == 404, 5,
                   what="the second gateway to forget the deleted job")
    for path in ("", "/result", "/events", "/deliveries", "/outputs/y"):
        assert T.get(f"/v1/jobs/{jid}{path}").status_code == 404, path
    assert rows_of(qs, jid) == {"job_events": 0, "job_inputs": 0, "job_results": 0,
                                "job_blob_refs": 0}
    assert T.request("DELETE", f"/v1/jobs/{jid}").status_code == 404
    assert T.request("DELETE", "/v1/jobs/not-a-job").status_code == 404
    # a retry of the submit that made it is told, not given a ghost
    for extra in ({}, {"Prefer": "wait=5"}):
        r = T.post("/v1/jobs", json=body, headers={"Idempotency-Key": key, **extra})
        assert r.status_code == 409 and r.json()["job_id"] == jid, (extra, r.text)
    assert storage(T) == MIB  # x stays the tenant's; the output went with the job


def test_a_job_that_has_not_ended_is_not_deleted(qs):
    T = tenant(qs, "running")
    j = T.submit("sleep", {"seconds": 30})
    try:
        T.wait(j["id"], 30, states=("running",))
        r = T.request("DELETE", f"/v1/jobs/{j['id']}")
        assert r.status_code == 409, r.text
        assert r.json()["state"] == "running" and r.json()["error"]["code"] == "conflict"
        assert T.get(f"/v1/jobs/{j['id']}").status_code == 200
    finally:
        T.cancel(j["id"])
    T.wait(j["id"], 30)
    assert T.request("DELETE", f"/v1/jobs/{j['id']}").status_code == 200


# ---------------------------------------------------------------- retention

def age(qs, job_id, days=31):
    """Moves a job's end back in time, past the stack's 30 days."""
    qs.psql(f"UPDATE jobs SET finished_at = finished_at - interval '{days} days'"
            f" WHERE id = '{job_id}'")


def usage(client):
    now = time.time()
    r = client.get("/v1/usage", params={"from": time.strftime("%Y-%m-%d", time.gmtime(now - 90 * 86400)),
                                        "to": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime(now + 3600)),
                                        "group_by": "label:team"})
    assert r.status_code == 200, r.text
    body = r.json()
    return body["totals"], body["groups"]


def test_retention_deletes_old_jobs_and_sweeps_only_the_bytes_nobody_holds(qs):
    T, U = tenant(qs, "ret"), tenant(qs, "ret-other")
    n = MIB // 16  # 256 KiB tensors
    k, p, s = f32(n, 10), f32(n, 11), f32(n, 12)
    bk, bp, bs = (upload(T, a.tobytes()).json()["id"] for a in (k, p, s))
    assert upload(U, s.tobytes()).status_code == 201  # the same bytes, U's too
    j1 = T.run("saxpy", {"a": 2.0}, {"x": ref(k, bk), "y": ref(p, bp)}, labels={"team": "x"})
    j2 = T.run("saxpy", {"a": 3.0}, {"x": ref(k, bk), "y": ref(s, bs)}, labels={"team": "y"})
    o1 = blob_id((np.float32(2.0) * k + p).tobytes())
    o2 = blob_id((np.float32(3.0) * k + s).tobytes())
    for b in (bk, bp, bs):
        assert T.request("DELETE", "/v1/blobs/" + b).status_code == 200
    assert storage(T) == 5 * (4 * n)  # k, p, s, o1, o2: each held by a job
    totals, groups = usage(T)
    assert totals["jobs"] == 2

    age(qs, j1["id"])
    wait_until(lambda: T.get(f"/v1/jobs/{j1['id']}").status_code == 404, 15,
               what="the retention pass to delete the old job")
    assert rows_of(qs, j1["id"]) == {"job_events": 0, "job_inputs": 0, "job_results": 0,
                                     "job_blob_refs": 0}
    assert T.get(f"/v1/jobs/{j2['id']}").status_code == 200  # recent: kept
    # p and j1's output were held by j1 alone: their bytes go
    for b in (bp, o1):
        wait_until(lambda: not os.path.exists(blob_path(qs, b)), 15, what=f"{b} to be swept")
    # k is j2's input too, s is j2's and U's own: they stay, and so does o2,
    # after a pass that swept a blob last used later than any of them
    sentinel = os.urandom(100)
    assert upload(T, sentinel).status_code == 201
    assert T.request("DELETE", "/v1/blobs/" + blob_id(sentinel)).status_code == 200
    wait_until(lambda: not os.path.exists(blob_path(qs, blob_id(sentinel))), 15,
               what="a later sweep")
    for b in (bk, bs, o2):
        assert os.path.exists(blob_path(qs, b)), b
    assert U.get("/v1/blobs/" + bs).content == s.tobytes()
    assert storage(T) == 3 * (4 * n)
    # what j1 used is still billed
    assert usage(T) == (totals, groups)

    # DELETE /v1/blobs erases the bytes once no job holds them either
    assert T.request("DELETE", f"/v1/jobs/{j2['id']}").status_code == 200
    for b in (bk, o2):
        wait_until(lambda: not os.path.exists(blob_path(qs, b)), 15, what=f"{b} to be swept")
    assert os.path.exists(blob_path(qs, bs)) and U.get("/v1/blobs/" + bs).status_code == 200
    assert storage(T) == 0 and storage(U) == 4 * n
    assert usage(T) == (totals, groups)
