// The compare page: the runs named in ?runs=a,b are loaded from runs/<run>/summary.js (scripts may load from
// file://, JSON may not be fetched) and drawn on one x range, with their config and mixture differences.
"use strict";
const PAGE = pageData();
const params = new URLSearchParams(window.location.search);
const NAMES = (params.get("runs") || "").split(",").map((s) => s.trim()).filter((s) => s);
const X_AXES = {
  step: { label: "step", train: (r) => r.steps, format: fmt.count },
  tokens: { label: "tokens trained", train: (r) => r.tokens, format: fmt.count },
  time: { label: "wall time since the first step (s)", train: (r) => r.seconds, format: fmt.count },
};
const LOSS = "loss (nats per token)";
// What the user set, mirrored in the address: smoothing, log y and log x for every panel, and each panel's own
// (`charts=`, chart_settings.js), as on the run page.
const STATE = { smooth: clampSmooth(params.get("smooth")), log: params.get("log") === "1", logx: params.get("logx") === "1",
  per: perChart(params.get("charts") || "") };
function saveState() {
  const put = (k, v, dflt) => (v === dflt ? params.delete(k) : params.set(k, String(v)));
  put("smooth", STATE.smooth, 0); put("log", STATE.log ? 1 : 0, 0); put("logx", STATE.logx ? 1 : 0, 0);
  put("charts", perChartText(STATE.per), "");
  history.replaceState(null, "", location.pathname + "?" + params.toString().replace(/%2C/g, ","));
}

function loadRuns(names, done) {
  let left = names.length;
  if (!left) done();
  for (const name of names) {
    const script = document.createElement("script");
    script.src = `runs/${encodeURIComponent(name)}/summary.js`;
    script.onload = script.onerror = () => { if (--left === 0) done(); };
    document.head.appendChild(script);
  }
}

// Where a run's evaluation (at a step) sits on the chosen x axis: its own tokens, or the training time at that step.
function evalX(r, axis) {
  if (axis === "step") return r.eval.steps;
  if (axis === "tokens") return r.eval.tokens;
  return r.eval.steps.map((s) => {
    const i = r.steps.findIndex((t) => t >= s);
    return i < 0 ? null : r.seconds[i];
  });
}

// The one call that draws a panel: a TimeChart (timeseries.js, on the vendored uPlot) of series
// [{name, x, y, faint}] shown over the shared range; zooming one panel zooms them all, double-click resets.
let charts = [];
function drawChart(container, spec, range) {
  if (!spec.series.some((s) => (s.y || []).some((v) => v !== null && v !== undefined))) {
    h("p", { class: "note empty" }, container, `${spec.title}: no data in these runs`);
    return;
  }
  const id = container.id, set = chartSettingsOf(STATE.per, id, STATE);
  if (set.smooth > 0) {  // each curve drawn faintly under its EMA, as on the run page
    spec = { ...spec, series: spec.series.flatMap((s) => (s.faint ? [s] : [{ ...s, faint: true },
      { ...s, name: `${s.name}, smoothed (EMA ${set.smooth})`, y: ema(s.y.map((v) => (v === undefined ? null : v)), set.smooth) }])) };
  }
  const chart = new TimeChart(container, {
    title: spec.title, xLabel: range.label, yLabel: spec.yLabel, xFormat: range.format, log: set.log, logX: set.logx,
    sync: "compare", series: spec.series.map((s) => ({ name: s.name, faint: s.faint, colour: s.colour })),
    onZoom: (lo, hi) => { for (const c of charts) c.setRange(lo === null ? range.lo : lo, hi === null ? range.hi : hi); },
  });
  chart.setData(spec.series.map((s) => {
    const keep = s.x.map((_, i) => i).filter((i) => s.x[i] !== null && s.x[i] !== undefined && isFinite(s.x[i]));
    return [keep.map((i) => s.x[i]), keep.map((i) => (s.y[i] === undefined ? null : s.y[i]))];
  }));
  chart.setRange(range.lo, range.hi);
  charts.push(chart);
  const redraw = () => { saveState(); drawCurves(RUNS); };
  chartSettingsRow(container, set, { own: !!STATE.per[id], noLogY: false,
    changed: (own) => { STATE.per[id] = own; redraw(); }, reset: () => { delete STATE.per[id]; redraw(); } });
}

