"""A run's numbers as its page reads them: script files beside the page, every logged record kept.

`SITE/runs/<run>/data/` holds three kinds of file, each a `<script>` that calls one function of the
page (a script tag loads from file:// and from any static web server alike; a JSON fetch is refused
from file:// by Chromium):

- `chunk-NNNNN.js` (`millraceChunk`): `CHUNK` consecutive records at full resolution and full
  precision, one column per series. Zooming into a range loads the chunks it covers; the CSV export
  is assembled from all of them, so it holds every logged record. A complete chunk is written once;
  while a run grows only its last chunk is rewritten.
- `overview.js` (`millraceData`): what the page draws at first, bounded in size whatever the run's
  length: each series cut into at most `BUCKETS` buckets of consecutive records, of which the
  bucket's minimum and maximum records are kept with their exact steps and values (so a one-step
  spike is a point of its own, and hovering it names its step), the per-bucket means of the loss
  (smoothing), a step -> tokens / seconds clock, and the page's other sections.
- `live.js` (`millraceLive`): a few hundred bytes the page polls while the run is live: the
  sequence number of the last write and each chunk's version, so the page reloads only what changed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import JsonValue

from millrace.artifacts import atomic_output, atomic_write_text
from reports.numbers import finite
from trainer.records import Alerts, MetricsRecord

CHUNK = 2000
BUCKETS = 1000
SMOOTHED = ("loss",)  # series whose per-bucket means the page smooths when the run is thinned
DATA_DIR = "data"


def _number(value: Any) -> float | None:
    """`reports.numbers.finite`, inlined for the hot loop over every record (an exact type test, which mypy
    cannot narrow by: a bool or a numpy scalar is no number here)."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None
    return float(value) if kind is int else None


def flatten(record: MetricsRecord, scalars: Iterable[str]) -> dict[str, float]:
    """One record's numbers under their series keys: `loss`, `router_bias.norm/layer 0`, `loss_per_cell/c00q0`."""
    row: dict[str, float] = {}
    for key in scalars:
        if (value := _number(getattr(record, key))) is not None:
            row[key] = value
    _layer_numbers(record, row)
    for name, flag in (("skipped", record.skipped), ("skipped_steps", record.skipped_steps)):
        if flag is not None:
            row[name] = float(flag)
    if record.alerts is not None:
        _alert_numbers(record.alerts, row)
    for prefix, values in (
        ("loss_per_cell/", record.loss_per_cell),
        ("loss_per_source/", record.loss_per_source),
        ("param_norm_per_group/", record.param_norm_per_group),
        ("realised_tokens_per_cell/", record.realised_tokens_per_cell),
    ):
        for name, raw in values.items():
            if (value := _number(raw)) is not None:
                row[prefix + name] = value
    return row


def _alert_numbers(alerts: Alerts, row: dict[str, float]) -> None:
    """How many alerts are active, each firing one's value, each start's value, threshold and streak start, and
    each end as 1 (a start's message is on the page's alert list)."""
    row["alerts/active"] = float(len(alerts.active))
    for name, raw in alerts.values.items():
        if (value := _number(raw)) is not None:
            row[f"alerts/value/{name}"] = value
    for event in alerts.started:
        for part, raw in (("started", event.value), ("threshold", event.threshold), ("held_since", event.held_since)):
            if (value := _number(raw)) is not None:
                row[f"alerts/{part}/{event.name}"] = value
    for name in alerts.ended:
        row[f"alerts/ended/{name}"] = 1.0


def _layer_numbers(record: MetricsRecord, row: dict[str, float]) -> None:
    """The per-layer figures (router bias, expert load) under `<field>.<name>/layer N`."""
    for bias in record.router_bias:
        for name, raw in (("norm", bias.norm), ("max_abs", bias.max_abs)):
            if (value := _number(raw)) is not None:
                row[f"router_bias.{name}/layer {bias.layer}"] = value
    for load in record.expert_load:
        for name, raw in (
            ("max_violation", load.max_violation),
            ("router_entropy", load.router_entropy),
            ("entropy", load.entropy),
            ("window_entropy", load.window_entropy),
            ("dead_experts", load.dead_experts),
        ):
            if (value := _number(raw)) is not None:
                row[f"expert_load.{name}/layer {load.layer}"] = value


