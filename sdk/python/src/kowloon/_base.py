"""What Client and AsyncClient share: configuration, the retry policy, the
submit body, and the Job object's read-only view. No I/O here."""

from __future__ import annotations

import asyncio
import base64
import codecs
import dataclasses
import datetime as _dt
import math
import os
import shlex
import time
import uuid
from urllib.parse import quote
from dataclasses import dataclass
from typing import (Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from . import _wire
from ._errors import KowloonError

__version__ = "0.1.0"

LabelFilter = Union[str, Tuple[str, str], Mapping[str, str], None]


@dataclass
class RetryPolicy:
    """When a request is tried again.

    429 and 503 are retried after their ``Retry-After`` (or a back-off when
    absent); a request that got no answer at all (connection refused, reset,
    timed out) after an exponential back-off from ``backoff_s`` up to
    ``backoff_max_s``. Retries stop once ``max_total_s`` seconds have passed
    since the first try (a wait that would end past it is not started):
    the last error is raised then."""

    max_total_s: float = 60.0
    backoff_s: float = 0.25
    backoff_max_s: float = 5.0
    max_attempts: int = 1000

    def delay(self, attempt: int, started: float, retry_after: Optional[float]) -> Optional[float]:
        """Seconds to wait before try number attempt+1, or None to give up."""
        if attempt >= self.max_attempts:
            return None
        if retry_after is not None:
            d = retry_after
        else:
            d = min(self.backoff_max_s, self.backoff_s * (2 ** min(attempt - 1, 16)))
        if time.monotonic() - started + d > self.max_total_s:
            return None
        return d


class Config:
    """Where and as whom a client speaks (arguments, else the environment)."""

    def __init__(self, url: Optional[str], api_key: Optional[str], timeout: float,
                 retry: Optional[RetryPolicy], max_retry_s: Optional[float]):
        url = url or os.environ.get("KOWLOON_URL")
        api_key = api_key or os.environ.get("KOWLOON_API_KEY")
        if not url:
            raise KowloonError("no gateway URL: pass url= or set KOWLOON_URL")
        if not api_key:
            raise KowloonError("no API key: pass api_key= or set KOWLOON_API_KEY")
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retry = dataclasses.replace(retry) if retry else RetryPolicy()
        if max_retry_s is not None:
            self.retry.max_total_s = max_retry_s
        self.headers = {"Authorization": f"Bearer {api_key}",
                        "User-Agent": f"kowloon-python/{__version__}"}


def label_query(label: LabelFilter) -> Optional[str]:
    """The `label=key:value` query value of a filter given as "k:v", (k, v) or {k: v}."""
    if label is None:
        return None
    if isinstance(label, str):
        return label
    if isinstance(label, tuple):
        return f"{label[0]}:{label[1]}"
    items = list(label.items())
    if len(items) != 1:
        raise KowloonError("the gateway filters by one label at a time")
    return f"{items[0][0]}:{items[0][1]}"


def usage_query(from_: Any, to: Any, group_by: Optional[str], extra: Mapping[str, Any]
                ) -> Dict[str, Any]:
    """The query of GET /v1/usage; datetimes become RFC 3339 (naive ones are UTC)."""
    def fmt(v: Any) -> Any:
        if isinstance(v, _dt.datetime):
            if v.tzinfo is None:
                v = v.replace(tzinfo=_dt.timezone.utc)
            return v.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        if isinstance(v, _dt.date):
            return v.isoformat()
        return v
    q = {"from": from_, "to": to, "group_by": group_by, **extra}
    return {k: fmt(v) for k, v in q.items() if v is not None}


def wait_chunk(deadline: Optional[float]) -> int:
    """N of the next `Prefer: wait=N` (1..60), or 0 once the deadline passed."""
    if deadline is None:
        return 60
    left = deadline - time.monotonic()
    if left <= 0:
        return 0
    return max(1, min(60, math.ceil(left)))


@dataclass
class Upload:
    """An input that goes as a blob: its bytes and content address."""

    name: str
    raw: bytes
    blob_id: str


def build_submit(kernel: Mapping[str, Any], kwargs: Mapping[str, Any],
                 params: Optional[Mapping[str, Any]], inputs: Optional[Mapping[str, Any]],
                 envelope: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[Upload]]:
    """The POST /v1/jobs body of a submit and the blobs it needs uploaded
    first. Inputs up to 64 KiB go inline (base64), larger ones by blob
    reference; a dict value is taken as a wire tensor already (e.g.
    ``{"dtype", "shape", "blob"}`` of an earlier result)."""
    p, i = _wire.split_call(kernel, kwargs)
    p = {**(params or {}), **p}
    all_inputs: Dict[str, Tuple[Any, Optional[str]]] = {}
    dtypes = {x["name"]: x.get("dtype") for x in kernel.get("inputs", [])}
    for name, value in (inputs or {}).items():
        all_inputs[name] = (value, dtypes.get(name))
    all_inputs.update(i)
    body: Dict[str, Any] = {"kernel": kernel["name"]}
    if p:
        body["params"] = p
    wire: Dict[str, Any] = {}
    uploads: List[Upload] = []
    for name, (value, dtype) in all_inputs.items():
        if isinstance(value, Mapping):
            wire[name] = dict(value)
            continue
        arr, dt = _wire.prepare_array(value, dtype, name)
        raw = arr.tobytes()
        if len(raw) <= _wire.INLINE_MAX_BYTES:
            wire[name] = _wire.inline_tensor(arr, dt)
        else:
            bid = _wire.blob_id(raw)
            uploads.append(Upload(name, raw, bid))
            wire[name] = _wire.blob_tensor(arr, dt, bid)
    if wire:
        body["inputs"] = wire
    for k, v in envelope.items():
        if v is not None:
            body[k] = v
    return body, uploads


#: numpy dtypes a task input may have (native little-endian forms); a task
#: reads its bytes itself, so the set is wider than a kernel's
TASK_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "float16", "float32", "float64")

