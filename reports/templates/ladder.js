// The ladder page: held-out curves, the fit on log-log axes with predictions, residuals; data in #page-data.
"use strict";
const D = pageData();
const revisions = Object.keys(D.fits).length ? Object.keys(D.fits) : [...new Set(D.results.map((r) => r.revision))];
const lawAt = (p, c) => p.L_inf + p.A * Math.pow(c, -p.alpha);

xyChart($("c-curves"), D.results.map((r) => ({
  name: `${r.rung} seed ${r.seed}${revisions.length > 1 ? " · " + r.revision : ""}`,
  points: (r.curve || []).map((e) => [e.tokens, e.loss]), mode: "both",
})), { title: "Held-out macro loss per rung", logX: true, xLabel: "tokens", yLabel: "held-out loss (nats per token)" });

const fitSeries = [];
revisions.forEach((rev, k) => {
  const c = colour(k), fit = D.fits[rev];
  const pts = [];
  if (fit) for (const r of fit.residuals) pts.push([r.flops, r.loss]);
  fitSeries.push({ name: `${rev}: rungs`, points: pts, mode: "points", colour: c });
  if (!fit) return;
  const xs = pts.map((p) => p[0]).concat(fit.predictions.map((p) => p.flops));
  const lo = Math.min(...xs) / 1.5, hi = Math.max(...xs) * 1.5, line = [];
  for (let i = 0; i <= 60; i++) { const x = lo * Math.pow(hi / lo, i / 60); line.push([x, lawAt(fit.params, x)]); }
  fitSeries.push({ name: `${rev}: fit`, points: line, mode: "line", colour: c, dash: "5 3" });
  fitSeries.push({ name: `${rev}: predictions`, points: fit.predictions.map((p) => [p.flops, p.loss]), mode: "points",
    colour: "#111", bars: fit.predictions.map((p) => [p.flops, p.low, p.high]) });
});
xyChart($("c-fit"), fitSeries, { title: "Fit L(C) = L∞ + A·C^−α (log-log)", logX: true, logY: true, xLabel: "FLOPs", yLabel: "loss (nats per token)" });

xyChart($("c-resid"), revisions.filter((rev) => D.fits[rev]).map((rev, k) => ({
  name: rev, points: D.fits[rev].residuals.map((r) => [r.flops, r.residual]), mode: "points", colour: colour(k),
})), { title: "Residuals (measured − fit)", logX: true, xLabel: "FLOPs", yLabel: "residual (nats)" });
