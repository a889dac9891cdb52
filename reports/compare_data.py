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
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from millrace.artifacts import atomic_write_text
from millrace.errors import ArtifactError
from millrace.home import Home
from reports.render import embed_json
from reports.run_data import CHUNK, Chunk
from reports.run_observations import METRICS, EvalGroups, read_eval
from reports.training import MAX_POINTS, RunView
from trainer.records import Explanations, MetricsRecord, RunRecord, read_explanations

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.js"
EXPLAIN_FILE = "explain-data.js"
CURVES = ("loss", "grad_norm", "param_norm", "param_norm_with_router_bias", "lr")


def config_rows(run: RunRecord, without: tuple[str, ...] = ()) -> dict[str, str]:
    """The run's recorded settings as `section.key: value` text (`RecordedTrainConfig.settings`), the rows the
    run page lists and the form a diff between runs compares."""
    settings = run.config.settings() if run.config is not None else {}
    return {
        key: value if isinstance(value, str) else json.dumps(value)
        for key, value in settings.items()
        if key not in without
    }


def mixture_weights(view: RunView) -> list[dict[str, object]]:
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


def _eval_series(view: RunView) -> dict[str, object]:
    if view.run_dir is None:
        nothing: EvalGroups = {"average": {}, "set": {}, "cell": {}}
        return {"steps": [], "tokens": [], "loss": nothing, "bpb": nothing}
    evals = read_eval(view.run_dir)
    return {
        "steps": evals["steps"],
        "tokens": evals["tokens"],
        **{metric: {group: evals[metric][group] for group in ("average", "set", "cell")} for metric in METRICS},
    }


class SummaryBuilder:
    """The compare page's thinned curves, built one chunk at a time knowing only the record count: at most
    `MAX_POINTS` buckets of consecutive records, each drawn at its last record, inside a band from the bucket's
    minimum to its maximum when thinned (`reports.training.Buckets`, without holding the records)."""

    def __init__(self, records: int, max_points: int = MAX_POINTS):
        self.n = records
        self.stride = max(1, math.ceil(records / max_points))
        self.buckets = math.ceil(records / self.stride) if records else 0
        self.steps: list[int] = []
        self.tokens: list[float | None] = []
        self.times: list[float | None] = []
        self.start: float | None = None
        self.values: dict[str, np.ndarray] = {}  # key -> [buckets, 3]: value at the bucket's end, low, high

    def add(self, chunk: Chunk) -> None:
        first = chunk.index * CHUNK
        index = np.arange(first, first + len(chunk.steps))
        bucket = index // self.stride
        ends = np.flatnonzero(((index + 1) % self.stride == 0) | (index == self.n - 1))
        if self.start is None:
            self.start = next((t for t in chunk.times if t is not None), None)
        for i in ends.tolist():
            self.steps.append(chunk.steps[i])
            self.tokens.append(chunk.tokens[i])
            self.times.append(chunk.times[i])
        for key, values in chunk.arrays.items():
            if key not in CURVES and not key.startswith("loss_per_cell/"):
                continue
            table = self.values.setdefault(key, np.full((self.buckets, 3), np.nan))
            table[bucket[ends], 0] = values[ends]
            np.fmin.at(table[:, 1], bucket, values)
            np.fmax.at(table[:, 2], bucket, values)

    def series(self, key: str) -> list[float | None]:
        return _listed(self.values[key][:, 0]) if key in self.values else [None] * self.buckets

    def bands(self) -> dict[str, dict[str, list[float | None]]]:
        if self.stride == 1:
            return {}
        return {key: {"lo": _listed(table[:, 1]), "hi": _listed(table[:, 2])} for key, table in self.values.items()}

    @classmethod
    def of(cls, records: list[MetricsRecord]) -> SummaryBuilder:
        builder = cls(len(records))
        for index in range(0, len(records), CHUNK):
            builder.add(Chunk.of(index // CHUNK, records[index : index + CHUNK], CURVES))
        return builder


def _listed(values: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values.tolist()]


def run_summary(
    view: RunView, ladder: Mapping[str, object] | None = None, built: SummaryBuilder | None = None
) -> dict[str, object]:
    """What the compare page draws for one run (`built`: the curves already built while streaming)."""
    curves = built if built is not None else SummaryBuilder.of(view.records)
    cells = sorted(key.split("/", 1)[1] for key in curves.values if key.startswith("loss_per_cell/"))
    start = curves.start
    bands = curves.bands()
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
        "config": config_rows(view.run, without=("path",)),
        "phases": mixture_weights(view),
        "steps": curves.steps,
        "tokens": curves.tokens,
        "seconds": [t - start if start is not None and t is not None else None for t in curves.times],
        "curves": {key: curves.series(key) for key in CURVES},
        "loss_per_cell": {cell: curves.series(f"loss_per_cell/{cell}") for cell in cells},
        "bands": {key: band for key, band in bands.items() if key in CURVES or key.startswith("loss_per_cell/")},
        "eval": _eval_series(view),
    }


def _script(variable: str, name: str, payload: object) -> str:
    return f"(window.{variable} = window.{variable} || {{}})[{json.dumps(name)}] = {embed_json(payload)};\n"


def write_run_summary(
    view: RunView, site: Path, ladder: Mapping[str, object] | None = None, built: SummaryBuilder | None = None
) -> Path:
    out = site / "runs" / view.name / SUMMARY_FILE
    atomic_write_text(out, _script("MILLRACE_RUNS", view.name, run_summary(view, ladder, built)))
    return out


def write_explain_data(view: RunView, site: Path, home: Home) -> Path:
    """The run's notable steps as `train explain` found them when its training call ended (`explain.json`)."""
    try:
        found = read_explanations(home.run(view.name))
    except ArtifactError as exc:
        log.warning("run %s: no step explanations (%s)", view.name, exc)
        found = Explanations(explained={})
    payload = {"run": view.name, "steps": found.steps, "explained": found.explained}
    out = site / "runs" / view.name / EXPLAIN_FILE
    atomic_write_text(out, _script("MILLRACE_EXPLAIN", view.name, payload))
    return out
