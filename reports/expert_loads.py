"""Every record's per-expert loads beside a run page's data, in two files written in one pass:
- `expert-loads.csv`: one row per step and MoE layer, `step,layer,expert 0,...,expert E-1` (E from the first
  record with loads; a row holds its layer's loads), linked on the page for download;
- `expert-loads.js` (`millraceLoads({rows: [[step, layer, load 0, ...], ...]})`): the same rows as a script,
  which the page loads only when its JSON export is asked for, so that export holds every recorded field.

At the 535B shape a record holds 47 x 384 loads, too many for the chunk files (the page loads those to zoom)
or for a CSV assembled in the browser; these files are written record by record, from the same stream the
chunks are cut from.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from types import TracebackType
from typing import IO

from millrace.artifacts import atomic_output
from reports.numbers import finite
from trainer.records import MetricsRecord

LOADS_FILE = "expert-loads.csv"
LOADS_SCRIPT = "expert-loads.js"


class ExpertLoadsWriter(AbstractContextManager["ExpertLoadsWriter"]):
    """`LOADS_FILE` and `LOADS_SCRIPT` in `directory`, written atomically one record at a time (only complete
    files appear)."""

    def __init__(self, directory: Path):
        self._directory = Path(directory)
        self._files = ExitStack()
        self._csv: IO[str] | None = None
        self._script: IO[str] | None = None

    def __enter__(self) -> ExpertLoadsWriter:
        self._csv = self._files.enter_context(atomic_output(self._directory / LOADS_FILE, "w"))
        self._script = self._files.enter_context(atomic_output(self._directory / LOADS_SCRIPT, "w"))
        self._script.write("millraceLoads({rows: [\n")
        self._header = False
        self._comma = ""  # before every row but the first: the rows read as JSON too
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        if kind is None:
            if not self._header:
                self._write_header(0)
            assert self._script is not None
            self._script.write("]});\n")
        return self._files.__exit__(kind, exc, trace)

    def _write_header(self, experts: int) -> None:
        assert self._csv is not None, "inside the with block"
        self._csv.write(",".join(["step", "layer", *(f"expert {e}" for e in range(experts))]) + "\n")
        self._header = True

    def add(self, record: MetricsRecord) -> None:
        loads = [e for e in record.expert_load if e.load]
        if not loads:
            return
        if not self._header:
            self._write_header(len(loads[0].load))
        assert self._csv is not None and self._script is not None
        for e in loads:
            values = ["" if (v := finite(x)) is None else repr(v) for x in e.load]
            self._csv.write(f"{record.step},{e.layer},{','.join(values)}\n")
            self._script.write(f"{self._comma}[{record.step},{e.layer},{','.join(v or 'null' for v in values)}]\n")
            self._comma = ","


def write_expert_loads(directory: Path, records: Iterable[MetricsRecord]) -> None:
    """The whole file from records held in memory (`report watch`'s path)."""
    with ExpertLoadsWriter(directory) as writer:
        for record in records:
            writer.add(record)
