"""The dashboard's job page for a task (issue 18), in headless Chromium
through selenium: the task's image, command and exit code; a live log
pane that follows GET /v1/jobs/{id}/logs while the task runs (and a gang
part chooser); the program's `event: progress` lines plotted as for
train_mlp (the gateway's event data carries them in `progress`); the
files it left in /kowloon/out listed for download.

A scripted gateway serves ui/ and plays the job, so the page is checked
at each step of a run the test controls (log bytes appear before the job
ends; a UTF-8 character split across chunks). test_task_clients.py runs
the clients against the real stack. Screenshots go to
.test-logs/ui-task-*.png. Skipped only where Debian's chromium or
chromedriver is absent, as test_ui.py."""

import json
import mimetypes
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import stack as stk

# The dashboard's browser helpers, from its tests in the clients room.
sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients")))
from test_ui import browser, by_css, console_problems, shot, sign_in, wait_for  # noqa: F401

CHARTJS = "/usr/share/javascript/chart.js/chart.min.js"
KEY = "kl_ui_task"


class ScriptedGateway:
    """Serves ui/ and one task job whose state, log, progress events and
    outputs the test sets step by step."""

    def __init__(self, job):
        self.job = job
        self.logs = {0: b"", 1: b""}
        self.events = []            # (event, data) in order, streamed to /events
        self.outputs = {}
        self.cond = threading.Condition()
        gw = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, status, body, ctype="application/json", extra=None):
                if not isinstance(body, bytes):
                    body = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                try:
                    self._get()
                except (BrokenPipeError, ConnectionResetError):
                    pass        # the page moved on and dropped the stream

            def _get(self):
                u = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(u.query))
                path = u.path
                if path.startswith("/ui/"):
                    return self._static(path)
                if self.headers.get("Authorization") != f"Bearer {KEY}":
                    return self._send(401, {"error": {"code": "unauthorized", "message": "no"}})
                jid = gw.job["id"]
                if path == "/v1/kernels":
                    return self._send(200, {"kernels": []})
                if path == "/v1/jobs":
                    with gw.cond:
                        return self._send(200, {"jobs": [dict(gw.job)], "next_cursor": None})
                if path == "/v1/events":     # the jobs page's stream: open, quiet
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for _ in range(60):
                        self._chunk(b": keep-alive\n\n")
                        time.sleep(1)
                    return self._chunk(b"")
                if path == f"/v1/jobs/{jid}":
                    with gw.cond:
                        return self._send(200, dict(gw.job))
                if path == f"/v1/jobs/{jid}/events":
                    return self._events()
                if path == f"/v1/jobs/{jid}/logs":
                    return self._logs(int(q.get("part", 0)), q.get("follow") == "1")
                if path == f"/v1/jobs/{jid}/result":
                    return self._send(200, {"id": jid, "outputs": {
                        n: {"blob": "sha256:" + "0" * 64, "bytes": len(b)} for n, b in gw.outputs.items()}})
                self._send(404, {"error": {"code": "not_found", "message": path}})

            def _static(self, path):
                rel = path[len("/ui/"):] or "index.html"
                if rel == "vendor/chart.js/chart.min.js":
                    full = CHARTJS
                else:
                    full = os.path.join(stk.REPO, "ui", rel)
                if ".." in rel or not os.path.isfile(full):
                    return self._send(404, {"error": {"code": "not_found", "message": rel}})
                ctype = mimetypes.guess_type(full)[0] or "application/octet-stream"
                if full.endswith(".js"):
                    ctype = "text/javascript"
                with open(full, "rb") as f:
                    self._send(200, f.read(), ctype)

            def _terminal(self):
                return gw.job["state"] in ("succeeded", "failed", "cancelled")

            def _events(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = 0
                while True:
                    with gw.cond:
                        gw.cond.wait_for(lambda: len(gw.events) > sent, 30)
                        new = gw.events[sent:]
                    for i, (ev, data) in enumerate(new, sent + 1):
                        idline = f"id: {i}\n" if ev != "progress" else ""
                        self._chunk(f"{idline}event: {ev}\ndata: {json.dumps(data)}\n\n".encode())
                        if ev == "state" and data["state"] in ("succeeded", "failed", "cancelled"):
                            self._chunk(b"")
                            return
                    sent += len(new)
                    if not new:
                        self._chunk(b": keep-alive\n\n")

            def _logs(self, part, follow):
                off = 0
                rng = self.headers.get("Range")
                if rng:
                    off = int(rng.split("=")[1].rstrip("-"))
                with gw.cond:
                    have = gw.logs[part]
                if not follow:
                    return self._send(206 if rng else 200, have[off:], "text/plain; charset=utf-8")
                self.send_response(206 if rng else 200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = off
                while True:
                    with gw.cond:
                        gw.cond.wait_for(lambda: len(gw.logs[part]) > sent or self._terminal(), 30)
                        data, done = gw.logs[part][sent:], self._terminal()
                    if data:
                        self._chunk(data)
                        sent += len(data)
                    elif done:
                        self._chunk(b"")
                        return

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.srv.server_port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def log(self, data, part=0):
        with self.cond:
            self.logs[part] += data
            self.cond.notify_all()

    def event(self, ev, data, **job):
        with self.cond:
            self.job.update(job)
            self.events.append((ev, data))
            self.cond.notify_all()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def task_job(jid):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"id": jid, "kind": "task", "kernel": None, "state": "running", "attempts": 1,
            "max_attempts": 3, "priority": 0, "labels": {"team": "ml"}, "node": "node-1",
            "backend": "cpu", "created_at": now, "started_at": now, "finished_at": None,
            "resources": {"nodes": 2, "gpus": 0},
            "task": {"image": "localhost/kowloon-torch:1",
                     "command": ["torchrun", "--nnodes=2", "train.py", "--note", "a b"],
                     "env": {"LR": "0.01"}, "workdir": "/kowloon/work", "network": "none"},
            "exit_code": None, "logs": f"/v1/jobs/{jid}/logs", "progress": None}


@pytest.mark.timeout(180)
def test_task_job_page_shows_the_task_its_live_log_progress_chart_and_outputs(browser):  # noqa: F811
    d = browser
    jid = "0f1e2d3c-task-ui-" + os.urandom(3).hex()
    gw = ScriptedGateway(task_job(jid))
    try:
        sign_in(d, gw.base, KEY)
        # the jobs list names a task by its image
        wait_for("the task in the jobs list", lambda: "localhost/kowloon-torch:1" in by_css(d, "#jobs-table")[0].text)
        d.get(f"{gw.base}/ui/#/jobs/{jid}")
        wait_for("the job page", lambda: by_css(d, "#job-image"))
        assert by_css(d, "#job-image")[0].text == "localhost/kowloon-torch:1"
        assert by_css(d, "#job-command")[0].text == "torchrun --nnodes=2 train.py --note 'a b'"
        assert by_css(d, "#job-exit-code")[0].text == "—"
        assert "LR" in by_css(d, "#task-env")[0].text
        gw.event("state", {"job_id": jid, "state": "running", "attempt": 1, "node": "node-1",
                           "kernel": None, "labels": {}})
        # the log arrives while the job runs, a character split across chunks
        gw.log(b"epoch 1 loss 0.9\n")
        wait_for("the first log line", lambda: "epoch 1 loss 0.9" in by_css(d, "#job-log")[0].text)
        euro = "r\u00e9sum\u00e9 \u20ac\n".encode()
        gw.log(euro[:2])
        gw.log(euro[2:] + b"epoch 2 loss 0.5\n")
        wait_for("the rest of the log", lambda: "epoch 2 loss 0.5" in by_css(d, "#job-log")[0].text)
        assert "r\u00e9sum\u00e9 \u20ac" in by_css(d, "#job-log")[0].text
        assert by_css(d, "#job-state .state")[0].get_attribute("data-state") == "running"
        # progress events as the gateway sends them: the program's line in `progress`
        for k in range(1, 6):
            gw.event("progress", {"job_id": jid, "state": "running", "attempt": 1, "node": "node-1",
                                  "kernel": None, "labels": {},
                                  "progress": {"epoch": k, "epochs": 5, "loss": round(1.0 / k, 3),
                                               "fraction": k / 5}})
        wait_for("the progress bar", lambda: float(by_css(d, "#job-progress")[0].get_attribute("value")) >= 0.99)
        if os.path.exists(CHARTJS):
            label = wait_for("the chart", lambda: by_css(d, "#report-chart")
                             and by_css(d, "#report-chart")[0].get_attribute("aria-label"))
            assert label == "Reported loss by epoch", label   # not attempt, not job_id
        else:
            table = wait_for("the table", lambda: by_css(d, "#report-table") and by_css(d, "#report-table")[0].text)
            assert "loss" in table and "attempt" not in table
        # a gang: the other part's log
        gw.log(b"rank 1 here\n", part=1)
        from selenium.webdriver.support.ui import Select
        Select(by_css(d, "#log-part")[0]).select_by_value("1")
        wait_for("part 1's log", lambda: by_css(d, "#job-log")[0].text.strip() == "rank 1 here")
        Select(by_css(d, "#log-part")[0]).select_by_value("0")
        wait_for("part 0's log again", lambda: "epoch 2 loss 0.5" in by_css(d, "#job-log")[0].text)
        # the end
        gw.outputs = {"model/weights.pt": b"W" * 2048, "metrics.json": b"{}"}
        gw.log(b"done\n")
        gw.event("state", {"job_id": jid, "state": "succeeded", "attempt": 1, "node": "node-1",
                           "kernel": None, "labels": {}},
                 state="succeeded", exit_code=0, finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 progress={"epoch": 5, "epochs": 5, "loss": 0.2, "fraction": 1.0})
        wait_for("the exit code", lambda: by_css(d, "#job-exit-code")[0].text == "0")
        wait_for("the outputs", lambda: by_css(d, "#task-outputs"))
        text = by_css(d, "#task-outputs")[0].text
        assert "model/weights.pt" in text and "2.0 KiB" in text and "metrics.json" in text
        wait_for("the whole log", lambda: by_css(d, "#job-log")[0].get_attribute("data-complete") == "true")
        assert by_css(d, "#job-log")[0].text.endswith("done")
        # exceptions and CSP refusals (the scripted gateway lacks routes the
        # other pages probe, such as /v1/usage: their 404s are not the page's)
        problems = [p for p in console_problems(d) if p.get("source") != "network"]
        assert not problems, problems
        shot(d, "task")
    finally:
        gw.close()


# ---------------------------------------------------------------- the real stack

PROGRESS_SCRIPT = """
import json, os, sys, time
def wait_for(name):   # the test makes the file when it is ready for what follows
    while not os.path.exists("/kowloon/work/" + name) and time.time() < float(os.environ["DEADLINE"]):
        time.sleep(0.05)
print("ready", flush=True)
wait_for("go1")
p = open(os.environ["KOWLOON_PROGRESS"], "a", buffering=1)
for epoch in range(1, 6):
    print(f"epoch {epoch} loss {1 / epoch:.3f}", flush=True)
    p.write(json.dumps({"epoch": epoch, "epochs": 5, "loss": 1 / epoch}) + "\\n")
    time.sleep(0.3)   # the node reads the progress file about every 250 ms
print("waiting", flush=True)
wait_for("go2")
open(os.path.join(os.environ["KOWLOON_OUT"], "metrics.json"), "w").write("{}")
print("done", flush=True)
"""


@pytest.fixture(scope="module")
def tstack():
    from test_task_clients import serve_task_stack
    yield from serve_task_stack()


@pytest.mark.timeout(240)
def test_task_page_against_the_stack_follows_the_log_and_plots_progress(tstack, browser):  # noqa: F811
    import kowloon
    d = browser
    with kowloon.Client(tstack.base, tstack.keys["A"]) as c:
        job = c.submit_task("localhost/kowloon-python:1", ["python3", "main.py"],
                            files={"main.py": PROGRESS_SCRIPT},
                            env={"DEADLINE": str(time.time() + 120)}, timeout_s=180)
        sign_in(d, tstack.base, tstack.keys["A"])
        d.get(f"{tstack.base}/ui/#/jobs/{job.id}")
        wait_for("the first line", lambda: "ready" in by_css(d, "#job-log")[0].text, 90)
        work = [os.path.join(dp, "work") for dp, dirs, _ in os.walk(os.path.join(tstack.root, "scratch"))
                if "work" in dirs and job.id in dp]
        open(os.path.join(work[0], "go1"), "w").close()
        wait_for("the log while it runs", lambda: "waiting" in by_css(d, "#job-log")[0].text, 60)
        assert "epoch 5 loss 0.200" in by_css(d, "#job-log")[0].text
        assert not job.refresh().done
        # the progress lines as the chart's points (or a table without Chart.js)
        if os.path.exists(CHARTJS):
            label = wait_for("the chart", lambda: by_css(d, "#report-chart")
                             and by_css(d, "#report-chart")[0].get_attribute("aria-label"), 30)
            assert label == "Reported loss by epoch", label
        wait_for("the progress bar", lambda: float(by_css(d, "#job-progress")[0].get_attribute("value")) >= 0.99, 30)
        open(os.path.join(work[0], "go2"), "w").close()
        wait_for("the exit code", lambda: by_css(d, "#job-exit-code")[0].text == "0", 60)
        wait_for("the outputs", lambda: "metrics.json" in by_css(d, "#task-outputs")[0].text, 30)
        wait_for("the whole log", lambda: by_css(d, "#job-log")[0].text.endswith("done"), 30)
        assert by_css(d, "#job-image")[0].text == "localhost/kowloon-python:1"
        problems = [p for p in console_problems(d) if p.get("source") != "network"]
        assert not problems, problems
        shot(d, "task-stack")
