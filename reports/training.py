"""What a training run's page shows: run.json plus the metrics stream, followed while it grows.

`metrics.jsonl` is written one flushed line per logged step while the run is live,
so its last line may be half written: a final line without a newline is left for
the next read. A malformed complete line is an error naming the file and line.
Long runs are cut into at most `MAX_POINTS` buckets of consecutive records so a page stays
small however long the run: each series draws its last value per bucket (the last step is
always kept) inside a band from the bucket's minimum to its maximum, so no extreme is
hidden (one loss of 12.0 among 6,000 steps still reaches 12.0 on the chart).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millrace.artifacts import read_artifact
from millrace.errors import ArtifactError
from millrace.names import artifact_name
from millrace.writer_lock import observed_status
from mixtures.manifest import BuiltManifest
from reports.numbers import finite
from reports.plan_progress import expected_sequences, run_manifest
from reports.run_observations import alerts_problem, observations

log = logging.getLogger(__name__)

RUN_KIND = "millrace.run"
RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
MAX_POINTS = 600
MAX_CELL_LINES = 10  # loss-per-cell lines drawn (the cells with most realised tokens); all are in the table
FINISHED = frozenset({"finished", "completed", "done", "failed", "crashed", "stopped", "aborted", "interrupted",
                      "stale"})
LOCK_FILE = "writer.lock"  # the run writer's lock; its mtime is the heartbeat (`millrace.writer_lock`)

SCALARS = ("loss", "lr", "tokens", "tokens_per_second", "mfu", "data_wait_fraction", "grad_norm", "param_norm",
           "param_norm_with_router_bias", "aux_loss", "z_loss", "step_seconds", "memory_rss_bytes",
           "cuda_allocated_bytes", "cuda_reserved_bytes")


def read_run(run_dir: Path) -> dict[str, Any]:
    """run.json (kind millrace.run), without its envelope fields; the names in it that pages become paths
    (the run's, its store's) are checked like names on the command line."""
    path = run_dir / RUN_FILE
    body = read_artifact(path, RUN_KIND)
    if body.get("run") is not None:
        artifact_name(body["run"], "run", path)
    store = body.get("store") or {}
    for field in ("name", "version"):
        if isinstance(store, dict) and store.get(field) is not None:
            artifact_name(store[field], f"store.{field}", path)
    return {k: v for k, v in body.items() if k not in ("kind", "schema_version")}


class MetricsTail:
    """Follows a metrics stream: each `poll()` parses only the bytes added since the last one.

    A record whose step is not after the previous one means the run resumed from an
    earlier checkpoint: the records it supersedes are dropped, so every series stays a
    function of the step. A file that shrank (rewritten) is read again from the start.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.records: list[dict[str, Any]] = []
        self._offset = 0
        self._lines = 0

    def poll(self) -> int:
        """Read complete new lines; returns how many records arrived."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        if size < self._offset:
            self.records, self._offset, self._lines = [], 0, 0
        if size == self._offset:
            return 0
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read(size - self._offset)
        complete, newline, _partial = chunk.rpartition(b"\n")
        if not newline:
            return 0  # half a line so far: wait for the rest
        self._offset += len(complete) + 1
        arrived = 0
        for line in complete.split(b"\n"):
            self._lines += 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ArtifactError(f"{self.path}:{self._lines}: not a JSON metrics record ({exc})") from None
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ArtifactError(f"{self.path}:{self._lines}: a metrics record needs an integer 'step'")
            if problem := alerts_problem(record):
                log.warning("%s:%d: skipped a malformed alert record (%s)", self.path, self._lines, problem)
                record.pop("alerts")
            while self.records and self.records[-1]["step"] >= record["step"]:
                self.records.pop()
            self.records.append(record)
            arrived += 1
        return arrived


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a metrics stream (an absent file is an empty stream)."""
    tail = MetricsTail(path)
    tail.poll()
    return tail.records


