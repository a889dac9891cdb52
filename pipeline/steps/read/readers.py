"""The read step: datatrove's readers, with every malformed record counted and named.

datatrove's `JsonlReader` logs a decode error and moves on, and every reader drops a record
without text silently. Here each such record (invalid JSON or UTF-8, no text) is counted in
the funnel's `read` step (reason `malformed` or `empty`) and listed with its file and line
(parquet: row; WARC: record) in `malformed/<source>/<rank>.jsonl`, which the runner reports.
A file that ends early (truncated or corrupt compression, a broken parquet footer) is an
error naming it, never a shorter file. Document ids are prefixed with the source name (unless
they already are) and kept as given, repeats included: dedup and ordering use
`metadata["key"]`, an integer from the file's ordinal and the record's position.
`metadata["source"]` is the configured source name.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import orjson
import zstandard
from datatrove.data import Document, DocumentsPipeline
from datatrove.io import DataFolder
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.readers import JsonlReader, ParquetReader, WarcReader
from datatrove.pipeline.readers.base import BaseDiskReader

from millrace.artifacts import atomic_write_text
from millrace.errors import MillraceError
from pipeline.config import SourceConfig
from pipeline.steps.filter.filtering import text_bytes
from pipeline.steps.funnel import StepCounts
from pipeline.steps.progress import LiveCount
from pipeline.steps.read.compressed import OverlongLine, byte_lines, compression_of, decompressed_chunks, read_bounded
from pipeline.steps.read.decoding import decode_as, decode_page, decode_text
from pipeline.steps.read.discovery import data_folder, folder_of, source_files

Problem = tuple[str, str, int | str, str, int]  # (file, "line" | "row" | "record", position, reason, size)
KEY_POSITION_BITS = 32  # a document's key: file ordinal above, position in its file below


class BadInputFile(MillraceError):
    """An input file that cannot be read to its end: truncated, corrupt, or not what its source declares."""


UNREADABLE = (OSError, EOFError, ValueError, zstandard.ZstdError)  # pyarrow's ArrowInvalid is a ValueError


RECORD_ALLOWANCE = 8  # a JSON line may hold this many times max_document_bytes (escapes, metadata) before
# it is dropped unread: a text within the limit takes at most 6 bytes a character escaped
UTF8_BOM = b"\xef\xbb\xbf"


class _ProblemLog:
    """Mixin for datatrove readers: remember records that yield no document, and why; note each one's position.

    `problems` are listed by file and position in the malformed listing; `skipped` only counts records
    that are no document by design (a WARC request record, a non-HTML response) per reason.

    datatrove's extension points, not its internals: `read_file` is the method every `BaseDiskReader` subclass
    implements; `get_document_from_dict` is overridden rather than given as an `adapter` because an adapter
    cannot say that a record made no document, nor why (datatrove drops such records silently).
    """

    problems: list[Problem]
    skipped: dict[str, list[int]]  # reason -> [records, bytes]
    encodings: dict[str, str]  # file -> the encoding its non-UTF-8 lines were read in
    data_folder: DataFolder  # these two are the datatrove reader's this is mixed into
    text_key: str
    position_label = "line"  # how a position in this reader's files is named in the malformed listing
    max_document_bytes = 1_000_000  # set from the source by `build_reader`
    long_documents = "drop"
    on_bad_record = "error"

    def problem(self, source_file: str, where: int | str, reason: str, size: int) -> None:
        self.problems.append((self.data_folder.resolve_paths(source_file), self.position_label, where, reason, size))

    def count_skipped(self, reason: str, size: int) -> None:
        counts = self.skipped.setdefault(reason, [0, 0])
        counts[0] += 1
        counts[1] += size

    def get_document_from_dict(self, data: object, source_file: str, id_in_file: int | str) -> Document | None:
        if not isinstance(data, dict):
            self.problem(source_file, id_in_file, "malformed", len(str(data)))
            return None
        text = data.get(self.text_key)
        if text is not None and not isinstance(text, str):
            self.problem(source_file, id_in_file, "malformed", len(str(data)))
            return None
        document = super().get_document_from_dict(dict(data), source_file, id_in_file)  # type: ignore[misc]  # the reader mixed into has it
        if document is None:
            reason = "empty" if self.text_key in data else "malformed"
            self.problem(source_file, id_in_file, reason, len(str(data)))
            return None
        document.metadata["position"] = id_in_file
        return document


class CountingJsonlReader(_ProblemLog, JsonlReader):
    """JSON lines read as bytes: invalid JSON is one malformed record (named by file and line).

    A line that is not UTF-8 is read in the encoding detected for its file (`decoding.decode_text`, detected
    once, on the file's first such line, and again on a line that does not decode in it); the file and its
    encoding are noted in `encodings`, and a line no encoding decodes whole is `undecodable`, never stored
    with replacement characters. A UTF-8 byte order mark opening the file is dropped. A line over
    `RECORD_ALLOWANCE` times `max_document_bytes` is never held: it is removed as `too_long` (even with
    `long_documents = "cut"`, since its text cannot be found without reading it whole).
    """

    name = "🐿 Jsonl (counted)"

    def read_file(self, filepath: str) -> Iterator[Document]:
        max_line = RECORD_ALLOWANCE * self.max_document_bytes + (1 << 16)
        with self.data_folder.open(filepath, "rb") as raw:
            for line_number, line in enumerate(byte_lines(raw, compression_of(filepath), max_line), start=1):
                if isinstance(line, OverlongLine):
                    self.problem(filepath, line_number, "too_long", line.size)
                    continue
                if line_number == 1 and line.startswith(UTF8_BOM):
                    line = line[len(UTF8_BOM) :]
                if not line.strip():
                    continue
                try:
                    record = orjson.loads(line)  # validates UTF-8 as well as JSON
                except orjson.JSONDecodeError:
                    record = self._legacy_record(filepath, line_number, line)
                    if record is None:
                        continue
                document = self.get_document_from_dict(record, filepath, line_number)
                if document is not None:
                    yield document

    def _legacy_record(self, filepath: str, line_number: int, line: bytes) -> object:
        """A line that orjson refused: JSON in the file's detected encoding, or None (counted as a problem)."""
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            self.problem(filepath, line_number, "malformed", len(line))
            return None
        where = self.data_folder.resolve_paths(filepath)
        known = self.encodings.get(where)
        decoded = decode_as(line, known) or decode_text(line)
        if decoded is None:
            self.problem(filepath, line_number, "undecodable", len(line))
            return None
        self.encodings[where] = known or decoded.encoding
        try:
            return orjson.loads(decoded.text)
        except orjson.JSONDecodeError:
            self.problem(filepath, line_number, "malformed", len(line))
            return None


class CountingParquetReader(_ProblemLog, ParquetReader):
    """Parquet rows; a problem is named by its row (0-based, counted over the whole file)."""

    name = "📒 Parquet (counted)"
    position_label = "row"

    def read_file(self, filepath: str) -> Iterator[Document]:
        import pyarrow.parquet as pq  # lazy: heavy (pyarrow)

        with self.data_folder.open(filepath, "rb") as handle, pq.ParquetFile(handle) as parquet:
            row = 0
            for batch in parquet.iter_batches(batch_size=self.batch_size):
                for record in batch.to_pylist():
                    document = self.get_document_from_dict(record, filepath, row)
                    if document is not None:
                        yield document
                    row += 1


class CountingWarcReader(_ProblemLog, WarcReader):
    """WARC records, each a document named by its URL or a counted reason (`pipeline.steps.read.warc`),
    decompressed here so that a truncated `.warc.gz` is an error (or, skipped, a bad file)."""

    name = "🕷 Warc (counted)"
    position_label = "record"

    def read_file(self, filepath: str) -> Iterator[Document]:
        # lazy: heavy (warcio): only for WARC sources
        from warcio.archiveiterator import ArchiveIterator
        from warcio.exceptions import ArchiveLoadFailed

        from pipeline.steps.read.warc import read_record  # lazy: heavy (warcio)

        with self.data_folder.open(filepath, "rb") as raw:
            stream = _ErrorKeeper(gzip.GzipFile(fileobj=raw) if compression_of(filepath) == "gzip" else raw)
            index = -1
            try:
                for index, record in enumerate(ArchiveIterator(stream, no_record_parse=True)):
                    outcome = read_record(record, self.max_document_bytes, self.long_documents)
                    if outcome.reason == "no_target_uri" and self.on_bad_record != "skip":
                        record_id = record.rec_headers.get_header("WARC-Record-ID")
                        raise BadInputFile(
                            f"{self.data_folder.resolve_paths(filepath)}: record {index} ({record_id}): a response"
                            ' without WARC-Target-URI; fix the file, or set on_bad_file = "skip" to count it and go on'
                        )
                    if outcome.reason in ("no_target_uri", "undecodable", "too_long"):
                        self.problem(filepath, index, outcome.reason, outcome.size)
                    elif outcome.reason is not None:
                        self.count_skipped(outcome.reason, outcome.size)
                    elif (document := self.get_document_from_dict(outcome.document, filepath, index)) is not None:
                        yield document
            except ArchiveLoadFailed as exc:  # not a WARC record where one should start: a corrupt or cut file
                raise EOFError(f"no WARC record where record {index + 1} should start ({exc})") from None
            if stream.error is not None:
                raise stream.error


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _ErrorKeeper(io.RawIOBase):
    """A stream that passes on what `inner` reads and keeps the error that ends it: warcio takes a failed
    read (a truncated `.warc.gz`) for the end of the archive, so the reader raises it once warcio stops."""

    def __init__(self, inner: _Readable):
        self.inner = inner
        self.error: BaseException | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # typeshed's Buffer has no len
        if self.error is not None:
            return 0
        try:
            data = self.inner.read(len(buffer))
        except UNREADABLE as exc:
            self.error = exc
            return 0
        buffer[: len(data)] = data
        return len(data)


class HtmlFileReader(_ProblemLog, BaseDiskReader):
    """One document per HTML file: its text is the file's HTML (extracted later), its id the file's path.
    A file over `max_document_bytes` is not held whole: dropped (`too_long`) or cut to it."""

    name = "🌍 HTML files"

    def read_file(self, filepath: str) -> Iterator[Document]:
        with self.data_folder.open(filepath, "rb") as raw:
            stream = io.BufferedReader(_ChunkStream(decompressed_chunks(raw, compression_of(filepath))))
            html, size = read_bounded(stream, self.max_document_bytes, keep_prefix=self.long_documents == "cut")
        if html is None:
            self.problem(filepath, 0, "too_long", size)
            return
        decoded = decode_page(html, cut=size > len(html))
        if decoded is None:
            self.problem(filepath, 0, "undecodable", size)
            return
        fields = {"text": decoded.text, "id": filepath, "read_bytes": size}
        document = self.get_document_from_dict(fields, filepath, 0)
        if document is not None:
            yield document


class _ChunkStream(io.RawIOBase):
    """A readable stream over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks, self.pending = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # typeshed's Buffer has no len
        while not self.pending:
            self.pending = next(self.chunks, b"")
            if not self.pending:
                return 0
        size = min(len(buffer), len(self.pending))
        buffer[:size], self.pending = self.pending[:size], self.pending[size:]
        return size


class HFDatasetsDirReader(PipelineStep):
    """A dataset saved with `datasets.Dataset.save_to_disk`; task `rank` reads a contiguous slice."""

    name = "🤗 datasets dir"
    type = "📖 - READER"

    def __init__(self, path: str, text_key: str, id_key: str):
        super().__init__()
        self.path, self.text_key, self.id_key = path, text_key, id_key
        self.problems: list[Problem] = []

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        import datasets  # lazy: heavy (datasets): only for an hf-datasets source

        dataset = datasets.load_from_disk(self.path)
        if isinstance(dataset, datasets.DatasetDict):
            dataset = datasets.concatenate_datasets([dataset[k] for k in sorted(dataset)])
        total = len(dataset)
        start, stop = total * rank // world_size, total * (rank + 1) // world_size
        for index in range(start, stop):
            row = dataset[index]
            text = row.get(self.text_key)
            if not isinstance(text, str) or not text:
                self.problems.append((self.path, "row", index, "empty" if text == "" else "malformed", len(str(row))))
                continue
            metadata = {k: v for k, v in row.items() if k not in (self.text_key, self.id_key)}
            metadata["position"] = index
            metadata["file_path"] = self.path  # the document's origin: the dataset's folder (its row: position)
            yield Document(text=text, id=str(row.get(self.id_key, index)), metadata=metadata)


def build_reader(source: SourceConfig, path: str, folder_path: str | None = None) -> PipelineStep:
    """The datatrove reader for one configured path of a source (which files it reads: `discovery.source_files`);
    `folder_path`: the folder its files are relative to, where the caller knows it (else the path is tested)."""
    if source.format == "hf-datasets":
        return HFDatasetsDirReader(path, source.text_key, source.id_key)

    common = dict(text_key=source.text_key, id_key=source.id_key, recursive=True)
    if folder_path is None:
        folder_path = folder_of(path, source.storage_options)[0]
    folder = data_folder(folder_path, source.storage_options)
    if source.format in ("jsonl", "jsonl.zst"):
        reader = CountingJsonlReader(folder, compression="infer", **common)
    elif source.format == "parquet":
        reader = CountingParquetReader(folder, **common)
    elif source.format == "html":
        reader = HtmlFileReader(folder, **common)
    else:
        reader = CountingWarcReader(folder, **common)
    reader.max_document_bytes, reader.long_documents = source.max_document_bytes, source.long_documents
    reader.on_bad_record = source.on_bad_file
    return reader


def input_files(source: SourceConfig) -> list[tuple[str, list[str]]]:
    """Each configured path of a source with its files (relative to it, sorted); datasets dirs list none."""
    return [(path, [] if source.format == "hf-datasets" else source_files(source, path)) for path in source.paths]


# One configured path's share of a task: (configured path, the folder its files are relative to,
# [(relative, ordinal), ...]); a datasets directory is (path, None, [(None, ordinal)]) in every task's share
# (datatrove splits it by rank).
Share = tuple[str, str | None, list[tuple[str | None, int]]]


def source_shares(source: SourceConfig, offset: int, tasks: int) -> tuple[list[list[Share]], int]:
    """Per task, its shares of one source's configured paths, and the next source's offset (`offset`: the
    number of file ordinals the sources before took). Files are dealt round-robin by ordinal, continuing
    across sources, so that many one-file sources spread over the tasks instead of all landing on task 0."""
    shares: list[list[Share]] = [[] for _ in range(tasks)]
    ordinal = offset
    for path, files in input_files(source):
        if source.format == "hf-datasets":
            for share in shares:
                share.append((path, None, [(None, ordinal)]))
            ordinal += 1
            continue
        folder = folder_of(path, source.storage_options)[0]
        dealt: list[list[tuple[str | None, int]]] = [[] for _ in range(tasks)]
        for relative in files:
            dealt[ordinal % tasks].append((relative, ordinal))
            ordinal += 1
        for share, own in zip(shares, dealt):
            if own:
                share.append((path, folder, own))
    return shares, ordinal


def inputs_file(directory: Path | str, rank: int) -> Path:
    """Task `rank`'s inputs file (`pipeline.steps.read.task_inputs`)."""
    return Path(directory) / f"{rank:05d}.json"


def read_task_inputs(directory: Path | str, rank: int, source: str) -> list[Share]:
    """Task `rank`'s shares of `source`, as the driver dealt them."""
    shares = json.loads(inputs_file(directory, rank).read_text())[source]
    return [(path, folder, [(relative, ordinal) for relative, ordinal in own]) for path, folder, own in shares]


def file_count(source: SourceConfig) -> int:
    """How many file ordinals a source takes: one per input file, one per datasets directory."""
    if source.format == "hf-datasets":
        return len(source.paths)
    return sum(len(files) for _, files in input_files(source))


def document_key(file_ordinal: int, position: int) -> int:
    """The internal key dedup and ordering use: (file ordinal, position in the file), never the user's id."""
    return (file_ordinal << KEY_POSITION_BITS) | position


def utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose UTF-8 encoding fits in `max_bytes` (no character cut in half)."""
    return text.encode("utf-8", errors="surrogatepass")[:max_bytes].decode("utf-8", errors="ignore")


class ReadStep(PipelineStep):
    """Reads one source on this task's share of its files and counts the funnel's `read` step.

    Files are dealt to tasks round-robin continuing from `offset` (the number of file ordinals of
    the sources before this one), so that many one-file sources spread over the tasks instead of
    all landing on task 0 as with datatrove's per-reader `sorted(files)[rank::world_size]`.

    Each document gets `metadata["key"]` (`document_key` of its file ordinal and position) and
    `metadata["origin"]` (its file, or its URL when the record has one). A document over
    `max_document_bytes` is dropped (`too_long`) or cut to it (counted as `cut`). A file that
    cannot be read to its end is a `BadInputFile` naming it, or with `on_bad_file = "skip"` the rest
    of it is skipped and it is listed as a bad file.
    """

    type = "📖 - READER"

    def __init__(
        self,
        source: SourceConfig,
        offset: int,
        funnel_dir: Path | str,
        malformed_dir: Path | str,
        progress_dir: Path | str | None = None,
        inputs_dir: Path | str | None = None,
    ):
        self.name = f"📖 {source.name}"
        super().__init__()
        self.source = source
        self.offset = offset
        self.funnel_dir = Path(funnel_dir)
        self.malformed_dir = Path(malformed_dir)
        self.progress_dir = None if progress_dir is None else Path(progress_dir)
        self.inputs_dir = None if inputs_dir is None else Path(inputs_dir)

    def _document(self, doc: Document, file_ordinal: int) -> Document:
        prefix = f"{self.source.name}/"
        doc.id = doc.id if str(doc.id).startswith(prefix) else prefix + str(doc.id)
        position = int(doc.metadata.pop("position"))
        origin = doc.metadata.get("url") or doc.metadata.pop("file_path", None)
        doc.metadata.pop("file_path", None)
        doc.metadata = {
            **doc.metadata,
            "source": self.source.name,
            "key": document_key(file_ordinal, position),
            "origin": origin,
            "position": position,
        }
        return doc

    def _file_documents(
        self, reader: PipelineStep, path: str, relative: str, ordinal: int, bad_files: list[dict[str, str]]
    ) -> DocumentsPipeline:
        try:
            for doc in reader.read_file(relative):
                yield self._document(doc, ordinal)
        except UNREADABLE as exc:
            where = reader.data_folder.resolve_paths(relative)
            if self.source.on_bad_file != "skip":
                raise BadInputFile(
                    f"{where}: cannot read source {self.source.name!r} file to its end ({type(exc).__name__}: {exc});"
                    ' fix or remove it, or set on_bad_file = "skip" on the source'
                ) from None
            bad_files.append({"file": where, "error": f"{type(exc).__name__}: {exc}"})

    def _documents(
        self,
        rank: int,
        world_size: int,
        problems: list[Problem],
        skipped: dict[str, list[int]],
        bad_files: list[dict[str, str]],
    ) -> DocumentsPipeline:
        if self.inputs_dir is not None:  # dealt by the driver: this task lists no source
            shares = read_task_inputs(self.inputs_dir, rank, self.source.name)
        else:
            shares = source_shares(self.source, self.offset, world_size)[0][rank]
        for path, folder, files in shares:
            reader = build_reader(self.source, path, folder)
            reader.problems, reader.skipped, reader.encodings = problems, skipped, self.encodings
            if self.source.format == "hf-datasets":
                ordinal = files[0][1]
                yield from (self._document(doc, ordinal) for doc in reader.run(None, rank, world_size))
                continue
            for relative, ordinal in files:
                yield from self._file_documents(reader, path, str(relative), ordinal, bad_files)

    def _bounded(self, doc: Document, size: int, counts: StepCounts) -> int | None:
        """The size of the document kept (its text `size` bytes, cut here if over the limit), None if dropped."""
        limit = self.source.max_document_bytes
        if size <= limit:
            return size
        if self.source.long_documents == "drop":
            counts.removed(self.source.name, "too_long", size)
            return None
        if text_bytes(doc) > limit:
            doc.text = utf8_prefix(doc.text, limit)
        kept = text_bytes(doc)
        counts.cut(self.source.name, size - kept)
        return kept

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        counts = StepCounts()
        problems: list[Problem] = []
        skipped: dict[str, list[int]] = {}
        bad_files: list[dict[str, str]] = []
        self.encodings: dict[str, str] = {}
        live = LiveCount(
            None if self.progress_dir is None else self.progress_dir / f"{self.source.name}-{rank:05d}.json"
        )
        for read, doc in enumerate(self._documents(rank, world_size, problems, skipped, bad_files), start=1):
            live.update(read + len(problems) + sum(records for records, _ in skipped.values()))
            size = doc.metadata.pop("read_bytes", None) or text_bytes(doc)  # a reader that cut a record says from what
            counts.received(self.source.name, size)
            if (size := self._bounded(doc, size, counts)) is None:
                continue
            counts.kept(self.source.name, size)
            self.stat_update("documents")
            yield doc
        for _file, _label, _where, reason, size in problems:
            counts.received(self.source.name, size)
            counts.removed(self.source.name, reason, size)
        for reason, (records, size) in sorted(skipped.items()):
            counts.received_removed(self.source.name, reason, records, size)
        lines = [json.dumps({"file": str(f), label: where, "reason": r}) for f, label, where, r, _ in problems]
        lines += [json.dumps({"file": b["file"], "reason": "bad_file", "error": b["error"]}) for b in bad_files]
        atomic_write_text(
            self.malformed_dir / self.source.name / f"{rank:05d}.jsonl", "".join(x + "\n" for x in lines)
        )
        counts.bad_files = [{"source": self.source.name, **b} for b in bad_files]
        counts.encodings = [
            {"source": self.source.name, "file": f, "encoding": e} for f, e in sorted(self.encodings.items())
        ]
        counts.save(self.funnel_dir / f"{self.source.name}-{rank:05d}.json")
        live.update(sum(entry["received"]["documents"] for entry in counts.sources.values()))
        live.close()
