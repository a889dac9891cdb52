"""The token store's format: light enough for `mixtures/` and `loader/` to import.

A store version is a directory:

    store.json                 StoreManifest (kind "millrace.store")
    tokenizer/tokenizer.json   the tokenizer the cells were written with (absent if stats-only)
    cells/<cell>/cell.json     CellManifest (kind "millrace.cell")
    cells/<cell>/<shard>.bin   token ids, Megatron indexed-dataset layout
    cells/<cell>/<shard>.idx   document index, Megatron indexed-dataset layout
    cells/<cell>/validation-<n>.bin/.idx/.src   the cell's held-out documents, same layout
    sets/<name>/set.json       EvalSetManifest (kind "millrace.eval-set"): an external evaluation set
    sets/<name>/set-<n>.bin/.idx/.src   its documents, same layout

The `.bin/.idx` pair is byte-compatible with megatron-core's `IndexedDataset`: an
`.idx` holds the header `MMIDIDX\\x00\\x00`, version 1, a dtype code, the sequence
and document counts, int32 sequence lengths, int64 byte pointers and int64 document
indices. Megatron has no uint32 code, so vocabularies over 65,536 ids use int32.
No datatrove import here.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pydantic

from millrace.artifacts import atomic_output, read_artifact, sha256_file, write_artifact
from millrace.errors import ArtifactError

STORE_KIND = "millrace.store"
CELL_KIND = "millrace.cell"
SET_KIND = "millrace.eval-set"
SCHEMA_VERSION = 1

INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 while every id fits, else int32 (the widest integer code Megatron reads)."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


class Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class SourceCounts(Model):
    documents: int = 0
    tokens: int = 0
    bytes: int = 0


class ShardInfo(Model):
    """One `.bin/.idx` pair; `name` is the path prefix relative to the cell directory."""

    name: str
    documents: int
    tokens: int
    bin_bytes: int
    bin_sha256: str
    idx_sha256: str
    # `<name>.src`: one uint16 per document, an index into StoreManifest.sources.
    src_sha256: str | None = None


class HeldOut(Model):
    """Documents held out of training for evaluation, in shards of the training shards' format."""

    documents: int = 0
    tokens: int = 0
    bytes: int = 0
    shards: list[ShardInfo] = []
    sources: dict[str, SourceCounts] = {}


class CellManifest(Model):
    cell: str
    dtype: str
    tokenizer_fingerprint: str
    documents: int
    tokens: int
    bytes: int
    shards: list[ShardInfo]
    sources: dict[str, SourceCounts] = {}
    # Free-form statistics filled by later stages: score range, domain label, samples.
    stats: dict = {}
    # The validation split (never in `shards`; `documents`/`tokens`/`bytes` above count training only).
    validation: HeldOut = pydantic.Field(default_factory=HeldOut, exclude_if=lambda v: not v.documents)


class CellSummary(Model):
    documents: int = 0  # training documents (held-out ones are counted apart)
    tokens: int
    bytes: int = 0
    # held-out counts; left out of the file when zero, so stores without a split keep their hashes
    validation_documents: int = pydantic.Field(0, exclude_if=lambda v: not v)
    validation_tokens: int = pydantic.Field(0, exclude_if=lambda v: not v)
    manifest_hash: str | None = None  # content hash of cells/<cell>/cell.json; None if stats-only


class EvalSetSummary(Model):
    """An external evaluation set in the store (`sets/<name>/set.json`)."""

    documents: int
    tokens: int
    bytes: int
    manifest_hash: str
    overlap_exact: int = 0  # its documents that the store's cells also hold, token for token
    overlap_near: int = 0  # ... as near duplicates


class EvalSetManifest(Model):
    """`sets/<name>/set.json` (kind "millrace.eval-set"): the set's shards and its overlap with the cells."""

    name: str
    dtype: str
    tokenizer_fingerprint: str
    held: HeldOut
    overlap: dict  # {"exact": n, "near": n, "documents": [{"index", "kind", "cell"}, ...]}


