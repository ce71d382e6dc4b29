"""Bad task requests (issue 18) against the real gateway: each is refused
with its status and a JSON error naming the field, and leaves nothing
behind — no job row, no queued entry, no blob. The checks are the
gateway's (gateway/task.c with service/data/svc_task.h, the rules nodes apply
too); no node is needed, so this stack has none."""

import os

import pytest

import stack as stk
from stack import started

IMAGE = "localhost/kowloon-python:1"
ZERO_BLOB = "sha256:" + "0" * 64


class ImagesStack(stk.Stack):
    def gateway_env(self, **extra):
        return super().gateway_env(**{"KOWLOON_TASK_IMAGES": "localhost/kowloon-*:*", **extra})


@pytest.fixture(scope="module")
def bs():
    yield from started(ImagesStack(node_names=()))


def task(**kw):
    t = {"image": IMAGE, "command": ["python3", "-c", "print(1)"]}
    t.update(kw)
    return t


def stored(bs):
    """Jobs and blobs in PostgreSQL, and tenant A's ready queue in Redis."""
    tid = bs.psql_value("SELECT id FROM tenants WHERE name = 'A'")
    return (bs.count_jobs(), int(bs.psql_value("SELECT count(*) FROM blobs")),
            bs.redis_cmd("ZCARD", f"kowloon:ready:{tid}"))


BAD = [
    # (what, body, status, field)
    ("an image outside the allow-list", {"task": task(image="docker.io/library/python:3")}, 422,
     "task.image"),
    ("an image that is no reference", {"task": task(image="-v/etc:/x")}, 422, "task.image"),
    ("no image", {"task": {"command": ["true"]}}, 422, "task.image"),
    ("an empty command", {"task": task(command=[])}, 422, "task.command"),
    ("an empty program", {"task": task(command=[""])}, 422, "task.command"),
    ("a command of 257 entries", {"task": task(command=["x"] * 257)}, 422, "task.command"),
    ("a command over 128 KiB", {"task": task(command=["x" * 32768] * 5)}, 422, "task.command"),
    ("an env name that is no name", {"task": task(env={"A-B": "1"})}, 422, "task.env.A-B"),
    ("an env name Kowloon sets", {"task": task(env={"KOWLOON_JOB_ID": "x"})}, 422,
     "task.env.KOWLOON_JOB_ID"),
    ("MASTER_ADDR", {"task": task(env={"MASTER_ADDR": "10.0.0.1"})}, 422, "task.env.MASTER_ADDR"),
    ("WORLD_SIZE", {"task": task(env={"WORLD_SIZE": "8"})}, 422, "task.env.WORLD_SIZE"),
    ("a file with ..", {"task": task(files={"../x.py": {"text": "1"}})}, 422, "task.files.../x.py"),
    ("an absolute file", {"task": task(files={"/etc/passwd": {"text": "1"}})}, 422,
     "task.files./etc/passwd"),
    ("a file that is also a folder", {"task": task(files={"a": {"text": "1"},
                                                            "a/b": {"text": "2"}})}, 422,
     "task.files.a/b"),
    ("a file of an unknown form", {"task": task(files={"a": {"url": "http://x"}})}, 400,
     "task.files.a.url"),
    ("a file blob nobody uploaded", {"task": task(files={"a": {"blob": ZERO_BLOB}})}, 422,
     "task.files.a"),
    ("an input named a path", {"task": task(inputs={"a/b": {"b64": ""}})}, 422,
     "task.inputs.a/b"),
    ("an input whose data has too few values", {"task": task(inputs={"x": {
        "dtype": "float32", "shape": [4], "data": [1, 2, 3]}})}, 422, "task.inputs.x"),
    ("an input of an unknown dtype", {"task": task(inputs={"x": {
        "dtype": "complex128", "shape": [1], "data": [1]}})}, 422, "task.inputs.x"),
    ("an input blob nobody uploaded", {"task": task(inputs={"x": {
        "dtype": "uint8", "shape": [4], "blob": ZERO_BLOB}})}, 422, "task.inputs.x"),
    ("two inputs sharing a variable", {"task": task(inputs={"x.y": {"b64": ""},
                                                            "x_y": {"b64": ""}})}, 422,
     "task.inputs.x_y"),
    ("a workdir under /kowloon/in", {"task": task(workdir="/kowloon/in/w")}, 422, "task.workdir"),
    ("network host", {"task": task(network="host")}, 422, "task.network"),
    ("egress the tenant is not allowed", {"task": task(network="egress")}, 422, "task.network"),
    ("an output quota over --max-output-mb", {"task": task(output_quota_mb=1 << 20)}, 422,
     "task.output_quota_mb"),
    ("a member tasks do not have", {"task": task(privileged=True)}, 400, "task.privileged"),
    ("a kernel and a task", {"kernel": "sleep", "task": task()}, 422, "task"),
    ("params with a task", {"task": task(), "params": {}}, 422, "params"),
    ("memory_gb for a kernel", {"kernel": "sleep", "params": {"seconds": 0},
                                "resources": {"memory_gb": 1}}, 422, "resources.memory_gb"),
    ("memory_gb of 0", {"task": task(), "resources": {"memory_gb": 0}}, 422, "resources.memory_gb"),
    ("cpus of 2000", {"task": task(), "resources": {"cpus": 2000}}, 422, "resources.cpus"),
    ("65 nodes", {"task": task(), "resources": {"nodes": 65}}, 422, "resources.nodes"),
    ("a task that is no object", {"task": "python3 -c 1"}, 400, "task"),
]


