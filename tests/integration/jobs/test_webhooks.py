"""Webhooks: a job's state changes POSTed to its webhook, signed with the
tenant's secret (Standard Webhooks), retried with back-off from a durable
outbox that survives a gateway restart, visible per job; URLs that lead to
internal addresses are refused at submit."""

import base64
import concurrent.futures
import hashlib
import hmac
import json
import signal
import socket
import threading
import time
import urllib.parse

import pytest

import stack as stk

X = {"dtype": "float32", "shape": [4], "data": [1, 2, 3, 4]}
Y = {"dtype": "float32", "shape": [4], "data": [1, 1, 1, 1]}


@pytest.fixture
def receiver():
    made = []

    def make(fail_first=0):
        r = stk.HookReceiver(fail_first)
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
    "http://[64:ff9b:1::a00:1]/", "http://[2002:a00:1::1]/", "http://[2001:0:4136:e378::1]/",
    "http://[100::1]/",
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
    assert "does not deliver there" in err["message"] and "not allowed" in err["message"]
    # the refusal names no address nor the kind of network it is in
    msg = err["message"].replace(urllib.parse.urlsplit(url).hostname, "HOST")
    for word in ("10.", "192.168", "127.", "private", "loopback", "link-local", "resolves to"):
        assert word not in msg, err
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
        # the tenant learns the address was refused, not what it was
        assert second["error"] == "address refused: the address is not allowed", second
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


class BlackHoleDNS:
    """A name server on 127.0.0.1 that reads every query and never answers:
    a domain whose DNS does not answer, as a tenant may name on purpose."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.names = set()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                q, _ = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            labels, i = [], 12
            while i < len(q) and q[i]:
                labels.append(q[i + 1:i + 1 + q[i]].decode("ascii", "replace"))
                i += 1 + q[i]
            self.names.add(".".join(labels))

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


@pytest.mark.timeout(120)
def test_webhook_hosts_whose_dns_never_answers_freeze_nothing(A, B, stack, anon):
    """Twenty submits at once whose webhook hosts' name server swallows
    every query, on a gateway of 4 HTTP threads: each is held without a
    thread and gets 422 naming the webhook at the lookup's deadline, while
    the gateway answers health checks, another tenant's submit (run to its
    end by a node: lease and results) and the nodes' heartbeats. Nothing of
    the refused submits is stored."""
    dns = BlackHoleDNS()
    deadline_ms = 8000
    restart_gateway(stack, KOWLOON_WEBHOOK_DNS_SERVERS=f"127.0.0.1:{dns.port}",
                    KOWLOON_WEBHOOK_DNS_TIMEOUT_MS=str(deadline_ms), KOWLOON_HTTP_THREADS="4")
    try:
        def stored():
            return stack.psql("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM blobs),"
                              " (SELECT count(*) FROM blob_refs),"
                              " (SELECT count(*) FROM job_blob_refs),"
                              " (SELECT count(*) FROM webhook_deliveries)")[0]
        before = stored()
        admin = stack.admin

        def beats():  # of the stack's own nodes (others' tests may have left some down)
            return {n["name"]: n["last_heartbeat"] for n in admin.nodes()
                    if n["name"] in stack.node_names}
        hb0 = beats()
        assert set(hb0) == set(stack.node_names), hb0
        big = {"dtype": "float32", "shape": [32768], "b64": base64.b64encode(
            b"\0" * 131072).decode()}  # past the inline limit: a blob file until refused

        def submit(i):
            t0 = time.monotonic()
            r = A.post_job({"kernel": "saxpy", "params": {"a": 1.0},
                            "inputs": {"x": big, "y": big},
                            "webhook": f"http://h{i}.blackhole.test/hook"})
            return r, time.monotonic() - t0

        with concurrent.futures.ThreadPoolExecutor(20) as ex:
            futs = [ex.submit(submit, i) for i in range(20)]
            want = {f"h{i}.blackhole.test" for i in range(20)}
            stk.wait_until(lambda: want <= dns.names, 20, 0.05, "the 20 lookups to be asked")
            # every worker thread would be held by now if lookups blocked
            assert anon.get("/healthz").status_code == 200
            j = B.run("saxpy", {"a": 2.0}, {"x": X, "y": Y}, timeout=30)
            assert j["state"] == "succeeded", j
            stk.wait_until(lambda: all(beats()[n] != hb0[n] for n in hb0), 20, 0.1,
                           "a heartbeat of every node")
            pending = sum(not f.done() for f in futs)
            assert pending > 0, "the lookups ended before the rest was served"
            results = [f.result() for f in futs]
        for r, took in results:
            assert r.status_code == 422, r.text
            err = r.json()["error"]
            assert err["code"] == "invalid_argument" and err["field"] == "webhook", err
            assert "did not resolve within" in err["message"], err
            assert took < deadline_ms / 1000 + 5, f"answered after {took:.1f} s"
        after = stored()
        assert int(after[0]) == int(before[0]) + 1, "B's job only"
        assert after[1:] == before[1:], "the refused submits left blobs or deliveries"
    finally:
        dns.close()
        restart_gateway(stack)


class BlackHoleReceiver:
    """Accepts connections and never reads nor answers: a receiver that
    hangs every attempt for its whole time-out. Counts the connections it
    holds open at once (the most it saw, too)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.open, self.most, self.accepted = [], 0, 0
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        import select
        while not self.stop:
            r, _, _ = select.select([self.sock] + self.open, [], [], 0.05)
            for s in r:
                if s is self.sock:
                    c, _ = self.sock.accept()
                    self.open.append(c)
                    self.accepted += 1
                    self.most = max(self.most, len(self.open))
                else:
                    try:
                        data = s.recv(65536, socket.MSG_PEEK)
                    except OSError:
                        data = b""
                    if not data:  # closed by the gateway
                        self.open.remove(s)
                        s.close()
                    else:  # read and drop, never answer
                        s.recv(65536)

    def close(self):
        self.stop = True
        self.thread.join()
        for s in self.open:
            s.close()
        self.sock.close()


