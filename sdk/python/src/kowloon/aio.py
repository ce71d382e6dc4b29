"""The asyncio client: AsyncClient, AsyncJob and the job listing, on
httpx.AsyncClient. The same API as kowloon.Client, with coroutines and
async iterators."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import (Any, AsyncIterator, Awaitable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import httpx
import numpy as np

from . import _wire
from ._base import (Config, JobView, LabelFilter, LogCursor, RetryPolicy, build_submit,
                    build_task_submit, decode_output, gather_async, join_text_async,
                    label_query, new_idempotency_key, output_path, usage_query, wait_chunk)
from ._errors import (JobFailedError, KowloonError, NotFoundError, NotOfferedError,
                      TransportError, WaitTimeout, error_from_response)

log = logging.getLogger("kowloon")


class AsyncClient:
    """A Kowloon gateway, as one API key.

    ``url`` and ``api_key`` default to ``KOWLOON_URL`` and
    ``KOWLOON_API_KEY``. ``timeout`` bounds each request (waits get their
    own). 429 and 503 are retried after ``Retry-After`` and requests that got
    no answer after a back-off, for at most ``max_retry_s`` seconds in all
    (or as ``retry`` says). ``transport`` is an httpx transport (tests).

    >>> c = AsyncClient("http://127.0.0.1:8080", "kl_…")
    >>> await c.run("gemm", a=A, b=B, alpha=2.0)["c"]
    """

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, *,
                 timeout: float = 30.0, max_retry_s: Optional[float] = None,
                 retry: Optional[RetryPolicy] = None,
                 transport: Optional[httpx.AsyncBaseTransport] = None):
        self._cfg = Config(url, api_key, timeout, retry, max_retry_s)
        self._http = httpx.AsyncClient(base_url=self._cfg.url, headers=self._cfg.headers,
                                  timeout=timeout, transport=transport)
        self._catalog: Optional[Dict[str, Dict[str, Any]]] = None
        self.jobs = AsyncJobs(self)

    @property
    def url(self) -> str:
        return self._cfg.url

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ------------------------------------------------------------ transport

    async def _send(self, method: str, path: str, *, ok: Tuple[int, ...] = (), retry_no_answer: bool = True,
              **kw: Any) -> httpx.Response:
        """One logical request with retries; raises the typed ApiError for an
        error status not in ``ok``."""
        policy, started, attempt = self._cfg.retry, time.monotonic(), 0
        while True:
            attempt += 1
            try:
                resp = await self._http.request(method, path, **kw)
            except httpx.TransportError as e:
                d = policy.delay(attempt, started, None) if retry_no_answer else None
                if d is None:
                    raise TransportError(f"{method} {path}: {e!r}") from e
                log.info("kowloon: %s %s got no answer (%r); retry in %.2f s", method, path, e, d)
                await asyncio.sleep(d)
                continue
            if resp.status_code < 400 or resp.status_code in ok:
                return resp
            err = error_from_response(resp.status_code, resp.headers, resp.content)
            if resp.status_code in (429, 503):
                d = policy.delay(attempt, started, err.retry_after)
                if d is not None:
                    log.info("kowloon: %s %s -> %d %s; retry in %.2f s", method, path,
                             resp.status_code, err.code, d)
                    await asyncio.sleep(d)
                    continue
            raise err

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        """Any API call (``path`` like ``/v1/tenants``; httpx keywords such as
        ``json=`` or ``params=``) with the client's key and retries; the
        parsed JSON answer (None when empty). For admin calls and anything
        the SDK has no method for."""
        resp = await self._send(method, path, **kw)
        return resp.json() if resp.content else None

    # ------------------------------------------------------------ catalog

    async def kernels(self, refresh: bool = False) -> List[Dict[str, Any]]:
        """The kernel catalog (``GET /v1/kernels``): each kernel's params,
        inputs, outputs and backends. Cached; ``refresh=True`` asks again."""
        if self._catalog is None or refresh:
            body = await self.request("GET", "/v1/kernels")
            self._catalog = {k["name"]: k for k in body["kernels"]}
        return list(self._catalog.values())

    async def kernel(self, name: str) -> Dict[str, Any]:
        """One kernel's catalog entry (the catalog is asked again once for a
        name it did not have)."""
        if self._catalog is None or name not in self._catalog:
            await self.kernels(refresh=True)
        assert self._catalog is not None
        if name not in self._catalog:
            raise KowloonError(f"unknown kernel {name!r}; the gateway offers "
                               f"{', '.join(sorted(self._catalog))}")
        return self._catalog[name]

    async def nodes(self) -> List[Dict[str, Any]]:
        """The compute nodes (``GET /v1/nodes``)."""
        return (await self.request("GET", "/v1/nodes"))["nodes"]

    async def usage(self, from_: Any = None, to: Any = None, group_by: Optional[str] = None,
              tenant: Optional[str] = None, **query: Any) -> Dict[str, Any]:
        """Usage and cost of the caller's tenant (``GET /v1/usage``): jobs
        that ended in [``from_``, ``to``) (dates, datetimes, or RFC 3339 /
        ``YYYY-MM-DD`` strings; default the last 30 days, at most 366),
        summed in ``totals`` and, with ``group_by`` (``kernel``, ``day`` or
        ``label:KEY``), per group in ``groups``; ``currency`` names the
        unit of ``cost``. ``tenant`` (admin keys only) asks for another
        tenant. Raises NotOfferedError where the gateway has no usage
        endpoint."""
        q = usage_query(from_, to, group_by, dict(query, tenant=tenant))
        try:
            return await self.request("GET", "/v1/usage", params=q)
        except NotOfferedError:
            raise
        except NotFoundError as e:
            if e.field is not None:   # a resource of the query (tenant=), not the route
                raise
            raise NotOfferedError(404, "not_offered",
                                  "this gateway does not offer GET /v1/usage", None, e.body) from e

    # ------------------------------------------------------------ blobs

    async def upload(self, raw: bytes, blob_id: Optional[str] = None) -> str:
        """Makes sure the gateway holds these bytes for this tenant; returns
        the blob id. ``HEAD`` first: bytes already there are not sent."""
        bid = blob_id or _wire.blob_id(raw)
        if (await self._send("HEAD", f"/v1/blobs/{bid}", ok=(404,))).status_code == 200:
            log.debug("kowloon: blob %s already there", bid)
            return bid
        body = (await self._send("POST", "/v1/blobs", content=raw,
                          headers={"Content-Type": "application/octet-stream"})).json()
        if body.get("id") != bid:
            raise KowloonError(f"gateway stored blob {body.get('id')}, expected {bid}")
        log.debug("kowloon: uploaded blob %s (%d bytes)", bid, len(raw))
        return bid

    # ------------------------------------------------------------ jobs

    async def submit(self, kernel: str, *, params: Optional[Mapping[str, Any]] = None,
               inputs: Optional[Mapping[str, Any]] = None, priority: Optional[int] = None,
               timeout_s: Optional[int] = None, max_attempts: Optional[int] = None,
               resources: Optional[Mapping[str, Any]] = None,
               labels: Optional[Mapping[str, str]] = None, **kwargs: Any) -> "AsyncJob":
        """Submits a job; returns it queued.

        Keywords name the kernel's inputs (numpy arrays, cast to the
        catalog's dtype) and params, as ``GET /v1/kernels`` lists them;
        ``params=``/``inputs=`` dicts work too. Inputs up to 64 KiB go inline,
        larger ones as blobs (uploaded only when the gateway lacks them).
        One ``Idempotency-Key`` per call, the same on its retries."""
        body, uploads = build_submit(await self.kernel(kernel), kwargs, params, inputs,
                                     {"priority": priority, "timeout_s": timeout_s,
                                      "max_attempts": max_attempts, "resources": resources,
                                      "labels": labels})
        for u in uploads:
            await self.upload(u.raw, u.blob_id)
        resp = await self._send("POST", "/v1/jobs", json=body,
                          headers={"Idempotency-Key": new_idempotency_key()})
        return AsyncJob(self, resp.json())

    async def submit_task(self, image: str, command: Union[str, Sequence[str]], *,
                          env: Optional[Mapping[str, str]] = None,
                          files: Optional[Mapping[str, Any]] = None,
                          inputs: Optional[Mapping[str, Any]] = None,
                          input_format: Union[str, Mapping[str, str]] = "raw",
                          workdir: Optional[str] = None, network: Optional[str] = None,
                          output_quota_mb: Optional[int] = None,
                          resources: Optional[Mapping[str, Any]] = None,
                          priority: Optional[int] = None, timeout_s: Optional[int] = None,
                          max_attempts: Optional[int] = None,
                          labels: Optional[Mapping[str, str]] = None) -> "AsyncJob":
        """Submits a task (your program in a container image); returns it
        queued.

        ``command`` is the argv (a string is split as a shell would, without
        running one); ``files`` maps paths under ``/kowloon/work`` to str
        (text) or bytes (large ones go as blobs); ``inputs`` maps names to
        numpy arrays (mounted read-only at ``/kowloon/in/NAME``, raw bytes,
        or ``NAME.npy`` with ``input_format="npy"``) or bytes. ``resources``
        as for kernels plus ``memory_gb`` and ``cpus`` per node; ``nodes``
        > 1 runs a gang (torchrun-style environment)."""
        body, uploads = build_task_submit(
            image, command, env=env, files=files, inputs=inputs, input_format=input_format,
            workdir=workdir, network=network, output_quota_mb=output_quota_mb,
            envelope={"priority": priority, "timeout_s": timeout_s,
                      "max_attempts": max_attempts, "resources": resources, "labels": labels})
        for u in uploads:
            await self.upload(u.raw, u.blob_id)
        resp = await self._send("POST", "/v1/jobs", json=body,
                                headers={"Idempotency-Key": new_idempotency_key()})
        return AsyncJob(self, resp.json())

    async def list_images(self) -> Dict[str, Any]:
        """What tasks may run (``GET /v1/images``): ``allowed``, the image
        patterns this tenant may use, and ``images``, the images the nodes
        have that match (``{"image", "nodes"}``)."""
        return await self.request("GET", "/v1/images")

    async def run(self, kernel: str, *, timeout: Optional[float] = None, **kwargs: Any
            ) -> Dict[str, np.ndarray]:
        """Submits, waits and returns the outputs as numpy arrays by name.
        Raises JobFailedError when the job fails or is cancelled and
        WaitTimeout after ``timeout`` seconds (None: no limit)."""
        return await (await self.submit(kernel, **kwargs)).result(timeout=timeout)

    async def job(self, job_id: str) -> "AsyncJob":
        """The job with this id (``GET /v1/jobs/{id}``)."""
        return AsyncJob(self, await self.request("GET", f"/v1/jobs/{job_id}"))


class AsyncJobs:
    """``client.jobs``: the tenant's jobs."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def get(self, job_id: str) -> "AsyncJob":
        return await self._c.job(job_id)

    async def list(self, state: Optional[str] = None, kernel: Optional[str] = None,
             label: LabelFilter = None, page_size: int = 100) -> AsyncIterator["AsyncJob"]:
        """Newest first, lazily: a page (``page_size`` jobs) is fetched when
        the previous one is used up, following ``next_cursor``."""
        q: Dict[str, Any] = {"limit": page_size}
        for k, v in (("state", state), ("kernel", kernel), ("label", label_query(label))):
            if v is not None:
                q[k] = v
        while True:
            body = await self._c.request("GET", "/v1/jobs", params=q)
            for j in body["jobs"]:
                yield AsyncJob(self._c, j)
            if not body.get("next_cursor"):
                return
            q["cursor"] = body["next_cursor"]


