"""deploy/k8s checked offline, with no cluster: every manifest, as written
and as kustomize renders it, against the Kubernetes JSON schemas in strict
mode (PyPI's kubernetes-validate), then what matters to Kowloon: probes on
/readyz and /healthz at the port each daemon listens on, every KOWLOON_*
variable an option of its daemon (from the binaries' --help), every
reference resolving, GPUs requested from the NVIDIA device plugin, grace
periods longer than the drains, the PodDisruptionBudget and the Service on
the gateway's pods, the shared blob volume, the restricted pod security
standard. Each check returns the problems it finds; the last tests break a
manifest on purpose and see the check catch it.

kustomize: `kubectl kustomize` where kubectl is installed; else, and also to
compare with it, the small renderer below (resources, namespace, images,
configMapGenerator/secretGenerator from env files), which refuses any
kustomization field it does not implement."""

import base64
import copy
import os
import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from daemon_options import env_options
from stack import REPO

K8S = os.path.join(REPO, "deploy", "k8s")
# The oldest release the manifests promise to run on, and the newest the
# installed kubernetes-validate knows.
VERSIONS = sorted({"1.30.0", kubernetes_validate.utils.latest_version()})
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole",
                  "ClusterRoleBinding", "PriorityClass", "CustomResourceDefinition"}
GENERATED_SUFFIX = re.compile(r"-[a-z0-9]{10}$")


def _cancel_wait_s():
    """CN_CANCEL_WAIT_MS of compute/main.c: after --drain-grace-s, what the
    node still gives cancelled runs before it deregisters."""
    with open(os.path.join(REPO, "compute", "main.c"), encoding="utf-8") as f:
        m = re.search(r"#define CN_CANCEL_WAIT_MS (\d+)", f.read())
    assert m, "CN_CANCEL_WAIT_MS not found in compute/main.c"
    return int(m.group(1)) / 1000


def _dockerfile_uid():
    with open(os.path.join(REPO, "Dockerfile"), encoding="utf-8") as f:
        m = re.search(r"^USER (\d+):(\d+)$", f.read(), re.M)
    assert m, "the Dockerfile's USER is not a numeric uid:gid"
    return int(m.group(1)), int(m.group(2))


# ------------------------------------------------------------ rendering ---

def _load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _kustomization(kdir):
    return _load_all(os.path.join(kdir, "kustomization.yaml"))[0]


def _env_file(path):
    """key=value lines as kustomize reads them (# comments, blank lines)."""
    data = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            assert sep, f"{path}: {line!r} is not KEY=VALUE"
            data[key] = value
    return data


def _generated(kind, gen, kdir):
    assert set(gen) <= {"name", "envs", "literals"}, \
        f"{kind} generator fields {set(gen)} are not implemented by this renderer"
    data = {}
    for env in gen.get("envs", []):
        data.update(_env_file(os.path.join(kdir, env)))
    for lit in gen.get("literals", []):
        key, _, value = lit.partition("=")
        data[key] = value
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": gen["name"]}}
    if kind == "Secret":
        obj["type"] = "Opaque"
        data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    obj["data"] = data
    return obj


def pod_specs(objs):
    """(workload, pod spec) of every workload."""
    for o in objs:
        if o["kind"] in WORKLOADS:
            yield o, o["spec"]["template"]["spec"]


def render_here(kdir):
    """The objects kustomize would build from kdir, generated names without
    their content hash."""
    k = _kustomization(kdir)
    known = {"apiVersion", "kind", "namespace", "resources", "images", "configMapGenerator",
             "secretGenerator"}
    assert set(k) <= known, f"kustomization fields {set(k) - known} are not implemented here"
    objs = [_generated("ConfigMap", g, kdir) for g in k.get("configMapGenerator", [])]
    objs += [_generated("Secret", g, kdir) for g in k.get("secretGenerator", [])]
    for res in k.get("resources", []):
        path = os.path.join(kdir, res)
        assert os.path.isfile(path), f"resource {res} is not a file (not implemented here)"
        objs += _load_all(path)
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    for _, spec in pod_specs(objs):
        for c in spec.get("initContainers", []) + spec["containers"]:
            for img in k.get("images", []):
                name, tag = re.match(r"([^:@]+)(.*)", c["image"]).groups()
                if name == img["name"]:
                    c["image"] = img.get("newName", name) + (
                        ":" + img["newTag"] if "newTag" in img else tag)
    return objs


