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

from millrace.jsonl import Follower
from mixtures.manifest import BuiltManifest
from reports.numbers import finite
from reports.plan_progress import run_manifest
from reports.run_observations import observations
from reports.run_stream import RunDigest
from trainer.records import (
    FINISHED,
    METRICS_FILE,
    SCALARS,
    MetricsRecord,
    RunRecord,
    last_metrics,
    metrics_lines,
    observed_run_status,
    read_run,
)

log = logging.getLogger(__name__)

MAX_POINTS = 600
MAX_CELL_LINES = 10  # loss-per-cell lines drawn (the cells with most realised tokens); all are in the table


class MetricsTail:
    """Follows a metrics stream: each `poll()` parses only the bytes added since the last one, each line
    straight into its `MetricsRecord` (a line a hand or a foreign tool spoiled is skipped with a warning
    naming file and line, so that the page still draws the rest; spoiled alerts only lose the alerts:
    `trainer.records.metrics_lines`). `model`: a `MetricsRecord` with more fields (a metric being added).

    A record whose step is not after the previous one means the run resumed from an
    earlier checkpoint: the records it supersedes are dropped, so every series stays a
    function of the step. A file that shrank (rewritten) is read again from the start.
    """

    def __init__(self, path: Path, model: type[MetricsRecord] = MetricsRecord):
        self.path = Path(path)
        self.records: list[MetricsRecord] = []
        self.follower = Follower(self.path, metrics_lines(model), on_bad="skip")
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
        for _number, record in arrived:
            while self.records and self.records[-1].step >= record.step:
                self.records.pop()
            self.changed_from = min(self.changed_from, len(self.records))
            self.records.append(record)
        return len(arrived)


@dataclass
class RunView:
    name: str
    run: RunRecord
    records: list[MetricsRecord]
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
        """run.json's status as observed (`stale` for a `running` whose writer is gone: killed without a word);
        `unknown` where run.json records none."""
        recorded = self.run.status if self.run_dir is None else observed_run_status(self.run_dir, self.run)
        return recorded or "unknown"

    @property
    def live(self) -> bool:
        return self.status not in FINISHED

    @property
    def last(self) -> MetricsRecord | None:
        return self.digest.last

    def drawn_cells(self) -> list[str]:
        """The cells whose loss gets a line: those with the most realised (then planned) tokens."""
        realised = self.last.realised_tokens_per_cell if self.last is not None else {}
        planned = self.run.planned_tokens_per_cell
        cells = set(realised) | set(planned) | self.digest.recent_cells()
        return sorted(cells, key=lambda c: (-realised.get(c, 0), -planned.get(c, 0), c))[:MAX_CELL_LINES]

    def load_entropy_min(self) -> float | None:
        """The expert-load entropy floor the run's health rule alerted under, where run.json records one."""
        config = self.run.config
        if config is None or "load_entropy_min" not in config.health.model_fields_set:
            return None
        return config.health.load_entropy_min

    def page_data(self) -> dict[str, object]:
        """Everything on the page but the curves (those are in the run's data files, `reports.run_data`)."""
        last = self.last
        realised = last.realised_tokens_per_cell if last is not None else {}
        planned = self.run.planned_tokens_per_cell
        latest_loss_cell = self.digest.latest_loss_cell
        cells = sorted(set(realised) | set(planned) | set(latest_loss_cell))
        last_load = [
            {
                "layer": e.layer,
                "load": [finite(x) for x in e.load],
                "max_violation": finite(e.max_violation),
                "entropy": finite(e.entropy),
                "dead_experts": e.dead_experts,
            }
            for e in (last.expert_load if last is not None else [])
        ]
        steps_done = last.step if last is not None else 0
        expected = self.manifest.cell_plan(steps_done) if self.manifest is not None else {}
        seq_len = self.manifest.seq_len if self.manifest is not None else None
        return {
            "run": self.name,
            "status": self.status,
            "live": self.live,
            "mixture": self.run.mixture,
            "revision": self.run.revision,
            "store": self.run.store.dump() if self.run.store is not None else {},
            "total_steps": self.run.total_steps,
            "switches": [{"step": r.start_step, "revision": r.revision} for r in self.run.lineage[1:]],
            "drawn_cells": self.drawn_cells(),
            "last_expert_load": last_load,
            "expert_load_steps": self.digest.heat,
            "health": {"load_entropy_min": self.load_entropy_min()},
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
            "last": {k: finite(getattr(last, k)) if last is not None else None for k in SCALARS}
            | {"step": last.step if last is not None else None, "phase": last.phase if last is not None else None},
        }


def load_run_summary(run_dir: Path) -> RunView:
    """run.json and only the last metrics record: enough for a line in the index."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    last = last_metrics(run_dir)
    return RunView(name=run.run or run_dir.name, run=run, records=[last] if last else [], run_dir=run_dir)


def open_run(run_dir: Path) -> RunView:
    """run.json and its manifest, the records left to be read through (`reports.run_stream`)."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    return RunView(
        name=run.run or run_dir.name, run=run, records=[], manifest=run_manifest(run_dir, run), run_dir=run_dir
    )


def load_run(run_dir: Path, tail: MetricsTail | None = None) -> RunView:
    """run.json and the stream's records (from `tail`, already followed, when given)."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    tail = tail if tail is not None else MetricsTail(run_dir / METRICS_FILE)
    tail.poll()
    return RunView(
        name=run.run or run_dir.name,
        run=run,
        records=tail.records,
        manifest=run_manifest(run_dir, run),
        run_dir=run_dir,
    )
