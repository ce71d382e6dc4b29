// live.mjs — ui/kowloon.js against a real gateway (tests/integration/clients/test_ui.py
// starts the stack and passes KOWLOON_URL and KOWLOON_KEY): submit, watch a
// job to its end (events or polling, whichever the gateway offers), result,
// an output as .npy, paging, kernels, nodes, cancel, errors. Exits non-zero
// on the first failed check.
import assert from "node:assert/strict";

import { Kowloon, KowloonError, tensorValues } from "../../ui/kowloon.js";

const kl = new Kowloon({ baseUrl: process.env.KOWLOON_URL, apiKey: process.env.KOWLOON_KEY, pollMs: 200 });
const tag = `js-${Date.now()}`;

const kernels = await kl.kernels();
assert.ok(kernels.some((k) => k.name === "saxpy"));
assert.ok((await kl.nodes()).length >= 1);

const job = await kl.submitJob({
  kernel: "saxpy", params: { a: 2 }, labels: { suite: tag },
  inputs: { x: { dtype: "float32", shape: [3], data: [1, 2, 3] }, y: { dtype: "float32", shape: [3], data: [4, 5, 6] } },
});
assert.equal(job.state, "queued");
const states = [];
let mode = null;
const w = kl.watchJob(job.id, { onJob: (j) => states.push(j.state), onMode: (m) => { mode = m; } });
const ended = await w.done;
assert.equal(ended.state, "succeeded", JSON.stringify(ended));
assert.equal(states.at(-1), "succeeded");

const res = await kl.getResult(job.id);
assert.deepEqual(tensorValues(res.outputs.y), [6, 9, 12]);
const b64 = await kl.getResult(job.id, { encoding: "b64" });
assert.deepEqual(tensorValues(b64.outputs.y), [6, 9, 12]);
const npy = await kl.getOutput(job.id, "y", { format: "npy" });
assert.equal(new Uint8Array(npy.bytes)[0], 0x93);
const raw = await kl.getOutput(job.id, "y");
assert.deepEqual(Array.from(new Float32Array(raw.bytes)), [6, 9, 12]);
assert.deepEqual([raw.dtype, raw.shape], ["float32", [3]]);
const info = await kl.getOutputInfo(job.id, "y");
assert.deepEqual([info.dtype, info.shape, info.size], ["float32", [3], 12]);

// paging: three more jobs, pages of two, every one seen once
for (let i = 0; i < 3; i++) await kl.submitJob({ kernel: "sleep", params: { seconds: 0 }, labels: { suite: tag } });
const ids = [];
for await (const j of kl.iterJobs({ label: `suite:${tag}`, limit: 2 })) ids.push(j.id);
assert.equal(ids.length, 4);
assert.equal(new Set(ids).size, 4);
assert.equal(ids.at(-1), job.id);

// cancel a long job; a finished one answers 409
const long = await kl.submitJob({ kernel: "sleep", params: { seconds: 30 }, labels: { suite: tag } });
await kl.cancelJob(long.id);
const cancelled = await kl.watchJob(long.id).done;
assert.equal(cancelled.state, "cancelled");
await assert.rejects(kl.cancelJob(job.id), (e) => e instanceof KowloonError && e.status === 409);
await assert.rejects(kl.submitJob({ kernel: "saxpy", params: {} }), (e) => e.status === 422 || e.status === 400);
await assert.rejects(new Kowloon({ baseUrl: process.env.KOWLOON_URL, apiKey: "kl_wrong" }).kernels(), (e) => e.status === 401);

console.log(JSON.stringify({ ok: true, mode, states }));