@pytest.mark.timeout(120)
def test_a_tenants_black_hole_receiver_does_not_delay_another_tenants_delivery(A, B, stack,
                                                                                 receiver):
    """Tenant A's receiver hangs every attempt (30 s time-out); A has 24
    deliveries due, more than a gateway's slots. Tenant B's delivery, due
    after all of them, still arrives within seconds: A holds at most its
    in-flight cap of the slots, and a slot that frees starts the next due
    delivery at once (no batch waits for its slowest member)."""
    hole = BlackHoleReceiver()
    restart_gateway(stack, KOWLOON_WEBHOOK_TIMEOUT_S="30", KOWLOON_WEBHOOK_MAX_INFLIGHT="8",
                    KOWLOON_WEBHOOK_TENANT_INFLIGHT="3")
    try:
        ids = [A.submit("saxpy", {"a": 1.0}, {"x": X, "y": Y}, webhook=hole.url)["id"]
               for _ in range(24)]
        for i in ids:
            A.wait(i)
        stk.wait_until(lambda: hole.accepted >= 3, 20, 0.05, "A's first attempts to hang")
        rx = receiver()
        j = B.run("saxpy", {"a": 1.0}, {"x": X, "y": Y}, webhook=rx.url)
        t0 = time.monotonic()
        stk.wait_until(lambda: rx.count() == 1, 10, 0.05, "B's delivery")
        took = time.monotonic() - t0
        assert json.loads(rx.requests[0][1])["data"]["id"] == j["id"]
        # A's attempts were still hanging, and never more of them than its cap
        assert len(hole.open) > 0 and hole.accepted < 24, (len(hole.open), hole.accepted)
        assert hole.most <= 3, f"tenant A held {hole.most} slots at once (cap 3)"
        assert took < 10
        # A's deliveries are pending, none failed for the other's sake
        states = stack.psql("SELECT state, count(*) FROM webhook_deliveries WHERE job_id IN ("
                            + ",".join(f"'{i}'" for i in ids) + ") GROUP BY state")
        assert dict(states).keys() <= {"pending"}, states
    finally:
        restart_gateway(stack)
        hole.close()
        # what A left pending must not keep later tests' deliveries waiting
        stack.psql("UPDATE webhook_deliveries SET state = 'failed', finished_at = now()"
                   f" WHERE url = '{hole.url}' AND state = 'pending'")


def test_ended_deliveries_are_trimmed_after_the_retention(A, stack, receiver):
    """Delivered and failed deliveries older than --webhook-retention-s go,
    with their attempts; pending ones and recent ended ones stay."""
    rx = receiver()
    old_ok, old_failed, recent, pending = (
        A.run("saxpy", {"a": 1.0}, {"x": X, "y": Y}, webhook=rx.url)["id"] for _ in range(4))
    stk.wait_until(lambda: rx.count() == 4, 20, 0.05, "four deliveries")
    stk.wait_until(lambda: stack.psql_value(
        "SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered' AND job_id IN"
        f" ('{old_ok}', '{old_failed}', '{recent}', '{pending}')") == "4", 10, 0.05, "delivered")
    stack.psql(f"UPDATE webhook_deliveries SET finished_at = now() - interval '2 hours'"
               f" WHERE job_id IN ('{old_ok}', '{old_failed}')")
    stack.psql(f"UPDATE webhook_deliveries SET state = 'failed' WHERE job_id = '{old_failed}'")
    stack.psql(f"UPDATE webhook_deliveries SET state = 'pending', finished_at = NULL,"
               f" next_at = now() + interval '1 day' WHERE job_id = '{pending}'")
    restart_gateway(stack, KOWLOON_WEBHOOK_RETENTION_S="3600")
    try:
        def left(job):
            return int(stack.psql_value(
                f"SELECT count(*) FROM webhook_deliveries WHERE job_id = '{job}'"))
        stk.wait_until(lambda: left(old_ok) == 0 and left(old_failed) == 0, 20, 0.1,
                       "the old ended deliveries to be trimmed")
        assert left(recent) == 1 and left(pending) == 1
        assert deliveries(A, old_ok)["deliveries"] == []
        assert int(stack.psql_value(
            "SELECT count(*) FROM webhook_attempts a LEFT JOIN webhook_deliveries d"
            " ON d.id = a.delivery_id WHERE d.id IS NULL")) == 0
    finally:
        stack.psql(f"DELETE FROM webhook_deliveries WHERE job_id = '{pending}'")
        restart_gateway(stack)
