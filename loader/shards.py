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
from pipeline.store.format import ShardReader


def _sidecar(prefix: Path, suffix: str) -> Path:
    return prefix.with_name(prefix.name + suffix)


class CellTokens:
    """Token windows of one cell: window s is tokens [s * seq_len, s * seq_len + seq_len + 1).

    Keeps only the shards' token memmaps and, when per-token sources are wanted, each
    document's start and source (12 bytes per document); the document index itself is
    dropped once checked.
    """

    def __init__(self, cell_dir: Path, cell: ManifestCell, dtype: np.dtype, seq_len: int, sources: bool = True):
        self.name = cell.name
        self.seq_len = seq_len
        self.dtype = np.dtype(dtype)
        self.has_sources = sources and bool(cell.shards) and all(shard.src_sha256 for shard in cell.shards)
        self.views: list[np.ndarray] = []
        sizes: list[int] = []
        document_starts: list[np.ndarray] = []
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
                document_starts.append(sum(sizes) + reader.pointers // self.dtype.itemsize)
            # A plain ndarray view of the memmap: slicing it skips np.memmap's per-slice Python overhead.
            self.views.append(np.asarray(reader.tokens_view))
            sizes.append(reader.tokens)
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        self.tokens = int(self.shard_starts[-1])
        if self.tokens != cell.available_tokens:
            raise ArtifactError(
                f"{cell_dir}: shards hold {self.tokens} tokens, the manifest says {cell.available_tokens}"
            )
        if self.has_sources:
            self.document_starts = np.concatenate(document_starts).astype(np.int64)
            self.document_sources = np.concatenate(source_ids)


class TokenSpace:
    """All opened cells laid end to end in one virtual token space, so that a batch's windows and
    per-token sources are found with one vectorised search, whatever mix of cells it draws from.

    Cell c occupies [cell_base[c], cell_base[c] + tokens); a window never leaves its cell, because
    sequence s of a cell ends at most at its last token (`sequences_available` guarantees it).
    """

    def __init__(self, cells: list[CellTokens | None], seq_len: int, dtype: np.dtype, sources: bool):
        self.seq_len = seq_len
        self.dtype = np.dtype(dtype)
        sizes = np.asarray([0 if cell is None else cell.tokens for cell in cells], dtype=np.int64)
        self.cell_base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        opened = [(base, cell) for base, cell in zip(self.cell_base.tolist(), cells) if cell is not None]
        self.views = [view for _, cell in opened for view in cell.views]
        starts = [base + cell.shard_starts[:-1] for base, cell in opened]
        self.shard_starts = np.concatenate(starts + [[int(sizes.sum())]]).astype(np.int64)
        self._bases = self.shard_starts.tolist()
        if sources:  # moved out of the cells, so that each document is held once
            self.document_starts = np.concatenate([base + cell.document_starts for base, cell in opened])
            self.document_sources = np.concatenate([cell.document_sources for _, cell in opened])
            for _, cell in opened:
                del cell.document_starts, cell.document_sources

    def windows(self, cell_ids: np.ndarray, sequences: np.ndarray) -> np.ndarray:
        """[n, seq_len + 1] tokens: window sequences[i] of cell cell_ids[i]."""
        width = self.seq_len + 1
        out = np.empty((cell_ids.size, width), dtype=self.dtype)
        starts = self.cell_base[cell_ids] + sequences * self.seq_len
        shards = np.searchsorted(self.shard_starts, starts, side="right") - 1
        inside = (starts + width <= self.shard_starts[shards + 1]).tolist()
        bases, views = self._bases, self.views
        for row, (start, shard, whole) in enumerate(zip(starts.tolist(), shards.tolist(), inside)):
            if whole:
                offset = start - bases[shard]
                out[row] = views[shard][offset : offset + width]
                continue
            filled = 0
            while filled < width:  # the window spans shards of its cell
                take = min(width - filled, bases[shard + 1] - (start + filled))
                offset = start + filled - bases[shard]
                out[row, filled : filled + take] = views[shard][offset : offset + take]
                filled += take
                shard += 1
        return out

    def sources(self, cell_ids: np.ndarray, sequences: np.ndarray) -> np.ndarray:
        """[n, seq_len] int32: the source index of the document each input token comes from."""
        length, rows = self.seq_len, cell_ids.size
        starts = self.cell_base[cell_ids] + sequences * length
        first = np.searchsorted(self.document_starts, starts, side="right") - 1
        pieces = np.searchsorted(self.document_starts, starts + length, side="left") - first  # documents per row
        row_of = np.repeat(np.arange(rows), pieces)
        documents = np.arange(row_of.size) - np.repeat(np.cumsum(pieces) - pieces - first, pieces)
        offsets = np.maximum(self.document_starts[documents] - starts[row_of], 0) + row_of * length
        lengths = np.diff(np.append(offsets, rows * length))
        return np.repeat(self.document_sources[documents].astype(np.int32), lengths).reshape(rows, length)