@dataclass
class Chunk:
    """Records [index * CHUNK, index * CHUNK + len) as columns: lists for the file, arrays for the overview."""

    index: int
    steps: list[int]
    tokens: list[float | None]
    times: list[float | None]
    phases: list[str | None]
    columns: dict[str, list[float | None]]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, index: int, records: list[MetricsRecord], scalars: Iterable[str]) -> Chunk:
        rows = [flatten(r, scalars) for r in records]
        keys = sorted({k for row in rows for k in row})
        columns = {k: [row.get(k) for row in rows] for k in keys}
        arrays = {
            k: np.array([math.nan if v is None else v for v in values], dtype=np.float64)
            for k, values in columns.items()
        }
        return cls(
            index=index,
            steps=[r.step for r in records],
            tokens=[finite(r.tokens) for r in records],
            times=[finite(r.time) for r in records],
            phases=[r.phase for r in records],
            columns=columns,
            arrays=arrays,
        )

    def seconds(self, start_time: float | None) -> list[float | None]:
        """Wall time of each record since the run's first one."""
        return [None if t is None or start_time is None else round(t - start_time, 3) for t in self.times]

    def payload(self, version: int, start_time: float | None) -> dict[str, object]:
        return {
            "index": self.index,
            "version": version,
            "first": self.index * CHUNK,
            "steps": self.steps,
            "tokens": self.tokens,
            "seconds": self.seconds(start_time),
            "phase": self.phases,
            "columns": self.columns,
        }


class ChunkBuilder:
    """A `Chunk` filled one record at a time, each record's numbers put straight into the chunk's columns (a
    record of the 535B shape is about a megabyte; its flattened numbers a few kilobytes)."""

    def __init__(self, index: int, scalars: Iterable[str]):
        self.index, self.scalars = index, tuple(scalars)
        self.steps: list[int] = []
        self.tokens: list[float | None] = []
        self.times: list[float | None] = []
        self.phases: list[str | None] = []
        self.arrays: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, record: MetricsRecord) -> None:
        at = len(self.steps)
        for key, value in flatten(record, self.scalars).items():
            column = self.arrays.get(key)
            if column is None:
                column = self.arrays[key] = np.full(CHUNK, np.nan)
            column[at] = value
        self.steps.append(record.step)
        self.tokens.append(finite(record.tokens))
        self.times.append(finite(record.time))
        self.phases.append(record.phase)

    def chunk(self) -> Chunk:
        """The chunk with its arrays only (`write_built_chunk` writes its columns from them, one at a time)."""
        size = len(self.steps)
        arrays = {key: self.arrays[key][:size] for key in sorted(self.arrays)}
        return Chunk(self.index, self.steps, self.tokens, self.times, self.phases, {}, arrays)


def write_built_chunk(directory: Path, chunk: Chunk, version: int, start_time: float | None) -> None:
    """`write_chunk`'s file for a built chunk, written a column at a time: the same bytes, without the whole
    payload's text in memory at once (a chunk of 2,000 records of the 535B shape is about 15 MB of it)."""
    head = chunk.payload(version, start_time)
    del head["columns"]
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    pieces = [text[:-1] + ',"columns":{']
    with atomic_output(directory / f"chunk-{chunk.index:05d}.js") as handle:
        handle.write(b'millraceChunk(JSON.parse("')
        for number, (key, values) in enumerate(chunk.arrays.items()):
            column = [None if math.isnan(v) else v for v in values.tolist()]
            pieces.append(("," if number else "") + compact_json({key: column})[1:-1])
            handle.write(b"".join(_escaped(piece) for piece in pieces))
            pieces = []
        handle.write(b"".join(_escaped(piece) for piece in [*pieces, "}}"]) + b'"));\n')


