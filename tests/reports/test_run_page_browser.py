"""The training page driven as a user drives it, in headless Chromium from file:// (the harness of test_browser):
zoom and reset, smoothing kept across live updates, a one-step spike found by hover and in the CSV, and the
same page served by a static web server."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from millrace.home import Home
from reports import build_run_page, build_site
from reports.run_data import RunSeries, read_script
from reports.run_page import run_series, write_run_page
from reports.training import MetricsTail, load_run
from testkit import factory
from testkit.browser import Tab
from trainer.records import METRICS_FILE, SCALARS, MetricsRecord, Scalar, charted

SPIKE_STEP, SPIKE_LOSS = 14_006, 12.0


@pytest.fixture(scope="module")
def spiky_site(tmp_path_factory) -> Path:
    """A 20,000-step run (written per the metrics contract, no training) with one loss of 12.0."""
    root = tmp_path_factory.mktemp("spiky")
    home = Home.resolve(root / "home")
    factory.make_small_store(home)
    manifest = factory.make_small_revisions(home)["natural"]
    factory.write_contract_metrics(home, "spiky", manifest, steps=20_000, spikes={SPIKE_STEP: SPIKE_LOSS})
    build_site(home, root / "site", runs=["spiky"])
    return root / "site" / "runs" / "spiky" / "index.html"


def open_run(browser, path: Path, query: str = "") -> Tab:
    tab = Tab(browser)
    tab.open(path, query)
    tab.page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    return tab


def into_view(tab: Tab, chart: str) -> None:
    tab.chart(chart)


def x_range(tab: Tab, chart: str = "c-loss") -> list[float]:
    into_view(tab, chart)
    return tab.page.evaluate(
        "(id) => { const u = document.getElementById(id).uplot; return [u.scales.x.min, u.scales.x.max]; }", chart
    )


def drag(tab: Tab, chart: str, start: float, stop: float) -> None:
    """Press, move and release the mouse across `chart` from step `start` to step `stop`."""
    into_view(tab, chart)
    points = tab.page.evaluate(
        """([id, a, b]) => { const u = document.getElementById(id).uplot;
        const box = u.over.getBoundingClientRect();
        return [box.left + u.valToPos(a, 'x'), box.left + u.valToPos(b, 'x'), box.top + box.height / 2]; }""",
        [chart, start, stop],
    )
    tab.page.mouse.move(points[0], points[2])
    tab.page.mouse.down()
    tab.page.mouse.move((points[0] + points[1]) / 2, points[2], steps=4)
    tab.page.mouse.move(points[1], points[2], steps=4)
    tab.page.mouse.up()


def exports_hold_every_record(tab: Tab) -> None:
    """The spiky run's CSV and JSON downloads: every logged record of the 20,000, the spike among them, and every
    recorded field (per-group norms, dead experts, the windowed load entropy, alerts, tokens per cell)."""
    with tab.page.expect_download() as download:
        tab.page.click("#train-csv")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert len(rows) == 20_000 and [int(r["step"]) for r in rows] == list(range(20_000))
    assert max(float(r["loss"]) for r in rows) == SPIKE_LOSS
    assert float(rows[SPIKE_STEP]["loss"]) == SPIKE_LOSS and rows[SPIKE_STEP]["router_bias.norm/layer 0"]
    # the same records as JSON columns
    with tab.page.expect_download() as download:
        tab.page.click("#train-json")
    columns = json.loads(Path(download.value.path()).read_text())
    assert columns["step"] == list(range(20_000)) and columns["loss"][SPIKE_STEP] == SPIKE_LOSS
    loads = {f"expert_load.load/layer {layer}" for layer in range(2)}  # each record's, from expert-loads.js
    assert set(columns) == {"run", "phase", "tokens", "seconds", "alert_events", *rows[0], *loads}
    assert columns["expert_load.load/layer 1"][SPIKE_STEP] == [1 / 8] * 8
    # every recorded field: per-group norms, dead experts, the windowed load entropy, alerts, tokens per cell
    assert float(rows[SPIKE_STEP]["param_norm_per_group/attention"]) == pytest.approx(60.0 + SPIKE_STEP * 1e-3)
    assert [int(float(r["expert_load.dead_experts/layer 1"])) for r in rows[:101]] == [
        int(s % 50 == 0) for s in range(101)
    ]
    assert rows[SPIKE_STEP]["alerts/active"] == "1" and rows[SPIKE_STEP]["expert_load.window_entropy/layer 0"]
    assert any(key.startswith("realised_tokens_per_cell/") for key in rows[0])


@pytest.mark.slow  # a 20,000-step stream (the size) is read and cut into chunks
def test_a_one_step_spike_in_20000_steps_is_drawn_named_by_hover_and_in_the_csv(browser, spiky_site):
    tab = open_run(browser, spiky_site)
    assert tab.page.evaluate("() => document.body.dataset.resolution") == "thinned"
    data = read_script(spiky_site.parent / "data" / "overview.js")
    assert data["records"] == 20_000 and len(data["series"]["loss"]["s"]) <= 2 * 1000 + 2
    top = tab.page.evaluate("() => { const u = document.getElementById('c-loss').uplot; return u.scales.y.max; }")
    assert top >= SPIKE_LOSS  # the whole-run chart reaches the spike
    # hover where the curve peaks: the legend names the spike's own step and value
    into_view(tab, "c-loss")
    where = tab.page.evaluate("""() => { const u = document.getElementById('c-loss').uplot;
        const ys = u.data[1]; let best = 0; ys.forEach((v, i) => { if (v > ys[best]) best = i; });
        const box = u.over.getBoundingClientRect();
        return [box.left + u.valToPos(u.data[0][best], 'x'), box.top + u.valToPos(ys[best], 'y')]; }""")
    tab.page.mouse.move(where[0], where[1])
    legend = tab.page.inner_text("#c-loss .u-legend")
    assert f"{SPIKE_STEP:,}" in legend and "12" in legend.split("loss", 1)[1], legend
    # the band of the alert the spike raised, with its start step
    assert tab.page.locator("#c-loss .band").count() == 1
    assert f"step {SPIKE_STEP}" in tab.page.inner_text("#c-loss .band")
    exports_hold_every_record(tab)
    # what the load-entropy alert watches, with its threshold drawn; dead experts; per-group norms
    for chart in ("c-loadent", "c-dead", "c-groups"):
        tab.chart(chart)
    labels = tab.page.evaluate(
        "(ids) => ids.map((id) => document.getElementById(id).uplot.series.slice(1).map((s) => s.label))",
        ["c-loadent", "c-dead", "c-groups"],
    )
    assert labels == [
        ["layer 0", "layer 1", "alert threshold 0.995"],
        ["layer 0", "layer 1"],
        ["attention", "experts"],
    ]
    # per-expert load over time: a bounded number of steps x experts, for the layer chosen
    tab.page.select_option("#load-layer", "1")
    heat = tab.page.inner_text("#c-load-time")
    title = heat.split("\n", 1)[0]
    kept = int(title.split(" steps of ")[0].rsplit(" ", 1)[-1])
    assert title.startswith("Expert load over time, layer 1") and 100 <= kept <= 201, title
    tab.shot("run-spike-hover")
    tab.check_clean()
    tab.close()


@pytest.mark.slow  # the same 20,000-step run: zooming must load every record of the range
def test_zoom_draws_every_record_of_the_range_and_double_click_resets(browser, spiky_site):
    tab = open_run(browser, spiky_site)
    whole = x_range(tab)
    drag(tab, "c-loss", 13_000, 15_000)
    tab.page.wait_for_function("() => document.body.dataset.resolution === 'full'", timeout=30_000)
    lo, hi = x_range(tab)
    assert 12_800 < lo < 13_200 and 14_800 < hi < 15_200
    assert x_range(tab, "c-grad") == [lo, hi]  # every chart follows
    assert f"from={round(lo)}" in tab.page.url and f"to={round(hi)}" in tab.page.url
    steps = tab.page.evaluate(
        "() => document.getElementById('c-loss').uplot.data[0].filter((x) => x >= 14000 && x <= 14010)"
    )
    assert steps == list(range(14_000, 14_011))  # every record, not a bucket's extremes
    # shift+drag pans: the range moves, its width stays
    into_view(tab, "c-loss")
    box = tab.page.evaluate(
        "() => { const b = document.getElementById('c-loss').uplot.over.getBoundingClientRect();"
        " return [b.left + b.width / 2, b.top + b.height / 2]; }"
    )
    tab.page.keyboard.down("Shift")
    tab.page.mouse.move(box[0], box[1])
    tab.page.mouse.down()
    tab.page.mouse.move(box[0] - 100, box[1], steps=3)
    tab.page.mouse.up()
    tab.page.keyboard.up("Shift")
    panned = x_range(tab)
    assert panned[0] > lo and abs((panned[1] - panned[0]) - (hi - lo)) < 1
    tab.page.dblclick("#c-loss .u-over")
    assert x_range(tab) == whole and "from=" not in tab.page.url
    assert tab.page.evaluate("() => document.body.dataset.resolution") == "thinned"
    # one chart's own settings (under it) leave the others as the controls above set them; log x everywhere
    into_view(tab, "c-grad")
    tab.page.fill("#c-grad .chart-smooth", "0.3")
    tab.page.dispatch_event("#c-grad .chart-smooth", "change")
    tab.page.check("#c-grad .chart-logx")
    assert "charts=c-grad%3A0.3%3Ax" in tab.page.url
    assert tab.scales("c-grad") == [3, 1, 2] and tab.scales("c-loss") == [1, 1, 1]
    tab.page.check("#log-x")
    assert "logx=1" in tab.page.url and tab.scales("c-loss") == [3, 1, 1] and tab.scales("c-lr")[0] == 3
    tab.page.click("#c-grad .chart-reset")
    assert "charts=" not in tab.page.url and tab.scales("c-grad") == [3, 1, 1]
    # a shared URL opens on the same view, each chart's own settings too
    shared = open_run(browser, spiky_site, "?x=tokens&from=13000&to=15000&log=1&smooth=0.5&charts=c-grad:0.2:x")
    assert shared.page.input_value("#x-axis") == "tokens" and shared.page.is_checked("#log-y")
    assert shared.page.input_value("#smooth") == "0.5"
    assert shared.scales("c-grad") == [3, 1, 2] and shared.scales("c-loss") == [1, 3, 2]
    assert shared.page.input_value("#c-grad .chart-smooth") == "0.2" and shared.page.is_checked("#c-grad .chart-logx")
    shared.page.wait_for_function("() => document.body.dataset.resolution === 'full'", timeout=30_000)
    tokens = shared.page.evaluate("() => document.getElementById('c-loss').uplot.scales.x.min")
    assert tokens == pytest.approx((13_000 + 1) * factory.GLOBAL_BATCH * factory.SEQ_LEN, rel=1e-3)
    shared.shot("run-zoomed-tokens-log")
    for t in (tab, shared):
        t.check_clean()
        t.close()


@pytest.mark.slow  # three live writes, each waited for through the page's own 1 s poll
def test_live_updates_keep_smoothing_zoom_and_log_across_three_writes(browser, small_home, tmp_path):
    home, lines = factory.copy_as_live(small_home, tmp_path / "home", lines=6)
    site = tmp_path / "site"
    page = build_run_page(home, "live", site, refresh_seconds=1)
    tab = open_run(browser, page)
    tab.page.fill("#smooth", "0.9")
    tab.page.check("#log-y")
    drag(tab, "c-loss", 1, 4)
    zoom = x_range(tab)
    assert "smooth=0.9" in tab.page.url and "log=1" in tab.page.url
    # a table scrolled inside its box stays where the reader left it across live rebuilds
    tab.page.add_style_tag(content=".scroll:has(#plan-table) { max-height: 60px !important; }")
    scroll = "() => document.getElementById('plan-table').closest('.scroll').scrollTop"
    tab.page.evaluate("() => { document.getElementById('plan-table').closest('.scroll').scrollTop = 25; }")
    assert tab.page.evaluate(scroll) == 25
    shown = 6
    for grow in (6, 6, 6):
        with open(home.run("live") / "metrics.jsonl", "a") as stream:
            stream.writelines(lines[shown : shown + grow])
        shown += grow
        build_run_page(home, "live", site, refresh_seconds=1)
        tab.page.wait_for_function("(n) => document.body.dataset.records === String(n)", arg=shown, timeout=30_000)
        assert tab.page.input_value("#smooth") == "0.9" and tab.page.is_checked("#log-y")
        assert x_range(tab) == zoom and "smooth=0.9" in tab.page.url
        assert tab.page.evaluate(scroll) == 25
        raw, smooth = tab.page.evaluate(
            "() => { const u = document.getElementById('c-loss').uplot; return [u.data[1], u.data[2]]; }"
        )
        assert len(raw) == shown
        expected = []
        for value in raw:
            expected.append(value if not expected else 0.9 * expected[-1] + 0.1 * value)
        assert smooth == pytest.approx(expected)
        assert tab.page.inner_text("#card-step").startswith(str(json.loads(lines[shown - 1])["step"]))
    # smoothing is every chart's: the gradient norm too gets its EMA beside its raw series
    tab.chart("c-grad")
    labels = tab.page.evaluate("() => document.getElementById('c-grad').uplot.series.slice(1).map((s) => s.label)")
    assert labels == ["grad norm (trained params)", "grad norm (trained params), smoothed (EMA 0.9)"]
    factory.set_status(home, "live", "completed")
    build_run_page(home, "live", site, refresh_seconds=1)
    tab.page.wait_for_function(
        "() => document.querySelector('#status').innerText.startsWith('completed')", timeout=30_000
    )
    tab.shot("run-live-smoothed")
    tab.check_clean()
    tab.close()


def test_the_run_page_also_loads_its_data_from_a_static_web_server(browser, small_home, tmp_path):
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    build_site(small_home, tmp_path / "site", runs=["tiny-1"])
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "site"))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        tab = Tab(browser)
        tab.page.goto(f"http://127.0.0.1:{server.server_port}/runs/tiny-1/index.html?smooth=0.5")
        tab.page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        assert tab.page.evaluate("() => document.getElementById('c-loss').uplot.data[0].length") == 24
        assert tab.page.evaluate("() => document.getElementById('c-loss').uplot.series.length") == 3  # raw, smoothed
        assert tab.errors == []
        tab.close()
    finally:
        server.shutdown()
        server.server_close()


class ToyMetrics(MetricsRecord):
    """The metrics record with one more metric, declared as ARCHITECTURE's recipe declares one."""

    toy_score: Scalar = None


