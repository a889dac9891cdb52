// What `train explain` found at one step, as a panel (the run page's spike forensics and the explain view):
// the verdict, the batch's cells and sources, each cell's loss against its running mean, and which parameter
// groups moved. `E` is a run's explain-data.js payload ({steps, explained}); a step it does not cover gets
// the command that explains it. Needs charts.js (h, fmt).
"use strict";

function nearestExplained(E, step, within) {  // the explained step nearest `step`, null when none is within reach
  let best = null;
  for (const s of E.steps) if (best === null || Math.abs(s - step) < Math.abs(best - step)) best = s;
  return best !== null && (within === undefined || Math.abs(best - step) <= within) ? best : null;
}

function explainTable(parent, head, rows) {
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

// Fill `panel` with the explanation of `step` (false, and the command to run, when E does not cover it).
function explainStep(panel, run, E, step) {
  panel.textContent = "";
  const x = E.explained[String(step)];
  if (!x) {
    h("p", { class: "note", id: "explain-none" }, panel, `Step ${step} was not explained when training ended; run: `);
    h("code", { id: "explain-command" }, panel.lastChild, `millrace train explain ${run} --step ${step}`);
    if (E.steps.length) h("p", { class: "note" }, panel, `Explained steps: ${E.steps.join(", ")}.`);
    return false;
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
  else explainTable(panel, ["cell", "sequences", "tokens by source"], b.cells.map((c) => ({ cells: [c.cell, String(c.sequences),
    Object.entries(c.sources).sort((p, q) => q[1] - p[1]).map(([s, n]) => `${s} ${fmt.count(n)}`).join(", ") || "—"] }))).id = "explain-batch";
  h("h3", {}, panel, "Loss per cell against its running mean");
  explainTable(panel, ["cell", "loss", "running mean", "jump", "beyond the median cell", ""], x.cells.map((c) => ({ mark: c.jumped,
    cells: [c.cell, fmt.num(c.value), fmt.num(c.mean), fmt.num(c.jump, 3), fmt.num(c.excess, 3), c.jumped ? "jumped" : ""] }))).id = "explain-cells";
  h("h3", {}, panel, "Parameter groups: norm change against the typical change per logged step");
  explainTable(panel, ["group", "norm", "change", "typical change", "ratio", ""], x.groups.map((g) => ({ mark: g.moved,
    cells: [groupLabel(g), fmt.num(g.norm), fmt.num(g.change, 3), fmt.num(g.typical_change, 3),
      fmt.num(g.ratio, 3), g.moved ? "moved" : ""] }))).id = "explain-groups";
  return true;
}

// Each group says how it is updated, as `train explain` does (grad / rule): the router bias by a rule, every other
// group by gradients (a record from before the per-group norms has one "gradient-trained (all)" group, already named so).
function groupLabel(g) {
  if (g.rule_updated) return `${g.group} (rule-updated)`;
  return g.group.startsWith("gradient-trained") ? g.group : `${g.group} (gradient-trained)`;
}

// A click (not a drag, which zooms) on a chart: onPick(x under the pointer, or the x of the point the hover
// names, which is the spike's own record on a thinned chart). With `delay` (ms), a double-click (reset) picks nothing.
function pickOnClick(container, onPick, delay = 0) {
  let down = null, timer = null;
  container.addEventListener("mousedown", (e) => { down = e.clientX; });
  container.addEventListener("dblclick", () => { clearTimeout(timer); timer = null; });
  container.addEventListener("click", (e) => {
    const u = container.uplot;
    if (!u || down === null || Math.abs(e.clientX - down) > 3 || e.shiftKey) return;
    const box = u.over.getBoundingClientRect();
    if (e.clientX < box.left || e.clientX > box.right || e.clientY < box.top || e.clientY > box.bottom) return;
    const idx = u.cursor.idx, x = idx !== null && idx !== undefined ? u.data[0][idx] : u.posToVal(e.clientX - box.left, "x");
    const perPixel = (u.scales.x.max - u.scales.x.min) / box.width;
    if (!delay) { onPick(x, perPixel); return; }
    clearTimeout(timer);
    timer = setTimeout(() => { timer = null; onPick(x, perPixel); }, delay);
  });
}
