// The composition page: every built revision is in #page-data; ?revision=<name> picks one.
"use strict";
const D = pageData();
const KEYS = Object.keys(D.revisions);
const CELLS = D.cells;
const state = { revision: null, compare: null, metric: "weight:0", cell: null };

function resolveRevision(name) {
  if (!name) return null;
  if (name in D.revisions) return name;
  return KEYS.find((k) => D.revisions[k].revision === name) || null;
}

// Derived per-cell numbers of one revision.
function derive(key) {
  const r = D.revisions[key];
  const phases = r.phases.map((p) => ({
    name: p.name, revision: p.revision, declared: p.declared, counts: p.counts,
    realised: p.counts.map((c) => (p.sequences ? c / p.sequences : 0)),
    tokens: p.counts.map((c) => c * r.seq_len),
  }));
  const drawn = CELLS.map((_, i) => phases.reduce((a, p) => a + p.counts[i], 0));
  const epochs = drawn.map((d, i) => (r.sequences_available[i] ? d / r.sequences_available[i] : (d ? Infinity : 0)));
  const flags = epochs.map((e) => (e >= r.epoch_cap * 0.995 ? "at" : e >= r.epoch_cap * 0.9 ? "near" : ""));
  // Tokens per cell drawn by each revision of the lineage (one entry without lineage).
  const byRevision = r.lineage.map((l) => ({ revision: l.revision, tokens: CELLS.map((_, i) =>
    phases.filter((p) => p.revision === l.revision).reduce((a, p) => a + p.tokens[i], 0)) }));
  return { r, phases, drawn, epochs, flags, byRevision, tokensDrawn: drawn.map((d) => d * r.seq_len) };
}

// Phases of two revisions matched by name (as `mix diff` does); a phase in one revision only pairs with null.
function matchPhase(d, name) { return d ? d.phases.find((p) => p.name === name) || null : null; }
function alignPhases(cur, cmp) {
  const pairs = cur.phases.map((a) => ({ name: a.name, a, b: matchPhase(cmp, a.name) }));
  for (const b of cmp.phases) if (!matchPhase(cur, b.name)) pairs.push({ name: b.name, a: null, b });
  return pairs;
}

function cellLabel(c) { return c.label ? `${c.name} · ${c.label}` : c.name; }
function flagBadge(parent, flag) {
  if (!flag) return;
  h("span", { class: flag === "at" ? "flag-at" : "flag-near" }, parent, flag === "at" ? "at cap" : "near cap");
}

function setUrl() {
  const params = new URLSearchParams(location.search);
  if (state.revision) params.set("revision", state.revision); else params.delete("revision");
  if (state.compare) params.set("compare", state.compare); else params.delete("compare");
  params.set("metric", state.metric);
  const url = location.pathname + "?" + params.toString() + location.hash;
  try { history.replaceState(null, "", url); } catch (e) { /* some file:// setups refuse; the page still works */ }
}

function fillSelect(select, options, value) {
  select.textContent = "";
  for (const [v, text] of options) {
    const o = h("option", { value: v }, select, text);
    if (v === value) o.selected = true;
  }
}

function metricOptions() {
  const out = [["available", "available tokens"]];
  const r = D.revisions[state.revision];
  if (r) {
    r.phases.forEach((p, i) => {
      out.push([`weight:${i}`, `weight, ${p.name}`]);
      out.push([`tokens:${i}`, `tokens drawn, ${p.name}`]);
    });
    out.push(["epochs", "epochs (all phases)"]);
    if (state.compare) r.phases.forEach((p, i) => out.push([`delta:${i}`, `change vs compared, ${p.name}`]));
  }
  return out;
}

function renderControls() {
  const revOpts = KEYS.map((k) => [k, D.revisions[k].label]);
  fillSelect(document.getElementById("revision"), revOpts, state.revision);
  fillSelect(document.getElementById("compare"), [["", "— none —"], ...revOpts.filter(([k]) => k !== state.revision)], state.compare || "");
  const mo = metricOptions();
  if (!mo.some(([v]) => v === state.metric)) state.metric = mo.length > 1 ? mo[1][0] : "available";
  fillSelect(document.getElementById("metric"), mo, state.metric);
}

