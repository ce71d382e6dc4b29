// app.js — the Kowloon dashboard: sign-in, jobs (live), a job's detail,
// nodes, the queue's last hour, usage and a submit form generated from the
// kernel catalog, routed by the URL's hash. Every piece of data reaches the page as text
// (textContent, never innerHTML), and the API key lives in sessionStorage
// and goes only to this page's own origin, in the Authorization header.
import { Kowloon, KowloonError, TERMINAL, npyToTensor, progressOf, rawValues } from "./kowloon.js";

const KEY_SLOT = "kowloon.key";
const PAGE_SIZE = 25;
const SMALL_TENSOR = 64; // elements: shown as a table, else only downloadable
const CHART_MAX = 100000; // elements of a loss output fetched to be plotted
const CHART_URL = "vendor/chart.js/chart.min.js";
const LOG_MAX = 1 << 20; // characters of a task's log the pane keeps (the newest)
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const live = document.getElementById("live");
let kl = null;
let kernelList = null; // GET /v1/kernels, once per sign-in
let pageCleanup = [];

// ---------------------------------------------------------------- helpers

/** An element with attributes and children; strings become text nodes,
 * so nothing given here is ever parsed as HTML. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function toast(msg) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 5000);
}

function errorText(e) {
  if (e instanceof KowloonError) return `${e.status} ${e.code || ""}: ${e.message}${e.field ? ` (${e.field})` : ""}`;
  return String(e && e.message ? e.message : e);
}

const stateBadge = (s) => h("span", { class: `state state-${s}`, dataset: { state: s } }, s);

function seconds(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "—";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${(s / 3600).toFixed(1)} h`;
}

const since = (a, b) => (a ? ((b ? Date.parse(b) : Date.now()) - Date.parse(a)) / 1000 : null);

/** Queue wait and run time: the job's usage when the gateway reports it,
 * else from its timestamps (still counting while it waits or runs). */
function times(j) {
  const u = j.usage || {};
  return {
    wait: u.queue_wait_s ?? (j.created_at ? since(j.created_at, j.started_at || (j.state === "queued" ? null : j.finished_at)) : null),
    run: u.run_s ?? (j.started_at ? since(j.started_at, j.finished_at) : null),
    cost: u.cost ?? null,
  };
}

