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

from millrace.artifacts import atomic_write_text
from reports.numbers import finite
from trainer.records import MetricsRecord

CHUNK = 2000
BUCKETS = 1000
SMOOTHED = ("loss",)  # series whose per-bucket means the page smooths when the run is thinned
DATA_DIR = "data"


def _number(value: Any) -> float | None:
    """`reports.numbers.finite`, inlined for the hot loop over every record."""
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
    for bias in record.router_bias:
        for name, raw in (("norm", bias.norm), ("max_abs", bias.max_abs)):
            if (value := _number(raw)) is not None:
                row[f"router_bias.{name}/layer {bias.layer}"] = value
    for load in record.expert_load:
        for name, raw in (
            ("max_violation", load.max_violation),
            ("router_entropy", load.router_entropy),
            ("entropy", load.entropy),
        ):
            if (value := _number(raw)) is not None:
                row[f"expert_load.{name}/layer {load.layer}"] = value
    for prefix, values in (("loss_per_cell/", record.loss_per_cell), ("loss_per_source/", record.loss_per_source)):
        for name, raw in values.items():
            if (value := _number(raw)) is not None:
                row[prefix + name] = value
    return row


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

    def payload(self, version: int, start_time: float | None) -> dict[str, Any]:
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


def script(function: str, payload: Any) -> str:
    """`function(JSON.parse("..."));`: V8 parses a JSON string faster than the same object literal (the
    overview of a 100,000-step run is half a megabyte); the text is safe inside a script (no `</script>`, no NaN)."""
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    literal = json.dumps(text, ensure_ascii=False).replace("</", "<\\/")
    return f"{function}(JSON.parse({literal}));\n"


def read_script(path: Path) -> Any:
    """The payload of a data file (`millraceData(JSON.parse("..."));`), for tests and tools."""
    text = Path(path).read_text(encoding="utf-8")
    return json.loads(json.loads(text[text.index("JSON.parse(") + 11 : text.rindex("))")]))


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


def _means(values: np.ndarray, steps: np.ndarray, stride: int) -> dict[str, list]:
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

    def overview(self, keep: Callable[[str], bool] = lambda key: True) -> dict[str, Any]:
        """The bounded-size view the page opens with (see the module docstring), of the series `keep` names."""
        n = self.records
        stride = max(1, math.ceil(n / BUCKETS)) if n > 2 * BUCKETS else 1
        steps = np.array([s for c in self.chunks for s in c.steps], dtype=np.int64)
        keys = sorted({k for c in self.chunks for k in c.arrays if keep(k)})
        series, smooth = {}, {}
        for key in keys:
            values = np.concatenate([c.arrays.get(key, np.full(len(c.steps), np.nan)) for c in self.chunks])
            picked = _extremes(values, stride)
            series[key] = {"s": steps[picked].tolist(), "v": _rounded(values[picked])}
            if key in SMOOTHED and stride > 1:
                smooth[key] = _means(values, steps, stride)
        clock_at = sorted(set(range(0, n, stride)) | ({n - 1} if n else set()))
        tokens = [t for c in self.chunks for t in c.tokens]
        seconds = [s for c in self.chunks for s in c.seconds(self.start_time)]
        return {
            "records": n,
            "stride": stride,
            "chunk": CHUNK,
            "chunks": len(self.chunks),
            "seq": self.seq,
            "versions": self.versions,
            "series": series,
            "smooth": smooth,
            "clock": {
                "i": clock_at,
                "s": steps[clock_at].tolist() if n else [],
                "t": [tokens[i] for i in clock_at],
                "w": [seconds[i] for i in clock_at],
            },
        }

    def write(
        self,
        directory: Path,
        rebuilt: Iterable[int],
        page: dict[str, Any],
        keep: Callable[[str], bool] = lambda key: True,
    ) -> None:
        """Write the rebuilt chunks, then the overview (with `page`'s other sections), then live.js last:
        a page that sees the new sequence number finds every file it names already in place."""
        directory.mkdir(parents=True, exist_ok=True)
        for index in rebuilt:
            chunk = self.chunks[index]
            atomic_write_text(
                directory / f"chunk-{index:05d}.js",
                script("millraceChunk", chunk.payload(self.versions[index], self.start_time)),
            )
        for stale in directory.glob("chunk-*.js"):
            if int(stale.stem.split("-")[1]) >= len(self.chunks):
                stale.unlink()
        overview = {**page, **self.overview(keep)}
        atomic_write_text(directory / "overview.js", script("millraceData", overview))
        live = {
            "seq": self.seq,
            "status": page.get("status"),
            "live": page.get("live"),
            "records": self.records,
            "versions": self.versions,
        }
        atomic_write_text(directory / "live.js", script("millraceLive", live))