function renderSummary(cur) {
  const cards = document.getElementById("revision-cards");
  cards.textContent = "";
  const card = (v, k) => { const c = h("div", { class: "card" }, cards); h("div", { class: "v" }, c, v); h("div", { class: "k" }, c, k); };
  const r = cur.r;
  const total = r.total_sequences * r.seq_len;
  card(r.revision, `revision of mixture ${r.mixture}`);
  const about = document.getElementById("revision-description");
  about.textContent = r.description || "";
  const prov = r.proposal;
  if (prov) {
    // a revision a mixture search proposed: its search, surrogate, predicted target and prior
    about.append((r.description ? " " : "") + `Proposed by mixture search `);
    h("a", { href: prov.href }, about, prov.search);
    about.append(`: ${prov.surrogate} surrogate on ${prov.rows} proxies, predicted ${fmt.num(prov.predicted)}` +
      ` (${fmt.num(prov.interval[0])} – ${fmt.num(prov.interval[1])}), continuing ${prov.prior}.`);
  }
  about.hidden = !r.description && !prov;
  card(fmt.count(total), "tokens drawn (all phases)");
  card(fmt.count(r.total_steps), `steps of ${fmt.count(r.global_batch)} × ${fmt.count(r.seq_len)}`);
  card(fmt.epochs(r.epoch_cap), "epoch cap");
  card(String(cur.flags.filter((f) => f === "at").length), "cells at the cap");
  card(String(cur.flags.filter((f) => f === "near").length), "cells near the cap");
  card(String(cur.drawn.filter((d) => d > 0).length) + " / " + CELLS.length, "cells sampled");
  const wrap = document.getElementById("phase-table");
  wrap.textContent = "";
  const t = h("table", {}, wrap);
  const hr = h("tr", {}, h("thead", {}, t));
  for (const x of ["Phase", "Drawn by", "Token budget", "Sequences", "Steps", "First step", "Cells weighted"]) h("th", {}, hr, x);
  const tb = h("tbody", {}, t);
  r.phases.forEach((p) => {
    const tr = h("tr", {}, tb);
    h("td", {}, tr, p.name);
    h("td", {}, tr, p.revision);
    h("td", {}, tr, fmt.count(p.token_budget));
    h("td", {}, tr, fmt.count(p.sequences));
    h("td", {}, tr, fmt.count(p.steps));
    h("td", {}, tr, fmt.count(p.start_step));
    h("td", {}, tr, String(p.declared.filter((w) => w > 0).length));
  });
  const note = h("p", { class: "note" }, wrap,
    `seed ${r.seed} · manifest ${r.manifest_hash.slice(0, 19)}… · revision ${r.revision_hash.slice(0, 19)}…` +
    (D.stale.includes(state.revision) ? " · built against an older store.json" : ""));
  note.id = "revision-hashes";
  if (r.lineage.length > 1) {
    const last = (l) => fmt.count(l.stop_step - 1);
    h("p", { id: "lineage" }, wrap, "Lineage: " + r.lineage.map((l) =>
      `steps ${fmt.count(l.start_step)}–${last(l)} drawn by ${l.revision} (manifest ${l.manifest_hash.slice(0, 15)}…)`).join(", then ") +
      `. Steps before ${fmt.count(r.at_step)} are the parent's exactly; epochs and tokens below count the whole lineage.`);
  }
}

function gridShape() {
  if (D.grid) {
    const rowOf = new Map(D.grid.domains.map((d, i) => [d.index, i]));
    const colOf = new Map(D.grid.buckets.map((b, i) => [b, i]));
    const at = D.grid.domains.map(() => D.grid.buckets.map(() => -1));
    CELLS.forEach((c, i) => { at[rowOf.get(c.domain)][colOf.get(c.bucket)] = i; });
    const rows = D.grid.domains.map((d) => `c${String(d.index).padStart(2, "0")}${d.label ? " " + d.label : ""}`);
    return { rows, cols: D.grid.buckets.map((b) => `q${b}`), at };
  }
  return { rows: CELLS.map((c) => c.name), cols: ["cell"], at: CELLS.map((_, i) => [i]) };
}

