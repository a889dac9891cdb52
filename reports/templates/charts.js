// Small SVG charts drawn in the page: line charts and heat maps, no library, no network.
"use strict";
const NS = "http://www.w3.org/2000/svg";

// Numbers as a person writes them; the same rules as reports/numbers.py.
const fmt = {
  trim(s) { return s.indexOf(".") >= 0 ? s.replace(/0+$/, "").replace(/\.$/, "") : s; },
  sig(v, d = 3) {
    if (v === 0) return "0";
    const dec = Math.max(0, d - 1 - Math.floor(Math.log10(Math.abs(v))));
    return fmt.trim(v.toFixed(Math.min(dec, 20)));
  },
  count(v) {
    if (v === null || v === undefined || !isFinite(v)) return "—";
    const m = Math.abs(v);
    for (const [s, x] of [[1e15, "P"], [1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]]) {
      if (m >= s * 0.9995) {
        const t = fmt.sig(v / s);
        if (Math.abs(parseFloat(t)) >= 1000 && x !== "P") continue;
        return t + x;
      }
    }
    return Number.isInteger(v) || m >= 100 ? String(Math.round(v)) : fmt.sig(v);
  },
  pct(f) {
    if (f === null || f === undefined || !isFinite(f)) return "—";
    if (f === 0) return "0%";
    const v = f * 100;
    return (Math.abs(v) >= 1 ? fmt.trim(v.toFixed(1)) : fmt.sig(v, 2)) + "%";
  },
  pp(f) {  // a change of share, in percentage points
    if (f === null || !isFinite(f)) return "—";
    if (f === 0) return "0";
    const v = f * 100;
    return (v > 0 ? "+" : "−") + (Math.abs(v) >= 1 ? fmt.trim(Math.abs(v).toFixed(2)) : fmt.sig(Math.abs(v), 2)) + " pp";
  },
  epochs(e) {
    if (e === null || e === undefined || !isFinite(e)) return "—";
    if (e === 0) return "0×";
    return (e >= 0.01 ? fmt.trim(e.toFixed(2)) : fmt.sig(e, 2)) + "×";
  },
  num(v, d = 4) {
    if (v === null || v === undefined || !isFinite(v)) return "—";
    if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-4)) return v.toExponential(d - 1);
    return fmt.sig(v, d);
  },
};

