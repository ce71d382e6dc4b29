"""What the sync and async clients share and that does no I/O: tensors in
and out of their wire forms, splitting run()'s keywords into params and
inputs by the kernel catalog, and the Server-Sent Events parser."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from ._errors import KowloonError

#: the API's dtypes and their little-endian numpy forms
DTYPES: Dict[str, str] = {"float32": "<f4", "float64": "<f8", "int32": "<i4"}

#: largest tensor sent inline as base64; larger ones go as blobs
INLINE_MAX_BYTES = 64 * 1024

TERMINAL = ("succeeded", "failed", "cancelled")
STATES = ("queued", "running") + TERMINAL

#: job-envelope fields submit() takes as keywords of its own
ENVELOPE = ("priority", "timeout_s", "max_attempts", "resources", "labels")


def api_dtype(arr: np.ndarray) -> str:
    """The API dtype of a numpy array (float16 and float64 are kept apart:
    a float64 array is sent as float64, which only a kernel taking float64
    accepts; run() casts to the catalog's dtype first)."""
    for name, np_dt in DTYPES.items():
        if arr.dtype == np.dtype(np_dt).newbyteorder("="):
            return name
    raise KowloonError(f"dtype {arr.dtype} has no API form (float32, float64, int32)")


def prepare_array(value: Any, dtype: Optional[str], name: str) -> Tuple[np.ndarray, str]:
    """A C-contiguous little-endian array for input `name`, cast to `dtype`
    (the catalog's) when given. Casts that lose kind (float to int) are
    refused so that labels are not silently truncated."""
    arr = np.asarray(value)
    if dtype is None:
        dtype = api_dtype(arr) if arr.dtype != np.float16 else "float32"
    if dtype not in DTYPES:
        raise KowloonError(f"input {name}: unknown dtype {dtype}")
    target = np.dtype(DTYPES[dtype])
    if not np.can_cast(arr.dtype, target, casting="same_kind"):
        raise KowloonError(f"input {name}: cannot cast {arr.dtype} to {dtype} without changing kind")
    return np.ascontiguousarray(arr.astype(target, copy=False)), dtype


def blob_id(raw: bytes) -> str:
    """The content address the gateway gives these bytes."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def inline_tensor(arr: np.ndarray, dtype: str) -> Dict[str, Any]:
    return {"dtype": dtype, "shape": list(arr.shape),
            "b64": base64.b64encode(arr.tobytes()).decode("ascii")}


def blob_tensor(arr: np.ndarray, dtype: str, bid: str) -> Dict[str, Any]:
    return {"dtype": dtype, "shape": list(arr.shape), "blob": bid}


def decode_raw(raw: bytes, dtype: str, shape: List[int]) -> np.ndarray:
    """numpy array of an output's raw little-endian bytes; checks the size."""
    if dtype not in DTYPES:
        raise KowloonError(f"output has unknown dtype {dtype}")
    dt = np.dtype(DTYPES[dtype])
    n = int(np.prod(shape)) if shape else 1
    if len(raw) != n * dt.itemsize:
        raise KowloonError(f"output has {len(raw)} bytes; {dtype} {shape} needs {n * dt.itemsize}")
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()


def parse_shape_header(value: Optional[str]) -> List[int]:
    """X-Kowloon-Shape ("2048,2048"; absent for a scalar) as a list."""
    if not value:
        return []
    return [int(x) for x in value.split(",") if x.strip()]


def split_call(kernel: Mapping[str, Any], kwargs: Mapping[str, Any]
               ) -> Tuple[Dict[str, Any], Dict[str, Tuple[Any, Optional[str]]]]:
    """params and inputs of run()/submit() keywords by the catalog entry of
    the kernel: a name among its inputs is an input (value, dtype), one among
    its params a param. An unknown name raises before anything is sent."""
    inputs = {i["name"]: i.get("dtype") for i in kernel.get("inputs", [])}
    params = {p["name"] for p in kernel.get("params", [])}
    p_out: Dict[str, Any] = {}
    i_out: Dict[str, Tuple[Any, Optional[str]]] = {}
    for k, v in kwargs.items():
        if k in inputs:
            i_out[k] = (v, inputs[k])
        elif k in params:
            p_out[k] = v.item() if isinstance(v, np.generic) else v
        else:
            known = ", ".join(sorted(inputs) + sorted(params)) or "none"
            raise KowloonError(f"{kernel.get('name')} has no input or param {k!r} (it has: {known})")
    return p_out, i_out


# ------------------------------------------------------------------ SSE

@dataclass
class Event:
    """One Server-Sent Event: ``event`` (type, "message" by default), ``data``
    (parsed JSON when it is JSON, else the text), ``id`` (the durable event id
    or None), and ``job`` — for events observed without an SSE endpoint, the
    job object itself."""

    event: str = "message"
    data: Any = None
    id: Optional[str] = None
    job: Optional[Dict[str, Any]] = field(default=None, repr=False)

    @property
    def state(self) -> Optional[str]:
        """The job state this event carries, if any: ``state`` (or ``to``)
        of its data or of a ``job`` object inside it."""
        for src in (self.data, self.job):
            if not isinstance(src, dict):
                continue
            nested = src.get("job")
            for d in (src, nested if isinstance(nested, dict) else {}):
                for key in ("state", "to"):
                    if d.get(key) in STATES:
                        return str(d[key])
        return None

    @property
    def progress(self) -> Any:
        """The progress this event carries, if any."""
        if isinstance(self.data, dict):
            if "progress" in self.data:
                return self.data["progress"]
            if self.event == "progress":
                return self.data
        if self.job is not None:
            return self.job.get("progress")
        return None


class SSEParser:
    """Incremental parser of the text/event-stream format (WHATWG HTML
    "event stream interpretation"): feed it lines, get Events. Comments
    (":" lines) are ignored, ``id`` survives across events as the last event
    id, ``retry`` sets the reconnection delay."""

    def __init__(self) -> None:
        self.last_id: Optional[str] = None
        self.retry_ms: Optional[int] = None
        self._id_buf: Optional[str] = None
        self._event = ""
        self._data: List[str] = []

    def feed_line(self, line: str) -> Optional[Event]:
        """One line without its end of line; an Event when it ends one."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id_buf = value  # the last event id once this event is complete
        elif name == "retry":
            if value.isdigit():
                self.retry_ms = int(value)
        return None

    def reset(self) -> None:
        """Drops a half-received event (the connection ended inside it);
        the last event id and retry delay stay for the reconnection."""
        self._event, self._data = "", []
        self._id_buf = self.last_id

    def _dispatch(self) -> Optional[Event]:
        self.last_id = self._id_buf
        if not self._data:
            self._event = ""
            return None
        text = "\n".join(self._data)
        ev_type = self._event or "message"
        self._event, self._data = "", []
        data: Any = text
        try:
            data = json.loads(text)
        except ValueError:
            pass
        return Event(event=ev_type, data=data, id=self.last_id)


class LineSplitter:
    """Splits a text stream into lines on CRLF, LF or CR (the SSE rule),
    across chunk boundaries."""

    def __init__(self) -> None:
        self._buf = ""

    def feed(self, chunk: str) -> List[str]:
        buf, lines = self._buf + chunk, []
        while True:
            cands = [p for p in (buf.find("\r"), buf.find("\n")) if p >= 0]
            if not cands:
                break
            i = min(cands)
            if buf[i] == "\r" and i + 1 == len(buf):
                break  # a CR at the end may be the first half of a CRLF
            line, rest = buf[:i], buf[i + 1:]
            if buf[i] == "\r" and rest.startswith("\n"):
                rest = rest[1:]
            buf = rest
            lines.append(line)
        self._buf = buf
        return lines

    def close(self) -> List[str]:
        """The stream ended: a line it left unterminated (and a CR that
        ended it). An unterminated line is cut, so it is dropped, as the
        event stream rules drop an event the stream ended inside."""
        rest, self._buf = self._buf, ""
        return [""] if rest == "\r" else []


def iter_sse_lines(chunks: Iterator[str]) -> Iterator[str]:
    """Lines of a text stream (see LineSplitter)."""
    sp = LineSplitter()
    for chunk in chunks:
        yield from sp.feed(chunk)
    yield from sp.close()


async def aiter_sse_lines(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """Lines of an async text stream (see LineSplitter)."""
    sp = LineSplitter()
    async for chunk in chunks:
        for line in sp.feed(chunk):
            yield line
    for line in sp.close():
        yield line


def progress_text(progress: Any) -> str:
    """A short human line of a job's progress object."""
    if progress is None:
        return ""
    if not isinstance(progress, dict):
        return str(progress)
    parts = []
    for k, v in progress.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        parts.append(f"{k}={v}")
    return " ".join(parts)


def progress_fraction(progress: Any) -> Optional[float]:
    """0..1 of a progress object when it says how far along it is: a
    ``fraction``/``percent`` member, or a done/total pair such as
    (epoch, epochs), (step, steps), (paths_done, paths), (iteration, iterations)."""
    if not isinstance(progress, dict):
        return None
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if num(progress.get("fraction")):
        return max(0.0, min(1.0, float(progress["fraction"])))
    if num(progress.get("percent")):
        return max(0.0, min(1.0, float(progress["percent"]) / 100.0))
    pairs = [("done", "total"), ("epoch", "epochs"), ("step", "steps"),
             ("paths_done", "paths"), ("iteration", "iterations"), ("current", "total")]
    for a, b in pairs:
        if num(progress.get(a)) and num(progress.get(b)) and progress[b] > 0:
            return max(0.0, min(1.0, float(progress[a]) / float(progress[b])))
    return None
