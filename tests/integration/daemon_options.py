"""The KOWLOON_* environment variables each daemon reads, from its own
`--help` (svc_config_usage prints "(env NAME, default VALUE)" for every
option), so deployment files (deploy/k8s, docker-compose.yml) can be checked
against the binaries rather than against a list kept by hand."""

import functools
import os
import re
import subprocess

from stack import COMPUTE_BIN, GATEWAY_BIN

BINARIES = {"kowloon-gateway": GATEWAY_BIN, "kowloon-compute": COMPUTE_BIN}
_ENV = re.compile(r"\(env (KOWLOON_[A-Z0-9_]+)(?:, default ([^)]*))?\)\s*$")


@functools.lru_cache(maxsize=None)
def env_options(daemon):
    """{env name: default or None} of daemon ("kowloon-gateway" or
    "kowloon-compute"). Raises AssertionError when the binary is missing
    (run `make all` first) or prints no options."""
    binary = BINARIES[daemon]
    assert os.access(binary, os.X_OK), f"{binary} is missing; run `make all` first"
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ.get("PATH", "")})
    assert out.returncode == 0, out.stderr
    found = {}
    for line in out.stdout.splitlines():
        m = _ENV.search(line)
        if m:
            found[m.group(1)] = m.group(2)
    assert len(found) >= 10, f"{daemon} --help lists no options:\n{out.stdout}"
    return found