def test_a_charted_scalar_no_chart_names_is_drawn_under_other_metrics(browser, small_home, tmp_path):
    """A new `Charted` field of the metrics record (here `toy_score`, on a `MetricsRecord` subclass; its
    `charted` fields carried as the trainer's `SCALARS` carry them) reaches the page with no change to the
    page: its own chart under "Other metrics"."""
    home, lines = factory.copy_as_live(small_home, tmp_path / "home")
    factory.set_status(home, "live", "completed")
    records = [json.loads(line) for line in lines]
    with open(home.run("live") / METRICS_FILE, "w") as stream:
        stream.writelines(json.dumps({**r, "toy_score": r["step"] / 2}) + "\n" for r in records)
    added = [name for name in charted(ToyMetrics) if name not in SCALARS]
    assert added == ["toy_score"]
    run = load_run(home.run("live"), MetricsTail(home.run("live") / METRICS_FILE, ToyMetrics))
    assert len(run.records) == len(records)
    page = write_run_page(run, tmp_path / "site", series=RunSeries([*run_series().scalars, *added]))
    tab = open_run(browser, page)
    assert tab.page.is_visible("#other-metrics")
    assert tab.page.eval_on_selector_all("#other-charts > div", "cs => cs.map((c) => c.id)") == ["c-other-toy_score"]
    tab.chart("c-other-toy_score")
    drawn = tab.page.evaluate(
        "() => { const u = document.getElementById('c-other-toy_score').uplot;"
        " return [u.data[0], u.data[1], u.series[1].label]; }"
    )
    assert drawn == [[r["step"] for r in records], [r["step"] / 2 for r in records], "toy_score"]
    tab.check_clean()
    tab.close()