function bytes(n) {
  if (n === null || n === undefined) return "—";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

/** A bound of the catalog: float32's ±3.4028234663852886e+38 as 3.40e+38. */
function bound(x) {
  return Math.abs(x) >= 1e6 ? Number(x).toPrecision(3) : String(x);
}

function fmt(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function table(headers, rows, attrs) {
  return h("div", { class: "table-wrap" },
    h("table", attrs || {},
      h("thead", {}, h("tr", {}, headers.map((c) => (c instanceof Node ? c : h("th", { scope: "col" }, c))))),
      h("tbody", {}, rows)));
}

function props(pairs) {
  return h("dl", { class: "props" }, pairs.filter((p) => p).map(([k, v, id]) => [h("dt", {}, k), h("dd", id ? { id } : {}, v)]));
}

function setPage(title, ...content) {
  main.replaceChildren(...content.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  document.title = title ? `${title} — Kowloon` : "Kowloon";
}

function setLive(mode) {
  live.textContent = mode === "sse" ? "● live (events)" : mode === "poll" ? "● live (polling)" : "";
  live.dataset.mode = mode || "";
}

function onLeave(fn) {
  pageCleanup.push(fn);
}

// Chart.js is loaded the first time a chart is wanted, if the gateway has
// it (--chartjs-dir); without it every chart is a table.
let chartLoad = null;
function loadChart() {
  if (!chartLoad) {
    chartLoad = fetch(CHART_URL, { method: "HEAD", credentials: "omit" })
      .then((r) => (r.ok ? new Promise((resolve) => {
        const s = document.createElement("script");
        s.src = CHART_URL;
        s.onload = () => resolve(window.Chart || null);
        s.onerror = () => resolve(null);
        document.head.append(s);
      }) : null))
      .catch(() => null);
  }
  return chartLoad;
}

// ---------------------------------------------------------------- sign-in

function signinPage(reason) {
  nav.hidden = true;
  setLive(null);
  const input = h("input", { id: "apikey", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const msg = h("p", { class: "error", id: "signin-error", role: "alert" }, reason || "");
  const form = h("form", { class: "card signin", id: "signin" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Your API key is kept in this tab only (sessionStorage) and sent only to this gateway."),
    h("label", { for: "apikey" }, "API key", input),
    h("p", {}, h("button", { type: "submit" }, "Sign in")),
    msg);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    const probe = new Kowloon({ apiKey: key });
    try {
      await probe.kernels();
    } catch (e) {
      msg.textContent = e instanceof KowloonError && e.status === 401 ? "That key was not accepted." : errorText(e);
      return;
    }
    sessionStorage.setItem(KEY_SLOT, key);
    kl = probe;
    kernelList = null;
    if (!location.hash || location.hash.startsWith("#/signin")) location.hash = "#/jobs";
    else route();
  });
  setPage("Sign in", form);
  input.focus();
}

function catalog() {
  if (!kernelList) kernelList = kl.kernels().catch((e) => { kernelList = null; throw e; });
  return kernelList;
}

function signOut() {
  sessionStorage.removeItem(KEY_SLOT);
  kl = null;
  kernelList = null;
  location.hash = "#/signin";
}

// ---------------------------------------------------------------- jobs

function parseQuery(q) {
  const o = {};
  for (const [k, v] of new URLSearchParams(q || "")) o[k] = v;
  return o;
}

function jobsHash(f) {
  const q = new URLSearchParams();
  for (const k of ["state", "kernel", "label", "limit", "cursor"]) if (f[k]) q.set(k, f[k]);
  const s = q.toString();
  return `#/jobs${s ? `?${s}` : ""}`;
}

async function jobsPage(query) {
  const f = parseQuery(query);
  const stateSel = h("select", { id: "f-state", name: "state" },
    ["", "queued", "running", "succeeded", "failed", "cancelled"].map((s) => h("option", { value: s, selected: f.state === s }, s || "any")));
  const kernelIn = h("input", { id: "f-kernel", name: "kernel", value: f.kernel || "", placeholder: "e.g. gemm", size: 12 });
  const labelIn = h("input", { id: "f-label", name: "label", value: f.label || "", placeholder: "key:value", size: 16 });
  const form = h("form", { class: "filters", role: "search" },
    h("label", { for: "f-state" }, "State", stateSel),
    h("label", { for: "f-kernel" }, "Kernel", kernelIn),
    h("label", { for: "f-label" }, "Label", labelIn),
    h("button", { type: "submit" }, "Filter"),
    h("button", { type: "button", class: "secondary", onclick: () => { location.hash = "#/jobs"; } }, "Clear"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = jobsHash({ state: stateSel.value, kernel: kernelIn.value.trim(), label: labelIn.value.trim(), limit: f.limit });
  });
  const body = h("div", { id: "jobs-body" }, h("p", { class: "muted" }, "Loading…"));
  const pager = h("div", { class: "row", id: "pager" });
  setPage("Jobs", h("h1", {}, "Jobs"), form, body, pager);

  const filters = { state: f.state, kernel: f.kernel, label: f.label };
  const limit = /^[1-9][0-9]?$|^100$/.test(f.limit || "") ? Number(f.limit) : PAGE_SIZE;
  let busy = false;
  let again = false;
  const refresh = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const page = await kl.listJobs({ ...filters, cursor: f.cursor, limit });
      // a redraw must not take the keyboard focus away from the row it is on
      const focused = document.activeElement && document.activeElement.dataset.focusKey;
      body.replaceChildren(jobsTable(page.jobs, refresh));
      const refocus = focused && body.querySelector(`[data-focus-key="${CSS.escape(focused)}"]`);
      if (refocus) refocus.focus();
      pager.replaceChildren(...[
        f.cursor && h("a", { class: "button secondary", href: jobsHash({ ...filters, limit: f.limit }), id: "first-page" }, "« Newest"),
        page.next_cursor && h("a", { class: "button secondary", href: jobsHash({ ...filters, limit: f.limit, cursor: page.next_cursor }), id: "next-page" }, "Older »"),
      ].filter(Boolean));
    } catch (e) {
      body.replaceChildren(h("p", { class: "error", role: "alert" }, errorText(e)));
    } finally {
      busy = false;
      if (again) { again = false; setTimeout(refresh, 300); }
    }
  };
  await refresh();
  // Any event of the tenant's jobs redraws the page on view (at most about
  // three times a second): the list is the truth, the events only say when.
  let pending = null;
  const w = kl.watchEvents(filters, {
    onMode: setLive,
    onEvent: () => { if (!pending) pending = setTimeout(() => { pending = null; refresh(); }, 300); },
  });
  // queue waits and run times of unfinished jobs go on counting; an older
  // page is not what the events (or the poll of the newest) cover
  const tick = setInterval(refresh, 5000);
  onLeave(() => { w.close(); clearTimeout(pending); clearInterval(tick); });
}

function jobsTable(jobs, refresh) {
  if (!jobs.length) return h("p", { class: "muted", id: "no-jobs" }, "No jobs match.");
  const rows = jobs.map((j) => {
    const t = times(j);
    const canCancel = !TERMINAL.includes(j.state) && !j.cancel_requested;
    const labels = Object.entries(j.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    return h("tr", { dataset: { jobId: j.id } },
      h("td", { class: "mono" }, h("a", { href: `#/jobs/${encodeURIComponent(j.id)}`, dataset: { focusKey: `open:${j.id}` } }, j.id.slice(0, 8))),
      h("td", { class: "job-state" }, stateBadge(j.state), j.cancel_requested && j.state === "running" ? " cancelling" : ""),
      h("td", {}, j.kernel || (j.task ? h("span", { class: "mono", title: "task image" }, j.task.image) : "—")),
      h("td", { class: "hide-narrow" }, h("span", { class: "label" }, labels)),
      h("td", { class: "hide-narrow" }, j.node || "—"),
      h("td", { class: "hide-narrow" }, j.backend || "—"),
      h("td", { class: "num hide-narrow" }, seconds(t.wait)),
      h("td", { class: "num hide-narrow" }, seconds(t.run)),
      h("td", { class: "num hide-narrow" }, t.cost === null ? "—" : fmt(t.cost)),
      h("td", {}, canCancel ? h("button", {
        type: "button", class: "danger cancel", "aria-label": `Cancel job ${j.id}`, dataset: { focusKey: `cancel:${j.id}` },
        onclick: async (ev) => {
          ev.target.disabled = true;
          try { await kl.cancelJob(j.id); toast(`Cancel sent for ${j.id.slice(0, 8)}`); } catch (e) { toast(errorText(e)); }
          refresh();
        },
      }, "Cancel") : ""));
  });
  return table(["Job", "State", "Kernel", h("th", { class: "hide-narrow" }, "Labels"), h("th", { class: "hide-narrow" }, "Node"),
    h("th", { class: "hide-narrow" }, "Backend"), h("th", { class: "num hide-narrow" }, "Queue wait"), h("th", { class: "num hide-narrow" }, "Run time"),
    h("th", { class: "num hide-narrow" }, "Cost"), h("th", {}, h("span", { class: "muted" }, "Action"))], rows, { id: "jobs-table" });
}

// ---------------------------------------------------------------- a job

async function jobPage(id) {
  setPage(`Job ${id.slice(0, 8)}`, h("p", { class: "muted" }, "Loading…"));
  let job;
  try {
    job = await kl.getJob(id);
  } catch (e) {
    setPage("Job", h("h1", {}, "Job"), h("p", { class: "error", role: "alert" }, errorText(e)));
    return;
  }
  const summary = h("div", { id: "job-summary" });
  const prog = h("progress", { id: "job-progress", max: 1, value: 0 });
  const progText = h("span", { class: "muted", id: "job-progress-text" });
  const progBox = h("div", { class: "card", id: "progress-card", hidden: true }, h("h2", {}, "Progress"), prog, progText);
  const timeline = h("ol", { class: "timeline", id: "timeline" });
  const chartBox = h("div", { class: "card", id: "chart-card", hidden: true }, h("h2", {}, "Reported values"));
  const outputs = h("div", { id: "outputs" });
  const errBox = h("div", { id: "job-error" });
  const actions = h("div", { class: "row" });
  const isTask = job.kind === "task" || !!job.task;
  const logPane = isTask ? taskLogPane(job) : null;
  setPage(`Job ${id.slice(0, 8)}`,
    h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")),
    h("h1", {}, "Job ", h("span", { class: "mono" }, id)),
    actions, errBox,
    h("div", { class: "grid2" }, h("div", { class: "card" }, h("h2", {}, "Summary"), summary),
      isTask ? h("div", { class: "card" }, h("h2", {}, "Task"), taskView(job))
        : h("div", { class: "card" }, h("h2", {}, "Parameters"), paramsView(job), inputsView(job))),
    progBox, chartBox,
    logPane && logPane.box,
    h("div", { class: "card" }, h("h2", {}, "Events"), timeline),
    outputs);

  const points = []; // what the kernel reported, for the chart
  const chart = reportChart(chartBox);
  // The timeline holds what the page infers (the job's timestamps, the
  // states a poll saw) and the event stream's events. A stream may replay
  // the job's history from its start: the first stream event of a name
  // takes the place of the inferred entry of that name, never doubling it.
  const entry = (name, at, detail) => h("li", { dataset: { event: name } }, h("strong", {}, name), " ",
    h("span", { class: "muted" }, at ? new Date(at).toLocaleTimeString() : ""), detail ? ` ${detail}` : "");
  const inferred = []; // {name, li} no stream event has matched yet
  const streamed = []; // names of stream events no inference has matched yet
  const addEvent = (name, at, detail) => {
    const i = streamed.indexOf(name);
    if (i >= 0) {
      streamed.splice(i, 1);
      return;
    }
    const li = entry(name, at, detail);
    inferred.push({ name, li, at, detail });
    timeline.append(li);
  };
  const addStreamed = (name, at, detail) => {
    const i = inferred.findIndex((x) => x.name === name);
    if (i >= 0) {
      const x = inferred.splice(i, 1)[0];
      x.li.replaceWith(entry(name, at || x.at, detail || x.detail));
      return;
    }
    streamed.push(name);
    timeline.append(entry(name, at, detail));
  };
  let outputsShown = false;
  const render = (j) => {
    job = j;
    const t = times(j);
    const u = j.usage || {};
    summary.replaceChildren(props([
      ["State", h("span", { id: "job-state" }, stateBadge(j.state), j.cancel_requested && !TERMINAL.includes(j.state) ? " (cancel requested)" : "")],
      !isTask && ["Kernel", j.kernel],
      isTask && ["Exit code", j.exit_code === null || j.exit_code === undefined ? "—" : String(j.exit_code), "job-exit-code"],
      ["Node", j.node || "—", "job-node"],
      ["Backend", j.backend || "—"],
      // a preempted attempt (--fair-preempt) does not count against max_attempts
      ["Attempts", `${(j.attempts ?? 0) - (j.preemptions ?? 0)} of ${j.max_attempts ?? "?"}` +
        (j.preemptions ? `, and ${j.preemptions} preempted` : ""), "job-attempts"],
      ["Priority", fmt(j.priority)],
      ["Labels", Object.entries(j.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "—", "job-labels"],
      ["Created", j.created_at || "—"],
      ["Started", j.started_at || "—"],
      ["Finished", j.finished_at || "—"],
      ["Queue wait", seconds(t.wait)],
      ["Run time", seconds(t.run)],
      u.gpu_s !== undefined && ["GPU time", seconds(u.gpu_s)],
      u.cpu_s !== undefined && ["CPU time", seconds(u.cpu_s)],
      u.bytes_in !== undefined && ["Bytes in / out", `${bytes(u.bytes_in)} / ${bytes(u.bytes_out)}`],
      t.cost !== null && ["Cost", fmt(t.cost)],
      j.info && Object.keys(j.info).length && ["Info", fmt(j.info)],
    ]));
    const f = progressFraction(j.progress);
    if (f !== null) {
      progBox.hidden = false;
      prog.value = f;
      progText.textContent = ` ${(f * 100).toFixed(0)} %`;
    } else if (j.state === "succeeded") {
      progBox.hidden = false;
      prog.value = 1;
      progText.textContent = " done";
    }
    errBox.replaceChildren(j.error ? h("div", { class: "card error", role: "alert" }, h("strong", {}, j.error.code), ": ", j.error.message) : "");
    actions.replaceChildren(!TERMINAL.includes(j.state) && !j.cancel_requested ? h("button", {
      type: "button", class: "danger", id: "cancel-job",
      onclick: async (ev) => { ev.target.disabled = true; try { render(await kl.cancelJob(j.id)); } catch (e) { toast(errorText(e)); } },
    }, "Cancel job") : "");
    if (j.state === "succeeded" && !outputsShown) {
      outputsShown = true;
      if (isTask) showTaskOutputs(j, outputs); else showOutputs(j, outputs, points, chart);
    }
  };
  render(job);
  addEvent("queued", job.created_at);
  let lastState = "queued";
  const addPoint = (d) => {
    d = progressOf(d);
    if (!d || typeof d !== "object") return;
    points.push({ t: Date.now(), ...d });
    chart(points);
  };
  // a page opened while the job runs starts its chart from the job's
  // latest progress (events carry only what comes next)
  if (job.state === "running" && job.progress) addPoint(job.progress);
  const w = kl.watchJob(id, {
    onMode: setLive,
    onJob: (j) => {
      // polling sees states, not events: note each change once, with the
      // job's own timestamp where it has one
      if (j.state !== lastState) {
        lastState = j.state;
        addEvent(j.state, j.state === "running" ? j.started_at : j.finished_at, j.node ? `on ${j.node}` : "");
      }
      render(j);
    },
    onEvent: (ev) => {
      if (ev.polled) {
        if (ev.event === "progress") addPoint(ev.data);
        return;
      }
      const d = ev.data && typeof ev.data === "object" ? ev.data : {};
      if (ev.event === "log") return; // the log pane reads the log itself
      if (ev.event === "progress") {
        addPoint(d);
        return;
      }
      // events are named by kind; a generic name carries the state in data
      const name = (ev.event === "state" || ev.event === "message") && typeof d.state === "string" ? d.state : ev.event;
      addStreamed(name, d.at || d.created_at || d.ts, d.node ? `on ${d.node}` : "");
    },
  });
  if (job.state !== "queued") {
    // a job opened after it started: its timestamps are its history
    if (job.started_at) addEvent("running", job.started_at, job.node ? `on ${job.node}` : "");
    if (TERMINAL.includes(job.state)) addEvent(job.state, job.finished_at);
    lastState = job.state;
  }
  onLeave(() => { w.close(); chart.destroy(); if (logPane) logPane.close(); });
}

/** 0..1 of a progress object that says how far along it is: `fraction`,
 * `percent`, or a done/total pair (epoch/epochs, step/steps,
 * iteration/iterations, done/total); null when it says none. */
function progressFraction(p) {
  if (!p || typeof p !== "object") return null;
  const num = (v) => typeof v === "number" && Number.isFinite(v);
  const clamp = (x) => Math.max(0, Math.min(1, x));
  if (num(p.fraction)) return clamp(p.fraction);
  if (num(p.percent)) return clamp(p.percent / 100);
  for (const [a, b] of [["epoch", "epochs"], ["step", "steps"], ["iteration", "iterations"], ["done", "total"]]) {
    if (num(p[a]) && num(p[b]) && p[b] > 0) return clamp(p[a] / p[b]);
  }
  return null;
}

/** A command line as a shell would read it back (arguments with spaces or
 * quotes quoted), for display only. */
function commandText(argv) {
  return (argv || []).map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, "'\\''")}'`)).join(" ");
}

/** What a task runs: image, command, working directory, network, env. */
function taskView(j) {
  const t = j.task || {};
  const env = Object.entries(t.env || {});
  return [props([
    ["Image", h("span", { class: "mono" }, t.image), "job-image"],
    ["Command", h("code", {}, commandText(t.command)), "job-command"],
    ["Working directory", t.workdir || "/kowloon/work"],
    ["Network", t.network || "none"],
    (j.resources && j.resources.nodes > 1) && ["Gang", `${j.resources.nodes} nodes`],
  ]), env.length ? table(["Variable", "Value"], env.map(([k, v]) => h("tr", {}, h("td", { class: "mono" }, k), h("td", { class: "mono" }, v))), { id: "task-env" }) : null];
}

/** A task's live log: a pane that follows GET /v1/jobs/{id}/logs from its
 * start until the job ends (a part chooser for a gang), keeping the newest
 * LOG_MAX characters and the view at the bottom unless scrolled up. */
function taskLogPane(job) {
  const pre = h("pre", { class: "log", id: "job-log", tabindex: 0, "aria-label": "Task log", "aria-live": "off" });
  const note = h("p", { class: "muted", id: "job-log-note" }, "Waiting for output…");
  const nodes = (job.resources && job.resources.nodes) || 1;
  let follower = null;
  let size = 0;
  const follow = (part) => {
    if (follower) follower.close();
    pre.textContent = "";
    size = 0;
    note.textContent = "Waiting for output…";
    note.hidden = false;
    follower = kl.followLogs(job.id, {
      part,
      onText: (text) => {
        note.hidden = true;
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(document.createTextNode(text));
        size += text.length;
        if (size > LOG_MAX) {
          pre.textContent = `[… earlier output not shown here: kowloon logs ${job.id}]\n` + pre.textContent.slice(-LOG_MAX / 2);
          size = pre.textContent.length;
        }
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      },
    });
    follower.done.then(() => {
      if (!size) { note.textContent = "No output."; note.hidden = false; }
      pre.dataset.complete = "true";
    }, (e) => { note.textContent = errorText(e); note.hidden = false; });
  };
  const chooser = nodes > 1 ? h("label", { class: "inline" }, "Part ",
    h("select", { id: "log-part", onchange: (ev) => follow(Number(ev.target.value)) },
      Array.from({ length: nodes }, (_, i) => h("option", { value: String(i) }, `${i} (node rank ${i})`)))) : null;
  follow(0);
  return {
    box: h("div", { class: "card", id: "log-card" }, h("h2", {}, "Log"), chooser, note, pre),
    close: () => { if (follower) follower.close(); },
  };
}

/** A succeeded task's outputs: the files it left in /kowloon/out, named
 * by their paths, each downloadable as it is. */
async function showTaskOutputs(j, box) {
  box.replaceChildren(h("div", { class: "card" }, h("h2", {}, "Outputs"), h("p", { class: "muted" }, "Loading…")));
  let outs;
  try {
    outs = Object.entries((await kl.getResult(j.id, { encoding: "blob" })).outputs || {});
  } catch (e) {
    box.replaceChildren(h("div", { class: "card" }, h("h2", {}, "Outputs"), h("p", { class: "error" }, errorText(e))));
    return;
  }
  const rows = outs.map(([name, t]) => h("tr", { dataset: { output: name } },
    h("td", { class: "mono" }, name),
    h("td", { class: "num" }, bytes(t && (t.bytes ?? t.size))),
    h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => download(j.id, name, null, name) }, "Download"))));
  box.replaceChildren(h("div", { class: "card", id: "outputs-card" }, h("h2", {}, "Outputs"),
    rows.length ? table(["File", h("th", { class: "num" }, "Size"), ""], rows, { id: "task-outputs" }) : h("p", { class: "muted" }, "No outputs.")));
}

