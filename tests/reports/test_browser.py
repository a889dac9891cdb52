"""The pages in a real headless Chromium, opened from file:// with no server.

Uses Debian's `chromium` driven by Playwright (never `playwright install`): `make test`
installs it when missing and the user is root on Debian. Elsewhere these tests skip
with the reason; under CI (the CI environment variable) a missing browser fails them.
Screenshots go to tests/reports/artifacts/ (ignored by git).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from millrace.home import Home
from mixtures.manifest import read_manifest
from reports import build_run_page, build_site
from reports.numbers import human_count, human_epochs, human_percent
from reports.run_data import read_script
from testkit import factory
from testkit.browser import Tab
from trainer.explain import write_explanations
from trainer.ladder.results import write_ladder
from trainer.records import LadderPlanRecord, LadderRecord, RungResult, read_explanations
from trainer.runs_cli import note_run, tag_run


@pytest.fixture(scope="module")
def site(small_home, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build_site(small_home, out)
    return out


def expected_realised(home: Home, revision: str) -> dict[str, dict[str, str]]:
    manifest, _ = read_manifest(
        home.store(factory.STORE, factory.VERSION) / "mixtures" / "default" / revision / "manifest.json"
    )
    return {
        cell: {f"{p.name} realised": human_percent(p.counts.get(cell, 0) / p.sequences) for p in manifest.phases}
        for cell in manifest.cells
    }


def test_composition_page_follows_the_revision_in_the_url(browser, site, small_home):
    page_path = site / factory.STORE / factory.VERSION / "index.html"
    tab = Tab(browser)
    tab.open(page_path, "?revision=uniform-sampling")
    assert tab.page.input_value("#revision") == "uniform-sampling"
    shown = tab.weights_table()
    uniform = expected_realised(small_home, "uniform-sampling")
    for cell, columns in uniform.items():
        for column, text in columns.items():
            assert shown[cell][column] == text, (cell, column)
    assert shown["c00q0"]["main declared"] == "16.7%" and shown["c00q0"]["cooldown declared"] == "0%"
    assert "uniform-sampling" in tab.page.inner_text("#revision-cards")
    assert tab.page.locator("#grid g.hm").count() == 6
    tab.shot("composition-uniform-sampling")

    tab.page.select_option("#revision", "natural")
    assert "revision=natural" in tab.page.url and "uniform-sampling" not in tab.page.url
    natural = tab.weights_table()
    expected = expected_realised(small_home, "natural")
    for cell, columns in expected.items():
        for column, text in columns.items():
            assert natural[cell][column] == text, (cell, column)
    assert natural != shown and "cooldown realised" not in natural["c00q0"]

    tab.page.select_option("#compare", "uniform-sampling")
    assert "compare=uniform-sampling" in tab.page.url
    summary = tab.page.inner_text("#diff-summary")
    assert "default / natural against default / uniform-sampling" in summary and "main: 6 cells change" in summary
    assert "cooldown exists only in uniform-sampling" in summary  # phases are matched by name
    assert tab.page.locator("#diff table tbody tr").count() == 6
    tab.page.select_option("#metric", "epochs")
    assert "metric=epochs" in tab.page.url
    tab.page.locator("#grid g.hm").first.hover()
    assert "epochs" in tab.page.inner_text(".tip")

    # a sample document holding <script> is shown as text and never runs
    assert tab.page.evaluate("() => window.__pwned") is None
    tab.page.click("#cell-c00q0 summary")
    assert "<script>window.__pwned" in tab.page.inner_text("#cell-c00q0 pre.sample >> nth=0")
    tab.page.locator("#grid g.hm").last.click()  # a grid square opens its cell's details
    assert tab.page.evaluate("() => document.getElementById('cell-c02q1').open")
    tab.shot("composition-natural-vs-uniform")
    tab.check_clean()
    tab.close()


def test_reloading_keeps_the_chosen_revision(browser, site):
    tab = Tab(browser)
    tab.open(site / factory.STORE / factory.VERSION / "index.html", "?revision=natural&compare=uniform-sampling")
    tab.page.select_option("#revision", "uniform-sampling")
    tab.page.reload()
    assert tab.page.input_value("#revision") == "uniform-sampling"
    assert tab.page.input_value("#compare") == ""  # comparing a revision with itself is dropped
    tab.check_clean()
    tab.close()


def test_pages_fit_a_phone(browser, site):
    for name, path, query in (
        ("composition", site / factory.STORE / factory.VERSION / "index.html", "?revision=uniform-sampling"),
        ("run", site / "runs" / "tiny-1" / "index.html", ""),
        ("index", site / "index.html", ""),
    ):
        tab = Tab(browser, width=390, height=844)
        tab.open_run(path, query) if name == "run" else tab.open(path, query)
        overflow = tab.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{name} page is {overflow}px wider than a phone"
        tab.shot(f"phone-{name}")
        tab.check_clean()
        tab.close()


def test_run_page_draws_every_chart(browser, site):
    tab = Tab(browser)
    tab.open_run(site / "runs" / "tiny-1" / "index.html")
    # at open only the charts near the viewport are built; the per-source losses, far down, wait for a scroll
    assert int(tab.page.evaluate("() => document.body.dataset.pending")) > 0
    assert tab.page.evaluate("() => document.getElementById('c-source').uplot === undefined")
    assert tab.page.is_hidden("#other-metrics")  # every charted scalar of the record has a named chart
    for chart in ("c-loss", "c-lr", "c-grad", "c-param", "c-tps", "c-mfu", "c-bias", "c-viol", "c-cell", "c-source"):
        tab.chart(chart)  # drawn when scrolled to
        drawn = tab.page.evaluate(
            "(id) => { const u = document.getElementById(id).uplot;"
            " return u ? [u.data[0].length, u.axes[1].label] : null; }",
            chart,
        )
        assert drawn and drawn[0] >= 1 and drawn[1], chart  # points, and a y axis that says what it measures
    assert tab.page.locator("#c-param .u-legend .u-series").count() == 3  # the x value and two lines
    assert tab.page.locator("#c-load g.hm").count() == 16  # 2 layers × 8 experts
    assert tab.page.locator("#plan-table tbody tr").count() == 6
    assert "Largest difference between realised and expected-by-now" in tab.page.inner_text("#mixing-error")
    tab.shot("run")
    tab.page.click("text=composition of its data")
    assert "revision=uniform-sampling" in tab.page.url
    tab.check_clean()
    tab.close()


def test_reference_shape_page(browser, reference_home, tmp_path):
    build_site(reference_home, tmp_path / "site")
    tab = Tab(browser)
    tab.open(
        tmp_path / "site" / "reference" / "2026.11.30" / "index.html", "?revision=uniform-sampling&compare=natural"
    )
    assert tab.page.locator("#grid g.hm").count() == 200
    assert tab.page.locator("#weights tbody tr").count() == 200
    options = tab.page.eval_on_selector_all("#revision option", "(os) => os.map((o) => o.value)")
    assert sorted(options) == sorted(factory.REFERENCE_REVISIONS)
    tab.shot("reference-uniform-vs-natural")
    tab.check_clean()
    tab.close()


def test_page_script_formats_numbers_like_python(browser, site):
    tab = Tab(browser)
    tab.open_with_charts(site)
    values = [0, 5, 842, 999.7, 1234, 999_960, 845e6, 1.24e12, 23.1e12, 2.5e15, 12.5, -1500]
    shares = [0, 0.031, 0.5, 1, 0.0000012, 0.125, 0.00999]
    epochs = [0, 0.42, 8, 7.96, 0.001234]
    shown = tab.page.evaluate(
        "([v, s, e]) => [v.map(fmt.count), s.map(fmt.pct), e.map(fmt.epochs)]", [values, shares, epochs]
    )
    assert shown == [
        [human_count(v) for v in values],
        [human_percent(x) for x in shares],
        [human_epochs(x) for x in epochs],
    ]
    tab.close()


def test_store_without_revisions_shows_its_own_numbers(browser, tmp_path):
    home = Home.resolve(tmp_path / "home")
    factory.make_small_store(home)
    build_site(home, tmp_path / "site")
    tab = Tab(browser)
    tab.open(tmp_path / "site" / factory.STORE / factory.VERSION / "index.html", "?revision=uniform-sampling")
    assert "No mixture revision is built on this store yet" in tab.page.inner_text("#notice")
    assert tab.page.locator("#grid g.hm").count() == 6
    assert not tab.page.is_visible("#weights-section") and not tab.page.is_visible("#revision-control")
    tab.check_clean()
    tab.close()


COMPOSITION = (factory.STORE, factory.VERSION, "index.html")


def test_wide_tables_fit_a_wide_window_problem_columns_first_first_column_fixed(browser, site):
    page_path = site.joinpath(*COMPOSITION)
    tab = Tab(browser, width=1920, height=1000)
    tab.open(page_path, "?revision=uniform-sampling&compare=natural")
    assert tab.page.evaluate("() => document.querySelector('main').clientWidth") > 1800
    heads = tab.page.eval_on_selector_all("#weights thead th", "(ths) => ths.map((th) => th.textContent)")
    assert heads[:3] == ["Cell", "Cap", "Epochs"]
    right = tab.page.evaluate(
        "() => document.querySelector('#weights thead th:nth-child(3)').getBoundingClientRect().right"
    )
    assert right < 1920
    diff_heads = tab.page.eval_on_selector_all("#diff thead th", "(ths) => ths.map((th) => th.textContent)")
    assert diff_heads[:4] == ["Cell", "main change", "cooldown change", "Epochs uniform-sampling"]
    funnel = tab.page.eval_on_selector_all("#funnel thead th", "(ths) => ths.map((th) => th.textContent)")
    assert funnel[:3] == ["Step", "Removed", "Removed because"]
    tab.close()
    phone = Tab(browser, width=390, height=844)
    phone.open(page_path, "?revision=uniform-sampling")
    stuck = phone.page.evaluate("""() => {
        const box = document.querySelector('#weights');
        box.scrollLeft = 400;
        const first = box.querySelector('tbody td:first-child').getBoundingClientRect().left;
        return [box.scrollLeft, first - box.getBoundingClientRect().left];
    }""")
    assert stuck[0] > 0 and abs(stuck[1]) <= 1  # scrolled sideways, the cell names stay in view
    phone.check_clean()
    phone.close()


def test_phone_text_is_readable_and_numbers_are_a_tap_away(browser, site):
    tab = Tab(browser, width=390, height=844, touch=True)
    tab.open(site.joinpath(*COMPOSITION), "?revision=uniform-sampling")
    smallest = tab.page.evaluate("""() => Math.min(...[...document.querySelectorAll('#grid svg text')]
        .filter((t) => t.textContent.trim()).map((t) => parseFloat(getComputedStyle(t).fontSize)
          * t.ownerSVGElement.getBoundingClientRect().width / t.ownerSVGElement.viewBox.baseVal.width))""")
    assert smallest >= 11, smallest
    target = tab.page.locator("#grid g.hm").first
    target.scroll_into_view_if_needed()
    target.tap()
    assert tab.page.is_visible(".tip") and "available" in tab.page.inner_text(".tip")
    tab.check_clean()
    tab.close()
    run = Tab(browser, width=390, height=844, touch=True)
    run.open_run(site / "runs" / "tiny-1" / "index.html")
    run.chart("c-loss")
    assert run.page.evaluate("() => document.getElementById('c-loss').uplot.width") <= 390
    legend = run.page.evaluate(
        "() => parseFloat(getComputedStyle(document.querySelector('#c-loss .u-legend')).fontSize)"
    )
    assert legend >= 11
    run.check_clean()
    run.close()


def test_compare_colours_mean_one_thing_in_the_grid_and_the_diff_table(browser, site):
    tab = Tab(browser)
    tab.open(site.joinpath(*COMPOSITION), "?revision=natural&compare=uniform-sampling&metric=delta:0")
    found = tab.page.evaluate("""() => {
        const rgb = (s) => s.match(/\\d+/g).map(Number);
        const out = {};
        for (const tr of document.querySelectorAll('#diff tbody tr')) {
            const td = tr.querySelectorAll('td')[1];
            if (!td.className) continue;
            const cell = tr.querySelector('td').textContent;
            const [r, c] = [Number(cell.slice(1, 3)), Number(cell.slice(4))];
            const square = document.querySelector(`#grid g.hm[data-row="${r}"][data-col="${c}"] rect`);
            out[cell] = [td.className, rgb(getComputedStyle(td).color), rgb(square.getAttribute('fill'))];
        }
        return out;
    }""")
    assert {kind for kind, _, _ in found.values()} == {"rise", "fall"}
    for cell, (kind, text, fill) in found.items():
        blue_text, blue_fill = text[2] > text[0], fill[2] > fill[0]
        assert blue_text == blue_fill == (kind == "rise"), (cell, kind, text, fill)
    assert "blue: more in natural" in tab.page.inner_text("#diff")


def test_run_page_keeps_a_spike_and_draws_evaluations_and_completions(browser, tmp_path):
    home = Home.resolve(tmp_path / "home")
    factory.make_small_store(home)
    manifest = factory.make_small_revisions(home)["natural"]
    factory.write_contract_metrics(home, "spiky", manifest, steps=6000, spikes={4006: 12.0, 4020: 11.0})
    factory.write_observations(home, "spiky", manifest, steps=6000, every=600)
    build_site(home, tmp_path / "site")
    tab = Tab(browser)
    tab.open_run(tmp_path / "site" / "runs" / "spiky" / "index.html")
    data = read_script(tmp_path / "site" / "runs" / "spiky" / "data" / "overview.js")
    loss = data["series"]["loss"]
    assert len(loss["s"]) <= 2002 and dict(zip(loss["s"], loss["v"]))[4006] == 12.0
    # the chart's y axis reaches the spike, and one band sits where the alert started
    assert tab.page.evaluate("() => document.getElementById('c-loss').uplot.scales.y.max") >= 12
    assert tab.page.locator("#c-loss .band").count() == 2 and "step 4006" in tab.page.inner_text(
        "#c-loss .band >> nth=0"
    )
    # two alerts 14 steps apart: their bands touch at this width, their labels are stacked, not overlaid
    boxes = tab.page.eval_on_selector_all(
        "#c-loss .band span",
        "ss => ss.map(s => { const b = s.getBoundingClientRect(); return [b.left, b.right, b.top, b.bottom]; })",
    )
    assert len(boxes) == 2
    (l1, r1, t1, b1), (l2, r2, t2, b2) = boxes
    assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, boxes
    assert "loss_jump" in tab.page.inner_text("#alert-events")
    # evaluation curves: macro and micro, then one line per cell, on a log scale, downloadable
    assert tab.page.locator("#c-eval .legend button[aria-pressed]").count() == 2
    tab.page.select_option("#eval-group", "cell")
    assert tab.page.locator("#c-eval .legend button[aria-pressed]").count() == len(data["eval"]["loss"]["cell"])
    tab.page.check("#eval-log")
    tab.page.select_option("#eval-group", "set")
    assert tab.page.inner_text("#eval-latest tbody").startswith("wiki")
    with tab.page.expect_download() as download:
        tab.page.click("#eval-csv")
    text = Path(download.value.path()).read_text()
    assert text.startswith("metric,group,name,step,tokens,value") and ',set,"wiki",6000,' in text
    # the evaluation chart follows the training charts' zoom, and its settings are in the URL (kept on reload)
    tab.page.fill("#eval-smooth", "0.5")
    assert tab.page.evaluate("() => document.getElementById('c-eval').dataset.evaluations") == "10"
    assert "elog=1" in tab.page.url and "esmooth=0.5" in tab.page.url and "group=set" in tab.page.url
    tab.page.goto(tab.page.url + "&from=1000&to=3100")  # a shared link zoomed to steps 1,000-3,100
    tab.page.wait_for_selector("body[data-ready='1']")
    assert tab.page.is_checked("#eval-log") and tab.page.input_value("#eval-smooth") == "0.5"
    assert tab.page.evaluate("() => document.getElementById('c-eval').dataset.evaluations") == "4"
    # completions: the latest step against another, side by side
    assert tab.page.input_value("#sample-a") == "6000" and tab.page.input_value("#sample-b") == "5400"
    row = tab.page.inner_text("#samples-table tbody tr:first-child")
    assert "step 6000 says c00:c00q0" in row and "step 5400 says c00:c00q0" in row
    tab.page.select_option("#sample-b", "600")
    assert "step 600 says c00:c00q0" in tab.page.inner_text("#samples-table tbody tr:first-child")
    tab.shot("run-observed")
    tab.check_clean()
    tab.close()


def test_axes_have_titles_x_titles_clear_the_ticks_and_tips_stay_inside(browser, site):
    tab = Tab(browser, width=1280, height=700)
    tab.open_run(site / "runs" / "tiny-1" / "index.html")
    tab.every_chart()
    titles = tab.page.evaluate(
        "() => [...document.querySelectorAll('.tchart')].map((c) => [c.id, c.uplot.axes[0].label,"
        " c.uplot.axes[1].label])"
    )
    assert len(titles) >= 10 and all(x and y for _, x, y in titles), titles
    assert ("c-loss", "step", "loss (nats per token)") in [tuple(t) for t in titles]
    charts = tab.page.evaluate("""() => [...document.querySelectorAll('.chart svg[role=img]')].map((svg) => {
        const x = svg.querySelector('.axis-title.x'), y = svg.querySelector('.axis-title.y');
        const xb = x.getBoundingClientRect();
        const ticks = [...svg.querySelectorAll('text')]
            .filter((t) => t !== x && t !== y && !t.classList.contains('axis-title'));
        const overlaps = ticks.filter((t) => { const b = t.getBoundingClientRect();
            return b.width && b.left < xb.right && b.right > xb.left
                && b.top < xb.bottom && b.bottom > xb.top; }).length;
        return [svg.getAttribute('aria-label'), y.textContent, x.textContent, overlaps];
    })""")
    assert len(charts) >= 1  # the evaluation chart (SVG)
    for label, y_title, x_title, overlaps in charts:
        assert y_title and x_title and overlaps == 0, (label, y_title, x_title, overlaps)
        assert "line chart of" in label or ":" in label
    box = tab.page.evaluate("""() => { const r = [...document.querySelectorAll('#c-load g.hm')].pop();
        r.scrollIntoView({block: 'end'}); const b = r.getBoundingClientRect();
        return [b.left + b.width / 2, b.bottom - 2]; }""")
    tab.page.mouse.move(box[0], box[1])
    tip = tab.page.evaluate(
        "() => { const b = document.querySelector('.tip').getBoundingClientRect(); return [b.top, b.bottom]; }"
    )
    assert tip[0] >= 0 and tip[1] <= 700, tip
    tab.check_clean()
    tab.close()


def test_legend_picks_the_lines_of_a_busy_chart(browser, site):
    tab = Tab(browser)
    tab.open_run(site / "runs" / "tiny-1" / "index.html")
    tab.chart("c-source")
    entries = tab.page.locator("#c-source .u-legend .u-series")
    assert entries.count() >= 3  # the x value and one line per source
    entries.nth(1).click()
    assert "u-off" in entries.nth(1).get_attribute("class")
    assert tab.page.evaluate("() => document.getElementById('c-source').uplot.series[1].show") is False
    entries.nth(1).click()
    assert tab.page.evaluate("() => document.getElementById('c-source').uplot.series[1].show") is True
    tab.check_clean()
    tab.close()


def test_keyboard_screen_readers_and_contrast(browser, site):
    tab = Tab(browser)
    tab.open(site.joinpath(*COMPOSITION), "?revision=uniform-sampling&metric=epochs")
    assert (
        tab.page.eval_on_selector_all("#weights thead th", "(ths) => ths.map((th) => th.getAttribute('aria-sort'))")[0]
        == "ascending"
    )
    epochs = tab.page.locator("#weights thead th:nth-child(3) button")
    epochs.focus()
    tab.page.keyboard.press("Enter")
    assert tab.page.get_attribute("#weights thead th:nth-child(3)", "aria-sort") == "descending"
    shown = tab.page.eval_on_selector_all(
        "#weights tbody tr td:nth-child(3)", "(tds) => tds.map((td) => td.textContent)"
    )
    values = [float(v.rstrip("×")) for v in shown]
    assert values == sorted(values, reverse=True)
    label = tab.page.get_attribute("#grid svg", "aria-label")
    assert label not in ("grid", "heat map") and "uniform-sampling" in label
    first = tab.page.locator("#grid g.hm").first
    first.focus()
    assert tab.page.is_visible(".tip") and "c00" in tab.page.inner_text(".tip")
    assert "c00" in first.get_attribute("aria-label")
    tab.page.keyboard.press("ArrowRight")
    assert tab.page.evaluate("() => document.activeElement.dataset.col") == "1"
    tab.page.keyboard.press("Enter")
    assert "#cell-c00q1" in tab.page.url
    ratios = tab.page.evaluate("""() => {
        const pairs = [...document.querySelectorAll('#grid g.hm')].filter((g) => g.querySelector('text').textContent)
          .map((g) => [g.querySelector('text').getAttribute('fill'), g.querySelector('rect').getAttribute('fill')]);
        for (const td of document.querySelectorAll('#source-spread td[style]')) {
          const s = getComputedStyle(td); pairs.push([s.color, s.backgroundColor]);
        }
        return pairs.map(([a, b]) => contrast(a, b));
    }""")
    assert len(ratios) > 6 and min(ratios) >= 4.5, sorted(ratios)[:3]
    tab.check_clean()
    tab.close()


def test_empty_grid_cells_are_in_the_legend_and_stand_out(browser, site):
    tab = Tab(browser)
    tab.open_with_charts(site)
    drawn = tab.page.evaluate("""() => {
        const box = document.createElement('div'); document.body.appendChild(box);
        heatMap(box, ['c00', 'c01'], ['q0', 'q1'], (r, c) => (r === 1 && c === 1 ? null : r + c + 1),
          { format: String, tooltip: (r, c) => `c0${r}q${c}`, emptyLabel: 'no such cell' });
        const empty = box.querySelector('g.hm.empty rect');
        return [box.querySelector('.empty-key').textContent, empty.getAttribute('stroke'),
                contrast(empty.getAttribute('stroke'), '#ffffff')];
    }""")
    assert drawn[0] == "no such cell" and drawn[2] >= 3  # a dashed outline a person can see (non-text 3:1)
    tab.close()


def test_missing_revision_is_said_at_the_top_cells_link_and_descriptions_show(browser, site):
    page_path = site.joinpath(*COMPOSITION)
    tab = Tab(browser)
    tab.open(page_path, "?revision=uniform")
    notice = tab.page.locator("#notice")
    assert notice.get_attribute("class") == "alert" and tab.page.is_visible("#notice")
    text = notice.inner_text()
    assert "No revision “uniform” is built on this store" in text and "natural, uniform-sampling" in text
    above = tab.page.evaluate(
        "() => document.querySelector('#notice').getBoundingClientRect().top"
        " < document.querySelector('.cards').getBoundingClientRect().top"
    )
    assert above
    tab.page.select_option("#revision", "uniform-sampling")
    assert tab.page.inner_text("#revision-description") == factory.UNIFORM_DESCRIPTION
    tab.page.locator("#grid g.hm").nth(3).click()
    assert tab.page.url.endswith("#cell-c01q1")
    tab.close()
    linked = Tab(browser)
    linked.open(page_path, "?revision=natural#cell-c02q0")
    assert linked.page.evaluate("() => document.getElementById('cell-c02q0').open")
    assert linked.page.locator("#grid g.hm.selected").count() == 1
    assert not linked.page.is_visible("#revision-description")  # natural has no description
    linked.check_clean()
    linked.close()


@pytest.fixture(scope="module")
def compared_site(tmp_path_factory) -> Path:
    """Three runs on two revisions of the small store, one with a loss spike (an alert) at step 150."""
    home = Home.resolve(tmp_path_factory.mktemp("compare") / "home")
    factory.make_small_store(home)
    revisions = factory.make_small_revisions(home)
    factory.write_contract_metrics(home, "first", revisions["natural"], steps=300)
    factory.write_contract_metrics(home, "second", revisions["uniform-sampling"], steps=200, spikes={150: 9.0})
    factory.write_contract_metrics(home, "third", revisions["natural"], steps=100, status="running")
    factory.write_contract_metrics(home, "rung-s0", revisions["natural"], steps=50)
    plan = LadderPlanRecord(ladder="small", file="small.toml", mixture="default", revision="natural", seq_len=32)
    rung = RungResult(rung="d8", revision="natural", seed=0, run="rung-s0", status="completed")
    write_ladder(
        home,
        LadderRecord(ladder="small", file="small.toml", metric="loss.macro", asymptote=2.0, plan=plan, results=[rung]),
    )
    for run in ("first", "second", "third"):  # what a training call writes when it ends
        write_explanations(home, run)
    tag_run(home, "second", ["baseline", "spiky"])
    note_run(home, "first", "the lr sweep's reference")
    out = home.root / "site"
    build_site(home, out)
    return out


def search_alerts_and_columns(tab: Tab, rows) -> None:
    """The runs index: a search over every word of a row, each run's alert state, the columns chosen."""
    tab.page.fill("#f-search", "uniform sec")
    assert rows() == ["second"]
    tab.page.fill("#f-search", "baseline")  # tags and notes (`millrace runs tag/note`) are searched and shown
    assert rows() == ["second"]
    tab.page.fill("#f-search", "sweep")
    assert rows() == ["first"]
    tab.page.fill("#f-search", "")
    assert tab.page.inner_text('tr[data-run="first"] td:last-child') == "the lr sweep's reference"
    tags = tab.page.eval_on_selector_all('tr[data-run="second"] .badge.tag', "b => b.map(x => x.innerText)")
    assert tags == ["baseline", "spiky"]
    tab.page.uncheck('#f-columns input[data-column="Tokens"]')
    headers = tab.page.eval_on_selector_all("#runs thead th", "hs => hs.map(h => h.innerText)")
    assert "Tokens" not in headers and headers[-3:] == ["Alerts", "Tags", "Notes"] and "hide=Tokens" in tab.page.url
    assert tab.page.inner_text('tr[data-run="first"] td:nth-last-child(3)') == "none"
    assert len(tab.page.query_selector_all('tr[data-run="first"] td')) == len(headers)
    tab.page.check('#f-columns input[data-column="Tokens"]')


