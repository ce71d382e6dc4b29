"""Webhooks: a job's state changes POSTed to its webhook, signed with the
tenant's secret (Standard Webhooks), retried with back-off from a durable
outbox that survives a gateway restart, visible per job; URLs that lead to
internal addresses are refused at submit."""

import base64
import hashlib
import hmac
import json
import signal
import threading
import time

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import stack as stk

X = {"dtype": "float32", "shape": [4], "data": [1, 2, 3, 4]}
Y = {"dtype": "float32", "shape": [4], "data": [1, 1, 1, 1]}


class Receiver:
    """An HTTP receiver on 127.0.0.1 that answers fail_first requests with
    500, then 204; it keeps every request (headers and body)."""

    def __init__(self, fail_first=0):
        self.fail_first = fail_first
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    outer.requests.append((dict(self.headers.items()), body))
                    n = len(outer.requests)
                self.send_response(500 if n <= outer.fail_first else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def count(self):
        with self.lock:
            return len(self.requests)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(fail_first=0):
        r = Receiver(fail_first)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def deliveries(client, job_id):
    r = client.get(f"/v1/jobs/{job_id}/deliveries")
    assert r.status_code == 200, r.text
    return r.json()


def wait_attempts(client, job_id, n, timeout=30):
    """The deliveries object once its first delivery has n attempts."""
    def enough():
        d = deliveries(client, job_id)["deliveries"]
        return d and len(d[0]["attempts"]) >= n
    stk.wait_until(enough, timeout, 0.05, f"{n} webhook attempts of {job_id}")
    return deliveries(client, job_id)


def verify(secret, headers, body):
    """Checks a request's Standard Webhooks signature as a receiver would."""
    key = base64.b64decode(secret[len("whsec_"):])
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    sigs = [s.split(",", 1)[1] for s in headers["webhook-signature"].split() if s.startswith("v1,")]
    return any(hmac.compare_digest(want, s) for s in sigs)


def test_delivery_retried_across_a_gateway_restart_arrives_once_signed(A, stack, receiver):
    rx = receiver(fail_first=2)
    j = A.submit("saxpy", {"a": 2.0}, {"x": X, "y": Y}, webhook=rx.url)
    # the first attempt fails (500): the gateway is stopped before the next
    wait_attempts(A, j["id"], 1)
    stack.gateway.stop(signal.SIGINT)
    assert rx.count() == 1, "the second attempt came before the restart"
    stack.gateway = stack.start_gateway("gateway", stack.gw_port)
    d = wait_attempts(A, j["id"], 3, timeout=40)
    stk.wait_until(lambda: deliveries(A, j["id"])["deliveries"][0]["state"] == "delivered", 10,
                   0.05, "delivered")
    d = deliveries(A, j["id"])
    assert d["webhook"] == rx.url
    assert d["webhook_events"] == ["succeeded", "failed", "cancelled"]
    assert len(d["deliveries"]) == 1, d
    dl = d["deliveries"][0]
    assert dl["event"] == "succeeded" and dl["state"] == "delivered"
    assert [a["status"] for a in dl["attempts"]] == [500, 500, 204]
    assert [a["n"] for a in dl["attempts"]] == [1, 2, 3]
    assert dl["attempts"][0]["error"] == "HTTP 500" and dl["attempts"][2]["error"] is None
    assert all(a["duration_ms"] >= 0 for a in dl["attempts"])
    stk.ts(dl["finished_at"])
    time.sleep(1)  # nothing more comes once delivered
    assert rx.count() == 3
    secret = A.get("/v1/webhook-secret").json()["secret"]
    ids = set()
    for headers, body in rx.requests:
        headers = {k.lower(): v for k, v in headers.items()}
        assert verify(secret, headers, body), headers
        assert abs(int(headers["webhook-timestamp"]) - time.time()) < 300
        assert headers["content-type"] == "application/json"
        ids.add(headers["webhook-id"])
        payload = json.loads(body)
        assert payload["type"] == "job.succeeded"
        assert payload["data"]["id"] == j["id"] and payload["data"]["state"] == "succeeded"
        stk.ts(payload["timestamp"])
    assert ids == {dl["id"]}, "every attempt of one delivery carries its one webhook-id"
    assert len({body for _, body in rx.requests}) == 1, "every attempt sends the same body"
    # a body or a secret other than the signed ones does not verify
    headers, body = rx.requests[-1]
    headers = {k.lower(): v for k, v in headers.items()}
    assert not verify(secret, headers, body + b" ")
    assert not verify("whsec_" + base64.b64encode(b"x" * 32).decode(), headers, body)


def test_webhook_events_choose_what_is_delivered(A, stack, receiver):
    rx = receiver()
    j = A.run("saxpy", {"a": 1.0}, {"x": X, "y": Y}, webhook=rx.url,
              webhook_events=["queued", "running", "succeeded"])
    stk.wait_until(lambda: len(deliveries(A, j["id"])["deliveries"]) == 3 and all(
        x["state"] == "delivered" for x in deliveries(A, j["id"])["deliveries"]), 20, 0.05,
        "three deliveries")
    assert [x["event"] for x in deliveries(A, j["id"])["deliveries"]] == [
        "queued", "running", "succeeded"]
    types = sorted(json.loads(b)["type"] for _, b in rx.requests)
    assert types == ["job.queued", "job.running", "job.succeeded"]
    # each delivery reports the job_events row its state change wrote
    for x in deliveries(A, j["id"])["deliveries"]:
        ev = stack.psql_value(f"SELECT job_id || ' ' || state FROM job_events WHERE id = {x['event_id']}")
        assert ev == f"{j['id']} {x['event']}"


def test_multipart_submit_takes_a_webhook(A, receiver):
    rx = receiver()
    job = {"kernel": "saxpy", "params": {"a": 1.0}, "webhook": rx.url, "inputs": {
        "x": {"dtype": "float32", "shape": [4], "part": "x"}, "y": Y}}
    r = A.post("/v1/jobs", files=[
        ("job", (None, json.dumps(job), "application/json")),
        ("x", ("x.bin", b"\0" * 16, "application/octet-stream"))])
    assert r.status_code == 202, r.text
    A.wait(r.json()["id"])
    stk.wait_until(lambda: rx.count() == 1, 20, 0.05, "the delivery")
    assert json.loads(rx.requests[0][1])["data"]["id"] == r.json()["id"]


def test_job_without_webhook_has_no_deliveries(A):
    j = A.run("saxpy", {"a": 1.0}, {"x": X, "y": Y})
    assert deliveries(A, j["id"]) == {"job_id": j["id"], "webhook": None,
                                      "webhook_events": None, "deliveries": []}


@pytest.mark.parametrize("url", [
    "http://10.1.2.3/hook", "http://192.168.0.10/", "http://172.16.5.5/", "http://100.64.0.1/",
    "http://169.254.169.254/latest/meta-data/", "http://127.0.0.2:8080/", "http://0.0.0.0/",
    "http://[::1]:8080/", "http://[fd00::1]/", "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/",
])
def test_internal_address_is_refused_and_records_nothing(A, stack, url):
    before = stack.count_jobs()
    r = A.post_job({"kernel": "saxpy", "params": {"a": 1.0}, "inputs": {"x": X, "y": Y},
                    "webhook": url})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["field"] == "webhook" and err["code"] == "invalid_argument"
    assert "does not deliver there" in err["message"]
    assert stack.count_jobs() == before


@pytest.mark.parametrize("extra,status,field", [
    ({"webhook": "ftp://127.0.0.1/x"}, 422, "webhook"),
    ({"webhook": "127.0.0.1/hook"}, 422, "webhook"),
    ({"webhook": "http://127.0.0.1/" + "a" * 2100}, 422, "webhook"),
    ({"webhook": "http://no-such-host.invalid/hook"}, 422, "webhook"),
    ({"webhook": 7}, 400, "webhook"),
    ({"webhook_events": ["succeeded"]}, 422, "webhook_events"),
    ({"webhook": "http://127.0.0.1/h", "webhook_events": []}, 400, "webhook_events"),
    ({"webhook": "http://127.0.0.1/h", "webhook_events": ["done"]}, 400, "webhook_events"),
    ({"webhook": "http://127.0.0.1/h", "webhook_events": ["failed", "failed"]}, 400,
     "webhook_events"),
])
def test_bad_webhook_fields_are_refused(A, stack, extra, status, field):
    before = stack.count_jobs()
    r = A.post_job({"kernel": "saxpy", "params": {"a": 1.0}, "inputs": {"x": X, "y": Y}, **extra})
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field
    assert stack.count_jobs() == before


def test_secrets_are_per_tenant_and_rotate(A, B, anon):
    a1 = A.get("/v1/webhook-secret")
    assert a1.status_code == 200 and a1.headers["Cache-Control"] == "no-store"
    a1 = a1.json()
    assert a1["secret"].startswith("whsec_") and len(base64.b64decode(a1["secret"][6:])) == 32
    stk.ts(a1["created_at"])
    assert A.get("/v1/webhook-secret").json()["secret"] == a1["secret"], "read twice, one secret"
    b1 = B.get("/v1/webhook-secret").json()
    assert b1["secret"] != a1["secret"]
    a2 = A.post("/v1/webhook-secret")
    assert a2.status_code == 200
    assert a2.json()["secret"] not in (a1["secret"], b1["secret"])
    assert A.get("/v1/webhook-secret").json()["secret"] == a2.json()["secret"]
    assert B.get("/v1/webhook-secret").json()["secret"] == b1["secret"]
    assert anon.get("/v1/webhook-secret").status_code == 401


def test_deliveries_of_another_tenants_job_are_not_found(A, B, receiver):
    rx = receiver()
    j = A.run("saxpy", {"a": 1.0}, {"x": X, "y": Y}, webhook=rx.url)
    r = B.get(f"/v1/jobs/{j['id']}/deliveries")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert B.get("/v1/jobs/not-a-uuid/deliveries").status_code == 404
    stk.wait_until(lambda: rx.count() == 1, 20, 0.05, "A's delivery")


def restart_gateway(stack, **env):
    """The stack's gateway stopped at once (SIGINT: no drain) and started
    again on its port with env on top of the stack's settings."""
    stack.gateway.stop(signal.SIGINT)
    stack.gateway = stack.start_gateway("gateway", stack.gw_port, **env)


def test_address_is_checked_again_when_the_delivery_connects(A, stack, receiver):
    """What defeats DNS rebinding: the address connected is checked, not
    only the one the name had at submit. A gateway whose policy refuses
    127.0.0.1 makes its attempt without connecting; the next gateway that
    allows it delivers."""
    rx = receiver(fail_first=1)
    j = A.submit("saxpy", {"a": 2.0}, {"x": X, "y": Y}, webhook=rx.url)
    wait_attempts(A, j["id"], 1)
    try:
        restart_gateway(stack, KOWLOON_WEBHOOK_ALLOW_NETS="")
        d = wait_attempts(A, j["id"], 2)
        second = d["deliveries"][0]["attempts"][1]
        assert second["status"] is None
        assert second["error"] == "address refused: 127.0.0.1 is a loopback address", second
        assert rx.count() == 1, "the refused attempt reached the receiver"
    finally:
        restart_gateway(stack)
    wait_attempts(A, j["id"], 3, timeout=40)
    stk.wait_until(lambda: deliveries(A, j["id"])["deliveries"][0]["state"] == "delivered", 10,
                   0.05, "delivered")
    assert rx.count() == 2


def test_delivery_past_its_max_age_fails_for_good(A, stack):
    """Attempts that get no answer are recorded with the transport error;
    once the next retry would come past --webhook-max-age-s (a day) after
    the event, the delivery is failed and never tried again."""
    url = f"http://127.0.0.1:{stk.free_port()}/closed"
    j = A.run("saxpy", {"a": 1.0}, {"x": X, "y": Y}, webhook=url)
    d = wait_attempts(A, j["id"], 1)["deliveries"][0]
    assert d["state"] == "pending" and d["next_attempt_at"] is not None
    first = d["attempts"][0]
    assert first["status"] is None and first["error"], first
    # the event is made a day and a minute old: the next failure is its last
    stack.psql(f"UPDATE webhook_deliveries SET created_at = now() - interval '1 day 1 minute'"
               f" WHERE job_id = '{j['id']}'")
    stk.wait_until(lambda: deliveries(A, j["id"])["deliveries"][0]["state"] == "failed", 20,
                   0.05, "the delivery failed")
    d = deliveries(A, j["id"])["deliveries"][0]
    assert len(d["attempts"]) == 2 and d["next_attempt_at"] is None
    stk.ts(d["finished_at"])
    time.sleep(3.5)
    assert len(deliveries(A, j["id"])["deliveries"][0]["attempts"]) == 2