// Panels are laid out first and drawn after, so each is measured at its final width in the grid.
let pending = [];
function panel(parent, id) { const node = h("div", { id }, parent); return node; }
function queue(container, spec, range) { pending.push([container, spec, range]); }
function drawQueued() {
  for (const c of charts) c.destroy();
  charts = [];
  for (const [container, spec, range] of pending) drawChart(container, spec, range);
  pending = [];
}

function sharedRange(runs, axis) {
  const xs = runs.flatMap((r) => X_AXES[axis].train(r).concat(evalX(r, axis))).filter((v) => v !== null && isFinite(v));
  return { lo: Math.min(...xs), hi: Math.max(...xs), label: X_AXES[axis].label, format: X_AXES[axis].format };
}

// Each run's curve (the last value per bucket when thinned) and, when thinned, its bucket maxima drawn faintly
// (a one-step spike stays visible at any run length); colours follow the run.
function trainSeries(runs, axis, key) {
  return runs.flatMap((r, k) => {
    const x = X_AXES[axis].train(r), hi = (r.bands[key] || {}).hi;
    const line = { name: r.name, x, y: r.curves[key] || [], colour: colour(k) };
    return hi ? [line, { name: `${r.name} (max per point)`, x, y: hi, colour: colour(k), faint: true }] : [line];
  });
}

function drawCurves(runs) {
  const axis = $("x-axis").value, range = sharedRange(runs, axis);
  const train = $("c-train"), evals = $("c-eval"), cells = $("c-cells");
  for (const node of [train, evals, cells]) node.textContent = "";
  queue(panel(train, "p-loss"), { title: "Training loss", yLabel: LOSS, series: trainSeries(runs, axis, "loss") }, range);
  queue(panel(train, "p-grad"), { title: "Gradient norm (trained parameters)", yLabel: "L2 norm",
    series: trainSeries(runs, axis, "grad_norm") }, range);
  queue(panel(train, "p-param"), { title: "Parameter norm with the router bias", yLabel: "L2 norm",
    series: trainSeries(runs, axis, "param_norm_with_router_bias") }, range);
  queue(panel(train, "p-lr"), { title: "Learning rate", yLabel: "learning rate", series: trainSeries(runs, axis, "lr") }, range);
  const evalSeries = (pick) => runs.map((r, k) => ({ name: r.name, x: evalX(r, axis), y: pick(r) || [], colour: colour(k) }));
  queue(panel(evals, "p-eval-macro"), { title: "Held-out loss, macro over cells", yLabel: LOSS,
    series: evalSeries((r) => r.eval.loss.average.macro) }, range);
  queue(panel(evals, "p-eval-bpb"), { title: "Held-out bits per byte, macro over cells", yLabel: "bits per byte",
    series: evalSeries((r) => r.eval.bpb.average.macro) }, range);
  const sets = [...new Set(runs.flatMap((r) => Object.keys(r.eval.loss.set)))].sort();
  for (const set of sets)
    queue(panel(evals, `p-set-${set}`), { title: `Held-out loss on set ${set}`, yLabel: LOSS,
      series: evalSeries((r) => r.eval.loss.set[set]) }, range);
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.loss_per_cell)))].sort();
  const shown = names.slice(0, cellLimit);
  $("cells-note").textContent = `${shown.length} of ${names.length} cells: training loss (batches that held the cell) and, where evaluated, held-out loss.`;
  for (const cell of shown) {
    const series = runs.map((r, k) => ({ name: `${r.name} train`, x: X_AXES[axis].train(r), y: r.loss_per_cell[cell] || [], colour: colour(k) }))
      .concat(runs.map((r, k) => ({ name: `${r.name} held-out`, x: evalX(r, axis), y: r.eval.loss.cell[cell], colour: colour(k), faint: true }))
        .filter((s) => s.y));
    queue(panel(cells, `p-cell-${cell}`), { title: `Cell ${cell}`, yLabel: LOSS, series }, range);
  }
  drawQueued();
  if (names.length > shown.length) {
    const more = h("button", { type: "button", id: "more-cells" }, cells, `show all ${names.length} cells`);
    more.addEventListener("click", () => { cellLimit = Infinity; drawCurves(runs); });
  }
}
let cellLimit = 12;

