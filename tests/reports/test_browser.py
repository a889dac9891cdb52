"""The pages in a real headless Chromium, opened from file:// with no server.

Uses Debian's `chromium` driven by Playwright (never `playwright install`): `make test`
installs it when missing and the user is root on Debian. Elsewhere these tests skip
with the reason; under CI (the CI environment variable) a missing browser fails them.
Screenshots go to tests/reports/artifacts/ (ignored by git).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import reports
from millrace.home import Home
from mixtures.manifest import read_manifest
from reports import build_run_page, build_site
from reports.numbers import human_count, human_epochs, human_percent
from tests.reports import factory

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; in CI the browser tests must run")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _unavailable("Debian's chromium is not installed (`make test` installs it when run as root on Debian)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (it is in the dev extra)")
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


class Tab:
    """A page that records console errors, page errors and every request it makes."""

    def __init__(self, browser, width: int = 1280, height: int = 900, touch: bool = False):
        self.context = browser.new_context(viewport={"width": width, "height": height}, has_touch=touch,
                                           is_mobile=touch)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, path: Path, query: str = "") -> None:
        self.page.goto(path.as_uri() + query)
        self.page.wait_for_load_state("load")

    def open_with_charts(self, site: Path) -> None:
        """The site's index with the pages' chart and format script (charts.js) loaded, to call it directly."""
        self.open(site / "index.html")
        self.page.add_script_tag(content=(Path(reports.__file__).parent / "templates" / "charts.js").read_text())

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        out = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(out), full_page=True)
        assert out.stat().st_size > 10_000
        return out

    def check_clean(self) -> None:
        assert self.errors == []
        outside = [u for u in self.requests if not u.startswith("file://")]
        assert outside == [], f"network requests: {outside}"

    def weights_table(self) -> dict[str, dict[str, str]]:
        return self.page.evaluate("""() => {
            const t = document.querySelector('#weights table');
            const head = [...t.querySelectorAll('thead th')].map((th) => th.textContent);
            const out = {};
            for (const tr of t.querySelectorAll('tbody tr')) {
                const cells = [...tr.querySelectorAll('td')].map((td) => td.textContent);
                out[cells[0]] = Object.fromEntries(head.map((h, i) => [h, cells[i]]));
            }
            return out;
        }""")

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def site(small_home, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build_site(small_home, out)
    return out


def expected_realised(home: Home, revision: str) -> dict[str, dict[str, str]]:
    manifest, _ = read_manifest(home.store(factory.STORE, factory.VERSION) / "mixtures" / "default" / revision
                                / "manifest.json")
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
    for name, path, query in (("composition", site / factory.STORE / factory.VERSION / "index.html",
                               "?revision=uniform-sampling"), ("run", site / "runs" / "tiny-1" / "index.html", ""),
                              ("index", site / "index.html", "")):
        tab = Tab(browser, width=390, height=844)
        tab.open(path, query)
        overflow = tab.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{name} page is {overflow}px wider than a phone"
        tab.shot(f"phone-{name}")
        tab.check_clean()
        tab.close()


def test_run_page_draws_every_chart(browser, site):
    tab = Tab(browser)
    tab.open(site / "runs" / "tiny-1" / "index.html")
    for chart in ("c-loss", "c-lr", "c-grad", "c-param", "c-tps", "c-mfu", "c-bias", "c-viol", "c-cell", "c-source"):
        assert tab.page.locator(f"#{chart} svg path").count() >= 1, chart
    assert tab.page.locator("#c-param .legend button[aria-pressed]").count() == 2
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
    tab.open(tmp_path / "site" / "reference" / "2026.11.30" / "index.html", "?revision=uniform-sampling&compare=natural")
    assert tab.page.locator("#grid g.hm").count() == 200
    assert tab.page.locator("#weights tbody tr").count() == 200
    options = tab.page.eval_on_selector_all("#revision option", "(os) => os.map((o) => o.value)")
    assert sorted(options) == sorted(factory.REFERENCE_REVISIONS)
    tab.shot("reference-uniform-vs-natural")
    tab.check_clean()
    tab.close()


def test_live_run_page_reloads_itself_until_the_run_ends(browser, small_home, tmp_path):
    home, lines = factory.copy_as_live(small_home, tmp_path / "home", lines=5)
    site = tmp_path / "site"
    page_path = build_run_page(home, "live", site, refresh_seconds=1)
    tab = Tab(browser)
    tab.open(page_path)
    first_step = tab.page.inner_text("#run-cards .card >> nth=0")
    assert "live" in tab.page.inner_text("#status")
    with open(home.run("live") / "metrics.jsonl", "a") as stream:
        stream.writelines(lines[5:])
    build_run_page(home, "live", site, refresh_seconds=1)
    tab.page.wait_for_function("(first) => document.querySelector('#run-cards .card').innerText !== first",
                               arg=first_step, timeout=10_000)
    assert tab.page.inner_text("#run-cards .card >> nth=0").startswith(str(json.loads(lines[-1])["step"]))
    factory.set_status(home, "live", "completed")
    build_run_page(home, "live", site, refresh_seconds=1)
    tab.page.wait_for_function("() => document.querySelector('#status').innerText.startsWith('completed')",
                               timeout=10_000)
    assert tab.page.locator("meta[http-equiv=refresh]").count() == 0  # a finished run's page stays put
    tab.shot("run-live-finished")
    tab.check_clean()
    tab.close()


def test_page_script_formats_numbers_like_python(browser, site):
    tab = Tab(browser)
    tab.open_with_charts(site)
    values = [0, 5, 842, 999.7, 1234, 999_960, 845e6, 1.24e12, 23.1e12, 2.5e15, 12.5, -1500]
    shares = [0, 0.031, 0.5, 1, 0.0000012, 0.125, 0.00999]
    epochs = [0, 0.42, 8, 7.96, 0.001234]
    shown = tab.page.evaluate(
        "([v, s, e]) => [v.map(fmt.count), s.map(fmt.pct), e.map(fmt.epochs)]", [values, shares, epochs])
    assert shown == [[human_count(v) for v in values], [human_percent(x) for x in shares],
                     [human_epochs(x) for x in epochs]]
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
    right = tab.page.evaluate("() => document.querySelector('#weights thead th:nth-child(3)').getBoundingClientRect().right")
    assert right < 1920
    diff_heads = tab.page.eval_on_selector_all("#diff thead th", "(ths) => ths.map((th) => th.textContent)")
    assert diff_heads[:4] == ["Cell", "main change", "cooldown change", "Epochs uniform-sampling"]
    funnel = tab.page.eval_on_selector_all("#funnel thead th", "(ths) => ths.map((th) => th.textContent)")
    assert funnel[:3] == ["Stage", "Removed", "Removed because"]
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
    for path, query, chart in ((site.joinpath(*COMPOSITION), "?revision=uniform-sampling", "#grid"),
                               (site / "runs" / "tiny-1" / "index.html", "", "#c-loss")):
        tab = Tab(browser, width=390, height=844, touch=True)
        tab.open(path, query)
        smallest = tab.page.evaluate("""(sel) => Math.min(...[...document.querySelectorAll(sel + ' svg text')]
            .filter((t) => t.textContent.trim()).map((t) => parseFloat(getComputedStyle(t).fontSize)
              * t.ownerSVGElement.getBoundingClientRect().width / t.ownerSVGElement.viewBox.baseVal.width))""", chart)
        assert smallest >= 11, (chart, smallest)
        target = tab.page.locator(f"{chart} g.hm").first if chart == "#grid" else tab.page.locator(f"{chart} rect.hit")
        target.scroll_into_view_if_needed()
        target.tap()
        assert tab.page.is_visible(".tip")
        assert ("available" if chart == "#grid" else "loss") in tab.page.inner_text(".tip")
        tab.check_clean()
        tab.close()


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
    factory.write_contract_metrics(home, "spiky", manifest, steps=6000, spikes={4006: 12.0})
    factory.write_observations(home, "spiky", manifest, steps=6000, every=600)
    build_site(home, tmp_path / "site")
    tab = Tab(browser)
    tab.open(tmp_path / "site" / "runs" / "spiky" / "index.html")
    data = json.loads(tab.page.text_content("#page-data"))
    assert len(data["steps"]) <= 600 and max(data["bands"]["loss"]["hi"]) == 12.0
    # the chart's y axis reaches the spike, and a red mark sits where the alert started
    ticks = [float(t) for t in tab.page.eval_on_selector_all("#c-loss svg text", "ts => ts.map(t => t.textContent)")
             if t.replace(".", "", 1).isdigit()]
    assert max(ticks) >= 12
    assert tab.page.locator("#c-loss svg polygon.band").count() == 1
    assert tab.page.locator("#c-loss svg line.mark").count() == 1
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
    tab.open(site / "runs" / "tiny-1" / "index.html")
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
    assert len(charts) >= 10
    for label, y_title, x_title, overlaps in charts:
        assert y_title and x_title and overlaps == 0, (label, y_title, x_title, overlaps)
        assert "line chart of" in label or ":" in label
    assert any(y == "loss (nats per token)" for _, y, _, _ in charts)
    box = tab.page.evaluate("""() => { const r = document.querySelector('#c-source rect.hit');
        r.scrollIntoView({block: 'end'}); const b = r.getBoundingClientRect();
        return [b.left + b.width / 2, b.bottom - 2]; }""")
    tab.page.mouse.move(box[0], box[1])
    tip = tab.page.evaluate("() => { const b = document.querySelector('.tip').getBoundingClientRect(); return [b.top, b.bottom]; }")
    assert tip[0] >= 0 and tip[1] <= 700, tip
    tab.check_clean()
    tab.close()


def test_legend_picks_the_lines_of_a_busy_chart(browser, site):
    tab = Tab(browser)
    tab.open(site / "runs" / "tiny-1" / "index.html")
    buttons = tab.page.locator("#c-source .legend button[aria-pressed]")
    assert buttons.count() >= 2
    name = buttons.first.inner_text()
    buttons.first.click()
    assert buttons.first.get_attribute("aria-pressed") == "false"
    hidden = tab.page.evaluate("(n) => getComputedStyle(document.querySelector(`#c-source path[data-series='${n}']`)).display", name)
    assert hidden == "none"
    buttons.first.press("Enter")
    assert buttons.first.get_attribute("aria-pressed") == "true"
    tab.check_clean()
    tab.close()


def test_keyboard_screen_readers_and_contrast(browser, site):
    tab = Tab(browser)
    tab.open(site.joinpath(*COMPOSITION), "?revision=uniform-sampling&metric=epochs")
    assert tab.page.eval_on_selector_all("#weights thead th", "(ths) => ths.map((th) => th.getAttribute('aria-sort'))")[0] \
        == "ascending"
    epochs = tab.page.locator("#weights thead th:nth-child(3) button")
    epochs.focus()
    tab.page.keyboard.press("Enter")
    assert tab.page.get_attribute("#weights thead th:nth-child(3)", "aria-sort") == "descending"
    shown = tab.page.eval_on_selector_all("#weights tbody tr td:nth-child(3)", "(tds) => tds.map((td) => td.textContent)")
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
    above = tab.page.evaluate("() => document.querySelector('#notice').getBoundingClientRect().top"
                              " < document.querySelector('.cards').getBoundingClientRect().top")
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


def test_comparison_page_overlays_runs(browser, tmp_path):
    home = Home.resolve(tmp_path / "home")
    factory.make_compared_runs(home, {"a": 900, "b": 600})
    build_site(home, tmp_path / "site", runs=["a", "b"])
    tab = Tab(browser)
    tab.open(tmp_path / "site" / "compare" / "a--b" / "index.html")
    for chart in ("c-train", "c-eval-loss", "c-eval-bpb"):
        assert tab.page.locator(f"#{chart} .legend button[aria-pressed]").count() == 2, chart
    assert tab.page.locator("#compare-table tbody tr").count() == 2
    tab.page.check("#compare-log")
    assert tab.page.locator("#c-eval-loss svg path").count() >= 2
    tab.shot("compare")
    tab.check_clean()
    tab.close()
