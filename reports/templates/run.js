// The training page: curves from the run's metrics stream, embedded in #page-data.
"use strict";
const R = pageData();
const X = R.steps;
const S = R.scalars;
const BANDS = R.bands || {};
const band = (key) => BANDS[key] || {};
// A named series with its envelope (when the run was thinned); `group` names its key in R.bands.
const byName = (obj, group) => Object.keys(obj).map((name) => ({ name, values: obj[name], ...band(group ? `${group}/${name}` : name) }));
const scalar = (key, name) => ({ name, values: S[key] || [], ...band(key) });
const ALERTS = R.alerts || { events: [], active: [], skipped_steps: 0 };
const SWITCHES = R.switches.map((m) => ({ x: m.step, label: `→ ${m.revision}` }));
lineChart.defaults.marks = SWITCHES;  // every chart
const MARKS = ALERTS.events.filter((e) => e.event === "start")
  .map((e) => ({ x: e.step, label: `${e.name} started: ${e.message}`, quiet: true, colour: "#c0392b" }));

const M = { marks: SWITCHES.concat(MARKS) };
lineChart($("c-loss"), X, [scalar("loss", "loss")], { title: "Loss", yLabel: "loss (nats per token)", ...M });
lineChart($("c-lr"), X, [scalar("lr", "learning rate")], { title: "Learning rate" });
lineChart($("c-grad"), X, [scalar("grad_norm", "grad norm (trained params)")], { title: "Gradient norm", legend: true, ...M });
lineChart($("c-param"), X, [
  scalar("param_norm", "param norm (trained params)"),
  { ...scalar("param_norm_with_router_bias", "param norm incl. router bias"), dash: "5 3" },
], { title: "Parameter norm, with and without the router bias", yLabel: "L2 norm", ...M });
lineChart($("c-aux"), X, [scalar("aux_loss", "sequence balance loss (x coef)"), scalar("z_loss", "router z-loss (x coef)")],
  { title: "Auxiliary losses added to the objective", legend: true });
lineChart($("c-tps"), X, [scalar("tokens_per_second", "tokens/s")], { title: "Tokens per second", yLabel: "tokens/s", yFormat: fmt.count, zero: true, ...M });
lineChart($("c-mfu"), X, [scalar("mfu", "MFU")], { title: "Model FLOPs utilisation", yLabel: "MFU (% of peak)", yFormat: fmt.pct, zero: true, ...M });
lineChart($("c-wait"), X, [scalar("data_wait_fraction", "data wait")], { title: "Share of step time waiting for data", yLabel: "% of step time", yFormat: fmt.pct, zero: true });
lineChart($("c-steptime"), X, [scalar("step_seconds", "step time")], { title: "Step time", yLabel: "seconds", zero: true, ...M });
lineChart($("c-memory"), X, [scalar("memory_rss_bytes", "resident set (CPU)"), scalar("cuda_allocated_bytes", "CUDA allocated"),
  scalar("cuda_reserved_bytes", "CUDA reserved")].filter((s) => s.values.some((v) => v !== null)),
  { title: "Memory", yLabel: "bytes", yFormat: fmt.count, zero: true, legend: true });
lineChart($("c-bias"), X, byName(R.router_bias_norm, "router_bias.norm"), { title: "Router bias norm per layer", yLabel: "L2 norm", legend: true, ...M });
lineChart($("c-biasmax"), X, byName(R.router_bias_max_abs, "router_bias.max_abs"), { title: "Router bias max |b| per layer", yLabel: "max |bias|", legend: true, ...M });
lineChart($("c-viol"), X, byName(R.max_violation, "expert_load.max_violation"), { title: "Expert load max-violation per layer", yLabel: "max-violation (% over even)", yFormat: fmt.pct, legend: true });
lineChart($("c-entropy"), X, byName(R.router_entropy || {}, "expert_load.router_entropy"), { title: "Routing entropy per layer", yLabel: "fraction of log E", legend: true, ...M });
lineChart($("c-cell"), X, byName(R.loss_per_cell, "loss_per_cell"), { title: "Loss per cell (batches that held the cell)", yLabel: "loss (nats per token)", legend: true, connectGaps: true });
lineChart($("c-source"), X, byName(R.loss_per_source, "loss_per_source"), { title: "Loss per source (batches that held the source)", yLabel: "loss (nats per token)", legend: true, connectGaps: true });

