"""The token store's format: light enough for `mixtures/` and `loader/` to import.

A store version is a directory (or the same tree at an fsspec URL):

    store.json                 StoreManifest (kind "millrace.store")
    tokenizer/tokenizer.json   the tokenizer the cells were written with (absent if stats-only)
    cells/<cell>/cell.json     CellManifest (kind "millrace.cell"), with the cell's shard table
    cells/<cell>/<shard>.bin   token ids, Megatron indexed-dataset layout
    cells/<cell>/<shard>.idx   document index, Megatron indexed-dataset layout
    cells/<cell>/<shard>.src   one uint16 per document: its index into StoreManifest.sources
    cells/<cell>/<shard>.xxh   chunk digests of the three files above (`ShardDigests`)
    cells/<cell>/validation-<n>.bin/.idx/.src   the cell's held-out documents, same layout
    sets/<name>/set.json       EvalSetManifest (kind "millrace.eval-set"): an external evaluation set
    sets/<name>/set-<n>.bin/.idx/.src   its documents, same layout

The `.bin/.idx` pair is byte-compatible with megatron-core's `IndexedDataset`: an
`.idx` holds the header `MMIDIDX\\x00\\x00`, version 1, a dtype code, the sequence
and document counts, int32 sequence lengths, int64 byte pointers and int64 document
indices. Megatron has no uint32 code, so vocabularies over 65,536 ids use int32.

The tokenizer, the fitted models and the trace parts are pinned too: store.json holds the
tokenizer's sha256 (`TokenizerInfo.fingerprint`) and the models' (`files`), each cell.json its
trace parts' sha256; `Store.verify` checks
them, and readers parse the tokenizer only through `Store.tokenizer` (`store_tokenizer`).

Integrity without reading a whole shard: every file is cut into chunks of 64 KiB, each
with an xxh3-64 digest in the shard's `.xxh` sidecar, whose own xxh3-128
digest is in the cell's shard table. A reader checks a chunk the first time it reads from
it (cost proportional to the bytes read); `Store.verify` checks every chunk of every file.
The shard table is columnar (a few numbers per shard, not one object), so a cell of 2,000
shards is about 120 KB and a built manifest pins it by the cell manifest's content hash.
No datatrove import here.
"""

from __future__ import annotations

import array
import hashlib
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pydantic
import xxhash

from millrace.artifacts import atomic_output, read_envelope, sha256_file, write_artifact
from millrace.config import StrictModel
from millrace.errors import ArtifactError
from millrace.names import artifact_name
from pipeline.store.config_record import PipelineRecord
from pipeline.store.manifest_records import CellStats, Counts, Funnel, Overlap, StoreStats

if TYPE_CHECKING:  # tokenizers loads when a tokenizer is read, not with the store's format
    from tokenizers import Tokenizer

STORE_KIND = "millrace.store"
CELL_KIND = "millrace.cell"
SET_KIND = "millrace.eval-set"
SCHEMA_VERSION = 1  # store.json
CELL_SCHEMA_VERSION = 2  # cell.json: columnar shard table, chunk digests in `.xxh` sidecars

INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
INDEX_PREFIX_BYTES = len(INDEX_HEADER) + 8 + 1 + 8 + 8  # header, version, dtype code, two counts
DTYPE_CODES: dict[np.dtype, int] = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
CODE_DTYPES: dict[int, np.dtype] = {code: dtype for dtype, code in DTYPE_CODES.items()}
# A reader verifies whole chunks, so the chunk bounds what one read costs: a window of 4,096 int32 tokens
# is 16 KiB, a binary search over an `.idx` reads 8 bytes at a time. 64 KiB chunks keep that overhead
# small (4 MiB chunks made a first batch read and hash 256 MB on a 100M-document store) for 8 bytes of
# digest per 64 KiB (0.012%); remote readers fetch many chunks per request.
CHUNK_BYTES = 64 << 10
INDEX_CHUNK_BYTES = 64 << 10
CHUNKS = {".bin": CHUNK_BYTES, ".idx": INDEX_CHUNK_BYTES, ".src": INDEX_CHUNK_BYTES}
DIGESTS_MAGIC = b"MRXXH3\x00\x01"
SHARD_FILES = (".bin", ".idx", ".src")


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 while every id fits, else int32 (the widest integer code Megatron reads)."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def index_size(documents: int) -> int:
    """Bytes of the `.idx` of a shard of `documents` documents."""
    return INDEX_PREFIX_BYTES + documents * (4 + 8) + (documents + 1) * 8