def render_kubectl(kdir):
    out = subprocess.run(["kubectl", "kustomize", kdir], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    """A copy of deploy/k8s with the operator's secret files written from
    their examples, as the README says to."""
    d = str(tmp_path_factory.mktemp("k8s") / "k8s")
    # never the real secrets of a developer's checkout
    shutil.copytree(K8S, d, ignore=lambda where, names: [
        n for n in names if os.path.basename(where) == "secrets" and n.endswith(".env")])
    for name in os.listdir(os.path.join(d, "secrets")):
        if name.endswith(".env.example"):
            shutil.copy(os.path.join(d, "secrets", name),
                        os.path.join(d, "secrets", name[:-len(".example")]))
    return d


@pytest.fixture(scope="module")
def objs(kdir):
    return render_kubectl(kdir) if shutil.which("kubectl") else render_here(kdir)


# ------------------------------------------------------------- helpers ---

def find(objs, kind, name=None):
    return [o for o in objs if o["kind"] == kind and (name is None or
                                                      o["metadata"]["name"] == name)]


def by_component(objs, component):
    found = [o for o in objs if o["kind"] in WORKLOADS and
             o["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    assert len(found) == 1, f"{len(found)} workloads of component {component}"
    return found[0]


def daemon(container):
    return os.path.basename(container["command"][0])


def container_env(container, objs):
    """{name: value} as the container sees it (envFrom first, then env);
    a fieldRef reads as "<fieldRef:PATH>", a missing reference as None."""
    env = {}
    for src in container.get("envFrom", []):
        if "configMapRef" in src:
            cm = find(objs, "ConfigMap", src["configMapRef"]["name"])
            env.update(cm[0].get("data", {}) if cm else {})
        if "secretRef" in src:
            sec = find(objs, "Secret", src["secretRef"]["name"])
            env.update({k: base64.b64decode(v).decode()
                        for k, v in (sec[0].get("data", {}) if sec else {}).items()})
    for e in container.get("env", []):
        vf = e.get("valueFrom", {})
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in vf:
            env[e["name"]] = f"<fieldRef:{vf['fieldRef']['fieldPath']}>"
        elif "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            cm = find(objs, "ConfigMap", ref["name"])
            env[e["name"]] = cm[0].get("data", {}).get(ref["key"]) if cm else None
        elif "secretKeyRef" in vf:
            ref = vf["secretKeyRef"]
            sec = find(objs, "Secret", ref["name"])
            raw = sec[0].get("data", {}).get(ref["key"]) if sec else None
            env[e["name"]] = base64.b64decode(raw).decode() if raw is not None else None
        else:
            env[e["name"]] = None
    return env


def option(container, objs, name):
    """The value of option env name for container's daemon: set, or the
    daemon's default."""
    value = container_env(container, objs).get(name)
    return value if value is not None else env_options(daemon(container))[name]


def container_port(container, port):
    """A probe's or Service's port (number or name) as a number, or None."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def template_labels(workload):
    return workload["spec"]["template"]["metadata"]["labels"]


# -------------------------------------------------------------- checks ---

def problems_schema(objs, version):
    out = []
    for o in objs:
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = "/".join(map(str, e.path))
            out.append(f"{o['kind']}/{o['metadata'].get('name')} at {where}: {e.message}")
    return out


def problems_references(objs):
    """Every ConfigMap, Secret, key and claim a pod names exists."""
    out = []

    def need(kind, name, key=None, who=""):
        found = find(objs, kind, name)
        if not found:
            out.append(f"{who}: no {kind} {name}")
        elif key is not None and key not in found[0].get("data", {}):
            out.append(f"{who}: {kind} {name} has no key {key}")

    for w, spec in pod_specs(objs):
        who = f"{w['kind']}/{w['metadata']['name']}"
        for c in spec["containers"]:
            for src in c.get("envFrom", []):
                for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if ref in src:
                        need(kind, src[ref]["name"], who=who)
            for e in c.get("env", []):
                vf = e.get("valueFrom", {})
                for kind, ref in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                    if ref in vf:
                        need(kind, vf[ref]["name"], vf[ref]["key"], who)
            mounted = {m["name"] for m in c.get("volumeMounts", [])}
            declared = {v["name"] for v in spec.get("volumes", [])}
            out += [f"{who}: mounts undeclared volume {m}" for m in mounted - declared]
        for v in spec.get("volumes", []):
            if "persistentVolumeClaim" in v:
                need("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], who=who)
    return out


def problems_env(objs):
    """KOWLOON_* variables are options of the container's daemon; $(VAR)
    names a variable defined before it; the cluster token (and the
    gateway's datastore URLs) come from Secrets, never from plain values."""
    out = []
    for w, spec in pod_specs(objs):
        for c in spec["containers"]:
            who = f"{w['metadata']['name']}/{c['name']}"
            opts = env_options(daemon(c))
            for name in container_env(c, objs):
                if name.startswith("KOWLOON_") and name not in opts:
                    out.append(f"{who}: {name} is not an option of {daemon(c)}")
            defined = set(container_env({"envFrom": c.get("envFrom", [])}, objs))
            for e in c.get("env", []):
                for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", e.get("value", "")):
                    if ref not in defined:
                        out.append(f"{who}: {e['name']} uses $({ref}) before it is defined")
                defined.add(e["name"])
            secret = {"KOWLOON_CLUSTER_TOKEN"} | (
                {"KOWLOON_DATABASE_URL", "KOWLOON_REDIS_URL"} if daemon(c) == "kowloon-gateway"
                else set())
            for name in secret:
                e = next((e for e in c.get("env", []) if e["name"] == name), None)
                if e is None or "secretKeyRef" not in e.get("valueFrom", {}):
                    out.append(f"{who}: {name} must come from a Secret (secretKeyRef)")
    return out


def problems_probes(objs):
    """Readiness on /readyz, liveness (and startup) on /healthz, at the
    port the daemon listens on (KOWLOON_LISTEN)."""
    out = []
    want = {"readinessProbe": "/readyz", "livenessProbe": "/healthz", "startupProbe": "/healthz"}
    for w, spec in pod_specs(objs):
        for c in spec["containers"]:
            who = f"{w['metadata']['name']}/{c['name']}"
            listen = option(c, objs, "KOWLOON_LISTEN")
            port = int(listen.rsplit(":", 1)[1])
            if not listen.startswith("0.0.0.0:"):
                out.append(f"{who}: KOWLOON_LISTEN {listen} is not reachable from the kubelet")
            for probe, path in want.items():
                if probe not in c:
                    if probe != "startupProbe":
                        out.append(f"{who}: no {probe}")
                    continue
                get = c[probe].get("httpGet", {})
                if get.get("path") != path:
                    out.append(f"{who}: {probe} on {get.get('path')}, not {path}")
                if container_port(c, get.get("port")) != port:
                    out.append(f"{who}: {probe} port {get.get('port')} is not {port}")
    return out


def problems_grace(objs):
    """terminationGracePeriodSeconds outlasts the drain: a gateway's
    KOWLOON_DRAIN_S (and some for requests in flight), a node's
    KOWLOON_DRAIN_GRACE_S plus the wait for cancelled runs."""
    out = []
    for w, spec in pod_specs(objs):
        c = spec["containers"][0]
        grace = spec.get("terminationGracePeriodSeconds", 30)
        if daemon(c) == "kowloon-gateway":
            need = int(option(c, objs, "KOWLOON_DRAIN_S")) + 5
        else:
            need = int(option(c, objs, "KOWLOON_DRAIN_GRACE_S")) + _cancel_wait_s() + 5
        if grace < need:
            out.append(f"{w['metadata']['name']}: terminationGracePeriodSeconds {grace} < {need}")
    return out


def problems_gpu(objs):
    """The GPU DaemonSet takes its GPUs from the device plugin, tolerates
    the GPU taint and runs only on GPU hosts; the CPU one asks for none and
    keeps off GPU hosts."""
    out = []
    gpu = by_component(objs, "compute-gpu")
    spec = gpu["spec"]["template"]["spec"]
    c = spec["containers"][0]
    limits = c.get("resources", {}).get("limits", {})
    n = limits.get("nvidia.com/gpu")
    if not isinstance(n, int) or n < 1:
        out.append(f"compute-gpu: limits nvidia.com/gpu is {n!r}, not a count >= 1")
    requests_ = c.get("resources", {}).get("requests", {})
    if "nvidia.com/gpu" in requests_ and requests_["nvidia.com/gpu"] != n:
        out.append("compute-gpu: requests and limits of nvidia.com/gpu differ")
    if option(c, objs, "KOWLOON_BACKEND") != "cuda":
        out.append("compute-gpu: KOWLOON_BACKEND is not cuda")
    if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])):
        out.append("compute-gpu: does not tolerate the nvidia.com/gpu taint")
    if spec.get("nodeSelector", {}).get("nvidia.com/gpu.present") != "true":
        out.append("compute-gpu: not restricted to nvidia.com/gpu.present=true hosts")
    cpu = by_component(objs, "compute-cpu")
    cspec = cpu["spec"]["template"]["spec"]
    cc = cspec["containers"][0]
    if "nvidia.com/gpu" in str(cc.get("resources", {})):
        out.append("compute-cpu: asks for GPUs")
    if option(cc, objs, "KOWLOON_BACKEND") != "cpu":
        out.append("compute-cpu: KOWLOON_BACKEND is not cpu")
    terms = (cspec.get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {})
             .get("nodeSelectorTerms", []))
    if not terms or not all(any(e["key"] == "nvidia.com/gpu.present" and
                                e["operator"] == "DoesNotExist"
                                for e in t.get("matchExpressions", [])) for t in terms):
        out.append("compute-cpu: may run on GPU hosts (under the GPU node's name)")
    return out


