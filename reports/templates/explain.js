// The explain view of one run: loss and norm curves from ./summary.js; picking a step shows `train explain` for it
// from ./explain-data.js (computed at report build for the run's notable steps).
"use strict";
const RUN = pageData().run;
const D = (window.MILLRACE_RUNS || {})[RUN];
const E = (window.MILLRACE_EXPLAIN || {})[RUN] || { steps: [], explained: {} };
const LOSS_Y = "loss (nats per token)";

// A click (not a drag, which zooms) on a chart picks the explained step nearest the x under the cursor.
function pickOnClick(container, onPick) {
  let down = null;
  container.addEventListener("mousedown", (e) => { down = e.clientX; });
  container.addEventListener("click", (e) => {
    const u = container.uplot;
    if (!u || down === null || Math.abs(e.clientX - down) > 3) return;
    const box = u.over.getBoundingClientRect();
    if (e.clientX < box.left || e.clientX > box.right) return;
    onPick(Math.round(u.posToVal(e.clientX - box.left, "x")));
  });
}

function marks() { return E.steps.map((s) => ({ x: s, label: String(s) })); }

function chart(id, title, yLabel, series) {
  const c = new TimeChart($(id), { title, yLabel, xLabel: "step", sync: "explain", marks: marks(),
    series: series.map((s) => ({ name: s.name, faint: s.faint, dash: s.dash })),
    onZoom: (lo, hi) => { for (const other of CHARTS) if (other !== c) other.setRange(lo, hi); } });
  c.setData(series.map((s) => [D.steps, s.values]));
  CHARTS.push(c);
  pickOnClick($(id), (step) => show(nearest(step)));
}
const CHARTS = [];

function drawCharts() {
  if (!D) return;
  const hi = (key) => (D.bands[key] || {}).hi;
  const loss = [{ name: "loss", values: D.curves.loss }];
  if (hi("loss")) loss.push({ name: "loss (max per point)", values: hi("loss"), faint: true });
  chart("e-loss", "Training loss (click to pick a step, drag to zoom)", LOSS_Y, loss);
  chart("e-norm", "Norms (click to pick a step, drag to zoom)", "L2 norm", [
    { name: "grad norm (trained params)", values: D.curves.grad_norm },
    { name: "param norm (trained)", values: D.curves.param_norm },
    { name: "param norm with router bias", values: D.curves.param_norm_with_router_bias, dash: [5, 3] },
  ]);
}

function nearest(step) {
  if (!E.steps.length) return step;
  return E.steps.reduce((a, b) => (Math.abs(b - step) < Math.abs(a - step) ? b : a));
}

function table(parent, head, rows) {
  const t = h("table", {}, h("div", { class: "scroll" }, parent));
  const hr = h("tr", {}, h("thead", {}, t));
  head.forEach((x, k) => h("th", k === 0 ? { class: "l" } : {}, hr, x));
  const tb = h("tbody", {}, t);
  for (const row of rows) {
    const tr = h("tr", row.mark ? { class: "flagged" } : {}, tb);
    row.cells.forEach((x, k) => h("td", k === 0 || k === row.cells.length - 1 ? { class: "l" } : {}, tr, x));
  }
  return t;
}

function show(step) {
  const panel = $("explain-panel");
  panel.textContent = "";
  $("step-input").value = step;
  history.replaceState(null, "", `?step=${step}`);
  const x = E.explained[String(step)];
  if (!x) {
    h("p", { class: "note", id: "explain-none" }, panel, `Step ${step} was not explained at build time; run: millrace train explain ${RUN} --step ${step}`);
    return;
  }
  h("h2", {}, panel, `Step ${step}`);
  const f = x.figures.loss;
  const verdict = h("ul", { id: "explain-verdict" }, panel);
  h("li", {}, verdict, `loss ${fmt.num(f.value)} against a running mean of ${fmt.num(f.mean)} over ${x.window} logged steps (${f.jump === null ? "—" : (f.jump >= 0 ? "+" : "") + fmt.num(f.jump, 3)})`);
  h("li", { id: "explain-moved" }, verdict, `groups that moved: ${x.moved_groups.join(", ") || "none beyond their usual change"}`);
  h("li", { id: "explain-jumped" }, verdict, `cells whose loss jumped: ${x.jumped_cells.join(", ") || "none"}`);
  if (x.alerts.started.length) h("li", {}, verdict, `alerts that started here: ${x.alerts.started.join(", ")}`);
  const b = x.batch;
  h("h3", {}, panel, b.error ? "The batch" : `The batch: ${b.sequences} sequences from ${b.cells.length} cells (loader step ${b.loader_step}, phase ${b.phase})`);
  if (b.error) h("p", { class: "note" }, panel, `The loader could not rebuild it: ${b.error}`);
  else table(panel, ["cell", "sequences", "tokens by source"], b.cells.map((c) => ({ cells: [c.cell, String(c.sequences),
    Object.entries(c.sources).sort((p, q) => q[1] - p[1]).map(([s, n]) => `${s} ${fmt.count(n)}`).join(", ") || "—"] }))).id = "explain-batch";
  h("h3", {}, panel, "Loss per cell against its running mean");
  table(panel, ["cell", "loss", "running mean", "jump", "beyond the median cell", ""], x.cells.map((c) => ({ mark: c.jumped,
    cells: [c.cell, fmt.num(c.value), fmt.num(c.mean), fmt.num(c.jump, 3), fmt.num(c.excess, 3), c.jumped ? "jumped" : ""] }))).id = "explain-cells";
  h("h3", {}, panel, "Parameter groups: norm change against the typical change per logged step");
  table(panel, ["group", "norm", "change", "typical change", "ratio", ""], x.groups.map((g) => ({ mark: g.moved,
    cells: [g.group + (g.rule_updated ? " (rule-updated)" : ""), fmt.num(g.norm), fmt.num(g.change, 3), fmt.num(g.typical_change, 3),
      fmt.num(g.ratio, 3), g.moved ? "moved" : ""] }))).id = "explain-groups";
}

(function start() {
  const buttons = $("step-buttons");
  for (const s of E.steps) h("button", { type: "button", "data-step": s }, buttons, String(s)).addEventListener("click", () => show(s));
  if (!E.steps.length) h("span", { class: "muted" }, buttons, "none computed");
  $("step-input").addEventListener("change", (e) => show(Number(e.target.value)));
  drawCharts();
  const asked = Number(new URLSearchParams(window.location.search).get("step"));
  if (asked) show(asked);
  else if (E.steps.length) show(E.steps[0]);
})();