class TokenizerInfo(Model):
    fingerprint: str
    vocab_size: int
    eos_id: int
    path: str | None = "tokenizer/tokenizer.json"


class StoreManifest(Model):
    name: str
    version: str
    stats_only: bool = False
    dtype: str | None = None
    tokenizer: TokenizerInfo | None = None
    cells: dict[str, CellSummary]
    # Source names; a shard's `.src` sidecar holds indices into this list.
    sources: list[str] = []
    pipeline_config: dict = {}
    config_hash: str | None = None
    # Per stage, per source: received/kept/removed counts and reasons (see pipeline stats).
    funnel: dict = {}
    # Store-level statistics from later stages (domain labels, bucket score ranges, ...).
    stats: dict = {}
    # External evaluation sets under sets/<name>/ (left out of the file when there are none).
    sets: dict[str, EvalSetSummary] = pydantic.Field(default_factory=dict, exclude_if=lambda v: not v)


class Store:
    """A store version opened for reading; checks schemas and hashes as it goes."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        body = read_artifact(self.path / "store.json", STORE_KIND, (SCHEMA_VERSION,))
        self.manifest_hash: str = body["content_hash"]
        self.manifest = StoreManifest.model_validate(
            {k: v for k, v in body.items() if k not in ("kind", "schema_version", "content_hash")}
        )

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    def cell_dir(self, cell: str) -> Path:
        return self.path / "cells" / cell

    def cell(self, cell: str) -> CellManifest:
        if cell not in self.manifest.cells:
            raise ArtifactError(f"{self.path}: store has no cell {cell!r}")
        if self.manifest.stats_only:
            raise ArtifactError(f"{self.path}: stats-only store has no shards for cell {cell!r}")
        path = self.cell_dir(cell) / "cell.json"
        body = read_artifact(path, CELL_KIND, (SCHEMA_VERSION,))
        expected = self.manifest.cells[cell].manifest_hash
        if expected is not None and body["content_hash"] != expected:
            raise ArtifactError(f"{path}: hash {body['content_hash']} differs from store.json's {expected}")
        return CellManifest.model_validate(
            {k: v for k, v in body.items() if k not in ("kind", "schema_version", "content_hash")}
        )

    def eval_set(self, name: str) -> EvalSetManifest:
        if name not in self.manifest.sets:
            raise ArtifactError(f"{self.path}: store has no evaluation set {name!r}")
        path = self.path / "sets" / name / "set.json"
        body = read_artifact(path, SET_KIND, (SCHEMA_VERSION,))
        if body["content_hash"] != self.manifest.sets[name].manifest_hash:
            raise ArtifactError(f"{path}: hash {body['content_hash']} differs from store.json's "
                                f"{self.manifest.sets[name].manifest_hash}")
        return EvalSetManifest.model_validate(
            {k: v for k, v in body.items() if k not in ("kind", "schema_version", "content_hash")})

    def shard_prefix(self, cell: str, shard: ShardInfo) -> Path:
        return self.cell_dir(cell) / shard.name

    def verify(self) -> list[str]:
        """Full content check; returns one message per failing file (empty when all is well)."""
        problems: list[str] = []
        if self.manifest.stats_only:
            return problems
        for cell_name in self.manifest.cells:
            try:
                cell = self.cell(cell_name)
            except ArtifactError as exc:
                problems.append(str(exc))
                continue
            for shard in [*cell.shards, *cell.validation.shards]:
                problems += shard_problems(self.shard_prefix(cell_name, shard), shard, np.dtype(cell.dtype),
                                           f"{cell_name}/cell.json")
        for name in self.manifest.sets:
            try:
                eval_set = self.eval_set(name)
            except ArtifactError as exc:
                problems.append(str(exc))
                continue
            for shard in eval_set.held.shards:
                problems += shard_problems(self.path / "sets" / name / shard.name, shard, np.dtype(eval_set.dtype),
                                           f"sets/{name}/set.json")
        return problems


def shard_problems(prefix: Path, shard: ShardInfo, dtype: np.dtype, owner: str) -> list[str]:
    """What is wrong with one shard against the manifest (`owner`) that lists it."""
    problems = []
    for suffix, expected in ((".bin", shard.bin_sha256), (".idx", shard.idx_sha256)):
        file = prefix.with_name(prefix.name + suffix)
        if not file.exists():
            problems.append(f"{file}: missing")
        elif sha256_file(file) != expected:
            problems.append(f"{file}: checksum mismatch (expected {expected})")
    if problems:
        return problems
    try:
        reader = ShardReader(prefix, dtype)
        if (reader.documents, reader.tokens) != (shard.documents, shard.tokens):
            problems.append(f"{prefix}.idx: counts differ from {owner}")
    except ArtifactError as exc:
        problems.append(str(exc))
    return problems


def write_store_manifest(path: Path | str, manifest: StoreManifest) -> str:
    return write_artifact(Path(path) / "store.json", STORE_KIND, SCHEMA_VERSION, manifest.model_dump(mode="json"))


def write_eval_set_manifest(set_dir: Path | str, manifest: EvalSetManifest) -> str:
    return write_artifact(Path(set_dir) / "set.json", SET_KIND, SCHEMA_VERSION, manifest.model_dump(mode="json"))


def write_cell_manifest(cell_dir: Path | str, manifest: CellManifest) -> str:
    return write_artifact(Path(cell_dir) / "cell.json", CELL_KIND, SCHEMA_VERSION, manifest.model_dump(mode="json"))


class ShardWriter:
    """Writes one `.bin/.idx` pair; both appear (by rename) only when `close()` succeeds."""

    def __init__(self, prefix: Path | str, dtype: np.dtype):
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPE_CODES:
            raise ValueError(f"unsupported token dtype {self.dtype}")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin_tmp = self.prefix.with_name(f".{self.prefix.name}.bin.tmp")
        self._bin = open(self._bin_tmp, "wb")
        self._lengths: list[int] = []
        self._sources: list[int] = []

    def add_document(self, tokens: np.ndarray | Iterable[int], source_id: int = 0) -> None:
        array = np.asarray(tokens, dtype=self.dtype)
        self._bin.write(array.tobytes(order="C"))
        self._lengths.append(int(array.size))
        self._sources.append(source_id)

    def close(self) -> ShardInfo:
        self._bin.flush()
        os.fsync(self._bin.fileno())
        self._bin.close()
        lengths = np.asarray(self._lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        doc_index = np.arange(len(lengths) + 1, dtype=np.int64)
        idx_path = self.prefix.with_name(self.prefix.name + ".idx")
        with atomic_output(idx_path) as handle:
            handle.write(INDEX_HEADER)
            handle.write(struct.pack("<Q", INDEX_VERSION))
            handle.write(struct.pack("<B", DTYPE_CODES[self.dtype]))
            handle.write(struct.pack("<Q", len(lengths)))
            handle.write(struct.pack("<Q", len(doc_index)))
            handle.write(lengths.tobytes())
            handle.write(pointers.tobytes())
            handle.write(doc_index.tobytes())
        src_path = self.prefix.with_name(self.prefix.name + ".src")
        with atomic_output(src_path) as handle:
            handle.write(np.asarray(self._sources, dtype=np.uint16).tobytes())
        bin_path = self.prefix.with_name(self.prefix.name + ".bin")
        os.replace(self._bin_tmp, bin_path)
        return ShardInfo(
            name=self.prefix.name,
            documents=len(lengths),
            tokens=int(lengths.sum(dtype=np.int64)),
            bin_bytes=bin_path.stat().st_size,
            bin_sha256=sha256_file(bin_path),
            idx_sha256=sha256_file(idx_path),
            src_sha256=sha256_file(src_path),
        )

    def abort(self) -> None:
        self._bin.close()
        self._bin_tmp.unlink(missing_ok=True)


class ShardReader:
    """Memory-maps one `.bin/.idx` pair; structural problems name the file."""

    def __init__(self, prefix: Path | str, dtype: np.dtype | None = None):
        self.prefix = Path(prefix)
        idx_path = self.prefix.with_name(self.prefix.name + ".idx")
        bin_path = self.prefix.with_name(self.prefix.name + ".bin")
        for file in (idx_path, bin_path):
            if not file.exists():
                raise ArtifactError(f"{file}: missing shard file")
        raw = idx_path.read_bytes()
        header_size = len(INDEX_HEADER) + 8 + 1 + 8 + 8
        if len(raw) < header_size or raw[: len(INDEX_HEADER)] != INDEX_HEADER:
            raise ArtifactError(f"{idx_path}: not a Megatron indexed-dataset index (bad header or truncated)")
        offset = len(INDEX_HEADER)
        (version,) = struct.unpack_from("<Q", raw, offset)
        (code,) = struct.unpack_from("<B", raw, offset + 8)
        sequences, documents = struct.unpack_from("<QQ", raw, offset + 9)
        if version != INDEX_VERSION or code not in CODE_DTYPES:
            raise ArtifactError(f"{idx_path}: unsupported index version {version} or dtype code {code}")
        self.dtype = CODE_DTYPES[code]
        if dtype is not None and np.dtype(dtype) != self.dtype:
            raise ArtifactError(f"{idx_path}: dtype {self.dtype} differs from the manifest's {np.dtype(dtype)}")
        expected = header_size + sequences * (4 + 8) + documents * 8
        if len(raw) != expected:
            raise ArtifactError(f"{idx_path}: {len(raw)} bytes, expected {expected} (truncated or padded)")
        body = header_size
        self.lengths = np.frombuffer(raw, dtype=np.int32, count=sequences, offset=body)
        self.pointers = np.frombuffer(raw, dtype=np.int64, count=sequences, offset=body + 4 * sequences)
        self.documents = int(sequences)
        self.tokens = int(self.lengths.sum(dtype=np.int64))
        size = bin_path.stat().st_size
        if size != self.tokens * self.dtype.itemsize:
            raise ArtifactError(
                f"{bin_path}: {size} bytes, index says {self.tokens * self.dtype.itemsize} (truncated or altered)"
            )
        self.tokens_view = (
            np.memmap(bin_path, dtype=self.dtype, mode="r") if size else np.zeros(0, dtype=self.dtype)
        )

    def source_ids(self) -> np.ndarray:
        """Per-document source index (zeros when the shard has no `.src` sidecar)."""
        src = self.prefix.with_name(self.prefix.name + ".src")
        if not src.exists():
            return np.zeros(self.documents, dtype=np.uint16)
        ids = np.fromfile(src, dtype=np.uint16)
        if ids.size != self.documents:
            raise ArtifactError(f"{src}: {ids.size} entries for {self.documents} documents")
        return ids

    def document(self, index: int) -> np.ndarray:
        start = int(self.pointers[index]) // self.dtype.itemsize
        return np.asarray(self.tokens_view[start : start + int(self.lengths[index])])

    def __iter__(self) -> Iterator[np.ndarray]:
        for index in range(self.documents):
            yield self.document(index)


def write_stats_only_store(path: Path | str, name: str, version: str, available_tokens: dict[str, int]) -> str:
    """A store of token counts and no shards: for planning at a scale this machine can't hold."""
    cells = {cell: CellSummary(tokens=int(tokens)) for cell, tokens in sorted(available_tokens.items())}
    return write_store_manifest(path, StoreManifest(name=name, version=version, stats_only=True, cells=cells))