function diffTable(parent, keys, runs, value, emptyText) {
  parent.textContent = "";
  if (!keys.length) { h("p", { class: "note" }, parent, emptyText); return; }
  const t = h("table", {}, h("div", { class: "scroll" }, parent));
  const hr = h("tr", {}, h("thead", {}, t));
  h("th", { class: "l" }, hr, "");
  for (const r of runs) h("th", { class: "l" }, hr, r.name);
  const tb = h("tbody", {}, t);
  for (const key of keys) {
    const tr = h("tr", {}, tb);
    h("td", { class: "l" }, tr, key);
    for (const r of runs) h("td", { class: "l" }, tr, value(r, key));
  }
}

function configDiff(runs) {
  const keys = [...new Set(runs.flatMap((r) => Object.keys(r.config)))].sort();
  const differ = keys.filter((k) => new Set(runs.map((r) => r.config[k] ?? "(not set)")).size > 1);
  diffTable($("config-diff"), differ, runs, (r, k) => r.config[k] ?? "(not set)",
    `All ${keys.length} settings are the same.`);
  if (differ.length) h("p", { class: "note" }, $("config-diff"), `${differ.length} of ${keys.length} settings differ; the rest are the same.`);
}

function revisionDiff(runs) {
  const box = $("revision-diff");
  const rows = [], phases = [...new Set(runs.flatMap((r) => r.phases.map((p) => p.name)))];
  const heads = runs.map((r) => `${r.mixture} / ${r.revision}`);
  for (const phase of phases) {
    const of = (r) => r.phases.find((p) => p.name === phase);
    const tokens = runs.map((r) => (of(r) ? of(r).tokens : null));
    if (new Set(tokens).size > 1) rows.push({ key: `${phase}: token budget`, values: tokens.map(fmt.count) });
    const cells = [...new Set(runs.flatMap((r) => Object.keys((of(r) || { weights: {} }).weights)))].sort();
    for (const cell of cells) {
      const w = runs.map((r) => (of(r) ? of(r).weights[cell] || 0 : null));
      if (Math.max(...w) - Math.min(...w) > 1e-9) rows.push({ key: `${phase}: ${cell}`, values: w.map(fmt.pct) });
    }
  }
  const same = new Set(runs.map((r) => r.manifest_hash)).size === 1;
  diffTable(box, rows.map((r) => r.key), runs, (r, key) => rows.find((x) => x.key === key).values[runs.indexOf(r)],
    same ? "Every run trained on the same built revision (one manifest hash)." : "The revisions declare the same weights per phase.");
  h("p", { class: "note" }, box, `Revisions: ${runs.map((r, i) => `${r.name} — ${heads[i]}`).join("; ")}. Weights are each cell's share of a phase's samples as built.`);
}

