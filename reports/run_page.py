"""The page for one training run: `SITE/runs/<run>/index.html`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.compare_data import EXPLAIN_FILE
from reports.numbers import human_count
from reports.render import embed_json, render_page, static_text
from reports.run_data import DATA_DIR, RunSeries
from reports.training import MAX_CELL_LINES, SCALARS, RunView
from trainer.records import RunRecord

REFRESH_SECONDS = 5


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A nested config as `section.key = value` rows, for a table a person can scan."""
    if isinstance(value, dict):
        rows: list[tuple[str, str]] = []
        for key, inner in value.items():
            rows.extend(_flatten(inner, f"{prefix}{key}."))
        return rows
    return [(prefix.rstrip("."), json.dumps(value) if not isinstance(value, str) else value)]


def _facts(run: RunRecord) -> list[tuple[str, str]]:
    """What run.json says about the model and the machine, where the trainer recorded it."""
    facts = []
    if run.params.get("total"):
        facts.append(
            ("parameters", f"{human_count(run.params['total'])} total, {human_count(run.params.get('active'))} active")
        )
    if run.flops_per_token:
        facts.append(("FLOPs per token", human_count(run.flops_per_token)))
    if run.peak_flops_per_device:
        source = run.peak_flops_source or "source not recorded"
        facts.append(("peak FLOP/s per device", f"{human_count(run.peak_flops_per_device)} ({source})"))
    if run.world_size:
        facts.append(("ranks", str(run.world_size)))
    if run.total_steps:
        facts.append(("steps planned by the revision", human_count(run.total_steps)))
    return facts


def run_series() -> RunSeries:
    """The chunked series of a run page (tokens is the x axis, not a curve)."""
    return RunSeries(k for k in SCALARS if k != "tokens")


def write_run_page(
    view: RunView,
    site: Path,
    refresh_seconds: int = REFRESH_SECONDS,
    series: RunSeries | None = None,
    changed_from: int = 0,
) -> Path:
    """The page and its data files; `series` (kept by `report watch`) rewrites only the chunks from record
    `changed_from` on."""
    out = site / "runs" / view.name / "index.html"
    series = series if series is not None else run_series()
    rebuilt = series.update(view.records, changed_from)
    store = view.run.store
    store_link = None
    if store is not None:
        target = site / store.name / store.version / "index.html"
        if target.exists():
            store_link = f"../../{store.name}/{store.version}/index.html?revision={view.run.revision or ''}"
    data = view.page_data()
    drawn = {f"loss_per_cell/{cell}" for cell in data["drawn_cells"]}
    series.write(
        out.parent / DATA_DIR, rebuilt, data, keep=lambda key: not key.startswith("loss_per_cell/") or key in drawn
    )
    files = {
        "run": view.name,
        "live": view.live,
        "refresh": refresh_seconds,
        "data": DATA_DIR,
        "explain": EXPLAIN_FILE,
    }
    last = data["last"]  # every charted scalar, step and phase (None where not recorded)
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
        page_json=embed_json(files),
        cell_lines=MAX_CELL_LINES,
        facts=_facts(view.run),
        config_rows=_flatten(view.run.config),
        page_js=static_text("explain_panel.js") + static_text("run.js"),
    )
