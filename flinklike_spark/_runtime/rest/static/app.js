// The flinklike-spark dashboard: plain JavaScript over Flink's REST API (no build step, no dependencies).
// Refreshes every `refresh-interval` ms of /config. The selected job is in the URL hash (#<job id>).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const state = { config: null, selected: null, timer: null };

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${(body.errors || []).join("; ")}`);
  return body;
}

async function apiOrNull(path) {
  const response = await fetch(path);
  return response.ok ? response.json() : null;
}

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const child of children) node.append(child);
  return node;
}

function fmtDuration(ms) {
  if (ms < 0) return "-";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${Math.floor(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

function fmtBytes(n) {
  if (n < 0) return "-";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function fmtRate(x) { return x >= 1000 ? `${(x / 1000).toFixed(1)}k/s` : `${x.toFixed(x < 10 ? 1 : 0)}/s`; }

function fmtTime(ms) { return ms > 0 ? new Date(ms).toLocaleTimeString() : "-"; }

async function refreshCluster() {
  const [overview, managers, jobs] = await Promise.all([api("overview"), api("taskmanagers"), api("jobs/overview")]);
  document.getElementById("cluster-summary").textContent =
    `${overview.taskmanagers} TaskExecutors · ${overview["slots-available"]}/${overview["slots-total"]} slots free · ` +
    `${overview["jobs-running"]} running · Flink ${overview["flink-version"]}`;
  const body = document.querySelector("#taskmanagers tbody");
  body.replaceChildren(...managers.taskmanagers.map((tm) => el("tr", {},
    el("td", {}, tm.id), el("td", {}, String(tm.slotsNumber)), el("td", {}, String(tm.freeSlots)),
    el("td", {}, fmtDuration(tm.timeSinceLastHeartbeat)), el("td", {}, String(tm.hardware.cpuCores)),
    el("td", {}, fmtBytes(tm.hardware.physicalMemory)))));
  const list = document.getElementById("job-list");
  const sorted = jobs.jobs.slice().sort((a, b) => b["start-time"] - a["start-time"]);
  if (!state.selected && sorted.length) state.selected = (sorted.find((j) => j.state === "RUNNING") || sorted[0]).jid;
  list.replaceChildren(...sorted.map((job) => {
    const item = el("li", { "data-job-id": job.jid, class: job.jid === state.selected ? "selected" : "" },
      el("span", { class: `badge ${job.state}` }, job.state), " ", job.name,
      el("div", { class: "muted" }, `${fmtDuration(job.duration)} · ${job.tasks.running} of ` +
        `${job.tasks.total} tasks running`));
    item.addEventListener("click", () => { location.hash = job.jid; });
    return item;
  }));
}

async function vertexRates(jobId, vertex) {
  const names = "numRecordsInPerSecond,numRecordsOutPerSecond,busyTimeMsPerSecond,backPressuredTimeMsPerSecond";
  const metrics = await api(`jobs/${jobId}/vertices/${encodeURIComponent(vertex.id)}/subtasks/metrics?get=${names}`);
  const byId = Object.fromEntries(metrics.map((m) => [m.id, m]));
  const get = (id, field) => (byId[id] ? byId[id][field] : 0);
  return {
    inRate: get("numRecordsInPerSecond", "sum"), outRate: get("numRecordsOutPerSecond", "sum"),
    busy: get("busyTimeMsPerSecond", "max"), backpressured: get("backPressuredTimeMsPerSecond", "max"),
  };
}

function layout(nodes) {
  // Columns by longest path from a source; rows in plan order within a column.
  const depth = {};
  const byId = Object.fromEntries(nodes.map((n) => [n.id, n]));
  const visit = (n) => {
    if (depth[n.id] !== undefined) return depth[n.id];
    depth[n.id] = 0;
    depth[n.id] = Math.max(0, ...(n.inputs || []).map((i) => (byId[i.id] ? visit(byId[i.id]) + 1 : 0)));
    return depth[n.id];
  };
  nodes.forEach(visit);
  const rows = {};
  const pos = {};
  for (const n of nodes) {
    const d = depth[n.id];
    rows[d] = (rows[d] || 0) + 1;
    pos[n.id] = { x: 20 + d * 300, y: 20 + (rows[d] - 1) * 130 };
  }
  return { pos, height: 40 + Math.max(1, ...Object.values(rows)) * 130 - 20 };
}

async function renderGraph(job) {
  const svg = document.getElementById("job-graph");
  const nodes = job.plan.nodes;
  const { pos, height } = layout(nodes);
  const rates = await Promise.all(job.vertices.map((v) => vertexRates(job.jid, v)));
  const byId = Object.fromEntries(job.vertices.map((v, i) => [v.id, { vertex: v, rates: rates[i] }]));
  svg.setAttribute("height", height);
  const defs = el("svg:defs", {}, el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
    markerWidth: "6", markerHeight: "6", orient: "auto" }, el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: "#94a3b8" })));
  const children = [defs];
  for (const n of nodes) {
    for (const input of n.inputs || []) {
      const from = pos[input.id];
      const to = pos[n.id];
      if (!from) continue;
      const x1 = from.x + 240, y1 = from.y + 50, x2 = to.x, y2 = to.y + 50;
      children.push(el("svg:path", { class: "edge", d: `M${x1},${y1} C${x1 + 30},${y1} ${x2 - 30},${y2} ${x2},${y2}` }));
      children.push(el("svg:text", { x: (x1 + x2) / 2 - 20, y: (y1 + y2) / 2 - 6 }, input.ship_strategy));
    }
  }
  for (const n of nodes) {
    const { vertex, rates: r } = byId[n.id];
    const p = pos[n.id];
    const ratio = r.backpressured / 1000;
    const level = ratio <= 0.1 ? "ok" : ratio <= 0.5 ? "low" : "high";
    const lines = [
      `${vertex.status} · parallelism ${vertex.parallelism}`,
      `in ${fmtRate(r.inRate)} · out ${fmtRate(r.outRate)}`,
      `busy ${Math.round(r.busy / 10)}% · backpressured ${Math.round(ratio * 100)}% (${level})`,
      `records ${vertex.metrics["read-records"]} in · ${vertex.metrics["write-records"]} out`,
    ];
    const group = el("svg:g", { class: `vertex bp-${level}`, "data-vertex-id": vertex.id,
      transform: `translate(${p.x},${p.y})` }, el("svg:rect", { width: 240, height: 100, rx: 6 }),
      el("svg:text", { x: 10, y: 18, "font-weight": "600" }, vertex.name.length > 34 ? `${vertex.name.slice(0, 33)}…` : vertex.name),
      ...lines.map((line, i) => el("svg:text", { x: 10, y: 38 + i * 16, class: "vertex-line" }, line)));
    children.push(group);
  }
  svg.replaceChildren(...children);
}

function renderCheckpointChart(history) {
  const svg = document.getElementById("checkpoint-chart");
  const done = history.slice().reverse();
  const width = Math.max(300, svg.clientWidth || 600), height = 160, pad = 36;
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  if (!done.length) { svg.replaceChildren(el("svg:text", { x: 10, y: 20 }, "no checkpoints yet")); return; }
  const maxDuration = Math.max(1, ...done.map((c) => c.end_to_end_duration));
  const maxSize = Math.max(1, ...done.map((c) => c.state_size));
  const step = (width - 2 * pad) / done.length;
  const children = [
    el("svg:text", { x: 4, y: 12 }, `duration (bars, max ${fmtDuration(maxDuration)})`),
    el("svg:text", { x: width - 230, y: 12 }, `state size (line, max ${fmtBytes(maxSize)})`),
  ];
  const points = [];
  done.forEach((c, i) => {
    const h = ((height - 2 * pad) * Math.max(0, c.end_to_end_duration)) / maxDuration;
    const x = pad + i * step;
    children.push(el("svg:rect", { class: c.status === "FAILED" ? "failed-bar" : "duration-bar",
      x: x + step * 0.15, y: height - pad - h, width: step * 0.7, height: Math.max(1, h), "data-checkpoint-id": c.id }));
    children.push(el("svg:text", { x: x + step * 0.3, y: height - pad + 14 }, String(c.id)));
    points.push(`${x + step / 2},${height - pad - ((height - 2 * pad) * c.state_size) / maxSize}`);
  });
  children.push(el("svg:polyline", { class: "size-line", points: points.join(" ") }));
  svg.replaceChildren(...children);
}

async function renderCheckpoints(jobId) {
  const stats = await apiOrNull(`jobs/${jobId}/checkpoints`);
  const counts = document.getElementById("checkpoint-counts");
  const body = document.querySelector("#checkpoint-history tbody");
  if (!stats) {
    counts.textContent = "checkpointing is not enabled for this job";
    body.replaceChildren();
    renderCheckpointChart([]);
    return;
  }
  const c = stats.counts;
  counts.textContent = `${c.completed} completed · ${c.failed} failed · ${c.in_progress} in progress` +
    (stats.latest.completed ? ` · latest ${stats.latest.completed.id} took ${fmtDuration(stats.latest.completed.end_to_end_duration)}` : "");
  body.replaceChildren(...stats.history.map((cp) => el("tr", { "data-checkpoint-id": cp.id, "data-status": cp.status },
    el("td", {}, String(cp.id)), el("td", {}, cp.status), el("td", {}, cp.checkpoint_type),
    el("td", {}, fmtTime(cp.trigger_timestamp)), el("td", {}, fmtDuration(cp.end_to_end_duration)),
    el("td", {}, fmtBytes(cp.state_size)), el("td", {}, fmtBytes(cp.persisted_data)),
    el("td", {}, `${cp.num_acknowledged_subtasks}/${cp.num_subtasks}`))));
  renderCheckpointChart(stats.history.filter((cp) => cp.status !== "IN_PROGRESS"));
}

async function renderExceptions(jobId) {
  const exceptions = await api(`jobs/${jobId}/exceptions`);
  const box = document.getElementById("exceptions");
  const entries = exceptions.exceptionHistory.entries;
  if (!entries.length) { box.replaceChildren(el("p", { class: "muted" }, "no exceptions")); return; }
  box.replaceChildren(...entries.map((e) => el("div", { class: "exception" },
    el("strong", {}, e.exceptionName), ` · ${fmtTime(e.timestamp)} · ${e.taskName || "global failure"}` +
      (e.location ? ` · ${e.location}` : ""), el("pre", {}, e.stacktrace))));
}

async function renderRescales(jobId) {
  const rescales = await apiOrNull(`jobs/${jobId}/rescales`);
  const box = document.getElementById("rescales");
  const events = rescales ? rescales.rescales : [];
  if (!events.length) { box.replaceChildren(el("p", { class: "muted" }, "no rescales")); return; }
  const widest = (parallelism) => Math.max(...Object.values(parallelism));
  box.replaceChildren(...events.slice().reverse().map((r) => el("div", { class: "rescale" },
    el("strong", {}, `parallelism ${widest(r.parallelismBefore)} → ${widest(r.parallelismAfter)}`),
    ` · ${fmtTime(r.timestamp)} · ${r.cause} · through checkpoint ${r.checkpoint} · ${fmtDuration(r.durationMs)}`)));
}

async function refreshJob() {
  const jobId = state.selected;
  const section = document.getElementById("job");
  if (!jobId) { section.hidden = true; return; }
  const job = await api(`jobs/${jobId}`);
  section.hidden = false;
  document.getElementById("job-name").textContent = job.name;
  const badge = document.getElementById("job-state");
  badge.textContent = job.state;
  badge.className = `badge ${job.state}`;
  document.getElementById("job-duration").textContent = `${fmtDuration(job.duration)} · ${job.jid}`;
  const cancel = document.getElementById("cancel-job");
  cancel.hidden = !(state.config.features["web-cancel"] && ["RUNNING", "RESTARTING", "CREATED"].includes(job.state));
  await Promise.all([renderGraph(job), renderCheckpoints(jobId), renderExceptions(jobId), renderRescales(jobId)]);
}

async function refresh() {
  const status = document.getElementById("refresh-status");
  try {
    await refreshCluster();
    await refreshJob();
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.refreshed = String((Number(document.body.dataset.refreshed) || 0) + 1);
  } catch (error) {
    status.textContent = `cannot reach the cluster (${error.message}); retrying`;
  }
}

async function main() {
  state.config = await api("config");
  if (location.hash.length > 1) state.selected = location.hash.slice(1);
  window.addEventListener("hashchange", () => { state.selected = location.hash.slice(1); refresh(); });
  document.getElementById("cancel-job").addEventListener("click", async () => {
    if (state.selected && confirm(`Cancel job ${state.selected}?`)) {
      await fetch(`jobs/${state.selected}?mode=cancel`, { method: "PATCH" });
      refresh();
    }
  });
  await refresh();
  state.timer = setInterval(refresh, state.config["refresh-interval"]);
}

main();
