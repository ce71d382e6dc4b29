"""Tenants see only their own jobs; keys are checked on every request."""

import json
import time

import pytest

import stack as stk
from stack import Client


@pytest.fixture(scope="module")
def a_job(stack):
    a = stack.client("A")
    return a.run("sleep", {"seconds": 0})


def test_other_tenant_gets_404_on_get_result_and_cancel(B, a_job):
    for r in (B.get(f"/v1/jobs/{a_job['id']}"), B.result(a_job["id"], "json"),
              B.cancel(a_job["id"])):
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "not_found"


def test_other_tenant_cancel_leaves_job_untouched(A, B, stack):
    busy = [A.submit("sleep", {"seconds": 5}) for _ in stack.node_names]
    for j in busy:
        A.wait(j["id"], 10, states=("running",))
    q = A.submit("sleep", {"seconds": 0})
    assert B.cancel(q["id"]).status_code == 404
    assert A.job(q["id"])["state"] == "queued"


def test_other_tenant_list_does_not_show_jobs(A, B, a_job):
    B.run("sleep", {"seconds": 0})
    a_ids = {j["id"] for j in A.list(limit=1000).json()["jobs"]}
    b_jobs = B.list(limit=1000).json()["jobs"]
    assert a_job["id"] in a_ids
    assert b_jobs, "B's own job must be listed"
    assert not a_ids & {j["id"] for j in b_jobs}


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/kernels", "/v1/nodes"])
def test_missing_key_is_401(anon, path):
    r = anon.get(path)
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthenticated"


def test_missing_key_on_submit_is_401(anon, stack):
    before = stack.count_jobs()
    r = anon.post("/v1/jobs", json={"kernel": "sleep", "params": {"seconds": 0}})
    assert r.status_code == 401, r.text
    assert stack.count_jobs() == before


@pytest.mark.parametrize("header", ["Bearer nope", "Bearer ", "Basic Zm9vOmJhcg==", "nope"])
def test_invalid_key_is_401(stack, header):
    c = Client(stack.base)
    r = c.get("/v1/jobs", headers={"Authorization": header})
    assert r.status_code == 401, f"{header!r}: {r.status_code} {r.text}"
    assert r.json()["error"]["code"] == "unauthenticated"


def test_cluster_token_is_not_an_api_key(stack):
    r = Client(stack.base, stack.cluster_token).get("/v1/jobs")
    assert r.status_code == 401, r.text
    # nor is a node's credential
    r = Client(stack.base, stack.node_credential(stack.node_names[0])).get("/v1/jobs")
    assert r.status_code == 401, r.text


def test_revoked_key_is_401_within_a_second(stack):
    key = stack.create_key("C")
    c = stack.client(key=key)
    assert c.get("/v1/jobs").status_code == 200
    r = stack.revoke_key(key)
    assert r.returncode == 0, r.stderr
    # the CLI writes PostgreSQL only; the gateway reuses a key's answer for
    # at most --key-cache-ms (500 ms by default, never more than 1 s)
    deadline = time.monotonic() + 1.0
    while (r := c.get("/v1/jobs")).status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.status_code == 401, f"still {r.status_code} a second after the revocation: {r.text}"
    assert r.json()["error"]["code"] == "unauthenticated"


def test_revoking_unknown_key_exits_1(stack):
    r = stack.revoke_key("kl_this_key_does_not_exist")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)


def test_cli_refuses_a_whole_key_in_its_arguments_and_revokes_by_id_or_prefix(stack):
    """A whole key in argv is readable by every user of the host (ps): the
    CLI refuses it and revokes nothing; it takes the key on stdin, an id or
    a prefix."""
    key = stack.create_key("C")
    c = stack.client(key=key)
    r = stack.gateway_cli("keys", "revoke", key)
    assert r.returncode == 2 and "stdin" in r.stderr, (r.returncode, r.stderr)
    assert key not in r.stderr
    assert c.get("/v1/jobs").status_code == 200, "a refused command revoked the key"
    # by id (GET /v1/keys lists ids with prefixes, never keys)
    listed = stack.admin.get("/v1/keys", params={"tenant": "C"}).json()["keys"]
    mine = [k for k in listed if k["prefix"] == key[:11] and k["revoked_at"] is None]
    assert len(mine) == 1 and key not in json.dumps(listed), listed
    r = stack.gateway_cli("keys", "revoke", str(mine[0]["id"]))
    assert r.returncode == 0, r.stderr
    stk.wait_until(lambda: c.get("/v1/jobs").status_code == 401, 2, 0.05, "the key refused")
    # by prefix
    key2 = stack.create_key("C")
    r = stack.gateway_cli("keys", "revoke", key2[:11])
    assert r.returncode == 0, r.stderr
    r = stack.gateway_cli("keys", "revoke", key2[:11])
    assert r.returncode == 1, r.stderr


def test_second_key_of_same_tenant_sees_same_jobs(stack, a_job):
    c = stack.client(key=stack.create_key("A"))
    assert c.job(a_job["id"])["id"] == a_job["id"]


def test_keys_are_distinct(stack):
    assert len(set(stack.keys.values())) == len(stack.keys)
