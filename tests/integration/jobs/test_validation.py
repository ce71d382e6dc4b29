"""Bad requests get the right 4xx, a JSON error naming the field, and leave
no row behind in PostgreSQL."""

import base64
import json

import numpy as np
import pytest
import requests

from stack import free_port, tensor

F32 = lambda n: tensor(np.arange(n, dtype=np.float32))  # noqa: E731
SAXPY_IN = {"x": F32(4), "y": F32(4)}


def saxpy(**over):
    body = {"kernel": "saxpy", "params": {"a": 1.0}, "inputs": dict(SAXPY_IN)}
    body.update(over)
    return body


def gemm(a_shape, b_shape, c_shape=None):
    ins = {"a": tensor(np.ones(a_shape)), "b": tensor(np.ones(b_shape))}
    if c_shape:
        ins["c"] = tensor(np.ones(c_shape))
    return {"kernel": "gemm", "params": {}, "inputs": ins}


# id, body (dict, or str sent as is), content type, allowed statuses, code(s), field
CASES = [
    ("invalid_json", '{"kernel": "saxpy", ', "application/json", {400}, {"invalid_json"}, None),
    ("empty_body", "", "application/json", {400}, {"invalid_json"}, None),
    ("trailing_garbage", '{"kernel": "sleep", "params": {"seconds": 0}} x', "application/json",
     {400}, {"invalid_json"}, None),
    ("array_body", '[{"kernel": "sleep"}]', "application/json", {400},
     {"invalid_json", "invalid_argument"}, None),
    ("string_body", '"sleep"', "application/json", {400}, {"invalid_json", "invalid_argument"}, None),
    ("text_plain", json.dumps({"kernel": "sleep", "params": {"seconds": 0}}), "text/plain",
     {415}, {"unsupported_media_type"}, None),
    ("form_urlencoded", "kernel=sleep", "application/x-www-form-urlencoded",
     {415}, {"unsupported_media_type"}, None),
    ("no_content_type", json.dumps({"kernel": "sleep", "params": {"seconds": 0}}), None,
     {415}, {"unsupported_media_type"}, None),
    ("missing_kernel", {"params": {"seconds": 0}}, "application/json", {400, 422},
     {"invalid_argument"}, "kernel"),
    ("kernel_not_string", {"kernel": 5, "params": {}}, "application/json", {400, 422},
     {"invalid_argument"}, "kernel"),
    ("unknown_kernel", {"kernel": "fft", "params": {}}, "application/json", {422},
     {"invalid_argument"}, "kernel"),
    ("unknown_top_level_field", saxpy(colour="red"), "application/json", {400},
     {"invalid_argument"}, "colour"),
    ("missing_required_param", saxpy(params={}), "application/json", {400, 422},
     {"invalid_argument"}, "params.a"),
    ("param_wrong_type", saxpy(params={"a": "two"}), "application/json", {400, 422},
     {"invalid_argument"}, "params.a"),
    ("unknown_param", saxpy(params={"a": 1, "b": 2}), "application/json", {400, 422},
     {"invalid_argument"}, "params.b"),
    ("sleep_seconds_over_3600", {"kernel": "sleep", "params": {"seconds": 3601}},
     "application/json", {422}, {"invalid_argument"}, "params.seconds"),
    ("sleep_seconds_negative", {"kernel": "sleep", "params": {"seconds": -1}},
     "application/json", {422}, {"invalid_argument"}, "params.seconds"),
    ("reduce_unknown_op", {"kernel": "reduce", "params": {"op": "median"},
                           "inputs": {"x": F32(3)}}, "application/json", {422},
     {"invalid_argument"}, "params.op"),
    ("priority_10", saxpy(priority=10), "application/json", {400, 422},
     {"invalid_argument"}, "priority"),
    ("priority_negative", saxpy(priority=-1), "application/json", {400, 422},
     {"invalid_argument"}, "priority"),
    ("priority_not_integer", saxpy(priority="high"), "application/json", {400, 422},
     {"invalid_argument"}, "priority"),
    ("priority_fraction", saxpy(priority=2.5), "application/json", {400, 422},
     {"invalid_argument"}, "priority"),
    ("timeout_zero", saxpy(timeout_s=0), "application/json", {400, 422},
     {"invalid_argument"}, "timeout_s"),
    ("timeout_over_a_day", saxpy(timeout_s=86401), "application/json", {400, 422},
     {"invalid_argument"}, "timeout_s"),
    ("max_attempts_11", saxpy(max_attempts=11), "application/json", {400, 422},
     {"invalid_argument"}, "max_attempts"),
    ("backend_unknown", saxpy(resources={"backend": "tpu"}), "application/json", {400, 422},
     {"invalid_argument"}, "resources.backend"),
    ("gpus_zero", saxpy(resources={"gpus": 0}), "application/json", {400, 422},
     {"invalid_argument"}, "resources.gpus"),
    ("label_key_bad_chars", saxpy(labels={"a b": "v"}), "application/json", {400, 422},
     {"invalid_argument"}, None),
    ("label_value_too_long", saxpy(labels={"k": "v" * 257}), "application/json", {400, 422},
     {"invalid_argument"}, None),
    ("too_many_labels", saxpy(labels={f"k{i}": "v" for i in range(33)}), "application/json",
     {400, 422}, {"invalid_argument"}, "labels"),
    ("label_value_not_string", saxpy(labels={"k": 1}), "application/json", {400, 422},
     {"invalid_argument"}, None),
    ("missing_input", saxpy(inputs={"x": F32(4)}), "application/json", {422},
     {"invalid_argument"}, "inputs.y"),
    ("unknown_input", saxpy(inputs=dict(SAXPY_IN, z=F32(4))), "application/json", {400, 422},
     {"invalid_argument"}, "inputs.z"),
    ("shape_mismatch_data_length", saxpy(inputs={"x": {"dtype": "float32", "shape": [5],
                                                       "data": [1, 2, 3, 4]}, "y": F32(5)}),
     "application/json", {422}, {"invalid_argument"}, "inputs.x"),
    ("shape_mismatch_b64_bytes", saxpy(inputs={"x": {"dtype": "float32", "shape": [4],
                                                     "b64": base64.b64encode(b"\0" * 12).decode()},
                                               "y": F32(4)}),
     "application/json", {422}, {"invalid_argument"}, "inputs.x"),
    ("nested_data", saxpy(inputs={"x": {"dtype": "float32", "shape": [2, 2],
                                        "data": [[1, 2], [3, 4]]}, "y": F32(4)}),
     "application/json", {400, 422}, {"invalid_argument"}, "inputs.x"),
    ("saxpy_lengths_differ", saxpy(inputs={"x": F32(4), "y": F32(5)}), "application/json", {422},
     {"invalid_argument"}, "inputs.y"),
    ("saxpy_rank_2", saxpy(inputs={"x": tensor(np.ones((2, 2))), "y": tensor(np.ones((2, 2)))}),
     "application/json", {422}, {"invalid_argument"}, "inputs.x"),
    ("negative_dim", saxpy(inputs={"x": {"dtype": "float32", "shape": [-4], "data": []},
                                   "y": F32(4)}), "application/json", {400, 422},
     {"invalid_argument"}, "inputs.x"),
    ("gemm_inner_dims_mismatch", gemm((3, 4), (5, 2)), "application/json", {422},
     {"invalid_argument"}, "inputs.b"),
    ("gemm_c_shape_mismatch", gemm((3, 4), (4, 2), (2, 3)), "application/json", {422},
     {"invalid_argument"}, "inputs.c"),
    ("gemm_rank_1", gemm((4,), (4, 2)), "application/json", {422}, {"invalid_argument"}, "inputs.a"),
    ("malformed_b64", saxpy(inputs={"x": {"dtype": "float32", "shape": [4], "b64": "!!!notbase64$$"},
                                    "y": F32(4)}), "application/json", {422},
     {"invalid_argument"}, "inputs.x"),
    ("b64_and_data_both", saxpy(inputs={"x": dict(tensor(np.ones(4), True), data=[1, 1, 1, 1]),
                                        "y": F32(4)}), "application/json", {400, 422},
     {"invalid_argument"}, "inputs.x"),
    ("wrong_dtype_int32", saxpy(inputs={"x": tensor(np.arange(4, dtype=np.int32)), "y": F32(4)}),
     "application/json", {422}, {"invalid_argument"}, "inputs.x"),
    ("unknown_dtype", saxpy(inputs={"x": {"dtype": "float16", "shape": [4], "data": [1, 2, 3, 4]},
                                    "y": F32(4)}), "application/json", {400, 422},
     {"invalid_argument"}, "inputs.x"),
    ("non_numeric_data", saxpy(inputs={"x": {"dtype": "float32", "shape": [2], "data": [1, "a"]},
                                       "y": F32(2)}), "application/json", {400, 422},
     {"invalid_argument"}, "inputs.x"),
    ("reduce_scalar_input", {"kernel": "reduce", "params": {},
                             "inputs": {"x": {"dtype": "float32", "shape": [], "data": [1]}}},
     "application/json", {422}, {"invalid_argument"}, "inputs.x"),
    ("reduce_empty_input", {"kernel": "reduce", "params": {},
                            "inputs": {"x": {"dtype": "float32", "shape": [0], "data": []}}},
     "application/json", {422}, {"invalid_argument"}, "inputs.x"),
    ("inputs_not_object", saxpy(inputs=[1, 2]), "application/json", {400, 422},
     {"invalid_argument"}, "inputs"),
    ("params_not_object", saxpy(params=[1]), "application/json", {400, 422},
     {"invalid_argument"}, "params"),
]


