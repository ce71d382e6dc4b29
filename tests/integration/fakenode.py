"""A scripted compute node for the integration tests: it registers with the
gateway's cluster listener (the cluster token, which gives it a credential
of its own), sends heartbeats, takes runs and cancels through the lease poll
(POST /v1/cluster/nodes/{id}/lease) and reports how they ended (POST
/v1/cluster/nodes/{id}/results), all with its credential, the way a test
asks, so that a test can hold a run at a chosen moment (a run that takes
seconds to start, a run that never ends) and see exactly what the gateway
handed out.

Events: ("POST", run id, 202) when the node took a run, ("DELETE", run id,
200 or 404) when a cancel came for a run it had (running) or not."""

import threading
import time

import requests


class FakeNode:
    def __init__(self, gateway, cluster_token, name, backend="cuda", kernels=("sleep",),
                 accept_delay_s=0.0, run_s=3.0, outputs=None, usage=None, gpu_name="Fake GPU"):
        """gateway: the cluster listener's base URL (stack.cluster_base)."""
        self.gateway, self.token, self.name = gateway, cluster_token, name
        self.credential = None         # the node's own, from its registration
        # what a succeeded run reports: sleep's output unless a test says
        self.outputs = outputs if outputs is not None else {
            "slept": {"dtype": "float32", "shape": [1], "data": [float(run_s)]}}
        self.usage = usage             # the "usage" its reports carry (None: none)
        self.backend, self.kernels = backend, list(kernels)
        self.gpu_name = gpu_name
        self.accept_delay_s, self.run_s = accept_delay_s, run_s
        self.mu = threading.Lock()
        self.runs = {}           # run id -> {"state", "t0", "job_id", "attempt"}
        self.events = []         # (monotonic time, what, run id, status)
        self.taken = []          # every run request the lease handed out, as sent
        self.posting = threading.Event()   # a run was handed to this node
        self.stop_ev = threading.Event()
        self.silent = threading.Event()    # set: no heartbeat, poll or report (cut off)
        self.deaf = threading.Event()      # set: cancels are heard and not obeyed (a hung run)
        self.id = None
        self.url = "http://127.0.0.1:9"    # never called: runs travel by lease
        self.state = None        # the heartbeat's "state" (device figures, fault), when set

    def _headers(self):
        return {"Authorization": f"Bearer {self.credential}"}

    def start(self):
        r = requests.post(f"{self.gateway}/v1/cluster/nodes/register", timeout=5,
                          headers={"Authorization": f"Bearer {self.token}"},
                          json={"name": self.name, "url": self.url, "backend": self.backend,
                                "slots": 1, "kernels": self.kernels,
                                "gpus": [{"name": self.gpu_name, "memory_bytes": 1 << 30}]})
        r.raise_for_status()
        self.id = r.json()["id"]
        self.credential = r.json()["credential"]
        for loop in (self._heartbeats, self._poll, self._report):
            threading.Thread(target=loop, daemon=True).start()
        return self

    def _post(self, path, body, timeout):
        return requests.post(f"{self.gateway}{path}", headers=self._headers(), json=body,
                             timeout=timeout)

    def _heartbeats(self):
        while not self.stop_ev.wait(0.5):
            if self.silent.is_set():
                continue
            with self.mu:
                held = list(self.runs)
                live = [k for k, v in self.runs.items() if v["state"] == "running"]
            beat = {"running": len(live), "slots": 1, "runs": held}
            if self.state is not None:
                beat["state"] = self.state
            try:
                self._post(f"/v1/cluster/nodes/{self.id}/heartbeat", beat, 5)
            except requests.RequestException:
                pass

    def _poll(self):
        while not self.stop_ev.is_set():
            if self.silent.is_set():
                time.sleep(0.1)
                continue
            with self.mu:
                busy = sum(v["state"] == "running" for v in self.runs.values())
            try:
                r = self._post(f"/v1/cluster/nodes/{self.id}/lease",
                               {"max": max(0, 1 - busy), "wait_ms": 1000}, 10)
                body = r.json() if r.status_code == 200 else {}
            except (requests.RequestException, ValueError):
                body = {}
                time.sleep(0.3)
            if not body:
                time.sleep(0.2)
            for run in body.get("runs", []):
                rid = f"{run['job_id']}.{run['attempt']}"
                self.posting.set()
                time.sleep(self.accept_delay_s)
                with self.mu:
                    self.runs.setdefault(rid, {"state": "running", "t0": time.monotonic(),
                                               "job_id": run["job_id"], "attempt": run["attempt"],
                                               "kernel": run.get("kernel"),
                                               "node_rank": (run.get("dist") or {}).get("node_rank")})
                    self.taken.append(run)
                    self.events.append((time.monotonic(), "POST", rid, 202))
            for c in body.get("cancel", []):
                rid = f"{c['job_id']}.{c['attempt']}"
                with self.mu:
                    run = self.runs.get(rid)
                    if run and run["state"] == "running" and not self.deaf.is_set():
                        run["state"] = "cancelled"
                    self.events.append((time.monotonic(), "DELETE", rid, 200 if run else 404))

    def _report(self):
        while not self.stop_ev.wait(0.1):
            if self.silent.is_set():
                continue
            done = []
            with self.mu:
                for rid, run in self.runs.items():
                    if run["state"] == "running" and time.monotonic() - run["t0"] >= self.run_s:
                        run["state"] = "succeeded"
                    if run["state"] == "running":
                        continue
                    rep = {"run_id": rid, "job_id": run["job_id"], "attempt": run["attempt"],
                           "kernel": run["kernel"], "state": run["state"]}
                    if run.get("node_rank") is not None:
                        rep["node_rank"] = run["node_rank"]
                    if run["state"] == "succeeded":
                        rep.update(backend=self.backend, outputs=self.outputs, info={})
                    else:
                        rep["error"] = {"code": "cancelled", "message": "cancelled"}
                    if self.usage is not None:
                        rep["usage"] = self.usage
                    done.append(rep)
            if not done:
                continue
            try:
                r = self._post(f"/v1/cluster/nodes/{self.id}/results", {"free": 1, "results": done}, 10)
                recorded = r.json().get("recorded", []) if r.status_code == 200 else []
            except (requests.RequestException, ValueError):
                recorded = []
                time.sleep(0.4)
            with self.mu:
                for rid in recorded:
                    self.runs.pop(rid, None)

    def close(self):
        self.stop_ev.set()
        try:
            requests.delete(f"{self.gateway}/v1/cluster/nodes/{self.id}", headers=self._headers(),
                            timeout=5)
        except requests.RequestException:
            pass

    def seen(self, what):
        with self.mu:
            return [e for e in self.events if e[1] == what]
