"""A scripted gateway for the node side of tasks (fakenode.py is the
reverse): it speaks the cluster API a real kowloon-compute uses — register,
heartbeat, the lease long poll, results, blobs (GET, POST, PUT to adopt a
blob the node wrote into the shared directory), the rendezvous, and the live
log route of docs/tasks_contract.md §6 — and lets a test hand a node run
requests exactly as the contract writes them, then read what the node
reported: the run object, progress, the live log bytes by offset, and the
blobs it pushed. The real gateway accepts no tasks yet (that comes with the
gateway side of issue 18); this stands in for it so the node can be tested
whole, process and engine included.

With blob_dir the gateway announces that directory as its blob store (the
node mounts inputs from it and writes outputs into it); without, every byte
crosses HTTP and the node keeps inputs in its own file cache."""

import base64
import hashlib
import json
import os
import re
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeGateway:
    def __init__(self, blob_dir=None, token="tok"):
        self.token = token
        self.mu = threading.Condition()
        self.nodes = {}            # node id -> name
        self.queues = {}           # node name -> [run request]
        self.cancels = {}          # node name -> [{"job_id","attempt"}]
        self.results = {}          # run_id (+ ".p<rank>" for gang parts) -> report
        self.progress = []         # (time, job_id, attempt, progress)
        self.logs = {}             # (job_id, attempt, part) -> bytearray
        self.log_posts = 0
        self.fail_logs = 0         # answer this many log batches 503
        self.blobs = {}            # id -> bytes (HTTP store)
        self.blob_gets = 0         # GET /v1/cluster/blobs/{id} answered
        self.rdv = {}              # (job, attempt, key) -> bytes
        self.registered = []       # registration bodies
        self.creds = {}            # node id -> the credential it was given
        self.heartbeats = []       # (node name, body)
        self.blob_dir = blob_dir
        if blob_dir:
            for sub in ("tmp", "sha256"):
                os.makedirs(os.path.join(blob_dir, sub), exist_ok=True)
            idp = os.path.join(blob_dir, "store-id")
            if not os.path.exists(idp):
                with open(idp, "w") as f:
                    f.write(secrets.token_hex(16) + "\n")
            with open(idp) as f:
                self.store_id = f.read().strip()
        gw = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _reply(self, status, obj=None, raw=None, ctype="application/json"):
                data = raw if raw is not None else json.dumps(obj or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _auth(self):
                """Registration takes the cluster token; every other call the
                credential registration gave the node, as the real gateway."""
                path = self.path.split("?", 1)[0]
                want = ({f"Bearer {gw.token}"} if path == "/v1/cluster/nodes/register"
                        else {f"Bearer {c}" for c in gw.creds.values()})
                if self.headers.get("Authorization") not in want:
                    self._reply(401, {"error": {"code": "unauthenticated", "message": "credential"}})
                    return False
                self.path = path
                return True

            def do_GET(self):
                if not self._auth():
                    return
                m = re.fullmatch(r"/v1/cluster/blobs/(sha256:[0-9a-f]{64})", self.path)
                if m:
                    data = gw.blob(m.group(1))
                    if data is None:
                        return self._reply(404, {"error": {"code": "not_found", "message": "no"}})
                    with gw.mu:
                        gw.blob_gets += 1
                    rng = self.headers.get("Range")
                    if rng:
                        a, b = rng.split("=")[1].split("-")
                        part = data[int(a):int(b) + 1]
                        return self._reply(206, raw=part, ctype="application/octet-stream")
                    return self._reply(200, raw=data, ctype="application/octet-stream")
                m = re.fullmatch(r"/v1/cluster/rendezvous/([^/]+)/(\d+)/([^/]+)", self.path)
                if m:
                    with gw.mu:
                        v = gw.rdv.get((m.group(1), int(m.group(2)), m.group(3)))
                    if v is None:
                        return self._reply(404, {"error": {"code": "not_found", "message": "no"}})
                    return self._reply(200, raw=v, ctype="application/octet-stream")
                self._reply(404, {"error": {"code": "not_found", "message": self.path}})

            def do_PUT(self):
                if not self._auth():
                    return
                body = self._body()
                m = re.fullmatch(r"/v1/cluster/rendezvous/([^/]+)/(\d+)/([^/]+)", self.path)
                if m:
                    with gw.mu:
                        gw.rdv[(m.group(1), int(m.group(2)), m.group(3))] = body
                        gw.mu.notify_all()
                    return self._reply(200, {})
                m = re.fullmatch(r"/v1/cluster/blobs/(sha256:[0-9a-f]{64})", self.path)
                if m:   # adopt a blob the node wrote into the shared directory
                    if gw.blob(m.group(1)) is None:
                        return self._reply(404, {"error": {"code": "not_found", "message": "no"}})
                    return self._reply(200, {"id": m.group(1)})
                self._reply(404, {"error": {"code": "not_found", "message": self.path}})

            def do_DELETE(self):
                if not self._auth():
                    return
                self._reply(200, {})

            def do_POST(self):
                if not self._auth():
                    return
                raw = self._body()
                if self.path == "/v1/cluster/blobs":
                    bid = "sha256:" + hashlib.sha256(raw).hexdigest()
                    with gw.mu:
                        gw.blobs[bid] = bytes(raw)
                    return self._reply(201, {"id": bid, "size": len(raw)})
                body = json.loads(raw or b"{}")
                if self.path == "/v1/cluster/nodes/register":
                    nid = "n" + secrets.token_hex(4)
                    cred = "kn_" + secrets.token_urlsafe(32)
                    with gw.mu:
                        gw.nodes[nid] = body["name"]
                        gw.creds[nid] = cred
                        gw.registered.append(body)
                        gw.mu.notify_all()
                    rep = {"id": nid, "heartbeat_s": 1, "credential": cred}
                    if gw.blob_dir:
                        rep["blob_store"] = {"dir": gw.blob_dir, "id": gw.store_id}
                    return self._reply(200, rep)
                m = re.fullmatch(r"/v1/cluster/nodes/([^/]+)/heartbeat", self.path)
                if m:
                    known = m.group(1) in gw.nodes
                    if known:
                        with gw.mu:
                            gw.heartbeats.append((gw.nodes[m.group(1)], body))
                            gw.mu.notify_all()
                    return self._reply(200 if known else 404, {})
                m = re.fullmatch(r"/v1/cluster/nodes/([^/]+)/(lease|results|logs)", self.path)
                if not m or m.group(1) not in gw.nodes:
                    return self._reply(404, {"error": {"code": "not_found", "message": self.path}})
                name = gw.nodes[m.group(1)]
                what = m.group(2)
                if what == "lease":
                    return self._reply(200, gw._lease(name, body))
                if what == "results":
                    return self._reply(200, gw._results(body))
                with gw.mu:
                    if gw.fail_logs > 0:
                        gw.fail_logs -= 1
                        return self._reply(503, {"error": {"code": "unavailable",
                                                           "message": "try again"}})
                    gw.log_posts += 1
                    for r in body["runs"]:
                        key = (r["job_id"], r["attempt"], r["part"])
                        buf = gw.logs.setdefault(key, bytearray())
                        data = base64.b64decode(r["data_b64"])
                        off = r["offset"]
                        # append by offset: a repeat overwrites what is there
                        if off <= len(buf):
                            buf[off:off + len(data)] = data
                    gw.mu.notify_all()
                return self._reply(200, {})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---------------------------------------------------------------- the node side
    def _lease(self, name, body):
        deadline = time.monotonic() + min(body.get("wait_ms", 0), 2000) / 1000
        with self.mu:
            while True:
                q = self.queues.get(name, [])
                c = self.cancels.get(name, [])
                if (q and body.get("max", 0) > 0) or c or time.monotonic() >= deadline:
                    break
                self.mu.wait(max(0.01, deadline - time.monotonic()))
            n = max(0, body.get("max", 0))
            runs, self.queues[name] = q[:n], q[n:]
            self.cancels[name] = []
            return {"runs": runs, "cancel": c}

    def _results(self, body):
        recorded = []
        with self.mu:
            for r in body.get("results", []):
                key = r["run_id"] + (f".p{r['node_rank']}" if "node_rank" in r else "")
                self.results[key] = r
                recorded.append(r["run_id"])
            for p in body.get("progress", []):
                self.progress.append((time.monotonic(), p["job_id"], p["attempt"], p["progress"]))
            self.mu.notify_all()
        return {"recorded": recorded}

    # ---------------------------------------------------------------- the test side
    def blob(self, bid):
        with self.mu:
            data = self.blobs.get(bid)
        if data is None and self.blob_dir:
            path = os.path.join(self.blob_dir, "sha256", bid[7:9], bid[7:])
            if os.path.exists(path):
                with open(path, "rb") as f:
                    data = f.read()
        return data

    def put_blob(self, data, shared=None):
        """Stores data as a blob: in the shared directory when there is one
        (and shared is not False), else in memory served over HTTP."""
        bid = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.blob_dir and shared is not False:
            d = os.path.join(self.blob_dir, "sha256", bid[7:9])
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, bid[7:])
            if not os.path.exists(path):
                tmp = path + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.chmod(tmp, 0o640)
                os.rename(tmp, path)
        else:
            with self.mu:
                self.blobs[bid] = bytes(data)
        return bid

    def blob_path(self, bid):
        return os.path.join(self.blob_dir, "sha256", bid[7:9], bid[7:])

    def submit(self, node, run):
        with self.mu:
            self.queues.setdefault(node, []).append(run)
            self.mu.notify_all()

    def cancel(self, node, job_id, attempt=1):
        with self.mu:
            self.cancels.setdefault(node, []).append({"job_id": job_id, "attempt": attempt})
            self.mu.notify_all()

    def wait_registered(self, name, timeout=30):
        with self.mu:
            ok = self.mu.wait_for(lambda: name in self.nodes.values(), timeout)
        assert ok, f"node {name} never registered"

    def wait_heartbeat(self, name, pred, timeout=30):
        with self.mu:
            ok = self.mu.wait_for(lambda: any(n == name and pred(b) for n, b in self.heartbeats),
                                  timeout)
            assert ok, f"no heartbeat of {name} met the condition"

    def wait_result(self, key, timeout=60):
        with self.mu:
            ok = self.mu.wait_for(lambda: key in self.results, timeout)
            assert ok, f"no result for {key} within {timeout}s"
            return self.results[key]

    def wait_live_log(self, key, pred, timeout=30):
        with self.mu:
            ok = self.mu.wait_for(lambda: pred(bytes(self.logs.get(key, b""))), timeout)
            assert ok, f"live log {key}: condition not met; have {bytes(self.logs.get(key, b''))[-300:]!r}"
            return bytes(self.logs[key])

    def wait_progress(self, job_id, pred, timeout=30):
        with self.mu:
            ok = self.mu.wait_for(
                lambda: any(j == job_id and pred(p) for _, j, _, p in self.progress), timeout)
            assert ok, f"no progress of {job_id} met the condition: {self.progress}"
