"""A node whose GPU is lost (a sticky CUDA error: illegal address, ECC, ...)
takes itself out of service instead of failing every job it is given: the
run that lost the device fails with device_error, the runs that were only
there go back to the queue (backend_error), the node says why in /v1/info,
in its log and, through its heartbeat, in GET /v1/nodes (gpu_state.fault,
kept once the node is down), and exits 75 for its supervisor to start it
again; started again, it serves the job that was given back.

The fault is injected through the plugin interface: the node loads
tests/plugins/fake_cuda.c (built by make as build/tests/kl_fake_cuda.so)
with --plugin, and KOWLOON_FAKE_CUDA_FAULT=reduce makes any reduce run
lose the "Fake GPU" as a real plugin does (kernels/cuda/fault.cu)."""

import os
import signal

import pytest
import requests

from stack import COMPUTE_BIN, free_port, tensor, wait_until


def fake_plugin():
    """The fake plugin next to the build of the compute binary under test
    (build/ for bin/, build-san/ for bin-san/)."""
    bindir = os.path.realpath(os.path.dirname(COMPUTE_BIN))
    build = "build-san" if os.path.basename(bindir) == "bin-san" else "build"
    return os.path.join(os.path.dirname(bindir), build, "tests", "kl_fake_cuda.so")


FAKE = fake_plugin()
HOLD_S = 3  # how long the run that was only there takes to notice the loss


@pytest.mark.skipif(not os.path.exists(FAKE), reason=f"{FAKE} was not built (make all)")
def test_lost_gpu_fails_its_run_drains_the_node_and_restarts_it(stack, A, admin):
    name = "node-gpu-fault"
    stack.node_ports[name] = free_port()
    hdr = {"Authorization": "Bearer " + stack.cluster_token}
    args = ["--plugin", FAKE, "--backend", "cuda", "--slots", "2", "--drain-grace-s", "30"]
    p = stack.start_node(name, extra_args=args,
                         env_extra={"KOWLOON_FAKE_CUDA_FAULT": "reduce", "KOWLOON_FAKE_CUDA_HOLD_S": str(HOLD_S)})
    restarted = None
    try:
        stack.wait_nodes_up([name], timeout=20)
        info = requests.get(stack.node_url(name) + "/v1/info", headers=hdr, timeout=5).json()
        assert info["backend"] == "cuda" and info["slots"] == 2 and info["fault"] is None, info
        assert "fake plugin" in info["backend_info"], info

        # a long run on the GPU, then one that loses it
        cuda = {"backend": "cuda", "gpus": 1}
        bystander = A.submit("sleep", {"seconds": 8}, resources=cuda, max_attempts=3)
        stack.wait_run_on_node(A.wait(bystander["id"], 20, states=("running",)))
        culprit = A.submit("reduce", {"op": "sum"}, {"x": tensor([1.0, 2.0])}, resources=cuda,
                           max_attempts=3)
        j = A.wait(culprit["id"], 20)
        assert j["state"] == "failed", j
        assert j["error"]["code"] == "device_error", j
        assert "cudaErrorIllegalAddress" in j["error"]["message"], j
        assert j["attempts"] == 1, j  # not retried: its own kernel lost the device

        # the node is out of service and says why, while it drains
        def faulted():
            i = requests.get(stack.node_url(name) + "/v1/info", headers=hdr, timeout=5).json()
            return i if i.get("fault") else None
        i = wait_until(faulted, 10, 0.05, f"{name} /v1/info to show the fault")
        assert i["draining"] is True and "sticky CUDA error" in i["fault"], i
        r = requests.get(stack.node_url(name) + "/readyz", timeout=5)
        assert r.status_code == 503 and r.json()["draining"] is True, r.text

        def listed_with_fault():
            n = stack.nodes_by_name().get(name) or {}
            return n if (n.get("gpu_state") or {}).get("fault") else None
        n = wait_until(listed_with_fault, 10, 0.1, f"GET /v1/nodes to show {name}'s fault")
        assert "cudaErrorIllegalAddress" in n["gpu_state"]["fault"], n

        # the run that was only there is given back, not failed
        rc = p.popen.wait(timeout=HOLD_S + 30)
        assert rc == 75, f"exit {rc}"
        b = A.job(bystander["id"])
        assert b["state"] in ("queued", "running"), b
        details = stack.psql(f"SELECT detail FROM job_events WHERE job_id = '{bystander['id']}' ORDER BY id")
        assert any("backend_error" in d[0] and "GPU was lost" in d[0] for d in details if d[0]), details

        # the gateway keeps the reason once the node is down, and places nothing there
        n = stack.nodes_by_name()[name]
        assert n["state"] == "down" and "sticky CUDA error" in n["gpu_state"]["fault"], n
        log = open(p.log_path, encoding="utf-8", errors="replace").read()
        assert "GPU lost: the node takes itself out of service" in log
        assert "exit 75" in log

        # its supervisor starts it again: a fresh process, a working "GPU"
        restarted = stack.start_node(name, extra_args=args)
        stack.wait_nodes_up([name], timeout=20)
        b = A.wait(bystander["id"], 40)
        assert b["state"] == "succeeded" and b["attempts"] == 2, b
        wait_until(lambda: not (stack.nodes_by_name()[name].get("gpu_state") or {}).get("fault"), 10, 0.1,
                   f"{name}'s fault to clear")
    finally:
        p.stop(signal.SIGTERM)
        if restarted:
            restarted.stop(signal.SIGTERM)
        wait_until(lambda: stack.nodes_by_name().get(name, {"state": "down"})["state"] != "up", 15, 0.2,
                   f"{name} to leave")


