"""A private one-host slurm-wlm cluster for the tests (test_slurm.py) and
the Slurm start bench (bench/slurm_start.py): munged with a generated key,
slurmctld and slurmd from a generated slurm.conf on free ports, everything
under one directory."""

import os
import shutil
import signal
import socket
import subprocess
import time

from stack import StackError, _clean_env, free_port, tail, wait_until

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun",
            "squeue", "sinfo", "scancel", "scontrol")


def slurm_bin(name):
    """The path of a Slurm or munge binary (some live in /usr/sbin), or None."""
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def missing_binaries():
    return [b for b in BINARIES if not slurm_bin(b)]


def _running(pid):
    """Whether pid is a process that has not exited. The daemons detach, so
    their parent is init or, under make test, the subreaper that contains
    the suite (scripts/lib.sh), which reaps only at its end: an exited one
    stays a zombie until then, and kill(pid, 0) still finds it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Slurm:
    """munged, slurmctld and slurmd of a one-host cluster, in root. name: the
    ClusterName; kill_wait: slurm.conf's KillWait (None: Slurm's default);
    sched_params: its SchedulerParameters (None: none)."""

    def __init__(self, root, name="kowloontest", kill_wait=None, sched_params=None):
        self.root = root
        self.name, self.kill_wait, self.sched_params = name, kill_wait, sched_params
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(root, "slurm.conf")
        self.munge_dir = os.path.join(root, "munge")
        self.log_dir = os.path.join(root, "log")
        self.pids = {}

    def env(self, **extra):
        env = {k: v for k, v in _clean_env().items() if not k.startswith("SLURM")}
        env["SLURM_CONF"] = self.conf
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def run(self, *argv, timeout=30, check=True):
        r = subprocess.run([slurm_bin(argv[0]), *argv[1:]], env=self.env(), capture_output=True,
                           text=True, timeout=timeout, cwd=self.root)
        if check and r.returncode != 0:
            raise StackError(f"{' '.join(argv)} failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def _write_conf(self):
        sock = os.path.join(self.munge_dir, "munge.sock")
        state, spool = os.path.join(self.root, "state"), os.path.join(self.root, "spool")
        for d in (state, spool):
            os.makedirs(d, mode=0o755)
        extra = f"SchedulerParameters={self.sched_params}\n" if self.sched_params else ""
        if self.kill_wait is not None:
            extra += f"KillWait={self.kill_wait}\n"
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName={self.name}
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.log_dir}/slurmctld.log
SlurmdLogFile={self.log_dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
{extra}InactiveLimit=0
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=100 State=UNKNOWN
PartitionName=kowloon Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, name, argv, pidfile):
        r = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=30,
                           cwd=self.root)
        if r.returncode != 0:
            raise StackError(f"{name} did not start ({r.returncode}): {r.stderr}")
        wait_until(lambda: os.path.exists(pidfile) and open(pidfile).read().strip(), 10, 0.1,
                   f"{name} pid file")
        self.pids[name] = int(open(pidfile).read().strip())

    def start(self):
        os.makedirs(self.munge_dir, mode=0o755)
        os.makedirs(self.log_dir, mode=0o755)
        key = os.path.join(self.munge_dir, "munge.key")
        subprocess.run([slurm_bin("mungekey"), "--create", f"--keyfile={key}"], check=True,
                       capture_output=True, timeout=30)
        os.chmod(key, 0o400)
        self._daemon("munged", [slurm_bin("munged"), "--force",
                                f"--socket={self.munge_dir}/munge.sock", f"--key-file={key}",
                                f"--log-file={self.log_dir}/munged.log",
                                f"--pid-file={self.munge_dir}/munged.pid",
                                f"--seed-file={self.munge_dir}/munged.seed"],
                     f"{self.munge_dir}/munged.pid")
        self._write_conf()
        # -i: no state from an earlier run (there is none in a new directory)
        self._daemon("slurmctld", [slurm_bin("slurmctld"), "-f", self.conf, "-i"],
                     f"{self.root}/slurmctld.pid")
        self._daemon("slurmd", [slurm_bin("slurmd"), "-f", self.conf], f"{self.root}/slurmd.pid")

        def idle():
            out = self.run("sinfo", "-h", "-o", "%t", check=False).stdout.split()
            return out and out[0] == "idle"
        wait_until(idle, 30, 0.3, "the slurm node to be idle")
        return self

    def stop(self):
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and _running(pid):
                time.sleep(0.1)
            if _running(pid):
                os.kill(pid, signal.SIGKILL)

    def logs(self):
        return "\n".join(f"----- {n} -----\n{tail(os.path.join(self.log_dir, n))}"
                         for n in sorted(os.listdir(self.log_dir)))

    def job_state(self, job_id):
        r = self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False)
        return r.stdout.strip()
