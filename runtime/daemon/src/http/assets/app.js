// agentd's dashboard: plain JavaScript over the HTTP API (/api/v1, the socket's methods and types).
// Views: #/ (tasks, submit), #/task/ID (events live, charts per role, gauge, transcript, actions),
// #/evidence (list, verify), #/evidence/ID (metadata, paged reading), #/memory (the notes agentd
// remembers: edit, delete, undo, each note's changes). Nothing is fetched from
// anywhere but this daemon.
"use strict";

const API = "/api/v1";
const ACTIVE = ["queued", "running", "waiting_retry"];
const CATEGORIES = [
  ["system", "system"], ["tools", "tools"], ["instructions", "instructions"], ["memory", "memory"],
  ["objective", "objective"], ["checkpoint", "checkpoint"],
  ["observations", "observations"], ["files", "files"], ["messages", "recent"], ["thinking", "thinking"],
];

// What the browser tests (and a curious person with the console) can look at.
window.agentd = { charts: {}, costCharts: {}, events: [], ready: false };

// ---------------------------------------------------------------------------------------------
// Helpers

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, options = {}) {
  const init = { method: options.method || "GET", headers: {}, credentials: "same-origin" };
  if (init.method !== "GET") {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body || {});
  }
  const response = await fetch(API + path, init);
  const text = await response.text();
  let value = null;
  try { value = text ? JSON.parse(text) : null; } catch (_) { value = null; }
  if (!response.ok) {
    const error = value && value.error ? value.error : { code: 0, message: text || response.statusText };
    if (response.status === 401) notice("Not logged in: run `agentd dashboard` and open the URL it prints.");
    throw new ApiError(response.status, error.code, error.message);
  }
  return value;
}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "style") el.setAttribute("style", v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (sel, root = document) => root.querySelector(sel);
const num = n => (n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US"));
const tokens = (n, estimated) => (estimated ? "~" : "") + num(n);
const pct = (a, b) => (b ? Math.round((100 * a) / b) : 0);
const short = (s, n) => { s = String(s || "").replace(/\s+/g, " ").trim(); return s.length > n ? s.slice(0, n - 1) + "…" : s; };
const time = at => (at ? new Date(at).toLocaleTimeString("en-GB") : "");
const seconds = at => Date.parse(at) / 1000;

function age(at) {
  let s = Math.max(0, Math.round((Date.now() - Date.parse(at)) / 1000));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

function stateBadge(state, id) {
  return h("span", { class: `state ${state}`, id }, state.replace("_", " "));
}

function evidenceLink(id) {
  return h("a", { href: `#/evidence/${encodeURIComponent(id)}`, class: "mono" }, id);
}

function notice(text) {
  const el = $("#notice");
  if (!text) { el.hidden = true; return; }
  el.textContent = text;
  el.hidden = false;
}

function showError(container, e) {
  container.replaceChildren(h("p", { class: "bad error" }, `${e.message}${e.code ? ` (${e.code})` : ""}`));
}

// ---------------------------------------------------------------------------------------------
// Router: each view draws into <main> and returns what stops it (timers, streams, charts).

let stopView = () => {};

function route() {
  stopView();
  stopView = () => {};
  notice("");
  window.agentd.ready = false;
  window.agentd.charts = {};
  window.agentd.costCharts = {};
  const main = $("#main");
  main.replaceChildren();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  let stop;
  if (parts[0] === "task" && parts[1]) stop = taskView(main, parts[1]);
  else if (parts[0] === "evidence" && parts[1]) stop = evidenceItemView(main, parts[1], params);
  else if (parts[0] === "evidence") stop = evidenceListView(main, params);
  else if (parts[0] === "memory") stop = memoryView(main, params);
  else stop = tasksView(main);
  stopView = stop || (() => {});
}

async function daemonLine() {
  try {
    const d = await api("/daemon");
    const storage = d.storage.ok ? "storage ok" : `storage failing: ${d.storage.error || ""}`;
    $("#daemon").textContent = `agentd ${d.version} · ${d.tasks_running} running · ${storage}`;
  } catch (_) { /* the notice says why */ }
}

// ---------------------------------------------------------------------------------------------
// Tasks

function tasksView(main) {
  const error = h("p", { class: "bad", id: "submit-error" });
  const form = h("form", { id: "submit", class: "card" },
    h("h3", {}, "Submit a task"),
    h("div", { class: "field" }, h("label", { for: "objective" }, "Objective"),
      h("textarea", { id: "objective", name: "objective", required: true, placeholder: "Fix the failing test in src/parser.rs" })),
    h("div", { class: "grid" },
      h("div", { class: "field" }, h("label", { for: "workspace" }, "Workspace (absolute path)"),
        h("input", { id: "workspace", name: "workspace", required: true, placeholder: "/home/me/src/project" })),
      h("div", { class: "field" }, h("label", { for: "team" }, "Team (optional)"),
        h("input", { id: "team", name: "team" }))),
    h("p", {}, h("button", { type: "submit", id: "submit-button" }, "Submit")),
    error);
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    error.textContent = "";
    const body = { objective: $("#objective").value, workspace: $("#workspace").value.trim() };
    if ($("#team").value.trim()) body.team = $("#team").value.trim();
    try {
      const r = await api("/tasks", { method: "POST", body });
      location.hash = `#/task/${r.task_id}`;
    } catch (e) {
      error.textContent = `${e.message} (${e.code})`;
    }
  });
  const body = h("tbody");
  const table = h("table", { id: "tasks" },
    h("thead", {}, h("tr", {}, h("th", {}, "state"), h("th", {}, "objective"), h("th", {}, "roles: tokens now / window"), h("th", {}, "age"))),
    body);
  main.append(h("h1", {}, "Tasks"), h("div", { class: "card" }, table), form);

  const statuses = new Map();
  let stopped = false;
  async function refresh() {
    let list;
    try { list = await api("/tasks"); } catch (e) { showError(body, e); return; }
    list.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
    const shown = list.slice(0, 50);
    await Promise.all(shown.map(async t => {
      const known = statuses.get(t.task_id);
      if (known && !ACTIVE.includes(t.state) && known.state === t.state) return;
      try { statuses.set(t.task_id, await api(`/tasks/${t.task_id}`)); } catch (_) { /* listed, not readable */ }
    }));
    if (stopped) return;
    const rows = shown.map(t => {
      const s = statuses.get(t.task_id);
      const roles = s ? Object.entries(s.roles).map(([role, r]) =>
        h("div", { class: "rolegauge", title: r.measured_by },
          h("span", { class: "mono" }, role),
          h("div", { class: "bar" }, h("span", { class: r.tokens > r.window ? "over" : "", style: `width:${Math.min(100, pct(r.tokens, r.window))}%` })),
          h("span", { class: r.estimated ? "estimated" : "" }, `${tokens(r.tokens, r.estimated)} / ${num(r.window)}`))) : [];
      return h("tr", { class: "link", "data-task": t.task_id, onclick: () => { location.hash = `#/task/${t.task_id}`; } },
        h("td", {}, stateBadge(t.state)),
        h("td", {}, h("a", { href: `#/task/${t.task_id}` }, short(t.objective, 110)), h("div", { class: "muted mono" }, t.task_id),
          t.budget ? h("div", { class: "muted", "data-budget": t.task_id }, budgetText(t.spent, t.budget)) : null),
        h("td", {}, roles.length ? roles : h("span", { class: "muted" }, "no request measured since the daemon started")),
        h("td", { title: t.created_at }, age(t.created_at)));
    });
    body.replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No tasks yet."))]));
    window.agentd.ready = true;
  }
  refresh();
  const timer = setInterval(refresh, 2000);
  return () => { stopped = true; clearInterval(timer); };
}

// ---------------------------------------------------------------------------------------------
// One task

function describe(e) {
  switch (e.kind) {
    case "task_started": return short(e.objective, 160);
    case "request_sent": return `${tokens(e.tokens, e.estimated)} tokens, ${pct(e.tokens, e.window)}% of ${num(e.window)} (${e.window_source}), trigger ${num(e.trigger_tokens)}`;
    case "response_received": return `${e.finish_reason}${e.usage ? ` · prompt ${num(e.usage.prompt_tokens)}${e.usage.cache_read_tokens ? ` (${num(e.usage.cache_read_tokens)} cached)` : ""} / completion ${num(e.usage.completion_tokens)}` : ""}${e.cost_usd !== undefined ? ` · ${usd(e.cost_usd)}` : ""}`;
    case "tool_called": return e.tool;
    case "tool_finished": return `${e.tool} ${e.interrupted ? "interrupted" : e.ok ? "ok" : "failed"}${e.result_tokens !== undefined ? ` · ${num(e.result_tokens)} tokens` : ""}`;
    case "compaction_started": return `${num(e.tokens_before)} tokens over the trigger ${num(e.trigger_tokens)} → to ${num(e.destination_tokens)}`;
    case "compaction_finished": return `${num(e.tokens_before)} → ${num(e.tokens_after)} tokens, ${e.batches} batches${e.cost_usd !== undefined ? `, ${usd(e.cost_usd)}` : ""}, archived${e.next_trigger_tokens !== undefined ? `; next past ${num(e.next_trigger_tokens)} (priced by the cache)` : ""}`;
    case "compaction_failed": return e.reason;
    case "retry_scheduled": return `${e.reason}, attempt ${e.attempt}/${e.max_attempts}, in ${(e.delay_ms / 1000).toFixed(1)} s`;
    case "window_learned": return `${num(e.old_window)} → ${num(e.new_window)} (${e.source})`;
    case "thinking_cleared": return `${e.blocks_removed} blocks, ${num(e.tokens_freed)} tokens freed`;
    case "memory_saved": return `${e.id} (${e.scope}): ${short(e.note, 140)}`;
    case "mcp_server_started": return `${e.server}: ${e.tools} tools`;
    case "mcp_server_failed": return `${e.server}: ${short(e.error, 300)}${e.will_retry_in_ms !== undefined ? ` · tried again after ${(e.will_retry_in_ms / 1000).toFixed(0)} s` : ""}`;
    case "agent_stalled": return `going in circles: it ${short(e.why, 160)}; told once, stopped if it keeps on`;
    case "delegated": return `to ${e.to_role}: ${short(e.objective, 120)}${e.limit_tokens ? ` · budget ${num(e.limit_tokens)} tokens` : ""}${e.deadline ? ` · until ${time(e.deadline)}` : ""}`;
    case "files_changed": return `${e.tool === "delegate" ? "merge of call" : "call"} #${e.call_seq}${e.working_copy ? " in its working copy" : ""}${e.interrupted ? " (found after a stop)" : ""}: ${e.files.length} file(s) +${e.lines_added} -${e.lines_removed} · ${short(e.files.map(f => f.path).join(", "), 120)}`;
    case "reverted": return `${e.to_seq !== undefined ? `every change after #${e.to_seq}` : `call #${e.call_seq}`}: ${e.files.length} file(s) put back${e.forced && e.forced.length ? `, overwriting ${e.forced.join(", ")}` : ""}`;
    case "cache_learned": return `${e.model} at ${e.server}: a cached token costs ${e.read_factor} (${e.source}), prefixes of ${num(e.min_tokens)}+ tokens`;
    case "cache_forgotten": return `${e.model} at ${e.server}: no longer cached; compactions unpriced`;
    case "checkpoint_failed": return `${e.call_id}: ${short(e.error, 200)} — this change is not recorded`;
    case "delegation_returned": return `from ${e.from_role}: ${short(e.summary, 120)}`;
    case "finish_rejected": return e.reason;
    case "task_finished": return short(e.summary, 200);
    case "task_failed": return short(e.error, 200);
    case "task_message": return short(e.text, 160);
    default: return "";
  }
}

function eventLine(e) {
  const terminal = ["task_finished", "task_failed", "task_cancelled", "task_interrupted"].includes(e.kind);
  const link = e.kind === "compaction_finished" ? e.archive_id : e.evidence_id || e.receipts_id;
  const bad = e.kind === "mcp_server_failed" || e.kind === "compaction_failed" || e.kind === "checkpoint_failed";
  const diff = e.kind === "files_changed" ? e.call_seq : e.kind === "reverted" ? e.seq : null;
  return h("div", { class: `${terminal ? "terminal" : ""} ${e.kind.startsWith("compaction") ? "compaction" : ""} ${bad ? "bad" : ""}`, "data-seq": e.seq, "data-kind": e.kind, title: e.at },
    h("span", { class: "seq" }, `#${e.seq}`), h("span", { class: "muted" }, time(e.at), " "),
    h("span", { class: "role" }, e.role), h("span", { class: "kind" }, e.kind), " ", describe(e),
    link ? [" ", evidenceLink(link)] : null,
    e.kind === "memory_saved" ? [" ", undoButton(e.id)] : null,
    diff !== null ? [" ", diffButton(e.task_id, `call=${diff}`)] : null);
}

// A diff from the task's checkpoints — one call's (or a delegation's merge, or a revert), or what a
// delegation did (`role` and `since`) — shown under the button that asked for it.
function diffButton(taskId, query) {
  const out = h("pre", { class: "diff", hidden: true });
  const button = h("button", { type: "button", class: "secondary small", "data-diff": query }, "diff");
  button.addEventListener("click", async () => {
    if (!out.hidden) { out.hidden = true; return; }
    try {
      const r = await api(`/tasks/${encodeURIComponent(taskId)}/diff?${query}`);
      out.textContent = r.unified || `no changes (${r.changes} recorded)`;
    } catch (e) { out.textContent = e.message; }
    out.hidden = false;
  });
  return h("span", {}, button, out);
}

// Undo a note the model saved, right from the event that says so.
function undoButton(id) {
  const out = h("span", { class: "muted" });
  const button = h("button", { type: "button", class: "secondary small", "data-undo": id }, "undo");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const r = await api("/memory/undo", { method: "POST", body: { id } });
      out.textContent = ` ${r.note.id} ${r.change.action}`;
    } catch (e) { out.textContent = ` ${e.message}`; button.disabled = false; }
  });
  return h("span", {}, button, out);
}

