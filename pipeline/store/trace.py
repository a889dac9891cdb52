"""Where each stored document came from: parquet sidecars per cell, one per tokenize task.

Each task that wrote training shards of a cell writes `documents-<task>.parquet` beside them,
one row per document of those shards, in store order (shard by shard): `shard` (the shard's
index in the cell's shard table), `document` (its index in the shard), `token_start` (its
first token's offset in the cell's stream in store order; the loader reorders each block of
documents per epoch, so it names a window's documents itself, as (shard, document), and
`document_rows` finds their rows), `tokens`, `source`, `id` (the original id, source-prefixed;
ids may repeat), `origin` (file path, or URL for web records) and `position` (line, row or record
in that file). A part's file holds `shard` and `token_start` relative to its own first shard and
token; the cell manifest's `stats.trace.parts` lists the parts in store order with their
row, shard and token counts and sha256, and the readers here add the offsets back, so a reader
sees one table whatever the task count. The held-out documents have the same table, over the cell's
validation shards, in `held-out-documents-<task>.parquet` parts (`stats.held_out_trace`; `read_trace(...,
held_out=True)`): which file or URL was held out can be found. Stores built before the parts keep one
`documents.parquet` (`stats.trace.file`), still read. A part is checked against its sha256 before it is read.
Light (pyarrow only): the loader and reports read it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

import numpy as np

from millrace.artifacts import atomic_output, read_artifact, sha256_file
from millrace.errors import ArtifactError
from pipeline.store.format import CELL_KIND, CELL_SCHEMA_VERSION, CellManifest
from pipeline.store.manifest_records import CellStats, Trace, TracePart

if TYPE_CHECKING:  # pyarrow loads when a sidecar is read or written
    import pyarrow as pa

TRACE_FILE = "documents.parquet"  # the one sidecar of stores built before the per-task parts
COLUMNS = ("shard", "document", "token_start", "tokens", "source", "id", "origin", "position")


HELD_OUT_PREFIX = "held-out-documents"  # the held-out documents' parts, beside the training documents' ones


class TraceRow(TypedDict):
    """A sidecar row: COLUMNS' values of one document, as pyarrow's `to_pylist` gives them."""

    shard: int
    document: int
    token_start: int
    tokens: int
    source: str
    id: str
    origin: str
    position: int


class PlacedPart(TypedDict):
    """A part with its row, shard and token offsets in the cell (`_parts`); a store's single legacy sidecar has
    `documents` None and no digest."""

    file: str
    row: int
    shard: int
    token: int
    documents: int | None
    sha256: NotRequired[str]
    shards: NotRequired[int]
    tokens: NotRequired[int]


def part_name(task: int, prefix: str = "documents") -> str:
    return f"{prefix}-{task:05d}.parquet"


def write_trace_part(
    cell_dir: Path,
    task: int,
    columns: dict[str, np.ndarray | list[int] | list[str]],
    shards: int,
    prefix: str = "documents",
) -> TracePart:
    """Write one task's sidecar of a cell atomically (`prefix`: `HELD_OUT_PREFIX` for its held-out documents);
    returns its entry in the cell manifest's `stats.trace.parts` (or `stats.held_out_trace.parts`)."""
    # lazy: heavy (pyarrow)
    import pyarrow as pa
    import pyarrow.parquet as pq

    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"trace columns missing: {missing}")
    table = pa.table({name: columns[name] for name in COLUMNS})
    path = Path(cell_dir) / part_name(task, prefix)
    with atomic_output(path) as handle:
        pq.write_table(table, handle)
    return TracePart(
        file=path.name,
        sha256=sha256_file(path),
        documents=table.num_rows,
        shards=shards,
        tokens=int(np.sum(columns["tokens"], dtype=np.int64)),
    )


