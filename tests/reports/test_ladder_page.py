"""The ladder page: rung table, held-out curves, the fit with predictions and intervals, residuals, the
comparison; the composition page of the revision links to it; reports reads ladder.json only."""

from __future__ import annotations

import numpy as np
import pytest

from millrace.home import Home
from reports import build_site
from testkit import factory
from testkit.browser import Tab
from trainer.ladder.compare import compare_points
from trainer.ladder.results import write_ladder
from trainer.ladder.scaling_law import Law, Point, fit_law, fit_report
from trainer.records import LadderRecord

FLOPS = [1e12, 4e12, 1.6e13, 6.4e13]
LAW = Law(2.0, 300.0, 0.2)


def ladder_body() -> dict:
    rng = np.random.default_rng(0)
    rungs = [
        {
            "name": f"d{8 * 2**i}",
            "d_model": 8 * 2**i,
            "layers": 1 + i,
            "params": {"total": 10 ** (4 + i), "active": 10 ** (3 + i)},
            "tokens": 4 * 10 ** (3 + i),
            "steps": 10 * (i + 1),
            "batch": 4,
            "lr": 3e-3,
            "flops": f,
            "seconds_here": 2.0 * (i + 1),
        }
        for i, f in enumerate(FLOPS)
    ]
    target = dict(rungs[-1], name="next-d128", d_model=128, flops=2.56e14)
    results, points = [], {"uniform-sampling": [], "natural": []}
    for revision, shift in (("uniform-sampling", 0.0), ("natural", 0.003)):
        for rung in rungs:
            for seed in range(2):
                loss = LAW.loss(rung["flops"]) + shift + rng.normal(0, 0.002)
                points[revision].append(Point(rung["flops"], loss, rung["name"], seed))
                curve = [{"step": s, "tokens": s * 128, "loss": loss + 2.0 / s, "bpb": None} for s in (1, 2, 4, 8)]
                results.append(
                    {
                        "rung": rung["name"],
                        "revision": revision,
                        "seed": seed,
                        "run": f"ladder-page-{revision}-{rung['name']}-s{seed}",
                        "status": "completed",
                        "flops": rung["flops"],
                        "tokens": rung["tokens"],
                        "steps": rung["steps"],
                        "batch": 4,
                        "seconds": 1.0,
                        "final": {"schema": "millrace.eval/1", "step": 8, "loss": {"macro": loss}},
                        "curve": curve,
                    }
                )
    fits = {rev: fit_report(pts, 2.0, [("next-d128", 2.56e14)], metric="loss.macro") for rev, pts in points.items()}
    comparison = compare_points(
        points["uniform-sampling"],
        points["natural"],
        fit_law(points["uniform-sampling"], 2.0),
        fit_law(points["natural"], 2.0),
        ("uniform-sampling", "natural"),
    )
    return {
        "ladder": "page",
        "file": "page.toml",
        "metric": "loss.macro",
        "asymptote": 2.0,
        "plan": {
            "ladder": "page",
            "file": "page.toml",
            "mixture": "default",
            "revision": "uniform-sampling",
            "seq_len": 32,
            "rungs": rungs,
            "target": target,
        },
        "results": results,
        "fits": fits,
        "comparison": comparison,
    }


@pytest.fixture(scope="module")
def ladder_site(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("ladder-page") / "home")
    factory.make_small_store(home)
    factory.make_small_revisions(home)
    body = ladder_body()
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