(function alerts() {
  const badges = $("alert-badges");
  for (const a of ALERTS.active) h("span", { class: "badge alert", title: a.message || "" }, badges, `⚠ ${a.name}`);
  const box = $("alerts");
  if (!ALERTS.active.length) h("p", { id: "alerts-none", class: "note" }, box, "No active alert.");
  else h("p", { id: "alerts-active" }, box, `${ALERTS.active.length} active alert(s): ` +
    ALERTS.active.map((a) => `${a.name} since step ${a.since_step ?? "?"}${a.message ? " (" + a.message + ")" : ""}`).join("; "));
  h("p", { class: "note" }, box, `Skipped steps (non-finite loss or gradient): ${ALERTS.skipped_steps}.`);
  if (!ALERTS.events.length) return;
  const t = h("table", { id: "alert-events" }, h("div", { class: "scroll tall" }, box));
  const hr = h("tr", {}, h("thead", {}, t));
  for (const x of ["Step", "Alert", "Event", "Detail"]) h("th", { class: "l" }, hr, x);
  const tb = h("tbody", {}, t);
  for (const e of ALERTS.events.slice(-200)) {
    const tr = h("tr", {}, tb);
    for (const x of [String(e.step), e.name, e.event, e.message]) h("td", { class: "l" }, tr, x);
  }
})();

function download(name, type, text) {
  const a = h("a", { download: name, href: URL.createObjectURL(new Blob([text], { type })) }, document.body);
  a.click();
  a.remove();
}
function smooth(values, alpha) {
  if (!alpha) return values;
  let last = null;
  return values.map((v) => (v === null ? null : (last = last === null ? v : alpha * last + (1 - alpha) * v)));
}

(function evaluation() {
  const E = R.eval || { steps: [], loss: {}, bpb: {} };
  const draw = () => {
    const metric = $("eval-metric").value, group = $("eval-group").value;
    const alpha = parseFloat($("eval-smooth").value) || 0;
    const series = Object.entries((E[metric] || {})[group] || {}).map(([name, values]) => ({ name, values: smooth(values, alpha) }));
    lineChart($("c-eval"), E.steps, series, { title: `Held-out ${metric === "bpb" ? "bits per byte" : "loss"} by ${group}`,
      legend: true, log: $("eval-log").checked, connectGaps: true, marks: MARKS });
    const box = $("eval-table");
    box.textContent = "";
    if (!E.steps.length) { h("p", { class: "note" }, box, "No evaluation yet."); return; }
    const t = h("table", { id: "eval-latest" }, h("div", { class: "scroll tall" }, box));
    const hr = h("tr", {}, h("thead", {}, t));
    for (const x of [group, "latest", "best", "best at step"]) h("th", {}, hr, x);
    const tb = h("tbody", {}, t);
    for (const [name, values] of Object.entries((E[metric] || {})[group] || {})) {
      let best = null, at = null;
      values.forEach((v, i) => { if (v !== null && (best === null || v < best)) { best = v; at = E.steps[i]; } });
      const tr = h("tr", {}, tb);
      for (const x of [name, fmt.num(values[values.length - 1]), fmt.num(best), at === null ? "—" : String(at)]) h("td", {}, tr, x);
    }
  };
  for (const id of ["eval-metric", "eval-group", "eval-log", "eval-smooth"]) $(id).addEventListener("input", draw);
  $("eval-csv").addEventListener("click", () => {
    const rows = ["metric,group,name,step,tokens,value"];
    for (const metric of ["loss", "bpb"]) for (const [group, named] of Object.entries(E[metric] || {}))
      for (const [name, values] of Object.entries(named)) values.forEach((v, i) =>
        rows.push([metric, group, JSON.stringify(name), E.steps[i], E.tokens[i] ?? "", v ?? ""].join(",")));
    download(`${R.run}-eval.csv`, "text/csv", rows.join("\n") + "\n");
  });
  $("eval-json").addEventListener("click", () => download(`${R.run}-eval.json`, "application/json", JSON.stringify(E)));
  $("train-csv").addEventListener("click", () => {
    const rows = ["series,step,value"];
    for (const [key, values] of Object.entries(S)) values.forEach((v, i) => rows.push([key, X[i], v ?? ""].join(",")));
    download(`${R.run}-training.csv`, "text/csv", rows.join("\n") + "\n");
  });
  draw();
})();

