"""The page for one training run: `SITE/runs/<run>/index.html`."""

from __future__ import annotations

from pathlib import Path

from reports.render import embed_json, render_page, static_text
from reports.training import MAX_CELL_LINES, RunView

REFRESH_SECONDS = 5


def write_run_page(view: RunView, site: Path, refresh_seconds: int = REFRESH_SECONDS) -> Path:
    out = site / "runs" / view.name / "index.html"
    store = view.run.get("store") or {}
    store_link = None
    if store.get("name") and store.get("version"):
        target = site / store["name"] / store["version"] / "index.html"
        if target.exists():
            store_link = f"../../{store['name']}/{store['version']}/index.html?revision={view.run.get('revision', '')}"
    last = {"step": None, "phase": None, "tokens": None, "loss": None, "tokens_per_second": None, "mfu": None,
            "data_wait_fraction": None} | view.page_data()["last"]
    return render_page(
        "run.html.j2",
        out,
        root="../../",
        run=view,
        live=view.live,
        refresh_seconds=refresh_seconds,
        store_link=store_link,
        last=last,
        records=view.records,
        cell_lines=MAX_CELL_LINES,
        page_json=embed_json(view.page_data()),
        page_js=static_text("run.js"),
    )