function cellTooltip(i, cur, cmp) {
  const c = CELLS[i], r = cur.r;
  const lines = [cellLabel(c), `available ${fmt.count(c.tokens)} tokens, ${fmt.count(c.documents)} documents`];
  cur.phases.forEach((p, k) => {
    lines.push(`${p.name}: declared ${fmt.pct(p.declared[i])}, realised ${fmt.pct(p.realised[i])}, ${fmt.count(p.tokens[i])} tokens`);
    const q = matchPhase(cmp, p.name);
    if (q) lines.push(`  vs ${cmp.r.revision}: ${fmt.pct(q.realised[i])} (${fmt.pp(p.realised[i] - q.realised[i])})`);
  });
  lines.push(`epochs ${fmt.epochs(cur.epochs[i])} of cap ${fmt.epochs(r.epoch_cap)}${cur.flags[i] ? " — " + cur.flags[i] + " cap" : ""}`);
  return lines.join("\n");
}

function renderGrid(cur, cmp) {
  const shape = gridShape();
  const [kind, idx] = state.metric.split(":");
  const p = Number(idx || 0);
  let value, format, opts = {};
  if (kind === "available") { value = (i) => CELLS[i].tokens; format = fmt.count; opts.sqrt = true; }
  else if (kind === "weight") { value = (i) => cur.phases[p].realised[i]; format = fmt.pct; opts.sqrt = true; }
  else if (kind === "tokens") { value = (i) => cur.phases[p].tokens[i]; format = fmt.count; opts.sqrt = true; }
  else if (kind === "epochs") { value = (i) => cur.epochs[i]; format = fmt.epochs; }
  else { const q = matchPhase(cmp, cur.phases[p].name); value = (i) => cur.phases[p].realised[i] - (q ? q.realised[i] : 0); format = fmt.pp; opts.diverging = true; opts.sqrt = true; }
  const shown = metricOptions().find(([v]) => v === state.metric);
  heatMap(document.getElementById("grid"), shape.rows, shape.cols, (r, c) => (shape.at[r][c] < 0 ? null : value(shape.at[r][c])), {
    ...opts,
    title: `${D.grid ? "Domain × quality grid" : "Cells"} of ${cur.r.label}: ${shown ? shown[1] : kind}` +
      (cmp ? ` against ${cmp.r.label}` : "") + ". Each square names its cell and numbers.",
    emptyLabel: "no such cell",
    lowLabel: cmp ? `less in ${cur.r.revision}` : "", highLabel: cmp ? `more in ${cur.r.revision}` : "",
    scaleFormat: format,
    format: (v, r, c) => {
      const i = shape.at[r][c];
      return format(v) + (kind === "epochs" && cur.flags[i] ? (cur.flags[i] === "at" ? " ●" : " ○") : "");
    },
    tooltip: (r, c) => (shape.at[r][c] < 0 ? "no such cell" : cellTooltip(shape.at[r][c], cur, cmp)),
    onClick: (r, c) => { const i = shape.at[r][c]; if (i >= 0) openCell(CELLS[i].name, true); },
  });
  markSelected();
}

// A cell is linkable: #cell-c03q2 opens its details (or its weights row), marks its square, and clicking
// a square puts that link in the address bar.
function openCell(name, fromClick) {
  const index = CELLS.findIndex((c) => c.name === name);
  if (index < 0) return false;
  state.cell = name;
  if (fromClick) {
    try { history.replaceState(null, "", location.pathname + location.search + "#cell-" + name); } catch (e) { /* file:// */ }
  }
  markSelected();
  const det = document.getElementById("cell-" + name);
  const row = document.getElementById("w-" + name);
  document.querySelectorAll("details.cell.target").forEach((d) => d.classList.remove("target"));
  if (det) { det.open = true; det.classList.add("target"); det.scrollIntoView({ block: "start" }); }
  else if (row) { row.scrollIntoView({ block: "center" }); }
  return true;
}
function markSelected() {
  const shape = gridShape();
  document.querySelectorAll("#grid g.hm").forEach((g) => {
    const i = shape.at[Number(g.dataset.row)][Number(g.dataset.col)];
    g.classList.toggle("selected", i >= 0 && CELLS[i].name === state.cell);
  });
}

