"""Nodes started by Slurm: a real slurm-wlm on this machine (munged with a
generated key, slurmctld and slurmd from a generated slurm.conf, all under a
temporary directory, on free ports) runs deploy/slurm/kowloon-nodes.sbatch
against the suite's stack. The node it starts registers under its
allocation's name and runs jobs; scancel makes it drain, give back the job
it still runs (requeued at once and finished on another node) and
deregister before Slurm's SIGKILL."""

import os
import shutil
import socket
import subprocess
import tempfile

import pytest
import requests

from slurmstack import Slurm, missing_binaries, slurm_bin
from stack import COMPUTE_BIN, REPO, StackError, _clean_env, tail, wait_until

SBATCH = os.path.join(REPO, "deploy", "slurm", "kowloon-nodes.sbatch")
MISSING = missing_binaries()
# KillWait of the test cluster: the script derives the nodes' drain grace
# from it (KillWait - 10 s = 2 s), and the sleep job below outlasts that.
KILL_WAIT_S = 12
LONG_SLEEP_S = 15



def needs_slurm(test):
    test = pytest.mark.skipif(bool(MISSING), reason=f"slurm-wlm/munge missing: {MISSING} "
                              "(scripts/install-deps.sh installs them)")(test)
    # slurmd starts job steps as the submitting user and must be root for it
    return pytest.mark.skipif(os.geteuid() != 0, reason="slurmd needs root (CI runs as root)")(test)


