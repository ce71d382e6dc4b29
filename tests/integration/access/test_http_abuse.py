"""Hostile HTTP: clients that trickle their headers, hold many connections,
send oversized heads, lie about or repeat Content-Length, stream chunked
bodies past the limit, or send JSON that is not UTF-8. Each case must end in
a 4xx (a JSON error wherever the gateway still answers itself) or a clean
close, never a 2xx, a 5xx, a hang, a new job row or a dead gateway, and
other clients must be served meanwhile.

Raw sockets throughout. The cases run against a second gateway on the
suite's PostgreSQL and Redis with short timeouts and small limits; slow and
limit-testing clients bind other loopback addresses (127.0.0.x) so that the
per-IP limit sorts them apart from the normal client on 127.0.0.1."""

import json
import select
import socket
import threading
import time

import pytest

from stack import free_port

TIMEOUT_S = 3       # --conn-timeout-s of the abuse gateway
BODY_TIMEOUT_S = 2  # --body-timeout-s
PER_IP = 6          # --max-conns-per-ip
RESERVED_PER_IP = 8 # connections an address may open past PER_IP for health checks and nodes
RESERVED_SHARE = 16 # such connections in all: an eighth of MAX_CONNS, at least 2 addresses' worth
MAX_CONNS = 30      # --max-connections
MAX_HEADER_KB = 8   # --max-header-kb
MAX_BODY_MB = 1     # --max-body-mb
SLACK_S = 3         # allowance for a loaded 2-core machine

JOB = json.dumps({"kernel": "saxpy", "params": {"a": 2.0},
                  "inputs": {"x": {"dtype": "float32", "shape": [2], "data": [1, 2]},
                             "y": {"dtype": "float32", "shape": [2], "data": [3, 4]}}}).encode()


class Gateway:
    def __init__(self, stack, port, proc):
        self.stack, self.port, self.proc = stack, port, proc
        self.base = f"http://127.0.0.1:{port}"
        self.key = stack.keys["A"]
        self.auth = b"Authorization: Bearer " + self.key.encode() + b"\r\n"


@pytest.fixture(scope="module")
def gw(stack):
    port = free_port()
    proc = stack.start_gateway("gateway-abuse", port, KOWLOON_CONN_TIMEOUT_S=TIMEOUT_S,
                               KOWLOON_MAX_CONNS_PER_IP=PER_IP,
                               KOWLOON_MAX_CONNECTIONS=MAX_CONNS,
                               KOWLOON_MAX_HEADER_KB=MAX_HEADER_KB,
                               KOWLOON_MAX_BODY_MB=MAX_BODY_MB,
                               KOWLOON_BODY_TIMEOUT_S=BODY_TIMEOUT_S)
    yield Gateway(stack, port, proc)
    proc.stop()


@pytest.fixture(autouse=True)
def _gateway_survives(request):
    """After every case: the gateway process lives and answers a normal
    client at once."""
    yield
    if "gw" in request.fixturenames:
        g = request.getfixturevalue("gw")
        assert g.proc.alive(), f"the gateway died (exit {g.proc.popen.returncode})"
        healthz_until_ok(g, SLACK_S)


# ---------------------------------------------------------------- raw HTTP

