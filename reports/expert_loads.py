"""Every record's per-expert loads as a CSV beside a run page's data: one row per step and MoE layer,
`step,layer,expert 0,...,expert E-1` (E from the first record with loads; a row holds its layer's loads).

At the 535B shape a record holds 47 x 384 loads, too many for the chunk files (the page loads those to zoom)
or for a CSV assembled in the browser; this file is written record by record, from the same stream the chunks
are cut from, and the page links it beside its CSV and JSON exports.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import IO

from millrace.artifacts import atomic_output
from reports.numbers import finite
from trainer.records import MetricsRecord

LOADS_FILE = "expert-loads.csv"


class ExpertLoadsWriter(AbstractContextManager["ExpertLoadsWriter"]):
    """`LOADS_FILE` in `directory`, written atomically one record at a time (only a complete file appears)."""

    def __init__(self, directory: Path):
        self._output = atomic_output(Path(directory) / LOADS_FILE, "w")
        self._handle: IO[str] | None = None

    def __enter__(self) -> ExpertLoadsWriter:
        self._handle = self._output.__enter__()
        self._header = False
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        if kind is None and not self._header:
            self._write_header(0)
        return self._output.__exit__(kind, exc, trace)

    def _write_header(self, experts: int) -> None:
        assert self._handle is not None, "inside the with block"
        self._handle.write(",".join(["step", "layer", *(f"expert {e}" for e in range(experts))]) + "\n")
        self._header = True

    def add(self, record: MetricsRecord) -> None:
        loads = [e for e in record.expert_load if e.load]
        if not loads:
            return
        if not self._header:
            self._write_header(len(loads[0].load))
        assert self._handle is not None
        for e in loads:
            values = ("" if (v := finite(x)) is None else repr(v) for x in e.load)
            self._handle.write(f"{record.step},{e.layer},{','.join(values)}\n")


def write_expert_loads(directory: Path, records: Iterable[MetricsRecord]) -> None:
    """The whole file from records held in memory (`report watch`'s path)."""
    with ExpertLoadsWriter(directory) as writer:
        for record in records:
            writer.add(record)