def problems_gateway_pods(objs):
    """Two gateway replicas that roll one at a time; the Service and the
    PodDisruptionBudget select the gateway's pods and nothing else; the
    budget lets a node drain (minAvailable below replicas)."""
    out = []
    gw = by_component(objs, "gateway")
    labels = template_labels(gw)
    others = [template_labels(w) for w, _ in pod_specs(objs) if w is not gw]
    replicas = gw["spec"].get("replicas", 1)
    if replicas < 2:
        out.append(f"gateway: {replicas} replica(s); the API must survive one pod's loss")
    if gw["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable") != 0:
        out.append("gateway: a rollout may take a replica away before its successor is ready")
    pdbs = find(objs, "PodDisruptionBudget")
    if not pdbs:
        out.append("no PodDisruptionBudget")
    for pdb in pdbs:
        sel = pdb["spec"]["selector"].get("matchLabels", {})
        if not selects(sel, labels):
            out.append(f"PDB {pdb['metadata']['name']} does not select the gateway's pods")
        if any(selects(sel, o) for o in others):
            out.append(f"PDB {pdb['metadata']['name']} selects compute pods too")
        m = pdb["spec"].get("minAvailable")
        if m is not None and (not isinstance(m, int) or m >= replicas or m < 1):
            out.append(f"PDB minAvailable {m} with {replicas} replicas")
    c = gw["spec"]["template"]["spec"]["containers"][0]
    svcs = find(objs, "Service")
    if len(svcs) != 2:
        out.append(f"{len(svcs)} Services, expected the gateway's public and cluster ones")
    # the public Service reaches --listen only, the cluster one --cluster-listen only
    want = {"kowloon-gateway": "KOWLOON_LISTEN", "kowloon-gateway-cluster": "KOWLOON_CLUSTER_LISTEN"}
    for svc in svcs:
        name = svc["metadata"]["name"]
        if not selects(svc["spec"].get("selector", {}), labels) or \
                any(selects(svc["spec"]["selector"], o) for o in others):
            out.append(f"Service {name} does not select the gateway alone")
        if name not in want:
            out.append(f"Service {name} is not one of {sorted(want)}")
            continue
        listen = int(option(c, objs, want[name]).rsplit(":", 1)[1])
        for p in svc["spec"]["ports"]:
            if container_port(c, p.get("targetPort", p["port"])) != listen:
                out.append(f"Service {name} port {p['port']} does not reach the gateway's {listen}")
    return out