// The chart of one role: every request's tokens against the window over time, the trigger and
// destination as lines, compactions (before → after), refusals and learned windows as marks.
function chartData(events) {
  const rows = [];
  let window = null, trigger = null, destination = null;
  let lastX = -Infinity;
  const at = e => { let x = seconds(e.at); if (!(x > lastX)) x = lastX + 0.001; lastX = x; return x; };
  const sent = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.kind === "request_sent") {
      window = e.window; trigger = e.trigger_tokens;
      if (e.destination_tokens !== undefined) destination = e.destination_tokens;
      const row = { x: at(e), tokens: e.tokens, estimated: e.estimated, refused: false };
      sent.push(row);
      rows.push(row);
    } else if (e.kind === "response_received") {
      if (sent.length) sent[sent.length - 1].answered = true;
    } else if (e.kind === "compaction_started") {
      destination = e.destination_tokens; trigger = e.trigger_tokens; window = e.window;
      rows.push({ x: at(e), compaction: e.tokens_before });
    } else if (e.kind === "compaction_finished") {
      rows.push({ x: at(e), compaction: e.tokens_after });
    } else if (e.kind === "window_learned") {
      window = e.new_window;
      rows.push({ x: at(e), learned: e.new_window });
    } else {
      continue;
    }
    const row = rows[rows.length - 1];
    row.window = window; row.trigger = trigger; row.destination = destination;
  }
  // A request with no answer before the role's next one was refused (or failed).
  for (let i = 0; i + 1 < sent.length; i++) if (!sent[i].answered) sent[i].refused = true;
  const col = f => rows.map(r => (f(r) === undefined ? null : f(r)));
  return [
    col(r => r.x),
    col(r => (r.tokens !== undefined ? r.tokens : undefined)),
    col(r => (r.tokens !== undefined && r.estimated ? r.tokens : undefined)),
    col(r => r.window),
    col(r => r.trigger),
    col(r => r.destination),
    col(r => r.compaction),
    col(r => (r.refused ? r.tokens : undefined)),
    col(r => r.learned),
  ];
}

