"""The `kowloon` command: run kernels and tasks (your program in a container
image), list, watch and cancel jobs, read a task's logs, show nodes,
kernels, images and usage. `--json` prints machine-readable output.

Exit codes: 0 ok, 1 the job failed or was cancelled, 2 usage error,
3 API or connection error."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from . import _wire
from ._base import __version__
from ._errors import ApiError, JobFailedError, KowloonError, NotOfferedError, WaitTimeout
from .client import Client, Job

EXIT_OK, EXIT_JOB, EXIT_USAGE, EXIT_API = 0, 1, 2, 3


class UsageError(Exception):
    pass


def _out(obj: Any) -> None:
    print(json.dumps(obj, indent=None, default=_json_default), flush=True)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON: {type(o)}")


def _kv(items: Optional[List[str]], what: str, sep: str = "=") -> Dict[str, str]:
    out: Dict[str, str] = {}
    for it in items or []:
        k, s, v = it.partition(sep)
        if not s or not k:
            raise UsageError(f"{what} must be NAME{sep}VALUE, got {it!r}")
        out[k] = v
    return out


def _param_value(kernel: Dict[str, Any], name: str, text: str) -> Any:
    """A --param value typed by the catalog (integer, number, boolean, else text)."""
    spec = {p["name"]: p for p in kernel.get("params", [])}.get(name)
    if spec is None:
        raise UsageError(f"{kernel['name']} has no param {name!r} "
                         f"(it has: {', '.join(p['name'] for p in kernel.get('params', []))})")
    t = spec.get("type")
    try:
        if t == "integer":
            return int(text)
        if t == "number":
            return float(text)
        if t == "boolean":
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
    except ValueError:
        raise UsageError(f"--param {name}: {text!r} is not a {t}") from None
    return text


def _load_input(name: str, path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"--input {name}: cannot read {path} as .npy: {e}") from None


def _table(rows: List[List[str]], head: List[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for r in [head] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip())


def _emit(a: argparse.Namespace, data: Any, text: Callable[[Any], None]) -> int:
    """Prints data: one JSON line with --json, else text(data) for a person.
    Returns EXIT_OK."""
    if a.json:
        _out(data)
    else:
        text(data)
    return EXIT_OK


# ------------------------------------------------------------------ commands

def cmd_run(c: Client, a: argparse.Namespace) -> int:
    try:
        kernel = c.kernel(a.kernel)
    except ApiError:
        raise
    except KowloonError as e:
        raise UsageError(str(e)) from None
    params = {k: _param_value(kernel, k, v) for k, v in _kv(a.param, "--param").items()}
    inputs = {k: _load_input(k, v) for k, v in _kv(a.input, "--input").items()}
    known = {i["name"] for i in kernel.get("inputs", [])}
    for k in inputs:
        if k not in known:
            raise UsageError(f"{a.kernel} has no input {k!r} (it has: {', '.join(sorted(known))})")
    labels = _kv(a.label, "--label", sep=":") or None
    resources = {"backend": a.backend} if a.backend else None
    job = c.submit(a.kernel, params=params, inputs=inputs, priority=a.priority, labels=labels,
                   resources=resources)
    if not a.json:
        print(f"job {job.id} submitted", file=sys.stderr, flush=True)
    try:
        outputs = job.result(timeout=a.timeout)
    except JobFailedError:
        if a.json:
            _out({"job": job.data, "outputs": {}})
        else:
            err = job.error or {}
            print(f"job {job.id} {job.state}" + (f": {err.get('code')}: {err.get('message')}"
                                                 if err else ""), file=sys.stderr)
        return EXIT_JOB
    written: Dict[str, Any] = {}
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    for name, arr in outputs.items():
        entry: Dict[str, Any] = {"dtype": _wire.api_dtype(arr), "shape": list(arr.shape)}
        if a.out:
            path = os.path.join(a.out, f"{name}.npy")
            np.save(path, arr)
            entry["path"] = path
        elif arr.size <= 16:
            entry["data"] = arr.ravel().tolist()
        written[name] = entry
    if a.json:
        _out({"job": job.data, "outputs": written})
    else:
        print(f"job {job.id} {job.state} on {job.data.get('node')} ({job.data.get('backend')})")
        for name, w in written.items():
            where = w.get("path") or w.get("data")
            print(f"  {name}: {w['dtype']} {w['shape']} {where if where is not None else ''}".rstrip())
    return EXIT_OK


def _task_file(spec: str) -> Any:
    """--file LOCAL[:PATH]: LOCAL's bytes at PATH in the working directory
    (default its base name)."""
    local, sep, path = spec.partition(":")
    if not sep:
        path = os.path.basename(local)
    if not local or not path:
        raise UsageError(f"--file must be LOCAL[:PATH], got {spec!r}")
    try:
        with open(local, "rb") as f:
            return path, f.read()
    except OSError as e:
        raise UsageError(f"--file {local}: {e.strerror}") from None


def _task_input(name: str, path: str) -> Any:
    """--input NAME=FILE: a .npy file is sent as its array (the program
    finds /kowloon/in/NAME.npy); anything else as plain bytes at
    /kowloon/in/NAME."""
    if path.endswith(".npy"):
        return _load_input(name, path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"--input {name}: {e.strerror}: {path}") from None


def _print_outputs(job: Job, out_dir: Optional[str], as_json: bool) -> Dict[str, Any]:
    """Downloads a succeeded task's outputs into out_dir (names are paths
    below it); returns {name: {"bytes", "path"?}}."""
    written: Dict[str, Any] = {}
    for name, raw in job.result().items():
        entry: Dict[str, Any] = {"bytes": len(raw)}
        if out_dir:
            dest = os.path.normpath(os.path.join(out_dir, name))
            if os.path.commonpath([os.path.abspath(dest), os.path.abspath(out_dir)]) != \
                    os.path.abspath(out_dir):
                raise KowloonError(f"output name {name!r} leaves {out_dir}")
            os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
            with open(dest, "wb") as f:
                f.write(raw)
            entry["path"] = dest
        written[name] = entry
    if not as_json:
        for name, w in written.items():
            print(f"  {name}: {w['bytes']} bytes" + (f" -> {w['path']}" if "path" in w else ""),
                  file=sys.stderr)
    return written


def cmd_task_run(c: Client, a: argparse.Namespace) -> int:
    argv = list(a.cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("no command: kowloon task run --image IMAGE [options] -- COMMAND [ARG...]")
    files = dict(_task_file(f) for f in a.file or [])
    inputs = {k: _task_input(k, v) for k, v in _kv(a.input, "--input").items()}
    resources: Dict[str, Any] = {}
    for key in ("nodes", "gpus", "gpu_memory_gb", "memory_gb", "cpus", "backend"):
        v = getattr(a, key)
        if v is not None:
            resources[key] = v
    formats = {k: "npy" for k, v in _kv(a.input, "--input").items() if v.endswith(".npy")}
    job = c.submit_task(a.image, argv, env=_kv(a.env, "--env") or None, files=files or None,
                        inputs=inputs or None, input_format=formats, workdir=a.workdir,
                        network=a.network, resources=resources or None, priority=a.priority,
                        timeout_s=a.timeout_s, labels=_kv(a.label, "--label", sep=":") or None)
    if not a.json:
        print(f"job {job.id} submitted", file=sys.stderr, flush=True)
    if a.detach:
        if a.json:
            _out(job.data)
        else:
            print(job.id)
        return EXIT_OK
    if a.follow:
        for text in job.logs(follow=True):
            if not a.json:
                sys.stdout.write(text)
                sys.stdout.flush()
    job.wait(a.timeout)
    if not a.follow and not a.json:
        sys.stdout.write(job.logs())
        sys.stdout.flush()
    written: Dict[str, Any] = {}
    if job.state == "succeeded":
        written = _print_outputs(job, a.out, a.json)
    if a.json:
        _out({"job": job.data, "outputs": written})
    else:
        err = job.error or {}
        print(f"job {job.id} {job.state}"
              + (f", exit code {job.exit_code}" if job.exit_code is not None else "")
              + (f": {err.get('code')}: {err.get('message')}" if err else ""), file=sys.stderr)
    return EXIT_OK if job.state == "succeeded" else EXIT_JOB


def cmd_logs(c: Client, a: argparse.Namespace) -> int:
    job = c.job(a.id)
    if a.follow:
        for text in job.logs(follow=True, part=a.part):
            sys.stdout.write(text)
            sys.stdout.flush()
    else:
        sys.stdout.write(job.logs(part=a.part))
        sys.stdout.flush()
    return EXIT_OK


def cmd_images(c: Client, a: argparse.Namespace) -> int:
    return _emit(a, c.list_images(), _images_text)


def _images_text(body: Dict[str, Any]) -> None:
    allowed = body.get("allowed") or []
    print("allowed: " + (", ".join(allowed) if allowed else
                         "none (the operator allows images with --task-images or per tenant)"))
    _table([[str(i.get("image")), str(i.get("nodes"))] for i in body.get("images") or []],
           ["IMAGE", "NODES"])


def cmd_jobs(c: Client, a: argparse.Namespace) -> int:
    label = None
    if a.label:
        k, s, v = a.label.partition(":")
        if not s:
            raise UsageError("--label must be KEY:VALUE")
        label = (k, v)
    jobs: List[Job] = []
    for j in c.jobs.list(state=a.state, kernel=a.kernel, label=label,
                         page_size=min(a.limit, 1000)):
        jobs.append(j)
        if len(jobs) >= a.limit:
            break
    return _emit(a, [j.data for j in jobs], lambda _: _table(
        [[j.id, j.state, j.kernel or (j.task or {}).get("image", "task"),
          j.data.get("node") or "-", j.data.get("created_at", "")] for j in jobs],
        ["ID", "STATE", "KERNEL", "NODE", "CREATED"]))


def _bar(frac: Optional[float], width: int = 24) -> str:
    if frac is None:
        return ""
    n = int(round(frac * width))
    return "[" + "#" * n + "-" * (width - n) + f"] {frac * 100:5.1f}%"


def cmd_watch(c: Client, a: argparse.Namespace) -> int:
    job = c.job(a.id)
    tty = sys.stdout.isatty() and not a.json
    last = ""
    for ev in job.events():
        if a.json:
            _out({"event": ev.event, "id": ev.id, "state": job.state, "progress": job.progress,
                  "data": ev.data if ev.job is None else None})
            continue
        line = " ".join(x for x in (job.id, job.state, _bar(_wire.progress_fraction(job.progress)),
                                    _wire.progress_text(job.progress)) if x)
        if line == last:
            continue
        last = line
        if tty:
            print("\r\033[K" + line, end="", flush=True)
        else:
            print(line, flush=True)
    if tty:
        print()
    if job.state not in _wire.TERMINAL:
        job.wait()
    if not a.json and job.error:
        print(f"{job.error.get('code')}: {job.error.get('message')}", file=sys.stderr)
    return EXIT_OK if job.state == "succeeded" else EXIT_JOB


def cmd_cancel(c: Client, a: argparse.Namespace) -> int:
    job = c.job(a.id).cancel()
    extra = " (cancel requested)" if job.data.get("cancel_requested") and not job.done else ""
    return _emit(a, job.data, lambda _: print(f"{job.id} {job.state}{extra}"))


def cmd_nodes(c: Client, a: argparse.Namespace) -> int:
    return _emit(a, c.nodes(), lambda nodes: _table(
        [[str(n.get("name")), str(n.get("state")), str(n.get("backend")),
          ",".join(g.get("name", "?") for g in n.get("gpus") or []) or "-",
          f"{n['running'] if 'running' in n else '?'}/{n.get('slots', 0)}",
          "yes" if n.get("draining") else "no"] for n in nodes],
        ["NAME", "STATE", "BACKEND", "GPUS", "BUSY", "DRAINING"]))


def cmd_kernels(c: Client, a: argparse.Namespace) -> int:
    return _emit(a, c.kernels(), _kernels_text)


def _kernels_text(ks: List[Dict[str, Any]]) -> None:
    for k in ks:
        params = ", ".join(p["name"] + ("" if p.get("required") else "?") for p in k.get("params", []))
        ins = ", ".join(i["name"] + ("?" if i.get("optional") else "") for i in k.get("inputs", []))
        outs = ", ".join(o["name"] for o in k.get("outputs", []))
        print(f"{k['name']}: ({ins}) -> ({outs})  params: {params or '-'}"
              f"  backends: {','.join(k.get('backends') or []) or '-'}")


def cmd_usage(c: Client, a: argparse.Namespace) -> int:
    return _emit(a, c.usage(from_=a.from_, to=a.to, group_by=a.group_by, tenant=a.tenant),
                 lambda u: _usage_text(u, a.group_by))


def _usage_text(u: Dict[str, Any], group_by: Optional[str]) -> None:
    print(f"tenant {u['tenant']}, jobs that ended from {u['from']} to {u['to']}, "
          f"cost in {u.get('currency') or '-'}")
    rows = [(str(g["key"]) if g["key"] is not None else "(none)", g) for g in u["groups"]]
    rows.append(("TOTAL", u["totals"]))
    _table([[k, str(g["jobs"]), f"{g['queue_s']:.1f}", f"{g['run_s']:.1f}", f"{g['gpu_s']:.1f}",
             f"{g['cpu_s']:.1f}", _bytes(g["bytes_in"]), _bytes(g["bytes_out"]),
             f"{g['cost']:.4f}"] for k, g in rows],
           [(group_by or "").upper() or "-", "JOBS", "QUEUE_S", "RUN_S", "GPU_S", "CPU_S",
            "IN", "OUT", "COST"])


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# ------------------------------------------------------------------ parser

class _RefuseKeyArgument(argparse.Action):
    """--api-key KEY: refused. A key among a command's arguments is readable
    by every user of the host (ps, /proc/PID/cmdline) and stays in shell
    histories; the key comes from $KOWLOON_API_KEY or --api-key-file."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error("--api-key is not taken: a key on the command line is visible to every "
                     "user of this host (ps); set KOWLOON_API_KEY, or pass --api-key-file FILE "
                     "(- reads it from stdin)")


