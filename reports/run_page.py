"""The page for one training run: `SITE/runs/<run>/index.html`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from reports.compare_data import EXPLAIN_FILE, SummaryBuilder, config_rows
from reports.expert_loads import LOADS_FILE, ExpertLoadsWriter, write_expert_loads
from reports.numbers import human_count
from reports.render import embed_json, render_page, static_text
from reports.run_data import (
    CHUNK,
    DATA_DIR,
    ChunkBuilder,
    OverviewBuilder,
    RunSeries,
    write_built_chunk,
    write_overview,
)
from reports.run_stream import Miscounted, RunDigest, kept_records
from reports.training import MAX_CELL_LINES, RunView
from trainer.records import METRICS_FILE, SCALARS, RunRecord

REFRESH_SECONDS = 5


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
    data = view.page_data()
    series.write(out.parent / DATA_DIR, rebuilt, data, keep=drawn_series(view))
    write_expert_loads(out.parent / DATA_DIR, view.records)
    return render_run_page(view, site, data, refresh_seconds)


def drawn_series(view: RunView) -> Callable[[str], bool]:
    """The overview's series: every one but the loss of the cells not drawn (all cells are in the chunks)."""
    drawn = {f"loss_per_cell/{cell}" for cell in view.drawn_cells()}
    return lambda key: not key.startswith("loss_per_cell/") or key in drawn


def write_streamed_run_page(view: RunView, site: Path) -> tuple[Path, SummaryBuilder]:
    """`report build`'s run page: the metrics stream read record by record (`reports.run_stream`), each chunk
    written as it fills and fed to the overview and the compare page's summary, so memory does not grow with
    the records. Returns the page and the summary's curves."""
    assert view.run_dir is not None
    directory = site / "runs" / view.name / DATA_DIR
    directory.mkdir(parents=True, exist_ok=True)
    seq = time.time_ns() // 1_000_000
    try:
        count, digest, overview, summary = _streamed_chunks(view.run_dir / METRICS_FILE, directory, seq, False)
    except Miscounted:  # a record that breaks the model: counted again, every line parsed
        count, digest, overview, summary = _streamed_chunks(view.run_dir / METRICS_FILE, directory, seq, True)
    view.streamed = digest
    data = view.page_data()
    chunks = math.ceil(count / CHUNK)
    write_overview(
        directory, chunks, {**data, **overview.result(drawn_series(view)), "seq": seq, "versions": [seq] * chunks}
    )
    return render_run_page(view, site, data, REFRESH_SECONDS), summary


def _streamed_chunks(
    path: Path, directory: Path, seq: int, exact: bool
) -> tuple[int, RunDigest, OverviewBuilder, SummaryBuilder]:
    """The kept records of the stream at `path`, each chunk written to `directory` as it fills: how many, and
    what the overview, the page and the compare summary keep of them."""
    count, records = kept_records(path, exact)
    digest, overview, summary = RunDigest(count), OverviewBuilder(count), SummaryBuilder(count)
    scalars = run_series().scalars
    start_time: float | None = None
    building = ChunkBuilder(0, scalars)
    with ExpertLoadsWriter(directory) as loads:
        for record in records:
            digest.add(record)
            building.add(record)
            loads.add(record)
            if len(building) == CHUNK or digest.count == count:
                chunk = building.chunk()
                if chunk.index == 0:
                    start_time = next((t for t in chunk.times if t is not None), None)
                write_built_chunk(directory, chunk, seq, start_time)
                overview.add(chunk, start_time)
                summary.add(chunk)
                building = ChunkBuilder(chunk.index + 1, scalars)
    digest.finish()
    return count, digest, overview, summary


def render_run_page(view: RunView, site: Path, data: dict[str, object], refresh_seconds: int) -> Path:
    out = site / "runs" / view.name / "index.html"
    store = view.run.store
    store_link = None
    if store is not None:
        target = site / store.name / store.version / "index.html"
        if target.exists():
            store_link = f"../../{store.name}/{store.version}/index.html?revision={view.run.revision or ''}"
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
        records=view.count,
        page_json=embed_json(files),
        loads_href=f"{DATA_DIR}/{LOADS_FILE}",
        cell_lines=MAX_CELL_LINES,
        facts=_facts(view.run),
        coverage=evals.get("coverage") if isinstance(evals := data.get("eval"), dict) else None,
        config_rows=list(config_rows(view.run).items()),
        page_js=static_text("chart_settings.js") + static_text("explain_panel.js") + static_text("run.js"),
    )
