// The comparison page: several runs' curves on shared token axes, and their latest/best evaluations.
"use strict";
const C = pageData();

// Series of different runs sit on different x values: merge them on the union of tokens, null elsewhere.
function overlay(pick) {
  const xs = [...new Set(C.runs.flatMap((r) => pick(r).x))].filter((v) => v !== null).sort((a, b) => a - b);
  const series = C.runs.map((r) => {
    const { x, y } = pick(r), at = new Map(x.map((v, i) => [v, y[i]]));
    return { name: r.name, values: xs.map((v) => (at.has(v) ? at.get(v) : null)) };
  });
  return { xs, series };
}

function draw() {
  const log = $("compare-log").checked;
  const opts = { legend: true, connectGaps: true, log, xLabel: "tokens", xFormat: fmt.count };
  const train = overlay((r) => ({ x: r.tokens, y: r.loss }));
  lineChart($("c-train"), train.xs, train.series, { ...opts, title: "Training loss" });
  const loss = overlay((r) => ({ x: r.eval.tokens, y: r.eval.loss }));
  lineChart($("c-eval-loss"), loss.xs, loss.series, { ...opts, title: "Held-out loss (macro over cells)" });
  const bpb = overlay((r) => ({ x: r.eval.tokens, y: r.eval.bpb }));
  lineChart($("c-eval-bpb"), bpb.xs, bpb.series, { ...opts, title: "Held-out bits per byte (macro)" });
}

(function table() {
  const tb = document.querySelector("#compare-table tbody");
  for (const r of C.runs) {
    const tr = h("tr", {}, tb);
    const name = h("td", { class: "l" }, tr);
    h("a", { href: r.href }, name, r.name);
    h("td", { class: "l" }, tr, `${r.mixture || "?"} / ${r.revision || "?"}`);
    const s = r.summary;
    for (const x of [fmt.count(r.last_step), fmt.num(s.loss_macro.latest), fmt.num(s.loss_macro.value),
      s.loss_macro.step === null ? "—" : String(s.loss_macro.step), fmt.num(s.loss_micro.latest),
      fmt.num(s.bpb_macro.latest), fmt.num(s.bpb_macro.value), s.bpb_macro.step === null ? "—" : String(s.bpb_macro.step)])
      h("td", {}, tr, x);
  }
})();
$("compare-log").addEventListener("input", draw);
draw();
