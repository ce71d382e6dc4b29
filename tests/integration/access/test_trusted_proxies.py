"""Behind a proxy every client shares the proxy's address. With
--trusted-proxies, the client is the rightmost X-Forwarded-For hop the
proxy did not add itself (what a client writes in the header itself is
never read past that hop), and that address is what per-address limits
count and log lines name: one client's failed keys lock out that client,
not every tenant behind the proxy. A peer that is not a trusted proxy
cannot choose its address by sending the header. Valid keys are never
refused by the failure limiter, wherever they come from."""

import time
import uuid

import pytest
import requests

from stack import free_port

BURST = 5


@pytest.fixture(scope="module")
def gw(stack):
    port = free_port()
    proc = stack.start_gateway("gateway-proxied", port, KOWLOON_TRUSTED_PROXIES="127.0.0.1/32",
                               KOWLOON_AUTH_FAIL_BURST=BURST, KOWLOON_AUTH_FAIL_RPS=1,
                               KOWLOON_MAX_CONNS_PER_IP=4)
    yield proc, port
    proc.stop()


class SourceAdapter(requests.adapters.HTTPAdapter):
    """Connects from a given loopback address (another peer)."""

    def __init__(self, src, **kw):
        self.src = src
        super().__init__(**kw)

    def init_poolmanager(self, *a, **kw):
        kw["source_address"] = (self.src, 0)
        super().init_poolmanager(*a, **kw)


def get(port, key, forwarded=None, src="127.0.0.1", path="/v1/jobs"):
    s = requests.Session()
    s.mount("http://", SourceAdapter(src))
    headers = {"Authorization": f"Bearer {key}"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    return s.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=10)


def flood(port, forwarded, src="127.0.0.1", n=BURST + 4):
    return [get(port, f"kl_{uuid.uuid4().hex}", forwarded, src).status_code for _ in range(n)]


def test_one_client_behind_the_proxy_locks_out_only_itself(gw, stack):
    proc, port = gw
    statuses = flood(port, "198.51.100.1, 203.0.113.7")
    assert statuses[:BURST] == [401] * BURST and statuses[-2:] == [429, 429], statuses
    # another client of the same proxy: its bad key is a 401, its good key served
    assert get(port, "kl_wrong", "203.0.113.8").status_code == 401
    assert get(port, stack.keys["B"], "203.0.113.8").status_code == 200
    # the client forged the left of its header: it is still 203.0.113.7
    assert get(port, "kl_wrong", "203.0.113.8, 203.0.113.7").status_code == 429
    with open(proc.log_path) as f:
        log = f.read()
    assert "failed authentications from 203.0.113.7" in log
    assert "ip=203.0.113.7" in log  # request lines name the client, not the proxy


def test_a_valid_key_is_never_refused_by_the_failure_limiter(gw, stack):
    proc, port = gw
    assert get(port, stack.keys["A"], "203.0.113.20").status_code == 200
    flood(port, "203.0.113.20")
    assert get(port, "kl_wrong", "203.0.113.20").status_code == 429
    # the key's cached answer expires (--key-cache-ms 500): looked up again,
    # not throttled
    time.sleep(0.6)
    for _ in range(3):
        assert get(port, stack.keys["A"], "203.0.113.20").status_code == 200


def test_an_untrusted_peer_cannot_choose_its_address(gw, stack):
    proc, port = gw
    statuses = [get(port, f"kl_{uuid.uuid4().hex}", f"192.0.2.{i}", src="127.0.0.9").status_code
                for i in range(BURST + 3)]
    assert statuses[-2:] == [429, 429], statuses
    with open(proc.log_path) as f:
        assert "failed authentications from 127.0.0.9" in f.read()


def test_the_proxy_is_not_held_to_the_per_address_connection_limit(gw, stack):
    """Its clients are many: a proxy's connections count only toward
    --max-connections (the per-address limit is 4 here)."""
    proc, port = gw
    sessions = [requests.Session() for _ in range(8)]
    try:
        for i, s in enumerate(sessions):  # eight kept-alive connections at once
            r = s.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=10,
                      headers={"Authorization": f"Bearer {stack.keys['A']}",
                               "X-Forwarded-For": f"203.0.113.{100 + i}"})
            assert r.status_code == 200, (i, r.text)
    finally:
        for s in sessions:
            s.close()
    # another peer is held to it
    held = [requests.Session() for _ in range(6)]
    try:
        codes = []
        for s in held:
            s.mount("http://", SourceAdapter("127.0.0.10"))
            codes.append(s.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=10,
                               headers={"Authorization": f"Bearer {stack.keys['A']}"}).status_code)
        assert codes[:4] == [200] * 4 and 503 in codes[4:], codes
    finally:
        for s in held:
            s.close()