def compare_exports_and_smoothing(tab: Tab) -> None:
    """The compare page: CSV and JSON of what is compared, smoothing on every panel (kept in the address)."""
    with tab.page.expect_download() as download:
        tab.page.click("#compare-csv")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0] == "run,series,step,tokens,seconds,value"
    assert {line.split(",")[0] for line in lines[1:]} == {'"first"', '"second"'} and any(
        ",loss,299," in x for x in lines
    )
    with tab.page.expect_download() as download:
        tab.page.click("#compare-json")
    assert [r["name"] for r in json.loads(Path(download.value.path()).read_text())] == ["first", "second"]
    tab.page.fill("#compare-smooth", "0.5")
    labels = tab.page.evaluate("() => document.querySelector('#p-grad').uplot.series.map((s) => s.label)")
    assert "first, smoothed (EMA 0.5)" in labels and "second, smoothed (EMA 0.5)" in labels
    assert "smooth=0.5" in tab.page.url
    tab.page.fill("#compare-smooth", "0")


def panels_share_one_x_range(tab: Tab) -> None:
    """The compare page: every panel spans the same x range, its axes named with units; zooming one zooms them
    all, a double click resets them, and the x axis switches to tokens."""

    def ranges() -> list[list[float]]:
        return tab.page.evaluate("""() => [...document.querySelectorAll('#c-train .tchart, #c-eval .tchart, '
            + '#c-cells .tchart')].map(c => [c.uplot.scales.x.min, c.uplot.scales.x.max])""")

    shown = ranges()
    assert len(shown) >= 6 and all(r == [0, 299] for r in shown), shown
    axes = tab.page.evaluate("() => document.querySelector('#p-loss').uplot.axes.map(a => a.label)")
    assert axes == ["step", "loss (nats per token)"]
    tab.page.locator("#p-loss .u-over").scroll_into_view_if_needed()
    box = tab.page.locator("#p-loss .u-over").bounding_box()
    tab.page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] / 2)
    tab.page.mouse.down()
    tab.page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2, steps=5)
    tab.page.mouse.up()
    zoomed = ranges()
    assert zoomed[0] != [0, 299] and all(r == zoomed[0] for r in zoomed), zoomed
    assert 50 < zoomed[0][0] < zoomed[0][1] < 160
    tab.page.dblclick("#p-grad .u-over")
    assert all(r == [0, 299] for r in ranges())
    tab.page.select_option("#x-axis", "tokens")
    assert tab.page.evaluate("() => document.querySelector('#p-loss').uplot.axes[0].label") == "tokens trained"


