// Interactive time-series charts on the vendored uPlot (templates/vendor/uplot, MIT): zoom, pan, reset, log y,
// hover values at the exact x, alert bands (labels stacked so none overlaps another) and marks. Needs charts.js (fmt, h, colour) and uPlot loaded first;
// a page opts in with `{% block charts %}{% include "timeseries_assets.html.j2" %}{% endblock %}`.
//
// API (shared by the run page and the compare page):
//   const chart = new TimeChart(container, {
//     title, xLabel, yLabel,            // axis titles: say the unit, e.g. "loss (nats per token)"
//     xFormat, yFormat,                 // v => text (default: fmt.count for x, fmt.num with 5 digits for y)
//     log: false, logX: false, zero: false, height: 260,   // logX: points at x <= 0 are left out
//     series: [{name, colour?, dash?: [5, 3], width?, faint?: true, gaps?: "span" | "break"}],
//     bands: [{from, to, label, colour?}],   // x units; drawn under the curves, one DOM div.band each
//     marks: [{x, label}],                  // vertical lines, one DOM div.mark each
//     sync: "key",                      // charts with the same key share the hover cursor
//     onZoom: (lo, hi) => {},           // the user zoomed (drag) or panned (shift+drag); (null, null): reset
//   });
//   chart.setData(tables)      tables[k] = [xs, ys] for series k, each on its own x (joined here); keeps the range
//   chart.setRange(lo, hi)     show x in [lo, hi]; (null, null) shows everything
//   chart.setBands(bands), chart.setMarks(marks), chart.setLog(bool), chart.destroy()
//   ema(values, alpha, weights?) smoothing (null stays null; weights[i] = records per point when thinned)
// Zoom: drag across a chart; reset: double-click; pan: shift+drag; the legend under a chart reads the
// values at the hovered x. Each chart's uPlot instance is `container.uplot` (for tests).
"use strict";

function ema(values, alpha, weights) {
  if (!alpha) return values;
  let last = null;
  return values.map((v, i) => {
    if (v === null || v === undefined) return v;
    const a = weights ? Math.pow(alpha, weights[i] || 1) : alpha;
    last = last === null ? v : a * last + (1 - a) * v;
    return last;
  });
}

// Several [xs, ys] tables on one sorted x: alignment holes are undefined (spanned), real gaps stay null.
function joinSeries(tables) {
  if (!tables.length) return [[]];
  return uPlot.join(tables.map(([xs, ys]) => [xs, ys]));
}

const LABEL_ROWS = 4;  // rows of band labels before a label lives in its band's tooltip only
const LABEL_CHAR_PX = 6;  // the width of a character of a band label (10 px sans-serif), a little generous
const LABEL_ROW_PX = 17;  // a band label row: its 10 px text on its line height, with a pixel to spare

class TimeChart {
  constructor(container, opts) {
    this.container = container;
    this.opts = { height: 260, series: [], bands: [], marks: [], ...opts };
    this.tables = this.opts.series.map(() => [[], []]);
    this.range = [null, null];
    container.textContent = "";
    container.classList.add("tchart");
    this.box = h("div", { class: "tchart-plot" }, container);
    this.build();
    if (window.ResizeObserver) {
      this.resize = new ResizeObserver(() => this.fit());
      this.resize.observe(container);
    }
  }

  width() { return Math.max(280, Math.min(1400, Math.round(this.container.clientWidth || 640))); }

