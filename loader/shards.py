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
        # Plain ndarray views of the memmaps: slicing them skips np.memmap's per-slice Python overhead.
        self._views = [np.asarray(reader.tokens_view) for reader in self.readers]
        if self.has_sources:
            starts = [
                base + reader.pointers // self.dtype.itemsize
                for base, reader in zip(self.shard_starts[:-1], self.readers)
            ]
            self.document_starts = np.concatenate(starts).astype(np.int64) if starts else np.zeros(0, np.int64)
            self.document_sources = np.concatenate(source_ids).astype(np.int32)

    def windows_into(self, out: np.ndarray, rows: np.ndarray, sequences: np.ndarray) -> None:
        """Copy window sequences[i] (seq_len + 1 tokens) into out[rows[i]]."""
        width = self.seq_len + 1
        starts = sequences.astype(np.int64) * self.seq_len
        shards = np.searchsorted(self.shard_starts, starts, side="right") - 1
        inside = (starts + width <= self.shard_starts[shards + 1]).tolist()
        bases = self.shard_starts.tolist()
        views = self._views
        for row, start, shard, whole in zip(rows.tolist(), starts.tolist(), shards.tolist(), inside):
            if whole:
                offset = start - bases[shard]
                out[row] = views[shard][offset : offset + width]
                continue
            filled = 0
            while filled < width:  # the window spans shards
                take = min(width - filled, bases[shard + 1] - (start + filled))
                offset = start + filled - bases[shard]
                out[row, filled : filled + take] = views[shard][offset : offset + take]
                filled += take
                shard += 1

    def source_pieces(self, rows: np.ndarray, sequences: np.ndarray, row_width: int) -> tuple[np.ndarray, np.ndarray]:
        """Where each document piece of these windows' first seq_len tokens starts, flat over rows of
        `row_width` tokens, and the source of each piece: the per-token sources are their run-length
        expansion."""
        length = self.seq_len
        starts = sequences.astype(np.int64) * length
        first = np.searchsorted(self.document_starts, starts, side="right") - 1
        inner = np.searchsorted(self.document_starts, starts + length, side="left") - first - 1
        row_base = rows.astype(np.int64) * row_width
        within = np.repeat(np.arange(rows.size), inner)
        documents = np.repeat(first + 1 - (np.cumsum(inner) - inner), inner) + np.arange(within.size)
        piece_starts = np.concatenate([row_base, row_base[within] + self.document_starts[documents] - starts[within]])
        piece_documents = np.concatenate([first, documents])
        return piece_starts, self.document_sources[piece_documents]