@pytest.mark.slow  # about 10 s on a shared machine: two pages driven as a user, every panel checked
def test_pick_two_runs_from_the_index_and_compare_them(browser, compared_site):
    tab = Tab(browser)
    tab.open(compared_site / "index.html")

    def rows() -> list[str]:
        return tab.page.eval_on_selector_all("#runs tbody tr[data-run]", "rs => rs.map(r => r.dataset.run)")

    assert sorted(rows()) == ["first", "second", "third"]  # the ladder's rung run is folded under its ladder
    tab.page.click('tr[data-ladder="small"] button')
    assert "rung-s0" in rows()
    tab.page.select_option("#f-ladder", "-")
    assert sorted(rows()) == ["first", "second", "third"]
    tab.page.select_option("#f-ladder", "")
    tab.page.click('tr[data-ladder="small"] button')
    tab.page.click("#runs thead th:nth-child(7) button")  # sort by loss, lowest first after a second click
    tab.page.click("#runs thead th:nth-child(7) button")
    assert rows() == ["first", "second", "third"]  # 300 steps trained lower than 200 and 100
    tab.page.select_option("#f-revision", "uniform-sampling")
    assert rows() == ["second"]
    tab.page.select_option("#f-revision", "")
    search_alerts_and_columns(tab, rows)
    assert tab.page.is_disabled("#compare-ticked")
    tab.page.check('tr[data-run="first"] input[type=checkbox]')
    tab.page.check('tr[data-run="second"] input[type=checkbox]')
    tab.page.click("#compare-ticked")
    tab.page.wait_for_url("**/compare.html?runs=*")
    tab.page.wait_for_selector("#p-loss .u-over")
    assert tab.page.url.endswith("compare.html?runs=first,second")
    assert tab.page.eval_on_selector_all("#compare-table tbody tr", "rs => rs.map(r => r.dataset.run)") == [
        "first",
        "second",
    ]
    diff = tab.page.inner_text("#revision-diff")
    assert "main" in diff and "cooldown" in diff  # the two revisions' phases differ
    compare_exports_and_smoothing(tab)
    panels_share_one_x_range(tab)
    tab.shot("compare")
    tab.check_clean()
    tab.close()


