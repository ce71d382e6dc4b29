"""A node's readiness (GET /readyz) is not its liveness (GET /healthz): it is
ready only while the gateway has it registered and it is not draining, which
is what a Kubernetes DaemonSet's rolling update waits for (deploy/k8s/).
Draining is checked in test_node_loss (SIGTERM with a run in flight)."""

import signal

import requests

from stack import free_port, wait_until


def test_registered_node_is_ready_without_a_token(stack):
    r = requests.get(stack.node_url("node-a") + "/readyz", timeout=5)
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ready", "draining": False}


def test_node_that_cannot_register_is_alive_but_not_ready(stack):
    name = "node-unregistered"
    stack.node_ports[name] = free_port()
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    p = stack.start_node(name, extra_args=["--gateway", nowhere])
    try:
        url = stack.node_url(name)
        wait_until(lambda: requests.get(url + "/healthz", timeout=2).status_code == 200, 10, 0.1,
                   f"{name} /healthz")
        r = requests.get(url + "/readyz", timeout=5)
        assert r.status_code == 503, r.text
        assert r.json() == {"status": "unavailable", "draining": False}
        assert r.headers["Retry-After"] == "2"
        assert name not in stack.nodes_by_name()
    finally:
        p.stop(signal.SIGTERM)