@pytest.fixture(scope="module")
def slurm(stack):
    root = tempfile.mkdtemp(prefix="kowloon-slurm-")
    os.chmod(root, 0o755)
    s = Slurm(root, kill_wait=KILL_WAIT_S)
    try:
        s.start()
    except (StackError, OSError, subprocess.SubprocessError) as e:
        s.stop()
        pytest.fail(f"could not start slurm: {e}\n{s.logs() if os.path.isdir(s.log_dir) else ''}")
    yield s
    for job in s.run("squeue", "-h", "-o", "%i", check=False).stdout.split():
        s.run("scancel", job, check=False)
    s.stop()
    if os.environ.get("KOWLOON_TEST_KEEP"):
        print(f"slurm test files kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def allocation(slurm, stack):
    """kowloon-nodes.sbatch submitted to the test cluster: (job id, the name
    its node registers under, the path of its output)."""
    token = os.path.join(slurm.root, "cluster-token")
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(stack.cluster_token + "\n")
    out = os.path.join(slurm.root, "kowloon-nodes-%j.out")
    env = slurm.env(KOWLOON_GATEWAY=stack.cluster_base, KOWLOON_TOKEN_FILE=token,
                    KOWLOON_COMPUTE=COMPUTE_BIN, KOWLOON_NODE_BLOB_DIR=stack.blob_dir,
                    KOWLOON_HEARTBEAT_S=1, KOWLOON_LOG_LEVEL="debug")
    r = subprocess.run([slurm_bin("sbatch"), "--parsable", f"--output={out}", SBATCH], env=env,
                       capture_output=True, text=True, timeout=30, cwd=slurm.root)
    assert r.returncode == 0, f"sbatch failed: {r.stdout}{r.stderr}"
    job = r.stdout.strip().split(";")[0]
    return job, f"{slurm.host}-slurm{job}", out.replace("%j", job)


def _node(stack, name):
    return stack.nodes_by_name().get(name)


def _set_draining(stack, names, on):
    for n in names:
        node_id = _node(stack, n)["id"]
        r = stack.admin.request("POST" if on else "DELETE", f"/v1/nodes/{node_id}/drain")
        assert r.status_code == 200, r.text


def _explain(slurm, out):
    return f"\n--- sbatch output ---\n{tail(out)}\n{slurm.logs()}"


def _script(tmp_path, token_mode=0o600, **env):
    """Runs the batch script directly (no Slurm): only its checks, which
    come before srun, can pass or fail here."""
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(token_mode)
    e = _clean_env()
    e.update({"KOWLOON_TOKEN_FILE": str(token), "KOWLOON_COMPUTE": COMPUTE_BIN})
    e.update(env)
    return subprocess.run(["bash", SBATCH], env=e, capture_output=True, text=True, timeout=30)


def test_sbatch_script_refuses_a_token_file_others_can_read(tmp_path):
    r = _script(tmp_path, token_mode=0o644, KOWLOON_GATEWAY="http://127.0.0.1:1")
    assert r.returncode == 2 and "readable by others" in r.stderr, r


def test_sbatch_script_needs_the_gateway_and_a_token(tmp_path):
    r = _script(tmp_path)
    assert r.returncode == 2 and "KOWLOON_GATEWAY" in r.stderr, r
    r = _script(tmp_path, KOWLOON_GATEWAY="http://127.0.0.1:1",
                KOWLOON_TOKEN_FILE=str(tmp_path / "absent"))
    assert r.returncode == 2 and "cluster token" in r.stderr, r


def test_compute_with_slurm_outside_an_allocation_exits_2_naming_the_variable():
    env = dict(_clean_env(), KOWLOON_CLUSTER_TOKEN="x")
    env = {k: v for k, v in env.items() if not k.startswith("SLURM")}
    r = subprocess.run([COMPUTE_BIN, "--slurm"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "SLURM_JOB_ID" in r.stderr, r
    env.update(SLURM_JOB_ID="12", SLURMD_NODENAME="h", SLURM_CPUS_ON_NODE="2(x3)")
    r = subprocess.run([COMPUTE_BIN, "--slurm"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "SLURM_CPUS_ON_NODE" in r.stderr, r


@needs_slurm
@pytest.mark.timeout(90)
def test_sbatch_starts_a_node_that_registers_under_its_allocation(slurm, stack, allocation):
    job, name, out = allocation
    try:
        wait_until(lambda: (_node(stack, name) or {}).get("state") == "up", 45, 0.3,
                   f"node {name} up")
    except StackError as e:
        raise AssertionError(f"{e}{_explain(slurm, out)}")
    node = _node(stack, name)
    assert slurm.job_state(job) == "RUNNING"
    # the allocation has one CPU on this host (the default of one task):
    # one slot; no GPU was allocated, so the node runs on the CPU
    assert node["slots"] == 1, node
    assert node["backend"] == "cpu", node
    # a free port on all interfaces, advertised at the host's name
    assert node["url"].startswith(f"http://{socket.gethostname()}:"), node
    # no GPU in the allocation: CUDA may see none of the host's
    text = open(out, encoding="utf-8", errors="replace").read()
    assert (f'slurm allocation job={job} host={slurm.host} name={name} cpus=1 gpus=0 '
            'cuda_visible_devices="" (from none set) cuda_device_order=PCI_BUS_ID') in text, text


@needs_slurm
@pytest.mark.timeout(90)
def test_jobs_run_on_the_slurm_node(slurm, stack, allocation, A):
    _, name, out = allocation
    wait_until(lambda: (_node(stack, name) or {}).get("state") == "up", 30, 0.3, f"node {name} up")
    _set_draining(stack, stack.node_names, True)
    try:
        for k in range(2):
            done = A.run("saxpy", {"a": 2}, {"x": {"dtype": "float32", "shape": [2], "data": [1, k]},
                                             "y": {"dtype": "float32", "shape": [2], "data": [1, 1]}},
                         timeout=30)
            assert done["state"] == "succeeded" and done["node"] == name, done
    finally:
        _set_draining(stack, stack.node_names, False)


@needs_slurm
@pytest.mark.timeout(120)
def test_scancel_drains_the_node_and_its_job_is_requeued_and_finished_elsewhere(
        slurm, stack, allocation, A):
    job, name, out = allocation
    wait_until(lambda: (_node(stack, name) or {}).get("state") == "up", 30, 0.3, f"node {name} up")
    node_id = _node(stack, name)["id"]
    _set_draining(stack, stack.node_names, True)
    try:
        j = A.submit("sleep", {"seconds": LONG_SLEEP_S}, max_attempts=3)
        j = A.wait(j["id"], 20, states=("running",))
        assert j["node"] == name and j["attempts"] == 1, j
        # claimed is not started: wait until the node itself runs it
        url = f"{_node(stack, name)['url']}/v1/runs/{j['id']}.1"
        hdr = {"Authorization": "Bearer " + stack.cluster_token}
        wait_until(lambda: requests.get(url, headers=hdr, timeout=2).json().get("state")
                   == "running", 10, 0.05, f"the run on {name}")
    finally:
        _set_draining(stack, stack.node_names, False)
    slurm.run("scancel", job)

    # The node leaves by deregistering, within KillWait: long before the
    # gateway's node timeout would have marked it down, and before SIGKILL.
    wait_until(lambda: _node(stack, name)["state"] == "down", KILL_WAIT_S + 5, 0.2,
               f"{name} down")
    wait_until(lambda: slurm.job_state(job) == "", 30, 0.5, f"slurm job {job} gone")
    gw_log = open(stack.procs["gateway"].log_path, encoding="utf-8", errors="replace").read()
    assert f"node {node_id} deregistered" in gw_log, "the node timed out instead of deregistering"
    text = open(out, encoding="utf-8", errors="replace").read()
    assert "draining runs=1" in text and "stopped" in text, _explain(slurm, out)
    assert "nodes stopped (srun exit 0)" in text, _explain(slurm, out)

    done = A.wait(j["id"], LONG_SLEEP_S + 30)
    assert done["state"] == "succeeded", done
    assert done["attempts"] == 2 and done["node"] in stack.node_names, done
    # given back by the node's report (requeued at once, saying why), not
    # found lost by the reaper after the deregistration
    events = stack.psql(f"SELECT state, attempt, node_name, detail FROM job_events "
                        f"WHERE job_id = '{j['id']}' ORDER BY id")
    requeued = [e for e in events if e[0] == "queued" and e[1] == "1"]
    assert requeued and "node shut down" in requeued[-1][3], events
