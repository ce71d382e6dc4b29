"""What the task tests share: the test image, built and cached by
scripts/task-image.sh (skipping, with the reason, where podman is missing
or the image cannot be built), the engine's environment, and the
containers podman holds by label."""
import os
import shutil
import subprocess

import pytest

import stack as stk

IMAGE = "localhost/kowloon-python:1"


def image_conf(image=IMAGE):
    """The engine's containers.conf, once image exists."""
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (scripts/install-deps.sh installs it)")
    p = subprocess.run([os.path.join(stk.REPO, "scripts", "task-image.sh"), image],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"cannot build the task image: {p.stderr[-500:]}")
    return p.stdout.strip().splitlines()[-1]


def engine_env(conf):
    return dict(os.environ, CONTAINERS_CONF=conf)


def containers(conf, **labels):
    """Names of the containers podman has with every label kowloon.K=V."""
    args = ["podman", "ps", "-a", "--format", "{{.Names}}"]
    for k, v in labels.items():
        args += ["--filter", f"label=kowloon.{k}={v}"]
    out = subprocess.run(args, capture_output=True, text=True, env=engine_env(conf), timeout=30)
    return [line for line in out.stdout.split() if line]


def node_tag(name, gateway):
    """A node's tag (compute/task/task_cfg.c): FNV-1a of its name and gateway."""
    h = 0x811C9DC5
    for c in f"{name}\n{gateway}".encode():
        h = ((h ^ c) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def drop_chain(name, gateway):
    """Removes the gang firewall chain a node killed with SIGKILL left (one
    stopped removes its own): left, it goes on refusing its ports to the
    task uid of every node of the host, and a later gang part's port could
    be one of them."""
    chain = "KOWLOON-" + node_tag(name, gateway)
    for tool in ("iptables", "ip6tables"):
        if not shutil.which(tool):
            continue
        while subprocess.run([tool, "-w", "-D", "OUTPUT", "-m", "owner", "--uid-owner", "65534",
                              "-j", chain], capture_output=True, timeout=30).returncode == 0:
            pass
        subprocess.run([tool, "-w", "-F", chain], capture_output=True, timeout=30)
        subprocess.run([tool, "-w", "-X", chain], capture_output=True, timeout=30)
