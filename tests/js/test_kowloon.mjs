// test_kowloon.mjs — ui/kowloon.js in Node >= 18 (node --test) against a
// small scripted HTTP server: the SSE parser, events over fetch with
// reconnection by Last-Event-ID, the fallback to polling where the gateway
// has no event stream, paging, errors, .npy inputs, and the key kept out of
// every URL. tests/integration/clients/test_ui.py runs it, and live.mjs against the
// real stack.
import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";

import { Kowloon, KowloonError, SSEParser, npyToTensor, rawValues, tensorValues } from "../../ui/kowloon.js";

const KEY = "kl_test_key_0123456789";

/** A server answering with handler(req, res, body); returns {base, requests, close}. */
async function serve(handler) {
  const requests = [];
  const srv = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      requests.push({ method: req.method, url: req.url, headers: req.headers, body });
      handler(req, res, body);
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    base: `http://127.0.0.1:${srv.address().port}`,
    requests,
    close: () => new Promise((r) => { srv.closeAllConnections?.(); srv.close(r); }),
  };
}

const json = (res, status, obj) => {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(obj));
};

test("the SSE parser takes events split anywhere, CRLF, comments and multi-line data", () => {
  const got = [];
  const p = new SSEParser((e) => got.push(e));
  const text = ": hello\r\nid: 7\r\nevent: running\r\ndata: {\"a\":\r\n\r\nid: 8\nevent: progress\ndata: line1\ndata: line2\n\nretry: 2500\ndata: x\r\r\n";
  for (let i = 0; i < text.length; i += 3) p.feed(text.slice(i, i + 3));
  assert.deepEqual(got, [
    { id: "7", event: "running", data: '{"a":' },
    { id: "8", event: "progress", data: "line1\nline2" },
    { id: "8", event: "message", data: "x" },
  ]);
  assert.equal(p.retry, 2500);
  assert.equal(p.lastEventId, "8");
});

test("an event with no data is not dispatched, and an id keeps across events", () => {
  const got = [];
  const p = new SSEParser((e) => got.push(e));
  p.feed("id: 3\nevent: nothing\n\ndata: y\n\n");
  assert.deepEqual(got, [{ id: "3", event: "message", data: "y" }]);
});

test("requests carry the key in Authorization only, and errors become KowloonError", async (t) => {
  const s = await serve((req, res) => {
    if (req.url.startsWith("/v1/jobs/nope")) return json(res, 404, { error: { code: "not_found", message: "no such job" } });
    json(res, 422, { error: { code: "invalid_argument", message: "params.a is required", field: "params.a" } });
  });
  t.after(s.close);
  const kl = new Kowloon({ baseUrl: s.base + "/", apiKey: KEY });
  await assert.rejects(kl.getJob("nope"), (e) => e instanceof KowloonError && e.status === 404 && e.code === "not_found");
  await assert.rejects(kl.submitJob({ kernel: "saxpy" }), (e) => e.status === 422 && e.field === "params.a" && /params.a/.test(e.message));
  for (const r of s.requests) {
    assert.equal(r.headers.authorization, `Bearer ${KEY}`);
    assert.ok(!r.url.includes(KEY));
  }
  assert.equal(JSON.parse(s.requests[1].body).kernel, "saxpy");
  assert.equal(s.requests[1].headers["content-type"], "application/json");
});

test("iterJobs follows next_cursor to the last page, filters kept", async (t) => {
  const pages = { "": { jobs: [{ id: "a" }, { id: "b" }], next_cursor: "17" }, 17: { jobs: [{ id: "c" }], next_cursor: null } };
  const s = await serve((req, res) => {
    const u = new URL(req.url, "http://x");
    json(res, 200, pages[u.searchParams.get("cursor") || ""]);
  });
  t.after(s.close);
  const kl = new Kowloon({ baseUrl: s.base, apiKey: KEY });
  const ids = [];
  for await (const j of kl.iterJobs({ kernel: "gemm", label: "team:risk" })) ids.push(j.id);
  assert.deepEqual(ids, ["a", "b", "c"]);
  const u = new URL(s.requests[1].url, "http://x");
  assert.equal(u.searchParams.get("kernel"), "gemm");
  assert.equal(u.searchParams.get("label"), "team:risk");
  assert.equal(u.searchParams.get("cursor"), "17");
});

test("watchJob streams events, reconnects with Last-Event-ID, and ends with the job", async (t) => {
  let state = "queued";
  let streams = 0;
  const s = await serve((req, res) => {
    if (req.url === "/v1/jobs/j1") return json(res, 200, { id: "j1", state });
    if (req.url === "/v1/jobs/j1/events") {
      streams++;
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (streams === 1) {
        // the first connection drops after two events
        state = "running";
        res.write("retry: 50\nid: 1\nevent: running\ndata: {\"state\":\"running\"}\n\n");
        res.end("id: 2\nevent: progress\ndata: {\"fraction\":0.5,\"loss\":0.25}\n\n");
      } else {
        assert.equal(req.headers["last-event-id"], "2");
        state = "succeeded";
        res.write("id: 3\nevent: succeeded\ndata: {\"state\":\"succeeded\"}\n\n");
        // left open: the client closes it once the job has ended
      }
    }
  });
  t.after(s.close);
  const kl = new Kowloon({ baseUrl: s.base, apiKey: KEY });
  const events = [];
  const modes = [];
  const w = kl.watchJob("j1", { onEvent: (e) => events.push(e), onMode: (m) => modes.push(m) });
  const job = await w.done;
  assert.equal(job.state, "succeeded");
  assert.deepEqual(events.map((e) => [e.id, e.event]), [["1", "running"], ["2", "progress"], ["3", "succeeded"]]);
  assert.deepEqual(events[1].data, { fraction: 0.5, loss: 0.25 });
  assert.deepEqual(modes, ["sse"]);
  assert.equal(streams, 2);
  for (const r of s.requests) assert.ok(!r.url.includes(KEY));
});

