// kowloon.js — a small client of the Kowloon API (v1) for browsers and
// Node >= 18, as an ES module with no dependencies: fetch() for requests,
// and Server-Sent Events read over fetch() streaming, because EventSource
// cannot send an Authorization header and a key must never go in a URL.
// Where the gateway has no event stream (404), watching falls back to
// polling the job or the list. The dashboard (ui/app.js) is built on it.
//
//   import { Kowloon } from "./kowloon.js";
//   const kl = new Kowloon({ baseUrl: "http://127.0.0.1:8080", apiKey: "kl_…" });
//   const job = await kl.submitJob({ kernel: "saxpy", params: { a: 2 }, inputs: {…} });
//   const w = kl.watchJob(job.id, { onJob: (j) => console.log(j.state) });
//   await w.done;   // resolves with the job once it has ended

export const TERMINAL = Object.freeze(["succeeded", "failed", "cancelled"]);
const DTYPE_BYTES = { float32: 4, float64: 8, int32: 4 };
const NPY_DESCR = { "<f4": "float32", "<f8": "float64", "<i4": "int32" };

/** An answer of the API outside 2xx: status, and the error's code, message
 * and field (the API's {"error": {...}} body) when it had one. */
export class KowloonError extends Error {
  constructor(status, body, fallback) {
    const e = (body && body.error) || {};
    super(e.message || fallback || `HTTP ${status}`);
    this.name = "KowloonError";
    this.status = status;
    this.code = e.code || null;
    this.field = e.field || null;
    this.body = body || null;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    if (signal && signal.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });

/** Parses the text/event-stream format (WHATWG HTML §9.2.6) fed in pieces
 * of any size; calls onEvent({id, event, data, retry}) for each complete
 * event. lastEventId keeps the last id seen, for a reconnection. */
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = "";
    this.lastEventId = "";
    this.retry = null;
    this._reset();
  }
  _reset() {
    this.data = [];
    this.event = "";
    this.hasData = false;
  }
  feed(text) {
    this.buf += text;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      // A lone \r at the end may be the first half of \r\n: wait for more.
      if (!m || (m[0] === "\r" && m.index === this.buf.length - 1)) break;
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      this._line(line);
    }
  }
  _line(line) {
    if (line === "") {
      if (this.hasData) {
        this.onEvent({ id: this.lastEventId, event: this.event || "message", data: this.data.join("\n") });
      }
      this._reset();
      return;
    }
    if (line[0] === ":") return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value[0] === " ") value = value.slice(1);
    if (field === "data") {
      this.data.push(value);
      this.hasData = true;
    } else if (field === "event") {
      this.event = value;
    } else if (field === "id") {
      if (!value.includes("\0")) this.lastEventId = value;
    } else if (field === "retry") {
      if (/^[0-9]+$/.test(value)) this.retry = Number(value);
    }
  }
}

function toBase64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/** A tensor for a job's inputs from a .npy file's bytes (ArrayBuffer or
 * Uint8Array): {dtype, shape, b64}. float32, float64 and int32, C order. */
export function npyToTensor(buffer) {
  const u8 = buffer instanceof Uint8Array ? buffer : new Uint8Array(buffer);
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];
  if (u8.length < 10 || magic.some((b, i) => u8[i] !== b)) throw new Error("not a .npy file");
  const major = u8[6];
  const dv = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  const hlen = major === 1 ? dv.getUint16(8, true) : dv.getUint32(8, true);
  const hstart = major === 1 ? 10 : 12;
  const header = new TextDecoder("latin1").decode(u8.subarray(hstart, hstart + hlen));
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const order = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !order || !shape) throw new Error("unreadable .npy header");
  const dtype = NPY_DESCR[descr[1]] || NPY_DESCR[descr[1].replace("|", "<")];
  if (!dtype) throw new Error(`.npy dtype ${descr[1]} is not float32, float64 or int32 (little-endian)`);
  if (order[1] === "True") throw new Error(".npy in Fortran order: save it C-contiguous");
  const dims = shape[1].split(",").map((s) => s.trim()).filter((s) => s !== "").map(Number);
  const count = dims.reduce((a, b) => a * b, 1);
  const data = u8.subarray(hstart + hlen, hstart + hlen + count * DTYPE_BYTES[dtype]);
  if (data.length !== count * DTYPE_BYTES[dtype]) throw new Error(".npy file is shorter than its shape");
  return { dtype, shape: dims, b64: toBase64(data) };
}