def _parts(cell_dir: Path, held_out: bool = False) -> list[PlacedPart]:
    """The cell's sidecar parts in store order (with `held_out`, the held-out documents'), each with its row,
    shard and token offsets."""
    manifest = Path(cell_dir) / "cell.json"
    stats = (
        read_artifact(manifest, CELL_KIND, CellManifest, (CELL_SCHEMA_VERSION,)).stats
        if manifest.exists()
        else CellStats()
    )
    if held_out:
        return _with_offsets(stats.held_out_trace.parts or []) if stats.held_out_trace is not None else []
    trace = stats.trace
    if trace is None and (Path(cell_dir) / TRACE_FILE).exists():
        trace = Trace(file=TRACE_FILE)
    if trace is None or (trace.parts is None and trace.file is None):
        raise ArtifactError(
            f"{Path(cell_dir) / TRACE_FILE}: this store has no traceability sidecar (built before it existed)"
        )
    if trace.parts is None:
        return [{"file": trace.file or TRACE_FILE, "row": 0, "shard": 0, "token": 0, "documents": None}]
    return _with_offsets(trace.parts)


def _with_offsets(listed: list[TracePart]) -> list[PlacedPart]:
    parts: list[PlacedPart] = []
    row, shard, token = 0, 0, 0
    for part in listed:
        parts.append(
            {
                "file": part.file,
                "sha256": part.sha256,
                "documents": part.documents,
                "shards": part.shards,
                "tokens": part.tokens,
                "row": row,
                "shard": shard,
                "token": token,
            }
        )
        row, shard, token = row + part.documents, shard + part.shards, token + part.tokens
    return parts


def has_trace(cell_dir: Path) -> bool:
    try:
        return bool(_parts(cell_dir))
    except ArtifactError:
        return False


def _check_part(path: str, expected: str) -> None:
    """A part's bytes against the sha256 its cell.json pins (a flipped byte in a parquet page can decode
    as another source's name), once per file and version of it per process."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing (the cell's trace part)") from None
    if not _part_matches(path, expected, stat.st_size, stat.st_mtime_ns):
        raise ArtifactError(
            f"{path}: sha256 differs from the one its cell.json pins (altered or replaced); "
            "run `millrace store verify`"
        )


@functools.lru_cache(maxsize=256)
def _part_matches(path: str, expected: str, size: int, mtime_ns: int) -> bool:
    return sha256_file(Path(path)) == expected


def _read_part(cell_dir: Path, part: PlacedPart, rows: list[int] | None = None) -> pa.Table:
    """A part's rows (all, or those at `rows` within it) with shard and token_start made cell-wide."""
    # lazy: heavy (pyarrow)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(cell_dir) / part["file"]
    if part.get("sha256"):
        _check_part(str(path), part["sha256"])
    table = pq.read_table(path)
    if rows is not None:
        table = table.take(rows)
    for column, offset in (("shard", part["shard"]), ("token_start", part["token"])):
        if offset:
            shifted = pc.add(table.column(column), pa.scalar(offset, table.schema.field(column).type))
            table = table.set_column(table.schema.get_field_index(column), column, shifted)
    return table


def read_trace(cell_dir: Path, held_out: bool = False) -> pa.Table:
    """The whole sidecar of a cell as one pyarrow table (for tools and tests; `document_rows` reads less); with
    `held_out`, that of its held-out documents (shard and document over its validation shards; empty when none)."""
    import pyarrow as pa  # lazy: heavy (pyarrow)

    if held_out:
        parts = _parts(cell_dir, held_out=True)
        if not parts:
            return pa.table({name: [] for name in COLUMNS})
        return pa.concat_tables([_read_part(cell_dir, part) for part in parts])
    return pa.concat_tables([_read_part(cell_dir, part) for part in _parts(cell_dir)])


def document_rows(cell_dir: Path, rows: list[int]) -> list[TraceRow]:
    """The sidecar rows at these store-order positions (row = documents in earlier shards + index in its
    shard), reading only the parts that hold them."""
    parts = _parts(cell_dir)
    if parts[0]["documents"] is None:  # a store with one sidecar file
        return cast(list[TraceRow], _read_part(cell_dir, parts[0], rows).to_pylist())
    starts = np.asarray([p["row"] for p in parts])
    owner = np.searchsorted(starts, np.asarray(rows, dtype=np.int64), side="right") - 1
    found: dict[int, TraceRow] = {}
    for index in sorted(set(owner.tolist())):
        wanted = [i for i, o in enumerate(owner.tolist()) if o == index]
        local = [rows[i] - parts[index]["row"] for i in wanted]
        for i, row in zip(wanted, cast(list[TraceRow], _read_part(cell_dir, parts[index], local).to_pylist())):
            found[i] = row
    return [found[i] for i in range(len(rows))]