#: task files up to this size go inline (base64); larger ones as blobs
#: (the gateway takes 1 MiB of inline files in all)
FILE_INLINE_MAX_BYTES = 64 * 1024


def _task_array(value: Any, name: str) -> Tuple[np.ndarray, str]:
    arr = np.asarray(value)
    if arr.dtype.name not in TASK_DTYPES:
        raise KowloonError(f"input {name}: dtype {arr.dtype} is not one a task takes "
                           f"({', '.join(TASK_DTYPES)})")
    return np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"), copy=False)), arr.dtype.name


def _task_input(name: str, value: Any, fmt: str, uploads: List[Upload]) -> Dict[str, Any]:
    """The wire form of one task input: bytes are plain bytes (raw, no
    dtype), anything else an array; a Mapping is already a wire form."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw, entry = bytes(value), {"format": "raw"}
    else:
        if fmt not in ("raw", "npy"):
            raise KowloonError(f"input_format must be raw or npy, not {fmt!r}")
        arr, dt = _task_array(value, name)
        raw, entry = arr.tobytes(), {"dtype": dt, "shape": list(arr.shape), "format": fmt}
    if len(raw) <= _wire.INLINE_MAX_BYTES:
        entry["b64"] = base64.b64encode(raw).decode("ascii")
    else:
        bid = _wire.blob_id(raw)
        uploads.append(Upload(name, raw, bid))
        entry["blob"] = bid
    return entry


def _task_file(path: str, value: Any, uploads: List[Upload]) -> Dict[str, Any]:
    """The wire form of one file of the working directory: str is text,
    bytes go inline up to 64 KiB and as a blob above, a Mapping is already
    a wire form ({"text"}, {"b64"} or {"blob"})."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        if len(value.encode("utf-8")) <= FILE_INLINE_MAX_BYTES:
            return {"text": value}
        value = value.encode("utf-8")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise KowloonError(f"file {path}: give str, bytes or a wire form, not {type(value).__name__}")
    raw = bytes(value)
    if len(raw) <= FILE_INLINE_MAX_BYTES:
        return {"b64": base64.b64encode(raw).decode("ascii")}
    bid = _wire.blob_id(raw)
    uploads.append(Upload(path, raw, bid))
    return {"blob": bid}