/** The numbers of an output's raw little-endian bytes (an ArrayBuffer) of
 * dtype float32, float64 or int32, as a flat array. */
export function rawValues(buffer, dtype) {
  if (dtype === "float64") return Array.from(new Float64Array(buffer));
  if (dtype === "int32") return Array.from(new Int32Array(buffer));
  // A float32 widened to a double prints all its binary digits
  // (0.1f: 0.10000000149011612); give back the shortest decimal that reads
  // as the same float32, as the API's JSON does (0.1).
  return Array.from(new Float32Array(buffer), (v) => {
    if (!Number.isFinite(v) || v === 0) return v;
    for (let p = 1; p < 9; p++) {
      const d = Number(v.toPrecision(p));
      if (Math.fround(d) === v) return d;
    }
    return v;
  });
}

/** The numbers of a tensor as the API returns it (data, or b64): a flat
 * array (non-finite values arrive as the strings "NaN", "Infinity"). */
export function tensorValues(t) {
  if (Array.isArray(t.data)) return t.data.map((v) => (typeof v === "string" ? Number(v) : v));
  if (typeof t.b64 === "string") {
    const bin = atob(t.b64);
    const u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    return rawValues(u8.buffer, t.dtype);
  }
  return [];
}

export class Kowloon {
  /** baseUrl: the gateway ("" for the page's own origin); apiKey: sent as
   * Authorization: Bearer, never in a URL; pollMs: the fallback's period. */
  constructor({ baseUrl = "", apiKey = null, fetch: fetchFn = null, pollMs = 1500 } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = apiKey;
    this.pollMs = pollMs;
    this._fetch = fetchFn || ((...a) => globalThis.fetch(...a));
  }

