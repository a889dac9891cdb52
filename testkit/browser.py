"""Pages in a real headless Chromium for the report tests: the browser, and a tab that records errors.

Screenshots go to tests/reports/artifacts/ (ignored by git).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

import reports

ARTIFACTS = Path(__file__).parents[1] / "tests" / "reports" / "artifacts"  # ignored by git
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; in CI the browser tests must run")
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[object]:
    """Debian's chromium driven by Playwright (never `playwright install`); skips, or fails under CI, without it."""
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        unavailable("Debian's chromium is not installed (`make test` installs it when run as root on Debian)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (it is in the dev extra)")
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


class Tab:
    """A page that records console errors, page errors and every request it makes."""

    def __init__(self, browser: Browser, width: int = 1280, height: int = 900, touch: bool = False):
        self.context = browser.new_context(
            viewport={"width": width, "height": height}, has_touch=touch, is_mobile=touch
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, path: Path, query: str = "") -> None:
        self.page.goto(path.as_uri() + query)
        self.page.wait_for_load_state("load")

    def open_run(self, path: Path, query: str = "") -> None:
        """A run page, once its data files have loaded and its charts are drawn."""
        self.open(path, query)
        self.page.wait_for_selector("body[data-ready='1']", timeout=30_000)

    def open_with_charts(self, site: Path) -> None:
        """The site's index with the pages' chart and format script (charts.js) loaded, to call it directly."""
        self.open(site / "index.html")
        self.page.add_script_tag(content=(Path(reports.__file__).parent / "templates" / "charts.js").read_text())

    def chart(self, chart_id: str) -> None:
        """Scroll a run page's chart into view, as a person does, and wait until it is drawn: the page builds
        only the charts in or near the viewport (the others when scrolled to)."""
        self.page.evaluate("(id) => document.getElementById(id).scrollIntoView({block: 'center'})", chart_id)
        self.page.wait_for_function(
            "(id) => { const c = document.getElementById(id);"
            " return !c.dataset.pending && (c.uplot || c.querySelector('.empty-chart')); }",
            arg=chart_id,
            timeout=30_000,
        )

    def scales(self, chart_id: str) -> list[int]:
        """A chart's x and y scale kinds (uPlot's distr: 1 linear, 3 log) and its number of series, scrolled to
        and drawn first: what a log-axis or smoothing setting changes."""
        self.chart(chart_id)
        kinds: list[int] = self.page.evaluate(
            "(id) => { const u = document.getElementById(id).uplot;"
            " return [u.scales.x.distr, u.scales.y.distr, u.series.length - 1]; }",
            chart_id,
        )
        return kinds

    def every_chart(self) -> None:
        """Scroll to each chart of a run page that waits to be drawn (one call), then back to the top."""
        self.page.evaluate("""async () => {
            const wait = () => new Promise((done) => setTimeout(done, 10));
            for (const c of document.querySelectorAll('.run-chart')) {
                if (!c.dataset.pending) continue;
                c.scrollIntoView({block: 'center'});
                for (let i = 0; i < 3000 && c.dataset.pending; i++) await wait();
            }
            window.scrollTo(0, 0);
        }""")
        self.page.wait_for_function("() => document.body.dataset.pending === '0'", timeout=30_000)

    def shot(self, name: str) -> Path:
        """A full-page screenshot (a run page's charts all drawn first)."""
        if self.page.evaluate("() => document.body.dataset.pending !== undefined"):
            self.every_chart()
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
        table: dict[str, dict[str, str]] = self.page.evaluate("""() => {
            const t = document.querySelector('#weights table');
            const head = [...t.querySelectorAll('thead th')].map((th) => th.textContent);
            const out = {};
            for (const tr of t.querySelectorAll('tbody tr')) {
                const cells = [...tr.querySelectorAll('td')].map((td) => td.textContent);
                out[cells[0]] = Object.fromEntries(head.map((h, i) => [h, cells[i]]));
            }
            return out;
        }""")
        return table

    def close(self) -> None:
        self.context.close()