@pytest.mark.parametrize("what,body,status,field", BAD, ids=[b[0] for b in BAD])
def test_a_bad_task_is_refused_naming_its_field_and_stores_nothing(bs, what, body, status, field):
    A = bs.client("A")
    before = stored(bs)
    r = A.post_job(body)
    assert r.status_code == status, (what, r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == "invalid_argument", r.text
    assert err["field"] == field, r.text
    assert err["message"], r.text
    assert stored(bs) == before, what


def test_a_large_inline_input_of_a_refused_task_leaves_no_blob(bs):
    """An inline input over 64 KiB becomes a blob only once the whole task
    is accepted: a refusal after it (the image) writes nothing."""
    A = bs.client("A")
    before = stored(bs)
    r = A.post_job({"task": task(image="docker.io/evil:1", inputs={"x": {
        "dtype": "float32", "shape": [32768], "data": [0.5] * 32768}})})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task.image", r.text
    assert stored(bs) == before


def test_the_tenants_own_patterns_replace_the_gateways_and_egress_is_per_tenant(bs):
    name = "imgs-" + os.urandom(3).hex()
    T = bs.client(key=bs.create_key(name))
    assert T.post_job({"task": task(image="ghcr.io/acme/train:2")}).status_code == 422
    r = bs.admin.post("/v1/tenants", json={"name": name, "task_images": ["ghcr.io/acme/*:*"],
                                           "task_egress": True})
    assert r.status_code == 200, r.text
    assert r.json()["task_images"] == ["ghcr.io/acme/*:*"] and r.json()["task_egress"] is True
    ok = T.post_job({"task": task(image="ghcr.io/acme/train:2", network="egress")})
    assert ok.status_code == 202, ok.text
    T.cancel(ok.json()["id"])
    # the gateway's own patterns no longer apply to this tenant
    r = T.post_job({"task": task()})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task.image", r.text
    assert T.get("/v1/images").json()["allowed"] == ["ghcr.io/acme/*:*"]
    # null: back to the gateway's
    r = bs.admin.post("/v1/tenants", json={"name": name, "task_images": None})
    assert r.status_code == 200 and r.json()["task_images"] is None, r.text
    assert T.get("/v1/images").json()["allowed"] == ["localhost/kowloon-*:*"]
    for bad in ({"task_images": "x"}, {"task_images": ["a, b"]}, {"task_egress": "yes"}):
        r = bs.admin.post("/v1/tenants", json={"name": name, **bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["field"] in ("task_images", "task_egress"), r.text


def test_logs_of_a_kernel_job_or_anothers_job_are_not_found(bs):
    A, B = bs.client("A"), bs.client("B")
    j = A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 16})
    r = A.get(f"/v1/jobs/{j['id']}/logs")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    t = A.post_job({"task": task()}).json()
    empty = A.get(f"/v1/jobs/{t['id']}/logs")
    assert empty.status_code == 200 and empty.text == "", empty.text  # queued: no log yet
    assert B.get(f"/v1/jobs/{t['id']}/logs").status_code == 404
    assert A.get(f"/v1/jobs/{t['id']}/logs?part=64").status_code == 400
    A.cancel(j["id"])
    A.cancel(t["id"])
