// The training page: curves from the run's metrics stream, embedded in #page-data.
"use strict";
const R = JSON.parse(document.getElementById("page-data").textContent);
const X = R.steps;
const S = R.scalars;
const byName = (obj) => Object.keys(obj).map((name) => ({ name, values: obj[name] }));
const $ = (id) => document.getElementById(id);
lineChart.defaults.marks = R.switches.map((m) => ({ x: m.step, label: `→ ${m.revision}` }));  // every chart

lineChart($("c-loss"), X, [{ name: "loss", values: S.loss }], { title: "Loss", yLabel: "loss (nats per token)" });
lineChart($("c-lr"), X, [{ name: "learning rate", values: S.lr }], { title: "Learning rate" });
lineChart($("c-grad"), X, [{ name: "grad norm (trained params)", values: S.grad_norm }], { title: "Gradient norm", legend: true });
lineChart($("c-param"), X, [
  { name: "param norm (trained params)", values: S.param_norm },
  { name: "param norm incl. router bias", values: S.param_norm_with_router_bias, dash: "5 3" },
], { title: "Parameter norm, with and without the router bias", yLabel: "L2 norm" });
lineChart($("c-tps"), X, [{ name: "tokens/s", values: S.tokens_per_second }], { title: "Tokens per second", yLabel: "tokens/s", yFormat: fmt.count, zero: true });
lineChart($("c-mfu"), X, [{ name: "MFU", values: S.mfu }], { title: "Model FLOPs utilisation", yLabel: "MFU (% of peak)", yFormat: fmt.pct, zero: true });
lineChart($("c-wait"), X, [{ name: "data wait", values: S.data_wait_fraction }], { title: "Share of step time waiting for data", yLabel: "% of step time", yFormat: fmt.pct, zero: true });
lineChart($("c-bias"), X, byName(R.router_bias_norm), { title: "Router bias norm per layer", yLabel: "L2 norm", legend: true });
lineChart($("c-biasmax"), X, byName(R.router_bias_max_abs), { title: "Router bias max |b| per layer", yLabel: "max |bias|", legend: true });
lineChart($("c-viol"), X, byName(R.max_violation), { title: "Expert load max-violation per layer", yLabel: "max-violation (% over even)", yFormat: fmt.pct, legend: true });
lineChart($("c-cell"), X, byName(R.loss_per_cell), { title: "Loss per cell (batches that held the cell)", yLabel: "loss (nats per token)", legend: true, connectGaps: true });
lineChart($("c-source"), X, byName(R.loss_per_source), { title: "Loss per source (batches that held the source)", yLabel: "loss (nats per token)", legend: true, connectGaps: true });

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