function el(tag, attrs, parent, text) {
  const node = document.createElementNS(NS, tag);
  for (const k in attrs || {}) node.setAttribute(k, attrs[k]);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function h(tag, attrs, parent, text) {
  const node = document.createElement(tag);
  for (const k in attrs || {}) node.setAttribute(k, attrs[k]);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
const $ = (id) => document.getElementById(id);
function pageData() { return JSON.parse($("page-data").textContent); }  // a page's embedded #page-data

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
  "#7f7f7f", "#bcbd22"];
function colour(i) { return PALETTE[i % PALETTE.length]; }

// Sequential scale (viridis stops), t in [0, 1].
const SEQ = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function seqColour(t) {
  t = Math.max(0, Math.min(1, t));
  const x = t * (SEQ.length - 1), i = Math.min(SEQ.length - 2, Math.floor(x)), f = x - i;
  const c = SEQ[i].map((a, k) => Math.round(a + (SEQ[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
// Diverging scale for changes, t in [-1, 1]: orange went down — white — blue went up. The diff table's
// .rise / .fall text uses the same two colours, so one legend means one thing on the whole page.
const RISE = [33, 102, 172], FALL = [179, 88, 6];
function divColour(t) {
  t = Math.max(-1, Math.min(1, t));
  const end = t < 0 ? FALL : RISE, a = Math.abs(t);
  const c = [247, 247, 247].map((w, k) => Math.round(w + (end[k] - w) * a));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) { hi = lo + 1; }
  const span = hi - lo, step0 = span / n, mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= n) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return ticks;
}

let TIP = null;
function tip() {
  if (!TIP) { TIP = h("div", { class: "tip" }, document.body); }
  return TIP;
}
// evt: a pointer event, or {clientX, clientY} of a focused element; the tip stays inside the window.
function showTip(evt, text) {
  const t = tip();
  t.textContent = text;
  t.style.display = "block";
  const x = Math.min(evt.clientX + 14, window.innerWidth - t.offsetWidth - 6);
  let y = evt.clientY + 14;
  if (y + t.offsetHeight > window.innerHeight - 6) y = evt.clientY - 14 - t.offsetHeight;  // above, near the bottom
  t.style.left = Math.max(4, x) + "px";
  t.style.top = Math.max(4, Math.min(y, window.innerHeight - t.offsetHeight - 4)) + "px";
}
function tipAt(node) {  // for focus and taps: the tip beside the element itself
  const box = node.getBoundingClientRect();
  return { clientX: box.left + box.width / 2, clientY: box.top + box.height / 2 };
}
// Chart text keeps this size in CSS pixels whatever the screen: the drawing is as wide as its box.
const CHART_FONT = 12;
function chartWidth(container, fallback) {
  const w = container.clientWidth || (container.parentElement && container.parentElement.clientWidth) || fallback;
  return Math.max(300, Math.min(Math.round(w), 1400));
}
function svgText(svg, attrs, text) { return el("text", attrs, svg, text); }
// A legend whose entries are buttons that show or hide their series (charts with many lines).
function pickLegend(wrap, series, paths) {
  const lg = h("div", { class: "legend pick", role: "group", "aria-label": "series shown (press to show or hide)" }, wrap);
  series.forEach((s, k) => {
    const item = h("button", { type: "button", "aria-pressed": "true", class: "pick" }, lg);
    const sw = h("i", {}, item); sw.style.background = s.colour || colour(k);
    item.appendChild(document.createTextNode(s.name));
    item.addEventListener("click", () => {
      const on = item.getAttribute("aria-pressed") !== "true";
      item.setAttribute("aria-pressed", String(on));
      for (const node of paths[k] || []) node.style.display = on ? "" : "none";
    });
  });
  if (series.length > PALETTE.length) {
    const only = h("button", { type: "button", class: "pick all" }, lg, "none / all");
    only.addEventListener("click", () => {
      const anyOn = [...lg.querySelectorAll("button[aria-pressed]")].some((b) => b.getAttribute("aria-pressed") === "true");
      lg.querySelectorAll("button[aria-pressed]").forEach((b, k) => {
        b.setAttribute("aria-pressed", String(!anyOn));
        for (const node of paths[k] || []) node.style.display = anyOn ? "none" : "";
      });
    });
  }
  return lg;
}
function hideTip() { if (TIP) TIP.style.display = "none"; }

// Line chart: x values, several named series (null = gap). opts: title, yFormat, xFormat.
function lineChart(container, x, series, opts = {}) {
  opts = { ...lineChart.defaults, ...opts };
  container.textContent = "";
  const W = chartWidth(container, 640), H = 270, L = 70, R = 12, T = 24, B = 44;
  const wrap = h("div", { class: "chart" }, container);
  const yTitle = opts.yLabel || (series.length === 1 ? series[0].name : "value");
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
    "aria-label": `${opts.title || "chart"}: line chart of ${yTitle} against ${opts.xLabel || "step"}` }, wrap);
  el("text", { x: L, y: 15, "font-weight": 600, "font-size": CHART_FONT + 1 }, svg, opts.title || "");
  axisTitles(svg, W, H, L, T, B, yTitle, opts.xLabel || "step");
  const yf = opts.yFormat || fmt.num, xf = opts.xFormat || fmt.count;
  let ylo = Infinity, yhi = -Infinity;
  const logY = !!opts.log;
  const ok = (v) => v !== null && v !== undefined && isFinite(v) && (!logY || v > 0);
  const ty = (v) => (logY ? Math.log10(v) : v);
  for (const s of series) for (const arr of [s.values, s.lo || [], s.hi || []]) for (const v of arr) if (ok(v)) { ylo = Math.min(ylo, ty(v)); yhi = Math.max(yhi, ty(v)); }
  if (!isFinite(ylo)) { el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#888" }, svg, "no data yet"); return; }
  if (opts.zero && !logY) ylo = Math.min(0, ylo);
  if (ylo === yhi) { ylo -= Math.abs(ylo) * 0.1 || 1; yhi += Math.abs(yhi) * 0.1 || 1; }
  const pad = (yhi - ylo) * 0.05; ylo -= opts.zero && ylo === 0 ? 0 : pad; yhi += pad;
  const xlo = x.length ? x[0] : 0, xhi = x.length > 1 ? x[x.length - 1] : xlo + 1;
  const sx = (v) => L + (W - L - R) * (v - xlo) / ((xhi - xlo) || 1);
  const sy0 = (v) => T + (H - T - B) * (1 - (v - ylo) / (yhi - ylo));
  const sy = (v) => sy0(ty(v));
  for (const t of niceTicks(ylo, yhi, 5)) {
    el("line", { x1: L, x2: W - R, y1: sy0(t), y2: sy0(t), stroke: "#e3e7ee" }, svg);
    el("text", { x: L - 6, y: sy0(t) + 4, "text-anchor": "end" }, svg, yf(logY ? Math.pow(10, t) : t));
  }
  for (const t of niceTicks(xlo, xhi, Math.max(3, Math.min(6, Math.floor((W - L) / 90))))) {
    el("text", { x: sx(t), y: H - B + 16, "text-anchor": "middle" }, svg, xf(t));
  }
  el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#6b7380" }, svg);
  const paths = series.map(() => []);
  series.forEach((s, k) => {
    if (s.lo && s.hi) {  // the min/max envelope of each thinned bucket
      const idx = s.lo.map((_, i) => i).filter((i) => ok(s.lo[i]) && ok(s.hi[i]));
      if (idx.length) {
        const top = idx.map((i) => sx(x[i]).toFixed(1) + "," + sy(s.hi[i]).toFixed(1));
        const bottom = idx.slice().reverse().map((i) => sx(x[i]).toFixed(1) + "," + sy(s.lo[i]).toFixed(1));
        paths[k].push(el("polygon", { points: top.concat(bottom).join(" "), fill: s.colour || colour(k), "fill-opacity": 0.18,
          stroke: s.colour || colour(k), "stroke-opacity": 0.35, "stroke-width": 0.6, class: "band" }, svg));
      }
    }
    let d = "", pen = false;
    s.values.forEach((v, i) => {
      if (!ok(v)) { if (!opts.connectGaps) pen = false; return; }
      d += (pen ? "L" : "M") + sx(x[i]).toFixed(1) + "," + sy(v).toFixed(1);
      pen = true;
    });
    paths[k].push(el("path", { d, fill: "none", stroke: s.colour || colour(k), "stroke-width": 1.6,
      "stroke-dasharray": s.dash || "", class: "series", "data-series": s.name }, svg));
    if (x.length === 1 && s.values[0] !== null) paths[k].push(el("circle", { cx: sx(x[0]), cy: sy(s.values[0]), r: 3, fill: s.colour || colour(k) }, svg));
  });
  for (const m of opts.marks || []) {  // vertical marks {x, label}: a mixture switch (labelled), an alert (quiet, a title)
    if (m.x < xlo || m.x > xhi) continue;
    const line = el("line", { x1: sx(m.x), x2: sx(m.x), y1: T, y2: H - B, stroke: m.colour || "#b0473a",
      "stroke-dasharray": m.quiet ? "2 2" : "4 3", class: m.quiet ? "mark alert" : "mark" }, svg);
    if (m.quiet) el("title", {}, line, m.label || "");
    else el("text", { x: sx(m.x) + 3, y: T + 10, fill: "#b0473a", "font-size": 10 }, svg, m.label);
  }
  const cursor = el("line", { y1: T, y2: H - B, stroke: "#555", "stroke-dasharray": "3 3", visibility: "hidden" }, svg);
  const hit = el("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "transparent", class: "hit" }, svg);
  const follow = (evt) => {
    const box = svg.getBoundingClientRect(), px = (evt.clientX - box.left) * W / box.width;
    let best = 0;
    for (let i = 0; i < x.length; i++) if (Math.abs(sx(x[i]) - px) < Math.abs(sx(x[best]) - px)) best = i;
    cursor.setAttribute("x1", sx(x[best])); cursor.setAttribute("x2", sx(x[best])); cursor.setAttribute("visibility", "visible");
    const lines = [`${opts.xLabel || "step"} ${x[best].toLocaleString("en-US")}`];
    series.forEach((s, k) => { if (paths[k][0] && paths[k][0].style.display !== "none") lines.push(`${s.name}: ${yf(s.values[best])}` +
      (s.lo && s.hi && s.lo[best] !== null ? ` (bucket ${yf(s.lo[best])} … ${yf(s.hi[best])})` : "")); });
    showTip(evt, lines.join("\n"));
  };
  hit.addEventListener("pointermove", follow);
  hit.addEventListener("pointerdown", follow);  // a tap on a phone shows the numbers too
  hit.addEventListener("pointerleave", (evt) => { if (evt.pointerType === "mouse") { cursor.setAttribute("visibility", "hidden"); hideTip(); } });
  if (series.length > 1 || opts.legend) pickLegend(wrap, series, paths);
}

// A y-axis title (rotated, at the left) and an x-axis title (below the tick labels, never on them).
function axisTitles(svg, W, H, L, T, B, yTitle, xTitle) {
  const ym = T + (H - T - B) / 2;
  el("text", { x: 14, y: ym, "text-anchor": "middle", transform: `rotate(-90 14 ${ym})`, fill: "#4a5261", class: "axis-title y" }, svg, yTitle);
  el("text", { x: L + (W - L) / 2, y: H - 6, "text-anchor": "middle", fill: "#4a5261", class: "axis-title x" }, svg, xTitle);
}

lineChart.defaults = {};  // options every chart of a page shares (the training page's switch marks)

// Heat map: rows × cols of values in [0, max]; labels and tooltips from callbacks.
// Every square is focusable (Tab, arrows), shows its numbers on focus, hover or tap, and is named for
// screen readers; text keeps CHART_FONT px on any screen (the map scrolls sideways instead of shrinking).
const EMPTY_FILL = "#ffffff", EMPTY_STROKE = "#6b7380";
function heatMap(container, rows, cols, value, opts) {
  container.textContent = "";
  const longest = rows.reduce((m, r) => Math.max(m, Math.min(r.length, 26)), 0);
  const cw = opts.cellWidth || 64, ch = opts.cellHeight || 22, L = Math.max(40, Math.round(longest * 7.2) + 12), T = 22;
  const W = L + cw * cols.length + 4, H = T + ch * rows.length + 4;
  const wrap = h("div", { class: "chart heat scroll" }, container);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "group",
    "aria-label": opts.title || `heat map of ${rows.length} rows by ${cols.length} columns` }, wrap);
  svg.style.width = W + "px"; svg.style.maxWidth = "none";
  let max = 0;
  rows.forEach((_, r) => cols.forEach((_, c) => { const v = value(r, c); if (v !== null && isFinite(v)) max = Math.max(max, opts.diverging ? Math.abs(v) : v); }));
  cols.forEach((name, c) => el("text", { x: L + cw * c + cw / 2, y: 15, "text-anchor": "middle", "font-weight": 600 }, svg, name));
  const squares = [];
  let empty = 0;
  rows.forEach((name, r) => {
    el("text", { x: L - 6, y: T + ch * r + ch / 2 + 4, "text-anchor": "end" }, svg, name.length > 26 ? name.slice(0, 25) + "…" : name);
    cols.forEach((_, c) => {
      const v = value(r, c), missing = v === null || !isFinite(v);
      const say = opts.tooltip(r, c);
      const g = el("g", { class: "hm" + (missing ? " empty" : ""), "data-row": r, "data-col": c, tabindex: "0", role: "img",
        "aria-label": say.replace(/\n/g, "; ") }, svg);
      const t = missing || max === 0 ? 0 : (opts.sqrt ? Math.sign(v) * Math.sqrt(Math.abs(v) / max) : v / max);
      const fill = missing ? EMPTY_FILL : (opts.diverging ? divColour(t) : seqColour(t));
      el("rect", { x: L + cw * c + 0.5, y: T + ch * r + 0.5, width: cw - 2, height: ch - 2, fill,
        stroke: missing ? EMPTY_STROKE : "none", "stroke-dasharray": missing ? "3 2" : "" }, g);
      if (missing) empty++;
      el("text", { x: L + cw * c + cw / 2, y: T + ch * r + ch / 2 + 4, "text-anchor": "middle", "font-size": CHART_FONT - 1,
        fill: missing ? "#4a5261" : textOn(fill) }, g, missing ? "" : opts.format(v, r, c));
      const show = (evt) => showTip(evt, say);
      g.addEventListener("pointermove", show);
      g.addEventListener("mouseleave", hideTip);
      g.addEventListener("focus", () => showTip(tipAt(g), say));
      g.addEventListener("blur", hideTip);
      g.addEventListener("keydown", (evt) => {
        const moves = { ArrowRight: [0, 1], ArrowLeft: [0, -1], ArrowDown: [1, 0], ArrowUp: [-1, 0] };
        if (moves[evt.key]) {
          const [dr, dc] = moves[evt.key], next = squares.find((x) => x.r === r + dr && x.c === c + dc);
          if (next) { evt.preventDefault(); next.g.focus(); }
        } else if ((evt.key === "Enter" || evt.key === " ") && opts.onClick) { evt.preventDefault(); opts.onClick(r, c); }
      });
      g.addEventListener("click", (evt) => { show(evt); if (opts.onClick) opts.onClick(r, c); });
      if (opts.onClick) g.style.cursor = "pointer";
      squares.push({ r, c, g });
    });
  });
  const scale = h("div", { class: "scale" }, container);
  const stops = opts.diverging ? [-1, -0.5, 0, 0.5, 1].map(divColour) : [0, 0.25, 0.5, 0.75, 1].map(seqColour);
  const sf = opts.scaleFormat || opts.format;
  h("span", {}, scale, opts.diverging ? sf(-max) + (opts.lowLabel ? ` ${opts.lowLabel}` : "") : sf(0));
  h("span", { class: "g" }, scale).style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  h("span", {}, scale, sf(max) + (opts.diverging && opts.highLabel ? ` ${opts.highLabel}` : "") + (opts.sqrt ? " (square-root scale)" : ""));
  if (empty) {
    const item = h("span", { class: "empty-key" }, scale);
    h("i", { class: "empty-swatch" }, item);
    item.appendChild(document.createTextNode(opts.emptyLabel || "no value"));
  }
}

// Text colour with at least 4.5:1 contrast on any fill (white or black, whichever is higher; the worse of the two best is 4.58:1) given as rgb(r,g,b) or #rrggbb.
function luminance(fill) {
  const m = fill.startsWith("#") ? [1, 3, 5].map((i) => parseInt(fill.slice(i, i + 2), 16)) : fill.match(/\d+/g).map(Number);
  const lin = m.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
}
function contrast(a, b) { const x = luminance(a), y = luminance(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
function textOn(fill) { return contrast(fill, "#ffffff") >= contrast(fill, "#000000") ? "#ffffff" : "#000000"; }

// XY chart: series of their own [x, y] points, drawn as lines, points or both, on linear or log axes.
// series: {name, points: [[x, y]], mode: "line" | "points" | "both", colour, dash, bars: [[x, low, high]]}.
// opts: title, logX, logY, xLabel, xFormat, yFormat.
function xyChart(container, series, opts = {}) {
  container.textContent = "";
  const W = chartWidth(container, 640), H = 290, L = 70, R = 12, T = 24, B = 44;
  const wrap = h("div", { class: "chart" }, container);
  const yTitle = opts.yLabel || "value", xTitle = opts.xLabel || "x";
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
    "aria-label": `${opts.title || "chart"}: ${yTitle} against ${xTitle}${opts.logX || opts.logY ? " (log scale)" : ""}` }, wrap);
  el("text", { x: L, y: 15, "font-weight": 600, "font-size": CHART_FONT + 1 }, svg, opts.title || "");
  axisTitles(svg, W, H, L, T, B, yTitle, xTitle);
  const fx = opts.logX ? Math.log10 : (v) => v, fy = opts.logY ? Math.log10 : (v) => v;
  const ok = (x, y) => x !== null && y !== null && isFinite(x) && isFinite(y) && (!opts.logX || x > 0) && (!opts.logY || y > 0);
  let xlo = Infinity, xhi = -Infinity, ylo = Infinity, yhi = -Infinity;
  const take = (x, y) => { if (!ok(x, y)) return; xlo = Math.min(xlo, fx(x)); xhi = Math.max(xhi, fx(x)); ylo = Math.min(ylo, fy(y)); yhi = Math.max(yhi, fy(y)); };
  for (const s of series) {
    for (const [x, y] of s.points || []) take(x, y);
    for (const [x, lo, hi] of s.bars || []) { take(x, lo); take(x, hi); }
  }
  if (!isFinite(xlo)) { el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#888" }, svg, "no data yet"); return; }
  if (xlo === xhi) { xlo -= 0.5; xhi += 0.5; }
  if (ylo === yhi) { ylo -= Math.abs(ylo) * 0.1 || 0.5; yhi += Math.abs(yhi) * 0.1 || 0.5; }
  const px = (xhi - xlo) * 0.04, py = (yhi - ylo) * 0.06;
  xlo -= px; xhi += px; ylo -= py; yhi += py;
  const sx = (v) => L + (W - L - R) * (fx(v) - xlo) / (xhi - xlo);
  const sy = (v) => T + (H - T - B) * (1 - (fy(v) - ylo) / (yhi - ylo));
  const ticks = (lo, hi, log, n) => log ? logTicks(lo, hi) : niceTicks(lo, hi, n);
  const yf = opts.yFormat || fmt.num, xf = opts.xFormat || fmt.count;
  for (const t of ticks(ylo, yhi, opts.logY, 5)) {
    el("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), stroke: "#e3e7ee" }, svg);
    el("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end" }, svg, yf(t));
  }
  for (const t of ticks(xlo, xhi, opts.logX, 6)) el("text", { x: sx(t), y: H - B + 16, "text-anchor": "middle" }, svg, xf(t));
  el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#6b7380" }, svg);
  series.forEach((s, k) => {
    const c = s.colour || colour(k), pts = (s.points || []).filter(([x, y]) => ok(x, y));
    if (s.mode !== "points" && pts.length > 1) {
      const d = pts.map(([x, y], i) => (i ? "L" : "M") + sx(x).toFixed(1) + "," + sy(y).toFixed(1)).join("");
      el("path", { d, fill: "none", stroke: c, "stroke-width": 1.6, "stroke-dasharray": s.dash || "" }, svg);
    }
    if (s.mode !== "line") {
      for (const [x, y] of pts) {
        const dot = el("circle", { cx: sx(x), cy: sy(y), r: 3.5, fill: c }, svg);
        const say = `${s.name}\n${opts.xLabel || "x"} ${fmt.num(x)}: ${yf(y)}`;
        dot.setAttribute("tabindex", "0");
        dot.setAttribute("aria-label", say.replace("\n", ": "));
        dot.addEventListener("pointermove", (evt) => showTip(evt, say));
        dot.addEventListener("pointerdown", (evt) => showTip(evt, say));
        dot.addEventListener("focus", () => showTip(tipAt(dot), say));
        dot.addEventListener("blur", hideTip);
        dot.addEventListener("mouseleave", hideTip);
      }
    }
    for (const [x, lo, hi] of s.bars || []) {
      if (!ok(x, lo) || !ok(x, hi)) continue;
      el("line", { x1: sx(x), x2: sx(x), y1: sy(lo), y2: sy(hi), stroke: c, "stroke-width": 2 }, svg);
      for (const v of [lo, hi]) el("line", { x1: sx(x) - 4, x2: sx(x) + 4, y1: sy(v), y2: sy(v), stroke: c, "stroke-width": 2 }, svg);
    }
  });
  const lg = h("div", { class: "legend" }, wrap);
  series.forEach((s, k) => {
    if (s.legend === false) return;
    const item = h("span", {}, lg);
    const sw = h("i", {}, item); sw.style.background = s.colour || colour(k);
    item.appendChild(document.createTextNode(s.name));
  });
}

// Ticks for a log axis given log10 bounds: decades, or 1-2-5 steps when the span is under two decades.
function logTicks(lo, hi) {
  const out = [];
  const steps = hi - lo < 2 ? [1, 2, 5] : [1];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of steps) { const v = m * Math.pow(10, e); if (Math.log10(v) >= lo && Math.log10(v) <= hi) out.push(v); }
  }
  if (out.length < 2) {  // a narrow span (losses between 2 and 3): linear ticks in the data's own units
    return niceTicks(Math.pow(10, lo), Math.pow(10, hi), 4);
  }
  return out;
}

// A file made in the page, offered for download (the exports of every page).
function download(name, type, text) {
  const a = h("a", { download: name, href: URL.createObjectURL(new Blob([text], { type })) }, document.body);
  a.click();
  a.remove();
}