// Columns 3 (label) and 5 (documents) only when the store records them (not in a stats-only store).
function dropColumns(list) { return list.filter((_, k) => (k !== 3 || HAS_LABELS) && (k !== 5 || HAS_DOCS)); }

function sortableTable(wrap, head, rows, initial) {
  // head: [{label, cls, key(row) -> sort key}], rows: [{id, cells: [(td) => void], data}]
  wrap.textContent = "";
  const t = h("table", {}, wrap);
  const hr = h("tr", {}, h("thead", {}, t));
  const tb = h("tbody", {}, t);
  let order = initial || { col: 0, dir: 1 };
  const draw = () => {
    const sorted = rows.slice().sort((a, b) => {
      const x = head[order.col].key(a), y = head[order.col].key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * order.dir;
    });
    tb.textContent = "";
    for (const row of sorted) {
      const tr = h("tr", row.id ? { id: row.id } : {}, tb);
      row.cells.forEach((fill, k) => fill(h("td", head[k].cls ? { class: head[k].cls } : {}, tr)));
    }
    ths.forEach((th, k) => th.setAttribute("aria-sort", k === order.col ? (order.dir > 0 ? "ascending" : "descending") : "none"));
  };
  // a header is a button (reachable by Tab, pressed with Enter or Space) and says how the rows are sorted
  const ths = head.map((col, k) => {
    const th = h("th", { ...(col.cls ? { class: col.cls } : {}), "aria-sort": "none", scope: "col" }, hr);
    const button = h("button", { type: "button", title: `sort by ${col.label}` }, th, col.label);
    button.addEventListener("click", () => { order = { col: k, dir: order.col === k ? -order.dir : (k === 0 ? 1 : -1) }; draw(); });
    return th;
  });
  draw();
}

const HAS_LABELS = CELLS.some((c) => c.label);
const HAS_DOCS = CELLS.some((c) => c.documents);

function renderWeights(cur) {
  // the columns that flag problems (the cap, epochs) come first, so no one scrolls to find them
  const head = [{ label: "Cell", cls: "l", key: (x) => x.i },
    { label: "Cap", cls: "l", key: (x) => (cur.flags[x.i] === "at" ? 2 : cur.flags[x.i] === "near" ? 1 : 0) },
    { label: "Epochs", key: (x) => cur.epochs[x.i] }, { label: "Label", cls: "l", key: (x) => CELLS[x.i].label },
    { label: "Available", key: (x) => CELLS[x.i].tokens }, { label: "Documents", key: (x) => CELLS[x.i].documents }];
  cur.phases.forEach((p, k) => {
    head.push({ label: `${p.name} declared`, key: (x) => p.declared[x.i] });
    head.push({ label: `${p.name} realised`, key: (x) => p.realised[x.i] });
    head.push({ label: `${p.name} tokens`, key: (x) => p.tokens[x.i] });
  });
  const lineage = cur.byRevision.length > 1 ? cur.byRevision : [];
  lineage.forEach((l) => head.push({ label: `tokens by ${l.revision}`, key: (x) => l.tokens[x.i] }));
  head.push({ label: "Tokens, whole lineage", key: (x) => cur.tokensDrawn[x.i] });
  const rows = CELLS.map((c, i) => {
    const cells = [(td) => { td.textContent = c.name; }, (td) => flagBadge(td, cur.flags[i]),
      (td) => { td.textContent = fmt.epochs(cur.epochs[i]); }, (td) => { td.textContent = c.label || ""; },
      (td) => { td.textContent = fmt.count(c.tokens); }, (td) => { td.textContent = fmt.count(c.documents); }];
    cur.phases.forEach((p) => {
      cells.push((td) => { td.textContent = fmt.pct(p.declared[i]); });
      cells.push((td) => { td.textContent = fmt.pct(p.realised[i]); td.title = `${p.counts[i].toLocaleString("en-US")} sequences`; });
      cells.push((td) => { td.textContent = fmt.count(p.tokens[i]); });
    });
    lineage.forEach((l) => cells.push((td) => { td.textContent = fmt.count(l.tokens[i]); }));
    cells.push((td) => { td.textContent = fmt.count(cur.tokensDrawn[i]); });
    return { id: "w-" + c.name, i, cells: dropColumns(cells) };
  });
  sortableTable(document.getElementById("weights"), dropColumns(head), rows);
}