test("watchJob polls the job where the events endpoint answers 404", async (t) => {
  const states = ["queued", "queued", "running", "running", "succeeded"];
  let gets = 0;
  const s = await serve((req, res) => {
    if (req.url === "/v1/jobs/j2/events") return json(res, 404, { error: { code: "not_found", message: "no route" } });
    if (req.url === "/v1/jobs/j2") {
      const st = states[Math.min(gets++, states.length - 1)];
      return json(res, 200, { id: "j2", state: st, progress: st === "running" ? { fraction: 0.5 } : null });
    }
  });
  t.after(s.close);
  const kl = new Kowloon({ baseUrl: s.base, apiKey: KEY, pollMs: 20 });
  const events = [];
  const seen = [];
  const modes = [];
  const w = kl.watchJob("j2", { onEvent: (e) => events.push(e.event), onJob: (j) => seen.push(j.state), onMode: (m) => modes.push(m) });
  const job = await w.done;
  assert.equal(job.state, "succeeded");
  assert.deepEqual(modes, ["poll"]);
  assert.deepEqual(seen, ["queued", "running", "succeeded"]);
  assert.deepEqual(events, ["running", "progress", "succeeded"]);
});

test("watchEvents falls back to polling the list and reports changed jobs", async (t) => {
  let n = 0;
  const s = await serve((req, res) => {
    if (req.url.startsWith("/v1/events")) return json(res, 404, { error: { code: "not_found", message: "no route" } });
    n++;
    const jobs = n < 3 ? [{ id: "x", state: "queued" }] : [{ id: "y", state: "queued" }, { id: "x", state: "running" }];
    json(res, 200, { jobs, next_cursor: null });
  });
  t.after(s.close);
  const kl = new Kowloon({ baseUrl: s.base, apiKey: KEY, pollMs: 20 });
  const got = [];
  const w = kl.watchEvents({ kernel: "sleep" }, { onEvent: (e) => got.push(`${e.data.id}:${e.event}`) });
  while (got.length < 2) await new Promise((r) => setTimeout(r, 10));
  w.close();
  await w.done;
  assert.deepEqual(got.sort(), ["x:running", "y:queued"]);
  assert.equal(new URL(s.requests[1].url, "http://x").searchParams.get("kernel"), "sleep");
});

test("npyToTensor reads float32, float64 and int32 .npy files; tensorValues reads both encodings", () => {
  const npy = (descr, shape, bytes) => {
    let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
    while ((10 + h.length + 1) % 64) h += " ";
    h += "\n";
    const out = new Uint8Array(10 + h.length + bytes.length);
    out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, h.length & 255, h.length >> 8]);
    out.set(new TextEncoder().encode(h), 10);
    out.set(bytes, 10 + h.length);
    return out;
  };
  const f32 = new Uint8Array(new Float32Array([1, 2.5, -3, 4]).buffer);
  const t1 = npyToTensor(npy("<f4", "(2, 2)", f32));
  assert.deepEqual([t1.dtype, t1.shape], ["float32", [2, 2]]);
  assert.deepEqual(tensorValues(t1), [1, 2.5, -3, 4]);
  const t2 = npyToTensor(npy("<i4", "(3,)", new Uint8Array(new Int32Array([7, -8, 9]).buffer)));
  assert.deepEqual([t2.dtype, t2.shape, tensorValues(t2)], ["int32", [3], [7, -8, 9]]);
  const t3 = npyToTensor(npy("<f8", "()", new Uint8Array(new Float64Array([0.1]).buffer)));
  assert.deepEqual([t3.dtype, t3.shape, tensorValues(t3)], ["float64", [], [0.1]]);
  assert.throws(() => npyToTensor(npy(">f4", "(1,)", new Uint8Array(4))), /dtype/);
  assert.throws(() => npyToTensor(npy("<f4", "(4,)", new Uint8Array(8))), /shorter/);
  assert.throws(() => npyToTensor(new Uint8Array(20)), /not a .npy/);
  assert.deepEqual(tensorValues({ dtype: "float32", data: [1, "NaN", "-Infinity"] }).map(String), ["1", "NaN", "-Infinity"]);
});

test("rawValues gives float32 bytes back as their shortest decimals, float64 and int32 as they are", () => {
  const f32 = new Float32Array([0.1, -3.4028234663852886e38, 1e-45, 0, -0, 16777217, Infinity, NaN, 2.5]);
  const got = rawValues(f32.buffer, "float32");
  assert.deepEqual(got.slice(0, 6), [0.1, -3.4028235e38, 1e-45, 0, -0, 16777216]);
  assert.equal(got[6], Infinity);
  assert.ok(Number.isNaN(got[7]));
  assert.equal(got[8], 2.5);
  for (let i = 0; i < got.length; i++) if (!Number.isNaN(got[i])) assert.equal(Math.fround(got[i]), f32[i]);
  assert.deepEqual(rawValues(new Float64Array([0.1, 1 / 3]).buffer, "float64"), [0.1, 1 / 3]);
  assert.deepEqual(rawValues(new Int32Array([-7, 2147483647]).buffer, "int32"), [-7, 2147483647]);
});