def problems_cluster_port(objs):
    """The gateway's cluster port is closed to every pod but Kowloon's
    compute pods (a NetworkPolicy); its public port stays open."""
    out = []
    gw = by_component(objs, "gateway")
    labels = template_labels(gw)
    c = gw["spec"]["template"]["spec"]["containers"][0]
    cluster = int(option(c, objs, "KOWLOON_CLUSTER_LISTEN").rsplit(":", 1)[1])
    public = int(option(c, objs, "KOWLOON_LISTEN").rsplit(":", 1)[1])
    pols = [p for p in find(objs, "NetworkPolicy")
            if selects(p["spec"]["podSelector"].get("matchLabels", {}), labels)]
    if not pols:
        return ["no NetworkPolicy on the gateway's pods: any pod reaches the cluster listener"]
    nodes = [template_labels(by_component(objs, k)) for k in ("compute-gpu", "compute-cpu")]
    for pol in pols:
        if "Ingress" not in pol["spec"].get("policyTypes", []):
            out.append(f"NetworkPolicy {pol['metadata']['name']} does not restrict ingress")
        for rule in pol["spec"].get("ingress", []):
            ports = {container_port(c, p["port"]) for p in rule.get("ports", [])}
            if not rule.get("ports") or cluster in ports:
                sources = rule.get("from")
                if not sources:
                    out.append("the cluster port is open to every pod")
                    continue
                for src in sources:
                    sel = src.get("podSelector")
                    if sel is None or "namespaceSelector" in src or "ipBlock" in src:
                        out.append(f"the cluster port is open to {src}")
                    elif not all(_matches(sel, n) for n in nodes):
                        out.append("a compute pod cannot reach the cluster port")
                    elif _matches(sel, labels):
                        out.append("the cluster port is open to the gateway's own pods")
        if not any(public in {container_port(c, p["port"]) for p in r.get("ports", [])}
                   and not r.get("from") for r in pol["spec"].get("ingress", [])):
            out.append("the public port is not open")
    return out