def compact_json(payload: object) -> str:
    """JSON without spaces, non-ASCII kept, and no NaN (a script's JSON.parse refuses it)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _escaped(piece: str) -> bytes:
    """A piece of the payload's JSON text as it reads inside the script's string literal (see `script`)."""
    return json.dumps(piece, ensure_ascii=False)[1:-1].replace("</", "<\\/").encode("utf-8")


def script(function: str, payload: object) -> str:
    """`function(JSON.parse("..."));`: V8 parses a JSON string faster than the same object literal (the
    overview of a 100,000-step run is half a megabyte); the text is safe inside a script (no `</script>`, no NaN)."""
    text = compact_json(payload)
    literal = json.dumps(text, ensure_ascii=False).replace("</", "<\\/")
    return f"{function}(JSON.parse({literal}));\n"


def read_script(path: Path) -> JsonValue:
    """The payload of a data file (`millraceData(JSON.parse("..."));`), for tests and tools."""
    text = Path(path).read_text(encoding="utf-8")
    payload: JsonValue = json.loads(json.loads(text[text.index("JSON.parse(") + 11 : text.rindex("))")]))
    return payload


def _rounded(values: np.ndarray) -> list[float]:
    return [float(f"{v:.7g}") for v in values.tolist()]


def _extremes(values: np.ndarray, stride: int) -> np.ndarray:
    """Indices of each stride-long bucket's minimum and maximum (and the first and last finite value)."""
    present = np.flatnonzero(~np.isnan(values))
    if stride <= 1 or present.size == 0:
        return present
    padded = np.full(math.ceil(values.size / stride) * stride, np.nan)
    padded[: values.size] = values
    blocks = padded.reshape(-1, stride)
    filled = ~np.all(np.isnan(blocks), axis=1)
    rows = np.flatnonzero(filled)
    lows = np.nanargmin(blocks[filled], axis=1) + rows * stride
    highs = np.nanargmax(blocks[filled], axis=1) + rows * stride
    return np.unique(np.concatenate([lows, highs, present[:1], present[-1:]]))


def _means(values: np.ndarray, steps: np.ndarray, stride: int) -> dict[str, list[float]]:
    """Per bucket: the mean of its finite values at its last step, and how many records it averages."""
    padded = np.full(math.ceil(values.size / stride) * stride, np.nan)
    padded[: values.size] = values
    blocks = padded.reshape(-1, stride)
    counts = np.sum(~np.isnan(blocks), axis=1)
    filled = counts > 0
    ends = np.minimum((np.arange(blocks.shape[0]) + 1) * stride, values.size) - 1
    sums = np.nansum(blocks, axis=1)
    return {
        "s": steps[ends[filled]].tolist(),
        "v": _rounded(sums[filled] / counts[filled]),
        "k": counts[filled].tolist(),
    }


