"""tests/gpu/run.sh's own behaviour, which a GPU machine's first run relies
on, checked on any machine with nvcc (no GPU): a hung checker is cut at its
timeout with its lines kept and a TIMED OUT summary, the budget skips what
it has no time for, NCCL installed only as a Python wheel is found, and a
box without a GPU says so. The checks are tests/gpu/test_run_sh.sh."""

import os
import shutil
import subprocess

import pytest

from stack import REPO

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


@pytest.mark.timeout(600)
@pytest.mark.skipif(NVCC is None, reason="no nvcc: tests/gpu/run.sh cannot build here")
def test_gpu_run_sh_times_out_hung_checkers_and_finds_nccl_wheels():
    r = subprocess.run([os.path.join(REPO, "tests", "gpu", "test_run_sh.sh")], cwd=REPO, capture_output=True,
                       text=True, timeout=580, env=dict(os.environ, NVCC=NVCC))
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "PASS tests/gpu/test_run_sh.sh" in r.stdout
