"""The blob API: raw bytes in and out, content-addressed, deduplicated,
visible only to the tenants that uploaded them, streamed (the gateway's
memory does not grow with the blob), with Range, quota and retention."""

import glob
import hashlib
import os
import socket
import time

import pytest
import requests

from stack import free_port, status_kb as rss_kb, wait_until

OCTET = {"Content-Type": "application/octet-stream"}


def blob_id(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def upload(client, data, headers=OCTET):
    return client.post("/v1/blobs", data=data, headers=headers)


def blob_files(stack):
    return glob.glob(os.path.join(stack.root, "blobs", "sha256", "*", "*"))


def tmp_files(stack):
    return os.listdir(os.path.join(stack.root, "blobs", "tmp"))


def test_upload_answers_the_content_address_and_dedups(A):
    data = os.urandom(100_000)
    r = upload(A, data)
    assert r.status_code == 201, r.text
    assert r.json() == {"id": blob_id(data), "size": len(data)}
    assert r.headers["Location"] == "/v1/blobs/" + blob_id(data)
    again = upload(A, data)
    assert again.status_code == 200 and again.json()["id"] == blob_id(data), again.text


def test_download_whole_head_and_ranges(A):
    data = os.urandom(70_000)
    bid = upload(A, data).json()["id"]
    r = A.get("/v1/blobs/" + bid)
    assert r.status_code == 200 and r.content == data
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert r.headers["ETag"] == f'"{bid}"' and r.headers["Accept-Ranges"] == "bytes"
    h = A.request("HEAD", "/v1/blobs/" + bid)
    assert h.status_code == 200 and int(h.headers["Content-Length"]) == len(data) and h.content == b""
    for rng, (a, b) in {"bytes=10-19": (10, 19), "bytes=69990-": (69990, 69999),
                        "bytes=-5": (69995, 69999), "bytes=69000-999999": (69000, 69999)}.items():
        p = A.get("/v1/blobs/" + bid, headers={"Range": rng})
        assert p.status_code == 206, (rng, p.status_code)
        assert p.content == data[a:b + 1], rng
        assert p.headers["Content-Range"] == f"bytes {a}-{b}/{len(data)}", rng
    bad = A.get("/v1/blobs/" + bid, headers={"Range": "bytes=70000-"})
    assert bad.status_code == 416 and bad.headers["Content-Range"] == f"bytes */{len(data)}"
    assert bad.json()["error"]["code"] == "range_not_satisfiable"
    # several ranges: the whole blob (RFC 9110 lets a server ignore Range)
    assert A.get("/v1/blobs/" + bid, headers={"Range": "bytes=0-1,5-6"}).content == data


def test_empty_blob(A):
    r = upload(A, b"")
    assert r.status_code in (200, 201) and r.json() == {"id": blob_id(b""), "size": 0}
    assert A.get("/v1/blobs/" + blob_id(b"")).content == b""


def test_knowing_a_hash_is_not_access(A, B):
    data = os.urandom(5000)
    bid = upload(A, data).json()["id"]
    for method in ("GET", "HEAD", "DELETE"):
        assert B.request(method, "/v1/blobs/" + bid).status_code == 404, method
    # B uploading the same bytes gets its own reference; the bytes are stored once
    assert upload(B, data).status_code == 201
    assert B.get("/v1/blobs/" + bid).content == data
    assert B.request("DELETE", "/v1/blobs/" + bid).status_code == 200
    assert B.get("/v1/blobs/" + bid).status_code == 404
    assert A.get("/v1/blobs/" + bid).content == data  # A's reference stands


def test_delete_drops_the_reference(A):
    data = os.urandom(1000)
    bid = upload(A, data).json()["id"]
    r = A.request("DELETE", "/v1/blobs/" + bid)
    assert r.status_code == 200 and r.json() == {"id": bid, "deleted": True}
    assert A.get("/v1/blobs/" + bid).status_code == 404
    assert A.request("DELETE", "/v1/blobs/" + bid).status_code == 404


@pytest.mark.parametrize("bad", ["sha256:abc", "md5:" + "0" * 32, "sha256:" + "G" * 64,
                                 "sha256:" + "A" * 64, "x"])
def test_malformed_blob_id_is_400_naming_it(A, bad):
    r = A.get("/v1/blobs/" + bad)
    assert r.status_code == 400 and r.json()["error"]["field"] == "id", r.text


def test_upload_needs_octet_stream_and_a_key(A, anon, stack):
    r = upload(A, b"abc", headers={"Content-Type": "application/json"})
    assert r.status_code == 415, r.text
    r = upload(anon, b"abc")
    assert r.status_code == 401, r.text
    assert blob_id(b"abc") not in [os.path.basename(p) for p in blob_files(stack)]


def test_upload_streams_without_holding_the_blob(A, stack):
    data = os.urandom(64 << 20)
    pid = stack.gateway.pid
    before = rss_kb(pid, "VmRSS")
    r = upload(A, data)
    assert r.status_code == 201, r.text
    got = A.get("/v1/blobs/" + r.json()["id"])
    assert got.content == data
    grew = rss_kb(pid, "VmRSS") - before
    assert grew < 16 << 10, f"gateway RSS grew {grew} KiB for a 64 MiB blob"


@pytest.mark.timeout(90)
def test_client_gone_mid_upload_leaves_nothing(A, stack):
    before = set(blob_files(stack))
    tmp_before = set(tmp_files(stack))  # a gateway killed by another test leaves its own
    s = socket.create_connection(("127.0.0.1", stack.gw_port), timeout=10)
    s.sendall(b"POST /v1/blobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n"
              b"Authorization: Bearer " + stack.keys["A"].encode() + b"\r\n"
              b"Content-Length: 10000000\r\n\r\n" + b"x" * 3_000_000)
    # the upload has begun (its temporary file) when the client goes
    wait_until(lambda: set(tmp_files(stack)) - tmp_before, 10, 0.02, "the upload's temporary file")
    s.close()
    # the gateway removes the partial file once it sees the client gone:
    # at once here when idle, but on a loaded machine only at the
    # connection's timeout (--conn-timeout-s, 30 s; seen at 12 s and 30 s)
    wait_until(lambda: not set(tmp_files(stack)) - tmp_before, 30 + 15, 0.1,
               "the partial upload's file to go")
    assert set(blob_files(stack)) == before


@pytest.fixture(scope="module")
def small_gw(stack):
    """A gateway with a 1 MiB upload limit, a 2 MiB quota per tenant, and a
    retention of 1 s swept every second, on the suite's stores."""
    port = free_port()
    proc = stack.start_gateway("gateway-blobs", port, KOWLOON_MAX_BLOB_MB=1,
                               KOWLOON_BLOB_QUOTA_MB=2, KOWLOON_BLOB_RETENTION_S=1,
                               KOWLOON_BLOB_SWEEP_S=1)
    yield f"http://127.0.0.1:{port}"
    proc.stop()


def test_upload_over_the_limit_is_413(stack, small_gw):
    key = stack.create_key("blob-limit")
    r = requests.post(small_gw + "/v1/blobs", data=os.urandom((1 << 20) + 1), timeout=30,
                      headers={**OCTET, "Authorization": f"Bearer {key}"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large", r.text


def test_quota_refuses_past_the_tenants_bytes(stack, small_gw):
    key = stack.create_key("blob-quota")
    h = {**OCTET, "Authorization": f"Bearer {key}"}
    datas = [os.urandom(900_000) for _ in range(2)]
    ids = [requests.post(small_gw + "/v1/blobs", data=d, headers=h, timeout=30) for d in datas]
    assert [r.status_code for r in ids] == [201, 201], [r.text for r in ids]
    third = os.urandom(900_000)
    r = requests.post(small_gw + "/v1/blobs", data=third, headers=h, timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == "quota_exceeded", r.text
    assert r.json()["remaining_bytes"] == (2 << 20) - 1_800_000, r.text
    assert requests.get(small_gw + "/v1/blobs/" + blob_id(third), headers=h, timeout=10).status_code == 404
    # an upload is judged by its Content-Length, before its bytes are
    # known: bytes the tenant holds already are refused too when they do
    # not fit what is left (HEAD tells which to send)
    assert requests.head(small_gw + "/v1/blobs/" + blob_id(datas[1]), headers=h,
                         timeout=10).status_code == 200
    again = requests.post(small_gw + "/v1/blobs", data=datas[1], headers=h, timeout=30)
    assert again.status_code == 413 and again.json()["error"]["code"] == "quota_exceeded", again.text
    # deleting makes room
    requests.delete(small_gw + "/v1/blobs/" + ids[0].json()["id"], headers=h, timeout=10)
    assert requests.post(small_gw + "/v1/blobs", data=third, headers=h, timeout=30).status_code == 201
    requests.delete(small_gw + "/v1/blobs/" + blob_id(third), headers=h, timeout=10)
    # where it fits, a blob the tenant already has costs nothing more
    again = requests.post(small_gw + "/v1/blobs", data=datas[1], headers=h, timeout=30)
    assert again.status_code == 200, again.text
    usage = requests.get(small_gw + "/v1/usage", headers=h, timeout=10).json()
    assert usage["storage"] == {"blob_bytes": 900_000, "quota_bytes": 2 << 20}, usage


def test_retention_removes_only_unreferenced_blobs(stack, small_gw):
    key = stack.create_key("blob-retention")
    h = {**OCTET, "Authorization": f"Bearer {key}"}
    keep, drop = os.urandom(1000), os.urandom(1000)
    for d in (keep, drop):
        assert requests.post(small_gw + "/v1/blobs", data=d, headers=h, timeout=10).status_code == 201
    requests.delete(small_gw + "/v1/blobs/" + blob_id(drop), headers=h, timeout=10)
    path = os.path.join(stack.root, "blobs", "sha256", blob_id(drop)[7:9], blob_id(drop)[7:])
    deadline = time.monotonic() + 15
    while os.path.exists(path):
        assert time.monotonic() < deadline, "the unreferenced blob was not removed"
        time.sleep(0.2)
    # the sweep removes the files while its transaction holds the rows
    # (blob_gc.c): the row goes when that transaction commits, just after
    wait_until(lambda: stack.psql_value(
        f"SELECT count(*) FROM blobs WHERE id = '{blob_id(drop)}'") == "0", 10, 0.05,
        "the removed blob's row to go")
    # the pass that removed drop saw keep past the retention too (uploaded
    # with it): a referenced blob stays
    assert requests.get(small_gw + "/v1/blobs/" + blob_id(keep), headers=h, timeout=10).content == keep
    # uploading removed bytes again brings them back
    assert requests.post(small_gw + "/v1/blobs", data=drop, headers=h, timeout=10).status_code == 201
    assert requests.get(small_gw + "/v1/blobs/" + blob_id(drop), headers=h, timeout=10).content == drop