def _matches(selector, labels):
    """A label selector (matchLabels, matchExpressions with In) against
    labels; an empty one selects everything, as Kubernetes reads it."""
    if not all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        if e["operator"] != "In" or labels.get(e["key"]) not in e["values"]:
            return False
    return True


def problems_nodes(objs):
    """Nodes register with the gateway's Service, advertise their pod IP
    on their listen port, take the Kubernetes node's name, and mount the
    gateway's blob volume where the gateway has it (--blob-dir auto)."""
    out = []
    gw = by_component(objs, "gateway")
    gc = gw["spec"]["template"]["spec"]["containers"][0]
    blob_dir = option(gc, objs, "KOWLOON_BLOB_DIR")
    gw_mounts = {m["mountPath"]: m["name"] for m in gc.get("volumeMounts", [])}
    gw_vols = {v["name"]: v for v in gw["spec"]["template"]["spec"].get("volumes", [])}
    claim = gw_vols.get(gw_mounts.get(blob_dir), {}).get("persistentVolumeClaim", {})
    pvc = find(objs, "PersistentVolumeClaim", claim.get("claimName"))
    if not pvc or pvc[0]["spec"]["accessModes"] != ["ReadWriteMany"]:
        out.append(f"gateway: {blob_dir} is not a ReadWriteMany claim every replica shares")
    svc = next((s for s in find(objs, "Service")
                if s["metadata"]["name"] == "kowloon-gateway-cluster"), None)
    for component in ("compute-gpu", "compute-cpu"):
        w = by_component(objs, component)
        spec = w["spec"]["template"]["spec"]
        c = spec["containers"][0]
        env = container_env(c, objs)
        gateway = option(c, objs, "KOWLOON_GATEWAY")
        m = re.match(r"https?://([^:/]+):(\d+)$", gateway)
        if not svc or not m or m.group(1).split(".")[0] != svc["metadata"]["name"] or \
                int(m.group(2)) not in [p["port"] for p in svc["spec"]["ports"]]:
            out.append(f"{component}: KOWLOON_GATEWAY {gateway} is not the gateway's cluster "
                       "Service")
        # its credential survives a restart of the container in its pod
        state = option(c, objs, "KOWLOON_STATE_DIR")
        smounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        svol = {v["name"]: v for v in spec.get("volumes", [])}.get(smounts.get(state), {})
        if not state or "emptyDir" not in svol:
            out.append(f"{component}: KOWLOON_STATE_DIR {state} is not a pod volume")
        port = option(c, objs, "KOWLOON_LISTEN").rsplit(":", 1)[1]
        ip_vars = [k for k, v in env.items() if v == "<fieldRef:status.podIP>"]
        if not ip_vars or env.get("KOWLOON_ADVERTISE") not in [f"http://$({v}):{port}"
                                                               for v in ip_vars]:
            out.append(f"{component}: KOWLOON_ADVERTISE {env.get('KOWLOON_ADVERTISE')} is not "
                       f"http://<pod IP>:{port}")
        name_vars = [k for k, v in env.items() if v == "<fieldRef:spec.nodeName>"]
        if env.get("KOWLOON_NODE_NAME") not in [f"$({v})" for v in name_vars]:
            out.append(f"{component}: KOWLOON_NODE_NAME is not the Kubernetes node's name")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        if vols.get(mounts.get(blob_dir), {}).get("persistentVolumeClaim") != claim:
            out.append(f"{component}: does not mount the blob volume at {blob_dir}")
    return out


