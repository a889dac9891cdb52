"""Every record's per-expert loads as a long CSV beside a run page's data: `step,layer,expert,load`.

At the 535B shape a record holds 47 x 384 loads, too many for the chunk files (the page loads those to zoom)
or for a CSV assembled in the browser; this file is written record by record, from the same stream the chunks
are cut from, and the page links it beside its CSV and JSON exports.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from millrace.artifacts import atomic_output
from reports.numbers import finite
from trainer.records import MetricsRecord

LOADS_FILE = "expert-loads.csv"
HEADER = "step,layer,expert,load\n"


class ExpertLoadsWriter(AbstractContextManager["ExpertLoadsWriter"]):
    """`LOADS_FILE` in `directory`, written atomically one record at a time (only a complete file appears)."""

    def __init__(self, directory: Path):
        self._output = atomic_output(Path(directory) / LOADS_FILE, "w")
        self._handle: IO[Any] | None = None

    def __enter__(self) -> ExpertLoadsWriter:
        self._handle = self._output.__enter__()
        self._handle.write(HEADER)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        return self._output.__exit__(kind, exc, trace)

    def add(self, record: MetricsRecord) -> None:
        assert self._handle is not None, "add() inside the with block"
        step = record.step
        self._handle.writelines(
            f"{step},{e.layer},{expert},{'' if (value := finite(load)) is None else repr(value)}\n"
            for e in record.expert_load
            for expert, load in enumerate(e.load)
        )


def write_expert_loads(directory: Path, records: Iterable[MetricsRecord]) -> None:
    """The whole file from records held in memory (`report watch`'s path)."""
    with ExpertLoadsWriter(directory) as writer:
        for record in records:
            writer.add(record)
