"""`ValidationSequences`: the held-out sequences of a built manifest, always the same ones, in one order.

The manifest pins each cell's validation shards and each external evaluation set
(`BuiltManifest.validation`); none of them is ever drawn for training. An entry's
documents are concatenated in shard order (EOS after each) and cut like training samples,
into windows of seq_len + 1 tokens that overlap by one; the last window may be short and
is padded (its padded labels are -1). A cell gives at most `max_sequences` windows, from
its start; an external set is scored whole, every window (a set is chosen to be evaluated,
and its first windows alone would weigh its first documents only): the same tokens at every
evaluation, whatever the step, the rank or the world size. Entries come in name order, cells
first, then sets; row i of `rows(a, b)` is global
row a + i of that order, so any split of the rows over ranks reads the same sequences.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loader.packing import pack
from millrace.errors import ArtifactError, ConfigError
from mixtures.manifest import BuiltManifest, ManifestValidation, read_manifest, store_dir_of
from pipeline.store.format import SHARD_FILES, ShardInfo, ShardReader, sidecar, verify_shard
from pipeline.store.remote import remote_fs

PAD_LABEL = -1


class CellTokens:
    """An entry's held-out shards, checked in full against their chunk digests and read whole when opened
    (held-out data is small: a few shards per cell or set), with each document's start and source."""

    def __init__(self, directory: Path, pinned: ManifestValidation, dtype: np.dtype, seq_len: int, sources: bool):
        self.dtype = np.dtype(dtype)
        self.views: list[np.ndarray] = []
        starts, ids, sizes = [], [], [0]
        for shard in pinned.shards:
            prefix = directory / shard.name
            problems = verify_shard(
                prefix,
                ShardInfo(shard.name, shard.documents, shard.tokens, shard.digest),
                self.dtype,
                f"{pinned.directory} in the manifest",
            )
            if problems:
                raise ArtifactError(problems[0])
            reader = ShardReader(prefix, self.dtype)
            self.views.append(np.asarray(reader.tokens_view))
            starts.append(sum(sizes) + reader.pointers // self.dtype.itemsize)
            ids.append(reader.source_ids())
            sizes.append(reader.tokens)
        self.shard_starts = np.cumsum(sizes, dtype=np.int64)
        self.tokens = int(self.shard_starts[-1])
        self.has_sources = sources and bool(pinned.shards)
        self.document_starts = np.concatenate(starts).astype(np.int64) if starts else np.zeros(0, np.int64)
        self.document_sources = np.concatenate(ids) if ids else np.zeros(0, np.uint16)


@dataclass(frozen=True)
class ValidationEntry:
    name: str
    kind: str  # "cell" or "set"
    sequences: int  # windows evaluated (a cell's at most max_sequences, a set's all)
    tokens: int  # held-out tokens in the entry


@dataclass(frozen=True)
class ValidationRows:
    """Rows [start, stop) of the validation order, as model inputs."""

    input_ids: np.ndarray  # int64 [n, L]
    labels: np.ndarray  # int64 [n, L]; PAD_LABEL past the end of a short last window
    segment_ids: np.ndarray  # int32 [n, L]
    positions: np.ndarray  # int32 [n, L]
    entry_ids: np.ndarray  # int64 [n], index into ValidationSequences.entries
    label_sources: np.ndarray | None  # int32 [n, L]: source index of each label's document


def entry_order(manifest: BuiltManifest) -> list[ManifestValidation]:
    """Cells first, then external sets, each in name order."""
    return sorted(manifest.validation.values(), key=lambda entry: (entry.kind != "cell", entry.name))


def fetch_held_out(
    manifest_path: Path | str, store_url: str, storage_options: Mapping[str, object] | None = None
) -> int:
    """Download the held-out shards `manifest_path` pins from the store at `store_url` into the store directory
    beside the manifest, where `ValidationSequences` reads them (and checks them whole against the manifest's
    digests). A trainer node whose home holds only the store's manifests (a store published at an `[output]
    url`) then evaluates on the same tokens; held-out data is a few shards a cell. Files already there are kept
    (a bad one is named by the check); each download is renamed into place whole. Returns the bytes fetched."""
    path = Path(manifest_path)
    manifest, _ = read_manifest(path)
    store_dir = store_dir_of(path)
    fs, root = remote_fs(store_url, storage_options)
    fetched = 0
    for pinned in entry_order(manifest):
        for shard in pinned.shards:
            for suffix in (*SHARD_FILES, ".xxh"):
                local = sidecar(store_dir / pinned.directory / shard.name, suffix)
                if local.exists():
                    continue
                remote = f"{root}/{local.relative_to(store_dir).as_posix()}"
                local.parent.mkdir(parents=True, exist_ok=True)
                partial = local.with_name(f"{local.name}.{os.getpid()}.partial")  # ranks on one node fetch at once
                try:
                    fs.get_file(remote, str(partial))
                except FileNotFoundError:
                    raise ArtifactError(f"{fs.unstrip_protocol(remote)}: missing (pinned by {path})") from None
                os.replace(partial, local)
                fetched += local.stat().st_size
    return fetched


class ValidationSequences:
    """Deterministic held-out windows of one built manifest (see the module docstring)."""

    def __init__(self, manifest_path: Path | str, max_sequences: int, sources: bool = True):
        if max_sequences < 1:
            raise ConfigError(f"max_sequences = {max_sequences}: need at least 1")
        self.path = Path(manifest_path)
        self.manifest, self.manifest_hash = read_manifest(self.path)
        if self.manifest.store.stats_only:
            raise ArtifactError(f"{self.path}: stats-only manifest has no held-out tokens")
        self.seq_len = self.manifest.seq_len
        self.eos_id = self.manifest.eos_id
        self.dtype = np.dtype(self.manifest.dtype or "uint16")
        store_dir = store_dir_of(self.path)
        self.entries: list[ValidationEntry] = []
        self._tokens: list[CellTokens] = []
        for pinned in entry_order(self.manifest):
            opened = CellTokens(store_dir / pinned.directory, pinned, self.dtype, self.seq_len, sources)
            windows = -(-(opened.tokens - 1) // self.seq_len) if opened.tokens > 1 else 0
            if not windows:
                continue
            evaluated = windows if pinned.kind == "set" else min(windows, max_sequences)
            self.entries.append(ValidationEntry(pinned.name, pinned.kind, evaluated, opened.tokens))
            self._tokens.append(opened)
        self.has_sources = sources and bool(self._tokens) and all(t.has_sources for t in self._tokens)
        counts = np.asarray([entry.sequences for entry in self.entries], dtype=np.int64)
        self._first_row = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.total = int(self._first_row[-1])

    @property
    def without_held_out(self) -> list[str]:
        """Cells the mixture trains on (a sample in some phase) that have no held-out sequence: absent
        from the evaluation and its averages, so the record names them."""
        evaluated = {entry.name for entry in self.entries if entry.kind == "cell"}
        trained = {cell for phase in self.manifest.phases for cell, count in phase.counts.items() if count}
        return sorted(trained - evaluated)

    def rows(self, start: int, stop: int) -> ValidationRows:
        if not 0 <= start <= stop <= self.total:
            raise ConfigError(f"validation rows [{start}, {stop}) are outside [0, {self.total})")
        width = self.seq_len + 1
        rows = np.arange(start, stop, dtype=np.int64)
        entry_ids = np.searchsorted(self._first_row, rows, side="right") - 1
        windows = np.zeros((rows.size, width), dtype=self.dtype)
        lengths = np.zeros(rows.size, dtype=np.int64)
        sources = np.zeros((rows.size, self.seq_len), dtype=np.int32) if self.has_sources else None
        for i, (row, entry) in enumerate(zip(rows.tolist(), entry_ids.tolist())):
            cell = self._tokens[entry]
            first = (row - int(self._first_row[entry])) * self.seq_len
            last = min(first + width, cell.tokens)
            windows[i, : last - first] = read_span(cell, first, last)
            lengths[i] = last - first
            if sources is not None:
                sources[i, : last - first - 1] = span_sources(cell, first + 1, last)
        packed = pack(windows, self.eos_id)
        labels = packed.labels.copy()  # padded below: a view would write into the ids too
        labels[np.arange(self.seq_len)[None, :] >= (lengths - 1)[:, None]] = PAD_LABEL
        return ValidationRows(packed.input_ids, labels, packed.segment_ids, packed.positions, entry_ids, sources)

    def head(self, entry: int, max_tokens: int) -> np.ndarray:
        """The start of an entry's first held-out document (up to its EOS or `max_tokens`), for prompts."""
        cell = self._tokens[entry]
        span = read_span(cell, 0, min(max_tokens, cell.tokens))
        ends = np.flatnonzero(span == self.eos_id) if self.eos_id is not None else np.zeros(0, dtype=np.int64)
        return np.asarray(span[: int(ends[0])] if ends.size else span)


def read_span(cell: CellTokens, start: int, stop: int) -> np.ndarray:
    """Tokens [start, stop) of a cell's concatenated shards."""
    out = np.empty(stop - start, dtype=cell.dtype)
    filled = 0
    shard = int(np.searchsorted(cell.shard_starts, start, side="right") - 1)
    while filled < out.size:
        base = int(cell.shard_starts[shard])
        offset = start + filled - base
        take = min(out.size - filled, int(cell.shard_starts[shard + 1]) - base - offset)
        out[filled : filled + take] = cell.views[shard][offset : offset + take]
        filled += take
        shard += 1
    return out


def span_sources(cell: CellTokens, start: int, stop: int) -> np.ndarray:
    """The source index of the document that holds each token in [start, stop)."""
    documents = np.searchsorted(cell.document_starts, np.arange(start, stop), side="right") - 1
    return cell.document_sources[documents].astype(np.int32)