def problems_tls(objs):
    """HTTPS end to end: the gateway's certificate and key are files of a
    mounted Secret and its probes speak HTTPS; every node reaches it at an
    https:// URL and checks it against a CA file of a mounted Secret that
    does not carry the gateway's private key."""
    out = []

    def mounted_secret(spec, c, path):
        """The Secret volume a file path lies in, or None."""
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            if path and path.startswith(m["mountPath"].rstrip("/") + "/"):
                return vols.get(m["name"], {}).get("secret")
        return None

    gw = by_component(objs, "gateway")
    spec = gw["spec"]["template"]["spec"]
    c = spec["containers"][0]
    env = container_env(c, objs)
    for var in ("KOWLOON_TLS_CERT", "KOWLOON_TLS_KEY"):
        if mounted_secret(spec, c, env.get(var)) is None:
            out.append(f"gateway: {var} {env.get(var)} is not a file of a mounted Secret")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe in c and c[probe].get("httpGet", {}).get("scheme") != "HTTPS":
            out.append(f"gateway: {probe} does not speak HTTPS")
    for component in ("compute-gpu", "compute-cpu"):
        w = by_component(objs, component)
        spec = w["spec"]["template"]["spec"]
        c = spec["containers"][0]
        if not option(c, objs, "KOWLOON_GATEWAY").startswith("https://"):
            out.append(f"{component}: reaches the gateway without TLS")
        ca = option(c, objs, "KOWLOON_TLS_CA")
        secret = mounted_secret(spec, c, ca)
        if secret is None:
            out.append(f"{component}: KOWLOON_TLS_CA {ca} is not a file of a mounted Secret")
        elif [i["key"] for i in secret.get("items", [])] != ["tls.crt"]:
            out.append(f"{component}: mounts more of the TLS Secret than its certificate")
    return out


def problems_security(objs):
    """The restricted Pod Security Standard the namespace enforces, as the
    image's own user."""
    out = []
    uid, gid = _dockerfile_uid()
    for ns in find(objs, "Namespace"):
        if ns["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") != \
                "restricted":
            out.append(f"namespace {ns['metadata']['name']} does not enforce restricted")
    for w, spec in pod_specs(objs):
        who = w["metadata"]["name"]
        psc = spec.get("securityContext", {})
        if not psc.get("runAsNonRoot") or psc.get("runAsUser") != uid or \
                psc.get("runAsGroup") != gid:
            out.append(f"{who}: not running as the image's user {uid}:{gid}")
        if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            out.append(f"{who}: no RuntimeDefault seccomp profile")
        if spec.get("automountServiceAccountToken") is not False:
            out.append(f"{who}: mounts a service account token it never uses")
        for c in spec["containers"]:
            sc = c.get("securityContext", {})
            if sc.get("allowPrivilegeEscalation") is not False or \
                    sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("privileged"):
                out.append(f"{who}/{c['name']}: privileges not dropped")
    return out


# --------------------------------------------------------------- tests ---

def test_every_manifest_is_in_the_kustomization():
    k = _kustomization(K8S)
    listed = set(k["resources"])
    files = {f for f in os.listdir(K8S) if f.endswith(".yaml") and f != "kustomization.yaml"}
    assert files == listed
    for gen in k["configMapGenerator"]:
        for env in gen["envs"]:
            assert os.path.isfile(os.path.join(K8S, env)), env


