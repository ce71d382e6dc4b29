"""GET /v1/jobs: filters, newest-first order, cursor pagination that stays
consistent while jobs arrive, and limit bounds."""

import uuid

import numpy as np
import pytest

from stack import tensor


def walk(client, limit, on_page=None, max_pages=200, **filters):
    """Every job of a listing, page by page; on_page runs between fetches."""
    jobs, cursor, pages = [], None, 0
    while True:
        params = dict(filters, limit=limit)
        if cursor:
            params["cursor"] = cursor
        r = client.list(**params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert "jobs" in body and "next_cursor" in body, body
        assert len(body["jobs"]) <= limit
        jobs.extend(body["jobs"])
        cursor = body["next_cursor"]
        pages += 1
        assert pages <= max_pages, "pagination does not end"
        if not cursor:
            return jobs
        if on_page:
            on_page()


def newest_first(jobs):
    keys = [j["created_at"] for j in jobs]
    return all(a >= b for a, b in zip(keys, keys[1:]))


def test_list_filters_by_label_kernel_and_state(A):
    tag = uuid.uuid4().hex[:12]
    sl = [A.run("sleep", {"seconds": 0}, labels={"suite": tag, "kind": "sleep"}) for _ in range(2)]
    sx = A.run("saxpy", {"a": 1}, {"x": tensor(np.ones(2)), "y": tensor(np.ones(2))},
               labels={"suite": tag, "kind": "saxpy"})
    failed = A.submit("sleep", {"seconds": 5}, timeout_s=1, labels={"suite": tag, "kind": "sleep"})
    failed = A.wait(failed["id"], 15)
    assert failed["state"] == "failed"

    ids = lambda r: [j["id"] for j in r.json()["jobs"]]  # noqa: E731
    r = A.list(label=f"suite:{tag}")
    assert r.status_code == 200, r.text
    assert sorted(ids(r)) == sorted([j["id"] for j in sl] + [sx["id"], failed["id"]])

    r = A.list(label=f"suite:{tag}", kernel="saxpy")
    assert ids(r) == [sx["id"]]
    assert all(j["kernel"] == "saxpy" for j in A.list(kernel="saxpy", limit=1000).json()["jobs"])

    r = A.list(label=f"suite:{tag}", state="failed")
    assert ids(r) == [failed["id"]]
    r = A.list(label=f"suite:{tag}", state="succeeded", kernel="sleep")
    assert sorted(ids(r)) == sorted(j["id"] for j in sl)
    assert all(j["state"] == "succeeded"
               for j in A.list(state="succeeded", limit=1000).json()["jobs"])

    r = A.list(label="kind:saxpy")  # label filter across the tenant
    assert sx["id"] in ids(r)
    assert all(j["labels"].get("kind") == "saxpy" for j in r.json()["jobs"])

    assert A.list(label=f"suite:{tag}-none").json()["jobs"] == []


def test_list_is_newest_first(A):
    tag = uuid.uuid4().hex[:12]
    submitted = [A.submit("sleep", {"seconds": 0}, labels={"suite": tag})["id"] for _ in range(5)]
    r = A.list(label=f"suite:{tag}")
    got = [j["id"] for j in r.json()["jobs"]]
    assert got == submitted[::-1], "newest first"
    assert newest_first(r.json()["jobs"])


def test_pagination_walks_all_jobs_once_while_new_jobs_arrive(A):
    tag = uuid.uuid4().hex[:12]
    before = [A.submit("sleep", {"seconds": 0}, labels={"suite": tag})["id"] for _ in range(10)]
    arrived = []

    def submit_more():
        arrived.append(A.submit("sleep", {"seconds": 0}, labels={"suite": tag})["id"])

    jobs = walk(A, 3, on_page=submit_more, label=f"suite:{tag}")
    ids = [j["id"] for j in jobs]
    assert len(ids) == len(set(ids)), f"a job appeared twice: {ids}"
    missing = set(before) - set(ids)
    assert not missing, f"pagination skipped {missing}"
    assert set(ids) <= set(before) | set(arrived)
    assert newest_first(jobs)
    # the jobs that existed when the walk began come in exact reverse order
    assert [i for i in ids if i in set(before)] == before[::-1]


def test_pagination_of_whole_tenant_has_no_duplicates(A):
    for _ in range(4):
        A.submit("sleep", {"seconds": 0})
    small = walk(A, 3, max_pages=1000)
    ids = [j["id"] for j in small]
    assert len(ids) == len(set(ids))
    big = A.list(limit=1000).json()["jobs"]
    if len(ids) <= 1000:
        assert [j["id"] for j in big] == ids, "limit=3 pages differ from one limit=1000 page"


@pytest.mark.parametrize("limit", ["1001", "0", "-1", "abc"])
def test_list_limit_out_of_range_is_400(A, limit):
    r = A.list(limit=limit)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_argument"


def test_list_limit_1000_is_allowed(A):
    r = A.list(limit=1000)
    assert r.status_code == 200, r.text


def test_list_unknown_state_is_400(A):
    r = A.list(state="sleeping")
    assert r.status_code == 400, r.text


def test_list_malformed_label_filter_is_400(A):
    r = A.list(label="nocolon")
    assert r.status_code == 400, r.text


def test_list_bad_cursor_is_400(A):
    r = A.list(cursor="!!not-a-cursor!!")
    assert r.status_code == 400, r.text


def test_list_default_limit_is_100(A):
    for _ in range(10):
        if len(A.list(limit=1000).json()["jobs"]) >= 101:
            break
        for _ in range(20):
            A.submit("sleep", {"seconds": 0})
    body = A.list().json()
    assert len(body["jobs"]) == 100
    assert body["next_cursor"]
