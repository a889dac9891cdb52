"""A run's metrics stream read once, record by record, for `report build`: memory does not grow with the records.

A long run at the 535B shape logs records of about a megabyte each (per-expert loads of every MoE layer):
holding them all took 1.37 GB for 1,000 records. Here the stream is read twice, line by line: the first pass
keeps only each record's step (8 bytes a record, to drop the records a resume superseded, as `MetricsTail`
does), the second hands each kept record to the consumers and lets it go:

- `RunDigest`: what the page shows beside the curves (the last record, each cell's latest loss, the cells of
  the recent records, the alert events and bands, the per-expert load at a bounded set of steps);
- the chunk files (`reports.run_data`), written as each fills, and the overview and summary builders, which
  keep a bounded number of points per series (`OverviewBuilder`, `BucketBuilder`) and need only the record
  count, known after the first pass.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from millrace.errors import ArtifactError
from millrace.jsonl import accepted
from reports.numbers import finite
from reports.run_observations import AlertEvents
from trainer.records import MetricsRecord, metrics_lines

log = logging.getLogger(__name__)

CELL_WINDOW = 2000  # recent records whose batches name cells (a run without realised counts)
HEAT_STEPS = 200  # at most this many steps of the per-expert load heat map, whatever the run's length
HEAT_VALUES = 200_000  # ... and at most about this many loads in it (8 steps at the 535B shape's 61 x 384)


def _lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line, whether it is the last non-empty one) of every non-empty line, one at a time."""
    if not Path(path).exists():
        return
    with open(path, "rb") as handle:
        pending: tuple[int, bytes] | None = None
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            if pending is not None:
                yield *pending, False
            pending = (number, line)
        if pending is not None:
            yield *pending, True


def iter_lines(path: Path) -> Iterator[tuple[int, MetricsRecord]]:
    """(line number, record) of every complete record, one line in memory at a time; a last line that does
    not parse is torn and left out, an earlier one is damage (`millrace.jsonl`'s rule); a line that parses but
    breaks the record's model is skipped with a warning naming file and line (as `MetricsTail` does)."""
    for number, line, last in _lines(path):
        try:
            record = _parsed(path, number, line, last)
        except _Torn:
            return
        if record is not None:
            yield number, record


STEP_PREFIX = b'{"step": '  # how the trainer's records begin (`MetricsRecord` puts the step first)


def _steps(path: Path, exact: bool = False) -> Iterator[tuple[int, int]]:
    """(line number, step) of each record, as `iter_lines` gives the records, without parsing a whole line where
    it begins with the step (a record of the 535B shape is about a megabyte of JSON); the last line is parsed
    whole, so a torn one is left out as `iter_lines` leaves it. Such a line that breaks the record's model is
    counted here, not there (`Miscounted`); `exact` parses every line."""
    for number, line, last in _lines(path):
        head = line[len(STEP_PREFIX) : len(STEP_PREFIX) + 24].split(b",", 1)
        if not (exact or last) and line.startswith(STEP_PREFIX) and len(head) == 2 and head[0].isdigit():
            yield number, int(head[0])
            continue
        try:
            record = _parsed(path, number, line, last)
        except _Torn:
            return
        if record is not None:
            yield number, record.step


class _Torn(Exception):
    pass


class Miscounted(Exception):
    """The second pass showed fewer records than the first counted: a record that parses but breaks the
    record's model, which the first pass (steps only) cannot see. Read again with `exact`."""


_PARSE = metrics_lines(MetricsRecord)


def _parsed(path: Path, number: int, line: bytes, last: bool) -> MetricsRecord | None:
    try:
        record, problem = _PARSE(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        if last:
            raise _Torn from None
        raise ArtifactError(
            f"{path}:{number}: not a JSON line ({exc}); the file is damaged before its last line"
        ) from None
    return record if accepted(problem, "skip", path, number) else None


def kept_records(path: Path, exact: bool = False) -> tuple[int, Iterator[MetricsRecord]]:
    """How many records a page shows, and an iterator over them: a record followed by one at the same or an
    earlier step was superseded by a resume and is left out. Two passes over the file, one record at a time,
    the second matching the first by line number (records appended meanwhile are left out). The iterator raises
    `Miscounted` at its end where it showed fewer records than counted (then read again with `exact`)."""
    found = np.fromiter(itertools.chain.from_iterable(_steps(path, exact)), dtype=np.int64).reshape(-1, 2)
    numbers, steps = found[:, 0], found[:, 1]
    from_here = np.minimum.accumulate(steps[::-1])[::-1]  # the least step from each record on
    keep = steps < np.append(from_here[1:], np.iinfo(np.int64).max)
    count = int(keep.sum())

    def records() -> Iterator[MetricsRecord]:
        shown = 0
        for number, record in iter_lines(path):
            index = int(np.searchsorted(numbers, number))
            if index < numbers.size and numbers[index] == number and keep[index]:
                shown += 1
                yield record
        if shown != count:
            raise Miscounted(f"{path}: {shown} records shown of {count} counted")

    return count, records()


class RunDigest:
    """What the run page needs from every record besides the curves, fed one record at a time."""

    def __init__(self, total: int = 0):
        self.count = 0
        self.last: MetricsRecord | None = None
        self.latest_loss_cell: dict[str, float] = {}
        self.cell_seen: dict[str, int] = {}  # cell -> index of the last record whose batch named it
        self.alerts = AlertEvents()
        self.total = total
        self.heat_every = 0  # set by the first record with loads, from its layers x experts
        self.heat: list[dict[str, object]] = []  # {"step", "layers": {layer: load}} at a bounded set of steps

    @classmethod
    def of(cls, records: list[MetricsRecord]) -> RunDigest:
        digest = cls(len(records))
        for record in records:
            digest.add(record)
        digest.finish()
        return digest

    def add(self, record: MetricsRecord) -> None:
        for cell, value in record.loss_per_cell.items():
            self.cell_seen[cell] = self.count
            if (loss := finite(value)) is not None:
                self.latest_loss_cell[cell] = loss
        self.alerts.add(record)
        self.count += 1
        self.last = record
        if not self.heat_every and (values := sum(len(e) for e in _loads(record).values())):
            steps = min(HEAT_STEPS, max(8, HEAT_VALUES // values))
            self.heat_every = max(1, -(-max(self.total, 1) // steps))
        if self.heat_every and (self.count - 1) % self.heat_every == 0 and (loads := _loads(record)):
            self.heat.append({"step": record.step, "layers": loads})

    def finish(self) -> None:
        """The last record's loads end the heat map, so its last column is the last logged step."""
        last = self.last
        if last is not None and (loads := _loads(last)) and (not self.heat or self.heat[-1]["step"] != last.step):
            self.heat.append({"step": last.step, "layers": loads})

    def recent_cells(self) -> set[str]:
        return {cell for cell, index in self.cell_seen.items() if index >= self.count - CELL_WINDOW}


def _loads(record: MetricsRecord) -> dict[str, list[float | None]]:
    """Per MoE layer, each expert's share of the routed tokens, to 4 significant digits."""
    return {
        str(e.layer): [None if (v := finite(x)) is None else float(f"{v:.4g}") for x in e.load]
        for e in record.expert_load
        if e.load
    }