// The cost of one role: each answer's and each compaction's cost (from `[prices]`), and the sum so far.
function costData(events) {
  const x = [], each = [], compaction = [], total = [];
  let sum = 0, lastX = -Infinity;
  for (const e of events) {
    if (e.cost_usd === undefined || !["response_received", "compaction_finished"].includes(e.kind)) continue;
    let t = seconds(e.at); if (!(t > lastX)) t = lastX + 0.001; lastX = t;
    sum += e.cost_usd;
    x.push(t); total.push(sum);
    each.push(e.kind === "response_received" ? e.cost_usd : null);
    compaction.push(e.kind === "compaction_finished" ? e.cost_usd : null);
  }
  return [x, each, compaction, total];
}

const usd = v => (v === null || v === undefined ? "–" : v >= 1 ? `$${v.toFixed(2)}` : `$${v.toFixed(4)}`);

function makeCostChart(container, role) {
  const css = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const opts = {
    title: `${role}: cost per request and in all (USD)`,
    width: Math.max(320, container.clientWidth || 700),
    height: 180,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1e-6, max) * 1.05] } },
    axes: [{}, { values: (u, vals) => vals.map(usd), size: 70 }],
    series: [
      {},
      { label: "request", stroke: css("--accent"), paths: () => null, points: { show: true, size: 6, fill: css("--accent") }, value: (u, v) => usd(v) },
      { label: "compaction", stroke: css("--bad"), paths: () => null, points: { show: true, size: 9, fill: css("--bad") }, value: (u, v) => usd(v) },
      { label: "in all", stroke: css("--fg"), width: 1.5, points: { show: false }, value: (u, v) => usd(v) },
    ],
  };
  return new uPlot(opts, [[], [], [], []], container);
}

/** What was spent against a budget: `48,210 / 50,000 tokens · $0.41 / $1.00`. */
function budgetText(spent, budget) {
  const parts = [];
  if (budget.tokens !== undefined) parts.push(`${num(spent.tokens)} / ${num(budget.tokens)} tokens`);
  if (budget.cost !== undefined) parts.push(`${usd(spent.cost || 0)} / ${usd(budget.cost)}`);
  return parts.join(" · ");
}