function paramsView(j) {
  const entries = Object.entries(j.params || {});
  return entries.length ? table(["Parameter", "Value"], entries.map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", { class: "mono" }, fmt(v)))), { id: "job-params" })
    : h("p", { class: "muted" }, "No parameters.");
}

function inputsView(j) {
  const ins = j.inputs;
  if (!ins || typeof ins !== "object") return null;
  return [h("h2", {}, "Inputs"), table(["Input", "dtype", "Shape"], Object.entries(ins).map(([k, t]) =>
    h("tr", {}, h("td", {}, k), h("td", {}, fmt(t && t.dtype)), h("td", { class: "mono" }, JSON.stringify((t && t.shape) || []))))),
  ];
}

/** A chart of the numeric values of the points (a progress event's data):
 * x the epoch/step/iteration it names, else its order; one line per other
 * field but fraction. Returns draw(points). */
function reportChart(box) {
  let c = null;
  let canvas = null;
  let fallback = null;
  const X = ["epoch", "step", "iteration", "iter"];
  const TOTALS = ["epochs", "steps", "iterations", "total"]; // how far it goes, not a value
  const draw = async (points) => {
    const keys = new Set();
    for (const p of points) for (const [k, v] of Object.entries(p)) if (typeof v === "number" && k !== "t" && k !== "fraction" && !X.includes(k) && !TOTALS.includes(k)) keys.add(k);
    if (!keys.size) return;
    box.hidden = false;
    const xKey = X.find((k) => points.every((p) => typeof p[k] === "number"));
    const xs = points.map((p, i) => (xKey ? p[xKey] : i + 1));
    const Chart = await loadChart();
    if (Chart) {
      const datasets = [...keys].map((k, i) => ({
        label: k, data: points.map((p) => p[k] ?? null), yAxisID: i === 0 ? "y" : "y1", pointRadius: 2,
        borderColor: PALETTE[i % PALETTE.length], backgroundColor: PALETTE[i % PALETTE.length],
      }));
      if (!c) {
        canvas = h("canvas", { id: "report-chart", role: "img", "aria-label": `Reported ${[...keys].join(", ")} by ${xKey || "report"}` });
        box.append(h("div", { class: "chart-box" }, canvas));
        c = new Chart(canvas, {
          type: "line", data: { labels: xs, datasets },
          options: { animation: false, maintainAspectRatio: false, scales: { x: { title: { display: true, text: xKey || "report" } }, y1: { position: "right", display: keys.size > 1, grid: { drawOnChartArea: false } } } },
        });
      } else {
        c.data.labels = xs;
        c.data.datasets = datasets;
        c.update();
      }
    } else {
      const t = table([xKey || "#", ...keys], points.map((p, i) => h("tr", {}, h("td", { class: "num" }, fmt(xs[i])), [...keys].map((k) => h("td", { class: "num" }, fmt(p[k]))))), { id: "report-table" });
      if (fallback) fallback.replaceWith(t); else box.append(t);
      fallback = t;
    }
  };
  // Chart.js keeps listeners on the window (resizing) until destroyed
  draw.destroy = () => { if (c) c.destroy(); };
  return draw;
}

/** The outputs of a succeeded job: their names from the kernel catalog,
 * dtype and shape from a HEAD of each, and the bytes of the small ones
 * only, so that a job with gigabytes of outputs costs the page nothing
 * until a download is asked for. */
async function showOutputs(j, box, points, chart) {
  box.replaceChildren(h("div", { class: "card" }, h("h2", {}, "Outputs"), h("p", { class: "muted" }, "Loading…")));
  let outs;
  try {
    const spec = (await catalog()).find((k) => k.name === j.kernel);
    const names = spec ? spec.outputs.map((o) => o.name) : [];
    outs = await Promise.all(names.map(async (name) => {
      const info = await kl.getOutputInfo(j.id, name);
      const n = info.shape.reduce((a, b) => a * b, 1);
      const want = n <= SMALL_TENSOR || (name === "loss" && info.shape.length === 1 && n <= CHART_MAX);
      const vals = want ? rawValues((await kl.getOutput(j.id, name)).bytes, info.dtype) : null;
      return { name, ...info, n, vals };
    }));
  } catch (e) {
    box.replaceChildren(h("div", { class: "card" }, h("h2", {}, "Outputs"), h("p", { class: "error" }, errorText(e))));
    return;
  }
  const cards = outs.map((t) => {
    const cols = t.shape.length === 2 ? t.shape[1] : 1;
    let view = h("p", { class: "muted" }, `${t.n} elements (${bytes(t.size)}): download to read.`);
    if (t.vals && t.n <= SMALL_TENSOR) {
      const rows = [];
      for (let i = 0; i < t.vals.length; i += cols) {
        rows.push(h("tr", {}, h("th", { class: "num muted", scope: "row" }, String(i / cols)), t.vals.slice(i, i + cols).map((v) => h("td", { class: "num" }, fmt(v)))));
      }
      view = h("div", { class: "table-wrap tensor-wrap" }, h("table", { class: "tensor", dataset: { output: t.name } }, h("tbody", {}, rows)));
    }
    return h("div", { class: "output", dataset: { output: t.name } },
      h("h3", {}, t.name, " ", h("span", { class: "muted mono" }, `${t.dtype} ${JSON.stringify(t.shape)}`)),
      view,
      h("div", { class: "row" },
        h("button", { type: "button", class: "secondary", onclick: () => download(j.id, t.name, "npy") }, `Download ${t.name}.npy`),
        h("button", { type: "button", class: "secondary", onclick: () => download(j.id, t.name, null) }, "raw bytes")));
  });
  box.replaceChildren(h("div", { class: "card", id: "outputs-card" }, h("h2", {}, "Outputs"), cards.length ? cards : h("p", { class: "muted" }, "No outputs.")));
  // train_mlp reports its loss per epoch as an output: plot it when no
  // progress events were seen
  const loss = outs.find((t) => t.name === "loss" && t.vals && t.n > 1);
  if (!points.length && loss) {
    loss.vals.forEach((v, i) => points.push({ epoch: i + 1, loss: v }));
    chart(points);
  }
}

async function download(id, name, format, fileName) {
  try {
    const out = await kl.getOutput(id, name, { format });
    const url = URL.createObjectURL(new Blob([out.bytes], { type: out.contentType || "application/octet-stream" }));
    const file = fileName ? fileName.split("/").pop() : `${id.slice(0, 8)}-${name}.${format === "npy" ? "npy" : "bin"}`;
    const a = h("a", { href: url, download: file });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    toast(errorText(e));
  }
}

// ---------------------------------------------------------------- nodes

async function nodesPage(id) {
  setPage("Nodes", h("h1", {}, "Nodes"), h("p", { class: "muted" }, "Loading…"));
  const draw = async () => {
    let nodes;
    try {
      nodes = await kl.nodes();
    } catch (e) {
      setPage("Nodes", h("h1", {}, "Nodes"), h("p", { class: "error", role: "alert" }, errorText(e)));
      return;
    }
    if (id) {
      const n = nodes.find((x) => x.id === id || x.name === id);
      if (!n) {
        setPage("Node", h("p", {}, h("a", { href: "#/nodes" }, "← Nodes")), h("p", { class: "error" }, "No such node."));
        return;
      }
      setPage(`Node ${n.name}`, h("p", {}, h("a", { href: "#/nodes" }, "← Nodes")), h("h1", { id: "node-name" }, "Node ", n.name),
        h("div", { class: "card" }, props(Object.entries(n).map(([k, v]) => [k, k === "gpus" ? gpuText(v) : fmt(v)]))));
      return;
    }
    // heartbeat times are shown to admin keys only: no column for others
    const beats = nodes.some((n) => n.last_heartbeat);
    const rows = nodes.map((n) => h("tr", { dataset: { nodeId: n.id } },
      h("td", {}, h("a", { href: `#/nodes/${encodeURIComponent(n.id)}` }, n.name)),
      h("td", {}, stateBadge(n.state), n.draining ? [" ", h("span", { class: "state state-draining" }, "draining")] : ""),
      h("td", {}, n.backend),
      h("td", {}, gpuText(n.gpus)),
      h("td", { class: "num" }, `${n.running ?? "?"} / ${n.slots ?? "?"}`),
      beats && h("td", { class: "num hide-narrow" }, n.last_heartbeat ? seconds(since(n.last_heartbeat)) : "—"),
));
    setPage("Nodes", h("h1", {}, "Nodes"), nodes.length ? table(["Node", "State", "Backend", "GPUs", h("th", { class: "num" }, "Slots busy"),
      beats && h("th", { class: "num hide-narrow" }, "Heartbeat age")].filter(Boolean), rows, { id: "nodes-table" }) : h("p", { class: "muted" }, "No nodes registered."));
  };
  await draw();
  const t = setInterval(draw, 3000);
  setLive("poll");
  onLeave(() => clearInterval(t));
}

function gpuText(gpus) {
  if (!Array.isArray(gpus) || !gpus.length) return "—";
  return gpus.map((g) => `${g.name || "GPU"}${g.memory_bytes ? ` (${bytes(g.memory_bytes)})` : ""}`).join(", ");
}

// ---------------------------------------------------------------- usage

async function usagePage() {
  setPage("Usage", h("h1", {}, "Usage"), h("p", { class: "muted" }, "Loading…"));
  let u;
  try {
    u = await kl.usage();
  } catch (e) {
    setPage("Usage", h("h1", {}, "Usage"), h("p", { class: "error" }, errorText(e)));
    return;
  }
  if (!u) {
    setPage("Usage", h("h1", {}, "Usage"), h("p", { class: "muted" }, "This gateway has no usage view."));
    return;
  }
  // Whatever groups the view returns (by kernel, by label, totals): every
  // list of records as a table, every other value as a property.
  const parts = [];
  const scalars = [];
  for (const [k, v] of Object.entries(u)) {
    if (Array.isArray(v) && v.every((r) => r && typeof r === "object")) {
      const cols = [...new Set(v.flatMap((r) => Object.keys(r)))];
      const num = (c) => v.every((r) => r[c] === undefined || r[c] === null || typeof r[c] === "number");
      parts.push(h("h2", {}, k.replace(/_/g, " ")), table(cols.map((c) => h("th", { scope: "col", class: num(c) ? "num" : "" }, c)),
        v.map((r) => h("tr", {}, cols.map((c) => h("td", { class: num(c) ? "num" : "" }, fmt(r[c])))))));
    } else {
      scalars.push([k, fmt(v)]);
    }
  }
  setPage("Usage", h("h1", {}, "Usage"), scalars.length ? h("div", { class: "card" }, props(scalars)) : null, parts);
}

// ---------------------------------------------------------------- queue

const QUEUE_MINUTES = 60;
const QUEUE_REFRESH_MS = 10000;
const minuteLabel = (t) => new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

/** Queue depth and throughput of the caller's tenant over the last hour,
 * from GET /v1/stats/history (cached 5 s by the gateway), redrawn every
 * 10 s while the page is shown: a line chart of queued and running and a
 * bar chart of jobs finished per minute, or one table without Chart.js. */
async function queuePage() {
  setPage("Queue", h("h1", {}, "Queue"), h("p", { class: "muted" }, "Loading…"));
  const charts = [];
  let shown = false;
  let summary, box;
  const chartOf = (Chart, id, label, type, datasets, labels) => {
    const canvas = h("canvas", { id, role: "img", "aria-label": label });
    box.append(h("h2", {}, label), h("div", { class: "chart-box" }, canvas));
    const c = new Chart(canvas, {
      type, data: { labels, datasets },
      options: { animation: false, maintainAspectRatio: false, scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
    });
    charts.push(c);
  };
  const draw = async () => {
    let st;
    try {
      st = await kl.stats(QUEUE_MINUTES);
    } catch (e) {
      if (!shown) setPage("Queue", h("h1", {}, "Queue"), h("p", { class: "error", role: "alert" }, errorText(e)));
      else toast(errorText(e));
      return;
    }
    if (!st) {
      setPage("Queue", h("h1", {}, "Queue"), h("p", { class: "muted" }, "This gateway has no queue history."));
      return;
    }
    const b = st.buckets;
    const sum = (k) => b.reduce((a, x) => a + x[k], 0);
    const labels = b.map((x) => minuteLabel(x.t));
    const series = {
      queued: b.map((x) => x.queued), running: b.map((x) => x.running), finished: b.map((x) => x.finished),
    };
    const totals = props([
      ["Queued now", String(st.now.queued), "queue-now-queued"],
      ["Running now", String(st.now.running), "queue-now-running"],
      [`Submitted (${st.minutes} min)`, String(sum("submitted")), "queue-submitted"],
      [`Started (${st.minutes} min)`, String(sum("started")), "queue-started"],
      [`Finished (${st.minutes} min)`, String(sum("finished")), "queue-finished"],
    ]);
    if (!shown) {
      summary = h("div", { class: "card", id: "queue-summary" }, totals);
      box = h("div", { class: "card", id: "queue-charts" });
      setPage("Queue", h("h1", {}, "Queue"), h("p", { class: "muted" }, `Your jobs over the last ${st.minutes} minutes, one point a minute.`), summary, box);
      shown = true;
    } else {
      summary.replaceChildren(totals);
    }
    const Chart = await loadChart();
    if (Chart && !charts.length) {
      chartOf(Chart, "queue-chart", "Queued and running", "line", [
        { label: "queued", data: series.queued, borderColor: PALETTE[0], backgroundColor: PALETTE[0], pointRadius: 0, stepped: true },
        { label: "running", data: series.running, borderColor: PALETTE[2], backgroundColor: PALETTE[2], pointRadius: 0, stepped: true },
      ], labels);
      chartOf(Chart, "throughput-chart", "Finished per minute", "bar", [
        { label: "finished", data: series.finished, backgroundColor: PALETTE[3] },
      ], labels);
    } else if (Chart) {
      const [depth, through] = charts;
      depth.data.labels = labels;
      depth.data.datasets[0].data = series.queued;
      depth.data.datasets[1].data = series.running;
      through.data.labels = labels;
      through.data.datasets[0].data = series.finished;
      for (const c of charts) c.update();
    } else {
      // newest first: the minutes a reader looks for are at the top
      const rows = b.slice().reverse().map((x) => h("tr", {},
        h("td", {}, minuteLabel(x.t)), ["queued", "running", "submitted", "started", "finished"].map((k) => h("td", { class: "num" }, String(x[k])))));
      box.replaceChildren(table(["Minute", ...["Queued", "Running", "Submitted", "Started", "Finished"].map((c) => h("th", { scope: "col", class: "num" }, c))],
        rows, { id: "queue-table" }));
    }
  };
  await draw();
  const t = setInterval(draw, QUEUE_REFRESH_MS);
  setLive("poll");
  // Chart.js keeps listeners on the window (resizing) until destroyed
  onLeave(() => { clearInterval(t); for (const c of charts) c.destroy(); });
}

// ---------------------------------------------------------------- submit

async function submitPage() {
  setPage("Submit", h("h1", {}, "Submit a job"), h("p", { class: "muted" }, "Loading the kernels…"));
  let kernels;
  try {
    kernels = await catalog();
  } catch (e) {
    setPage("Submit", h("h1", {}, "Submit a job"), h("p", { class: "error" }, errorText(e)));
    return;
  }
  const sel = h("select", { id: "s-kernel", name: "kernel" }, kernels.map((k) => h("option", { value: k.name }, k.name)));
  const fields = h("div", { id: "kernel-fields" });
  const msg = h("p", { class: "error", id: "submit-error", role: "alert" });
  const priority = h("input", { id: "s-priority", type: "number", min: 0, max: 9, step: 1, value: 5 });
  const backend = h("select", { id: "s-backend" }, ["any", "cpu", "cuda"].map((b) => h("option", { value: b }, b)));
  const labels = h("textarea", { id: "s-labels", rows: 2, placeholder: "team=risk\none label per line" });
  const form = h("form", { id: "submit-form", novalidate: true },
    h("fieldset", {}, h("legend", {}, "Kernel"), h("label", { for: "s-kernel" }, "Kernel", sel), h("p", { class: "muted", id: "kernel-doc" })),
    fields,
    h("fieldset", {}, h("legend", {}, "Job"),
      h("div", { class: "row" }, h("label", { for: "s-priority" }, "Priority (0–9)", priority), h("label", { for: "s-backend" }, "Backend", backend)),
      h("label", { for: "s-labels" }, "Labels (key=value per line)", labels)),
    h("p", {}, h("button", { type: "submit", id: "submit-job" }, "Submit")), msg);
  const build = () => {
    const k = kernels.find((x) => x.name === sel.value);
    document.getElementById("kernel-doc").textContent = k.description || "";
    fields.replaceChildren(
      k.params.length ? h("fieldset", {}, h("legend", {}, "Parameters"), k.params.map(paramField)) : null,
      k.inputs.length ? h("fieldset", {}, h("legend", {}, "Inputs"), k.inputs.map(inputField)) : null);
  };
  sel.addEventListener("change", build);
  setPage("Submit", h("h1", {}, "Submit a job"), form);
  build();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    msg.textContent = "";
    const k = kernels.find((x) => x.name === sel.value);
    let body;
    try {
      body = await jobBody(k, { priority: priority.value, backend: backend.value, labels: labels.value });
    } catch (e) {
      msg.textContent = e.message;
      return;
    }
    try {
      const j = await kl.submitJob(body);
      location.hash = `#/jobs/${encodeURIComponent(j.id)}`;
    } catch (e) {
      msg.textContent = errorText(e);
      const f = e.field && document.querySelector(`[data-field="${CSS.escape(e.field)}"]`);
      if (f) f.focus();
    }
  });
}

