"""Checks of the deployment files and the public contract that need no
running stack: docker-compose.yml as Compose renders it (two CPU nodes, so
a two-node job runs on one host; every KOWLOON_* variable an option of its
daemon), and
openapi/openapi.yaml as an OpenAPI 3.0 document that covers every route of
the v1 contract and whose examples fit its own schemas."""

import os
import re
import shutil
import subprocess

import pytest
import yaml
from daemon_options import env_options
from openapi_schema_validator import OAS30Validator, oas30_format_checker
from openapi_spec_validator import validate

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
SPEC = os.path.join(ROOT, "openapi", "openapi.yaml")

# Every route of the contract: (method, path as the spec writes it).
PUBLIC_ROUTES = [
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("get", "/v1/jobs/{id}/result"),
    ("post", "/v1/jobs/{id}/cancel"),
    ("get", "/v1/jobs/{id}/logs"),
    ("get", "/v1/images"),
    ("get", "/v1/kernels"),
    ("get", "/v1/nodes"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/openapi.yaml"),
]
CLUSTER_ROUTES = [
    ("post", "/v1/cluster/nodes/register"),
    ("post", "/v1/cluster/nodes/{node}/heartbeat"),
    ("delete", "/v1/cluster/nodes/{node}"),
    ("post", "/v1/cluster/nodes/{node}/lease"),
    ("post", "/v1/cluster/nodes/{node}/results"),
    ("post", "/v1/cluster/nodes/{node}/logs"),
    ("post", "/v1/cluster/blobs"),
    ("get", "/v1/cluster/blobs/{id}"),
    ("put", "/v1/cluster/blobs/{id}"),
    ("put", "/v1/cluster/rendezvous/{id}/{attempt}/{key}"),
    ("get", "/v1/cluster/rendezvous/{id}/{attempt}/{key}"),
]
UNAUTHENTICATED = {"/healthz", "/readyz", "/openapi.yaml"}
KERNELS = ["saxpy", "reduce", "gemm", "sleep"]
NODES = ("compute-gpu", "compute-cpu", "compute-cpu-2")
CPU_NODES = ("compute-cpu", "compute-cpu-2")


# ------------------------------------------------------------- compose ---

def _compose_cmd():
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


@pytest.fixture(scope="module")
def compose():
    """docker-compose.yml as `compose config` renders it (defaults of the
    ${VAR:-default} interpolations applied, anchors merged). `config` needs
    no Docker engine."""
    cmd = _compose_cmd()
    if cmd is None:
        pytest.skip("neither docker-compose nor `docker compose` is installed "
                    "(Debian: apt-get install docker-compose)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOWLOON_")}
    out = subprocess.run(cmd + ["-f", COMPOSE, "config"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_has_every_service(compose):
    services = set(compose["services"])
    assert {"postgres", "redis", "gateway", *NODES} <= services


def test_compose_datastores_are_pinned_persistent_and_health_checked(compose):
    pg, redis = compose["services"]["postgres"], compose["services"]["redis"]
    assert pg["image"] == "postgres:15"
    assert any("pg_isready" in part for part in pg["healthcheck"]["test"])
    assert any(str(v).endswith(":/var/lib/postgresql/data") or
               str(v).endswith(":/var/lib/postgresql/data:rw") or
               (isinstance(v, dict) and v.get("target") == "/var/lib/postgresql/data")
               for v in pg["volumes"])
    assert redis["image"] == "redis:7"
    command = redis["command"]
    command = command if isinstance(command, list) else command.split()
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "redis-cli" in redis["healthcheck"]["test"]


def _depends(service):
    deps = service.get("depends_on", {})
    if isinstance(deps, list):  # short form carries no condition
        return {name: None for name in deps}
    return {name: spec.get("condition") for name, spec in deps.items()}


def test_gateway_waits_for_healthy_postgres_and_redis(compose):
    gw = compose["services"]["gateway"]
    assert _depends(gw) == {"postgres": "service_healthy", "redis": "service_healthy",
                            "cluster-token": "service_completed_successfully"}
    assert gw["command"] in (["kowloon-gateway", "serve"], "kowloon-gateway serve")
    assert "healthcheck" in gw


def test_gateway_environment_and_port(compose):
    gw = compose["services"]["gateway"]
    env = gw["environment"]
    assert env["KOWLOON_LISTEN"] == "0.0.0.0:8080"
    assert env["KOWLOON_CLUSTER_LISTEN"] == "0.0.0.0:8081"
    assert env["KOWLOON_DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in env["KOWLOON_DATABASE_URL"]
    assert env["KOWLOON_REDIS_URL"].startswith("redis://redis:6379")
    ports = [_port(p) for p in gw["ports"]]
    # the public API only, on loopback unless KOWLOON_BIND says otherwise
    assert ports == [("127.0.0.1", 8080, 8080)], ports


def _port(p):
    """(host ip or None, published, target) of a ports entry in either form
    Compose renders ("127.0.0.1:8080:8080/tcp", or a mapping)."""
    if isinstance(p, dict):
        return p.get("host_ip"), int(p["published"]), int(p["target"])
    parts = str(p).split("/")[0].split(":")
    ip = parts[0] if len(parts) == 3 else None
    return ip, int(parts[-2]), int(parts[-1])


def test_the_cluster_listener_and_the_nodes_are_never_published(compose):
    for name, svc in compose["services"].items():
        for p in svc.get("ports", []):
            assert _port(p)[2] != 8081, (name, p)


def test_the_cluster_token_is_generated_not_a_default(compose):
    """No token is written in the file: a one-shot service makes a random
    one (as scripts/run.sh does) into a volume the daemons read it from."""
    with open(COMPOSE, encoding="utf-8") as f:
        text = f.read()
    assert "kowloon-dev-cluster-token" not in text
    s = compose["services"]
    maker = s["cluster-token"]
    script = " ".join(maker["command"]) if isinstance(maker["command"], list) else maker["command"]
    assert "/dev/urandom" in script and "umask 077" in script, script
    assert maker.get("restart") == "no"
    gw = s["gateway"]
    assert _depends(gw).get("cluster-token") == "service_completed_successfully"
    assert gw["environment"]["KOWLOON_CLUSTER_TOKEN"] == ""   # unless the user sets one
    assert gw["environment"]["KOWLOON_CLUSTER_TOKEN_FILE"] == "/var/lib/kowloon/secrets/cluster-token"


def test_compute_gpu_reserves_nvidia_gpus(compose):
    node = compose["services"]["compute-gpu"]
    devices = node["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1
    dev = devices[0]
    assert dev["driver"] == "nvidia"
    assert "gpu" in dev["capabilities"]
    assert dev.get("count") in ("all", 1) or dev.get("device_ids")
    env = node["environment"]
    assert env["KOWLOON_BACKEND"] == "cuda"
    assert env["KOWLOON_ADVERTISE"] == "http://compute-gpu:8081"
    assert env["KOWLOON_LISTEN"] == "0.0.0.0:8081"


@pytest.mark.parametrize("name", CPU_NODES)
def test_compute_cpu_runs_on_cpu_without_gpu_reservation(compose, name):
    node = compose["services"][name]
    assert node["environment"]["KOWLOON_BACKEND"] == "cpu"
    assert node["environment"]["KOWLOON_ADVERTISE"] == f"http://{name}:8081"
    assert node["environment"]["KOWLOON_LISTEN"] == "0.0.0.0:8081"
    assert "deploy" not in node or "devices" not in str(node["deploy"])


def test_two_cpu_nodes_are_two_distinct_nodes_of_one_image(compose):
    """A job with resources.nodes = 2 needs two registered CPU nodes: distinct
    names (a name is a node's identity), each reached at its own service
    name, both built from the gateway's image."""
    s = compose["services"]
    envs = [s[n]["environment"] for n in CPU_NODES]
    assert len({e["KOWLOON_NODE_NAME"] for e in envs}) == 2
    assert len({e["KOWLOON_ADVERTISE"] for e in envs}) == 2
    assert {s[n]["image"] for n in CPU_NODES} == {s["gateway"]["image"]}
    assert all(s[n]["command"] in (["kowloon-compute"], "kowloon-compute") for n in CPU_NODES)


def _volume_of(service, target):
    for v in service.get("volumes", []):
        if isinstance(v, dict) and v.get("target") == target:
            return v.get("source")
        if isinstance(v, str) and v.split(":")[1] == target:
            return v.split(":")[0]
    return None


def test_nodes_share_the_gateways_cluster_token(compose):
    s = compose["services"]
    env_gw = s["gateway"]["environment"]
    secrets = _volume_of(s["gateway"], "/var/lib/kowloon/secrets")
    assert secrets, "the gateway reads the token from the cluster-secrets volume"
    states = set()
    for name in NODES:
        env = s[name]["environment"]
        assert env["KOWLOON_CLUSTER_TOKEN"] == env_gw["KOWLOON_CLUSTER_TOKEN"]
        assert env["KOWLOON_CLUSTER_TOKEN_FILE"] == env_gw["KOWLOON_CLUSTER_TOKEN_FILE"]
        assert _volume_of(s[name], "/var/lib/kowloon/secrets") == secrets
        # the gateway's cluster listener, not its public port
        assert env["KOWLOON_GATEWAY"] == "http://gateway:8081"
        assert _depends(s[name]).get("gateway") == "service_healthy"
        assert "healthcheck" in s[name]
        # its credential in a volume of its own: a restarted container is the same node
        assert env["KOWLOON_STATE_DIR"] == "/var/lib/kowloon/node"
        states.add(_volume_of(s[name], "/var/lib/kowloon/node"))
    assert len(states - {None}) == len(NODES), states


def _daemon(service):
    cmd = service.get("command", [])
    cmd = cmd if isinstance(cmd, list) else cmd.split()
    return cmd[0] if cmd and cmd[0].startswith("kowloon-") else None


def test_every_kowloon_variable_is_an_option_of_its_daemon(compose):
    checked = 0
    for name, svc in compose["services"].items():
        if _daemon(svc) is None:
            continue
        opts = env_options(_daemon(svc))
        for var in svc.get("environment", {}):
            if var.startswith("KOWLOON_"):
                assert var in opts, f"{name}: {var} is not an option of {_daemon(svc)}"
                checked += 1
    assert checked >= 20


@pytest.fixture(scope="module")
def compose_tls():
    """docker-compose.yml with docker-compose.tls.yml over it, rendered."""
    cmd = _compose_cmd()
    if cmd is None:
        pytest.skip("neither docker-compose nor `docker compose` is installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOWLOON_")}
    out = subprocess.run(cmd + ["-f", COMPOSE, "-f", os.path.join(ROOT, "docker-compose.tls.yml"),
                                "config"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_the_tls_override_puts_every_node_on_https_with_the_gateways_certificate(compose_tls):
    s = compose_tls["services"]
    gw = s["gateway"]
    cert, key = gw["environment"]["KOWLOON_TLS_CERT"], gw["environment"]["KOWLOON_TLS_KEY"]

    def mounted(svc, path):
        """path lies in one of svc's volumes (long or short syntax)."""
        targets = [v.get("target", "") if isinstance(v, dict) else v.split(":")[1]
                   for v in svc.get("volumes", [])]
        return any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets)
    assert mounted(gw, cert) and mounted(gw, key)
    assert "https://localhost:8080/readyz" in gw["healthcheck"]["test"]
    for name in NODES:
        env = s[name]["environment"]
        assert env["KOWLOON_GATEWAY"] == "https://gateway:8081", name
        assert mounted(s[name], env["KOWLOON_TLS_CA"]), name
        # the nodes get the certificate, never the key
        assert not any("tls.key" in str(v) for v in s[name].get("volumes", [])), name
    for name, svc in s.items():
        if _daemon(svc) is None:
            continue
        opts = env_options(_daemon(svc))
        for var in svc.get("environment", {}):
            assert not var.startswith("KOWLOON_") or var in opts, (name, var)


def _seconds(duration):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


@pytest.mark.parametrize("name", NODES)
def test_nodes_are_ready_when_registered_and_stop_after_their_drain(compose, name):
    """The health check is the node's /readyz (registered, not draining);
    Compose waits longer than --drain-grace-s plus the cancel wait before
    it kills."""
    node = compose["services"][name]
    assert "http://127.0.0.1:8081/readyz" in node["healthcheck"]["test"]
    drain = int(node["environment"].get("KOWLOON_DRAIN_GRACE_S")
                or env_options("kowloon-compute")["KOWLOON_DRAIN_GRACE_S"])
    assert _seconds(node["stop_grace_period"]) > drain + 5


def test_every_service_has_a_healthcheck(compose):
    for name, svc in compose["services"].items():
        if "tools" in svc.get("profiles", []):
            continue  # one-shot commands
        assert "healthcheck" in svc, name


def test_compose_documents_how_to_create_the_first_key():
    with open(COMPOSE, encoding="utf-8") as f:
        text = f.read()
    assert "keys create --tenant" in text


# ------------------------------------------------------------- openapi ---

@pytest.fixture(scope="module")
def spec():
    with open(SPEC, encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_openapi_is_a_valid_openapi_3_0_document(spec):
    assert spec["openapi"].startswith("3.0.")
    validate(spec)  # raises OpenAPIValidationError with the path at fault


@pytest.mark.parametrize("method,path", PUBLIC_ROUTES + CLUSTER_ROUTES)
def test_openapi_documents_every_contract_route(spec, method, path):
    assert path in spec["paths"], f"{path} missing"
    assert method in spec["paths"][path], f"{method.upper()} {path} missing"


def test_openapi_security_is_bearer_except_health_and_spec(spec):
    scheme = spec["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert spec["security"] == [{"bearerAuth": []}]
    for method, path in PUBLIC_ROUTES + CLUSTER_ROUTES:
        op = spec["paths"][path][method]
        if path in UNAUTHENTICATED:
            assert op.get("security") == [], f"{path} must not need a key"
        else:
            assert op.get("security", spec["security"]) == [{"bearerAuth": []}]
            assert "401" in op["responses"], f"{method.upper()} {path} lacks 401"


def test_openapi_cluster_routes_are_tagged_cluster_and_on_the_cluster_listener(spec):
    cluster_paths = {p for _, p in CLUSTER_ROUTES}
    for method, path in CLUSTER_ROUTES:
        assert "cluster" in spec["paths"][path][method]["tags"]
        assert [s["url"] for s in spec["paths"][path]["servers"]] == ["http://localhost:8081"]
    # and every route tagged cluster is one of them: none is on the public listener
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "cluster" in op.get("tags", []):
                assert path in cluster_paths and path.startswith("/v1/cluster/"), (method, path)


def test_openapi_create_job_documents_every_error_status(spec):
    responses = spec["paths"]["/v1/jobs"]["post"]["responses"]
    for status in ("202", "400", "401", "413", "415", "422", "503"):
        assert status in responses, status
    assert "Location" in responses["202"]["headers"]


def test_openapi_create_job_shows_every_kernel(spec):
    op = spec["paths"]["/v1/jobs"]["post"]
    examples = op["requestBody"]["content"]["application/json"]["examples"]
    assert sorted(e["value"]["kernel"] for e in examples.values()) == sorted(KERNELS)
    for kernel in KERNELS:
        assert f"`{kernel}`" in op["description"]


def test_openapi_job_request_schema_is_strict(spec):
    req = spec["components"]["schemas"]["JobRequest"]
    assert req["additionalProperties"] is False
    # a kernel call or a task, never both
    assert [alt["required"] for alt in req["oneOf"]] == [["kernel"], ["task"]]
    p = req["properties"]
    assert (p["priority"]["minimum"], p["priority"]["maximum"], p["priority"]["default"]) == (0, 9, 5)
    assert (p["timeout_s"]["minimum"], p["timeout_s"]["maximum"]) == (1, 86400)
    assert (p["max_attempts"]["minimum"], p["max_attempts"]["maximum"]) == (1, 10)


def test_openapi_tensor_is_data_b64_or_blob(spec):
    schemas = spec["components"]["schemas"]
    assert [r["$ref"].rsplit("/", 1)[1] for r in schemas["Tensor"]["oneOf"]] == \
        ["TensorData", "TensorB64", "TensorBlob"]
    assert schemas["DType"]["enum"] == ["float32", "float64", "int32"]
    assert schemas["Shape"]["maxItems"] == 8
    assert schemas["Shape"]["items"]["minimum"] == 0


def test_openapi_result_takes_encoding(spec):
    params = spec["paths"]["/v1/jobs/{id}/result"]["get"]["parameters"]
    enc = next(p for p in params if p.get("name") == "encoding")
    assert enc["in"] == "query"
    assert enc["schema"]["enum"] == ["json", "b64", "blob"]


def _walk_examples(spec):
    """Yields (where, schema, example) for every example next to a schema in
    a media type, a parameter or a schema itself."""
    def media(where, m):
        if "schema" not in m:
            return
        if "example" in m:
            yield where, m["schema"], m["example"]
        for name, ex in m.get("examples", {}).items():
            if "$ref" not in ex:
                yield f"{where} examples.{name}", m["schema"], ex["value"]

    def response_media(where, resp):
        for ctype, m in resp.get("content", {}).items():
            yield from media(f"{where} {ctype}", m)

    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method in ("parameters", "servers"):
                continue
            body = op.get("requestBody", {})
            for ctype, m in body.get("content", {}).items():
                yield from media(f"{method.upper()} {path} request", m)
            for status, resp in op["responses"].items():
                if "$ref" not in resp:
                    yield from response_media(f"{method.upper()} {path} {status}", resp)
    for name, resp in spec["components"].get("responses", {}).items():
        yield from response_media(f"responses.{name}", resp)
    for name, schema in spec["components"]["schemas"].items():
        if "example" in schema:
            yield f"schemas.{name}", schema, schema["example"]


def test_openapi_examples_fit_their_schemas(spec):
    checked = 0
    for where, schema, example in _walk_examples(spec):
        # "#/components/..." references resolve against the root schema, so
        # carry the components along (not a schema keyword: it is ignored).
        rooted = dict(schema, components=spec["components"])
        validator = OAS30Validator(rooted, format_checker=oas30_format_checker)
        errors = sorted(validator.iter_errors(example), key=lambda e: list(e.path))
        assert not errors, f"{where}: " + "; ".join(
            f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:3])
        checked += 1
    assert checked >= 20


def test_openapi_b64_examples_match_their_shapes(spec):
    import base64
    import math
    sizes = {"float32": 4, "float64": 8, "int32": 4}
    text = yaml.safe_dump(spec)
    found = 0

    def visit(node):
        nonlocal found
        if isinstance(node, dict):
            if {"dtype", "shape", "b64"} <= set(node) and isinstance(node["b64"], str):
                raw = base64.b64decode(node["b64"], validate=True)
                assert len(raw) == math.prod(node["shape"]) * sizes[node["dtype"]], node
                found += 1
            if {"dtype", "shape", "data"} <= set(node) and isinstance(node["data"], list):
                assert len(node["data"]) == math.prod(node["shape"]), node
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(spec)
    assert found >= 3
    assert re.search(r"b64", text)