def build_task_submit(image: str, command: Union[str, Sequence[str]], *,
                      env: Optional[Mapping[str, str]] = None,
                      files: Optional[Mapping[str, Any]] = None,
                      inputs: Optional[Mapping[str, Any]] = None,
                      input_format: Union[str, Mapping[str, str]] = "raw",
                      workdir: Optional[str] = None, network: Optional[str] = None,
                      output_quota_mb: Optional[int] = None,
                      envelope: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[Upload]]:
    """The POST /v1/jobs body of a task and the blobs it needs uploaded
    first. ``command`` is an argv list (a string is split as a shell would,
    without running one). Inputs: numpy arrays (their own dtype; ``raw``
    bytes at ``/kowloon/in/NAME`` or ``NAME.npy`` with
    ``input_format="npy"``; a dict gives a format per input name, raw
    for the others), bytes (plain bytes), or wire forms."""
    argv = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    if not argv:
        raise KowloonError("command is empty")
    task: Dict[str, Any] = {"image": image, "command": argv}
    uploads: List[Upload] = []
    if env:
        task["env"] = {str(k): str(v) for k, v in env.items()}
    if files:
        task["files"] = {p: _task_file(p, v, uploads) for p, v in files.items()}
    if inputs:
        fmt = (lambda n: input_format) if isinstance(input_format, str) else \
            (lambda n: input_format.get(n, "raw"))
        task["inputs"] = {n: _task_input(n, v, fmt(n), uploads) for n, v in inputs.items()}
    for k, v in (("workdir", workdir), ("network", network), ("output_quota_mb", output_quota_mb)):
        if v is not None:
            task[k] = v
    body: Dict[str, Any] = {"task": task}
    for k, v in envelope.items():
        if v is not None:
            body[k] = v
    return body, uploads


def output_path(job_id: str, name: str) -> str:
    """The route of one output; a task's output names are paths, sent
    URL-encoded whole (``a/b.txt`` as ``a%2Fb.txt``)."""
    return f"/v1/jobs/{job_id}/outputs/{quote(name, safe='')}"


class LogCursor:
    """Where a reading of a job's log stands, shared by the sync and async
    followers: the request to make next (``Range`` from the bytes already
    had, so a dropped stream resumes without a gap or a repeat) and the
    decoding of what came (UTF-8 across chunk boundaries)."""

    def __init__(self, job_id: str, part: int, follow: bool):
        self.path = f"/v1/jobs/{job_id}/logs"
        self.part = part
        self.follow = follow
        self.offset = 0
        self._skip = 0
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def request(self) -> Tuple[Dict[str, Any], Dict[str, str]]:
        """(query, headers) of the next request."""
        q: Dict[str, Any] = {"part": self.part}
        if self.follow:
            q["follow"] = 1
        h = {"Range": f"bytes={self.offset}-"} if self.offset else {}
        return q, h

    def start(self, status: int) -> bool:
        """Whether an answer's body is log bytes: 206 (from ``offset``) or
        200 (the whole log: what was had already is skipped, for a gateway
        that ignores Range). 416 means nothing past ``offset`` yet."""
        self._skip = self.offset if status == 200 else 0
        return status in (200, 206)

    def feed(self, chunk: bytes) -> str:
        if self._skip:
            cut = min(self._skip, len(chunk))
            self._skip -= cut
            chunk = chunk[cut:]
        self.offset += len(chunk)
        return self._dec.decode(chunk)

    def end(self) -> str:
        return self._dec.decode(b"", final=True)

    def after_stream(self, got: int, job_done: Optional[bool]) -> str:
        """What follows a request: ``stop`` (all read), ``again`` (read
        on: the connection dropped, or the job ended and a last plain read
        takes any tail), or ``wait`` (no log yet: wait for a change of the
        job before asking again, rather than spin). ``job_done`` is asked
        only while following (None otherwise)."""
        if not self.follow:
            return "stop"
        if job_done:
            self.follow = False
            return "again"
        return "again" if got else "wait"


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


