"""What a training run's page shows: run.json plus the metrics stream, followed while it grows.

`metrics.jsonl` is written one flushed line per logged step while the run is live,
so its last line may be half written: a final line without a newline is left for
the next read. A malformed complete line is an error naming the file and line.
Long runs are cut into at most `MAX_POINTS` buckets of consecutive records for the compare page
(`reports.compare_data.SummaryBuilder`) so its files stay small however long the run: each series draws its
last value per bucket (the last step is always kept) inside a band from the bucket's minimum to its maximum,
so no extreme is hidden (one loss of 12.0 among 6,000 steps still reaches 12.0 on the chart).
`report build` reads the stream record by record (`reports.run_stream`); `report watch` follows it here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millrace.jsonl import Follower
from millrace.names import artifact_name
from mixtures.manifest import BuiltManifest
from reports.numbers import finite
from reports.plan_progress import expected_sequences, run_manifest
from reports.run_observations import alerts_problem, observations
from reports.run_stream import RunDigest
from trainer.records import METRICS_FILE, RUN_FILE, SCALARS, last_metrics, observed_run_status
from trainer.records import read_run as read_run_record

log = logging.getLogger(__name__)

MAX_POINTS = 600
MAX_CELL_LINES = 10  # loss-per-cell lines drawn (the cells with most realised tokens); all are in the table
FINISHED = frozenset(
    {"finished", "completed", "done", "failed", "crashed", "stopped", "aborted", "interrupted", "stale"}
)


def read_run(run_dir: Path) -> dict[str, Any]:
    """run.json (kind millrace.run), without its envelope fields; the names in it that pages become paths
    (the run's, its store's) are checked like names on the command line."""
    path = run_dir / RUN_FILE
    body = read_run_record(run_dir)
    if body.get("run") is not None:
        artifact_name(body["run"], "run", path)
    store = body.get("store") or {}
    for field in ("name", "version"):
        if isinstance(store, dict) and store.get(field) is not None:
            artifact_name(store[field], f"store.{field}", path)
    return body


class MetricsTail:
    """Follows a metrics stream: each `poll()` parses only the bytes added since the last one.

    A record whose step is not after the previous one means the run resumed from an
    earlier checkpoint: the records it supersedes are dropped, so every series stays a
    function of the step. A file that shrank (rewritten) is read again from the start.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.records: list[dict[str, Any]] = []
        self.follower = Follower(self.path)
        self.changed_from = 0  # the first record index changed since `take_changed_from()` (a resume pops some)

    def take_changed_from(self) -> int:
        """The first record index that changed since the last call (len(records) when none did)."""
        changed, self.changed_from = self.changed_from, len(self.records)
        return changed

    def poll(self) -> int:
        """Read complete new lines; returns how many records arrived."""
        arrived, rewritten = self.follower.poll()
        if rewritten:
            self.records, self.changed_from = [], 0
        for number, record in arrived:
            if problem := alerts_problem(record):
                log.warning("%s:%d: skipped a malformed alert record (%s)", self.path, number, problem)
                record.pop("alerts")
            while self.records and self.records[-1]["step"] >= record["step"]:
                self.records.pop()
            self.changed_from = min(self.changed_from, len(self.records))
            self.records.append(record)
        return len(arrived)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a metrics stream (an absent file is an empty stream)."""
    tail = MetricsTail(path)
    tail.poll()
    return tail.records


@dataclass
class RunView:
    name: str
    run: dict[str, Any]
    records: list[dict[str, Any]]
    manifest: BuiltManifest | None = None
    run_dir: Path | None = None  # where eval.jsonl and samples.jsonl are read from
    streamed: RunDigest | None = None  # `report build`: the records were read through, not kept

    @property
    def digest(self) -> RunDigest:
        if self.streamed is None:
            self.streamed = RunDigest.of(self.records)
        return self.streamed

    @property
    def count(self) -> int:
        return self.digest.count

    @property
    def status(self) -> str:
        """run.json's status; `stale` for a `running` whose writer is gone (killed without a word)."""
        recorded = self.run.get("status")
        if self.run_dir is not None:
            recorded = observed_run_status(self.run_dir, self.run)
        return str(recorded or "unknown")

    @property
    def live(self) -> bool:
        return self.status.lower() not in FINISHED

    @property
    def last(self) -> dict[str, Any]:
        return self.digest.last

    def drawn_cells(self) -> list[str]:
        """The cells whose loss gets a line: those with the most realised (then planned) tokens."""
        realised = self.last.get("realised_tokens_per_cell") or {}
        planned = self.run.get("planned_tokens_per_cell") or {}
        cells = set(realised) | set(planned) | self.digest.recent_cells()
        return sorted(cells, key=lambda c: (-int(realised.get(c, 0)), -int(planned.get(c, 0)), c))[:MAX_CELL_LINES]

    def page_data(self) -> dict[str, Any]:
        """Everything on the page but the curves (those are in the run's data files, `reports.run_data`)."""
        last = self.last
        realised = {k: int(v) for k, v in (last.get("realised_tokens_per_cell") or {}).items()}
        planned = {k: int(v) for k, v in (self.run.get("planned_tokens_per_cell") or {}).items()}
        latest_loss_cell = self.digest.latest_loss_cell
        cells = sorted(set(realised) | set(planned) | set(latest_loss_cell))
        last_load = [
            {
                "layer": e.get("layer"),
                "load": [finite(x) for x in e.get("load") or []],
                "max_violation": finite(e.get("max_violation")),
                "entropy": finite(e.get("entropy")),
                "dead_experts": e.get("dead_experts"),
            }
            for e in last.get("expert_load") or []
            if isinstance(e, dict)
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
            "switches": [
                {"step": r["start_step"], "revision": r["revision"]} for r in (self.run.get("lineage") or [])[1:]
            ],
            "drawn_cells": self.drawn_cells(),
            "last_expert_load": last_load,
            "expert_load_steps": self.digest.heat,
            "health": {
                "load_entropy_min": ((self.run.get("config") or {}).get("health") or {}).get("load_entropy_min")
            },
            "seq_len": seq_len,
            "cells": [
                {
                    "name": c,
                    "realised": realised.get(c, 0),
                    "planned": planned.get(c, 0),
                    "expected": expected[c] * seq_len if seq_len is not None and c in expected else None,
                    "off_by": realised.get(c, 0) / seq_len - expected[c]
                    if seq_len is not None and c in expected
                    else None,
                    "loss": finite(latest_loss_cell.get(c)),
                }
                for c in cells
            ],
            **(observations(self.run_dir, self.digest.alerts.view()) if self.run_dir is not None else {}),
            "last": {k: finite(last.get(k)) for k in SCALARS} | {"step": last.get("step"), "phase": last.get("phase")},
        }


def load_run_summary(run_dir: Path) -> RunView:
    """run.json and only the last metrics record: enough for a line in the index."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    last = last_metrics(run_dir)
    return RunView(name=str(run.get("run") or run_dir.name), run=run, records=[last] if last else [], run_dir=run_dir)


def open_run(run_dir: Path) -> RunView:
    """run.json and its manifest, the records left to be read through (`reports.run_stream`)."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    name = str(run.get("run") or run_dir.name)
    return RunView(name=name, run=run, records=[], manifest=run_manifest(run_dir, run), run_dir=run_dir)


def load_run(run_dir: Path, tail: MetricsTail | None = None) -> RunView:
    """run.json and the stream's records (from `tail`, already followed, when given)."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    if tail is None:
        records = read_metrics(run_dir / METRICS_FILE)
    else:
        tail.poll()
        records = tail.records
    return RunView(
        name=str(run.get("run") or run_dir.name),
        run=run,
        records=records,
        manifest=run_manifest(run_dir, run),
        run_dir=run_dir,
    )