class Buckets:
    """Consecutive records cut into at most `MAX_POINTS` buckets; a series gets its last value per bucket
    and, when thinned, the bucket's min/max envelope."""

    def __init__(self, records: list[dict[str, Any]], max_points: int = MAX_POINTS):
        self.records = records
        stride = max(1, math.ceil(len(records) / max_points))
        self.starts = list(range(0, len(records), stride))
        self.stride = stride
        self.points = [records[min(start + stride, len(records)) - 1] for start in self.starts]
        self.bands: dict[str, dict[str, list[float | None]]] = {}

    @property
    def thinned(self) -> bool:
        return self.stride > 1

    def series(self, key: str, value: Callable[[dict[str, Any]], float | None]) -> list[float | None]:
        """The series `value(record)` per bucket; its envelope is recorded under `key` in `bands`."""
        line = [finite(value(record)) for record in self.points]
        if self.thinned:
            lows, highs = [], []
            for start in self.starts:
                values = [v for r in self.records[start : start + self.stride] if (v := finite(value(r))) is not None]
                lows.append(min(values) if values else None)
                highs.append(max(values) if values else None)
            self.bands[key] = {"lo": lows, "hi": highs}
        return line


def _layer_entry(record: dict[str, Any], key: str, layer: int) -> dict[str, Any]:
    return next((e for e in record.get(key) or [] if isinstance(e, dict) and e.get("layer") == layer), {})


def _per_layer(buckets: Buckets, key: str, field: str) -> dict[str, list[float | None]]:
    records = buckets.records
    layers = sorted({int(e["layer"]) for r in records for e in r.get(key) or [] if isinstance(e, dict) and "layer" in e})
    return {f"layer {layer}": buckets.series(f"{key}.{field}/layer {layer}", partial(_layer_value, key, layer, field))
            for layer in layers}


def _layer_value(key: str, layer: int, field: str, record: dict[str, Any]) -> Any:
    return _layer_entry(record, key, layer).get(field)


def _keyed(buckets: Buckets, key: str, names: list[str]) -> dict[str, list[float | None]]:
    return {name: buckets.series(f"{key}/{name}", partial(_keyed_value, key, name)) for name in names}


def _keyed_value(key: str, name: str, record: dict[str, Any]) -> Any:
    return (record.get(key) or {}).get(name)


def _value(key: str, record: dict[str, Any]) -> Any:
    return record.get(key)


