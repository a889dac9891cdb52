"""Where each stored document came from: one parquet sidecar per cell, `documents.parquet`.

One row per document, in store order (shard by shard): `shard`, `document` (its index in the
shard), `token_start` (its first token's offset in the cell's stream in store order; the loader
reorders each block of documents per epoch, so it names a window's documents itself, as
(shard, document), and `document_rows` finds their rows), `tokens`, `source`, `id` (the original id,
source-prefixed; ids may repeat), `origin` (file path, or URL for web records) and `position`
(line, row or record in that file). The cell manifest's `stats["trace"]` pins its sha256.
Light (pyarrow only): the loader and reports read it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from millrace.artifacts import atomic_output, sha256_file
from millrace.errors import ArtifactError

TRACE_FILE = "documents.parquet"
COLUMNS = ("shard", "document", "token_start", "tokens", "source", "id", "origin", "position")


def write_trace(cell_dir: Path, columns: dict[str, np.ndarray | list]) -> dict:
    """Write a cell's sidecar atomically; returns its `stats["trace"]` entry (file and sha256)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"trace columns missing: {missing}")
    table = pa.table({name: columns[name] for name in COLUMNS})
    path = Path(cell_dir) / TRACE_FILE
    with atomic_output(path) as handle:
        pq.write_table(table, handle)
    return {"file": TRACE_FILE, "sha256": sha256_file(path)}


def documents_in_window(cell_dir: Path, start: int, stop: int) -> list[dict]:
    """The sidecar rows of the documents that tokens [start, stop) of the cell's stream belong to."""
    import pyarrow.parquet as pq

    path = Path(cell_dir) / TRACE_FILE
    if not path.exists():
        raise ArtifactError(f"{path}: this store has no traceability sidecar (built before it existed)")
    table = pq.read_table(path)
    starts = table.column("token_start").to_numpy()
    first = max(int(np.searchsorted(starts, start, side="right")) - 1, 0)
    last = int(np.searchsorted(starts, stop, side="left"))
    return table.slice(first, last - first).to_pylist()


def document_rows(cell_dir: Path, rows: list[int]) -> list[dict]:
    """The sidecar rows at these store-order positions (row = documents in earlier shards + index in its shard)."""
    import pyarrow.parquet as pq

    path = Path(cell_dir) / TRACE_FILE
    if not path.exists():
        raise ArtifactError(f"{path}: this store has no traceability sidecar (built before it existed)")
    return pq.read_table(path).take(rows).to_pylist()