function spentText(s) {
  const cache = s.cache_read_tokens ? ` (${num(s.cache_read_tokens)} from the cache)` : "";
  const cost = s.cost_usd !== undefined ? ` · ${usd(s.cost_usd)}` : "";
  const c = s.compaction || {};
  const comp = c.compactions ? ` · ${c.compactions} compactions: ${c.requests} summary requests, ${num(c.tokens)} tokens${c.cost_usd !== undefined ? `, ${usd(c.cost_usd)}` : ""}` : "";
  return `${s.requests} requests · prompt ${num(s.prompt_tokens)}${cache} · completion ${num(s.completion_tokens)}${cost}${comp}`;
}

function makeChart(container, role) {
  const kfmt = v => (v === null ? "–" : v >= 1000 ? `${(v / 1000).toFixed(v >= 100000 ? 0 : 1)}k` : String(v));
  const css = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const noLine = () => null;
  const opts = {
    title: `${role}: tokens per request against the window`,
    width: Math.max(320, container.clientWidth || 700),
    height: 280,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] } },
    axes: [{}, { values: (u, vals) => vals.map(kfmt), size: 60 }],
    series: [
      {},
      { label: "tokens", stroke: css("--accent"), width: 2, points: { show: true, size: 5 }, value: (u, v) => kfmt(v) },
      { label: "estimated", stroke: css("--est"), paths: noLine, points: { show: true, size: 8, fill: "transparent" }, value: (u, v) => (v === null ? "–" : `~${kfmt(v)}`) },
      { label: "window", stroke: css("--fg"), width: 1.5, points: { show: false }, paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => kfmt(v) },
      { label: "trigger", stroke: css("--bad"), dash: [6, 4], points: { show: false }, paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => kfmt(v) },
      { label: "destination", stroke: css("--ok"), dash: [6, 4], points: { show: false }, paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => kfmt(v) },
      { label: "compaction (before → after)", stroke: css("--bad"), width: 3, spanGaps: false, points: { show: true, size: 9, fill: css("--bad") }, value: (u, v) => kfmt(v) },
      { label: "refused", stroke: css("--bad"), paths: noLine, points: { show: true, size: 12, width: 3, fill: "transparent" }, value: (u, v) => kfmt(v) },
      { label: "window learned", stroke: css("--warn"), paths: noLine, points: { show: true, size: 11, fill: css("--warn") }, value: (u, v) => kfmt(v) },
    ],
  };
  return new uPlot(opts, [[], [], [], [], [], [], [], [], []], container);
}

function gaugeView(g) {
  if (g.measured === false) return h("p", { class: "muted" }, g.note);
  const est = g.estimated;
  const total = Math.max(g.window, g.tokens, 1);
  const colors = { system: "--c-system", tools: "--c-tools", instructions: "--c-instructions", memory: "--c-memory", objective: "--c-objective", checkpoint: "--c-checkpoint", observations: "--c-observations", files: "--c-files", messages: "--c-recent", thinking: "--c-thinking" };
  const stack = h("div", { class: "stack", title: `${tokens(g.tokens, est)} of ${num(g.window)}` },
    CATEGORIES.map(([key, label]) => h("span", { title: `${label} ${tokens(g.categories[key], est)}`, style: `width:${(100 * g.categories[key]) / total}%;background:var(${colors[key]})` })),
    h("i", { class: "trigger", title: `trigger ${num(g.trigger_tokens)}`, style: `left:${(100 * g.trigger_tokens) / total}%` }),
    h("i", { class: "destination", title: `destination ${num(g.destination_tokens)}`, style: `left:${(100 * g.destination_tokens) / total}%` }));
  const legend = h("div", { class: "legend" },
    CATEGORIES.map(([key, label]) => [
      h("span", { class: "swatch", style: `background:var(${colors[key]})` }), h("span", {}, label),
      h("span", { class: `mono ${est ? "estimated" : ""}`, "data-category": label }, tokens(g.categories[key], est))]),
    h("span"), h("strong", {}, "total"), h("strong", { class: `mono ${est ? "estimated" : ""}`, "data-category": "total" }, tokens(g.tokens, est)),
    h("span"), h("span", {}, "free"), h("span", { class: `mono ${est ? "estimated" : ""}` }, tokens(g.free_tokens, est)));
  return h("div", { class: "gauge", "data-estimated": est ? "true" : "false" },
    h("div", { class: "muted" }, `${g.model} · window ${num(g.window)} (${g.window_source}) · counted by ${g.measured_by || g.count_source}`),
    est ? h("div", { class: "estimated" }, "~ estimated: counted by an estimate, not the model's tokenizer") : null,
    h("p", {}, stack),
    h("div", { class: "muted" }, `trigger ${num(g.trigger_tokens)} (${g.trigger_priced ? "priced by the prompt cache" : `${g.compact_at}%`}) · destination ${num(g.destination_tokens)}`),
    g.prompt_cache ? h("div", { class: "muted", "data-cache": g.prompt_cache.source }, `prompt cache ${g.prompt_cache.source}: a cached token costs ${g.prompt_cache.read_factor}, prefixes of ${num(g.prompt_cache.min_tokens)}+ tokens`) : null,
    legend);
}

function recordView(entry) {
  // A log entry is its record with the record's seq beside it.
  const r = entry;
  const who = role => h("span", { class: "who" }, `#${entry.seq} ${role}`);
  if (r.type === "message") {
    const m = r.message;
    const parts = (m.parts || []).map(p => {
      if (p.type === "text") return short(p.text, 400);
      if (p.type === "thinking") return `(thinking) ${short(p.text, 200)}`;
      if (p.type === "tool_call") return `→ ${p.name} ${short(p.arguments, 200)}`;
      if (p.type === "tool_result") return `← ${short(p.content, 300)}`;
      return `(${p.type})`;
    });
    return h("div", { class: `message ${m.kind || ""}` }, who(r.role), h("strong", {}, m.role), m.kind ? h("span", { class: "muted" }, ` (${m.kind.replace("_", " ")})`) : null, " ", parts.join(" | "));
  }
  if (r.type === "system") {
    return h("div", { class: "checkpoint", "data-archive": r.archive_id || "" }, who(r.role),
      h("strong", {}, `checkpoint: ${r.subtype.replace("_", " ")}`), ` — the history is now ${r.history.length} messages`,
      r.archive_id ? [" · what left the request is archived as ", evidenceLink(r.archive_id)] : null,
      h("details", {}, h("summary", {}, "what the checkpoint kept"),
        h("pre", {}, r.history.map(m => `${m.role}: ${short((m.parts || []).map(p => p.text || p.content || p.arguments || "").join(" "), 600)}`).join("\n"))));
  }
  if (r.type === "receipt") {
    const c = r.receipt;
    return h("div", { class: "receipt muted" }, who(r.role), `receipt: ${c.tool} ${short(c.arguments, 120)} → ${c.ok ? "ok" : "failed"} ${short(c.outcome, 160)}`,
      c.evidence_id ? [" ", evidenceLink(c.evidence_id)] : null);
  }
  if (r.type === "event" && r.event.kind === "compaction_finished") {
    const e = r.event;
    return h("div", { class: "checkpoint compaction-event" }, who(e.role),
      `compaction: ${num(e.tokens_before)} → ${num(e.tokens_after)} tokens; archived `, evidenceLink(e.archive_id));
  }
  return null;
}

