"""HTTPS end to end, on a stack of its own: the gateway serves TLS with a
self-signed certificate made here (openssl), a node that trusts it through
--tls-ca registers and runs a job, while the node's environment names a
proxy it must not use; a client (and a node) without the CA is refused; the
node API serves TLS too; and SIGHUP swaps the gateway's certificate: new
connections get the new one, a connection already open keeps working."""

import http.client
import os
import signal
import socket
import ssl
import subprocess
import time

import numpy as np
import pytest
import requests

from stack import GATEWAY_BIN, Stack, StackError, decode, free_port, tensor, wait_until


def make_cert(path, cn):
    """A self-signed certificate for 127.0.0.1 and its key: (cert, key)."""
    cert, key = f"{path}-cert.pem", f"{path}-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", f"/CN={cn}",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    return cert, key


def der_of(pem_path):
    with open(pem_path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def served_cert(port, cafile):
    """The DER certificate a new connection to port is served."""
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


def trusting(client, ca):
    """client, checking certificates against ca (and not the environment's
    REQUESTS_CA_BUNDLE, which requests would put first)."""
    client.http.trust_env = False
    client.http.verify = ca
    return client


@pytest.fixture(scope="module")
def tls_stack():
    s = Stack(node_names=())
    try:
        s.start_postgres()
        s.start_redis()
        d = os.path.join(s.root, "tls")
        os.makedirs(d)
        s.cert1 = make_cert(os.path.join(d, "one"), "kowloon-one")
        s.cert2 = make_cert(os.path.join(d, "two"), "kowloon-two")
        # the files the gateway serves: one now, two after the swap
        s.cert, s.key = os.path.join(d, "gw-cert.pem"), os.path.join(d, "gw-key.pem")
        for src, dst in zip(s.cert1, (s.cert, s.key)):
            with open(src) as fi, open(dst, "w") as fo:
                fo.write(fi.read())
        # what a node trusts across a rotation: both
        s.ca = os.path.join(d, "ca.pem")
        with open(s.ca, "w") as f:
            for c in (s.cert1[0], s.cert2[0]):
                f.write(open(c).read())
        s.gw_port, s.gw_cluster_port = free_port(), free_port()
        env = s.gateway_env(KOWLOON_LISTEN=f"127.0.0.1:{s.gw_port}",
                            KOWLOON_CLUSTER_LISTEN=f"127.0.0.1:{s.gw_cluster_port}",
                            KOWLOON_TLS_CERT=s.cert, KOWLOON_TLS_KEY=s.key)
        s.gateway = s._proc("gateway", [GATEWAY_BIN, "serve"], env)
        s.base = f"https://127.0.0.1:{s.gw_port}"
        # both listeners speak TLS: nodes call the cluster one
        s.cluster_base = f"https://127.0.0.1:{s.gw_cluster_port}"

        def ready():
            s._die_if_dead(s.gateway)
            try:
                return requests.get(s.base + "/readyz", verify=s.ca, timeout=2).status_code == 200
            except requests.RequestException:
                return False
        wait_until(ready, 30, 0.1, "the TLS gateway's /readyz")
        s.keys["A"] = s.create_key("A")
        s.keys["admin"] = s.create_key("ops", admin=True)
        s.admin = trusting(s.client("admin"), s.ca)
        yield s
    except StackError:
        s.close()
        raise
    finally:
        s.close()
        s.remove()


def test_a_node_that_trusts_the_gateway_runs_a_job_over_https(tls_stack):
    s = tls_stack
    name = "node-tls"
    s.node_ports[name] = free_port()
    ncert, nkey = s.cert1
    # a proxy in the environment that would swallow the node's traffic: the
    # node must go straight to the gateway
    proxy = {v: "http://127.0.0.1:9" for v in ("http_proxy", "https_proxy", "HTTP_PROXY",
                                              "HTTPS_PROXY", "all_proxy", "ALL_PROXY")}
    s.start_node(name, extra_args=["--tls-ca", s.ca, "--tls-cert", ncert, "--tls-key", nkey],
                 shared_blobs=False, env_extra=proxy)
    s.wait_nodes_up([name], timeout=30)
    node = s.nodes_by_name()[name]
    assert node["url"].startswith("https://"), node
    client = trusting(s.client("A"), s.ca)
    x = np.arange(100, dtype=np.float32)
    y = np.ones(100, dtype=np.float32)
    job = client.submit("saxpy", params={"a": 2.0}, inputs={"x": tensor(x), "y": tensor(y)})
    done = client.wait(job["id"], timeout=60)
    assert done["state"] == "succeeded", done
    out = client.outputs(job["id"])
    np.testing.assert_array_equal(decode(out["y"]), np.float32(2.0) * x + y)
    # the node API speaks TLS with its own certificate
    r = requests.get(f"https://127.0.0.1:{s.node_ports[name]}/healthz", verify=ncert, timeout=5)
    assert r.status_code == 200
    # and rereads it on SIGHUP, running on
    os.kill(s.procs[name].pid, signal.SIGHUP)
    log = os.path.join(s.logs, name + ".log")
    wait_until(lambda: "SIGHUP: certificate reread" in open(log).read(), 10, 0.1, "the node's reload")
    assert s.procs[name].alive()
    r = requests.get(f"https://127.0.0.1:{s.node_ports[name]}/healthz", verify=ncert, timeout=5)
    assert r.status_code == 200


def test_a_client_without_the_ca_is_refused(tls_stack):
    s = tls_stack
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(s.base + "/healthz", timeout=5)  # the system's CAs only
    # plain HTTP on the TLS port gets no answer
    with pytest.raises(requests.RequestException):
        requests.get(f"http://127.0.0.1:{s.gw_port}/healthz", timeout=5)
    # nor does a node that does not trust the certificate register
    name = "node-no-ca"
    s.node_ports[name] = free_port()
    s.start_node(name, shared_blobs=False)
    log = os.path.join(s.logs, name + ".log")
    wait_until(lambda: "certificate" in open(log).read().lower(), 20, 0.2,
               "the node to say the certificate is not trusted")
    assert name not in s.nodes_by_name()
    s.procs[name].stop()


def test_sighup_swaps_the_certificate_without_dropping_connections(tls_stack):
    s = tls_stack
    assert served_cert(s.gw_port, s.ca) == der_of(s.cert1[0])
    # a connection open before the swap
    kept = http.client.HTTPSConnection("127.0.0.1", s.gw_port, timeout=5,
                                       context=ssl.create_default_context(cafile=s.ca))
    kept.request("GET", "/healthz")
    assert kept.getresponse().read() and kept.sock is not None
    sock = kept.sock
    for src, dst in zip(s.cert2, (s.cert, s.key)):
        with open(src) as fi, open(dst + ".tmp", "w") as fo:
            fo.write(fi.read())
        os.replace(dst + ".tmp", dst)
    os.kill(s.gateway.pid, signal.SIGHUP)
    wait_until(lambda: served_cert(s.gw_port, s.ca) == der_of(s.cert2[0]), 10, 0.1,
               "new connections to get the new certificate")
    # the connection opened before is still up, with the old certificate
    kept.request("GET", "/healthz")
    r = kept.getresponse()
    assert r.status == 200 and r.read()
    assert kept.sock is sock and sock.getpeercert(binary_form=True) == der_of(s.cert1[0])
    kept.close()
    assert s.gateway.alive()
    with open(s.gateway.log_path) as f:
        assert "SIGHUP: certificate reread" in f.read()
    # a broken pair on the next SIGHUP keeps the one in use
    with open(s.key, "w") as f:
        f.write("not a key\n")
    os.kill(s.gateway.pid, signal.SIGHUP)
    wait_until(lambda: "keeping the certificate in use" in open(s.gateway.log_path).read(), 10, 0.1,
               "the gateway to refuse the broken key")
    assert served_cert(s.gw_port, s.ca) == der_of(s.cert2[0])
