// The runs index: sort by any column, filter by mixture, revision, status and ladder, ladder rung runs grouped
// under their ladder, and any two or more ticked runs opened together on the compare page.
"use strict";
const RUNS = pageData();
const COLUMNS = [
  { label: "Run", cls: "l", key: (r) => r.name },
  { label: "Status", cls: "l", key: (r) => r.status },
  { label: "Mixture / revision", cls: "l", key: (r) => `${r.mixture} / ${r.revision}` },
  { label: "Step", key: (r) => r.step ?? -1 },
  { label: "Tokens", key: (r) => r.tokens ?? -1 },
  { label: "Loss", key: (r) => r.loss ?? Infinity },
  { label: "Last logged", key: (r) => r.time ?? 0 },
];
const FILTERS = ["mixture", "revision", "status", "ladder"];
const ticked = new Set();
const opened = new Set();  // ladders whose rung runs are shown
let order = { col: 6, dir: -1 };  // the latest run first

function fillFilters() {
  for (const key of FILTERS) {
    const select = $(`f-${key}`);
    for (const value of [...new Set(RUNS.map((r) => r[key]).filter((v) => v))].sort())
      h("option", { value }, select, value);
    select.addEventListener("input", draw);
  }
}

function passes(r) {
  return FILTERS.every((key) => {
    const want = $(`f-${key}`).value;
    if (!want) return true;
    if (key === "ladder" && want === "-") return !r.ladder;
    return r[key] === want;
  });
}

function compareRow(r) {
  const cmp = (a, b) => { const x = COLUMNS[order.col].key(a), y = COLUMNS[order.col].key(b); return (x < y ? -1 : x > y ? 1 : 0) * order.dir; };
  return cmp;
}

function runRow(tb, r, nested) {
  const tr = h("tr", { "data-run": r.name, ...(nested ? { class: "rung" } : {}) }, tb);
  const box = h("input", { type: "checkbox", "aria-label": `compare ${r.name}` }, h("td", { class: "l" }, tr));
  box.checked = ticked.has(r.name);
  box.addEventListener("input", () => { box.checked ? ticked.add(r.name) : ticked.delete(r.name); updateButton(); });
  const name = h("td", { class: "l" }, tr);
  h("a", { href: r.href }, name, (nested ? "↳ " : "") + r.name);
  if (r.rung) h("span", { class: "muted" }, name, ` rung ${r.rung}${r.seed !== null && r.seed !== undefined ? `, seed ${r.seed}` : ""}`);
  h("span", { class: "badge" + (r.live ? " live" : "") }, h("td", { class: "l" }, tr), r.status);
  h("td", { class: "l" }, tr, `${r.mixture} / ${r.revision}`);
  h("td", {}, tr, r.step === null || r.step === undefined ? "—" : `${r.step}${r.total_steps ? " / " + fmt.count(r.total_steps) : ""}`);
  h("td", {}, tr, fmt.count(r.tokens));
  h("td", {}, tr, fmt.num(r.loss));
  h("td", {}, tr, r.time ? new Date(r.time * 1000).toISOString().slice(0, 16).replace("T", " ") : "—");
}

function ladderRow(tb, ladder, members) {
  const tr = h("tr", { class: "ladder-group", "data-ladder": ladder }, tb);
  const td = h("td", { class: "l", colspan: COLUMNS.length + 1 }, tr);
  const open = opened.has(ladder);
  const button = h("button", { type: "button", "aria-expanded": String(open) }, td,
    `${open ? "▾" : "▸"} ladder ${ladder}: ${members.length} rung run${members.length === 1 ? "" : "s"}`);
  button.addEventListener("click", () => { open ? opened.delete(ladder) : opened.add(ladder); draw(); });
  if (open) for (const r of members) runRow(tb, r, true);
}

function draw() {
  const table = $("runs");
  const head = table.querySelector("thead tr");
  head.textContent = "";
  h("th", { class: "l" }, head, "Compare");
  COLUMNS.forEach((col, k) => {
    const th = h("th", { ...(col.cls ? { class: col.cls } : {}), scope: "col",
      "aria-sort": k === order.col ? (order.dir > 0 ? "ascending" : "descending") : "none" }, head);
    h("button", { type: "button", title: `sort by ${col.label}` }, th, col.label)
      .addEventListener("click", () => { order = { col: k, dir: order.col === k ? -order.dir : (k < 3 ? 1 : -1) }; draw(); });
  });
  const tb = table.querySelector("tbody");
  tb.textContent = "";
  const shown = RUNS.filter(passes).sort(compareRow());
  const groups = new Map();
  for (const r of shown) if (r.ladder) groups.set(r.ladder, [...(groups.get(r.ladder) || []), r]);
  const placed = new Set();
  for (const r of shown) {  // a ladder's group sits where its first member sorts
    if (!r.ladder) runRow(tb, r, false);
    else if (!placed.has(r.ladder)) { placed.add(r.ladder); ladderRow(tb, r.ladder, groups.get(r.ladder)); }
  }
  if (!shown.length) h("td", { colspan: COLUMNS.length + 1, class: "l muted" }, h("tr", {}, tb), "no run matches the filters");
}

function compareHref() { return "compare.html?runs=" + [...ticked].map(encodeURIComponent).join(","); }

function updateButton() {
  const button = $("compare-ticked");
  button.disabled = ticked.size < 2;
  $("ticked-count").textContent = ticked.size < 2 ? "tick two or more runs to compare them" : `${ticked.size} runs ticked`;
}

if ($("runs")) {
  fillFilters();
  $("compare-ticked").addEventListener("click", () => { if (ticked.size >= 2) window.location.href = compareHref(); });
  draw();
  updateButton();
}
