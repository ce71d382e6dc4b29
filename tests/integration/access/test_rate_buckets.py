"""Reads and writes are rate-limited apart: each API key has a write bucket
(submits, cancels, uploads, admin changes; --rate-limit-rps, 50/s) and a
read bucket (everything else; --read-rate-limit-rps, 500/s), declared per
route in the route table. A key that spent its submits still reads, one that
polls hard still submits, and polling 300 jobs with one key at the
defaults is not throttled."""

import uuid

import pytest
import requests

from stack import Client

# a job no node here can take: it stays queued until cancelled
PARKED = {"kernel": "sleep", "params": {"seconds": 0}, "priority": 0,
          "resources": {"backend": "cuda", "gpus": 16}}
DEFAULTS = {"KOWLOON_RATE_LIMIT_RPS": 50, "KOWLOON_RATE_LIMIT_BURST": 100,
            "KOWLOON_READ_RATE_LIMIT_RPS": 500, "KOWLOON_READ_RATE_LIMIT_BURST": 1000}


def new_keys(admin, n, **limits):
    name = f"rb-{uuid.uuid4().hex[:10]}"
    assert admin.post("/v1/tenants", json={"name": name, **limits}).status_code == 201
    keys = []
    for _ in range(n):
        r = admin.post("/v1/keys", json={"tenant": name})
        assert r.status_code == 201, r.text
        keys.append(r.json()["key"])
    return keys


def cancel_all(c, ids):
    for i in ids:
        c.cancel(i)


def test_a_key_that_spent_its_submit_bucket_still_reads_and_the_other_way_round(admin, stack):
    with stack.second_gateway("gateway-buckets", KOWLOON_RATE_LIMIT_RPS=1,
                              KOWLOON_RATE_LIMIT_BURST=2, KOWLOON_READ_RATE_LIMIT_RPS=1,
                              KOWLOON_READ_RATE_LIMIT_BURST=5) as base:
        k1, k2 = new_keys(admin, 2)
        c = Client(base, k1)
        codes = [c.post_job(PARKED) for _ in range(4)]
        ids = [r.json()["id"] for r in codes if r.status_code == 202]
        assert [r.status_code for r in codes][:2] == [202, 202] and codes[-1].status_code == 429
        err = codes[-1].json()["error"]
        assert err["code"] == "rate_limited" and "writes" in err["message"]
        # the writes are spent; the reads are not
        for i in ids:
            assert c.get(f"/v1/jobs/{i}").status_code == 200
        assert c.get("/v1/jobs", params={"limit": 1}).status_code == 200
        # cancel is a write too
        assert c.cancel(ids[0]).status_code == 429
        # a key that spent its reads still submits
        d = Client(base, k2)
        reads = [d.get("/v1/jobs", params={"limit": 1}).status_code for _ in range(8)]
        assert reads[:5] == [200] * 5 and reads[-1] == 429, reads
        assert "reads" in d.get("/v1/kernels").json()["error"]["message"]
        r = d.post_job(PARKED)
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    cancel_all(stack.client(key=k1), ids[:-1])
    stack.client(key=k2).cancel(ids[-1])


@pytest.mark.timeout(120)
def test_polling_300_jobs_with_one_key_is_not_throttled_at_the_defaults(admin, stack):
    submitter, poller = new_keys(admin, 2)
    sub = stack.client(key=submitter)   # the stack's gateway: generous limits
    ids = []
    for _ in range(300):
        r = sub.post_job(PARKED)
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    try:
        with stack.second_gateway("gateway-defaults", **DEFAULTS) as base:
            s = requests.Session()
            h = {"Authorization": "Bearer " + poller}
            codes = [s.get(f"{base}/v1/jobs/{i}", headers=h, timeout=10).status_code for i in ids]
            assert codes.count(200) == 300, {c: codes.count(c) for c in set(codes)}
            # and the same key can still submit at once
            r = s.post(f"{base}/v1/jobs", json=PARKED, headers=h, timeout=10)
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
    finally:
        cancel_all(sub, ids)