function renderDiff(cur, cmp) {
  const wrap = document.getElementById("diff");
  wrap.textContent = "";
  if (!cmp) { h("p", { class: "note" }, wrap, KEYS.length > 1 ? "Choose a revision under “Compare with” to see what changes." : "Only one revision is built on this store."); return; }
  const pairs = alignPhases(cur, cmp);
  const rowsum = h("p", { id: "diff-summary" }, wrap);
  const parts = [];
  for (const { name, a, b } of pairs) {
    if (!a || !b) { parts.push(`${name} exists only in ${a ? cur.r.revision : cmp.r.revision}`); continue; }
    let tv = 0, changed = 0;
    CELLS.forEach((_, i) => { const d = a.realised[i] - b.realised[i]; tv += Math.abs(d) / 2; if (Math.abs(d) > 1e-12) changed++; });
    parts.push(`${name}: ${changed} cells change, total variation ${fmt.pct(tv)}`);
  }
  rowsum.textContent = `${cur.r.label} against ${cmp.r.label} — ` + parts.join("; ") + ".";
  const delta = (k, i) => (pairs[k].a ? pairs[k].a.realised[i] : 0) - (pairs[k].b ? pairs[k].b.realised[i] : 0);
  const idx = CELLS.map((_, i) => i).filter((i) => {
    for (let k = 0; k < pairs.length; k++) if (Math.abs(delta(k, i)) > 1e-12) return true;
    return Math.abs(cur.epochs[i] - cmp.epochs[i]) > 1e-12;
  });
  // changes and epochs first; blue went up and orange went down, as in the grid's "change vs compared" view
  const head = [{ label: "Cell", cls: "l", key: (x) => x.i }];
  pairs.forEach(({ name }, k) => head.push({ label: `${name} change`, key: (x) => Math.abs(delta(k, x.i)) }));
  head.push({ label: `Epochs ${cur.r.revision}`, key: (x) => cur.epochs[x.i] });
  head.push({ label: `Epochs ${cmp.r.revision}`, key: (x) => cmp.epochs[x.i] });
  head.push({ label: "Label", cls: "l", key: (x) => CELLS[x.i].label });
  pairs.forEach(({ name, a, b }) => {
    head.push({ label: `${name} ${cur.r.revision}`, key: (x) => (a ? a.realised[x.i] : 0) });
    head.push({ label: `${name} ${cmp.r.revision}`, key: (x) => (b ? b.realised[x.i] : 0) });
  });
  const rows = idx.map((i) => {
    const cells = [(td) => { td.textContent = CELLS[i].name; }];
    pairs.forEach((_, k) => cells.push((td) => {
      const d = delta(k, i); td.textContent = fmt.pp(d); td.className = d > 0 ? "rise" : d < 0 ? "fall" : "";
    }));
    cells.push((td) => { td.textContent = fmt.epochs(cur.epochs[i]); flagBadge(td, cur.flags[i]); });
    cells.push((td) => { td.textContent = fmt.epochs(cmp.epochs[i]); });
    cells.push((td) => { td.textContent = CELLS[i].label || ""; td.className = "l"; });
    pairs.forEach(({ a, b }) => {
      cells.push((td) => { td.textContent = a ? fmt.pct(a.realised[i]) : "—"; });
      cells.push((td) => { td.textContent = b ? fmt.pct(b.realised[i]) : "—"; });
    });
    return { i, cells };
  });
  const tw = h("div", { class: "scroll tall" }, wrap);
  sortableTable(tw, head, rows, { col: 1, dir: -1 });
  const key = h("p", { class: "note" }, wrap, `${CELLS.length - idx.length} unchanged cells not listed. Changes are in realised weight, percentage points, ${cur.r.revision} minus ${cmp.r.revision}: `);
  h("span", { class: "rise" }, key, "blue: more in " + cur.r.revision);
  key.appendChild(document.createTextNode(", "));
  h("span", { class: "fall" }, key, "orange: less");
  key.appendChild(document.createTextNode(" (the same colours as the grid's change view)."));
}

