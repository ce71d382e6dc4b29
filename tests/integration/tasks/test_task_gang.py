"""A 2-node gang task running a real distributed framework (issue 18):
PyTorch's torch.distributed with the Gloo backend (Debian bookworm's
python3-torch, in the image `scripts/task-image.sh torch` builds and
caches: ~2.5 min and 1.35 GB the first time) initialised with
`init_method="env://"` from nothing but the environment Kowloon sets
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), computing an all-reduce the
test checks against numpy.

Two levels: against two real kowloon-compute processes with
tests/integration/fakegateway.py handing them the parts (the node side:
environment, rendezvous, peer network through the gang firewall, a part
killed ends the other's collective); and through the real gateway, where
a node lost mid-attempt ends the other part and the job reruns whole.
Skipped, with the reason, without podman or without root and iptables
(a node refuses gang parts it cannot firewall)."""

import io
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

import stack as stk
import test_task_node
from test_task_node import Node, containers, log_text

IMAGE = "localhost/kowloon-torch:1"

# the node tests' module fixtures: a state directory, a FakeGateway in it
root, gw = test_task_node.root, test_task_node.gw

# What a user writes: no Kowloon API at all, torch reads the environment.
ALLREDUCE = r"""
import datetime, os, sys, time
import numpy as np
import torch
import torch.distributed as dist
print("init", flush=True)
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=240))
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.arange(8, dtype=torch.float64) * (rank + 1) + rank
dist.all_reduce(x)                         # SUM over the parts
print("rank", rank, "world", world, "master", os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
      "attempt", os.environ["KOWLOON_ATTEMPT"], "ifname", os.environ.get("GLOO_SOCKET_IFNAME"),
      os.environ.get("NCCL_SOCKET_IFNAME"), flush=True)
print("sum", *x.tolist(), flush=True)
if rank == 0:
    np.save(os.path.join(os.environ["KOWLOON_OUT"], "sum.npy"), x.numpy())
hold = os.environ.get("HOLD_ON_ATTEMPT")
if hold == os.environ["KOWLOON_ATTEMPT"]:
    print("holding", flush=True)
    if rank == 1:
        time.sleep(3600)                   # the test kills this part
    dist.barrier()                         # rank 0 waits on its peer here
dist.destroy_process_group()
"""


# The README's DDP example.
DDP_TRAIN = r"""
import json, os
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")          # torchrun set RANK, WORLD_SIZE, MASTER_*
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)                      # the same initial weights everywhere
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(100 + rank)   # each rank its own data
x = torch.randn(256, 8, generator=g)
y = x.sum(1, keepdim=True)
for epoch in range(1, 31):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()                       # gradients all-reduced across the nodes
    opt.step()
    if rank == 0:
        with open(os.environ["KOWLOON_PROGRESS"], "a") as f:
            f.write(json.dumps({"epoch": epoch, "epochs": 30, "loss": loss.item()}) + "\n")
w = model.module.weight.detach().clone()
ws = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(ws, w)
print("world", world, "same_weights", all(torch.equal(ws[0], t) for t in ws), "loss", loss.item())
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(os.environ["KOWLOON_OUT"], "model.pt"))
dist.destroy_process_group()
"""

# One process per node needs no launcher: Kowloon sets what torchrun would
# give its one worker (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*). (torchrun
# itself, for several GPUs a node, is broken in Debian bookworm's torch
# 1.13 under Python 3.11 — Std.from_str answers None; PyTorch >= 2.0 works.)
DDP_COMMAND = ["python3", "train.py"]


def expected_sum(world):
    return sum(np.arange(8, dtype=np.float64) * (r + 1) + r for r in range(world))


@pytest.fixture(scope="module")
def conf():
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (scripts/install-deps.sh installs it)")
    if os.geteuid() != 0 or not shutil.which("iptables"):
        pytest.skip("gang parts need the node's firewall: root and iptables")
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(stk.REPO, "scripts", "task-image.sh"), "torch"],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        pytest.skip(f"cannot build the torch task image: {p.stderr[-500:]}")
    print(f"torch image ready in {time.monotonic() - t0:.1f} s")
    return p.stdout.strip().splitlines()[-1]


# ---------------------------------------------------------------- node level

@pytest.fixture(scope="module")
def pair(gw, conf, root):
    a = Node(gw, conf, root).start()
    b = Node(gw, conf, root).start()
    yield a, b
    a.stop()
    b.stop()


def submit_gang(gw, nodes, jid, code, env=None, attempt=1):
    for rank, n in enumerate(nodes):
        task = {"image": IMAGE, "command": ["python3", "-c", code], "env": env or {}}
        gw.submit(n.name, {"job_id": jid, "attempt": attempt, "timeout_s": 120, "gpus": 0,
                           "dist": {"nodes": len(nodes), "node_rank": rank, "world": len(nodes)},
                           "task": task})


@pytest.mark.timeout(300)
def test_torch_gloo_all_reduce_across_two_nodes_from_the_environment_kowloon_sets(gw, pair):
    jid = "gang-" + os.urandom(3).hex()
    submit_gang(gw, pair, jid, ALLREDUCE)
    res = [gw.wait_result(f"{jid}.1.p{r}", 120) for r in (0, 1)]
    want = expected_sum(2)
    for r, one in enumerate(res):
        text = log_text(gw, one)
        assert one["state"] == "succeeded", (one, text)
        lines = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines() if ln and ln[0] != "["}
        assert lines["rank"][:3] == [str(r), "world", "2"], text
        assert lines["rank"][4] == "127.0.0.1"            # node_rank 0's advertised address
        assert 29500 <= int(lines["rank"][5]) <= 29999    # --task-master-ports, out of the ephemeral range
        assert lines["rank"][8:] == ["ifname", "lo", "=lo"], text   # the interface of --dist-host
        assert np.array_equal(np.array(lines["sum"], dtype=np.float64), want), text
    out = res[0]["outputs"]["sum.npy"]
    assert np.array_equal(np.load(io.BytesIO(gw.blob(out["blob"]))), want)
    assert "outputs" not in res[1] or not res[1]["outputs"]   # a gang's outputs are rank 0's