@pytest.mark.slow  # with its share of the three-run site's build
def test_the_explain_view_shows_the_alerted_step(browser, compared_site):
    tab = Tab(browser)
    tab.open(compared_site / "runs" / "second" / "explain.html")
    assert tab.page.is_visible('#step-buttons button[data-step="150"]')
    tab.page.click('#step-buttons button[data-step="150"]')
    assert "Step 150" in tab.page.inner_text("#explain-panel")
    assert "loss 9" in tab.page.inner_text("#explain-verdict")
    assert "?step=150" in tab.page.url
    tab.page.fill("#step-input", "40")
    tab.page.dispatch_event("#step-input", "change")
    assert "millrace train explain second --step 40" in tab.page.inner_text("#explain-panel")
    tab.page.locator("#e-loss .u-over").scroll_into_view_if_needed()
    x = tab.page.evaluate("() => document.querySelector('#e-loss').uplot.valToPos(150, 'x')")
    box = tab.page.locator("#e-loss .u-over").bounding_box()
    tab.page.mouse.click(box["x"] + x, box["y"] + box["height"] / 2)  # a click on the chart picks the step
    assert "Step 150" in tab.page.inner_text("#explain-panel")
    tab.shot("explain")
    tab.check_clean()
    tab.close()


@pytest.mark.slow  # a store, a 40-step run and its explanations written, then the page driven (about 6 s)
def test_a_click_on_the_loss_chart_opens_the_step_panel_in_the_run_page(browser, tmp_path):
    home = Home.resolve(tmp_path / "home")
    factory.make_small_store(home)
    manifest = factory.make_small_revisions(home)["natural"]
    factory.write_contract_metrics(home, "spiky", manifest, steps=40, spikes={30: 9.0})
    write_explanations(home, "spiky")  # what a training call writes when it ends
    page = build_run_page(home, "spiky", tmp_path / "site")
    explained = read_explanations(home.run("spiky"))
    assert explained.steps == [30]
    batch = explained.explained["30"]["batch"]
    tab = Tab(browser)
    tab.open_run(page)
    assert tab.page.is_hidden("#step-panel")

    def click_at(chart: str, step: float) -> None:
        tab.chart(chart)
        box = tab.page.locator(f"#{chart} .u-over").bounding_box()
        x = tab.page.evaluate("([id, s]) => document.getElementById(id).uplot.valToPos(s, 'x')", [chart, step])
        tab.page.mouse.click(box["x"] + x, box["y"] + box["height"] / 2)

    click_at("c-loss", 30.2)  # on the spike, a pixel beside its record
    tab.page.wait_for_selector("#step-panel[data-step='30']")
    assert "Step 30" in tab.page.inner_text("#step-panel")
    assert "loss 9" in tab.page.inner_text("#explain-verdict")
    rows = tab.page.eval_on_selector_all("#explain-batch tbody tr", "rs => rs.map((r) => r.innerText)")
    assert len(rows) == len(batch["cells"]) and rows[0].startswith(batch["cells"][0]["cell"])
    assert all(source in rows[0] for source in batch["cells"][0]["sources"])
    assert tab.page.locator("#explain-cells tbody tr").count() == len(explained.explained["30"]["cells"])
    groups = tab.page.inner_text("#explain-groups")
    assert "router_bias/layer 0 (rule-updated)" in groups and "gradient-trained" in groups
    assert "step=30" in tab.page.url
    click_at("c-grad", 5)  # a step no explanation covers, on the gradient-norm chart: the command to run
    tab.page.wait_for_selector("#step-panel[data-step='5']")
    assert tab.page.inner_text("#explain-command") == "millrace train explain spiky --step 5"
    tab.page.click("#step-close")
    assert tab.page.is_hidden("#step-panel") and "step=" not in tab.page.url
    shared = Tab(browser)  # the URL opens the panel on the step it names
    shared.open_run(page, "?step=30")
    shared.page.wait_for_selector("#step-panel[data-step='30']")
    for t in (tab, shared):
        t.check_clean()
        t.close()