class AsyncJob(JobView):
    """A submitted job. ``state``, ``progress`` and ``data`` are as last
    seen; ``refresh()``, ``wait()`` and ``events()`` bring them up to date."""

    def __init__(self, client: AsyncClient, data: Dict[str, Any]):
        self._c = client
        self._data = data
        self._outputs: Optional[Dict[str, np.ndarray]] = None

    async def refresh(self) -> "AsyncJob":
        """Reads the job again; returns self."""
        self._data = await self._c.request("GET", f"/v1/jobs/{self.id}")
        return self

    async def _wait_once(self, n: int) -> None:
        t0 = time.monotonic()
        resp = await self._c._send("GET", f"/v1/jobs/{self.id}", headers={"Prefer": f"wait={n}"},
                             timeout=httpx.Timeout(self._c._cfg.timeout, read=n + 30.0))
        self._data = resp.json()
        if (not self.done and "preference-applied" not in resp.headers
                and time.monotonic() - t0 < 0.5):
            await asyncio.sleep(0.5)  # a gateway without Prefer: wait must not be hammered

    async def wait(self, timeout: Optional[float] = None) -> "AsyncJob":
        """Returns once the job has ended (self, state terminal), without
        polling: ``GET /v1/jobs/{id}`` with ``Prefer: wait=N`` in chunks of
        at most 60 s, which the gateway answers as soon as the job ends.
        Raises WaitTimeout after ``timeout`` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done:
            n = wait_chunk(deadline)
            if n == 0:
                raise WaitTimeout(self._data, timeout or 0.0)
            await self._wait_once(n)
        return self

    async def cancel(self) -> "AsyncJob":
        """Asks the gateway to cancel (a queued job ends at once, a running
        one at its kernel's next check); returns self with the answer. A
        finished job raises ConflictError."""
        self._data = await self._c.request("POST", f"/v1/jobs/{self.id}/cancel")
        return self

    async def result(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The outputs by name, waiting for the job first: a kernel's as
        numpy arrays, a task's files as bytes (names are their paths under
        /kowloon/out; ``np.load(io.BytesIO(b))`` reads a ``.npy``). Each
        output is downloaded raw (``GET /v1/jobs/{id}/outputs/{name}``), the
        asyncio client's all at once. Raises JobFailedError when the job
        failed or was cancelled."""
        if self._outputs is not None:
            return dict(self._outputs)
        await self.wait(timeout)
        if self.state != "succeeded":
            raise JobFailedError(self._data)
        listing = await self._c.request("GET", f"/v1/jobs/{self.id}/result",
                                  params={"encoding": "blob"})
        names = list(listing["outputs"])
        resps = await gather_async(*(self._c._send("GET", output_path(self.id, n))
                                     for n in names))
        out = {n: (r.content if self.kind == "task"
                   else decode_output(r.headers, r.content, listing["outputs"][n]))
               for n, r in zip(names, resps)}
        self._outputs = out
        return dict(out)

    async def output(self, name: str) -> bytes:
        """One output's bytes as stored (a task's file, a kernel's raw
        tensor), without waiting."""
        return (await self._c._send("GET", output_path(self.id, name))).content

    def logs(self, follow: bool = False, part: int = 0
             ) -> Union[Awaitable[str], AsyncIterator[str]]:
        """A task's log (stdout and stderr as they came) of gang part
        ``part``: the text so far (``""`` before there is any), or with
        ``follow=True`` an iterator of text as it arrives, ending when the
        job ends. A dropped stream is resumed where it stopped (Range). In
        the asyncio client the text so far is awaited and the iterator is
        an async one."""
        chunks = self._log_chunks(LogCursor(self.id, part, follow))
        return chunks if follow else join_text_async(chunks)

    async def _log_chunks(self, cur: LogCursor) -> AsyncIterator[str]:
        failures = 0
        while True:
            q, h = cur.request()
            got = 0
            try:
                async with self._c._http.stream("GET", cur.path, params=q, headers=h,
                                                timeout=httpx.Timeout(self._c._cfg.timeout,
                                                                      read=60.0)) as resp:
                    if resp.status_code in (404, 416):
                        await resp.aread()
                        if resp.status_code == 404:
                            await self.refresh()
                    elif resp.status_code >= 400:
                        await resp.aread()
                        raise error_from_response(resp.status_code, resp.headers, resp.content)
                    elif cur.start(resp.status_code):
                        async for chunk in resp.aiter_bytes():
                            got += len(chunk)
                            text = cur.feed(chunk)
                            if text:
                                yield text
            except httpx.TransportError as e:
                failures += 1
                if failures > 20:
                    raise TransportError(f"log stream of {self.id} keeps failing: {e!r}") from e
                log.info("kowloon: log stream of %s dropped (%r); resuming", self.id, e)
                await asyncio.sleep(min(5.0, 0.2 * failures))
                continue
            step = cur.after_stream(got, (await self.refresh()).done if cur.follow else None)
            if step == "stop":
                break
            if step == "wait":
                await self._wait_once(1)
        tail = cur.end()
        if tail:
            yield tail

    async def events(self, last_event_id: Optional[str] = None,
               fallback_wait_s: int = 2) -> AsyncIterator[_wire.Event]:
        """The job's events as they happen, until its terminal state.

        Reads Server-Sent Events from ``GET /v1/jobs/{id}/events``; a dropped
        connection is resumed with ``Last-Event-ID`` (no gap, no repeat).
        Where the gateway has no events endpoint (404 while the job exists),
        yields instead each change of state or progress it observes through
        ``Prefer: wait`` requests of ``fallback_wait_s`` seconds: such events
        carry the whole job in ``job``, no ``id``, and may miss a state the
        job passed through quickly."""
        parser = _wire.SSEParser()
        parser.last_id = last_event_id
        failures = 0
        path = f"/v1/jobs/{self.id}/events"
        while True:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
            if parser.last_id:
                headers["Last-Event-ID"] = parser.last_id
            got = 0
            parser.reset()
            try:
                async with self._c._http.stream("GET", path, headers=headers,
                                          timeout=httpx.Timeout(self._c._cfg.timeout,
                                                                read=45.0)) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        err = error_from_response(resp.status_code, resp.headers, resp.content)
                        if resp.status_code == 404:
                            await self.refresh()  # NotFoundError when the job itself is gone
                            async for wev in self._events_by_wait(fallback_wait_s):
                                yield wev
                            return
                        if resp.status_code in (429, 503) and failures < 20:
                            failures += 1
                            await asyncio.sleep(err.retry_after if err.retry_after is not None else 1.0)
                            continue
                        raise err
                    async for line in _wire.aiter_sse_lines(resp.aiter_text()):
                        ev = parser.feed_line(line)
                        if ev is None:
                            continue
                        got += 1
                        failures = 0
                        self._absorb_event(ev)
                        yield ev
                        if ev.state in _wire.TERMINAL:
                            return
            except httpx.TransportError as e:
                log.info("kowloon: event stream of %s dropped (%r); resuming", self.id, e)
            failures += 1
            if got == 0:
                if (await self.refresh()).done:
                    return
                if failures > 20:
                    raise TransportError(f"event stream of {self.id} keeps failing")
            await asyncio.sleep((parser.retry_ms or 1000) / 1000.0 if got == 0 else 0.0)

    async def _events_by_wait(self, chunk_s: int) -> AsyncIterator[_wire.Event]:
        last = None
        while True:
            seen = (self.state, repr(self.progress))
            if seen != last:
                last = seen
                yield _wire.Event(event="state", data={"state": self.state,
                                                       "progress": self.progress},
                                  job=self._data)
            if self.done:
                return
            await self._wait_once(max(1, min(60, chunk_s)))