  _url(path, query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query || {})) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
    const qs = q.toString();
    return this.baseUrl + path + (qs ? `?${qs}` : "");
  }

  _headers(extra) {
    const h = { ...(extra || {}) };
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`;
    return h;
  }

  /** One request; the parsed JSON body of a 2xx, else a KowloonError. With
   * raw the Response itself is returned (any status). */
  async request(method, path, { query, body, headers, signal, raw } = {}) {
    const init = { method, headers: this._headers(headers), signal, credentials: "omit", redirect: "error" };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    const resp = await this._fetch(this._url(path, query), init);
    if (raw) return resp;
    const text = await resp.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (!resp.ok) throw new KowloonError(resp.status, json, text.slice(0, 200));
    return json;
  }

  // ---- jobs
  /** POST /v1/jobs. wait (s): Prefer: wait=N, the ended job when it ends in time. */
  submitJob(job, { wait, signal } = {}) {
    return this.request("POST", "/v1/jobs", { body: job, signal, headers: wait ? { Prefer: `wait=${wait}` } : {} });
  }
  getJob(id, { wait, signal } = {}) {
    return this.request("GET", `/v1/jobs/${encodeURIComponent(id)}`, { signal, headers: wait ? { Prefer: `wait=${wait}` } : {} });
  }
  /** One page: {jobs, next_cursor}. filters: state, kernel, label ("k:v"), limit, cursor. */
  listJobs(filters = {}, { signal } = {}) {
    return this.request("GET", "/v1/jobs", { query: filters, signal });
  }
  /** Every job matching filters, newest first, page after page. */
  async *iterJobs(filters = {}) {
    let cursor = filters.cursor;
    do {
      const page = await this.listJobs({ ...filters, cursor });
      yield* page.jobs;
      cursor = page.next_cursor;
    } while (cursor);
  }
  cancelJob(id) {
    return this.request("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`);
  }
  /** GET /v1/jobs/{id}/result: {id, outputs, info}; encoding json|b64|blob. */
  getResult(id, { encoding } = {}) {
    return this.request("GET", `/v1/jobs/${encodeURIComponent(id)}/result`, { query: { encoding } });
  }
  /** An output's bytes: {bytes: ArrayBuffer, dtype, shape, contentType};
   * format "npy" for a .npy file, else raw little-endian bytes. */
  async getOutput(id, name, { format } = {}) {
    const resp = await this._output("GET", id, name, format);
    return { ...outputMeta(resp), bytes: await resp.arrayBuffer() };
  }
  /** What an output is, without its bytes (HEAD): {dtype, shape, size}. */
  async getOutputInfo(id, name) {
    return outputMeta(await this._output("HEAD", id, name));
  }
  async _output(method, id, name, format) {
    const resp = await this.request(method, `/v1/jobs/${encodeURIComponent(id)}/outputs/${encodeURIComponent(name)}`, {
      query: { format }, raw: true,
    });
    if (!resp.ok) {
      let json = null;
      try { json = await resp.json(); } catch { json = null; }
      throw new KowloonError(resp.status, json);
    }
    return resp;
  }

  // ---- tasks
  /** GET /v1/jobs/{id}/logs: a task's log text so far, of gang part `part`
   * ("" while there is none yet). */
  async getLogs(id, { part = 0, signal } = {}) {
    const resp = await this.request("GET", `/v1/jobs/${encodeURIComponent(id)}/logs`, { query: { part }, signal, raw: true });
    if (resp.status === 404) {
      await this.getJob(id, { signal }); // a KowloonError when the job itself is not ours
      return "";
    }
    if (!resp.ok) throw await errorOf(resp);
    return resp.text();
  }

  /** Follows a task's log from its start until the job ends: onText(text)
   * as bytes arrive (UTF-8 decoded across chunks). Streams
   * GET /v1/jobs/{id}/logs?follow=1; a dropped stream is resumed with
   * Range from the bytes already had, so nothing is doubled or missed.
   * Returns {close(), done}; done resolves once the whole log was read. */
  followLogs(id, { part = 0, onText } = {}) {
    const ctl = new AbortController();
    const signal = ctl.signal;
    const path = `/v1/jobs/${encodeURIComponent(id)}/logs`;
    const dec = new TextDecoder();
    let offset = 0;
    const ended = async () => TERMINAL.includes((await this.getJob(id, { signal })).state);
    const read = async (follow) => {
      const headers = offset ? { Range: `bytes=${offset}-` } : {};
      const resp = await this.request("GET", path, { query: { part, follow: follow ? 1 : undefined }, headers, signal, raw: true });
      if (resp.status === 404 || resp.status === 416) {
        try { await resp.body?.cancel(); } catch { /* nothing to drop */ }
        return 0;
      }
      if (!resp.ok) throw await errorOf(resp);
      let skip = resp.status === 200 ? offset : 0; // a whole log where a range was asked
      let got = 0;
      const reader = resp.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        let chunk = value;
        if (skip) {
          const cut = Math.min(skip, chunk.length);
          skip -= cut;
          chunk = chunk.subarray(cut);
        }
        offset += chunk.length;
        got += chunk.length;
        const text = dec.decode(chunk, { stream: true });
        if (text && onText) onText(text);
      }
      return got;
    };
    const done = (async () => {
      let failures = 0;
      while (!signal.aborted) {
        let got = 0;
        try {
          got = await read(true);
          failures = 0;
        } catch (e) {
          if (signal.aborted) break;
          if (e instanceof KowloonError && e.status !== 429 && e.status < 500) throw e;
          failures++;
        }
        // the stream ended: the job did (read any tail once more), or the
        // connection was dropped, or there is no log yet
        try {
          if (await ended()) {
            await read(false);
            break;
          }
        } catch (e) {
          if (signal.aborted) break;
          if (e instanceof KowloonError && e.status === 404) throw e;
        }
        if (!got) await sleep(Math.min(500 * 2 ** failures, 5000), signal);
      }
      const tail = dec.decode();
      if (tail && onText) onText(tail);
    })();
    done.catch(() => {});
    return { close: () => ctl.abort(), done };
  }

  /** GET /v1/images: {allowed: [pattern], images: [{image, nodes}]}. */
  images() { return this.request("GET", "/v1/images"); }

  // ---- the rest
  async kernels() { return (await this.request("GET", "/v1/kernels")).kernels; }
  async nodes() { return (await this.request("GET", "/v1/nodes")).nodes; }
  /** GET /v1/usage, or null where the gateway has no such view (404). */
  async usage(query = {}) {
    try {
      return await this.request("GET", "/v1/usage", { query });
    } catch (e) {
      if (e instanceof KowloonError && (e.status === 404 || e.status === 405)) return null;
      throw e;
    }
  }

  /** GET /v1/stats/history: the caller's tenant's last `minutes` (1..1440,
   * default 60) as one bucket per minute, oldest first ({t, submitted,
   * started, finished, queued, running}), and the counts `now`; null
   * where the gateway has no such view (404). */
  async stats(minutes = 60) {
    try {
      return await this.request("GET", "/v1/stats/history", { query: { minutes } });
    } catch (e) {
      if (e instanceof KowloonError && (e.status === 404 || e.status === 405)) return null;
      throw e;
    }
  }

  // ---- events
  /** Reads one SSE stream over fetch until it ends, the signal aborts, or
   * it fails; onOpen() once it is open. Resolves "ended" | "aborted", or
   * "absent" on 404/405 (no such stream on this gateway); rejects with a
   * KowloonError on other statuses, a TypeError on network failures. */
  async _stream(path, query, parser, signal, onOpen) {
    const headers = { Accept: "text/event-stream" };
    if (parser.lastEventId) headers["Last-Event-ID"] = parser.lastEventId;
    let resp;
    try {
      resp = await this.request("GET", path, { query, headers, signal, raw: true });
    } catch (e) {
      if (signal && signal.aborted) return "aborted";
      throw e;
    }
    const ctype = resp.headers.get("Content-Type") || "";
    if (resp.status === 404 || resp.status === 405 || (resp.ok && !ctype.startsWith("text/event-stream"))) {
      try { await resp.body?.cancel(); } catch { /* nothing to drop */ }
      return "absent";
    }
    if (!resp.ok) {
      let json = null;
      try { json = await resp.json(); } catch { json = null; }
      throw new KowloonError(resp.status, json);
    }
    onOpen();
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.feed(dec.decode(value, { stream: true }));
      }
    } catch (e) {
      if (signal && signal.aborted) return "aborted";
      throw e;
    }
    return "ended";
  }

  /** Follows a stream, reconnecting with Last-Event-ID (after the stream's
   * retry, else 1 s; backing off up to 15 s while it fails), until stop()
   * or the signal. When the stream does not exist (never opened, 404) it
   * runs fallback() instead. onMode("sse" | "poll") says which is used. */
  async _follow(path, query, { onEvent, onMode, stop, signal, fallback }) {
    const parser = new SSEParser(onEvent);
    let opened = false;
    let failures = 0;
    const onOpen = () => {
      failures = 0;
      if (!opened && onMode) onMode("sse");
      opened = true;
    };
    while (!stop() && !(signal && signal.aborted)) {
      let how;
      try {
        how = await this._stream(path, query, parser, signal, onOpen);
      } catch (e) {
        if (e instanceof KowloonError && e.status !== 429 && e.status < 500) throw e;
        how = "error";
      }
      if (how === "absent" && !opened) {
        if (onMode) onMode("poll");
        return fallback();
      }
      if (how === "aborted") return undefined;
      failures++;
      await sleep(how === "ended" ? parser.retry ?? 1000 : Math.min(1000 * 2 ** failures, 15000), signal);
    }
    return undefined;
  }

  /** Watches one job until it ends. onJob(job) with the job whenever it
   * changes; onEvent({id, event, data}) for every event: the stream's
   * (state kinds, "progress" with data.fraction), or, when polling, one
   * made up for each change seen (event = the new state, or "progress").
   * Returns {close(), done}: done resolves with the ended job (or the last
   * one seen when closed). */
  watchJob(id, { onJob, onEvent, onMode } = {}) {
    const ctl = new AbortController();
    let last = null;
    const seen = (job) => {
      const changed = !last || JSON.stringify(job) !== JSON.stringify(last);
      last = job;
      if (changed && onJob) onJob(job);
      return job;
    };
    const ended = () => last && TERMINAL.includes(last.state);
    const refresh = async () => seen(await this.getJob(id, { signal: ctl.signal }));
    const poll = async () => {
      while (!ended() && !ctl.signal.aborted) {
        await sleep(this.pollMs, ctl.signal);
        if (ctl.signal.aborted) break;
        const before = last;
        try {
          await refresh();
        } catch (e) {
          if (e instanceof KowloonError && e.status === 404) throw e;
          continue; // a gateway restarting: poll on
        }
        madeUpEvents(before, last, onEvent);
      }
    };
    const done = (async () => {
      await refresh();
      if (ended()) return last;
      await this._follow(`/v1/jobs/${encodeURIComponent(id)}/events`, {}, {
        signal: ctl.signal, onMode, fallback: poll, stop: ended,
        onEvent: (ev) => {
          const data = parseData(ev.data);
          if (onEvent) onEvent({ ...ev, data });
          if (ev.event === "log") return; // a task's output: nothing of the job changed
          if (ev.event === "progress" && last && data && typeof data === "object") {
            seen({ ...last, progress: progressOf(data) });
          } else {
            // a state changed: the job object says the rest (node, times)
            refresh().then(() => { if (ended()) ctl.abort(); }, () => {});
          }
        },
      });
      return last;
    })();
    done.catch(() => {});
    return { close: () => ctl.abort(), done };
  }

  /** Watches the tenant's jobs: GET /v1/events (filters kernel, label,
   * state), else polls the first page of GET /v1/jobs with those filters.
   * onEvent({id, event, data}); with polling data is the job that changed.
   * Returns {close(), done}. */
  watchEvents(filters = {}, { onEvent, onMode } = {}) {
    const ctl = new AbortController();
    const poll = async () => {
      let known = null;
      while (!ctl.signal.aborted) {
        try {
          const page = await this.listJobs({ ...filters, limit: 100 }, { signal: ctl.signal });
          const now = new Map(page.jobs.map((j) => [j.id, j]));
          if (known) for (const j of page.jobs) madeUpEvents(known.get(j.id) || null, j, onEvent);
          known = now;
        } catch (e) {
          if (ctl.signal.aborted) break;
          if (e instanceof KowloonError && e.status !== 429 && e.status < 500) throw e;
        }
        await sleep(this.pollMs, ctl.signal);
      }
    };
    const done = this._follow("/v1/events", filters, {
      signal: ctl.signal, onMode, fallback: poll, stop: () => false,
      onEvent: (ev) => onEvent && onEvent({ ...ev, data: parseData(ev.data) }),
    });
    done.catch(() => {});
    return { close: () => ctl.abort(), done };
  }
}