function paramField(p) {
  const id = `p-${p.name}`;
  const range = p.type === "enum" ? "" : ` ${bound(p.minimum)} … ${bound(p.maximum)}`;
  const input = p.type === "enum"
    ? h("select", { id, dataset: { param: p.name, type: p.type, field: `params.${p.name}` } },
      !p.required ? null : h("option", { value: "" }, "choose…"),
      p.choices.map((c) => h("option", { value: c, selected: c === p.default }, c)))
    : h("input", {
      id, type: "number", step: p.type === "integer" ? 1 : "any", min: p.minimum, max: p.maximum,
      value: p.default ?? "", placeholder: p.required ? "required" : "", required: p.required,
      dataset: { param: p.name, type: p.type, field: `params.${p.name}` },
    });
  return h("div", { class: "field" }, h("label", { for: id }, `${p.name}${p.required ? " *" : ""} (${p.type}${range})`, input),
    p.description ? h("div", { class: "hint" }, p.description) : null);
}

function inputField(s) {
  const id = `i-${s.name}`;
  return h("div", { class: "field", dataset: { input: s.name } },
    h("div", {}, h("strong", {}, s.name), `${s.optional ? " (optional)" : " *"} `, h("span", { class: "muted mono" }, `${s.dtype} ${s.shape}`)),
    s.description ? h("div", { class: "hint" }, s.description) : null,
    h("div", { class: "row" },
      h("label", { for: `${id}-file` }, ".npy file", h("input", { id: `${id}-file`, type: "file", accept: ".npy", dataset: { field: `inputs.${s.name}` } })),
      h("label", { for: `${id}-shape` }, "or shape", h("input", { id: `${id}-shape`, size: 8, placeholder: "e.g. 3 or 2,2" })),
      h("label", { for: `${id}-dtype` }, "dtype", h("select", { id: `${id}-dtype` }, ["float32", "float64", "int32"].map((d) => h("option", { value: d, selected: d === s.dtype }, d))))),
    h("label", { for: `${id}-data` }, "values (row-major, separated by commas or spaces)", h("textarea", { id: `${id}-data`, rows: 2 })));
}

