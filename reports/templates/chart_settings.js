// Each chart's own settings, shared by the run page and the compare page: its smoothing, log y and log x, kept
// in the URL as `charts=ID:SMOOTHING:FLAGS;...` (FLAGS: y for log y, x for log x). A chart without its own
// follows the controls above the charts; "as above" under a chart drops its own.
"use strict";
const clampSmooth = (v) => Math.max(0, Math.min(0.99, +v || 0));
function perChart(text) {
  const per = {};
  for (const part of text.split(";")) {
    const [id, smooth, flags = ""] = part.split(":");
    if (id && !isNaN(+smooth)) per[id] = { smooth: clampSmooth(smooth), log: flags.includes("y"), logx: flags.includes("x") };
  }
  return per;
}
const perChartText = (per) => Object.entries(per)
  .map(([id, s]) => `${id}:${s.smooth}:${s.log ? "y" : ""}${s.logx ? "x" : ""}`).join(";");
// The settings a chart is drawn with: its own, else the page's ({smooth, log, logx}).
const chartSettingsOf = (per, id, page) => per[id] || page;

// The row of a chart's own settings, under it. `own`: whether the chart has its own; `noLogY`: a chart that
// must start at zero; `changed(settings)` when one is changed, `reset()` on "as above".
function chartSettingsRow(box, set, { own, noLogY, changed, reset }) {
  const row = h("div", { class: "chart-settings controls" }, box);
  h("label", {}, row, "smoothing ");
  const smooth = h("input", { type: "number", class: "chart-smooth", min: "0", max: "0.99", step: "0.05", value: String(set.smooth) }, row);
  const flag = (cls, text, on) => {
    const label = h("label", {}, row);
    const input = h("input", { type: "checkbox", class: cls }, label);
    input.checked = on;
    label.append(" " + text);
    return input;
  };
  const logy = flag("chart-logy", "log y", set.log), logx = flag("chart-logx", "log x", set.logx);
  if (noLogY) logy.disabled = true;
  const back = h("button", { type: "button", class: "chart-reset" }, row, "as above");
  back.disabled = !own;
  const change = () => changed({ smooth: clampSmooth(smooth.value), log: logy.checked, logx: logx.checked });
  for (const input of [smooth, logy, logx]) input.addEventListener("change", change);
  back.addEventListener("click", reset);
  return row;
}
