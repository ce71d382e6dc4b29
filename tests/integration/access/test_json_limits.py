"""JSON bodies cannot take the gateway's memory: a body is at most
--max-json-body-mb (4 MiB here, the default), and within that its depth,
its number of values and its top-level names are checked in the pre-scan,
before jansson builds anything. Each shape the review measured (an 8 MiB
body of {"kernel":"saxpy","x":[{},{},...]} took the gateway from 52 to
679 MiB, [[],[],...] to 412 MiB, [[[[... about +260 MiB) is sent at the
limit, as a JSON body and as a multipart job part, alone and four at once:
each gets its JSON 4xx, nothing is stored, and the gateway's peak RSS stays
within a bound."""

import json
import os
import threading

import pytest
import requests

from stack import free_port, reset_peak, status_kb

LIMIT = 4 << 20          # --max-json-body-mb default
RSS_MAX_MB = 40          # peak growth for one body at the limit; measured ~9 (see README)
RSS_MAX_4_MB = 96        # four at once

ASAN = pytest.mark.skipif("ASAN_OPTIONS" in os.environ,
                          reason="memory bounds are measured on the normal build, not under ASan")


def fill(head, unit, tail, size=LIMIT):
    """head + unit * n + tail, padded with spaces before tail to exactly size bytes."""
    n = (size - len(head) - len(tail)) // len(unit)
    body = head + unit * n
    return body + b" " * (size - len(body) - len(tail)) + tail


# name -> (body, status, code, field or message part)
SHAPES = {
    "unknown-field-of-objects": (fill(b'{"kernel":"saxpy","x":[', b"{},", b"{}]}"),
                                 400, "invalid_argument", "x"),
    "known-field-of-objects": (fill(b'{"kernel":"saxpy","params":[', b"{},", b"{}]}"),
                               413, "payload_too_large", "values"),
    "array-of-arrays": (fill(b"[", b"[],", b"[]]"), 400, "invalid_json", "JSON object"),
    "arrays-in-a-param": (fill(b'{"kernel":"saxpy","params":{"a":[', b"[],", b"[]]}}"),
                          413, "payload_too_large", "values"),
    "deep-array": (b"[" * LIMIT, 400, "invalid_json", "JSON object"),
    "deep-in-a-field": (fill(b'{"kernel":"saxpy","params":', b"[", b""),
                        413, "payload_too_large", "deeper"),
    # the most a body within the limits can make jansson build: 99,990 empty
    # objects (about 250 bytes each), parsed, then refused by validation
    "most-values-within": (fill(b'{"kernel":"saxpy","params":{"a":[', b"{},", b"{}]}}",
                                len(b'{"kernel":"saxpy","params":{"a":[]}}') + 3 * 99990),
                           422, "invalid_argument", "params.a"),
}


@pytest.fixture(scope="module")
def gw(stack):
    port = free_port()
    proc = stack.start_gateway("gateway-json", port)
    yield proc, f"http://127.0.0.1:{port}"
    proc.stop()


def check_error(r, status, code, what):
    assert r.status_code == status, r.text[:300]
    err = r.json()["error"]
    assert err["code"] == code, err
    if code == "invalid_argument":
        assert err["field"] == what, err
    else:
        assert what in err["message"], err


def post(base, key, body, multipart=False):
    headers = {"Authorization": "Bearer " + key}
    if multipart:
        return requests.post(base + "/v1/jobs", files={"job": ("job.json", body, "application/json")},
                             headers=headers, timeout=60)
    headers["Content-Type"] = "application/json"
    return requests.post(base + "/v1/jobs", data=body, headers=headers, timeout=60)


def peak_growth_mb(pid, send):
    base = status_kb(pid, "VmRSS")
    reset_peak(pid)
    out = send()
    return out, (status_kb(pid, "VmHWM") - base) / 1024


@ASAN
@pytest.mark.parametrize("multipart", [False, True], ids=["json", "multipart"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_at_the_limit_is_refused_within_the_memory_bound(gw, stack, shape, multipart):
    proc, base = gw
    body, status, code, what = SHAPES[shape]
    assert len(body) == LIMIT or shape == "most-values-within"
    jobs = stack.count_jobs()
    r, grew = peak_growth_mb(proc.pid, lambda: post(base, stack.keys["A"], body, multipart))
    check_error(r, status, code, what)
    print(f"{shape} {'multipart' if multipart else 'json'}: peak +{grew:.1f} MiB")
    assert grew < RSS_MAX_MB, f"{shape}: the gateway grew {grew:.0f} MiB for one 4 MiB body"
    assert stack.count_jobs() == jobs


@ASAN
def test_four_at_once_stay_within_the_bound(gw, stack):
    proc, base = gw
    shapes = ["unknown-field-of-objects", "known-field-of-objects", "arrays-in-a-param",
              "deep-in-a-field"]
    results = {}

    def one(name):
        results[name] = post(base, stack.keys["A"], SHAPES[name][0])

    def send():
        threads = [threading.Thread(target=one, args=(n,)) for n in shapes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)

    jobs = stack.count_jobs()
    _, grew = peak_growth_mb(proc.pid, send)
    for name in shapes:
        check_error(results[name], *SHAPES[name][1:])
    print(f"four at once: peak +{grew:.1f} MiB")
    assert grew < RSS_MAX_4_MB, grew
    assert stack.count_jobs() == jobs


def test_a_body_over_the_json_limit_is_413_from_its_head(gw, stack):
    proc, base = gw
    body = fill(b'{"kernel":"saxpy","params":{"a":"', b"x", b'"}}', LIMIT + 1)
    r = post(base, stack.keys["A"], body)
    check_error(r, 413, "payload_too_large", f"limit of {LIMIT} bytes")
    # the multipart job part has the same limit
    r = post(base, stack.keys["A"], body, multipart=True)
    check_error(r, 413, "payload_too_large", "job")


def test_a_job_just_under_the_limit_still_runs(gw, stack):
    """A normal job whose inline data comes close to the limit is served:
    the limits are for shapes no job has."""
    proc, base = gw
    m = (LIMIT - 4096) // 20  # two arrays of "1.2345678," each
    data = ",".join(["1.2345678"] * m)
    body = ('{"kernel":"saxpy","params":{"a":2},"inputs":{"x":{"dtype":"float32","shape":[%d],'
            '"data":[%s]},"y":{"dtype":"float32","shape":[%d],"data":[%s]}}}'
            % (m, data, m, data)).encode()
    assert LIMIT - 8192 < len(body) <= LIMIT, len(body)
    r = post(base, stack.keys["A"], body)
    assert r.status_code == 202, r.text[:300]
    job = stack.client("A", base=base).wait(r.json()["id"], timeout=60)
    assert job["state"] == "succeeded", job