  build() {
    const o = this.opts, yf = o.yFormat || ((v) => fmt.num(v, 5)), xf = o.xFormat || fmt.count;
    const chart = this;
    const data = this.data();
    this.u = new uPlot({
      title: o.title, width: this.width(), height: o.height,
      scales: { x: o.logX ? { time: false, distr: 3, log: 10 } : { time: false, range: (u, lo, hi) => chart.xRange(lo, hi) },
                y: o.log ? { distr: 3, log: 10 } : { range: (u, lo, hi) => chart.yRange(lo, hi) } },
      axes: [
        { label: o.xLabel || "step", values: (u, splits) => splits.map((v) => xf(v)), size: 44 },
        { label: o.yLabel || "", values: (u, splits) => splits.map((v) => yf(v)), size: 66 },
      ],
      series: [
        { label: o.xLabel || "step", value: (u, v) => (v === null || v === undefined ? "—" : xf(v)) },
        ...o.series.map((s, k) => ({
          label: s.name, stroke: s.colour || colour(k), width: s.width || (s.faint ? 1 : 1.6), dash: s.dash,
          alpha: s.faint ? 0.35 : 1, spanGaps: s.gaps !== "break", points: { show: false },
          value: (u, v) => (v === null || v === undefined ? "—" : yf(v)),
        })),
      ],
      cursor: {
        sync: o.sync ? { key: o.sync, setSeries: false } : undefined,
        drag: { x: true, y: false, setScale: false },  // a drag becomes a zoom in `selected`
        dataIdx: (u, si, idx) => chart.hovered(si, idx),
        bind: {
          dblclick: () => (e) => { if (e.button === 0) chart.userZoom(null, null); return null; },
          mousedown: (u, targ, handler) => (e) => { if (e.button === 0) (e.shiftKey ? chart.pan(e) : handler(e)); },
        },
      },
      legend: { live: true },
      hooks: {
        setSelect: [(u) => chart.selected()],
        draw: [() => chart.overlays()],
      },
    }, data, this.box);
    this.container.uplot = this.u;
    if (this.range[0] !== null) this.apply();
  }

  data() {
    const logY = this.opts.log;
    const positive = (xs, ys) => { const keep = xs.map((x, i) => i).filter((i) => xs[i] > 0); return [keep.map((i) => xs[i]), keep.map((i) => ys[i])]; };
    const tables = this.tables.map(([xs, ys]) => (this.opts.logX ? positive(xs, ys) : [xs, ys]))
      .map(([xs, ys]) => [xs, logY ? ys.map((v) => (v > 0 ? v : null)) : ys]);
    return tables.length ? joinSeries(tables) : [[]];
  }

  // The x scale as set (a single point gets some room); the y scale pads and may start at zero.
  xRange(lo, hi) { return lo === hi ? [lo - 1, hi + 1] : [lo, hi]; }
  yRange(lo, hi) {
    if (lo === null || hi === null) return [0, 1];
    if (this.opts.zero) lo = Math.min(0, lo);
    const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.1 || 1;
    return [this.opts.zero && lo === 0 ? 0 : lo - pad, hi + pad];
  }

  setData(tables) {
    this.tables = tables;
    this.u.setData(this.data(), true);
    this.apply();
  }
  setRange(lo, hi) {
    this.range = [lo, hi];
    this.apply();
  }
  apply() {
    const xs = this.u.data[0];
    let lo = this.range[0] !== null ? this.range[0] : xs[0], hi = this.range[1] !== null ? this.range[1] : xs[xs.length - 1];
    if (this.opts.logX && !(lo > 0)) lo = xs[0];  // a log x axis cannot start at or below zero
    if (lo !== undefined && hi !== undefined) this.u.setScale("x", { min: lo, max: hi });
  }
  setBands(bands) { this.opts.bands = bands; this.overlays(); }
  setMarks(marks) { this.opts.marks = marks; this.overlays(); }
  setLog(on) {
    if (!!on === !!this.opts.log) return;
    this.opts.log = !!on;
    this.u.destroy();
    this.build();
  }
  fit() {
    const w = this.width();
    if (this.u && Math.abs(this.u.width - w) > 2) this.u.setSize({ width: w, height: this.opts.height });
  }
  destroy() {
    if (this.resize) this.resize.disconnect();
    this.u.destroy();
  }

