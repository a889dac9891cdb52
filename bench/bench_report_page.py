"""The training run page at 20,000 and 100,000 steps: page weight and open time in headless Chromium.

Baseline, measured in the same run on the same metrics stream: the run page as `main` builds it
(its `reports/` package exported by `git archive` into a temporary directory and run in a child
process). A page's weight is what opening it loads: index.html, data/overview.js and
data/live.js where it has them (the full-resolution chunks load only on zoom or export). Open time: from navigation
until the page says it is drawn (`body[data-ready]`; on a page without that mark, such as the SVG page,
whose script draws synchronously, the load event), best of three. The page builds only the charts in or
near the viewport at open (a 1280 x 900 window here), the others when scrolled to. The issue's budgets
(3 MB, 2 s at 100,000 steps) are reported as their own baselines.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.result import ROOT, Result
from millrace.home import Home

SIZES = (20_000, 100_000)
BUDGET_BYTES = 3 * 1024 * 1024
BUDGET_SECONDS = 2.0
OLD_BUILD = "from pathlib import Path; from reports import build_run_page; build_run_page({home!r}, 'long', {site!r})"


def _old_reports(tmp: Path) -> Path:
    """main's reports/ package, exported beside nothing else: put first on PYTHONPATH, it shadows ours."""
    out = tmp / "main-reports"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "main", "reports"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def _weight(page: Path) -> int:
    """Bytes a page loads when it opens: the HTML, and its overview and live data files where it has them."""
    return sum(
        f.stat().st_size
        for f in (page, page.parent / "data" / "overview.js", page.parent / "data" / "live.js")
        if f.exists()
    )


def _open_seconds(browser, page: Path, ready: str | None) -> float:
    best = float("inf")
    for _ in range(3):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        started = time.perf_counter()
        tab.goto(page.as_uri(), wait_until="load", timeout=120_000)
        if ready:
            tab.wait_for_selector(ready, timeout=120_000)
        best = min(best, time.perf_counter() - started)
        context.close()
    return best


def main() -> list[Result]:
    from playwright.sync_api import sync_playwright

    results = []
    with tempfile.TemporaryDirectory(prefix="bench-report-page-") as tmp_name, sync_playwright() as p:
        tmp = Path(tmp_name)
        old_reports = _old_reports(tmp)
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        for steps in SIZES:
            page, old_page = _pages(tmp, old_reports, steps)
            weight, old_weight = _weight(page), _weight(old_page)
            opened = _open_seconds(browser, page, "body[data-ready='1']")
            old_ready = "body[data-ready='1']" if "dataset.ready" in old_page.read_text() else None
            old_opened = _open_seconds(browser, old_page, old_ready)
            results += _against_main(steps, weight, old_weight, opened, old_opened)
            if steps == max(SIZES):
                results += _against_budget(steps, weight, opened)
        browser.close()
    return results


def _pages(tmp: Path, old_reports: Path, steps: int) -> tuple[Path, Path]:
    """A run of `steps` metrics lines (a loss spike at 70%) on the small store; its run page built by ours and by
    main's reports/ (in a child process); the two index.html."""
    from reports import build_run_page
    from testkit.factory import make_small_revisions, make_small_store, write_contract_metrics

    home = Home.resolve(tmp / f"home-{steps}")
    make_small_store(home)
    manifest = make_small_revisions(home)["natural"]
    write_contract_metrics(home, "long", manifest, steps=steps, spikes={steps * 7 // 10: 12.0})
    new_site, old_site = tmp / f"site-{steps}", tmp / f"old-site-{steps}"
    page = build_run_page(home, "long", new_site)
    env = {**os.environ, "PYTHONPATH": f"{old_reports}{os.pathsep}{ROOT}"}
    subprocess.run(
        [sys.executable, "-c", OLD_BUILD.format(home=str(home.root), site=str(old_site))],
        env=env,
        cwd=tmp,
        check=True,
    )
    return page, old_site / "runs" / "long" / "index.html"


def _against_main(steps: int, weight: int, old_weight: int, opened: float, old_opened: float) -> list[Result]:
    """Weight and open time against main's run page on the same stream."""
    return [
        Result(
            f"run page weight, {steps:,} steps",
            weight / 1e6,
            old_weight / 1e6,
            "main's run page",
            "MB",
            higher_is_better=False,
        ),
        Result(
            f"run page open time, {steps:,} steps",
            opened,
            old_opened,
            "main's run page",
            "s",
            higher_is_better=False,
        ),
    ]


def _against_budget(steps: int, weight: int, opened: float) -> list[Result]:
    """Weight and open time against the budgets (3 MB, 2 s) at the largest size."""
    return [
        Result(
            f"run page weight vs budget, {steps:,} steps",
            weight / 1e6,
            BUDGET_BYTES / 1e6,
            "the issue's budget",
            "MB",
            higher_is_better=False,
            target=1.0,
        ),
        Result(
            f"run page open time vs budget, {steps:,} steps",
            opened,
            BUDGET_SECONDS,
            "the issue's budget",
            "s",
            higher_is_better=False,
            target=1.0,
        ),
    ]