function runTable(runs) {
  const tb = document.querySelector("#compare-table tbody");
  tb.textContent = "";
  for (const r of runs) {
    const tr = h("tr", { "data-run": r.name }, tb);
    h("a", { href: `runs/${encodeURIComponent(r.name)}/index.html` }, h("td", { class: "l" }, tr), r.name);
    h("td", { class: "l" }, tr, r.status);
    h("td", { class: "l" }, tr, `${r.mixture || "?"} / ${r.revision || "?"}`);
    const last = r.steps.length - 1;
    h("td", {}, tr, fmt.count(r.steps[last]));
    h("td", {}, tr, fmt.count(r.tokens[last]));
    h("td", {}, tr, fmt.num(r.curves.loss[last]));
    const macro = r.eval.loss.average.macro || [];
    const finite = macro.map((v, i) => [v, r.eval.steps[i]]).filter(([v]) => v !== null);
    const best = finite.length ? finite.reduce((a, b) => (b[0] < a[0] ? b : a)) : [null, null];
    h("td", {}, tr, fmt.num(macro.length ? macro[macro.length - 1] : null));
    h("td", {}, tr, fmt.num(best[0]));
    h("td", {}, tr, best[1] === null ? "—" : String(best[1]));
    h("a", { href: `runs/${encodeURIComponent(r.name)}/explain.html` }, h("td", { class: "l" }, tr), "explain a step");
    const drop = h("button", { type: "button", title: `remove ${r.name}` }, h("td", { class: "l" }, tr), "remove");
    drop.addEventListener("click", () => go(NAMES.filter((n) => n !== r.name)));
  }
}

let RUNS = [];
function go(names) { window.location.search = "?runs=" + names.map(encodeURIComponent).join(","); }

function render() {
  const known = window.MILLRACE_RUNS || {};
  const runs = NAMES.filter((n) => known[n]).map((n) => known[n]);
  const missing = NAMES.filter((n) => !known[n]);
  $("compare-names").textContent = runs.length ? runs.map((r) => r.name).join(", ") : "none chosen";
  if (missing.length) {
    const note = $("compare-missing");
    note.hidden = false;
    note.textContent = `No data for ${missing.join(", ")}: build its page with \`millrace report build\`.`;
  }
  for (const name of PAGE.runs.filter((n) => !NAMES.includes(n))) h("option", { value: name }, $("add-run"), name);
  $("add-run").addEventListener("input", (e) => { if (e.target.value) go(NAMES.concat([e.target.value])); });
  if (!runs.length) return;
  runTable(runs);
  configDiff(runs);
  revisionDiff(runs);
  RUNS = runs;
  const axis = params.get("x");
  if (axis && X_AXES[axis]) $("x-axis").value = axis;
  const smooth = $("compare-smooth"), log = $("compare-log"), logx = $("compare-logx");
  smooth.value = String(STATE.smooth); $("compare-smooth-value").textContent = smooth.value;
  log.checked = STATE.log; logx.checked = STATE.logx;
  drawCurves(runs);
  $("x-axis").addEventListener("input", () => drawCurves(runs));
  const changed = () => { saveState(); drawCurves(runs); };
  log.addEventListener("input", () => { STATE.log = log.checked; changed(); });
  logx.addEventListener("input", () => { STATE.logx = logx.checked; changed(); });
  smooth.addEventListener("input", () => {
    $("compare-smooth-value").textContent = smooth.value;
    STATE.smooth = clampSmooth(smooth.value);
    changed();
  });
  $("compare-csv").addEventListener("click", () => download("compare.csv", "text/csv", compareCsv(runs)));
  $("compare-json").addEventListener("click", () => download("compare.json", "application/json", JSON.stringify(runs)));
}

// Every curve of every run compared, one row per point: run, series, step, tokens, seconds, value.
function compareCsv(runs) {
  const rows = ["run,series,step,tokens,seconds,value"];
  for (const r of runs) {
    const curves = { ...r.curves, ...Object.fromEntries(Object.entries(r.loss_per_cell).map(([c, v]) => [`loss_per_cell/${c}`, v])) };
    for (const [key, values] of Object.entries(curves)) values.forEach((v, i) => {
      if (v !== null) rows.push([JSON.stringify(r.name), key, r.steps[i], r.tokens[i] ?? "", r.seconds[i] ?? "", v].join(","));
    });
    for (const [name, values] of Object.entries(r.eval.loss.average || {})) values.forEach((v, i) => {
      if (v !== null) rows.push([JSON.stringify(r.name), `eval.loss.${name}`, r.eval.steps[i], r.eval.tokens[i] ?? "", "", v].join(","));
    });
  }
  return rows.join("\n") + "\n";
}


loadRuns(NAMES, render);
