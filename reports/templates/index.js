// The runs index: sort by any column, filter by mixture, revision, status and ladder, search by any word of a
// row (tags and notes included), choose the columns shown (kept in the URL), ladder rung runs grouped under their ladder, and any two or
// more ticked runs opened together on the compare page.
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
  { label: "Alerts", cls: "l", key: (r) => (r.alerts || []).length },
  { label: "Tags", cls: "l", key: (r) => (r.tags || []).join(" ") },
  { label: "Notes", cls: "l", key: (r) => r.notes || "" },
];
const hidden = new Set((new URLSearchParams(location.search).get("hide") || "").split(",").filter((c) => c));
const shownColumns = () => COLUMNS.map((col, k) => k).filter((k) => k === 0 || !hidden.has(COLUMNS[k].label));
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
  const words = ($("f-search").value || "").toLowerCase().split(/\s+/).filter((w) => w);
  const text = [r.name, r.status, r.mixture, r.revision, r.ladder || "", ...(r.alerts || []), ...(r.tags || []), r.notes || ""]
    .join(" ").toLowerCase();
  if (!words.every((w) => text.includes(w))) return false;
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
  const cells = [
    (td) => h("span", { class: "badge" + (r.live ? " live" : "") }, td, r.status),
    (td) => { td.textContent = `${r.mixture} / ${r.revision}`; },
    (td) => { td.textContent = r.step === null || r.step === undefined ? "—" : `${r.step}${r.total_steps ? " / " + fmt.count(r.total_steps) : ""}`; },
    (td) => { td.textContent = fmt.count(r.tokens); },
    (td) => { td.textContent = fmt.num(r.loss); },
    (td) => { td.textContent = r.time ? new Date(r.time * 1000).toISOString().slice(0, 16).replace("T", " ") : "—"; },
    (td) => { if ((r.alerts || []).length) h("span", { class: "badge alert" }, td, r.alerts.join(", ")); else td.textContent = "none"; },
    (td) => { for (const tag of r.tags || []) h("span", { class: "badge tag" }, td, tag); },
    (td) => { td.textContent = r.notes || ""; },
  ];
  for (const k of shownColumns().slice(1)) cells[k - 1](h("td", COLUMNS[k].cls ? { class: COLUMNS[k].cls } : {}, tr));
}

function ladderRow(tb, ladder, members) {
  const tr = h("tr", { class: "ladder-group", "data-ladder": ladder }, tb);
  const td = h("td", { class: "l", colspan: shownColumns().length + 1 }, tr);
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
    if (!shownColumns().includes(k)) return;
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
  if (!shown.length) h("td", { colspan: shownColumns().length + 1, class: "l muted" }, h("tr", {}, tb), "no run matches the filters");
}

function columnChooser() {  // a tick per column (the run's name always shows); the hidden ones go in the URL
  const box = $("f-columns");
  COLUMNS.forEach((col, k) => {
    if (k === 0) return;
    const label = h("label", {}, box);
    const tick = h("input", { type: "checkbox", "data-column": col.label }, label);
    label.append(" " + col.label);
    tick.checked = !hidden.has(col.label);
    tick.addEventListener("input", () => {
      tick.checked ? hidden.delete(col.label) : hidden.add(col.label);
      const q = new URLSearchParams(location.search);
      hidden.size ? q.set("hide", [...hidden].join(",")) : q.delete("hide");
      history.replaceState(null, "", location.pathname + (q.toString() ? "?" + q : ""));
      draw();
    });
  });
}

function compareHref() { return "compare.html?runs=" + [...ticked].map(encodeURIComponent).join(","); }

function updateButton() {
  const button = $("compare-ticked");
  button.disabled = ticked.size < 2;
  $("ticked-count").textContent = ticked.size < 2 ? "tick two or more runs to compare them" : `${ticked.size} runs ticked`;
}

if ($("runs")) {
  fillFilters();
  columnChooser();
  $("f-search").addEventListener("input", draw);
  $("compare-ticked").addEventListener("click", () => { if (ticked.size >= 2) window.location.href = compareHref(); });
  draw();
  updateButton();
}