class OverviewBuilder:
    """The overview's series, clock and smoothing built one chunk at a time, knowing only the record count:
    per series and bucket its minimum and maximum record (the first of equals), the first and last present,
    per-bucket means of the smoothed series. What it keeps is bounded by `BUCKETS`, not by the records."""

    def __init__(self, records: int):
        self.n = records
        self.stride = max(1, math.ceil(records / BUCKETS)) if records > 2 * BUCKETS else 1
        self.blocks = math.ceil(records / self.stride) if records else 0
        self.picked: dict[str, dict[int, tuple[int, float]]] = {}  # stride 1: every present point
        self.lows: dict[str, np.ndarray] = {}  # [blocks, 3]: index, step, value
        self.highs: dict[str, np.ndarray] = {}
        self.ends: dict[str, dict[str, tuple[int, int, float]]] = {}  # first / last present
        self.sums: dict[str, np.ndarray] = {}  # [blocks, 2]: sum, count
        self.block_end_steps = np.zeros(self.blocks, dtype=np.int64)
        self.clock: dict[str, list[float | None]] = {"i": [], "s": [], "t": [], "w": []}

    def add(self, chunk: Chunk, start_time: float | None) -> None:
        first = chunk.index * CHUNK
        index = np.arange(first, first + len(chunk.steps))
        steps = np.asarray(chunk.steps, dtype=np.int64)
        block = index // self.stride
        at_end = ((index + 1) % self.stride == 0) | (index == self.n - 1)
        self.block_end_steps[block[at_end]] = steps[at_end]
        seconds = chunk.seconds(start_time)
        for i in np.flatnonzero((index % self.stride == 0) | (index == self.n - 1)).tolist():
            for key, value in zip("istw", (int(index[i]), int(steps[i]), chunk.tokens[i], seconds[i])):
                self.clock[key].append(value)
        for key, values in chunk.arrays.items():
            self._series(key, values, index, steps, block)

    def _series(self, key: str, values: np.ndarray, index: np.ndarray, steps: np.ndarray, block: np.ndarray) -> None:
        present = np.flatnonzero(~np.isnan(values))
        if present.size == 0:
            return
        ends = self.ends.setdefault(key, {})
        ends.setdefault("first", (int(index[present[0]]), int(steps[present[0]]), float(values[present[0]])))
        ends["last"] = (int(index[present[-1]]), int(steps[present[-1]]), float(values[present[-1]]))
        if self.stride == 1:
            picked = self.picked.setdefault(key, {})
            for i in present.tolist():
                picked[int(index[i])] = (int(steps[i]), float(values[i]))
            return
        where = (index, steps, block)
        self._extreme(self.lows, key, values, where, np.inf, np.less)
        self._extreme(self.highs, key, values, where, -np.inf, np.greater)
        if key in SMOOTHED:
            sums = self.sums.setdefault(key, np.zeros((self.blocks, 2)))
            np.add.at(sums[:, 0], block[present], values[present])
            np.add.at(sums[:, 1], block[present], 1)

    def _extreme(
        self,
        table: dict[str, np.ndarray],
        key: str,
        values: np.ndarray,
        where: tuple[np.ndarray, np.ndarray, np.ndarray],
        empty: float,
        better: np.ufunc,
    ) -> None:
        """Each bucket's extreme so far: this chunk's (first of equals) where strictly better than before;
        `where`: each value's record index, step and bucket."""
        index, steps, block = where
        state = table.setdefault(
            key, np.column_stack([np.full(self.blocks, -1.0), np.zeros(self.blocks), np.full(self.blocks, empty)])
        )
        filled = np.where(np.isnan(values), empty, values)
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        reduce = np.minimum if better is np.less else np.maximum
        best = reduce.reduceat(filled, starts)
        lengths = np.diff(np.r_[starts, block.size])
        hits = np.flatnonzero(filled == np.repeat(best, lengths))
        blocks, first = np.unique(block[hits], return_index=True)
        at = hits[first]
        values_at = filled[at]
        win = better(values_at, state[blocks, 2])
        state[blocks[win]] = np.column_stack([index[at[win]], steps[at[win]], values_at[win]])

    def result(self, keep: Callable[[str], bool] = lambda key: True) -> dict[str, object]:
        """The overview of the series `keep` names."""
        series, smooth = {}, {}
        for key, ends in sorted(self.ends.items()):
            if not keep(key):
                continue
            points = dict(self.picked.get(key, {}))
            for table in (self.lows, self.highs):
                for i, step, value in table.get(key, np.zeros((0, 3))).tolist():
                    if i >= 0:
                        points[int(i)] = (int(step), value)
            for i, step, value in ends.values():
                points[i] = (step, value)
            order = sorted(points)
            series[key] = {
                "s": [points[i][0] for i in order],
                "v": _rounded(np.asarray([points[i][1] for i in order], dtype=np.float64)),
            }
            if key in self.sums:
                sums = self.sums[key]
                filled = sums[:, 1] > 0
                smooth[key] = {
                    "s": self.block_end_steps[filled].tolist(),
                    "v": _rounded(sums[filled, 0] / sums[filled, 1]),
                    "k": sums[filled, 1].astype(np.int64).tolist(),
                }
        return {
            "records": self.n,
            "stride": self.stride,
            "chunk": CHUNK,
            "chunks": math.ceil(self.n / CHUNK),
            "series": series,
            "smooth": smooth,
            "clock": self.clock,
        }


