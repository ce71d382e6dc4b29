"""Schemathesis hooks for the Kowloon API fuzz (loaded through
SCHEMATHESIS_HOOKS=hooks with this directory on PYTHONPATH; fuzz.py sets both).

Adjustments applied right before each request is sent so that they hold in
every phase (examples, coverage, fuzzing, stateful):

- `Prefer: wait=N` (GET and POST of jobs) becomes wait=1 (KOWLOON_FUZZ_WAIT,
  which fuzz.py sets to 0 for the tenant-delete round, whose subject is
  deleteJob): a job may never end on the fuzz's stack, and each case would
  hold a minute.
- GET /v1/events and GET /v1/jobs/{id}/events: a valid duration_s above 1
  (or none) becomes 1. An event stream stays open until the client goes
  (a tenant's) or the job ends (a job's): each case would hold the fuzz's
  request timeout. An invalid one is left alone, so the 400 cases are
  still sent.
- POST /v1/cluster/nodes/{node}/lease: a valid wait_ms above 50 (or none)
  becomes 50 ms (a poll with nothing to hand out is held that long; up to a
  minute would make the fuzz crawl). An invalid one (wrong type, out of
  range) is left alone, so the 400 cases are still sent.
- A cluster path's {node} that is a UUID becomes KOWLOON_FUZZ_NODE_ID, the
  node whose credential the round sends: a random id is only ever a 403,
  and the handlers behind it would go untested. A {node} that is not a
  UUID is left alone (the 403 case stays covered).
- POST /v1/cluster/nodes/register: a URL the gateway would accept is replaced by
  KOWLOON_FUZZ_NODE_URL, a loopback address where nothing listens. The
  gateway never calls a node's URL today (runs travel by lease), but a
  fuzzed URL must never be one that could lead it off this machine.
- POST /v1/jobs (JSON, or the "job" part of a multipart body): label keys
  are rewritten into the documented alphabet
  ([A-Za-z0-9_.-], 1..64 characters), keeping them distinct. OpenAPI 3.0
  cannot state a rule on property names (the spec carries it as
  x-key-pattern), so a generated "valid" body would otherwise almost always
  carry an invalid key and never reach the rest of the validation.
- POST /v1/tenants: the tenants named in KOWLOON_FUZZ_PROTECTED_TENANTS
  (those of the fuzz's own keys) get another name, so that the admin round
  cannot throttle its own key into a run of 429s (it would still pass, but
  test little).
- Any JSON body: integers outside the signed 64-bit range are clamped into
  it. The gateway's JSON parser refuses larger literals as a whole
  (400 invalid_json, as the spec says); clamping keeps every schema bound
  (all lie within int64) on the same side, so a valid body stays valid and
  an invalid one invalid. fuzz.py sends such literals itself (pinned).
"""

import os
import re
from collections.abc import MutableMapping

import schemathesis

_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _clamp_ints(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return min(max(v, INT64_MIN), INT64_MAX)
    if isinstance(v, dict):
        return {k: _clamp_ints(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clamp_ints(x) for x in v]
    return v


def _clean_labels(labels):
    out = {}
    for i, (key, value) in enumerate(labels.items()):
        k = _BAD_KEY_CHARS.sub("_", str(key))[:60] or "k"
        while k in out:
            k = f"{k[:56]}_{i}"
        out[k] = value
    return out


_WAIT = re.compile(r"(?i)wait\s*=\s*\"?\d+")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_STREAMS = ("/v1/events", "/v1/jobs/{id}/events")


def _leaves_out_a_header(case):
    """A coverage case that sends no value for a header parameter."""
    data = getattr(getattr(getattr(case, "meta", None), "phase", None), "data", None)
    scenario = getattr(getattr(data, "scenario", None), "value", None)
    where = getattr(getattr(data, "parameter_location", None), "value", None)
    return scenario == "missing_parameter" and where == "header"


@schemathesis.hook
def before_call(ctx, case, kwargs):
    op = ctx.operation
    # a job may never end here (no node takes it): wait a second at most.
    # Not in a case that leaves out a header on purpose: it is refused before
    # any wait, and an edit would make schemathesis revalidate the case as
    # one that sends every header (the CLI's Authorization included).
    for headers in (() if _leaves_out_a_header(case) else (case.headers, kwargs.get("headers"))):
        # kwargs' headers may be a CaseInsensitiveDict, not a dict
        if isinstance(headers, MutableMapping):
            for name in list(headers):
                if name.lower() == "prefer" and isinstance(headers[name], str):
                    value = _WAIT.sub("wait=" + os.environ.get("KOWLOON_FUZZ_WAIT", "1"), headers[name])
                    if value != headers[name]:
                        headers[name] = value
    if op is not None and op.method.upper() == "GET" and op.path in _STREAMS:
        # an event stream ends after duration_s: a second at most
        query = case.query if isinstance(case.query, dict) else {}
        d = query.get("duration_s")
        if d is None or (isinstance(d, (int, str)) and str(d).isdigit() and 1 < int(d) <= 86400):
            query["duration_s"] = 1
            case.query = query
    node = os.environ.get("KOWLOON_FUZZ_NODE_ID")
    params = case.path_parameters if isinstance(case.path_parameters, dict) else {}
    if node and op is not None and "{node}" in op.path and _UUID.match(str(params.get("node", ""))):
        params["node"] = node
        case.path_parameters = params
    if isinstance(case.body, (dict, list, int)):
        case.body = _clamp_ints(case.body)
    if op is None or not isinstance(case.body, dict):
        return
    if op.method.upper() == "POST" and op.path == "/v1/cluster/nodes/{node}/lease":
        # a poll is held up to wait_ms: keep the fuzz quick
        w = case.body.get("wait_ms")
        if "wait_ms" not in case.body:
            case.body["wait_ms"] = 50
        elif isinstance(w, int) and not isinstance(w, bool) and 50 < w <= 60000:
            case.body["wait_ms"] = 50
    elif op.method.upper() == "POST" and op.path == "/v1/cluster/nodes/register":
        url = case.body.get("url")
        if isinstance(url, str) and url.lower().startswith("http"):
            case.body["url"] = os.environ.get("KOWLOON_FUZZ_NODE_URL", "http://127.0.0.1:9/")
    elif op.method.upper() == "POST" and op.path == "/v1/tenants":
        protected = os.environ.get("KOWLOON_FUZZ_PROTECTED_TENANTS", "").split(",")
        if case.body.get("name") in protected:
            case.body["name"] += "-fuzz"
    elif op.method.upper() == "POST" and op.path == "/v1/jobs":
        # a multipart submit carries the job in its "job" part
        job = case.body.get("job") if isinstance(case.body.get("job"), dict) else case.body
        labels = job.get("labels")
        if isinstance(labels, dict):
            job["labels"] = _clean_labels(labels)