@pytest.mark.timeout(400)
def test_a_killed_part_ends_the_other_parts_collective(gw, pair, conf):
    jid = "gangkill-" + os.urandom(3).hex()
    submit_gang(gw, pair, jid, ALLREDUCE, env={"HOLD_ON_ATTEMPT": "1"})
    for r in (0, 1):
        try:
            gw.wait_live_log((jid, 1, r), lambda b: b"holding" in b, 180)
        except AssertionError as e:     # what both parts said, and any result
            raise AssertionError(f"{e}\nlive logs: {[bytes(gw.logs.get((jid, 1, p), b'')) for p in (0, 1)]}"
                                 f"\nresults: {[gw.results.get(f'{jid}.1.p{p}') for p in (0, 1)]}")
    run1 = f"{jid}.1.p1"
    [name] = containers(conf, run=run1)
    subprocess.run(["podman", "kill", "--signal", "KILL", name], check=True, timeout=60,
                   env=dict(os.environ, CONTAINERS_CONF=conf), capture_output=True)
    r1 = gw.wait_result(run1, 60)
    assert r1["state"] == "failed" and r1["exit_code"] == 137, r1
    # rank 0 was waiting in a barrier on its peer: Gloo sees the peer go
    r0 = gw.wait_result(f"{jid}.1.p0", 90)
    assert r0["state"] == "failed", r0
    assert r0["exit_code"] not in (None, 0)
    assert containers(conf, run=f"{jid}.1.p0") == []


@pytest.mark.timeout(300)
def test_ddp_training_across_two_nodes_from_kowloons_environment(gw, pair):
    jid = "ddp-" + os.urandom(3).hex()
    for rank, n in enumerate(pair):
        task = {"image": IMAGE, "command": DDP_COMMAND, "files": {"train.py": {"text": DDP_TRAIN}}}
        gw.submit(n.name, {"job_id": jid, "attempt": 1, "timeout_s": 180, "gpus": 0,
                           "dist": {"nodes": 2, "node_rank": rank, "world": 2}, "task": task})
    res = [gw.wait_result(f"{jid}.1.p{r}", 180) for r in (0, 1)]
    for one in res:
        text = log_text(gw, one)
        assert one["state"] == "succeeded", (one, text)
        [line] = [ln for ln in text.splitlines() if ln.startswith("world")]
        world, same, loss = line.split()[1], line.split()[3], float(line.split()[5])
        assert world == "2" and same == "True", text
        assert loss < 1.0, text                     # it trained (from ~8 at the start)
    assert "model.pt" in res[0]["outputs"]
    gw.wait_progress(jid, lambda p: p.get("epoch") == 30 and p.get("loss", 9) < 1.0)


# ---------------------------------------------------------------- through the gateway

@pytest.fixture(scope="module")
def gstack(conf):
    from test_task_clients import TaskStack
    s = TaskStack(conf, node_names=("tg-1", "tg-2", "tg-3")).start()
    yield s
    s.close()
    s.remove_containers()
    if not os.environ.get("KOWLOON_TEST_KEEP"):
        s.remove()


@pytest.mark.timeout(400)
def test_gang_task_through_the_gateway_a_lost_part_ends_the_other_and_the_job_reruns_whole(gstack):
    import kowloon
    with kowloon.Client(gstack.base, gstack.keys["A"]) as c:
        job = c.submit_task(IMAGE, ["python3", "-c", ALLREDUCE], env={"HOLD_ON_ATTEMPT": "1"},
                            resources={"nodes": 2}, max_attempts=3, timeout_s=300)
        # both parts of attempt 1 met, all-reduced and now hold
        for part in (0, 1):
            try:
                stk.wait_until(lambda: "holding" in job.logs(part=part), 180, 0.2,
                               f"part {part} of attempt 1 holding")
            except stk.StackError as e:     # say where the job is and what its parts printed
                raise AssertionError(f"{e}\njob: {job.refresh().data}\n"
                                     + "\n".join(f"part {p}:\n{job.logs(part=p)}" for p in (0, 1)))
        [p1] = gstack.containers(run=f"{job.id}.1.p1")
        node = subprocess.run(["podman", "inspect", "--format", '{{index .Config.Labels "kowloon.node"}}', p1],
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, CONTAINERS_CONF=gstack.conf)).stdout.strip()
        gstack.kill_node(node)          # part 1's node is lost
        # the gateway ends part 0 (its container goes) and runs the gang again
        stk.wait_until(lambda: gstack.containers(run=f"{job.id}.1.p0") == [], 120, 0.5,
                       "part 0 of attempt 1 ended")
        job.wait(240)
        assert job.state == "succeeded", job.data
        assert job.data.get("attempts") == 2, job.data
        want = expected_sum(2)
        for part in (0, 1):
            text = job.logs(part=part)
            line = [ln for ln in text.splitlines() if ln.startswith("sum")][-1]   # the last attempt's
            assert np.array_equal(np.array(line.split()[1:], dtype=np.float64), want), text
            assert "attempt 2" in text
        y = np.load(io.BytesIO(job.result()["sum.npy"]))
        assert np.array_equal(y, want)