function renderSourceShare(cur) {
  const wrap = document.getElementById("source-share");
  if (!wrap || !D.sources.length) return;
  const storeTotal = D.store.tokens || 1;
  const drawnTotal = cur.tokensDrawn.reduce((a, b) => a + b, 0) || 1;
  const rows = D.sources.map((s) => {
    const avail = s.tokens_by_cell.reduce((a, b) => a + b, 0);
    const drawn = s.tokens_by_cell.reduce((a, t, i) => a + (CELLS[i].tokens ? cur.tokensDrawn[i] * t / CELLS[i].tokens : 0), 0);
    return { s, avail, drawn };
  });
  const head = [{ label: "Source", cls: "l", key: (x) => x.s.name }, { label: "Available", key: (x) => x.avail },
    { label: "Share of store", key: (x) => x.avail }, { label: "Tokens drawn", key: (x) => x.drawn },
    { label: "Share of revision", key: (x) => x.drawn }, { label: "Epochs", key: (x) => (x.avail ? x.drawn / x.avail : 0) }];
  sortableTable(wrap, head, rows.map((x) => ({
    ...x, cells: [(td) => { td.textContent = x.s.name; }, (td) => { td.textContent = fmt.count(x.avail); },
      (td) => { td.textContent = fmt.pct(x.avail / storeTotal); }, (td) => { td.textContent = fmt.count(x.drawn); },
      (td) => { td.textContent = fmt.pct(x.drawn / drawnTotal); }, (td) => { td.textContent = fmt.epochs(x.avail ? x.drawn / x.avail : 0); }],
  })), { col: 3, dir: -1 });
}

function render() {
  renderControls();
  setUrl();
  const notice = document.getElementById("notice");
  if (!state.revision) {
    notice.textContent = "No mixture revision is built on this store yet (run `millrace mix build MIXTURE --revision NAME`). Only the store's own numbers are shown.";
    for (const id of ["summary", "weights-section", "diff-section", "revision-control", "compare-control", "source-share-block"]) {
      const node = document.getElementById(id);
      if (node) node.style.display = "none";
    }
    heatMap(document.getElementById("grid"), gridShape().rows, gridShape().cols, (r, c) => { const i = gridShape().at[r][c]; return i < 0 ? null : CELLS[i].tokens; },
      { sqrt: true, format: fmt.count, tooltip: (r, c) => { const i = gridShape().at[r][c]; return i < 0 ? "" : `${cellLabel(CELLS[i])}\n${fmt.count(CELLS[i].tokens)} tokens`; } });
    return;
  }
  const cur = derive(state.revision);
  const cmp = state.compare ? derive(state.compare) : null;
  document.title = `${D.store.name} ${D.store.version} — ${cur.r.label}`;
  renderSummary(cur);
  renderGrid(cur, cmp);
  renderWeights(cur);
  renderDiff(cur, cmp);
  renderSourceShare(cur);
}

(function start() {
  const params = new URLSearchParams(location.search);
  const asked = params.get("revision");
  state.revision = resolveRevision(asked) || KEYS[0] || null;
  state.compare = resolveRevision(params.get("compare"));
  if (state.compare === state.revision) state.compare = null;
  state.metric = params.get("metric") || state.metric;
  if (asked && state.revision && resolveRevision(asked) === null) {
    const notice = document.getElementById("notice");
    notice.textContent = `No revision “${asked}” is built on this store, so this page shows ${D.revisions[state.revision].label} instead. ` +
      `Built here: ${KEYS.join(", ")}.`;
    notice.className = "alert";
  }
  document.getElementById("revision").addEventListener("change", (e) => {
    state.revision = e.target.value;
    if (state.compare === state.revision) state.compare = null;
    document.getElementById("notice").textContent = "";
    document.getElementById("notice").className = "note";
    render();
  });
  document.getElementById("compare").addEventListener("change", (e) => { state.compare = e.target.value || null; render(); });
  document.getElementById("metric").addEventListener("change", (e) => { state.metric = e.target.value; render(); });
  render();
  const linked = location.hash.startsWith("#cell-") ? location.hash.slice(6) : "";
  if (linked) openCell(decodeURIComponent(linked), false);
  window.addEventListener("hashchange", () => {
    if (location.hash.startsWith("#cell-")) openCell(decodeURIComponent(location.hash.slice(6)), false);
  });
})();