def send(client, body, ctype):
    data = body if isinstance(body, str) else json.dumps(body)
    headers = {"Content-Type": ctype} if ctype else {}
    # requests adds no Content-Type for a bytes body; state one only when asked
    return client.post("/v1/jobs", data=data.encode(), headers=headers)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_submission_is_rejected_and_leaves_no_row(A, stack, case):
    name, body, ctype, statuses, codes, field = case
    before = stack.count_jobs()
    r = send(A, body, ctype)
    assert r.status_code in statuses, f"{name}: {r.status_code} {r.text[:400]}"
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    err = r.json().get("error")
    assert isinstance(err, dict), r.text
    assert err.get("code") in codes, f"{name}: code {err.get('code')!r}, want {codes}"
    assert isinstance(err.get("message"), str) and err["message"], r.text
    if field is not None:
        assert err.get("field") == field, f"{name}: field {err.get('field')!r}, want {field!r}: {r.text}"
    assert stack.count_jobs() == before, f"{name}: a rejected job left a row"


def test_valid_submission_adds_exactly_one_row(A, stack):
    before = stack.count_jobs()
    r = send(A, saxpy(), "application/json")
    assert r.status_code == 202, r.text
    A.tracker.append((A, r.json()["id"]))
    assert stack.count_jobs() == before + 1