(function samples() {
  const P = R.samples || { steps: [], prompts: [], by_step: {} };
  const box = $("samples");
  const a = $("sample-a"), b = $("sample-b");
  if (!P.steps.length) { h("p", { class: "note" }, box, "No completions yet."); $("sample-controls").style.display = "none"; return; }
  for (const sel of [a, b]) for (const step of P.steps.slice().reverse()) h("option", { value: String(step) }, sel, `step ${step}`);
  b.value = String(P.steps.length > 1 ? P.steps[P.steps.length - 2] : P.steps[0]);
  const draw = () => {
    box.textContent = "";
    h("p", { class: "note", id: "prompt-sources" }, box, `Prompts from: ${(P.sources || ["not recorded"]).join("; ")}`);
    const t = h("table", { id: "samples-table" }, h("div", { class: "scroll" }, box));
    const hr = h("tr", {}, h("thead", {}, t));
    for (const x of ["Prompt", `step ${a.value}`, `step ${b.value}`]) h("th", { class: "l" }, hr, x);
    const tb = h("tbody", {}, t);
    const cell = (step, pid) => ((P.by_step[step] || {})[pid] || [])
      .map((c) => `[T=${c.temperature}, mean log p ${fmt.num(c.mean_logprob, 3)}] ${c.completion}`).join("\n\n");
    for (const p of P.prompts) {
      const tr = h("tr", {}, tb);
      h("pre", { class: "sample" }, h("td", { class: "l" }, tr), `${p.id}\n${p.prompt}`);
      h("pre", { class: "sample a" }, h("td", { class: "l" }, tr), cell(a.value, p.id));
      h("pre", { class: "sample b" }, h("td", { class: "l" }, tr), cell(b.value, p.id));
    }
  };
  a.addEventListener("input", draw);
  b.addEventListener("input", draw);
  draw();
})();

(function expertLoad() {
  const box = $("c-load");
  const layers = R.last_expert_load;
  if (!layers.length) { h("p", { class: "note" }, box, "No expert load logged yet."); return; }
  h("div", { style: "font-weight:600;font-size:12px" }, box, "Expert load at the last logged step (share of routed tokens)");
  const experts = Math.max(...layers.map((l) => l.load.length));
  const cols = Array.from({ length: experts }, (_, e) => String(e));
  const holder = h("div", {}, box);
  heatMap(holder, layers.map((l) => `layer ${l.layer}`), cols, (r, c) => layers[r].load[c] ?? null, {
    cellWidth: Math.max(14, Math.min(40, Math.floor(520 / experts))), cellHeight: 18,
    format: (v) => (experts <= 16 ? fmt.pct(v) : ""),
    tooltip: (r, c) => `layer ${layers[r].layer}, expert ${c}: ${fmt.pct(layers[r].load[c])} of tokens` +
      `\nmax-violation ${fmt.pct(layers[r].max_violation)}, entropy ${fmt.num(layers[r].entropy, 3)}, dead experts ${layers[r].dead_experts ?? "—"}`,
  });
})();

(function plan() {
  const wrap = $("plan");
  if (!R.cells.length) { h("p", { class: "note" }, wrap, "No per-cell plan or realised counts yet."); return; }
  const exact = R.cells.some((c) => c.off_by !== null);
  if (exact) {
    const worst = R.cells.reduce((m, c) => Math.max(m, Math.abs(c.off_by)), 0);
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
  const rt = R.cells.reduce((a, c) => a + c.realised, 0) || 1, pt = R.cells.reduce((a, c) => a + c.planned, 0) || 1;
  for (const c of R.cells) {
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
    const b = h("span", { class: "b" }, done); b.style.width = Math.min(100, (frac || 0) * 100).toFixed(1) + "%";
    h("span", { class: "t" }, done, fmt.pct(frac));
    h("td", {}, tr, fmt.pct(c.realised / rt));
    h("td", {}, tr, fmt.pct(c.planned / pt));
    h("td", {}, tr, fmt.num(c.loss));
  }
})();
