"""The dashboard (ui/, served by the gateway at /ui/) and its JavaScript
client: the static files' headers (strict CSP, nosniff, types, caching),
no way out of the served directories, ui/kowloon.js in Node (a scripted
server, then the real stack), and the dashboard itself in headless Chromium
through selenium: sign in, a job seen going queued → running → succeeded
without a reload, cancel from the list, a node opened, a job submitted from
the form generated from GET /v1/kernels, a hostile label shown as text.
Screenshots at 1280 and 390 px go to .test-logs/ui-*.png.

The browser tests skip only where Debian's chromium or chromedriver is
absent (selenium missing beside them is a failure); scripts/install-deps.sh
installs all three. The Node tests
skip where node (>= 18) is absent."""

import http.client
import json
import os
import re
import shutil
import subprocess
import time
import uuid

import numpy as np
import pytest

import stack as stk

SHOTS = os.path.join(stk.REPO, ".test-logs")
XSS = "<img src=x onerror=alert(1)>"


# ---------------------------------------------------------------- HTTP

def raw_get(stack, path, headers=None):
    """GET with the path sent exactly as given (no client normalisation)."""
    c = http.client.HTTPConnection("127.0.0.1", stack.gw_port, timeout=10)
    try:
        c.putrequest("GET", path, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def test_ui_files_have_a_strict_csp_and_their_content_types(stack):
    want = {"/ui/": "text/html; charset=utf-8", "/ui/index.html": "text/html; charset=utf-8",
            "/ui/app.js": "text/javascript; charset=utf-8", "/ui/kowloon.js": "text/javascript; charset=utf-8",
            "/ui/style.css": "text/css; charset=utf-8", "/ui/icon.svg": "image/svg+xml"}
    for path, ctype in want.items():
        status, h, body = raw_get(stack, path)
        assert status == 200, (path, status, body[:200])
        assert h["content-type"] == ctype, (path, h)
        csp = h["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "style-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert "frame-ancestors 'none'" in csp
        assert h["x-content-type-options"] == "nosniff"
        assert h["cache-control"] == "no-cache" and h["etag"].startswith('"')
        with open(os.path.join(stk.REPO, "ui", "index.html" if path == "/ui/" else path[4:]), "rb") as f:
            assert body == f.read()
    # the page itself has no inline script or style for the CSP to block
    _, _, page = raw_get(stack, "/ui/")
    assert b"<script>" not in page and b"<style" not in page and b" style=" not in page
    assert not re.search(rb"\son[a-z]+=", page)


def test_unchanged_ui_file_answers_304_to_its_etag(stack):
    _, h, _ = raw_get(stack, "/ui/app.js")
    status, h2, body = raw_get(stack, "/ui/app.js", {"If-None-Match": h["etag"]})
    assert status == 304 and body == b""
    assert h2["etag"] == h["etag"]
    status, _, _ = raw_get(stack, "/ui/app.js", {"If-None-Match": '"other"'})
    assert status == 200


def test_root_and_ui_redirect_to_the_dashboard(stack):
    status, h, _ = raw_get(stack, "/")
    assert status == 302 and h["location"] == "/ui/"
    status, h, _ = raw_get(stack, "/ui")
    assert status == 301 and h["location"] == "/ui/"


def test_chartjs_is_served_from_the_debian_path(stack):
    if not os.path.exists("/usr/share/javascript/chart.js/chart.min.js"):
        pytest.skip("libjs-chart.js is not installed")
    status, h, body = raw_get(stack, "/ui/vendor/chart.js/chart.min.js")
    assert status == 200 and h["content-type"].startswith("text/javascript")
    assert "max-age" in h["cache-control"]
    with open("/usr/share/javascript/chart.js/chart.min.js", "rb") as f:
        assert body == f.read()


@pytest.mark.parametrize("path", [
    "/ui/../Makefile", "/ui/..%2fMakefile", "/ui/..%2FMakefile", "/ui/%2e%2e/Makefile", "/ui/%2e%2e%2fMakefile",
    "/ui/..", "/ui/%2e%2e", "/ui/.", "/ui/.git", "/ui/..%5cMakefile", "/ui/%2fetc%2fpasswd",
    "/ui/vendor/chart.js/..%2f..%2f..%2f..%2fetc%2fpasswd", "/ui/vendor/chart.js/%2e%2e",
    "/ui/vendor/chart.js/../../../../../etc/passwd", "/ui/vendor/chart.js/chunks",
    "/ui/index.html%00.js", "/ui/index.html%2f", "/ui/Makefile", "/ui/nothing.js", "/ui//etc/passwd",
])
def test_paths_outside_the_ui_directories_are_refused(stack, path):
    status, h, body = raw_get(stack, path)
    assert status in (400, 404), (path, status, body[:200])
    assert b"root:" not in body and b"CFLAGS" not in body
    assert h["content-type"] == "application/json"


def test_missing_chartjs_is_a_404_not_an_error_of_the_gateway(stack):
    with stack.second_gateway("gateway-nochart", KOWLOON_CHARTJS_DIR="/nonexistent/chart.js") as base:
        c = stk.Client(base)
        assert c.get("/ui/vendor/chart.js/chart.min.js").status_code == 404
        assert c.get("/ui/").status_code == 200


def test_ui_dir_option_serves_regular_files_only(stack):
    d = os.path.join(stack.root, "ui-other")
    os.makedirs(os.path.join(d, "dir.js"))
    with open(os.path.join(d, "index.html"), "w") as f:
        f.write("<!doctype html><title>other</title>")
    os.mkfifo(os.path.join(d, "pipe.js"))  # an open() of it would block without O_NONBLOCK
    with open(os.path.join(stack.root, "secret.txt"), "w") as f:
        f.write("secret")
    os.symlink(os.path.join(stack.root, "secret.txt"), os.path.join(d, ".hidden.txt"))
    with stack.second_gateway("gateway-uidir", KOWLOON_UI_DIR=d) as base:
        c = stk.Client(base)
        r = c.get("/ui/")
        assert r.status_code == 200 and "<title>other</title>" in r.text
        for name in ("pipe.js", "dir.js", ".hidden.txt", "app.js"):
            r = c.get(f"/ui/{name}", timeout=5)
            assert r.status_code == 404, (name, r.status_code)
            assert "secret" not in r.text


# ---------------------------------------------------------------- Node

def node_18():
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        return None
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10).stdout
    return node if int(out.strip().lstrip("v").split(".")[0]) >= 18 else None


def test_kowloon_js_against_a_scripted_server():
    node = node_18()
    if not node:
        pytest.skip("node >= 18 is not installed")
    r = subprocess.run([node, "--test", os.path.join(stk.REPO, "tests", "js", "test_kowloon.mjs")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "# fail 0" in r.stdout


@pytest.mark.timeout(90)
def test_kowloon_js_against_the_stack(stack):
    node = node_18()
    if not node:
        pytest.skip("node >= 18 is not installed")
    env = dict(os.environ, KOWLOON_URL=stack.base, KOWLOON_KEY=stack.keys["A"])
    r = subprocess.run([node, os.path.join(stk.REPO, "tests", "js", "live.mjs")], capture_output=True,
                       text=True, timeout=80, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert '"ok":true' in r.stdout


# ---------------------------------------------------------------- browser

def chromium_paths():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def browser():
    paths = chromium_paths()
    if not paths:
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    # with chromium here, selenium must be too (tests/requirements.txt):
    # an ImportError fails the tests rather than skipping them
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = paths[0]
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,900", "--disable-extensions", "--no-first-run"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=paths[1]), options=opts)
    d.set_page_load_timeout(30)
    d.set_script_timeout(30)
    yield d
    d.quit()


def wait_for(what, pred, timeout=20):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 — the page is changing under us
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def by_css(d, sel):
    from selenium.webdriver.common.by import By
    return d.find_elements(By.CSS_SELECTOR, sel)


def shot(d, name):
    """Screenshots of the whole page, 1280 and 390 px wide (the viewport set
    through DevTools, so no window frame eats into it), under .test-logs/."""
    os.makedirs(SHOTS, exist_ok=True)
    d.execute_script("window.scrollTo(0, 0); document.activeElement && document.activeElement.blur()")
    for w in (1280, 390):
        metrics = {"width": w, "height": 900, "deviceScaleFactor": 1, "mobile": False}
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        time.sleep(0.3)
        height = d.execute_script("return Math.min(document.documentElement.scrollHeight, 4000)")
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", dict(metrics, height=max(600, height)))
        time.sleep(0.2)
        d.save_screenshot(os.path.join(SHOTS, f"ui-{name}-{w}.png"))
    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def console_problems(d):
    """Errors the page logged: CSP violations, exceptions, failed loads."""
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def sign_in(d, base, key, wrong_first=False):
    """Signs in with the keyboard alone: the key field has the focus, and
    Enter submits it."""
    from selenium.webdriver.common.keys import Keys
    d.get(base + "/ui/")
    d.execute_script("sessionStorage.clear()")  # whoever signed in here before
    d.refresh()
    wait_for("the sign-in form", lambda: by_css(d, "#apikey"))
    box = by_css(d, "#apikey")[0]
    assert d.switch_to.active_element == box
    if wrong_first:
        box.send_keys("kl_not_a_key", Keys.ENTER)
        wait_for("the refusal", lambda: "not accepted" in by_css(d, "#signin-error")[0].text)
        box.clear()
    box.send_keys(key, Keys.ENTER)
    wait_for("the jobs page", lambda: by_css(d, "#jobs-table") or by_css(d, "#no-jobs"))
    # the key is in this tab's sessionStorage, and in no URL
    assert d.execute_script("return sessionStorage.getItem('kowloon.key')") == key
    assert key not in d.current_url


def job_state_text(d):
    el = by_css(d, "#job-state .state")
    return el[0].get_attribute("data-state") if el else None


def nodes_text(d, base, key):
    """The nodes table's text as the holder of key sees it."""
    sign_in(d, base, key)
    d.get(base + "/ui/#/nodes")
    return wait_for("the nodes table", lambda: by_css(d, "#nodes-table") and by_css(d, "#nodes-table")[0].text)


@pytest.mark.timeout(180)
def test_dashboard_end_to_end(stack, A, browser):
    d = browser
    tag = "ui" + uuid.uuid4().hex[:8]
    sign_in(d, stack.base, stack.keys["A"], wrong_first=True)

    # --- queued → running → succeeded, seen live: both nodes held by
    # blockers, the job waits; the blockers cancelled, it runs and ends
    blockers = [A.submit("sleep", {"seconds": 60}, labels={"suite": tag}) for _ in stack.node_names]
    for b in blockers:
        A.wait(b["id"], 20, states=("running",))
    job = A.submit("sleep", {"seconds": 2}, labels={"suite": tag, "note": XSS})
    d.get(f"{stack.base}/ui/#/jobs/{job['id']}")
    d.execute_script("window.__same_page = 1")
    wait_for("queued", lambda: job_state_text(d) == "queued")
    wait_for("the live indicator", lambda: by_css(d, "#live")[0].get_attribute("data-mode") in ("sse", "poll"))
    for b in blockers:
        A.cancel(b["id"])
    wait_for("running", lambda: job_state_text(d) == "running", 20)
    shot(d, "job-running")
    wait_for("succeeded", lambda: job_state_text(d) == "succeeded", 20)
    assert d.execute_script("return window.__same_page") == 1, "the page was reloaded"
    events = [li.get_attribute("data-event") for li in by_css(d, "#timeline li")]
    assert events[:3] == ["queued", "running", "succeeded"], events
    wait_for("the outputs", lambda: by_css(d, "#outputs-card .output"))

    # --- the hostile label is text, never markup
    labels = by_css(d, "#job-labels")[0].text
    assert XSS in labels
    assert not by_css(d, "main img"), "a label became an element"
    shot(d, "job-detail")

    # --- the jobs list: filters, the label as text, cancel from the list
    long = A.submit("sleep", {"seconds": 60}, labels={"suite": tag})
    d.get(f"{stack.base}/ui/#/jobs?label=suite:{tag}")
    row_sel = f"tr[data-job-id='{long['id']}']"
    wait_for("the long job's row", lambda: by_css(d, row_sel))
    assert any(XSS in td.text for td in by_css(d, "#jobs-table td"))
    assert not by_css(d, "#jobs-table img")
    wait_for("the long job running", lambda: by_css(d, row_sel + " .state")[0].get_attribute("data-state") == "running", 20)
    shot(d, "jobs")
    # cancel with the keyboard: the focus stays on the button through the
    # table's redraws (every 5 s at least), and Enter presses it
    from selenium.webdriver.common.keys import Keys
    d.execute_script("arguments[0].focus()", by_css(d, row_sel + " button.cancel")[0])
    marker = d.execute_script("const t = document.getElementById('jobs-table'); t.dataset.old = '1'; return 1")
    wait_for("a redraw of the table", lambda: not by_css(d, "#jobs-table[data-old]"), 10)
    assert marker and d.switch_to.active_element.get_attribute("data-focus-key") == f"cancel:{long['id']}"
    d.switch_to.active_element.send_keys(Keys.ENTER)
    assert A.wait(long["id"], 20)["state"] == "cancelled"
    wait_for("the row to say cancelled",
             lambda: by_css(d, row_sel + " .state")[0].get_attribute("data-state") == "cancelled", 20)

    # --- a node
    d.get(f"{stack.base}/ui/#/nodes")
    wait_for("the nodes table", lambda: by_css(d, "#nodes-table"))
    shot(d, "nodes")
    link = [a for a in by_css(d, "#nodes-table a") if a.text == "node-a"][0]
    link.click()
    wait_for("node-a's page", lambda: "node-a" in by_css(d, "#node-name")[0].text)
    assert "#/nodes/" in d.current_url

    # --- submit from the form generated from the kernel catalog: x from a
    # .npy file, y typed in
    npy = os.path.join(stack.root, f"{tag}-x.npy")
    np.save(npy, np.array([1, 2, 3], dtype=np.float32))
    d.get(f"{stack.base}/ui/#/submit")
    wait_for("the form", lambda: by_css(d, "#s-kernel option[value=saxpy]"))
    from selenium.webdriver.support.ui import Select
    Select(by_css(d, "#s-kernel")[0]).select_by_value("saxpy")
    wait_for("saxpy's fields", lambda: by_css(d, "#p-a"))
    a = by_css(d, "#p-a")[0]
    assert a.get_attribute("type") == "number" and a.get_attribute("max")
    a.send_keys("2")
    by_css(d, "#i-x-file")[0].send_keys(npy)
    by_css(d, "#i-y-data")[0].send_keys("4, 5, 6")
    by_css(d, "#s-labels")[0].send_keys(f"suite={tag}")
    shot(d, "submit")
    by_css(d, "#submit-job")[0].click()
    wait_for("the new job's page", lambda: job_state_text(d) == "succeeded", 30)
    new_id = d.current_url.rsplit("/", 1)[1]
    assert A.job(new_id)["labels"] == {"suite": tag}
    cells = wait_for("y's values", lambda: [td.text for td in by_css(d, "table.tensor[data-output=y] td")])
    assert cells == ["6.0", "9.0", "12.0"] or [float(c) for c in cells] == [6, 9, 12], cells

    # --- an invalid submit is refused with the API's message, nothing stored
    before = stack.count_jobs()
    d.get(f"{stack.base}/ui/#/submit")
    wait_for("the form", lambda: by_css(d, "#s-kernel option[value=saxpy]"))
    Select(by_css(d, "#s-kernel")[0]).select_by_value("saxpy")
    wait_for("saxpy's fields", lambda: by_css(d, "#p-a"))
    by_css(d, "#p-a")[0].send_keys("2")
    by_css(d, "#i-x-data")[0].send_keys("1 2 3")
    by_css(d, "#i-y-data")[0].send_keys("1 2")
    by_css(d, "#submit-job")[0].click()
    wait_for("the 422", lambda: "422" in by_css(d, "#submit-error")[0].text)
    assert stack.count_jobs() == before

    # --- no alert ran, and the page logged no CSP violation or error
    from selenium.common.exceptions import NoAlertPresentException
    with pytest.raises(NoAlertPresentException):
        d.switch_to.alert.text  # noqa: B018
    problems = console_problems(d)
    assert not [p for p in problems if "Content Security Policy" in p["message"]], problems
    # Chromium logs every non-2xx fetch as a failed load: the refused key,
    # the 422, and the event streams and usage view a gateway without them
    # answers 404 (the client then polls, the Usage link stays hidden)
    expected = re.compile(r"status of (401|422)|/v1/(usage|events|jobs/[0-9a-f-]+/events)\S* - .*status of 404")
    assert not [p for p in problems if not expected.search(p["message"])], problems

    # --- sign out forgets the key
    by_css(d, "#signout")[0].click()
    wait_for("the sign-in form", lambda: by_css(d, "#apikey"))
    assert d.execute_script("return sessionStorage.getItem('kowloon.key')") is None

    # --- an admin key sees the nodes' heartbeat age too (a tenant's list
    # has no heartbeat times, and no such column)
    assert "Heartbeat" not in nodes_text(d, stack.base, stack.keys["A"])
    text = nodes_text(d, stack.base, stack.keys["admin"])
    assert "Heartbeat age" in text and re.search(r"\d+(\.\d)? (ms|s)\b", text), text
    # a drained node says so (the page follows the list every 3 s)
    node_b = [n for n in stack.admin.nodes() if n["name"] == "node-b"][0]
    assert stack.admin.post(f"/v1/nodes/{node_b['id']}/drain").status_code == 200
    try:
        row = f"#nodes-table tr[data-node-id='{node_b['id']}']"
        wait_for("node-b draining", lambda: "draining" in by_css(d, row)[0].text, 10)
        shot(d, "nodes-admin")
    finally:
        stack.admin.request("DELETE", f"/v1/nodes/{node_b['id']}/drain")


@pytest.mark.timeout(90)
def test_dashboard_pages_through_jobs_and_shows_a_failure(stack, A, browser):
    d = browser
    tag = "pg" + uuid.uuid4().hex[:8]
    ids = [A.run("sleep", {"seconds": 0}, labels={"suite": tag})["id"] for _ in range(3)]
    x = np.zeros((4, 2), dtype=np.float32)
    y = np.array([0, 1, 5, 0], dtype=np.int32)  # 5: outside [0, classes)
    bad = A.submit("train_mlp", {"classes": 2, "epochs": 1, "batch_size": 4}, {"x": stk.tensor(x), "y": stk.tensor(y)},
                   labels={"suite": tag})
    bad = A.wait(bad["id"], 30)
    assert bad["state"] == "failed", bad
    ids.append(bad["id"])
    sign_in(d, stack.base, stack.keys["A"])

    # newest first, two a page: the failed job and the last sleep, then the
    # first two; "« Newest" goes back
    d.get(f"{stack.base}/ui/#/jobs?label=suite:{tag}&limit=2")
    rows = lambda: [r.get_attribute("data-job-id") for r in by_css(d, "#jobs-table tbody tr")]  # noqa: E731
    wait_for("the first page", lambda: rows() == ids[:1:-1])
    by_css(d, "#next-page")[0].click()
    wait_for("the second page", lambda: rows() == ids[1::-1])
    assert not by_css(d, "#next-page")
    by_css(d, "#first-page")[0].click()
    wait_for("the first page again", lambda: rows() == ids[:1:-1])

    # the failed job's page shows its error with the code
    by_css(d, f"tr[data-job-id='{bad['id']}'] a")[0].click()
    err = wait_for("the error", lambda: by_css(d, "#job-error")[0].text)
    assert bad["error"]["code"] in err and bad["error"]["message"][:20] in err, err
    assert job_state_text(d) == "failed"
    shot(d, "job-failed")

    # a job the scheduler preempted twice (--fair-preempt) before its one
    # counted attempt: 1 of its 3, not 3 of 3 (made so in PostgreSQL before
    # any read, so that no gateway holds its answer)
    pre = A.submit("sleep", {"seconds": 0}, labels={"suite": tag + "p"}, max_attempts=3)
    stk.wait_until(lambda: stack.psql_value(f"SELECT state FROM jobs WHERE id = '{pre['id']}'")
                   == "succeeded", 30, 0.1, "the job to succeed")
    stack.psql(f"UPDATE jobs SET attempts = 3, preemptions = 2 WHERE id = '{pre['id']}'")
    d.get(f"{stack.base}/ui/#/jobs/{pre['id']}")
    att = wait_for("the attempts", lambda: by_css(d, "#job-attempts")[0].text)
    assert att == "1 of 3, and 2 preempted", att


@pytest.mark.timeout(120)
def test_dashboard_without_chartjs_plots_as_a_table(stack, A, browser):
    d = browser
    x = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    with stack.second_gateway("gateway-nochart-ui", KOWLOON_CHARTJS_DIR="/nonexistent") as base:
        job = A.run("train_mlp", {"classes": 2, "epochs": 5, "hidden": 20},
                    {"x": stk.tensor(x), "y": stk.tensor(y)}, timeout=60)
        sign_in(d, base, stack.keys["A"])
        d.get(f"{base}/ui/#/jobs/{job['id']}")
        rows = wait_for("the loss table", lambda: by_css(d, "#report-table tbody tr"), 20)
        assert len(rows) == 5
        assert not by_css(d, "#report-chart")
        # w1 is 4x20: more than a table shows, offered for download only;
        # b2 (2 values) is a table
        w1 = by_css(d, ".output[data-output=w1]")[0]
        assert "80 elements" in w1.text and not w1.find_elements("css selector", "table")
        b2 = wait_for("b2's values", lambda: [td.text for td in by_css(d, "table.tensor[data-output=b2] td")])
        assert len(b2) == 2
        shot(d, "job-nochart")
    if os.path.exists("/usr/share/javascript/chart.js/chart.min.js"):
        sign_in(d, stack.base, stack.keys["A"])
        d.get(f"{stack.base}/ui/#/jobs/{job['id']}")
        wait_for("the loss chart", lambda: by_css(d, "#report-chart"), 20)
        shot(d, "job-chart")


# ---------------------------------------------------------------- events

class EventsProxy:
    """A reverse proxy in front of the gateway that adds what a gateway
    may offer and this one may not: GET /v1/jobs/{id}/events (a job's
    state changes, seen by polling the gateway, and made-up `progress`
    events with fraction, epoch and loss while it runs; the first stream is
    cut after two events so that the client must reconnect with
    Last-Event-ID), GET /v1/usage, and a `usage` member on ended jobs. So
    the dashboard's event-stream path, usage page and usage fields are
    driven in a browser here whatever the gateway serves; everything else
    goes through unchanged."""

    USAGE = {"by_kernel": [{"kernel": "sleep", "jobs": 3, "run_s": 4.5, "cost": 0.125}],
             "by_label": [{"label": "suite:x", "jobs": 3, "cost": 0.125}]}

    def __init__(self, gateway):
        import http.server
        import threading
        import requests
        self.gw = gateway
        self.http = requests
        self.lock = threading.Lock()
        self.logs = {}          # job id -> [(id, event, data)]
        self.last_event_ids = []
        self.streams = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_GET(self):
                proxy.handle(self)

            def do_POST(self):
                proxy.handle(self)

            def do_HEAD(self):
                proxy.handle(self)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()

    def forward(self, h):
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else None
        keep = ("Authorization", "Content-Type", "Prefer", "If-None-Match", "Accept", "Last-Event-ID")
        r = self.http.request(h.command, self.gw + h.path, data=body, allow_redirects=False, timeout=30,
                              headers={k: h.headers[k] for k in keep if h.headers.get(k)})
        return r

    def reply(self, h, status, headers, body):
        h.send_response(status)
        for k, v in headers.items():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                h.send_header(k, v)
        h.send_header("Content-Length", headers.get("Content-Length", str(len(body)))
                      if h.command == "HEAD" else str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def handle(self, h):
        m = re.fullmatch(r"/v1/jobs/([0-9a-f-]{36})(/events)?", h.path)
        if h.command == "GET" and h.path == "/v1/usage" and h.headers.get("Authorization"):
            return self.reply(h, 200, {"Content-Type": "application/json"}, json.dumps(self.USAGE).encode())
        if h.command == "GET" and m and m.group(2):
            return self.stream(h, m.group(1))
        r = self.forward(h)
        body = r.content
        if h.command == "GET" and m and r.status_code == 200:
            j = r.json()
            if j["state"] in stk.TERMINAL:
                j["usage"] = {"queue_wait_s": 0.5, "run_s": 2.0, "gpu_s": 0, "cpu_s": 2.0,
                              "bytes_in": 0, "bytes_out": 4, "cost": 0.0042}
            body = json.dumps(j).encode()
        self.reply(h, r.status_code, dict(r.headers), body)

    def _log(self, job_id, state):
        """The job's event log, extended by what the gateway says now."""
        with self.lock:
            log = self.logs.setdefault(job_id, [])
            states = [e for e in log if e[1] != "progress"]
            if not states or states[-1][2]["state"] != state:
                log.append((len(log) + 1, state, {"state": state, "at": stk.datetime.utcnow().isoformat() + "Z"}))
            elif state == "running":
                k = sum(1 for e in log if e[1] == "progress") + 1
                log.append((len(log) + 1, "progress", {"fraction": min(1.0, k / 6), "epoch": k, "loss": 1.0 / k}))
            return list(log)

    def stream(self, h, job_id):
        r = self.http.get(f"{self.gw}/v1/jobs/{job_id}", timeout=10,
                          headers={"Authorization": h.headers.get("Authorization", "")})
        if r.status_code != 200:
            return self.reply(h, r.status_code, dict(r.headers), r.content)
        with self.lock:
            self.streams += 1
            first = self.streams == 1
            self.last_event_ids.append(h.headers.get("Last-Event-ID"))
        last = int(h.headers.get("Last-Event-ID") or 0)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.end_headers()
        sent = 0
        try:
            h.wfile.write(b"retry: 200\n\n")
            while True:
                state = self.http.get(f"{self.gw}/v1/jobs/{job_id}", timeout=10,
                                      headers={"Authorization": h.headers["Authorization"]}).json()["state"]
                for eid, ev, data in self._log(job_id, state):
                    if eid <= last:
                        continue
                    h.wfile.write(f"id: {eid}\nevent: {ev}\ndata: {json.dumps(data)}\n\n".encode())
                    h.wfile.flush()
                    last = eid
                    sent += 1
                    if first and sent == 2:
                        return  # cut: the client must come back with Last-Event-ID: 2
                if state in stk.TERMINAL:
                    return
                time.sleep(0.3)
        except (BrokenPipeError, ConnectionResetError):
            return


@pytest.fixture
def events_proxy(stack):
    p = EventsProxy(stack.base)
    yield p
    p.close()


@pytest.mark.timeout(120)
def test_dashboard_follows_an_event_stream_and_shows_usage(stack, A, browser, events_proxy):
    d = browser
    p = events_proxy
    sign_in(d, p.base, stack.keys["A"])
    wait_for("the Usage link", lambda: by_css(d, "#nav-usage")[0].is_displayed())
    # 8 s: the progress bar must be seen at two values while the job runs
    # (the proxy adds one every 0.3 s); with 3 s, two loaded CI runs saw
    # the job end first (one at stop 32, one at stop 33)
    job = A.submit("sleep", {"seconds": 8}, labels={"suite": "sse"})
    d.get(f"{p.base}/ui/#/jobs/{job['id']}")
    wait_for("the live indicator to say events",
             lambda: by_css(d, "#live")[0].get_attribute("data-mode") == "sse")
    fractions = set()

    def progressing():
        v = by_css(d, "#job-progress")[0].get_attribute("value")
        if job_state_text(d) == "running" and v:
            fractions.add(float(v))
        return len(fractions) >= 2
    wait_for("the progress bar to move while it runs", progressing, 20)
    wait_for("the chart of the reported loss", lambda: by_css(d, "#report-chart"), 20)
    wait_for("succeeded", lambda: job_state_text(d) == "succeeded", 20)
    # the stream was cut after two events: the client came back for the rest
    assert p.last_event_ids[:2] == [None, "2"], p.last_event_ids
    events = [li.get_attribute("data-event") for li in by_css(d, "#timeline li")]
    assert events == ["queued", "running", "succeeded"], events
    # the job's usage, where the gateway reports it
    wait_for("the cost", lambda: "0.0042" in by_css(d, "#job-summary")[0].text)
    assert "GPU time" in by_css(d, "#job-summary")[0].text
    shot(d, "job-events")
    d.get(f"{p.base}/ui/#/usage")
    wait_for("the usage tables", lambda: len(by_css(d, "main table")) == 2)
    assert "sleep" in by_css(d, "main table")[0].text and "suite:x" in by_css(d, "main table")[1].text
    shot(d, "usage")


# ---------------------------------------------------------------- queue

@pytest.mark.timeout(180)
def test_queue_page_charts_the_last_hour_or_tables_it_without_chartjs(stack, admin, browser):
    """A fresh tenant with two finished jobs and one held queued (every
    node drained): the Queue page's totals, its charts' last points (or,
    without Chart.js, its table's sums) say so."""
    d = browser
    key = stack.create_key(f"ui-queue-{uuid.uuid4().hex[:8]}")
    T = stack.client(key=key)
    x = {"x": stk.tensor(np.arange(4, dtype=np.float32)), "y": stk.tensor(np.ones(4, np.float32))}
    for _ in range(2):
        T.run("saxpy", {"a": 2.0}, x)
    nodes = [n["id"] for n in admin.nodes()]
    try:
        for n in nodes:
            assert admin.post(f"/v1/nodes/{n}/drain").status_code == 200
        held = T.submit("saxpy", {"a": 1.0}, x)

        def totals():
            return {k: by_css(d, f"#queue-{k}")[0].text
                    for k in ("now-queued", "now-running", "submitted", "started", "finished")}

        want = {"now-queued": "1", "now-running": "0", "submitted": "3", "started": "2", "finished": "2"}
        if os.path.exists("/usr/share/javascript/chart.js/chart.min.js"):
            sign_in(d, stack.base, key)
            console_problems(d)  # what earlier tests' pages logged
            d.get(f"{stack.base}/ui/#/queue")
            wait_for("the queue charts", lambda: by_css(d, "#queue-chart") and by_css(d, "#throughput-chart"))
            wait_for("the totals", lambda: totals() == want)
            series = d.execute_script(
                "const q = Chart.getChart('queue-chart'), f = Chart.getChart('throughput-chart');"
                "return [q.data.datasets.map((s) => s.data), f.data.datasets[0].data, q.data.labels.length];")
            (queued, running), finished, n = series
            assert n == 60 and len(queued) == len(finished) == 60
            assert (queued[-1], running[-1], sum(finished)) == (1, 0, 2), series
            assert by_css(d, "#nav a[aria-current=page]")[0].text == "Queue"
            shot(d, "queue")
            assert not console_problems(d)
        with stack.second_gateway("gateway-nochart-queue", KOWLOON_CHARTJS_DIR="/nonexistent") as base:
            sign_in(d, base, key)
            console_problems(d)
            d.get(base + "/ui/#/queue")
            # rows and cells read in one script: the page redraws the table
            # as it refreshes, and an element found before a redraw is
            # stale after it (on a busy host, every time between two reads)
            cells = wait_for("the queue table", lambda: d.execute_script(
                "return Array.from(document.querySelectorAll('#queue-table tbody tr'), "
                "r => Array.from(r.querySelectorAll('td'), td => td.innerText.trim()))"))
            assert len(cells) == 60 and not by_css(d, "#queue-chart")
            # newest first: the current minute's queued and running, then the sums
            assert cells[0][1:3] == ["1", "0"], cells[0]
            assert [sum(int(c[i]) for c in cells) for i in (3, 4, 5)] == [3, 2, 2]
            assert totals() == want
            shot(d, "queue-nochart")
            # the HEAD that finds no Chart.js is logged, and only it
            assert all("chart.min.js" in e["message"] and "404" in e["message"]
                       for e in console_problems(d)), console_problems(d)
        T.cancel(held["id"])
    finally:
        for n in nodes:
            admin.request("DELETE", f"/v1/nodes/{n}/drain")