class JobView:
    """The read-only side of a job: its last seen JSON object and accessors."""

    _data: Dict[str, Any]

    @property
    def id(self) -> str:
        return self._data["id"]

    @property
    def data(self) -> Dict[str, Any]:
        """The job object as the gateway last returned it."""
        return self._data

    @property
    def state(self) -> str:
        """queued, running, succeeded, failed or cancelled (as last seen)."""
        return self._data.get("state", "")

    @property
    def done(self) -> bool:
        """True once the job reached a terminal state (as last seen)."""
        return self.state in _wire.TERMINAL

    @property
    def progress(self) -> Any:
        """The job's last reported ``progress`` (as last seen), or None when
        the kernel (or the gateway) reports none."""
        return self._data.get("progress")

    @property
    def kernel(self) -> str:
        return self._data.get("kernel", "")

    @property
    def kind(self) -> str:
        """``kernel`` or ``task``."""
        return self._data.get("kind") or ("task" if self._data.get("task") else "kernel")

    @property
    def task(self) -> Optional[Dict[str, Any]]:
        """A task's ``image``, ``command``, ``env``, ``workdir``, ``network``
        (None for a kernel job)."""
        return self._data.get("task")

    @property
    def exit_code(self) -> Optional[int]:
        """A task's exit code once it ended (None before, or when the
        program never ran)."""
        return self._data.get("exit_code")

    @property
    def error(self) -> Optional[Dict[str, Any]]:
        """``{"code", "message"}`` of a failed job, else None."""
        return self._data.get("error")

    @property
    def info(self) -> Dict[str, Any]:
        return self._data.get("info") or {}

    @property
    def usage(self) -> Optional[Dict[str, Any]]:
        """What the job used and cost (``queue_s``, ``run_s``, ``gpu_s``,
        ``cpu_s``, ``bytes_in``, ``bytes_out``, ``cost``, ``currency``…)
        once it ran and ended, else None."""
        return self._data.get("usage")

    def _absorb_event(self, ev: _wire.Event) -> None:
        """Keeps state and progress current from a streamed event."""
        if ev.job is not None:
            self._data = ev.job
            return
        if ev.state is not None:
            self._data["state"] = ev.state
        if ev.progress is not None:
            self._data["progress"] = ev.progress

    def __repr__(self) -> str:
        what = self.kernel if self.kind == "kernel" else (self.task or {}).get("image", "task")
        return f"<{type(self).__name__} {self.id} {what} {self.state}>"


def decode_output(resp_headers: Any, content: bytes, listed: Mapping[str, Any]) -> np.ndarray:
    """An output's array from its raw download (the headers' dtype and shape,
    else the result listing's)."""
    dtype = str(resp_headers.get("x-kowloon-dtype") or listed.get("dtype"))
    if "x-kowloon-dtype" in resp_headers:
        shape = _wire.parse_shape_header(resp_headers.get("x-kowloon-shape"))
    else:
        shape = list(listed.get("shape") or [])
    return _wire.decode_raw(content, dtype, shape)


# What the two clients do differently, so that their methods are written
# once (tools/unasync.py makes client.py from aio.py, renaming the *_async
# helpers to these).
def gather(*results: Any) -> List[Any]:
    """The results of calls already made, in order (asyncio.gather's twin)."""
    return list(results)


async def gather_async(*aws: Any) -> List[Any]:
    """The results of the awaitables, run together, in order."""
    return list(await asyncio.gather(*aws))


def join_text(chunks: Iterator[str]) -> str:
    return "".join(chunks)


async def join_text_async(chunks: AsyncIterator[str]) -> str:
    return "".join([t async for t in chunks])
