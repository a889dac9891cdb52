"""What a W&B user expects, in headless Chromium from file://: the compare page takes log x and each panel's own
smoothing, log y and log x as the run page does (one piece of code, `chart_settings.js`), kept in the address;
and the run page's JSON export holds every recorded field, each record's per-expert loads and the alerts'
messages among them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from millrace.home import Home
from reports import build_site
from reports.run_data import DATA_DIR, read_script
from testkit import factory
from testkit.browser import Tab
from testkit.metrics_records import drifting_loads_record, write_recorded_run

STEPS, LAYERS, EXPERTS = 40, 2, 4


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two short runs on two revisions of the small store, and one with per-expert loads that differ by step,
    layer and expert and an alert that starts and ends."""
    home = Home.resolve(tmp_path_factory.mktemp("settings") / "home")
    factory.make_small_store(home)
    revisions = factory.make_small_revisions(home)
    factory.write_contract_metrics(home, "first", revisions["natural"], steps=STEPS)
    factory.write_contract_metrics(home, "second", revisions["uniform-sampling"], steps=STEPS // 2)
    write_recorded_run(home.run("loads"), [drifting_loads_record(step, LAYERS, EXPERTS) for step in range(STEPS)])
    build_site(home, home.root / "site")
    return home.root / "site"


def test_compare_takes_log_x_and_each_panels_own_settings_kept_in_the_address(browser, site: Path) -> None:
    tab = Tab(browser)
    tab.open(site / "compare.html", "?runs=first,second")
    tab.page.wait_for_selector("#p-grad .u-over")
    assert tab.scales("p-grad") == [1, 1, 2] and tab.scales("p-loss") == [1, 1, 2]
    tab.page.check("#compare-logx")
    assert "logx=1" in tab.page.url and tab.scales("p-loss")[0] == 3 and tab.scales("p-lr")[0] == 3
    # one panel's own settings, under it: the others keep following the controls above
    tab.page.fill("#p-grad .chart-smooth", "0.3")
    tab.page.dispatch_event("#p-grad .chart-smooth", "change")
    tab.page.check("#p-grad .chart-logy")
    tab.page.uncheck("#p-grad .chart-logx")
    assert "charts=p-grad%3A0.3%3Ay" in tab.page.url
    assert tab.scales("p-grad") == [1, 3, 4] and tab.scales("p-loss") == [3, 1, 2]  # 2 runs, each smoothed
    labels = tab.page.evaluate("() => document.getElementById('p-grad').uplot.series.map((s) => s.label)")
    assert "first, smoothed (EMA 0.3)" in labels
    # a shared address opens on the same view; "as above" drops a panel's own
    shared = Tab(browser)
    shared.open(site / "compare.html", "?runs=first,second&logx=1&log=1&smooth=0.5&charts=p-grad:0.2:x")
    shared.page.wait_for_selector("#p-grad .u-over")
    assert shared.page.is_checked("#compare-logx") and shared.page.is_checked("#compare-log")
    assert shared.page.input_value("#compare-smooth") == "0.5"
    assert shared.scales("p-grad") == [3, 1, 4] and shared.scales("p-loss") == [3, 3, 4]
    assert shared.page.input_value("#p-grad .chart-smooth") == "0.2" and not shared.page.is_checked(
        "#p-grad .chart-logy"
    )
    shared.page.click("#p-grad .chart-reset")
    assert "charts=" not in shared.page.url and shared.scales("p-grad") == [3, 3, 4]
    for t in (tab, shared):
        t.check_clean()
        t.close()


def test_the_json_export_holds_every_records_per_expert_loads_and_the_alerts(browser, site: Path) -> None:
    tab = Tab(browser)
    tab.open_run(site / "runs" / "loads" / "index.html")
    with tab.page.expect_download() as download:
        tab.page.click("#train-json")
    columns = json.loads(Path(download.value.path()).read_text())
    assert columns["step"] == list(range(STEPS))
    for layer in range(LAYERS):
        assert columns[f"expert_load.load/layer {layer}"] == [
            pytest.approx(drifting_loads_record(step, LAYERS, EXPERTS).expert_load[layer].load, rel=1e-12)
            for step in range(STEPS)
        ]
    assert columns["alert_events"] == [
        {"step": 7, "event": "start", "name": "loss_jump", "message": "loss 9 jumped"},
        {"step": 8, "event": "end", "name": "loss_jump", "message": ""},
    ]
    chunk = read_script(site / "runs" / "loads" / DATA_DIR / "chunk-00000.js")
    loads = {f"expert_load.load/layer {layer}" for layer in range(LAYERS)}
    assert set(columns) == {"run", "step", "phase", "tokens", "seconds", "alert_events", *chunk["columns"], *loads}
    tab.check_clean()
    tab.close()
