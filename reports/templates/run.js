// The training page: curves from the run's data files (reports/run_data.py), loaded by <script> tags so the
// page works from file:// and from a static server; while the run is live it polls data/live.js and updates
// in place, keeping what the user set (axis, smoothing, log scale, zoom), which the URL also holds.
"use strict";
const P = pageData();  // {run, live, refresh, data, explain}
const DIR = P.data + "/";
const CHUNKS = new Map();  // chunk index -> its payload (full-resolution records)
const FULL_RECORDS = 6000;  // zoomed to at most this many records: draw every record from the chunks
let D = null;  // the overview (data/overview.js)
let arrived = null;

window.millraceData = (payload) => { arrived = payload; };
window.millraceLive = (payload) => { arrived = payload; };
window.millraceChunk = (payload) => { CHUNKS.set(payload.index, payload); };
window.millraceLoads = (payload) => { arrived = payload; };

function loadScript(src) {  // resolves with what the script handed over
  return new Promise((resolve, reject) => {
    arrived = null;
    const tag = document.createElement("script");
    tag.src = src;
    tag.onload = () => { tag.remove(); resolve(arrived); };
    tag.onerror = () => { tag.remove(); reject(new Error(`could not load ${src}`)); };
    document.head.appendChild(tag);
  });
}
const loadChunk = (index) => loadScript(`${DIR}chunk-${String(index).padStart(5, "0")}.js?v=${D.versions[index]}`);

// ---- state: what the user set, mirrored in the URL ----
const STATE = (() => {
  const q = new URLSearchParams(location.search);
  const num = (k) => (q.get(k) === null || q.get(k) === "" || isNaN(+q.get(k)) ? null : +q.get(k));
  return { x: ["step", "tokens", "time"].includes(q.get("x")) ? q.get("x") : "step",
    smooth: Math.max(0, Math.min(0.99, num("smooth") || 0)), log: q.get("log") === "1",
    from: num("from"), to: num("to"), metric: q.get("metric"), group: q.get("group"), step: num("step"),
    elog: q.get("elog") === "1", esmooth: Math.max(0, Math.min(0.95, num("esmooth") || 0)),
    logx: q.get("logx") === "1", per: perChart(q.get("charts") || "") };
})();
const settingsOf = (def) => chartSettingsOf(STATE.per, def.id, { smooth: STATE.smooth, log: STATE.log, logx: STATE.logx });
function saveState() {
  const q = new URLSearchParams(location.search);
  const put = (k, v, dflt) => (v === null || v === undefined || v === dflt ? q.delete(k) : q.set(k, String(v)));
  put("x", STATE.x, "step"); put("smooth", STATE.smooth, 0); put("log", STATE.log ? 1 : 0, 0);
  put("from", STATE.from === null ? null : Math.round(STATE.from)); put("to", STATE.to === null ? null : Math.round(STATE.to));
  put("metric", STATE.metric, null); put("group", STATE.group, null); put("step", STATE.step, null);
  put("elog", STATE.elog ? 1 : 0, 0); put("esmooth", STATE.esmooth, 0);
  put("logx", STATE.logx ? 1 : 0, 0); put("charts", perChartText(STATE.per), "");
  const query = q.toString();
  history.replaceState(null, "", location.pathname + (query ? "?" + query : "") + location.hash);
}

// ---- x axes: step, tokens or wall time; the overview's clock maps a step to the others ----
const X_LABELS = { step: "step", tokens: "tokens trained", time: "wall time since the first step" };
function duration(s) {
  if (s === null || s === undefined || !isFinite(s)) return "—";
  const a = Math.abs(s);
  if (a < 120) return fmt.sig(s, 4) + " s";
  if (a < 7200) return fmt.sig(s / 60, 4) + " min";
  if (a < 172800) return fmt.sig(s / 3600, 4) + " h";
  return fmt.sig(s / 86400, 4) + " d";
}
function interpolate(xs, ys, v) {  // ys at v on sorted xs, linear between neighbours
  if (!xs.length) return null;
  let lo = 0, hi = xs.length - 1;
  if (v <= xs[0]) return ys[0];
  if (v >= xs[hi]) return ys[hi];
  while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= v) lo = mid; else hi = mid; }
  if (ys[lo] === null || ys[hi] === null) return ys[lo] ?? ys[hi];
  return ys[lo] + (ys[hi] - ys[lo]) * (v - xs[lo]) / ((xs[hi] - xs[lo]) || 1);
}
const clockColumn = (x) => ({ step: D.clock.s, tokens: D.clock.t, time: D.clock.w }[x]);
const stepToX = (step) => (STATE.x === "step" ? step : interpolate(D.clock.s, clockColumn(STATE.x), step));
const xToStep = (v) => (STATE.x === "step" ? v : interpolate(clockColumn(STATE.x), D.clock.s, v));
const recordAt = (step) => interpolate(D.clock.s, D.clock.i, step);
const exact = (step) => Math.round(step).toLocaleString("en-US");  // a step is named in full: 14,006, not 14K
const xFormat = () => (STATE.x === "tokens" ? fmt.count : STATE.x === "time" ? duration : (v) => fmt.count(Math.round(v)));

