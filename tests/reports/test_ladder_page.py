"""The ladder page: rung table, held-out curves, the fit with predictions and intervals, residuals, the
comparison; the composition page of the revision links to it; reports reads ladder.json only (written from
`testkit.ladder_records.page_ladder_body`, the ladder's own maths on a known law)."""

from __future__ import annotations

import pytest

from millrace.home import Home
from reports import build_site
from testkit import factory
from testkit.browser import Tab
from testkit.ladder_records import page_ladder_body
from trainer.ladder.results import write_ladder
from trainer.records import LadderRecord


@pytest.fixture(scope="module")
def ladder_site(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("ladder-page") / "home")
    factory.make_small_store(home)
    factory.make_small_revisions(home)
    body = page_ladder_body()
    write_ladder(home, LadderRecord.model_validate(body))
    out = home.root / "site"
    build_site(home, out)
    return home, out, body


def test_the_ladder_page_shows_rungs_fit_predictions_residuals_and_comparison(ladder_site):
    _home, site, body = ladder_site
    html = (site / "ladders" / "page" / "index.html").read_text()
    for rung in body["plan"]["rungs"]:
        assert f"<td>{rung['name']}</td>" in html
    assert "next-d128" in html and "target" in html
    fit = body["fits"]["uniform-sampling"]
    prediction = fit["predictions"][0]
    assert f"{prediction['low']:.4f}"[:5] in html and f"{prediction['high']:.4f}"[:5] in html
    assert html.count('<tr><td class="l">d8</td><td>0</td>') == 2  # a residual row per revision
    assert f"{fit['residuals'][0]['residual']:+.4f}" in html
    assert body["comparison"]["verdict"] in html
    assert 'href="../../local/' in html or "composition of" in html
    composition = (site / factory.STORE / factory.VERSION / "index.html").read_text()
    assert 'href="../../ladders/page/index.html"' in composition
    assert 'href="ladders/page/index.html"' in (site / "index.html").read_text()


def test_reports_import_only_the_trainers_records():
    """The run and ladder records (with the training config's schema, `trainer.config`, that run.json records)
    and the mixture search's records: schema modules, no torch."""
    import subprocess
    import sys

    code = (
        "import sys, reports.ladder_page, reports.site; "
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('trainer') "
        "and m not in ('trainer', 'trainer.records', 'trainer.config', 'trainer.search', 'trainer.search.records')]; "
        "print(bad); sys.exit(bool(bad))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_ladder_page_draws_its_charts_in_a_browser(browser, ladder_site):
    _, site, body = ladder_site
    tab = Tab(browser)
    tab.open(site / "ladders" / "page" / "index.html")
    curves = tab.page.evaluate("() => document.querySelectorAll('#c-curves path').length")
    dots = tab.page.evaluate("() => document.querySelectorAll('#c-fit circle').length")
    bars = tab.page.evaluate("() => document.querySelectorAll('#c-fit line[stroke-width=\"2\"]').length")
    assert curves >= len(body["results"])
    assert dots >= len(body["results"]) + 2  # every rung and seed, and each revision's prediction
    assert bars >= 2 * 3  # an interval (a bar and two caps) per prediction
    tab.shot("ladder-page")
    tab.check_clean()
    tab.close()