def connect(g, src="127.0.0.1", timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", g.port))
    return s


def read_all(s, timeout=10, done=None):
    """Everything the server sends until it closes: (bytes, how) where how
    is "eof", "reset" or "timeout" — or "done" as soon as done(bytes so
    far) is true."""
    out = b""
    deadline = time.monotonic() + timeout
    while True:
        if done is not None and done(out):
            return out, "done"
        left = deadline - time.monotonic()
        if left <= 0:
            return out, "timeout"
        s.settimeout(left)
        try:
            b = s.recv(65536)
        except socket.timeout:
            return out, "timeout"
        except (ConnectionResetError, BrokenPipeError):
            return out, "reset"
        if not b:
            return out, "eof"
        out += b


def one_response_in(raw):
    """Whether raw holds a whole response: its head and Content-Length bytes."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    return len(rest) >= n


def read_one(s, timeout=10):
    """One whole response on a connection the server keeps open."""
    return read_all(s, timeout, one_response_in)


class Reply:
    """The first response in raw bytes (MHD's own error pages may be
    followed by garbage, see test_malformed_content_length_is_400)."""

    def __init__(self, raw, how):
        self.raw, self.how = raw, how
        self.status, self.headers, self.body = None, {}, b""
        if not raw.startswith(b"HTTP/1."):
            return
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        n = int(self.headers.get("content-length", len(rest)))
        self.body = rest[:n]

    def json(self):
        assert self.headers.get("content-type", "").startswith("application/json"), self
        return json.loads(self.body.decode("utf-8"))  # a JSON error is UTF-8 whatever came in

    def __repr__(self):
        return f"<{self.status} {self.how} {self.raw[:300]!r}>"


def exchange(g, data, src="127.0.0.1", timeout=10, shut=False):
    """Sends data on a new connection and reads until the server closes.
    A server that closes while we still send is a clean close too."""
    with connect(g, src, timeout) as s:
        try:
            s.sendall(data)
            if shut:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return Reply(*read_all(s, timeout))


def post_jobs(g, headers, body, **kw):
    return exchange(g, b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                    b"Content-Type: application/json\r\n" + g.auth + headers + b"\r\n" + body,
                    **kw)


def healthz(g, src="127.0.0.1", timeout=5):
    return exchange(g, b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                    src, timeout)


def healthz_until_ok(g, within):
    deadline = time.monotonic() + within
    while True:
        r = healthz(g)
        if r.status == 200:
            return
        assert time.monotonic() < deadline, f"/healthz still not served after {within}s: {r}"
        time.sleep(0.1)


def assert_refused(r, statuses, code=None):
    """A 4xx of the given statuses (checked as JSON when code is given),
    or a close without any answer."""
    if r.status is None:
        assert r.raw == b"" and r.how in ("eof", "reset"), r
        return
    assert r.status in statuses, r
    if code is not None:
        assert r.json()["error"]["code"] == code, r


@pytest.fixture
def no_new_jobs(stack):
    before = stack.count_jobs()
    yield
    assert stack.count_jobs() == before, "a refused request left a job row"


# ---------------------------------------------------------------- slow clients

class Trickler(threading.Thread):
    """Holds connections that send a request line, then one byte of an
    endless header each tick, and records when the server closes each."""

    HEAD = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: "

    def __init__(self, socks, tick=0.2, limit=20):
        super().__init__(daemon=True)
        self.socks, self.tick, self.limit = list(socks), tick, limit
        self.t0 = time.monotonic()
        self.closed = {}    # index -> seconds after start
        self.answered = {}  # index -> bytes, if the server ever replied
        self.stop = threading.Event()

    def _done(self, i, data=b""):
        self.closed.setdefault(i, time.monotonic() - self.t0)
        if data:
            self.answered[i] = data

    def run(self):
        sent = 0
        while not self.stop.is_set() and len(self.closed) < len(self.socks) \
                and time.monotonic() - self.t0 < self.limit:
            live = [s for i, s in enumerate(self.socks) if i not in self.closed]
            readable, _, _ = select.select(live, [], [], 0)
            for s in readable:
                i = self.socks.index(s)
                try:
                    self._done(i, s.recv(4096))
                except OSError:
                    self._done(i)
            byte = self.HEAD if sent == 0 else b"a"
            for i, s in enumerate(self.socks):
                if i in self.closed:
                    continue
                try:
                    s.send(byte)
                except OSError:
                    self._done(i)
            sent += 1
            self.stop.wait(self.tick)

    def close(self):
        self.stop.set()
        self.join(5)
        for s in self.socks:
            s.close()

    def assert_all_cut(self, timeout_s):
        """Waits for the server to close every connection and checks that it
        closed each at timeout_s (give or take the slack) without a reply."""
        self.join(timeout_s + SLACK_S + 2)
        assert len(self.closed) == len(self.socks), \
            f"{len(self.socks) - len(self.closed)} of {len(self.socks)} trickling clients " \
            f"still connected after {time.monotonic() - self.t0:.1f}s (timeout {timeout_s}s)"
        closed = sorted(self.closed.values())
        assert timeout_s - 0.5 <= closed[0] and closed[-1] <= timeout_s + SLACK_S, closed
        assert not self.answered, \
            f"the server answered a request it had not wholly received: {self.answered}"


def open_many(g, src, n):
    return [connect(g, src, timeout=5) for _ in range(n)]


def test_trickled_headers_are_cut_off_after_the_timeout(gw):
    # a byte every 0.2 s keeps MHD's idle timer from ever firing: only the
    # header deadline ends this
    t = Trickler(open_many(gw, "127.0.0.2", 1))
    t.start()
    try:
        t.assert_all_cut(TIMEOUT_S)
    finally:
        t.close()


def test_slow_clients_do_not_starve_others(gw, stack):
    srcs = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    t = Trickler([s for src in srcs for s in open_many(gw, src, PER_IP)])
    t.start()
    try:
        time.sleep(0.3)
        for _ in range(10):
            t0 = time.monotonic()
            r = healthz(gw, timeout=5)
            assert r.status == 200, r
            assert time.monotonic() - t0 < 2, f"/healthz took {time.monotonic() - t0:.2f}s"
        client = stack.client("A", base=gw.base)
        r = client.post_job(json.loads(JOB))
        assert r.status_code == 202, r.text[:300]
        t.assert_all_cut(TIMEOUT_S)
    finally:
        t.close()


def test_per_ip_limit_answers_503_on_the_extra_connections_but_serves_health(gw):
    """Which connections are over the address's limit is decided as each is
    accepted, and the server's pool threads accept concurrently: the test
    counts them rather than expect the last ones opened."""
    socks = open_many(gw, "127.0.0.5", PER_IP + 3)
    try:
        # every connection, over the limit or not, is served a health check
        # (a reserved route) and kept
        for s in socks:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        for s in socks:
            r = Reply(*read_one(s, 5))
            assert r.status == 200, r
        # any other route: served on PER_IP of them, 503 on the 3 over it
        statuses = []
        for s in socks:
            try:
                s.sendall(b"GET /openapi.yaml HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            r = Reply(*read_all(s, 5))
            statuses.append(r.status)
            if r.status == 503:
                assert r.json()["error"]["code"] == "unavailable", r
                assert r.headers.get("retry-after") == "1", r
        assert sorted(statuses) == [200] * PER_IP + [503] * 3, statuses
        assert healthz(gw).status == 200  # another address is not limited
    finally:
        for s in socks:
            s.close()
    # the slots come back once the connections are gone
    deadline = time.monotonic() + SLACK_S
    while exchange(gw, b"GET /openapi.yaml HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                   src="127.0.0.5").status != 200:
        assert time.monotonic() < deadline, "127.0.0.5 still refused after closing its connections"
        time.sleep(0.1)


def test_past_the_per_ip_limit_an_address_gets_a_small_allowance_then_nothing(gw):
    socks = open_many(gw, "127.0.0.6", PER_IP + RESERVED_PER_IP + 3)
    try:
        # past the allowance: shut at once, without a byte; the allowance
        # kept (which ones: the order in which the pool threads accepted)
        shut = shut_now(socks, expect=3)
        assert len(shut) == 3, sorted(socks.index(x) for x in shut)
        assert shut_now(socks, within=0.3) == shut, "more than the allowance was shut"
        kept = [s for s in socks if s not in shut]
        # the allowance serves health checks (any kept connection does) ...
        s = kept[0]
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        r = Reply(*read_one(s, 1))
        assert r.status == 200, r
        # ... and the kept ones that send nothing are cut: those over the
        # limit within ~2 s, the rest at the 3 s idle timeout
        t0 = time.monotonic()
        quiet = kept[1:]
        cut = shut_now(quiet, within=2 + SLACK_S, expect=len(quiet))
        assert len(cut) == len(quiet), f"{len(quiet) - len(cut)} idle connections still open"
        assert time.monotonic() - t0 < 2 + SLACK_S
    finally:
        for s in socks:
            s.close()


def shut_now(socks, within=1.5, expect=None):
    """The sockets among socks that the server has shut (end of stream):
    polled until expect of them are (or within seconds pass), then those."""
    deadline = time.monotonic() + within
    while True:
        readable, _, _ = select.select(socks, [], [], 0.05)
        shut = []
        for s in readable:
            try:
                if s.recv(1, socket.MSG_PEEK) == b"":
                    shut.append(s)
            except OSError:
                shut.append(s)
        if (expect is not None and len(shut) >= expect) or time.monotonic() > deadline:
            return shut


def ask_health(socks):
    """Each sends a health check and keeps its connection (a served request
    starts its 2 s over-the-limit deadline again)."""
    for s in socks:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")


def all_served(socks, timeout=5):
    """The replies to ask_health on socks: whether each was a 200 (a
    connection the server shut reads as end of stream instead)."""
    return all(Reply(*read_one(s, timeout)).status == 200 for s in socks)


def served_and_shut(socks, timeout=8):
    """Asks a health check on each of socks (each just opened) and reads the
    replies: (those served, those the server shut without a reply). A
    connection over its address's limit that the server admits is served
    (its request came with it, within its 2 s); one it refuses is shut as
    it is accepted, whenever that is."""
    ask_health(socks)
    served, shut = [], []
    for s in socks:
        r = Reply(*read_one(s, timeout))
        if r.status == 200:
            served.append(s)
        elif r.raw == b"" and r.how in ("eof", "reset"):
            shut.append(s)
        else:
            raise AssertionError(f"neither served nor shut: {r.how} {r.raw[:80]!r}")
    return served, shut


class Keeper(threading.Thread):
    """Keeps connections over their address's limit open the way a health
    checker does, a served check every 0.4 s (each starts their 2 s deadline
    again), and notes it if any is not served, until stopped."""

    def __init__(self, socks):
        super().__init__(daemon=True)
        self.socks, self.lost = socks, False
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.4):
            ask_health(self.socks)
            if not all_served(self.socks):
                self.lost = True
                return

    def end(self):
        self.stop.set()
        self.join(10)
        return not self.lost


@pytest.fixture
def roomy_gw(stack):
    """A gateway with room for three addresses at their limits and over it."""
    port = free_port()
    proc = stack.start_gateway("gateway-share", port, KOWLOON_MAX_CONNS_PER_IP=PER_IP,
                               KOWLOON_MAX_CONNECTIONS=64)
    yield Gateway(stack, port, proc)
    proc.stop()


def test_one_address_cannot_take_the_reserved_share(roomy_gw):
    """Connections over their address's limit (for reserved routes) are a
    bounded share of all (an eighth of --max-connections, at least two
    addresses' allowance: 16 here): one address takes its allowance and no
    more, another still gets its own, and a third finds the share taken."""
    g = roomy_gw
    # Which of an address's connections are the ones over its limit is
    # decided as each is accepted, by whichever pool thread accepts it: the
    # test counts them rather than expect the last ones opened.
    a = open_many(g, "127.0.3.1", PER_IP + RESERVED_SHARE)
    b, c, keeper = [], [], None
    try:
        a_kept, shut = served_and_shut(a)
        assert len(shut) == RESERVED_SHARE - RESERVED_PER_IP, len(shut)
        b = open_many(g, "127.0.3.2", PER_IP + RESERVED_PER_IP)
        b_kept, shut = served_and_shut(b)
        assert shut == [], "a second address lost its allowance to the first"
        # The share stays taken while a's and b's connections are kept: each
        # over its limit is cut 2 s after its last request, and a sanitizer
        # build under a loaded CI has taken more than that to accept c's.
        keeper = Keeper(a_kept + b_kept)
        keeper.start()
        c = open_many(g, "127.0.3.3", PER_IP + 1)
        served, shut = served_and_shut(c)
        assert len(shut) == 1, f"{len(shut)} of the third address's connections shut, not the one past the share"
        assert keeper.end(), "a kept connection within the share was shut"
    finally:
        if keeper is not None:
            keeper.stop.set()
        for s in a + b + c:
            s.close()


def test_connection_limit_holds_until_slow_clients_are_cut_off(gw):
    n_src = -(-MAX_CONNS // PER_IP) + 1  # a few more than the server takes
    t = Trickler([s for k in range(n_src) for s in open_many(gw, f"127.0.1.{k + 1}", PER_IP)])
    t.start()
    try:
        time.sleep(0.5)
        assert_refused(healthz(gw), ())  # the server is full: closed at once
        t.join(TIMEOUT_S + SLACK_S + 2)
        assert len(t.closed) == len(t.socks), \
            f"{len(t.socks) - len(t.closed)} slow clients still connected"
        # those over the limit were closed at once, the rest at the deadline
        # (a keep-alive connection left by an earlier case may take a slot)
        early = sum(v < TIMEOUT_S - 0.5 for v in t.closed.values())
        assert len(t.socks) - MAX_CONNS <= early <= len(t.socks) - MAX_CONNS + 2, \
            (MAX_CONNS, sorted(t.closed.values()))
    finally:
        t.close()
    healthz_until_ok(gw, SLACK_S)


# ---------------------------------------------------------------- slow bodies

def test_a_route_that_takes_no_body_refuses_one_from_the_head(gw):
    """The measured attack: GET /healthz declaring a 10 MB body, to be
    trickled. Refused (JSON 413) before a byte of it, and closed."""
    for head in (b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n",
                 b"GET /readyz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
                 b"GET /openapi.yaml HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n",
                 b"GET /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n{auth}\r\n"):
        t0 = time.monotonic()
        r = exchange(gw, head.replace(b"{auth}", gw.auth), timeout=5)
        assert r.status == 413 and r.json()["error"]["code"] == "payload_too_large", r
        assert "takes no request body" in r.json()["error"]["message"], r
        assert r.how in ("eof", "reset") and time.monotonic() - t0 < 2, r


class BodyTrickler(Trickler):
    """Connections that send a whole head announcing a body, then one byte
    of it each tick."""

    def __init__(self, socks, head, **kw):
        super().__init__(socks, **kw)
        self.HEAD = head


def test_trickled_bodies_from_many_addresses_are_cut_and_others_served(gw, stack):
    """Tenants (a valid key) trickle job bodies a byte at a time from four
    addresses, each to its limit, and anonymous clients send health checks
    with bodies: the bodies are cut at --body-timeout-s however the bytes
    come, and a fifth address is served all along."""
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            + gw.auth + b"Content-Length: 10000\r\n\r\n")
    srcs = [f"127.0.4.{k}" for k in range(1, 5)]
    jobs = stack.count_jobs()
    t = BodyTrickler([s for src in srcs for s in open_many(gw, src, PER_IP)], head)
    t.start()
    try:
        time.sleep(0.3)
        served = 0
        for src in srcs:
            r = exchange(gw, b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n",
                         src=src, timeout=5)
            assert r.status == 413 or (r.status is None and r.how in ("eof", "reset")), r
        for _ in range(5):
            r = healthz(gw, timeout=5)
            served += r.status == 200
        assert served == 5, served
        client = stack.client("A", base=gw.base)
        assert client.post_job(json.loads(JOB)).status_code == 202
        t.assert_all_cut(BODY_TIMEOUT_S)
        assert stack.count_jobs() == jobs + 1  # the one submit, none of the trickled
    finally:
        t.close()


# ---------------------------------------------------------------- oversized heads

BIG = 64 * 1024


@pytest.mark.parametrize("case", ["header-over-limit", "header-64k", "many-headers",
                                  "url-over-limit", "url-64k", "many-args-over-limit"])
def test_oversized_head_is_431_or_414(gw, case):
    over = MAX_HEADER_KB * 1024 + 2048
    req = {
        "header-over-limit": b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * over + b"\r\n",
        "header-64k": b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * BIG + b"\r\n",
        "many-headers": b"GET /healthz HTTP/1.1\r\nHost: t\r\n"
                        + b"".join(b"X-H%d: v\r\n" % i for i in range(4000)),
        "url-over-limit": b"GET /healthz?q=" + b"a" * over + b" HTTP/1.1\r\nHost: t\r\n",
        "url-64k": b"GET /healthz?q=" + b"a" * BIG + b" HTTP/1.1\r\nHost: t\r\n",
        "many-args-over-limit": b"GET /healthz?" + b"&".join([b"a"] * (over // 2))
                                + b" HTTP/1.1\r\nHost: t\r\n",
    }[case]
    r = exchange(gw, req + b"Connection: close\r\n\r\n")
    assert r.status in (414, 431), r
    # Our own JSON answer, except for heads that do not fit the connection's
    # memory pool (sized for heads within the limit; see svc_server_start):
    # thousands of headers, or a header or target of 64 KiB, exhaust it
    # before any callback runs, and libmicrohttpd 0.9.75 answers with its
    # own HTML 431 or 414.
    if case not in ("many-headers", "header-64k", "url-64k"):
        assert r.json()["error"]["code"] in ("headers_too_large", "uri_too_long"), r
    if case == "header-over-limit":
        assert r.status == 431, r
    if case.startswith("url") or case.startswith("many-args"):
        assert r.status == 414, r


def test_query_arguments_up_to_64_are_served_and_more_are_a_json_414(gw):
    # 64 arguments: served (thousands were once a silent close for want of
    # pool memory; the pool is now sized for 64 and more are refused)
    query = b"&".join(b"p%d=1" % i for i in range(64))
    r = exchange(gw, b"GET /healthz?" + query + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert r.status == 200, r
    for n in (65, 480, MAX_HEADER_KB * 1024 // 2 - 64):  # up to the most a head may hold
        query = b"&".join([b"a"] * n)
        r = exchange(gw, b"GET /healthz?" + query + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert r.status == 414 and r.json()["error"]["code"] == "uri_too_long", (n, r)
        assert "64 query parameters" in r.json()["error"]["message"], r


# ---------------------------------------------------------------- request syntax

@pytest.mark.parametrize("head", [
    b"GET /healthz HTTP/1.1\r\n",                                   # no Host
    b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n",             # two
    b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Name : v\r\n",           # space before colon
    b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n",
    b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\n chunked\r\n",
    b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\t0\r\n",
    b"GET /openapi.yaml%00.txt HTTP/1.1\r\nHost: t\r\n",
    b"GET /v1/jobs%00.json HTTP/1.1\r\nHost: t\r\n{auth}",
    b"GET /v1/jobs?limit=5%00 HTTP/1.1\r\nHost: t\r\n{auth}",
], ids=["no-host", "two-hosts", "space-before-colon", "te-space-before-colon", "folded-te",
        "folded-content-length", "nul-path", "nul-path-json", "nul-query"])
def test_ambiguous_request_syntax_is_a_json_400(gw, no_new_jobs, head):
    head = head.replace(b"{auth}", gw.auth)
    if head.startswith(b"POST"):
        head += gw.auth + b"Content-Type: application/json\r\n"
    r = exchange(gw, head + b"Connection: close\r\n\r\n" + (JOB if head.startswith(b"POST") else b""))
    assert r.status == 400 and r.json()["error"]["code"] == "bad_request", r


def test_http_1_0_needs_no_host(gw):
    r = exchange(gw, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert r.status == 200, r


def test_long_unknown_path_is_cut_in_the_message(gw):
    r = exchange(gw, b"GET /" + b"x" * 5000 + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert r.status == 404, r
    assert len(r.json()["error"]["message"]) < 300, r




def test_oversized_head_on_default_gateway_is_431(stack):
    port = int(stack.base.rsplit(":", 1)[1])
    g = Gateway(stack, port, stack.gateway)
    r = exchange(g, b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * BIG
                 + b"\r\nConnection: close\r\n\r\n")
    assert r.status == 431, r
    r = exchange(g, b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 20000
                 + b"\r\nConnection: close\r\n\r\n")  # over the 16 KiB default
    assert r.status == 431 and r.json()["error"]["code"] == "headers_too_large", r
    assert stack.gateway.alive()


# ---------------------------------------------------------------- Content-Length

@pytest.mark.parametrize("value", [b"abc", b"-1", b"-0", b"+5", b"5x", b"", b"0x10", b"1 2",
                                   b"5, 5", b"99999999999999999999999"])
def test_malformed_content_length_is_400(gw, no_new_jobs, value):
    # libmicrohttpd answers these itself (400, or 413 past 2^64) with an HTML
    # page; 0.9.75 sends that response's head twice, so only the first
    # status line is checked.
    r = post_jobs(gw, b"Content-Length: " + value + b"\r\n", JOB)
    assert r.status in (400, 413), r
    assert r.how == "eof", r


@pytest.mark.parametrize("first,second", [(len(JOB), len(JOB)), (5, len(JOB)), (len(JOB), 5)])
def test_duplicated_content_length_is_400(gw, no_new_jobs, first, second):
    r = post_jobs(gw, b"Content-Length: %d\r\nContent-Length: %d\r\n" % (first, second), JOB)
    assert_refused(r, (400,), "bad_request")
    assert r.status is not None, r


def test_content_length_beside_chunked_is_400(gw, no_new_jobs):
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(JOB), JOB)
    r = post_jobs(gw, b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", body)
    assert r.status == 400 and r.json()["error"]["code"] == "bad_request", r


@pytest.mark.parametrize("te", [b"gzip", b"gzip, chunked", b"identity"])
def test_other_transfer_coding_is_400(gw, no_new_jobs, te):
    r = post_jobs(gw, b"Transfer-Encoding: " + te + b"\r\n", JOB)
    assert r.status == 400 and r.json()["error"]["code"] == "bad_request", r


def test_body_shorter_than_content_length_then_eof_is_closed(gw, no_new_jobs):
    r = post_jobs(gw, b"Content-Length: %d\r\n" % (len(JOB) + 100), JOB, shut=True)
    assert_refused(r, (400,))


def test_body_shorter_than_content_length_times_out(gw, no_new_jobs):
    t0 = time.monotonic()
    r = post_jobs(gw, b"Content-Length: %d\r\n" % (len(JOB) + 100), JOB,
                  timeout=TIMEOUT_S + SLACK_S + 2)
    assert r.how != "timeout", f"still waiting after {time.monotonic() - t0:.1f}s"
    assert_refused(r, (400, 408))


def test_body_longer_than_content_length_is_400(gw, no_new_jobs):
    # the declared length cuts the JSON short; what follows is no job either
    r = post_jobs(gw, b"Content-Length: %d\r\n" % (len(JOB) - 1), JOB)
    assert r.status == 400 and r.json()["error"]["code"] == "invalid_json", r


# ---------------------------------------------------------------- chunked bodies

def chunked(payload, size=64 * 1024):
    out = [b"%x\r\n%s\r\n" % (len(payload[i:i + size]), payload[i:i + size])
           for i in range(0, len(payload), size)]
    return b"".join(out) + b"0\r\n\r\n"


def test_chunked_body_over_limit_is_413(gw, no_new_jobs):
    payload = b'{"kernel": "saxpy", "pad": "' + b"a" * (MAX_BODY_MB * 1536 * 1024) + b'"}'
    r = post_jobs(gw, b"Transfer-Encoding: chunked\r\n", chunked(payload), timeout=20)
    assert r.status == 413 and r.json()["error"]["code"] == "payload_too_large", r


def test_chunked_body_far_over_limit_is_413_or_cut(gw, no_new_jobs):
    payload = b"a" * (8 * MAX_BODY_MB * 1024 * 1024)
    r = post_jobs(gw, b"Transfer-Encoding: chunked\r\n", chunked(payload), timeout=20)
    assert_refused(r, (413,), "payload_too_large")


@pytest.mark.parametrize("size_line", [b"zz", b"ffffffffffffffffffffffff", b"-1", b""])
def test_broken_chunk_size_is_400(gw, no_new_jobs, size_line):
    r = post_jobs(gw, b"Transfer-Encoding: chunked\r\n", size_line + b"\r\n" + JOB + b"\r\n0\r\n\r\n",
                  shut=True)
    assert_refused(r, (400, 413))


# ---------------------------------------------------------------- non-UTF-8

NON_UTF8 = {
    "invalid-byte": b'{"kernel": "\xff"}',
    "truncated-sequence": b'{"kernel": "sax\xc3"}',
    "overlong-slash": b'{"kernel": "\xc0\xaf"}',
    "utf8-surrogate": b'{"kernel": "\xed\xa0\x80"}',
    "above-u10ffff": b'{"kernel": "\xf4\x90\x80\x80"}',
    "latin1-key": b'{"k\xe9rnel": "saxpy"}',
    "latin1-label": JOB[:-1] + b', "labels": {"team": "caf\xe9"}}',
    "trailing-byte": JOB + b"\xff",
    "lone-surrogate-escape": b'{"kernel": "\\ud800"}',
    "nul-escape": b'{"kernel": "sa\\u0000xpy"}',
    "utf16": '{"kernel": "saxpy"}'.encode("utf-16"),
}


@pytest.mark.parametrize("case", sorted(NON_UTF8))
def test_non_utf8_json_is_400(gw, no_new_jobs, case):
    body = NON_UTF8[case]
    r = post_jobs(gw, b"Content-Length: %d\r\n" % len(body), body)
    assert r.status == 400 and r.json()["error"]["code"] == "invalid_json", r


@pytest.mark.parametrize("req,statuses", [
    (b"GET /v1/jobs/%FF%FE HTTP/1.1\r\n{auth}", (404,)),
    (b"GET /v1/jobs/\xff\xfe HTTP/1.1\r\n{auth}", (404,)),
    (b"GET /v1/jobs/%FF/cancel HTTP/1.1\r\n{auth}", (404,)),
    (b"GET /v1/\xc3 HTTP/1.1\r\n", (404,)),
    (b"GET /v1/jobs?state=%FF HTTP/1.1\r\n{auth}", (400,)),
    # PostgreSQL refuses a parameter that is not UTF-8: once a 503
    (b"GET /v1/jobs?kernel=%FF HTTP/1.1\r\n{auth}", (400,)),
    # jansson refuses one: once a 200 with the label filter dropped
    (b"GET /v1/jobs?label=team:%C0%AF HTTP/1.1\r\n{auth}", (400,)),
    (b"GET /v1/jobs?label=%ED%A0%80:x HTTP/1.1\r\n{auth}", (400,)),
    (b"GET /v1/jobs?%FF=1 HTTP/1.1\r\n{auth}", (400,)),
    (b"GET /v1/jobs HTTP/1.1\r\nAuthorization: Bearer \xff\xfe\r\n", (401,)),
], ids=["path-escaped", "path-raw", "path-405", "unknown-path", "query-state", "query-kernel",
        "query-label-value", "query-label-key", "query-name", "bearer"])
def test_non_utf8_outside_the_body_gets_a_json_4xx(gw, req, statuses):
    req = req.replace(b"{auth}", gw.auth)
    r = exchange(gw, req + b"Host: t\r\nConnection: close\r\n\r\n")
    if r.status == 400 and "content-type" not in r.headers:
        return  # libmicrohttpd refused the request line itself
    assert r.status in statuses, r
    assert isinstance(r.json()["error"]["message"], str), r