def _common(defaults: bool) -> argparse.ArgumentParser:
    """--url, --api-key-file, --json, accepted before and after the command
    (the command's copy sets nothing unless given, so it never undoes the
    first)."""
    d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--url", default=d(os.environ.get("KOWLOON_URL")),
                   help="gateway URL (default $KOWLOON_URL)")
    p.add_argument("--api-key-file", metavar="FILE", default=d(None),
                   help="read the API key from FILE's first line, - for stdin (default: "
                        "$KOWLOON_API_KEY)")
    p.add_argument("--api-key", action=_RefuseKeyArgument, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", default=d(False),
                   help="machine-readable output")
    return p


def _api_key(a: argparse.Namespace) -> Optional[str]:
    """The key from --api-key-file (its first line; - is stdin), else from
    $KOWLOON_API_KEY."""
    if a.api_key_file:
        if a.api_key_file == "-":
            line = sys.stdin.readline()
        else:
            with open(a.api_key_file, encoding="utf-8") as f:
                line = f.readline()
        return line.strip() or None
    return os.environ.get("KOWLOON_API_KEY") or None


def build_parser() -> argparse.ArgumentParser:
    common = _common(False)
    p = argparse.ArgumentParser(prog="kowloon", parents=[_common(True)],
                                description="Kowloon remote GPU compute from the command line.",
                                epilog="exit codes: 0 ok, 1 job failed or cancelled, "
                                       "2 usage error, 3 API or connection error")
    p.add_argument("--version", action="version", version=f"kowloon {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    r = sub.add_parser("run", parents=[common], help="run a kernel and save its outputs")
    r.add_argument("kernel")
    r.add_argument("--param", action="append", metavar="NAME=VALUE")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("--out", metavar="DIR", help="write each output as DIR/NAME.npy")
    r.add_argument("--label", action="append", metavar="KEY:VALUE")
    r.add_argument("--priority", type=int)
    r.add_argument("--backend", choices=["any", "cpu", "cuda"])
    r.add_argument("--timeout", type=float, help="seconds to wait for the job (default: no limit)")
    r.set_defaults(fn=cmd_run)

    t = sub.add_parser("task", parents=[common], help="run your program in a container image")
    tsub = t.add_subparsers(dest="task_command", metavar="SUBCOMMAND")
    tsub.required = True
    tr = tsub.add_parser("run", parents=[common],
                         usage="kowloon task run --image IMAGE [options] -- COMMAND [ARG...]",
                         help="run a command in an image; prints its log, saves its outputs",
                         description="Submits a task, waits for its end and prints its log "
                                     "(live with --follow); saves /kowloon/out files with --out.")
    tr.add_argument("--image", required=True, help="an image the operator allows (kowloon images)")
    tr.add_argument("--file", action="append", metavar="LOCAL[:PATH]",
                    help="put LOCAL in the working directory as PATH (default its name)")
    tr.add_argument("--input", action="append", metavar="NAME=FILE",
                    help="mount FILE read-only at /kowloon/in/NAME (a .npy as NAME.npy)")
    tr.add_argument("--env", action="append", metavar="NAME=VALUE")
    tr.add_argument("--workdir", metavar="DIR")
    tr.add_argument("--network", choices=["none", "egress"])
    tr.add_argument("--nodes", type=int, help="parts of a gang (torchrun-style environment)")
    tr.add_argument("--gpus", type=int, help="GPUs per node")
    tr.add_argument("--gpu-memory-gb", type=float)
    tr.add_argument("--memory-gb", type=float, help="memory limit per node")
    tr.add_argument("--cpus", type=float, help="CPU limit per node")
    tr.add_argument("--backend", choices=["any", "cpu", "cuda"])
    tr.add_argument("--timeout-s", type=int, help="the job's time limit on the node")
    tr.add_argument("--label", action="append", metavar="KEY:VALUE")
    tr.add_argument("--priority", type=int)
    tr.add_argument("--out", metavar="DIR", help="save each output file under DIR")
    tr.add_argument("-f", "--follow", action="store_true", help="stream the log while it runs")
    tr.add_argument("-d", "--detach", action="store_true", help="print the job id and return")
    tr.add_argument("--timeout", type=float, help="seconds to wait for the job (default: no limit)")
    tr.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    tr.set_defaults(fn=cmd_task_run)

    lg = sub.add_parser("logs", parents=[common], help="a task's log (stdout and stderr)")
    lg.add_argument("id")
    lg.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    lg.add_argument("--part", type=int, default=0, help="gang part (node rank), default 0")
    lg.set_defaults(fn=cmd_logs)

    sub.add_parser("images", parents=[common],
                   help="images your tasks may use").set_defaults(fn=cmd_images)

    j = sub.add_parser("jobs", parents=[common], help="list jobs, newest first")
    j.add_argument("--state", choices=["queued", "running", "succeeded", "failed", "cancelled"])
    j.add_argument("--kernel")
    j.add_argument("--label", metavar="KEY:VALUE")
    j.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    j.set_defaults(fn=cmd_jobs)

    w = sub.add_parser("watch", parents=[common], help="follow a job until it ends")
    w.add_argument("id")
    w.set_defaults(fn=cmd_watch)

    c = sub.add_parser("cancel", parents=[common], help="cancel a job")
    c.add_argument("id")
    c.set_defaults(fn=cmd_cancel)

    sub.add_parser("nodes", parents=[common], help="compute nodes").set_defaults(fn=cmd_nodes)
    sub.add_parser("kernels", parents=[common], help="the kernel catalog").set_defaults(fn=cmd_kernels)

    u = sub.add_parser("usage", parents=[common], help="usage and cost of your tenant")
    u.add_argument("--from", dest="from_", metavar="RFC3339",
                   help="YYYY-MM-DD or RFC 3339 (default: 30 days before --to)")
    u.add_argument("--to", metavar="RFC3339", help="YYYY-MM-DD or RFC 3339 (default: now)")
    u.add_argument("--group-by", metavar="kernel|label:KEY|day")
    u.add_argument("--tenant", metavar="NAME", help="another tenant's usage (admin keys only)")
    u.set_defaults(fn=cmd_usage)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)  # exits 2 on a usage error
    try:
        api_key = _api_key(a)
    except OSError as e:
        parser.error(f"--api-key-file: {e.strerror}: {e.filename}")
    if not a.url or not api_key:
        parser.error("the gateway URL and API key are needed: --url or KOWLOON_URL, and "
                     "KOWLOON_API_KEY or --api-key-file FILE (- for stdin)")
    try:
        with Client(a.url, api_key) as client:
            return a.fn(client, a)
    except UsageError as e:
        print(f"kowloon: {e}", file=sys.stderr)
        return EXIT_USAGE
    except WaitTimeout as e:
        print(f"kowloon: {e}", file=sys.stderr)
        return EXIT_API
    except ApiError as e:
        if a.json:
            _out({"error": {"status": e.status, "code": e.code, "message": e.message,
                            "field": e.field}})
        print(f"kowloon: {e.message if isinstance(e, NotOfferedError) else e}", file=sys.stderr)
        return EXIT_API
    except KowloonError as e:
        print(f"kowloon: {e}", file=sys.stderr)
        return EXIT_API
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