/** The job's JSON from the form; throws an Error naming the field at fault. */
async function jobBody(k, { priority, backend, labels }) {
  const body = { kernel: k.name, params: {}, inputs: {}, priority: Number(priority), resources: { backend } };
  for (const p of k.params) {
    const el = document.getElementById(`p-${p.name}`);
    if (el.value === "") {
      if (p.required) throw new Error(`params.${p.name} is required`);
      continue;
    }
    body.params[p.name] = p.type === "enum" ? el.value : Number(el.value);
  }
  for (const s of k.inputs) {
    const id = `i-${s.name}`;
    const file = document.getElementById(`${id}-file`).files[0];
    const text = document.getElementById(`${id}-data`).value.trim();
    if (file) {
      try {
        body.inputs[s.name] = npyToTensor(await file.arrayBuffer());
      } catch (e) {
        throw new Error(`inputs.${s.name}: ${e.message}`);
      }
    } else if (text) {
      const data = text.split(/[\s,]+/).filter((x) => x !== "").map(Number);
      if (data.some((x) => !Number.isFinite(x))) throw new Error(`inputs.${s.name}: values must be numbers`);
      const shapeText = document.getElementById(`${id}-shape`).value.trim();
      const shape = shapeText ? shapeText.split(/[\s,x×]+/).filter((x) => x).map(Number) : [data.length];
      if (shape.some((x) => !Number.isInteger(x) || x < 0)) throw new Error(`inputs.${s.name}: shape must be whole numbers`);
      body.inputs[s.name] = { dtype: document.getElementById(`${id}-dtype`).value, shape, data };
    } else if (!s.optional) {
      throw new Error(`inputs.${s.name} is required: choose a .npy file or type its values`);
    }
  }
  const lab = {};
  for (const line of labels.split("\n").map((l) => l.trim()).filter((l) => l)) {
    const eq = line.indexOf("=");
    if (eq < 1) throw new Error(`labels: "${line}" is not key=value`);
    lab[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
  }
  if (Object.keys(lab).length) body.labels = lab;
  return body;
}

// ---------------------------------------------------------------- routing

async function route() {
  for (const fn of pageCleanup.splice(0)) fn();
  document.getElementById("toast").hidden = true;
  setLive(null);
  const hash = location.hash.replace(/^#/, "") || "/jobs";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter((p) => p).map(decodeURIComponent);
  if (!kl) {
    const key = sessionStorage.getItem(KEY_SLOT);
    if (key) kl = new Kowloon({ apiKey: key });
  }
  if (!kl || parts[0] === "signin") {
    signinPage();
    return;
  }
  nav.hidden = false;
  for (const a of nav.querySelectorAll("a")) a.toggleAttribute("aria-current", a.dataset.page === parts[0]);
  for (const a of nav.querySelectorAll("a[aria-current]")) a.setAttribute("aria-current", "page");
  try {
    if (parts[0] === "jobs" && parts[1]) await jobPage(parts[1]);
    else if (parts[0] === "nodes") await nodesPage(parts[1]);
    else if (parts[0] === "usage") await usagePage();
    else if (parts[0] === "queue") await queuePage();
    else if (parts[0] === "submit") await submitPage();
    else await jobsPage(query);
  } catch (e) {
    if (e instanceof KowloonError && e.status === 401) {
      sessionStorage.removeItem(KEY_SLOT);
      kl = null;
      kernelList = null;
      signinPage("Your key is no longer accepted: sign in again.");
      return;
    }
    setPage("Error", h("p", { class: "error", role: "alert" }, errorText(e)));
  }
}

async function showUsageLink() {
  if (!kl) return;
  try {
    document.getElementById("nav-usage").hidden = (await kl.usage()) === null;
  } catch {
    document.getElementById("nav-usage").hidden = true;
  }
}

document.getElementById("signout").addEventListener("click", signOut);
window.addEventListener("hashchange", async () => {
  await route();
  // the link that was followed is gone with its page: keyboard focus and
  // screen readers start again at the new page's content
  if (document.activeElement === document.body || !document.activeElement) main.focus({ preventScroll: true });
  showUsageLink();
});
route().then(showUsageLink);