// ---- the charts ----
const layerKeys = (prefix) => Object.keys(D.series).filter((k) => k.startsWith(prefix + "/layer "))
  .sort((a, b) => +a.split(" ").pop() - +b.split(" ").pop()).map((k) => [k, k.split("/")[1]]);
const present = (pairs) => pairs.filter(([k]) => D.series[k]);
const CHARTS = [
  { id: "c-loss", title: "Loss", y: "loss (nats per token)", keys: () => present([["loss", "loss"]]) },
  { id: "c-lr", title: "Learning rate", y: "learning rate", keys: () => present([["lr", "learning rate"]]) },
  { id: "c-grad", title: "Gradient norm", y: "L2 norm of the gradient", keys: () => present([["grad_norm", "grad norm (trained params)"]]) },
  { id: "c-param", title: "Parameter norm, with and without the router bias", y: "L2 norm",
    keys: () => present([["param_norm", "param norm (trained params)"], ["param_norm_with_router_bias", "param norm incl. router bias", [5, 3]]]) },
  { id: "c-aux", title: "Auxiliary losses added to the objective", y: "loss (nats per token, × coefficient)",
    keys: () => present([["aux_loss", "sequence balance loss (× coef)"], ["z_loss", "router z-loss (× coef)"]]) },
  { id: "c-skipped", title: "Skipped steps (a non-finite loss or gradient)", y: "steps", zero: true,
    keys: () => present([["skipped_steps", "skipped so far"], ["skipped", "this step skipped (1)", [5, 3]]]) },
  { id: "c-tps", title: "Tokens per second", y: "tokens / s", yFormat: fmt.count, zero: true, keys: () => present([["tokens_per_second", "tokens/s"]]) },
  { id: "c-mfu", title: "Model FLOPs utilisation", y: "MFU (% of peak)", yFormat: fmt.pct, zero: true, keys: () => present([["mfu", "MFU"]]) },
  { id: "c-wait", title: "Share of step time waiting for data", y: "% of step time", yFormat: fmt.pct, zero: true,
    keys: () => present([["data_wait_fraction", "data wait"]]) },
  { id: "c-steptime", title: "Step time", y: "seconds per step", zero: true, keys: () => present([["step_seconds", "step time"]]) },
  { id: "c-memory", title: "Memory", y: "bytes", yFormat: fmt.count, zero: true,
    keys: () => present([["memory_rss_bytes", "resident set (CPU)"], ["cuda_allocated_bytes", "CUDA allocated"], ["cuda_reserved_bytes", "CUDA reserved"]]) },
  { id: "c-bias", title: "Router bias norm per layer", y: "L2 norm of the bias", keys: () => layerKeys("router_bias.norm") },
  { id: "c-biasmax", title: "Router bias max |b| per layer", y: "max |bias|", keys: () => layerKeys("router_bias.max_abs") },
  { id: "c-viol", title: "Expert load max-violation per layer", y: "max-violation (% over even)", yFormat: fmt.pct,
    keys: () => layerKeys("expert_load.max_violation") },
  { id: "c-loadent", title: "Expert load entropy per layer, over the alert's window", y: "fraction of log E",
    keys: () => (layerKeys("expert_load.window_entropy").length ? layerKeys("expert_load.window_entropy") : layerKeys("expert_load.entropy")),
    threshold: () => (D.health || {}).load_entropy_min },
  { id: "c-dead", title: "Dead experts per layer", y: "experts with no token", zero: true, keys: () => layerKeys("expert_load.dead_experts") },
  { id: "c-entropy", title: "Routing (router score) entropy per layer", y: "fraction of log E", keys: () => layerKeys("expert_load.router_entropy") },
  { id: "c-groups", title: "Parameter norm per group (gradient-trained; the router bias is charted apart)", y: "L2 norm",
    keys: () => Object.keys(D.series).filter((k) => k.startsWith("param_norm_per_group/")).sort().map((k) => [k, k.slice(21)]) },
  { id: "c-cell", title: "Loss per cell (batches that held the cell)", y: "loss (nats per token)",
    keys: () => present(D.drawn_cells.map((c) => [`loss_per_cell/${c}`, c])) },
  { id: "c-source", title: "Loss per source (batches that held the source)", y: "loss (nats per token)",
    keys: () => Object.keys(D.series).filter((k) => k.startsWith("loss_per_source/")).sort().map((k) => [k, k.slice(16)]) },
];
const BUILT = new Map();  // chart id -> {chart, signature}

