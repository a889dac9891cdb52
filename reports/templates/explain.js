// The explain view of one run: loss and norm curves from ./summary.js; picking a step shows `train explain` for it
// from ./explain-data.js (what `train explain` found for the run's notable steps when training ended), drawn by
// explain_panel.js, which the run page's spike panel shares.
"use strict";
const RUN = pageData().run;
const D = (window.MILLRACE_RUNS || {})[RUN];
const E = (window.MILLRACE_EXPLAIN || {})[RUN] || { steps: [], explained: {} };
const LOSS_Y = "loss (nats per token)";

function marks() { return E.steps.map((s) => ({ x: s, label: String(s) })); }

function chart(id, title, yLabel, series) {
  const c = new TimeChart($(id), { title, yLabel, xLabel: "step", sync: "explain", marks: marks(),
    series: series.map((s) => ({ name: s.name, faint: s.faint, dash: s.dash })),
    onZoom: (lo, hi) => { for (const other of CHARTS) if (other !== c) other.setRange(lo, hi); } });
  c.setData(series.map((s) => [D.steps, s.values]));
  CHARTS.push(c);
  pickOnClick($(id), (x) => show(nearestExplained(E, Math.round(x)) ?? Math.round(x)));
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

function show(step) {
  const panel = $("explain-panel");
  panel.textContent = "";
  $("step-input").value = step;
  history.replaceState(null, "", `?step=${step}`);
  explainStep(panel, RUN, E, step);
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