def parse_index_header(raw: bytes, where: str) -> tuple[np.dtype, int, int]:
    """(dtype, sequences, document-index entries) from the first INDEX_PREFIX_BYTES of an `.idx`."""
    if len(raw) < INDEX_PREFIX_BYTES or raw[: len(INDEX_HEADER)] != INDEX_HEADER:
        raise ArtifactError(f"{where}: not a Megatron indexed-dataset index (bad header or truncated)")
    offset = len(INDEX_HEADER)
    (version,) = struct.unpack_from("<Q", raw, offset)
    (code,) = struct.unpack_from("<B", raw, offset + 8)
    sequences, documents = struct.unpack_from("<QQ", raw, offset + 9)
    if version != INDEX_VERSION or code not in CODE_DTYPES:
        raise ArtifactError(f"{where}: unsupported index version {version} or dtype code {code}")
    return CODE_DTYPES[code], int(sequences), int(documents)


def chunk_digests(data: np.ndarray | bytes, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """xxh3-64 of each `chunk_bytes` piece of `data` (uint64, one per chunk; none for empty data)."""
    view = (data.data if isinstance(data, np.ndarray) else memoryview(data)).cast("B")
    return np.asarray(
        [xxhash.xxh3_64_intdigest(view[i : i + chunk_bytes]) for i in range(0, len(view), chunk_bytes)],
        dtype=np.uint64,
    )


def file_digests(path: Path, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    with open(path, "rb") as handle:
        return np.asarray(
            [xxhash.xxh3_64_intdigest(block) for block in iter(lambda: handle.read(chunk_bytes), b"")], dtype=np.uint64
        )


def digest_hex(raw: bytes) -> str:
    """The digest a shard table records for a shard's `.xxh` sidecar."""
    return xxhash.xxh3_128_hexdigest(raw)


@dataclass(frozen=True)
class FileDigests:
    chunk_bytes: int
    digests: np.ndarray  # uint64, one per chunk


@dataclass(frozen=True)
class ShardDigests:
    """A shard's `.xxh` sidecar: for `.bin`, `.idx` and `.src`, the chunk size and each chunk's digest."""

    bin: FileDigests
    idx: FileDigests
    src: FileDigests

    def files(self) -> tuple[FileDigests, FileDigests, FileDigests]:
        return self.bin, self.idx, self.src

    def to_bytes(self) -> bytes:
        head = b"".join(struct.pack("<QQ", f.chunk_bytes, f.digests.size) for f in self.files())
        return DIGESTS_MAGIC + head + np.concatenate([f.digests for f in self.files()]).astype("<u8").tobytes()

    @classmethod
    def parse(cls, raw: bytes, where: str) -> ShardDigests:
        head = len(DIGESTS_MAGIC) + 48
        if len(raw) < head or raw[: len(DIGESTS_MAGIC)] != DIGESTS_MAGIC:
            raise ArtifactError(f"{where}: not a millrace chunk-digest file")
        fields = struct.unpack_from("<QQQQQQ", raw, len(DIGESTS_MAGIC))
        sizes, counts = fields[0::2], fields[1::2]
        if len(raw) != head + 8 * sum(counts) or min(sizes) < 1:
            raise ArtifactError(f"{where}: {len(raw)} bytes do not match its counts (truncated or padded)")
        values = np.frombuffer(raw, dtype="<u8", offset=head)
        bounds = np.cumsum([0, *counts])
        return cls(*(FileDigests(int(sizes[i]), values[bounds[i] : bounds[i + 1]]) for i in range(3)))

    @classmethod
    def of_files(cls, prefix: Path) -> ShardDigests:
        return cls(
            *(
                FileDigests(CHUNKS[suffix], file_digests(sidecar(prefix, suffix), CHUNKS[suffix]))
                for suffix in SHARD_FILES
            )
        )


def sidecar(prefix: Path, suffix: str) -> Path:
    return prefix.with_name(prefix.name + suffix)


class Model(StrictModel):
    """The store's records: strict like every artifact; not frozen (a store is assembled in place)."""

    model_config = pydantic.ConfigDict(frozen=False)


@dataclass(frozen=True)
class ShardInfo:
    """What `ShardWriter.close` reports: one row of a cell's shard table."""

    name: str  # path prefix relative to the cell directory
    documents: int
    tokens: int
    digest: str  # digest_hex of the shard's `.xxh` sidecar


class ShardTable(Model):
    """A cell's shards, column by column (row i is shard i, in stream order)."""

    names: list[str]
    documents: list[int]
    tokens: list[int]
    digests: list[str]  # digest_hex of each shard's `.xxh` sidecar
    sources: bool = True  # every shard has a `.src` sidecar

    @pydantic.model_validator(mode="after")
    def _same_length(self) -> ShardTable:
        if not len(self.names) == len(self.documents) == len(self.tokens) == len(self.digests):
            raise ValueError("shard table columns differ in length")
        return self

    @classmethod
    def of(cls, shards: list[ShardInfo]) -> ShardTable:
        return cls(
            names=[s.name for s in shards],
            documents=[s.documents for s in shards],
            tokens=[s.tokens for s in shards],
            digests=[s.digest for s in shards],
        )

    def rows(self) -> Iterator[ShardInfo]:
        for row in zip(self.names, self.documents, self.tokens, self.digests):
            yield ShardInfo(*row)


class HeldOut(Model):
    """Documents held out of training for evaluation, in shards of the training shards' format."""

    documents: int = 0
    tokens: int = 0
    bytes: int = 0
    shards: list[ShardInfo] = []
    sources: dict[str, Counts] = {}


class CellManifest(Model):
    cell: str
    dtype: str
    tokenizer_fingerprint: str
    documents: int
    tokens: int
    bytes: int
    shards: ShardTable
    sources: dict[str, Counts] = {}
    # Filled by later phases: domain, bucket, label, score range, languages, samples, trace sidecars.
    stats: CellStats = pydantic.Field(default_factory=CellStats)
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
    contained: int = 0  # its documents whose n-grams are mostly in training: left out of its shards


class EvalSetManifest(Model):
    """`sets/<name>/set.json` (kind "millrace.eval-set"): the set's shards and its overlap with the cells."""

    name: str
    dtype: str
    tokenizer_fingerprint: str
    held: HeldOut
    overlap: Overlap


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
    # The config it was built from (None: a stats-only store, built from none; `{}` on disk, as before).
    pipeline_config: PipelineRecord | None = None
    config_hash: str | None = None
    # Per funnel step, per source: received/kept/removed counts and reasons (`{}` in a stats-only store).
    funnel: Funnel = pydantic.Field(default_factory=Funnel)
    # Store-level statistics from later phases (domain labels, quality buckets, decontamination).
    stats: StoreStats = pydantic.Field(default_factory=StoreStats)
    # External evaluation sets under sets/<name>/ (left out of the file when there are none).
    sets: dict[str, EvalSetSummary] = pydantic.Field(default_factory=dict, exclude_if=lambda v: not v)
    # Other files the store carries (the fitted models under models/): relative path -> sha256.
    files: dict[str, str] = pydantic.Field(default_factory=dict, exclude_if=lambda v: not v)

    @pydantic.field_validator("pipeline_config", mode="before")
    @classmethod
    def _none_when_empty(cls, value: object) -> object:
        return None if value == {} else value

    @pydantic.field_serializer("pipeline_config")
    def _empty_when_none(self, value: PipelineRecord | None, info: pydantic.SerializationInfo) -> object:
        """`{}` for none, as stores were always written (shipped revisions pin stats-only stores' hashes)."""
        return {} if value is None else value.model_dump(mode=info.mode)


class Store:
    """A store version opened for reading; checks schemas and hashes as it goes."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        envelope = read_envelope(self.path / "store.json", STORE_KIND, (SCHEMA_VERSION,))
        self.manifest_hash = envelope.content_hash
        self.manifest = envelope.model(StoreManifest)
        artifact_name(self.manifest.name, "name", self.path / "store.json")  # pages and paths are made of them
        artifact_name(self.manifest.version, "version", self.path / "store.json")
        for cell in self.manifest.cells:  # a cell's name is a directory: a crafted one must not read outside
            artifact_name(cell, "cells", self.path / "store.json")
        for name in self.manifest.sets:
            artifact_name(name, "sets", self.path / "store.json")

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
        envelope = read_envelope(path, CELL_KIND, (CELL_SCHEMA_VERSION,))
        return envelope.pinned(self.manifest.cells[cell].manifest_hash, "store.json's").model(CellManifest)

    def eval_set(self, name: str) -> EvalSetManifest:
        if name not in self.manifest.sets:
            raise ArtifactError(f"{self.path}: store has no evaluation set {name!r}")
        path = self.path / "sets" / name / "set.json"
        envelope = read_envelope(path, SET_KIND, (CELL_SCHEMA_VERSION,))
        return envelope.pinned(self.manifest.sets[name].manifest_hash, "store.json's").model(EvalSetManifest)

    def shard_prefix(self, cell: str, shard: ShardInfo) -> Path:
        return self.cell_dir(cell) / shard.name

    def verify(self) -> list[str]:
        """Full content check: every chunk of every `.bin`, `.idx` and `.src` against its digest, the
        sidecars against the shard tables, the index structure against the counts. One message per
        failing file (empty when all is well)."""
        problems: list[str] = []
        if self.manifest.stats_only:
            return problems
        for cell_name in self.manifest.cells:
            try:
                cell = self.cell(cell_name)
            except ArtifactError as exc:
                problems.append(str(exc))
                continue
            for shard in [*cell.shards.rows(), *cell.validation.shards]:
                problems += verify_shard(
                    self.shard_prefix(cell_name, shard), shard, np.dtype(cell.dtype), f"{cell_name}/cell.json"
                )
        for name in self.manifest.sets:
            try:
                eval_set = self.eval_set(name)
            except ArtifactError as exc:
                problems.append(str(exc))
                continue
            for shard in eval_set.held.shards:
                problems += verify_shard(
                    self.path / "sets" / name / shard.name, shard, np.dtype(eval_set.dtype), f"sets/{name}/set.json"
                )
        problems += self.verify_pinned_files()
        return problems

    def pinned_files(self) -> list[tuple[Path, str, str]]:
        """The store's files other than shards, each with the digest pinned for it and where: the fitted models
        (store.json's `files`), the tokenizer (its fingerprint) and every cell's trace parts (cell.json's sha256
        per part)."""
        pinned = [
            (self.path / relative, digest, "store.json") for relative, digest in sorted(self.manifest.files.items())
        ]
        tokenizer = self.manifest.tokenizer
        if tokenizer is not None and tokenizer.path:
            pinned.append((self.path / tokenizer.path, tokenizer.fingerprint, "store.json"))
        for cell_name in self.manifest.cells:
            stats = self.cell(cell_name).stats
            for trace in (stats.trace, stats.held_out_trace):
                for part in trace.parts or [] if trace is not None else []:
                    pinned.append((self.cell_dir(cell_name) / part.file, part.sha256, f"{cell_name}/cell.json"))
        return pinned

    def verify_pinned_files(self) -> list[str]:
        """One message per pinned non-shard file that is missing or differs from its digest."""
        if self.manifest.stats_only:
            return []
        problems = []
        try:
            pinned = self.pinned_files()
        except ArtifactError:  # a damaged cell.json: already reported by the shard checks
            return []
        for path, expected, owner in pinned:
            if not path.exists():
                problems.append(f"{path}: missing")
            elif sha256_file(path) != expected:
                problems.append(f"{path}: sha256 differs from the one {owner} pins (altered or replaced)")
        return problems

    def tokenizer(self) -> Tokenizer:
        """The store's `tokenizers.Tokenizer`, parsed from bytes that match store.json's fingerprint (an
        altered tokenizer.json changes every decoded text and every bits-per-byte figure, silently)."""
        info = self.manifest.tokenizer
        if info is None or not info.path:
            raise ArtifactError(f"{self.path / 'store.json'}: the store names no tokenizer")
        path = self.path / info.path
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"{path}: the store's tokenizer is missing") from None
        if "sha256:" + hashlib.sha256(raw).hexdigest() != info.fingerprint:
            raise ArtifactError(
                f"{path}: differs from the fingerprint store.json pins (altered or replaced); "
                "run `millrace store verify`"
            )
        from tokenizers import Tokenizer  # lazy: heavy (tokenizers' Rust extension)

        return Tokenizer.from_str(raw.decode("utf-8"))


def store_tokenizer(store_dir: Path | str) -> Tokenizer:
    """The tokenizer of the store version at `store_dir`, checked against its store.json's fingerprint
    (`Store.tokenizer`): what the loader, evaluation and samples read tokenizers through."""
    return Store(store_dir).tokenizer()


def verify_shard(prefix: Path, shard: ShardInfo, dtype: np.dtype, owner: str) -> list[str]:
    """Problems with one shard's four files against the manifest (`owner`) that lists it, each naming its
    file (and a damaged chunk's byte range)."""
    digests_file = sidecar(prefix, ".xxh")
    try:
        raw = digests_file.read_bytes()
    except FileNotFoundError:
        return [f"{digests_file}: missing"]
    if digest_hex(raw) != shard.digest:
        return [f"{digests_file}: digest differs from {owner}'s (sidecar altered or replaced)"]
    try:
        recorded = ShardDigests.parse(raw, str(digests_file))
    except ArtifactError as exc:
        return [str(exc)]
    problems = []
    for suffix, expected in zip(SHARD_FILES, recorded.files()):
        file = sidecar(prefix, suffix)
        if not file.exists():
            problems.append(f"{file}: missing")
            continue
        found, size = file_digests(file, expected.chunk_bytes), expected.chunk_bytes
        if found.size != expected.digests.size:
            problems.append(f"{file}: {file.stat().st_size} bytes, its digests cover {expected.digests.size} chunks")
            continue
        for chunk in np.flatnonzero(found != expected.digests)[:1].tolist():
            end = min(chunk * size + size, file.stat().st_size)
            problems.append(f"{file}: bytes [{chunk * size}, {end}) differ from their digest (chunk {chunk})")
    if not problems:
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
    return write_artifact(Path(set_dir) / "set.json", SET_KIND, CELL_SCHEMA_VERSION, manifest.model_dump(mode="json"))


def write_cell_manifest(cell_dir: Path | str, manifest: CellManifest) -> str:
    return write_artifact(
        Path(cell_dir) / "cell.json", CELL_KIND, CELL_SCHEMA_VERSION, manifest.model_dump(mode="json")
    )


class ChunkDigester:
    """xxh3-64 of each `chunk_bytes` piece of a stream, computed as it is written (nothing is read back)."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES):
        self.chunk_bytes = chunk_bytes
        self._pending = bytearray()
        self._digests: list[int] = []

    def update(self, data: bytes | memoryview) -> None:
        self._pending += data
        size = self.chunk_bytes
        whole = len(self._pending) // size * size
        if whole:
            view = memoryview(self._pending)
            self._digests += [xxhash.xxh3_64_intdigest(view[i : i + size]) for i in range(0, whole, size)]
            view.release()
            del self._pending[:whole]

    def digests(self) -> np.ndarray:
        tail = [xxhash.xxh3_64_intdigest(bytes(self._pending))] if self._pending else []
        return np.asarray(self._digests + tail, dtype=np.uint64)


class ShardWriter:
    """Writes one shard; its files appear (by rename, the `.bin` last) only when `close()` succeeds.

    The `.bin`'s chunk digests are computed from the bytes as they are written, so closing a
    shard reads nothing back. `durable=False` skips the fsyncs (about 8 ms each here), for
    synthetic stores that benches and tests regenerate at will; the pipeline always writes durably."""

    def __init__(self, prefix: Path | str, dtype: np.dtype, durable: bool = True):
        self.prefix = Path(prefix)
        self.durable = durable
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPE_CODES:
            raise ValueError(f"unsupported token dtype {self.dtype}")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin_tmp = self.prefix.with_name(f".{self.prefix.name}.bin.tmp")
        self._bin = open(self._bin_tmp, "wb")  # noqa: SIM115  (held open until close() or abort())
        self._bin_digests = ChunkDigester(CHUNK_BYTES)
        self._lengths = array.array("i")
        self._sources = array.array("H")

    def add_document(self, tokens: np.ndarray | Iterable[int], source_id: int = 0) -> None:
        raw = np.ascontiguousarray(tokens, dtype=self.dtype).tobytes()
        self._bin.write(raw)
        self._bin_digests.update(raw)
        self._lengths.append(len(raw) // self.dtype.itemsize)
        self._sources.append(source_id)

    def add_documents(self, tokens: np.ndarray, lengths: np.ndarray, source_ids: np.ndarray) -> None:
        """Many documents at once: `tokens` concatenated, `lengths[i]` and `source_ids[i]` per document."""
        if int(np.sum(lengths, dtype=np.int64)) != len(tokens) or len(lengths) != len(source_ids):
            raise ValueError("lengths must sum to the tokens given, with one source id per document")
        raw = np.ascontiguousarray(tokens, dtype=self.dtype).tobytes()
        self._bin.write(raw)
        self._bin_digests.update(raw)
        self._lengths.frombytes(np.asarray(lengths, dtype=np.int32).tobytes())
        self._sources.frombytes(np.asarray(source_ids, dtype=np.uint16).tobytes())

    def close(self) -> ShardInfo:
        self._bin.flush()
        if self.durable:
            os.fsync(self._bin.fileno())
        self._bin.close()
        lengths = np.frombuffer(self._lengths, dtype=np.int32) if self._lengths else np.zeros(0, np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        doc_index = np.arange(len(lengths) + 1, dtype=np.int64)
        header = (
            INDEX_HEADER
            + struct.pack("<Q", INDEX_VERSION)
            + struct.pack("<B", DTYPE_CODES[self.dtype])
            + struct.pack("<QQ", len(lengths), len(doc_index))
        )
        index = b"".join([header, lengths.tobytes(), pointers.tobytes(), doc_index.tobytes()])
        sources = self._sources.tobytes()
        digests = ShardDigests(
            FileDigests(CHUNK_BYTES, self._bin_digests.digests()),
            FileDigests(INDEX_CHUNK_BYTES, chunk_digests(index, INDEX_CHUNK_BYTES)),
            FileDigests(INDEX_CHUNK_BYTES, chunk_digests(sources, INDEX_CHUNK_BYTES)),
        )
        for suffix, data in ((".idx", index), (".src", sources), (".xxh", digests.to_bytes())):
            if self.durable:
                with atomic_output(sidecar(self.prefix, suffix)) as handle:
                    handle.write(data)
            else:
                tmp = self.prefix.with_name(f".{self.prefix.name}{suffix}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, sidecar(self.prefix, suffix))
        os.replace(self._bin_tmp, sidecar(self.prefix, ".bin"))
        return ShardInfo(
            name=self.prefix.name,
            documents=len(lengths),
            tokens=int(lengths.sum(dtype=np.int64)),
            digest=digest_hex(digests.to_bytes()),
        )

    def abort(self) -> None:
        self._bin.close()
        self._bin_tmp.unlink(missing_ok=True)


class ShardSequence:
    """Shards `<prefix>-00000`, `<prefix>-00001`, ... in one directory (a cell's, an evaluation set's), each
    closed past `shard_tokens`, with per-source counts of what was added. `shards` and `sources` continue
    a sequence another process began (its closed shards and counts)."""

    def __init__(
        self,
        directory: Path,
        prefix: str,
        dtype: np.dtype,
        shard_tokens: int,
        shards: Sequence[ShardInfo] = (),
        sources: dict[str, Counts] | None = None,
    ):
        self.directory, self.prefix, self.dtype, self.shard_tokens = directory, prefix, dtype, shard_tokens
        self.shards: list[ShardInfo] = list(shards)
        self.writer: ShardWriter | None = None
        self.in_shard = 0
        self.in_writer = 0  # documents in the open shard
        self.placed: list[tuple[int, int]] = []  # (shard, document in shard) of each document added
        self.sources: dict[str, Counts] = dict(sources or {})

    def add(self, tokens: np.ndarray, source_id: int, source: str, nbytes: int) -> None:
        if self.writer is None:
            self.writer = ShardWriter(self.directory / f"{self.prefix}-{len(self.shards):05d}", self.dtype)
        self.writer.add_document(tokens, source_id)
        self.placed.append((len(self.shards), self.in_writer))
        self.in_writer += 1
        self.in_shard += tokens.size
        counts = self.sources.setdefault(source, Counts())
        counts.documents += 1
        counts.tokens += int(tokens.size)
        counts.bytes += nbytes
        if self.in_shard >= self.shard_tokens:
            self.shards.append(self.writer.close())
            self.writer, self.in_shard, self.in_writer = None, 0, 0

    def close(self) -> list[ShardInfo]:
        if self.writer is not None:
            self.shards.append(self.writer.close())
            self.writer = None
        return self.shards

    def totals(self) -> tuple[int, int, int]:
        counts = self.sources.values()
        return sum(c.documents for c in counts), sum(c.tokens for c in counts), sum(c.bytes for c in counts)


class ShardReader:
    """Reads one `.bin/.idx` pair whole (for `verify`, tools and tests; the loader reads on demand)."""

    def __init__(self, prefix: Path | str, dtype: np.dtype | None = None):
        self.prefix = Path(prefix)
        idx_path = self.prefix.with_name(self.prefix.name + ".idx")
        bin_path = self.prefix.with_name(self.prefix.name + ".bin")
        for file in (idx_path, bin_path):
            if not file.exists():
                raise ArtifactError(f"{file}: missing shard file")
        raw = idx_path.read_bytes()
        self.dtype, sequences, documents = parse_index_header(raw, str(idx_path))
        if dtype is not None and np.dtype(dtype) != self.dtype:
            raise ArtifactError(f"{idx_path}: dtype {self.dtype} differs from the manifest's {np.dtype(dtype)}")
        header_size = INDEX_PREFIX_BYTES
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
        self.tokens_view = np.memmap(bin_path, dtype=self.dtype, mode="r") if size else np.zeros(0, dtype=self.dtype)

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