class RunSeries:
    """A run's records cut into chunks, kept between writes so a growing run rewrites only what changed."""

    def __init__(self, scalars: Iterable[str]):
        self.scalars = tuple(scalars)
        self.chunks: list[Chunk] = []
        self.versions: list[int] = []
        self.seq = 0
        self.start_time: float | None = None

    def update(self, records: list[MetricsRecord], changed_from: int = 0) -> list[int]:
        """Recut the chunks from record `changed_from` on; returns the indices of the chunks rebuilt."""
        first = min(changed_from // CHUNK, len(self.chunks))
        count = math.ceil(len(records) / CHUNK)
        self.seq = max(self.seq + 1, time.time_ns() // 1_000_000)  # grows across processes too: a page open
        # while `report build` runs again sees a newer write
        del self.chunks[first:]
        del self.versions[count:]
        for index in range(first, count):
            self.chunks.append(Chunk.of(index, records[index * CHUNK : (index + 1) * CHUNK], self.scalars))
            if index < len(self.versions):
                self.versions[index] = self.seq
            else:
                self.versions.append(self.seq)
        self.start_time = next((t for c in self.chunks[:1] for t in c.times if t is not None), None)
        return list(range(first, count))

    @property
    def records(self) -> int:
        return sum(len(c.steps) for c in self.chunks)

    def overview(self, keep: Callable[[str], bool] = lambda key: True) -> dict[str, object]:
        """The bounded-size view the page opens with (see the module docstring), of the series `keep` names."""
        builder = OverviewBuilder(self.records)
        for chunk in self.chunks:
            builder.add(chunk, self.start_time)
        return {**builder.result(keep), "seq": self.seq, "versions": self.versions}

    def write(
        self,
        directory: Path,
        rebuilt: Iterable[int],
        page: dict[str, object],
        keep: Callable[[str], bool] = lambda key: True,
    ) -> None:
        """Write the rebuilt chunks, then the overview (with `page`'s other sections), then live.js last:
        a page that sees the new sequence number finds every file it names already in place."""
        directory.mkdir(parents=True, exist_ok=True)
        for index in rebuilt:
            write_chunk(directory, self.chunks[index], self.versions[index], self.start_time)
        write_overview(directory, len(self.chunks), {**page, **self.overview(keep)})


def write_chunk(directory: Path, chunk: Chunk, version: int, start_time: float | None) -> None:
    atomic_write_text(
        directory / f"chunk-{chunk.index:05d}.js", script("millraceChunk", chunk.payload(version, start_time))
    )


def write_overview(directory: Path, chunks: int, overview: dict[str, object]) -> None:
    """overview.js, then live.js; chunk files past `chunks` (a run cut back by a resume) are removed."""
    for stale in directory.glob("chunk-*.js"):
        if int(stale.stem.split("-")[1]) >= chunks:
            stale.unlink()
    atomic_write_text(directory / "overview.js", script("millraceData", overview))
    live = {
        "seq": overview["seq"],
        "status": overview.get("status"),
        "live": overview.get("live"),
        "records": overview["records"],
        "versions": overview["versions"],
    }
    atomic_write_text(directory / "live.js", script("millraceLive", live))