/** dtype and shape from an output's X-Kowloon-* headers (no shape header:
 * a scalar), its size in bytes and content type. */
function outputMeta(resp) {
  const shape = resp.headers.get("X-Kowloon-Shape");
  const size = resp.headers.get("Content-Length");
  return {
    dtype: resp.headers.get("X-Kowloon-Dtype"),
    shape: shape ? shape.split(",").map(Number) : [],
    size: size === null ? null : Number(size),
    contentType: resp.headers.get("Content-Type"),
  };
}

/** The progress object of a progress event's data: the gateway's events
 * carry it as `progress` beside job_id, state, attempt…; a bare object is
 * the progress itself. */
export function progressOf(data) {
  return data && typeof data === "object" && data.job_id !== undefined && data.progress && typeof data.progress === "object"
    ? data.progress : data;
}

/** A KowloonError of a non-2xx Response, its JSON body read. */
async function errorOf(resp) {
  let json = null;
  try { json = await resp.json(); } catch { json = null; }
  return new KowloonError(resp.status, json);
}

function parseData(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The events a poll can infer between two sightings of a job. */
function madeUpEvents(before, after, onEvent) {
  if (!onEvent || !after) return;
  if (!before || before.state !== after.state) {
    onEvent({ id: null, event: after.state, data: after, polled: true });
  }
  const p = after.progress;
  if (p && JSON.stringify(p) !== JSON.stringify(before && before.progress)) {
    onEvent({ id: null, event: "progress", data: p, polled: true });
  }
}