def test_secret_values_are_the_operators_not_committed():
    """Secrets are generated from files the operator writes (examples are
    committed, the files are git-ignored); no manifest carries a Secret."""
    k = _kustomization(K8S)
    for path in (os.path.join(K8S, r) for r in k["resources"]):
        assert not [d for d in _load_all(path) if d["kind"] == "Secret"], path
    for gen in k["secretGenerator"]:
        for env in gen["envs"]:
            assert os.path.isfile(os.path.join(K8S, env + ".example")), env
            r = subprocess.run(["git", "check-ignore", "-q", os.path.join("deploy", "k8s", env)],
                               cwd=REPO)
            assert r.returncode == 0, f"{env} is not git-ignored"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_file_is_valid_in_strict_mode(version):
    docs = []
    for f in sorted(os.listdir(K8S)):
        if f.endswith(".yaml") and f != "kustomization.yaml":
            docs += _load_all(os.path.join(K8S, f))
    assert len(docs) >= 7
    assert problems_schema(docs, version) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_object_is_valid_in_strict_mode(objs, version):
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(["Namespace", "PersistentVolumeClaim", "Deployment", "Service",
                            "Service", "NetworkPolicy", "PodDisruptionBudget", "DaemonSet",
                            "DaemonSet", "ConfigMap", "ConfigMap", "ConfigMap", "Secret",
                            "Secret"])
    assert problems_schema(objs, version) == []
    assert all(o["metadata"].get("namespace") == "kowloon" for o in objs
               if o["kind"] != "Namespace")


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl is not installed")
def test_the_fallback_renderer_builds_what_kubectl_builds(kdir):
    """Where kubectl is missing the checks run on render_here's objects:
    the same objects, images and data, only without the name hashes."""
    def key(objs, hashed):
        out = []
        for o in objs:
            name = o["metadata"]["name"]
            if hashed and o["kind"] in ("ConfigMap", "Secret"):
                name = GENERATED_SUFFIX.sub("", name)
            images = [c["image"] for _, s in pod_specs([o]) for c in s["containers"]]
            data = o.get("data", {})
            if o["kind"] == "Secret":  # kustomize wraps long base64 lines
                data = {k: base64.b64decode(v) for k, v in data.items()}
            out.append((o["kind"], o["metadata"].get("namespace"), name, tuple(images),
                        tuple(sorted(data.items()))))
        return sorted(out)
    assert key(render_here(kdir), False) == key(render_kubectl(kdir), True)


def test_references_resolve(objs):
    assert problems_references(objs) == []


def test_every_kowloon_variable_is_an_option_and_secrets_come_from_secrets(objs):
    assert problems_env(objs) == []


def test_probes_are_readyz_and_healthz_on_the_listen_port(objs):
    assert problems_probes(objs) == []


def test_grace_periods_outlast_the_drains(objs):
    assert problems_grace(objs) == []


def test_gpu_daemonset_requests_nvidia_gpus_and_cpu_variant_stays_off_gpu_hosts(objs):
    assert problems_gpu(objs) == []


def test_gateway_replicas_service_and_disruption_budget(objs):
    assert problems_gateway_pods(objs) == []


def test_only_compute_pods_reach_the_gateways_cluster_listener(objs):
    assert problems_cluster_port(objs) == []


def test_nodes_reach_the_gateway_advertise_their_pod_and_share_the_blob_volume(objs):
    assert problems_nodes(objs) == []


def test_https_between_nodes_and_gateway_with_the_key_on_the_gateway_only(objs):
    assert problems_tls(objs) == []


def test_pods_meet_the_restricted_security_standard_as_the_images_user(objs):
    assert problems_security(objs) == []


def test_datastores_are_external_and_given_by_url(objs):
    """PostgreSQL and Redis are not deployed here: the gateway gets their
    URLs from the operator's Secret."""
    assert not [o for o in objs if o["kind"] in WORKLOADS and
                re.search(r"postgres|redis", str(template_labels(o)) +
                          str(o["spec"]["template"]["spec"]["containers"][0]["image"]))]
    gc = by_component(objs, "gateway")["spec"]["template"]["spec"]["containers"][0]
    env = container_env(gc, objs)
    assert env["KOWLOON_DATABASE_URL"].startswith("postgresql://")
    assert env["KOWLOON_REDIS_URL"].startswith("redis://")
    assert len(env["KOWLOON_CLUSTER_TOKEN"]) >= 32  # the gateway refuses shorter


# ----------------------------------------------- the checks can fail ---

def _workload(objs, component):
    return by_component(objs, component)["spec"]["template"]["spec"]


def _container(objs, component):
    return _workload(objs, component)["containers"][0]


def _set_config(objs, component, key, value):
    name = _container(objs, component)["envFrom"][0]["configMapRef"]["name"]
    find(objs, "ConfigMap", name)[0]["data"][key] = value


def _env(objs, component, name):
    return next(e for e in _container(objs, component)["env"] if e["name"] == name)


def _volume(objs, component, name):
    return next(v for v in _workload(objs, component)["volumes"] if v["name"] == name)


def _plain_token(objs, component):
    e = _env(objs, component, "KOWLOON_CLUSTER_TOKEN")
    del e["valueFrom"]
    e["value"] = "x" * 32


def _drop_toleration(objs):
    _workload(objs, "compute-gpu")["tolerations"] = []