def test_unknown_path_is_404_json(A):
    r = A.get("/v1/nothing-here")
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("method,path", [("DELETE", "/v1/jobs"), ("PUT", "/v1/kernels"),
                                         ("GET", "/v1/jobs/00000000-0000-4000-8000-000000000000/cancel")])
def test_wrong_method_is_405(A, method, path):
    r = A.request(method, path)
    assert r.status_code == 405, r.text
    assert r.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("job_id", ["00000000-0000-4000-8000-000000000000", "not-a-uuid", "1%27%20OR%201=1"])
def test_unknown_job_is_404(A, job_id):
    for r in (A.get(f"/v1/jobs/{job_id}"), A.result(job_id)):
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "not_found"


# ---------------------------------------------------------------- body limit

@pytest.fixture(scope="module")
def small_gateway(stack):
    """A second gateway on the same PostgreSQL and Redis with a 1 MiB limit."""
    port = free_port()
    proc = stack.start_gateway("gateway-small", port, KOWLOON_MAX_BODY_MB=1)
    yield stack.client("A", base=f"http://127.0.0.1:{port}")
    proc.stop()


def big_saxpy(n):
    return {"kernel": "saxpy", "params": {"a": 1.0},
            "inputs": {"x": tensor(np.zeros(n, np.float32), True),
                       "y": tensor(np.zeros(n, np.float32), True)}}


def test_body_over_limit_is_413_and_leaves_no_row(small_gateway, stack):
    body = json.dumps(big_saxpy(300_000)).encode()  # 2 x 1.2 MB of base64
    assert len(body) > 2 * 1024 * 1024
    before = stack.count_jobs()
    try:
        r = small_gateway.post("/v1/jobs", data=body, headers={"Content-Type": "application/json"})
    except requests.ConnectionError as e:
        pytest.fail(f"gateway dropped the connection instead of answering 413: {e}")
    assert r.status_code == 413, r.text[:300]
    assert r.json()["error"]["code"] == "payload_too_large"
    assert stack.count_jobs() == before


def test_body_over_limit_by_content_length_alone_is_413(small_gateway, stack):
    import socket
    port = int(small_gateway.base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + small_gateway.key.encode() +
                  b"\r\nContent-Length: 104857600\r\n\r\n{")
        s.settimeout(10)
        head = s.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 413") or head.startswith("HTTP/1.0 413"), head[:200]


def test_body_under_limit_on_small_gateway_is_accepted(small_gateway, stack):
    r = small_gateway.post("/v1/jobs", json=big_saxpy(80_000))  # ~0.85 MB of base64
    assert r.status_code == 202, r.text[:300]
    small_gateway.tracker.append((small_gateway, r.json()["id"]))
    j = stack.client("A").wait(r.json()["id"], 30)
    assert j["state"] == "succeeded", j
