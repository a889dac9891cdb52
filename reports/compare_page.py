"""The compare page, `SITE/compare.html?runs=A,B,...`: any runs of the site on one page.

The page is static and the same for every choice of runs: it loads each named run's `runs/<run>/summary.js`
(written with the run's page) and draws them on shared axes: the same x range on every panel (step, tokens
or time), the config and mixture-revision differences, and per-cell and per-eval-set curves side by side.
The runs index ticks runs into its URL; each run page links to it with its own run.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from reports.render import embed_json, render_page, static_text

COMPARE_FILE = "compare.html"


def compare_query(names: list[str]) -> str:
    return "?runs=" + ",".join(quote(name, safe="") for name in names)


def write_compare_page(site: Path, runs: list[str]) -> Path:
    """`runs`: the runs with data in the site, offered for adding."""
    return render_page(
        "compare.html.j2",
        site / COMPARE_FILE,
        root="",
        page_json=embed_json({"runs": runs}),
        page_js=static_text("chart_settings.js") + static_text("compare.js"),
    )


def write_explain_page(site: Path, run: str) -> Path:
    """`SITE/runs/<run>/explain.html`: the run's loss and norm curves; a step picked on them is explained."""
    return render_page(
        "explain.html.j2",
        site / "runs" / run / "explain.html",
        root="../../",
        run=run,
        page_js=static_text("explain_panel.js") + static_text("explain.js"),
    )