BREAKAGES = {
    "unknown field": (lambda o: _container(o, "gateway")["livenessProbe"]["httpGet"]
                      .update(pth="/healthz"), "schema"),
    "wrong type": (lambda o: by_component(o, "gateway")["spec"].update(replicas="2"), "schema"),
    "readiness on /healthz": (lambda o: _container(o, "compute-cpu")["readinessProbe"]["httpGet"]
                              .update(path="/healthz"), problems_probes),
    "liveness on the wrong port": (lambda o: _container(o, "gateway")["livenessProbe"]["httpGet"]
                                   .update(port=8081), problems_probes),
    "listen port moved": (lambda o: _set_config(o, "compute-gpu", "KOWLOON_LISTEN",
                                                "0.0.0.0:9000"), problems_probes),
    "unknown option": (lambda o: _container(o, "gateway")["env"].append(
        {"name": "KOWLOON_DRAIN_SECONDS", "value": "10"}), problems_env),
    "node option on the gateway": (lambda o: _set_config(o, "gateway", "KOWLOON_SLOTS", "2"),
                                   problems_env),
    "$(VAR) before its definition": (lambda o: _container(o, "compute-cpu")["env"].reverse(),
                                     problems_env),
    "token as a plain value": (lambda o: _plain_token(o, "compute-gpu"), problems_env),
    "missing secret key": (lambda o: _env(o, "gateway", "KOWLOON_DATABASE_URL")["valueFrom"]
                           ["secretKeyRef"].update(key="db-url"), problems_references),
    "grace shorter than the drain": (lambda o: _set_config(o, "compute-gpu",
                                                           "KOWLOON_DRAIN_GRACE_S", "600"),
                                     problems_grace),
    "gateway grace too short": (lambda o: _workload(o, "gateway").update(
        terminationGracePeriodSeconds=5), problems_grace),
    "no GPUs requested": (lambda o: _container(o, "compute-gpu")["resources"]["limits"]
                          .pop("nvidia.com/gpu"), problems_gpu),
    "no GPU toleration": (_drop_toleration, problems_gpu),
    "PDB selects compute pods": (lambda o: find(o, "PodDisruptionBudget")[0]["spec"]["selector"]
                                 ["matchLabels"].pop("app.kubernetes.io/component"),
                                 problems_gateway_pods),
    "PDB blocks every drain": (lambda o: find(o, "PodDisruptionBudget")[0]["spec"].update(
        minAvailable=2), problems_gateway_pods),
    "Service on the wrong port": (lambda o: find(o, "Service")[0]["spec"]["ports"][0].update(
        targetPort=8081), problems_gateway_pods),
    "nodes call the public Service": (lambda o: _set_config(o, "compute-cpu", "KOWLOON_GATEWAY",
                                                            "http://kowloon-gateway:8080"),
                                      problems_nodes),
    "credential not on a volume": (lambda o: _set_config(o, "compute-gpu", "KOWLOON_STATE_DIR",
                                                         "/opt/kowloon/var/node"), problems_nodes),
    "cluster port open to all": (lambda o: find(o, "NetworkPolicy")[0]["spec"]["ingress"][1]
                                 .pop("from"), problems_cluster_port),
    "no network policy": (lambda o: o.remove(find(o, "NetworkPolicy")[0]), problems_cluster_port),
    "node advertises localhost": (lambda o: _env(o, "compute-cpu", "KOWLOON_ADVERTISE").update(
        value="http://127.0.0.1:8081"), problems_nodes),
    "blob volume not shared": (lambda o: _volume(o, "compute-gpu", "blobs").update(
        persistentVolumeClaim={"claimName": "other"}), problems_nodes),
    "runs as root": (lambda o: _workload(o, "gateway")["securityContext"].update(runAsUser=0),
                     problems_security),
    "node without TLS": (lambda o: _set_config(o, "compute-cpu", "KOWLOON_GATEWAY",
                                               "http://kowloon-gateway:8080"), problems_tls),
    "node gets the key": (lambda o: _volume(o, "compute-gpu", "tls-ca")["secret"].pop("items"),
                          problems_tls),
    "probe over plain HTTP": (lambda o: _container(o, "gateway")["readinessProbe"]["httpGet"]
                              .pop("scheme"), problems_tls),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_manifest_is_caught(objs, breakage):
    broken = copy.deepcopy(objs)
    mutate, check = BREAKAGES[breakage]
    mutate(broken)
    if check == "schema":
        assert problems_schema(broken, VERSIONS[0]) != []
    else:
        assert check(broken) != [], breakage
