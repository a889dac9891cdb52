"""Per-run summary files that the runs index, the compare page and the explain view load from file://.

`SITE/runs/<run>/summary.js` holds what comparing runs needs (config, mixture weights per phase, thinned curves
by step, tokens and time, per-cell training loss, held-out loss per set and per cell); `explain-data.js` holds
`train explain` for the run's notable steps (alert starts, loss and norm jumps). Each is a script that adds
itself to a global (`MILLRACE_RUNS[run]`, `MILLRACE_EXPLAIN[run]`): a page opened from file:// may load scripts
from beside it but not fetch JSON, so any set of runs can be put on one page without rebuilding it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from millrace.artifacts import atomic_write_text
from millrace.errors import ArtifactError
from millrace.home import Home
from reports.render import embed_json
from reports.run_observations import read_eval
from reports.training import Buckets, RunView
from trainer.records import MetricsRecord, read_explanations

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.js"
EXPLAIN_FILE = "explain-data.js"
CURVES = ("loss", "grad_norm", "param_norm", "param_norm_with_router_bias", "lr")


def flatten_config(value: Any, prefix: str = "") -> dict[str, str]:
    """A nested config as `section.key: value`, the form a diff between runs compares."""
    if isinstance(value, dict):
        rows: dict[str, str] = {}
        for key, inner in value.items():
            rows.update(flatten_config(inner, f"{prefix}{key}."))
        return rows
    return {prefix.rstrip("."): value if isinstance(value, str) else json.dumps(value)}


def mixture_weights(view: RunView) -> list[dict[str, Any]]:
    """Per phase of the run's built revision: its token budget and each cell's share of its samples."""
    if view.manifest is None:
        return []
    manifest = view.manifest
    return [
        {
            "name": phase.name,
            "tokens": phase.sequences * manifest.seq_len,
            "weights": {cell: count / phase.sequences for cell, count in sorted(phase.counts.items()) if count},
        }
        for phase in manifest.phases
    ]


def _eval_series(view: RunView) -> dict[str, Any]:
    evals = read_eval(view.run_dir) if view.run_dir is not None else {"steps": [], "tokens": [], "seconds": []}
    out: dict[str, Any] = {"steps": evals["steps"], "tokens": evals["tokens"]}
    for metric in ("loss", "bpb"):
        groups = evals.get(metric) or {}
        out[metric] = {
            "average": groups.get("average") or {},
            "set": groups.get("set") or {},
            "cell": groups.get("cell") or {},
        }
    return out


def _field(key: str) -> Callable[[MetricsRecord], float | None]:
    return lambda record: getattr(record, key)


def _cell_loss(cell: str) -> Callable[[MetricsRecord], float | None]:
    return lambda record: record.loss_per_cell.get(cell)


def run_summary(view: RunView, ladder: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the compare page draws for one run."""
    buckets = Buckets(view.records)
    points = buckets.points
    start = next((r.time for r in view.records if r.time is not None), None)
    cells = sorted({c for r in view.records for c in r.loss_per_cell})
    return {
        "name": view.name,
        "status": view.status,
        "live": view.live,
        "mixture": view.run.mixture,
        "revision": view.run.revision,
        "manifest_hash": view.run.manifest_hash,
        "store": view.run.store.dump() if view.run.store is not None else {},
        "total_steps": view.run.total_steps,
        "ladder": ladder,
        "config": flatten_config({k: v for k, v in view.run.config.items() if k != "path"}),
        "phases": mixture_weights(view),
        "steps": [r.step for r in points],
        "tokens": [r.tokens for r in points],
        "seconds": [r.time - start if start is not None and r.time is not None else None for r in points],
        "curves": {key: buckets.series(key, _field(key)) for key in CURVES},
        "loss_per_cell": {cell: buckets.series(f"loss_per_cell/{cell}", _cell_loss(cell)) for cell in cells},
        "bands": buckets.bands,
        "eval": _eval_series(view),
    }


def _script(variable: str, name: str, payload: Any) -> str:
    return f"(window.{variable} = window.{variable} || {{}})[{json.dumps(name)}] = {embed_json(payload)};\n"


def write_run_summary(view: RunView, site: Path, ladder: dict[str, Any] | None = None) -> Path:
    out = site / "runs" / view.name / SUMMARY_FILE
    atomic_write_text(out, _script("MILLRACE_RUNS", view.name, run_summary(view, ladder)))
    return out


def write_explain_data(view: RunView, site: Path, home: Home) -> Path:
    """The run's notable steps as `train explain` found them when its training call ended (`explain.json`)."""
    try:
        found = read_explanations(home.run(view.name))
    except ArtifactError as exc:
        log.warning("run %s: no step explanations (%s)", view.name, exc)
        found = {"steps": [], "explained": {}}
    payload = {"run": view.name, "steps": found.get("steps", []), "explained": found["explained"]}
    out = site / "runs" / view.name / EXPLAIN_FILE
    atomic_write_text(out, _script("MILLRACE_EXPLAIN", view.name, payload))
    return out