function taskView(main, taskId) {
  const head = h("div", { class: "card", id: "task-head" }, h("p", { class: "muted" }, "Loading…"));
  const actions = h("div", { class: "card", id: "actions" });
  const roles = h("div", { id: "roles" });
  const team = h("div", { class: "card team", id: "team" }, h("p", { class: "muted" }, "the lead has delegated nothing yet"));
  const events = h("div", { class: "events", id: "events" });
  const streamState = h("span", { id: "stream-state", class: "muted" }, "connecting…");
  const transcript = h("div", { class: "transcript card", id: "transcript" });
  main.append(head, actions, h("h2", {}, "Team"), team, h("h2", {}, "Context per role"), roles,
    h("h2", {}, "Events ", streamState), events,
    h("h2", {}, "Transcript ", h("span", { class: "muted" }, "(messages, checkpoints and what each compaction archived)")), transcript);

  const state = { events: [], status: null, roleViews: new Map(), lastRecord: 0, source: null, stopped: false, timer: null };
  window.agentd.events = state.events;

  function roleView(role) {
    if (state.roleViews.has(role)) return state.roleViews.get(role);
    const chart = h("div", { class: "chart", id: `chart-${role}` });
    const gauge = h("div", { id: `gauge-${role}` }, h("p", { class: "muted" }, "no gauge yet"));
    const marks = h("ul", { class: "marks compactions", id: `compactions-${role}` });
    // A compaction on request: made now when the task has stopped, before the role's next request
    // while it runs; the focus goes to the summariser.
    const focus = h("input", { placeholder: "focus (optional): what the summary must keep", size: 40, "data-compact-focus": role });
    const compactOut = h("span", { class: "muted", "data-compact-result": role });
    const compact = h("button", { type: "submit", class: "secondary", "data-compact": role }, "Compact now");
    const compactForm = h("form", { class: "inline" }, compact, focus, compactOut);
    compactForm.addEventListener("submit", async ev => {
      ev.preventDefault();
      compactOut.textContent = "";
      try {
        const r = await api(`/tasks/${taskId}/compact`, { method: "POST", body: { role, focus: focus.value.trim() || undefined } });
        compactOut.textContent = r.scheduled ? " scheduled before its next request" : ` ${num(r.tokens_before)} → ${num(r.tokens_after)} tokens`;
        refreshSoon();
      } catch (e) { compactOut.textContent = ` ${e.message}`; }
    });
    const costChart = h("div", { class: "chart cost", id: `cost-${role}`, hidden: true });
    const card = h("div", { class: "card role", "data-role": role },
      h("h3", {}, role),
      h("div", { class: "roles" }, h("div", {}, chart, costChart, marks), gauge), compactForm);
    roles.append(card);
    const view = { chart: null, chartEl: chart, gauge, marks, costChart, costEl: costChart };
    state.roleViews.set(role, view);
    view.chart = makeChart(chart, role);
    window.agentd.charts[role] = view.chart;
    return view;
  }

  function redrawRole(role) {
    const view = roleView(role);
    const mine = state.events.filter(e => e.role === role);
    view.chart.setData(chartData(mine));
    const cost = costData(mine);
    if (cost[0].length) {
      if (view.costEl.hidden) {
        view.costEl.hidden = false;
        view.costChart = makeCostChart(view.costEl, role);
        window.agentd.costCharts[role] = view.costChart;
      }
      view.costChart.setData(cost);
    }
    const started = new Map();
    const items = [];
    for (const e of mine) {
      if (e.kind === "compaction_started") started.set(e.role, e);
      if (e.kind === "compaction_finished") {
        const paid = e.cost_usd !== undefined ? `, its summaries cost ${usd(e.cost_usd)}${e.summary_model ? ` (${e.summary_model})` : ""}` : "";
        items.push(h("li", { "data-archive": e.archive_id }, `${time(e.at)} compaction: ${num(e.tokens_before)} → ${num(e.tokens_after)} tokens (${num(e.tokens_before - e.tokens_after)} freed)${paid}, archived `, evidenceLink(e.archive_id)));
      }
      if (e.kind === "compaction_failed") items.push(h("li", { class: "bad" }, `${time(e.at)} compaction failed: ${e.reason}`));
      if (e.kind === "window_learned") items.push(h("li", {}, `${time(e.at)} window learned: ${num(e.old_window)} → ${num(e.new_window)} (${e.source})`));
    }
    view.marks.replaceChildren(...items);
  }

  async function refreshStatus() {
    try {
      state.status = await api(`/tasks/${taskId}`);
    } catch (e) { showError(head, e); return; }
    const s = state.status;
    head.replaceChildren(...[
      h("h1", {}, short(s.objective, 300)),
      h("p", {}, stateBadge(s.state, "task-state"), " ", h("span", { class: "mono muted" }, s.task_id),
        " · workspace ", h("span", { class: "mono" }, s.workspace), " · ", h("span", { title: s.created_at }, `age ${age(s.created_at)}`)),
      s.result ? h("p", { id: "task-result" }, h("strong", {}, "result: "), s.result) : null,
      s.error ? h("p", { class: "bad", id: "task-error" }, h("strong", {}, "error: "), s.error) : null,
      ...(s.mcp_down || []).map(d => h("p", { class: "bad", "data-mcp-down": d.server },
        h("strong", {}, `MCP server ${d.server} is down: `), d.error, d.retry_at ? ` (tried again after ${time(d.retry_at)})` : "")),
      s.spent && s.spent.requests ? h("p", { id: "task-spent" }, h("strong", {}, "spent: "), spentText(s.spent)) : null,
      s.budget ? h("p", { id: "task-budget", class: s.state === "paused" ? "bad" : "" }, h("strong", {}, "budget: "),
        budgetText({ tokens: s.spent.prompt_tokens + s.spent.completion_tokens, cost: s.spent.cost_usd }, s.budget),
        s.state === "paused" ? " — reached: raise it with Resume and a new budget (agentd resume TASK --budget-tokens N)" : "") : null,
      s.resume_at ? h("p", { id: "task-resume-at" }, h("strong", {}, "goes on: "), `by itself at ${new Date(s.resume_at).toLocaleString("en-GB")}`) : null,
      h("p", {}, h("a", { href: `#/evidence?task=${s.task_id}` }, "this task's evidence"))].filter(Boolean));
    drawActions(s);
    const names = new Set(["lead", ...Object.keys(s.roles), ...state.events.filter(e => e.kind === "request_sent").map(e => e.role)]);
    await Promise.all([...names].map(async role => {
      const view = roleView(role);
      try { view.gauge.replaceChildren(gaugeView(await api(`/tasks/${taskId}/context/${encodeURIComponent(role)}`))); } catch (e) { showError(view.gauge, e); }
    }));
  }

  // Built once, so a refresh never wipes a follow-up being typed; each refresh sets what is
  // allowed in the task's state.
  let controls = null;
  function drawActions(s) {
    if (!controls) {
      const out = h("span", { class: "bad", id: "action-error" });
      // Resume and a follow-up start the task again: its stream (ended) is followed again from
      // the last event this page has. A cancel ends the stream that is open.
      const act = async (path, body) => {
        out.textContent = "";
        try {
          await api(`/tasks/${taskId}/${path}`, { method: "POST", body });
          if (path !== "cancel") follow();
          refreshSoon();
          return true;
        } catch (e) { out.textContent = `${e.message} (${e.code})`; return false; }
      };
      const text = h("input", { id: "followup", placeholder: "A follow-up for the lead", size: 60 });
      const send = h("button", { type: "submit" }, "Send follow-up");
      const form = h("form", { class: "inline", id: "message-form" }, text, send);
      form.addEventListener("submit", async ev => {
        ev.preventDefault();
        if (text.value.trim() && await act("message", { text: text.value })) text.value = "";
      });
      const cancel = h("button", { class: "danger", id: "cancel", onclick: () => act("cancel") }, "Cancel");
      // A paused task goes on with a new budget (tokens above what it spent); empty: as it is.
      const budget = h("input", { id: "resume-budget", type: "number", min: 1, placeholder: "new token budget", size: 14 });
      const resume = h("button", { class: "secondary", id: "resume", onclick: () => {
        const tokens = Number(budget.value);
        act("resume", tokens > 0 ? { budget: { tokens } } : undefined).then(ok => { if (ok) budget.value = ""; });
      } }, "Resume");
      actions.replaceChildren(h("div", { style: "display:flex;gap:.5em;flex-wrap:wrap;align-items:center" }, cancel, resume, budget, form, out));
      controls = { cancel, resume, send };
    }
    const active = ACTIVE.includes(s.state);
    controls.cancel.disabled = !active;
    controls.resume.disabled = !["interrupted", "failed", "waiting", "paused"].includes(s.state);
    controls.send.disabled = active || s.state === "cancelled";
  }

  async function refreshTranscript() {
    try {
      for (;;) {
        const page = await api(`/tasks/${taskId}/log?after_seq=${state.lastRecord}&limit=1000`);
        for (const entry of page.records) {
          state.lastRecord = Math.max(state.lastRecord, entry.seq);
          const el = recordView(entry);
          if (el) transcript.append(el);
        }
        if (page.records.length < 1000) break;
      }
    } catch (e) { transcript.append(h("p", { class: "bad" }, e.message)); }
  }

  function refreshSoon() {
    if (state.timer) return;
    state.timer = setTimeout(async () => {
      state.timer = null;
      if (state.stopped) return;
      await Promise.all([refreshStatus(), refreshTranscript()]);
    }, 250);
  }

  // The team as a tree: the lead, and under it each delegation (its agent, running or returned, its
  // working copy's patch and conflicts), newest last.
  function redrawTeam() {
    const branches = [];
    const calls = new Map();
    for (const e of state.events) {
      if (e.kind === "tool_called" && e.tool === "delegate") calls.set(e.call_id, e.seq);
      if (e.kind === "delegated") branches.push({ to: e.to_role, call: e.call_id, seq: calls.get(e.call_id), objective: e.objective, copy: !!e.working_copy, back: null, changed: false });
      if (e.kind === "files_changed") {
        const b = [...branches].reverse().find(b => b.to === e.role);
        if (b) b.changed = true;
      }
      if (e.kind === "delegation_returned") {
        const b = [...branches].reverse().find(b => !b.back && (e.call_id ? b.call === e.call_id : b.to === e.from_role));
        if (b) b.back = e;
      }
    }
    if (!branches.length) return;
    const item = b => {
      const st = !b.back ? "running" : b.back.failed ? "failed" : "returned";
      const patch = b.back && b.back.patch_evidence_id
        ? [" · patch ", evidenceLink(b.back.patch_evidence_id), ` ${b.back.files_changed || 0} file(s) +${b.back.lines_added || 0} -${b.back.lines_removed || 0}`,
           ...(b.back.conflicts || []).map(c => h("div", { class: "bad conflict" }, `conflict: ${c.path} (${c.kind}) at line(s) ${(c.lines || []).join(", ")} — their version `, c.evidence_id ? evidenceLink(c.evidence_id) : "deleted"))]
        : [];
      // What the delegation did: its agent's changes (in its copy, then merged) from its call on.
      const query = `role=${encodeURIComponent(b.to)}&since=${b.seq - 1}`;
      const diff = b.changed && b.seq !== undefined ? [" ", diffButton(taskId, query)] : [];
      return h("li", { class: `branch ${st}`, "data-branch": b.to },
        h("span", { class: "mono" }, b.to), ` ${st}${b.copy ? " (working copy)" : ""}: ${short(b.objective, 100)}`, ...patch, ...diff);
    };
    team.replaceChildren(h("div", { class: "mono" }, "lead"), h("ul", { class: "tree" }, ...branches.map(item)));
  }

  const touched = new Set();
  let drawQueued = false;
  function onEvent(e) {
    if (state.events.length && e.seq <= state.events[state.events.length - 1].seq) return;
    state.events.push(e);
    events.append(eventLine(e));
    while (events.childElementCount > 2000) events.firstElementChild.remove();
    events.scrollTop = events.scrollHeight;
    touched.add(e.role);
    if (e.kind === "delegated" || e.kind === "delegation_returned" || e.kind === "files_changed") redrawTeam();
    if (!drawQueued) {
      drawQueued = true;
      requestAnimationFrame(() => { drawQueued = false; for (const r of touched) redrawRole(r); touched.clear(); });
    }
    if (["request_sent", "response_received", "compaction_finished", "window_learned", "task_resumed", "task_message", "tool_finished", "task_started", "mcp_server_failed", "mcp_server_started"].includes(e.kind) || e.kind.startsWith("task_")) refreshSoon();
  }

  // The live stream: SSE from after the last event this page has, closed at the end it marks.
  function follow() {
    if (state.source || state.stopped) return;
    const after = state.events.length ? state.events[state.events.length - 1].seq : 0;
    const source = new EventSource(`${API}/tasks/${encodeURIComponent(taskId)}/events?after_seq=${after}`);
    state.source = source;
    streamState.textContent = "live";
    streamState.className = "ok";
    source.addEventListener("task.event", m => onEvent(JSON.parse(m.data)));
    source.addEventListener("task.end", m => {
      const end = JSON.parse(m.data);
      source.close();
      state.source = null;
      streamState.textContent = `ended: ${end.kind.replace("task_", "")}${end.recorded === false ? " (not recorded)" : ""}`;
      streamState.className = "muted";
      refreshSoon();
    });
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) { state.source = null; streamState.textContent = "disconnected"; streamState.className = "bad"; }
      else { streamState.textContent = "reconnecting…"; streamState.className = "muted"; }
    });
  }

  (async () => {
    await refreshStatus();
    await refreshTranscript();
    follow();
    window.agentd.ready = true;
  })();
  const resize = () => { for (const v of state.roleViews.values()) v.chart.setSize({ width: Math.max(320, v.chartEl.clientWidth), height: 280 }); };
  window.addEventListener("resize", resize);
  const ticker = setInterval(() => { if (state.status && ACTIVE.includes(state.status.state)) refreshSoon(); }, 5000);
  return () => {
    state.stopped = true;
    clearInterval(ticker);
    window.removeEventListener("resize", resize);
    if (state.source) state.source.close();
    for (const v of state.roleViews.values()) v.chart.destroy();
  };
}