@dataclass
class RunView:
    name: str
    run: dict[str, Any]
    records: list[dict[str, Any]]
    manifest: BuiltManifest | None = None
    run_dir: Path | None = None  # where eval.jsonl and samples.jsonl are read from

    @property
    def status(self) -> str:
        """run.json's status; `stale` for a `running` whose writer is gone (killed without a word)."""
        recorded = self.run.get("status")
        if self.run_dir is not None:
            recorded = observed_status(recorded, self.run_dir / LOCK_FILE)
        return str(recorded or "unknown")

    @property
    def live(self) -> bool:
        return self.status.lower() not in FINISHED

    @property
    def last(self) -> dict[str, Any]:
        return self.records[-1] if self.records else {}

    def page_data(self) -> dict[str, Any]:
        buckets = Buckets(self.records)
        points = buckets.points
        last = self.last
        realised = {k: int(v) for k, v in (last.get("realised_tokens_per_cell") or {}).items()}
        planned = {k: int(v) for k, v in (self.run.get("planned_tokens_per_cell") or {}).items()}
        cells = sorted(set(realised) | set(planned) | {c for r in points for c in r.get("loss_per_cell") or {}})
        sources = sorted({s for r in points for s in r.get("loss_per_source") or {}})
        drawn = sorted(cells, key=lambda c: (-realised.get(c, 0), -planned.get(c, 0), c))[:MAX_CELL_LINES]
        latest_loss_cell = {}
        for record in self.records:
            for cell, value in (record.get("loss_per_cell") or {}).items():
                if finite(value) is not None:
                    latest_loss_cell[cell] = value
        last_load = [
            {"layer": e.get("layer"), "load": [finite(x) for x in e.get("load") or []],
             "max_violation": finite(e.get("max_violation")), "entropy": finite(e.get("entropy")),
             "dead_experts": e.get("dead_experts")}
            for e in last.get("expert_load") or [] if isinstance(e, dict)
        ]
        last_step = last.get("step")
        steps_done = last_step if isinstance(last_step, int) else 0
        expected = expected_sequences(self.manifest, steps_done) if self.manifest is not None else {}
        seq_len = self.manifest.seq_len if self.manifest is not None else None
        return {
            "run": self.name,
            "status": self.status,
            "live": self.live,
            "mixture": self.run.get("mixture"),
            "revision": self.run.get("revision"),
            "store": self.run.get("store") or {},
            "total_steps": self.run.get("total_steps"),
            "records": len(self.records),
            "steps": [r["step"] for r in points],
            "phase": [r.get("phase") for r in points],
            "switches": [{"step": r["start_step"], "revision": r["revision"]} for r in (self.run.get("lineage") or [])[1:]],
            "scalars": {k: buckets.series(k, partial(_value, k)) for k in SCALARS},
            "loss_per_cell": _keyed(buckets, "loss_per_cell", drawn),
            "loss_per_source": _keyed(buckets, "loss_per_source", sources),
            "router_bias_norm": _per_layer(buckets, "router_bias", "norm"),
            "router_bias_max_abs": _per_layer(buckets, "router_bias", "max_abs"),
            "max_violation": _per_layer(buckets, "expert_load", "max_violation"),
            "router_entropy": _per_layer(buckets, "expert_load", "router_entropy"),
            "last_expert_load": last_load,
            "seq_len": seq_len,
            "cells": [
                {"name": c, "realised": realised.get(c, 0), "planned": planned.get(c, 0),
                 "expected": expected[c] * seq_len if seq_len is not None and c in expected else None,
                 "off_by": realised.get(c, 0) / seq_len - expected[c] if seq_len is not None and c in expected else None,
                 "loss": finite(latest_loss_cell.get(c))}
                for c in cells
            ],
            "bands": buckets.bands,
            **(observations(self.run_dir, self.records) if self.run_dir is not None else {}),
            "last": {k: finite(last.get(k)) for k in SCALARS} | {"step": last.get("step"), "phase": last.get("phase")},
        }


def last_record(path: Path, window: int = 1 << 16) -> dict[str, Any] | None:
    """The stream's last complete record, reading only its end (for the site index)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            while True:
                start = max(0, size - window)
                handle.seek(start)
                chunk = handle.read(size - start)
                complete = chunk[: chunk.rfind(b"\n") + 1]
                lines = [line for line in complete.split(b"\n") if line.strip()]
                if len(lines) > 1 or start == 0:
                    break
                window *= 4
    except FileNotFoundError:
        return None
    if not lines:
        return None
    try:
        record = json.loads(lines[-1])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: last line is not a JSON metrics record ({exc})") from None
    return record if isinstance(record, dict) else None


def load_run_summary(run_dir: Path) -> RunView:
    """run.json and only the last metrics record: enough for a line in the index."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    last = last_record(run_dir / METRICS_FILE)
    return RunView(name=str(run.get("run") or run_dir.name), run=run, records=[last] if last else [],
                   run_dir=run_dir)


def load_run(run_dir: Path, tail: MetricsTail | None = None) -> RunView:
    """run.json and the stream's records (from `tail`, already followed, when given)."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    if tail is None:
        records = read_metrics(run_dir / METRICS_FILE)
    else:
        tail.poll()
        records = tail.records
    return RunView(name=str(run.get("run") or run_dir.name), run=run, records=records,
                   manifest=run_manifest(run_dir, run), run_dir=run_dir)
