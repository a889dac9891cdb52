"""A cell's pinned shards, checked when opened and read as one concatenated token array.

Opening checks every shard against the manifest before the first batch: the `.idx`
checksum (so the document index is exactly the one the manifest was built from),
the index's structure and dtype, the `.bin` size against the index, the document
and token counts, and the `.src` sidecar's checksum. Content of the `.bin` is not
hashed here (that is `millrace store verify`); its size is. A problem is an
`ArtifactError` that names the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from millrace.artifacts import sha256_file
from millrace.errors import ArtifactError
from mixtures.manifest import ManifestCell
from pipeline.store import ShardReader


def _sidecar(prefix: Path, suffix: str) -> Path:
    return prefix.with_name(prefix.name + suffix)


class CellTokens:
    """Token windows of one cell: window s is tokens [s * seq_len, s * seq_len + seq_len + 1)."""

    def __init__(self, cell_dir: Path, cell: ManifestCell, dtype: np.dtype, seq_len: int):
        self.name = cell.name
        self.seq_len = seq_len
        self.dtype = np.dtype(dtype)
        self.readers: list[ShardReader] = []
        self.has_sources = bool(cell.shards) and all(shard.src_sha256 for shard in cell.shards)
        source_ids: list[np.ndarray] = []
        for shard in cell.shards:
            prefix = cell_dir / shard.name
            idx = _sidecar(prefix, ".idx")
            if not idx.exists():
                raise ArtifactError(f"{idx}: missing shard index of cell {cell.name!r}")
            if sha256_file(idx) != shard.idx_sha256:
                raise ArtifactError(f"{idx}: checksum differs from the manifest's (shard altered or replaced)")
            reader = ShardReader(prefix, self.dtype)
            if (reader.documents, reader.tokens) != (shard.documents, shard.tokens):
                raise ArtifactError(
                    f"{idx}: {reader.documents} documents / {reader.tokens} tokens, "
                    f"the manifest pins {shard.documents} / {shard.tokens}"
                )
            if self.has_sources:
                src = _sidecar(prefix, ".src")
                if not src.exists() or sha256_file(src) != shard.src_sha256:
                    raise ArtifactError(f"{src}: missing or differs from the manifest's checksum")
                source_ids.append(reader.source_ids())
            self.readers.append(reader)
        sizes = np.asarray([reader.tokens for reader in self.readers], dtype=np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.tokens = int(self.shard_starts[-1])
        if self.tokens != cell.available_tokens:
            raise ArtifactError(
                f"{cell_dir}: shards hold {self.tokens} tokens, the manifest says {cell.available_tokens}"
            )
        self._views = [reader.tokens_view for reader in self.readers]
        if self.has_sources:
            starts = [
                base + reader.pointers // self.dtype.itemsize
                for base, reader in zip(self.shard_starts[:-1], self.readers)
            ]
            self.document_starts = np.concatenate(starts).astype(np.int64) if starts else np.zeros(0, np.int64)
            self.document_sources = np.concatenate(source_ids).astype(np.int32)

    def window_into(self, out: np.ndarray, sequence: int) -> None:
        """Copy window `sequence` (seq_len + 1 tokens) into `out`."""
        start = sequence * self.seq_len
        stop = start + self.seq_len + 1
        shard = int(np.searchsorted(self.shard_starts, start, side="right")) - 1
        base = int(self.shard_starts[shard])
        if stop <= self.shard_starts[shard + 1]:
            out[:] = self._views[shard][start - base : stop - base]
            return
        filled = 0
        while filled < stop - start:  # the window spans shards
            base = int(self.shard_starts[shard])
            take = min(stop - start - filled, int(self.shard_starts[shard + 1]) - (start + filled))
            out[filled : filled + take] = self._views[shard][start + filled - base : start + filled - base + take]
            filled += take
            shard += 1

    def sources_into(self, out: np.ndarray, sequence: int) -> None:
        """Per-token source index of the first seq_len tokens of window `sequence`."""
        start = sequence * self.seq_len
        stop = start + self.seq_len
        first = int(np.searchsorted(self.document_starts, start, side="right")) - 1
        last = int(np.searchsorted(self.document_starts, stop, side="left"))
        edges = np.clip(self.document_starts[first + 1 : last], start, stop) - start
        lengths = np.diff(np.concatenate([[0], edges, [stop - start]]))
        out[:] = np.repeat(self.document_sources[first:last], lengths)