// ---------------------------------------------------------------------------------------------
// Memory: the notes the model saved quoting the user; the user edits, deletes and undoes them.

function memoryView(main, params) {
  const deleted = params.get("deleted") === "true";
  const list = h("div", { id: "memory" }, h("p", { class: "muted" }, "Loading…"));
  const toggle = h("a", { href: deleted ? "#/memory" : "#/memory?deleted=true" }, deleted ? "hide deleted notes" : "show deleted notes");
  const undoLast = h("button", { type: "button", class: "secondary", id: "memory-undo" }, "Undo the latest change");
  const status = h("span", { class: "muted", id: "memory-status" });
  undoLast.addEventListener("click", async () => {
    try { const r = await api("/memory/undo", { method: "POST", body: {} }); status.textContent = ` ${r.note.id} ${r.change.action}`; load(); }
    catch (e) { status.textContent = ` ${e.message}`; }
  });
  main.append(h("h1", {}, "Memory"),
    h("p", { class: "muted" }, "What agentd remembers across tasks: notes the model saved with remember, each on your own words. They reach a task's requests when it starts (and at its compactions)."),
    h("div", { class: "card" }, undoLast, status, " ", toggle), list);
  async function load() {
    try {
      const notes = await api(`/memory${deleted ? "?deleted=true" : ""}`);
      list.replaceChildren(...(notes.length ? notes.map(noteCard) : [h("p", { class: "muted card" }, "No notes.")]));
      window.agentd.ready = true;
    } catch (e) { showError(list, e); }
  }
  function noteCard(n) {
    const text = h("textarea", { rows: 2, cols: 80, "data-note-text": n.id }, n.text);
    const out = h("span", { class: "muted" });
    const act = (path, body) => async () => {
      try { const r = await api(`/memory/${encodeURIComponent(n.id)}${path}`, { method: "POST", body }); out.textContent = ` ${r.change.action}`; load(); }
      catch (e) { out.textContent = ` ${e.message}`; }
    };
    const history = h("ul", { class: "muted" });
    const showHistory = h("button", { type: "button", class: "secondary small" }, "changes");
    showHistory.addEventListener("click", async () => {
      try {
        const d = await api(`/memory/${encodeURIComponent(n.id)}`);
        history.replaceChildren(...d.changes.map(c => h("li", {}, `#${c.seq} ${time(c.at)} ${c.action} by ${c.by === "user" ? "you" : `${c.role} in task ${c.task_id}`}${c.undoes ? ` (undoing #${c.undoes})` : ""}${c.after !== undefined ? `: ${short(c.after, 80)}` : ""}`)));
      } catch (e) { showError(history, e); }
    });
    const save = h("button", { type: "button" }, "Save");
    save.addEventListener("click", () => act("/edit", { text: text.value })());
    const del = h("button", { type: "button", class: "secondary" }, "Delete");
    del.addEventListener("click", act("/delete"));
    const undo = h("button", { type: "button", class: "secondary" }, "Undo");
    undo.addEventListener("click", async () => {
      try { const r = await api("/memory/undo", { method: "POST", body: { id: n.id } }); out.textContent = ` ${r.change.action}`; load(); }
      catch (e) { out.textContent = ` ${e.message}`; }
    });
    return h("div", { class: `card${n.deleted ? " muted" : ""}`, "data-note": n.id },
      h("p", {}, h("b", { class: "mono" }, n.id), " ", n.scope === "user" ? "every workspace" : h("span", { class: "mono" }, n.workspace), n.deleted ? h("span", { class: "bad" }, " deleted") : null),
      h("p", {}, "you said: ", h("q", {}, n.quote), " — ", h("a", { href: `#/task/${n.task_id}`, class: "mono" }, n.task_id)),
      text, h("div", {}, n.deleted ? null : [save, " ", del, " "], undo, " ", showHistory, out), history);
  }
  load();
}

// ---------------------------------------------------------------------------------------------
// Evidence

function verifyBox() {
  const out = h("div", { id: "verify-result" });
  const button = h("button", { class: "secondary", id: "verify" }, "Verify every blob");
  button.addEventListener("click", async () => {
    out.replaceChildren(h("span", { class: "muted" }, "re-hashing…"));
    try {
      const r = await api("/evidence/verify", { method: "POST" });
      out.replaceChildren(
        h("p", { class: r.problems.length ? "bad" : "ok" }, `${r.checked} checked, ${r.problems.length} problems`),
        h("ul", {}, r.problems.map(p => h("li", {}, evidenceLink(p.id), " ", p.problem))));
    } catch (e) { showError(out, e); }
  });
  return h("div", { class: "card" }, button, out);
}

function evidenceListView(main, params) {
  const task = params.get("task") || "";
  const filter = h("input", { id: "evidence-task", value: task, placeholder: "task id (blank: all)", size: 40 });
  const form = h("form", { class: "inline" }, h("label", { for: "evidence-task" }, "Task"), filter, h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", ev => { ev.preventDefault(); location.hash = filter.value.trim() ? `#/evidence?task=${filter.value.trim()}` : "#/evidence"; });
  const body = h("tbody");
  main.append(h("h1", {}, "Evidence"), h("div", { class: "card" }, form), verifyBox(),
    h("div", { class: "card" }, h("table", { id: "evidence" },
      h("thead", {}, h("tr", {}, ["id", "bytes", "lines", "from", "role", "detail", "created"].map(c => h("th", {}, c)))), body)));
  (async () => {
    try {
      const list = await api(`/evidence${task ? `?task_id=${encodeURIComponent(task)}` : ""}`);
      body.replaceChildren(...(list.length ? list.map(e => h("tr", { class: "link", "data-evidence": e.id, onclick: () => { location.hash = `#/evidence/${e.id}`; } },
        h("td", {}, evidenceLink(e.id)), h("td", {}, num(e.bytes)), h("td", {}, num(e.lines)),
        h("td", {}, e.source.tool), h("td", {}, e.source.role), h("td", { class: "mono" }, short(e.source.detail || "", 80)),
        h("td", {}, h("span", { title: e.created_at }, age(e.created_at)), e.complete ? "" : h("span", { class: "bad" }, " incomplete")))) :
        [h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No evidence."))]));
      window.agentd.ready = true;
    } catch (e) { showError(body, e); }
  })();
}

function evidenceItemView(main, id, params) {
  const meta = h("div", { class: "card", id: "evidence-meta" }, h("p", { class: "muted" }, "Loading…"));
  const unit = h("select", { id: "unit" }, h("option", { value: "lines" }, "lines"), h("option", { value: "bytes" }, "bytes"));
  const offset = h("input", { id: "offset", type: "number", min: 0, value: params.get("offset") || 0, size: 8 });
  const limit = h("input", { id: "limit", type: "number", min: 1, value: 200, size: 8 });
  const prev = h("button", { type: "button", class: "secondary", id: "prev" }, "◀ previous");
  const next = h("button", { type: "button", class: "secondary", id: "next" }, "next ▶");
  const where = h("span", { class: "muted", id: "page-where" });
  const page = h("pre", { id: "evidence-page", class: "card" });
  const form = h("form", { class: "inline card" }, h("label", {}, "unit"), unit, h("label", {}, "offset"), offset,
    h("label", {}, "limit"), limit, h("button", { type: "submit", id: "read" }, "Read"), prev, next, where);
  main.append(h("h1", {}, "Evidence ", h("span", { class: "mono" }, id)), meta, form, page, verifyBox());
  let total = 0;
  unit.addEventListener("change", () => { limit.value = unit.value === "lines" ? 200 : 16384; offset.value = 0; read(); });
  async function read() {
    try {
      const p = await api(`/evidence/${encodeURIComponent(id)}/read?unit=${unit.value}&offset=${offset.value}&limit=${limit.value}`);
      page.textContent = p.data;
      const end = p.offset + p.len;
      where.textContent = `${unit.value} ${num(p.offset)}–${num(end)} of ${unit.value === "lines" ? num(total) : num(p.total_bytes)}${p.next_offset === null || p.next_offset === undefined ? " (the end)" : ""}${p.complete ? "" : " · incomplete"}`;
      next.disabled = p.next_offset === null || p.next_offset === undefined;
      next.dataset.offset = next.disabled ? "" : p.next_offset;
      prev.disabled = p.offset === 0;
      window.agentd.ready = true;
    } catch (e) { showError(page, e); }
  }
  form.addEventListener("submit", ev => { ev.preventDefault(); read(); });
  next.addEventListener("click", () => { offset.value = next.dataset.offset; read(); });
  prev.addEventListener("click", () => { offset.value = Math.max(0, Number(offset.value) - Number(limit.value)); read(); });
  (async () => {
    try {
      const m = await api(`/evidence/${encodeURIComponent(id)}`);
      total = m.lines;
      const s = m.source;
      meta.replaceChildren(h("table", {}, h("tbody", {},
        [["id", m.id], ["sha256", m.sha256], ["size", `${num(m.bytes)} bytes, ${num(m.lines)} lines`], ["type", m.media_type],
         ["from", `${s.tool} (${s.role})${s.call_id ? `, call ${s.call_id}` : ""}`], ["detail", s.detail || ""],
         ["complete", m.complete ? "yes" : `no: ${m.incomplete_reason || ""}`], ["created", m.created_at]]
          .map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", { class: "mono" }, v)))),
        h("tr", {}, h("th", {}, "task"), h("td", {}, h("a", { href: `#/task/${s.task_id}`, class: "mono" }, s.task_id)))));
      await read();
    } catch (e) { showError(meta, e); }
  })();
}

// ---------------------------------------------------------------------------------------------

window.addEventListener("hashchange", route);
route();
daemonLine();
setInterval(daemonLine, 10000);