// Every charted scalar of the metrics record that no chart above shows gets a chart of its own under "Other
// metrics", titled by its field name: a new metric reaches the page without touching the page.
function otherMetrics() {
  const named = new Set(CHARTS.filter((def) => !def.other).flatMap((def) => def.keys().map(([k]) => k)));
  const section = $("other-metrics"), grid = $("other-charts");
  for (const key of Object.keys(D.series).sort()) {
    if (key.includes("/") || named.has(key) || CHARTS.some((def) => def.other === key)) continue;
    const id = `c-other-${key.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    h("div", { id, class: "run-chart" }, grid);
    CHARTS.push({ id, other: key, title: key, y: key, keys: () => present([[key, key]]) });
  }
  section.hidden = !CHARTS.some((def) => def.other);
}

// Which chunks the zoomed range needs, or null when the overview is already every record (or too wide).
function neededChunks() {
  if (D.stride === 1 || STATE.from === null) return null;
  const first = Math.max(0, Math.floor(recordAt(STATE.from)) - 1), last = Math.ceil(recordAt(STATE.to)) + 1;
  if (last - first > FULL_RECORDS) return null;
  const out = [];
  for (let c = Math.floor(first / D.chunk); c <= Math.min(D.chunks - 1, Math.floor(last / D.chunk)); c++) out.push(c);
  return out;
}
function fullResolution() {
  const need = neededChunks();
  return need && need.every((c) => CHUNKS.has(c) && CHUNKS.get(c).version === D.versions[c]) ? need.map((c) => CHUNKS.get(c)) : null;
}

// [xs, ys] of one series: every record of the loaded chunks, or the overview's extremes.
function table(key, chunks) {
  const xs = [], ys = [];
  if (chunks) {
    const col = { step: "steps", tokens: "tokens", time: "seconds" }[STATE.x];
    for (const c of chunks) {
      const values = c.columns[key];
      if (!values) continue;
      values.forEach((v, i) => { if (v !== null && c[col][i] !== null) { xs.push(c[col][i]); ys.push(v); } });
    }
    return [xs, ys];
  }
  const s = D.series[key] || { s: [], v: [] };
  s.s.forEach((step, i) => { const x = stepToX(step); if (x !== null) { xs.push(x); ys.push(s.v[i]); } });
  return [xs, ys];
}
function smoothed(key, chunks, alpha) {
  const [xs, ys] = table(key, chunks);
  const m = D.smooth[key];
  if (chunks || !m) return [xs, ema(ys, alpha)];
  const mx = m.s.map(stepToX);
  return [mx, ema(m.v, alpha, m.k)];
}

function bands() {
  return ((D.alerts || {}).bands || []).map((b) => ({ from: stepToX(b.from), to: stepToX(b.to ?? b.from),
    label: `${b.name} from step ${b.from}${b.to === null ? "" : ` to ${b.to}`}: ${b.message}`, short: `${b.name} · step ${b.from}` }));
}
const marks = () => (D.switches || []).map((m) => ({ x: stepToX(m.step), label: `→ ${m.revision}` }));

// ---- lazy charts: at open only the charts in or near the viewport are built; the others when scrolled to ----
const NEAR_PX = 400;  // this far beyond the viewport counts as near
const PENDING = new Set();  // ids of charts whose drawing waits until they come near the viewport
const PLACEHOLDER_PX = 310;  // a chart not yet drawn keeps about its height, so the page does not jump
const watcher = window.IntersectionObserver ? new IntersectionObserver((entries) => {
  const due = new Set(entries.filter((e) => e.isIntersecting && PENDING.has(e.target.id)).map((e) => e.target.id));
  if (due.size) drawCharts(due);
}, { rootMargin: `${NEAR_PX}px 0px` }) : null;
function nearViewport() {  // one layout read for every chart, before any is built
  const near = new Set();
  for (const def of CHARTS) {
    const r = $(def.id).getBoundingClientRect();
    if (!watcher || (r.bottom > -NEAR_PX && r.top < innerHeight + NEAR_PX)) near.add(def.id);
  }
  return near;
}

function drawCharts(only) {  // every chart near the viewport (or the ids in `only`); the others wait
  const chunks = fullResolution();
  const near = only || nearViewport();
  for (const def of CHARTS) {
    const box = $(def.id);
    if (only && !only.has(def.id)) continue;
    if (!near.has(def.id)) {
      if (!PENDING.has(def.id) && watcher) watcher.observe(box);
      PENDING.add(def.id);
      box.dataset.pending = "1";
      if (!BUILT.has(def.id)) box.style.minHeight = PLACEHOLDER_PX + "px";
      continue;
    }
    PENDING.delete(def.id);
    delete box.dataset.pending;
    drawChart(def, box, chunks);
  }
  const note = $("view-note");
  note.textContent = D.stride === 1 ? `every record drawn (${fmt.count(D.records)})`
    : chunks ? `steps ${fmt.count(Math.round(STATE.from))}–${fmt.count(Math.round(STATE.to))}: every record drawn`
    : `${fmt.count(D.records)} records: each point is the lowest or highest record of ${D.stride} consecutive ones; zoom in for every record`;
  document.body.dataset.resolution = D.stride === 1 || chunks ? "full" : "thinned";
  document.body.dataset.pending = String(PENDING.size);
}

function drawChart(def, box, chunks) {
  const keys = def.keys();
  const set = settingsOf(def);
  const smoothing = set.smooth > 0;  // each series drawn faintly under its EMA
  const threshold = def.threshold ? def.threshold() : null;
  const signature = JSON.stringify([keys, set, !!STATE.per[def.id], STATE.x, threshold]);
  let built = BUILT.get(def.id);
  box.style.minHeight = "";
  if (!keys.length) {
    if (built) { built.chart.destroy(); BUILT.delete(def.id); }
    box.textContent = "";
    h("p", { class: "note empty-chart" }, box, `${def.title}: nothing logged yet.`);
    return;
  }
  if (!built || built.signature !== signature) {
    if (built) built.chart.destroy();
    const series = keys.map(([, name, dash], k) => ({ name, dash, colour: colour(k), faint: smoothing }));
    if (smoothing) keys.forEach(([, name], k) => series.push({ name: `${name}, smoothed (EMA ${set.smooth})`, colour: colour(k), width: 2 }));
    if (threshold !== null && threshold !== undefined) series.push({ name: `alert threshold ${threshold}`, dash: [6, 4], colour: "#c62828" });
    const chart = new TimeChart(box, { title: def.title, yLabel: def.y, xLabel: X_LABELS[STATE.x], xFormat: xFormat(),
      yFormat: def.yFormat, zero: def.zero, log: set.log && !def.zero, logX: set.logx, series, sync: "run", onZoom: zoomed });
    chart.u.series[0].value = (u, v) => (v === null || v === undefined ? "—" :
      STATE.x === "step" ? exact(v) : `${xFormat()(v)} (step ${exact(xToStep(v))})`);
    built = { chart, signature };
    BUILT.set(def.id, built);
    chartSettings(def, box, set);
  }
  const tables = keys.map(([key]) => table(key, chunks));
  if (smoothing) for (const [key] of keys) tables.push(smoothed(key, chunks, set.smooth));
  if (threshold !== null && threshold !== undefined) {
    const xs = tables.flatMap(([x]) => (x.length ? [x[0], x[x.length - 1]] : []));
    tables.push(xs.length ? [[Math.min(...xs), Math.max(...xs)], [threshold, threshold]] : [[], []]);
  }
  built.chart.setData(tables);
  built.chart.setBands(bands());
  built.chart.setMarks(marks());
  built.chart.setRange(STATE.from === null ? null : stepToX(STATE.from), STATE.to === null ? null : stepToX(STATE.to));
}

// A chart's own smoothing, log y and log x, under it (chart_settings.js).
function chartSettings(def, box, set) {
  const redraw = () => { saveState(); drawChart(def, $(def.id), fullResolution()); };
  chartSettingsRow(box, set, { own: !!STATE.per[def.id], noLogY: def.zero,
    changed: (own) => { STATE.per[def.id] = own; redraw(); }, reset: () => { delete STATE.per[def.id]; redraw(); } });
}

async function refreshCharts() {
  const need = neededChunks() || [];
  await Promise.all(need.filter((c) => !CHUNKS.has(c) || CHUNKS.get(c).version !== D.versions[c]).map(loadChunk));
  drawCharts();
}

function zoomed(lo, hi) {  // a chart's range in x units; (null, null): the whole run
  STATE.from = lo === null ? null : xToStep(lo);
  STATE.to = hi === null ? null : xToStep(hi);
  saveState();
  for (const { chart } of BUILT.values()) chart.setRange(lo, hi);
  evaluation();
  refreshCharts();
}

// ---- controls ----
function controls() {
  const x = $("x-axis"), smooth = $("smooth"), log = $("log-y"), logx = $("log-x");
  if (!D.clock.w.some((v) => v !== null)) x.querySelector("option[value=time]").disabled = true;
  x.value = STATE.x; smooth.value = String(STATE.smooth); $("smooth-value").textContent = String(STATE.smooth); log.checked = STATE.log;
  x.addEventListener("input", () => { STATE.x = x.value; saveState(); drawCharts(); });
  smooth.addEventListener("input", () => { STATE.smooth = +smooth.value; $("smooth-value").textContent = smooth.value; saveState(); drawCharts(); });
  log.addEventListener("input", () => { STATE.log = log.checked; saveState(); drawCharts(); });
  logx.checked = STATE.logx;
  logx.addEventListener("input", () => { STATE.logx = logx.checked; saveState(); drawCharts(); });
  $("reset-zoom").addEventListener("click", () => zoomed(null, null));
  $("train-csv").addEventListener("click", downloadTraining);
  $("train-json").addEventListener("click", downloadTrainingJson);
}

// ---- spike forensics: a click on the loss or a norm chart opens what happened at that step ----
const EXPLAINABLE = ["c-loss", "c-grad", "c-param"];
const SNAP_PX = 8;  // a click this close to an explained step shows it
let EXPLAIN = null;  // explain-data.js, loaded at the first click (it is not part of what the page opens with)
async function explainData() {
  if (EXPLAIN === null) {
    try { await loadScript(`${P.explain}?v=${D.seq}`); } catch (e) { /* not written: no step explained */ }
    EXPLAIN = (window.MILLRACE_EXPLAIN || {})[P.run] || { steps: [], explained: {} };
  }
  return EXPLAIN;
}
async function explainAt(step, within) {  // the explained step nearest `step` (within that many steps), or `step`
  const E = await explainData();
  const shown = nearestExplained(E, step, within) ?? Math.round(step);
  STATE.step = shown;
  saveState();
  const section = $("step-panel");
  section.hidden = false;
  explainStep($("explain-panel"), P.run, E, shown);
  section.dataset.step = String(shown);
  return section;
}
function stepPanel() {
  for (const id of EXPLAINABLE) pickOnClick($(id), (x, perPixel) => {
    const step = xToStep(x);
    explainAt(step, Math.abs(xToStep(x + SNAP_PX * perPixel) - step)).then((section) => section.scrollIntoView({ block: "nearest" }));
  }, 250);  // a double-click resets the zoom and opens nothing
  $("step-close").addEventListener("click", () => { $("step-panel").hidden = true; STATE.step = null; saveState(); });
  if (STATE.step !== null) explainAt(STATE.step, 0);
}

// ---- the CSV: every logged record, from every chunk ----
async function trainingChunks() {  // every chunk, loaded where the page has not yet (or has an older version)
  const stale = [];
  for (let c = 0; c < D.chunks; c++) if (!CHUNKS.has(c) || CHUNKS.get(c).version !== D.versions[c]) stale.push(c);
  await Promise.all(stale.map(loadChunk));
  return [...Array(D.chunks).keys()].map((c) => CHUNKS.get(c));
}
async function downloadTraining() {
  const chunks = await trainingChunks();
  const keys = [...new Set(chunks.flatMap((c) => Object.keys(c.columns)))].sort();
  const quote = (s) => (/[",\n]/.test(s) ? JSON.stringify(s) : s);
  const rows = [["step", "phase", "tokens", "seconds", ...keys].map(quote).join(",")];
  for (const c of chunks) c.steps.forEach((step, i) => rows.push([step, quote(String(c.phase[i] ?? "")), c.tokens[i] ?? "",
    c.seconds[i] ?? "", ...keys.map((k) => (c.columns[k] ? c.columns[k][i] ?? "" : ""))].join(",")));
  download(`${P.run}-training.csv`, "text/csv", rows.join("\n") + "\n");
}
// Every recorded field as columns ({step: [...], loss: [...], ...}): the CSV's records, each layer's per-expert
// loads (`expert_load.load/layer N`: a list per record, from expert-loads.js, loaded only here) and the alerts'
// start and end events with their messages.
async function downloadTrainingJson() {
  const chunks = await trainingChunks();
  const keys = [...new Set(chunks.flatMap((c) => Object.keys(c.columns)))].sort();
  const out = { run: P.run, step: [], phase: [], tokens: [], seconds: [] };
  for (const k of keys) out[k] = [];
  for (const c of chunks) {
    out.step.push(...c.steps); out.phase.push(...c.phase); out.tokens.push(...c.tokens); out.seconds.push(...c.seconds);
    for (const k of keys) out[k].push(...(c.columns[k] || c.steps.map(() => null)));
  }
  const loads = await loadScript(`${DIR}expert-loads.js?v=${D.seq}`);
  const at = new Map(out.step.map((step, i) => [step, i]));
  for (const [step, layer, ...values] of loads.rows) {
    const key = `expert_load.load/layer ${layer}`;
    if (!out[key]) out[key] = out.step.map(() => null);
    if (at.has(step)) out[key][at.get(step)] = values;
  }
  out.alert_events = (D.alerts || {}).events || [];
  download(`${P.run}-training.json`, "application/json", JSON.stringify(out));
}


// ---- the sections other than curves ----
function cards() {
  const L = D.last || {};
  $("card-step").textContent = (L.step ?? "—") + (D.total_steps ? ` / ${fmt.count(D.total_steps)}` : "");
  $("card-phase").textContent = "step" + (L.phase ? ` (${L.phase})` : "");
  $("card-tokens").textContent = fmt.count(L.tokens);
  $("card-loss").textContent = fmt.num(L.loss);
  $("card-tps").textContent = fmt.count(L.tokens_per_second);
  $("card-mfu").textContent = fmt.pct(L.mfu);
  $("card-wait").textContent = fmt.pct(L.data_wait_fraction);
  $("no-metrics").hidden = D.records > 0;
  const status = $("status");
  status.textContent = D.status + (D.live ? ` · live, updates every ${P.refresh} s` : "");
  status.className = "badge" + (D.live ? " live" : "");
  document.title = `run ${P.run}${D.live ? " (live)" : ""}`;
  document.body.dataset.records = String(D.records);
}

function alerts() {
  const A = D.alerts || { events: [], active: [], bands: [], skipped_steps: 0 };
  const badges = $("alert-badges"), box = $("alerts");
  badges.textContent = ""; box.textContent = "";
  for (const a of A.active) h("span", { class: "badge alert", title: a.message || "" }, badges, `⚠ ${a.name}`);
  if (!A.active.length) h("p", { id: "alerts-none", class: "note" }, box, "No active alert.");
  else h("p", { id: "alerts-active" }, box, `${A.active.length} active alert(s): ` +
    A.active.map((a) => `${a.name} since step ${a.since_step ?? "?"}${a.message ? " (" + a.message + ")" : ""}`).join("; "));
  h("p", { class: "note" }, box, `Skipped steps (non-finite loss or gradient): ${A.skipped_steps}.`);
  if (!A.events.length) return;
  const t = h("table", { id: "alert-events" }, h("div", { class: "scroll tall" }, box));
  const hr = h("tr", {}, h("thead", {}, t));
  for (const x of ["Step", "Alert", "Event", "Detail"]) h("th", { class: "l" }, hr, x);
  const tb = h("tbody", {}, t);
  for (const e of A.events.slice(-200)) {
    const tr = h("tr", {}, tb);
    for (const x of [String(e.step), e.name, e.event, e.message]) h("td", { class: "l" }, tr, x);
  }
}

const evaluation = (() => {
  const metric = $("eval-metric"), group = $("eval-group");
  if (STATE.metric && [...metric.options].some((o) => o.value === STATE.metric)) metric.value = STATE.metric;
  if (STATE.group && [...group.options].some((o) => o.value === STATE.group)) group.value = STATE.group;
  $("eval-log").checked = STATE.elog;
  $("eval-smooth").value = String(STATE.esmooth);
  const draw = () => {
    const E = D.eval || { steps: [], loss: {}, bpb: {} };
    const m = metric.value, g = group.value;
    const alpha = parseFloat($("eval-smooth").value) || 0;
    // the training charts' zoom (in steps) picks the evaluations drawn; smoothing runs over all of them first
    const shown = E.steps.map((s, i) => i).filter((i) => STATE.from === null || (E.steps[i] >= STATE.from && E.steps[i] <= STATE.to));
    const series = Object.entries((E[m] || {})[g] || {}).map(([name, values]) => {
      const smooth = ema(values, alpha);
      return { name, values: shown.map((i) => smooth[i]) };
    });
    $("c-eval").dataset.evaluations = String(shown.length);
    lineChart($("c-eval"), shown.map((i) => E.steps[i]), series, { title: `Held-out ${m === "bpb" ? "bits per byte" : "loss"} by ${g}`,
      yLabel: m === "bpb" ? "bits per byte" : "loss (nats per token)", legend: true, log: $("eval-log").checked,
      connectGaps: true, marks: marks() });
    const box = $("eval-table");
    box.textContent = "";
    if (!E.steps.length) { h("p", { class: "note" }, box, "No evaluation yet."); return; }
    const t = h("table", { id: "eval-latest" }, h("div", { class: "scroll tall" }, box));
    const hr = h("tr", {}, h("thead", {}, t));
    for (const x of [g, "latest", "best", "best at step"]) h("th", {}, hr, x);
    const tb = h("tbody", {}, t);
    for (const [name, values] of Object.entries((E[m] || {})[g] || {})) {
      let best = null, at = null;
      values.forEach((v, i) => { if (v !== null && (best === null || v < best)) { best = v; at = E.steps[i]; } });
      const tr = h("tr", {}, tb);
      for (const x of [name, fmt.num(values[values.length - 1], 5), fmt.num(best, 5), at === null ? "—" : String(at)]) h("td", {}, tr, x);
    }
  };
  for (const id of ["eval-metric", "eval-group", "eval-log", "eval-smooth"]) $(id).addEventListener("input", () => {
    STATE.metric = metric.value === "loss" ? null : metric.value;
    STATE.group = group.value === "average" ? null : group.value;
    STATE.elog = $("eval-log").checked;
    STATE.esmooth = parseFloat($("eval-smooth").value) || 0;
    saveState();
    draw();
  });
  $("eval-csv").addEventListener("click", () => {
    const E = D.eval;
    const rows = ["metric,group,name,step,tokens,value"];
    for (const m of ["loss", "bpb"]) for (const [g, named] of Object.entries(E[m] || {}))
      for (const [name, values] of Object.entries(named)) values.forEach((v, i) =>
        rows.push([m, g, JSON.stringify(name), E.steps[i], E.tokens[i] ?? "", v ?? ""].join(",")));
    download(`${P.run}-eval.csv`, "text/csv", rows.join("\n") + "\n");
  });
  $("eval-json").addEventListener("click", () => download(`${P.run}-eval.json`, "application/json", JSON.stringify(D.eval)));
  return draw;
})();

function samples() {
  const S = D.samples || { steps: [], prompts: [], by_step: {} };
  const box = $("samples"), a = $("sample-a"), b = $("sample-b");
  const kept = [a.value, b.value];
  box.textContent = ""; a.textContent = ""; b.textContent = "";
  if (!S.steps.length) { h("p", { class: "note" }, box, "No completions yet."); $("sample-controls").style.display = "none"; return; }
  $("sample-controls").style.display = "";
  for (const sel of [a, b]) for (const step of S.steps.slice().reverse()) h("option", { value: String(step) }, sel, `step ${step}`);
  const has = (v) => S.steps.some((s) => String(s) === v);
  a.value = has(kept[0]) && a.dataset.chosen ? kept[0] : String(S.steps[S.steps.length - 1]);
  b.value = has(kept[1]) && b.dataset.chosen ? kept[1] : String(S.steps.length > 1 ? S.steps[S.steps.length - 2] : S.steps[0]);
  h("p", { class: "note", id: "prompt-sources" }, box, `Prompts from: ${(S.sources || ["not recorded"]).join("; ")}`);
  const t = h("table", { id: "samples-table" }, h("div", { class: "scroll" }, box));
  const hr = h("tr", {}, h("thead", {}, t));
  for (const x of ["Prompt", `step ${a.value}`, `step ${b.value}`]) h("th", { class: "l" }, hr, x);
  const tb = h("tbody", {}, t);
  // whitespace a model emits is shown, not lost: spaces as ·, tabs as →, an empty completion says so
  const visible = (text) => (text.trim() === "" ? `(${text.length ? "only whitespace: " + JSON.stringify(text) : "empty"})` : text);
  const cell = (step, pid) => ((S.by_step[step] || {})[pid] || [])
    .map((c) => `[T=${c.temperature}, mean log p ${fmt.num(c.mean_logprob, 4)}] ${visible(c.completion)}`).join("\n\n");
  for (const p of S.prompts) {
    const tr = h("tr", {}, tb);
    h("pre", { class: "sample" }, h("td", { class: "l" }, tr), `${p.id}\n${p.prompt}`);
    h("pre", { class: "sample a" }, h("td", { class: "l" }, tr), cell(a.value, p.id));
    h("pre", { class: "sample b" }, h("td", { class: "l" }, tr), cell(b.value, p.id));
  }
}
for (const sel of ["sample-a", "sample-b"]) $(sel).addEventListener("input", (e) => { e.target.dataset.chosen = "1"; samples(); });

function expertLoad() {
  const box = $("c-load");
  box.textContent = "";
  const layers = D.last_expert_load;
  if (!layers.length) { h("p", { class: "note" }, box, "No expert load logged yet."); return; }
  h("div", { style: "font-weight:600;font-size:12px" }, box, "Expert load at the last logged step (share of routed tokens)");
  const experts = Math.max(...layers.map((l) => l.load.length));
  const cols = Array.from({ length: experts }, (_, e) => String(e));
  const holder = h("div", {}, box);
  heatMap(holder, layers.map((l) => `layer ${l.layer}`), cols, (r, c) => layers[r].load[c] ?? null, {
    cellWidth: Math.max(14, Math.min(40, Math.floor(520 / experts))), cellHeight: 18,
    format: (v) => (experts <= 16 ? fmt.pct(v) : ""),
    tooltip: (r, c) => `layer ${layers[r].layer}, expert ${c}: ${fmt.pct(layers[r].load[c])} of tokens` +
      `\nmax-violation ${fmt.pct(layers[r].max_violation)}, entropy ${fmt.num(layers[r].entropy, 4)}, dead experts ${layers[r].dead_experts ?? "—"}`,
  });
  loadOverTime();
}

// Per-expert load over time: one layer's steps x experts, at the steps the build kept (a bounded number, spread
// over the run: `reports.run_stream.RunDigest`).
function loadOverTime() {
  const box = $("c-load-time"), steps = D.expert_load_steps || [];
  box.textContent = "";
  if (steps.length < 2) return;
  const names = Object.keys(steps[steps.length - 1].layers).sort((a, b) => +a - +b);
  const select = $("load-layer");
  if (select.options.length !== names.length) {
    const chosen = select.value;
    select.textContent = "";
    for (const n of names) h("option", { value: n }, select, `layer ${n}`);
    if (names.includes(chosen)) select.value = chosen;
  }
  const layer = select.value || names[0];
  const experts = Math.max(...steps.map((s) => (s.layers[layer] || []).length));
  h("div", { style: "font-weight:600;font-size:12px" }, box,
    `Expert load over time, layer ${layer}: ${steps.length} steps of ${fmt.count(D.records)} records (share of routed tokens)`);
  heatMap(h("div", {}, box), steps.map((s) => `step ${exact(s.step)}`), Array.from({ length: experts }, (_, e) => String(e)),
    (r, c) => (steps[r].layers[layer] || [])[c] ?? null, {
      cellWidth: Math.max(6, Math.min(40, Math.floor(520 / experts))), cellHeight: Math.max(4, Math.min(18, Math.floor(400 / steps.length))),
      format: () => "", tooltip: (r, c) => `step ${exact(steps[r].step)}, layer ${layer}, expert ${c}: ${fmt.pct((steps[r].layers[layer] || [])[c])} of tokens`,
    });
}
$("load-layer").addEventListener("change", loadOverTime);

function plan() {
  const wrap = $("plan");
  wrap.textContent = "";
  if (!D.cells.length) { h("p", { class: "note" }, wrap, "No per-cell plan or realised counts yet."); return; }
  const exact = D.cells.some((c) => c.off_by !== null);
  if (exact) {
    const worst = D.cells.reduce((m, c) => Math.max(m, Math.abs(c.off_by)), 0);
    h("p", { id: "mixing-error", class: "note" }, wrap,
      `Largest difference between realised and expected-by-now, over all cells: ${fmt.num(worst, 3)} sequences ` +
      `(the loader's exact interleaving keeps it under one per phase).`);
  }
  const t = h("table", { id: "plan-table" }, h("div", { class: "scroll tall" }, wrap));
  const hr = h("tr", {}, h("thead", {}, t));
  const head = ["Cell", "Realised tokens"];
  if (exact) head.push("Expected by now", "Off by (sequences)");
  head.push("Planned tokens (whole run)", "Done", "Realised share", "Planned share", "Latest loss");
  for (const x of head) h("th", {}, hr, x);
  const tb = h("tbody", {}, t);
  const rt = D.cells.reduce((a, c) => a + c.realised, 0) || 1, pt = D.cells.reduce((a, c) => a + c.planned, 0) || 1;
  for (const c of D.cells) {
    const tr = h("tr", {}, tb);
    h("td", {}, tr, c.name);
    h("td", {}, tr, fmt.count(c.realised));
    if (exact) {
      h("td", {}, tr, fmt.count(c.expected));
      const off = h("td", {}, tr, c.off_by === null ? "—" : (c.off_by > 0 ? "+" : "") + fmt.num(c.off_by, 3));
      if (c.off_by !== null && Math.abs(c.off_by) >= 1) off.className = "down";
    }
    h("td", {}, tr, fmt.count(c.planned));
    const done = h("td", { class: "bar" }, tr);
    const frac = c.planned ? c.realised / c.planned : null;
    const bar = h("span", { class: "b" }, done); bar.style.width = Math.min(100, (frac || 0) * 100).toFixed(1) + "%";
    h("span", { class: "t" }, done, fmt.pct(frac));
    h("td", {}, tr, fmt.pct(c.realised / rt));
    h("td", {}, tr, fmt.pct(c.planned / pt));
    h("td", {}, tr, fmt.num(c.loss, 5));
  }
}

function render() {
  // the tables are rebuilt from the new data: each scrolled one is put back where the reader left it
  const scrolled = [...document.querySelectorAll(".scroll")].map((box) => [box.querySelector("table[id]")?.id, box.scrollTop, box.scrollLeft]);
  cards(); alerts(); evaluation(); samples(); expertLoad(); plan(); otherMetrics();
  for (const [id, top, left] of scrolled) {
    const box = id && document.getElementById(id)?.closest(".scroll");
    if (box) { box.scrollTop = top; box.scrollLeft = left; }
  }
  return refreshCharts();
}

// ---- live: poll the small live.js; on a new write, reload the overview and the changed chunks ----
async function poll() {
  let live;
  try { live = await loadScript(`${DIR}live.js?t=${Date.now()}`); } catch (e) { return schedule(); }
  if (live && live.seq !== D.seq) {
    try {
      const next = await loadScript(`${DIR}overview.js?v=${live.seq}`);
      if (next) { D = next; EXPLAIN = null; await render(); }
    } catch (e) { /* a write in progress: the next poll reads it */ }
  }
  schedule();
}
function schedule() { if (D.live) setTimeout(poll, P.refresh * 1000); }

loadScript(`${DIR}overview.js?t=${Date.now()}`).then((data) => {
  D = data;
  controls();
  stepPanel();
  return render();
}).then(() => { document.body.dataset.ready = "1"; schedule(); });