  // The point under the pointer: of the records drawn within a few pixels of it, the one nearest in 2D (a
  // thinned run packs several records into a pixel; the spike the user points at is the one named).
  hovered(si, idx) {
    const u = this.u, xs = u.data[0];
    if (si === 0) this.pick = this.nearest(idx);
    const best = this.pick ?? idx;
    if (si === 0) return best;
    const ys = u.data[si], has = (j) => j >= 0 && j < ys.length && ys[j] !== undefined && ys[j] !== null;
    if (has(best)) return best;
    for (let d = 1; d < xs.length; d++) { if (has(best - d)) return best - d; if (has(best + d)) return best + d; }
    return null;
  }
  nearest(idx) {
    const u = this.u, xs = u.data[0], left = u.cursor.left, top = u.cursor.top;
    if (idx === null || idx === undefined || left === undefined || left < 0) return idx;
    let best = idx, bestD = Infinity;
    const consider = (j) => {
      const dx = Math.abs(u.valToPos(xs[j], "x") - left);
      for (let si = 1; si < u.series.length; si++) {
        const y = u.data[si][j];
        if (!u.series[si].show || y === undefined || y === null) continue;
        const d = Math.abs(u.valToPos(y, "y") - top) + dx;
        if (d < bestD) { bestD = d; best = j; }
      }
    };
    const near = (j) => Math.abs(u.valToPos(xs[j], "x") - left) <= 4;
    consider(idx);
    for (let j = idx - 1; j >= 0 && near(j); j--) consider(j);
    for (let j = idx + 1; j < xs.length && near(j); j++) consider(j);
    return best;
  }

  selected() {  // the user dragged across the plot: that range becomes the chosen one
    const u = this.u, { left, width } = u.select;
    if (width < 2) return;
    const lo = u.posToVal(left, "x"), hi = u.posToVal(left + width, "x");
    u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    this.userZoom(lo, hi);
  }
  userZoom(lo, hi) {
    this.range = [lo, hi];
    this.apply();
    if (this.opts.onZoom) this.opts.onZoom(lo, hi);
  }
  pan(e) {
    const u = this.u, x0 = e.clientX, { min, max } = u.scales.x;
    const perPx = (max - min) / u.bbox.width * devicePixelRatio;
    const move = (m) => {
      const d = (m.clientX - x0) * perPx;
      this.range = [min - d, max - d];
      this.apply();
    };
    const up = () => {
      document.removeEventListener("mousemove", move);
      document.removeEventListener("mouseup", up);
      if (this.opts.onZoom) this.opts.onZoom(this.range[0], this.range[1]);
    };
    document.addEventListener("mousemove", move);
    document.addEventListener("mouseup", up);
    return null;
  }

  // Bands and marks as DOM boxes over the plot (a person can hover them; a test can count them).
  overlays() {
    const u = this.u, over = u.over;
    for (const node of [...over.querySelectorAll(".band, .mark")]) node.remove();
    const { min, max } = u.scales.x;
    if (min === undefined || min === null) return;
    const px = (v) => u.valToPos(v, "x");
    const plotWidth = u.bbox.width / devicePixelRatio;  // not over.clientWidth: reading it forces a layout per chart
    // Labels go on the first row where they clear the labels before them (widths estimated from the text, no
    // layout read); past LABEL_ROWS rows a band keeps its label in its tooltip only.
    const ends = [];
    const visible = (this.opts.bands || []).filter((b) => !(b.to < min || b.from > max))
      .sort((a, b) => a.from - b.from);
    for (const b of visible) {
      const left = Math.max(0, px(b.from)), right = Math.min(plotWidth, px(Math.max(b.to, b.from)));
      const band = h("div", { class: "band", title: b.label || "" }, over);
      band.style.left = left + "px";
      band.style.width = Math.max(2, right - left) + "px";
      if (b.colour) band.style.background = b.colour;
      const text = b.short || b.label || "";
      const row = ends.findIndex((end) => end < left);
      const at = row === -1 ? ends.length : row;
      if (at >= LABEL_ROWS) continue;
      ends[at] = left + 3 + text.length * LABEL_CHAR_PX + 6;
      const label = h("span", {}, band, text);
      label.style.top = 2 + at * LABEL_ROW_PX + "px";
    }
    for (const m of this.opts.marks || []) {
      if (m.x < min || m.x > max) continue;
      const mark = h("div", { class: "mark", title: m.label || "" }, over);
      mark.style.left = px(m.x) + "px";
      h("span", {}, mark, m.label || "");
    }
  }
}