def test_a_node_whose_heartbeat_reports_a_fault_is_placed_nothing(stack, A):
    """The gateway's side alone, with scripted nodes: of two idle CUDA nodes,
    the one whose heartbeat state carries a fault gets no run."""
    from fakenode import FakeNode
    faulted = FakeNode(stack.cluster_base, stack.cluster_token, "fake-faulted-a", run_s=0.2)
    faulted.state = {"fault": "GPU 0: sticky CUDA error cudaErrorIllegalAddress (test)"}
    healthy = FakeNode(stack.cluster_base, stack.cluster_token, "fake-faulted-b", run_s=0.2)
    faulted.start()
    healthy.start()
    try:
        wait_until(lambda: (stack.nodes_by_name().get("fake-faulted-a", {}).get("gpu_state") or {}).get("fault"),
                   10, 0.1, "the fault in GET /v1/nodes")
        wait_until(lambda: stack.nodes_by_name().get("fake-faulted-b", {}).get("state") == "up", 10, 0.1,
                   "the healthy node up")
        jobs = [A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1}) for _ in range(4)]
        for j in jobs:
            assert A.wait(j["id"], 30)["state"] == "succeeded"
        assert len(healthy.taken) == 4 and faulted.taken == [], (len(healthy.taken), len(faulted.taken))
    finally:
        faulted.close()
        healthy.close()


def test_a_heartbeat_with_a_malformed_fault_is_refused(stack):
    from fakenode import FakeNode
    node = FakeNode(stack.cluster_base, stack.cluster_token, "fake-fault-shape").start()
    try:
        url = f"{stack.cluster_base}/v1/cluster/nodes/{node.id}/heartbeat"
        hdr = node._headers()
        for fault in (5, ["x"], "x" * 513):
            r = requests.post(url, headers=hdr, timeout=5,
                              json={"running": 0, "slots": 1, "runs": [], "state": {"fault": fault}})
            assert r.status_code == 400 and r.json()["error"]["field"] == "state", r.text
        r = requests.post(url, headers=hdr, timeout=5,
                          json={"running": 0, "slots": 1, "runs": [], "state": {"fault": "x" * 512}})
        assert r.status_code == 200, r.text
    finally:
        node.close()
