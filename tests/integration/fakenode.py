"""A scripted compute node for the integration tests: it registers with the
gateway, sends heartbeats, and answers the node API (POST /v1/runs,
GET /v1/runs/{id}?wait=S, DELETE /v1/runs/{id}) the way a test asks, so that
a test can hold a run at a chosen moment (an accept that takes seconds, a
run that never ends) and see exactly what the gateway sent."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests


class FakeNode:
    def __init__(self, gateway, cluster_token, name, backend="cuda", kernels=("sleep",),
                 accept_delay_s=0.0, run_s=3.0):
        self.gateway, self.token, self.name = gateway, cluster_token, name
        self.backend, self.kernels = backend, list(kernels)
        self.accept_delay_s, self.run_s = accept_delay_s, run_s
        self.mu = threading.Lock()
        self.runs = {}           # run id -> {"state", "t0"}
        self.events = []         # (monotonic time, what, run id, status answered)
        self.posting = threading.Event()   # a POST /v1/runs is being held
        self.stop_ev = threading.Event()
        self.id = None
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path != "/v1/runs":
                    return self.reply(404, {"error": {"code": "not_found", "message": self.path}})
                rid = f"{body['job_id']}.{body['attempt']}"
                node.posting.set()
                time.sleep(node.accept_delay_s)
                with node.mu:
                    node.runs.setdefault(rid, {"state": "running", "t0": time.monotonic()})
                    node.events.append((time.monotonic(), "POST", rid, 202))
                self.reply(202, {"id": rid, "state": "running"})

            def do_GET(self):
                path, _, query = self.path.partition("?")
                if path in ("/healthz", "/v1/info"):
                    return self.reply(200, {"status": "ok"})
                rid = path.rsplit("/", 1)[-1]
                wait = 0.0
                for kv in query.split("&"):
                    if kv.startswith("wait="):
                        wait = min(float(kv[5:]), 1.0)
                until = time.monotonic() + wait
                while True:
                    with node.mu:
                        run = node.runs.get(rid)
                        if run and run["state"] == "running" and \
                                time.monotonic() - run["t0"] >= node.run_s:
                            run["state"] = "succeeded"
                        state = run and run["state"]
                    if state != "running" or time.monotonic() >= until:
                        break
                    time.sleep(0.05)
                if not run:
                    return self.reply(404, {"error": {"code": "not_found", "message": rid}})
                body = {"id": rid, "state": state}
                if state == "succeeded":
                    body.update(backend=node.backend, outputs={}, info={})
                elif state == "cancelled":
                    body["error"] = {"code": "cancelled", "message": "cancelled"}
                self.reply(200, body)

            def do_DELETE(self):
                rid = self.path.rsplit("/", 1)[-1]
                with node.mu:
                    run = node.runs.get(rid)
                    if run and run["state"] == "running":
                        run["state"] = "cancelled"
                    status = 200 if run else 404
                    node.events.append((time.monotonic(), "DELETE", rid, status))
                self.reply(status, {"id": rid, "state": run["state"]} if run else
                           {"error": {"code": "not_found", "message": rid}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _headers(self):
        return {"Authorization": f"Bearer {self.token}"}

    def start(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        r = requests.post(f"{self.gateway}/v1/nodes/register", headers=self._headers(), timeout=5,
                          json={"name": self.name, "url": self.url, "backend": self.backend,
                                "slots": 1, "kernels": self.kernels,
                                "gpus": [{"name": "Fake GPU", "memory_bytes": 1 << 30}]})
        r.raise_for_status()
        self.id = r.json()["id"]
        threading.Thread(target=self._heartbeats, daemon=True).start()
        return self

    def _heartbeats(self):
        while not self.stop_ev.wait(0.5):
            with self.mu:
                live = [k for k, v in self.runs.items() if v["state"] == "running"]
            try:
                requests.post(f"{self.gateway}/v1/nodes/{self.id}/heartbeat", headers=self._headers(),
                              json={"running": len(live), "slots": 1, "runs": live}, timeout=5)
            except requests.RequestException:
                pass

    def close(self):
        self.stop_ev.set()
        try:
            requests.delete(f"{self.gateway}/v1/nodes/{self.id}", headers=self._headers(), timeout=5)
        except requests.RequestException:
            pass
        self.server.shutdown()
        self.server.server_close()

    def seen(self, what):
        with self.mu:
            return [e for e in self.events if e[1] == what]
