"""Intermediate document files between executor runs: one `jsonl.zst` per task, written atomically.

datatrove's writers write straight to the final path; these write a temporary sibling and
rename it when the task's stream ends, so a later stage (or a resumed run) never reads half
a file. A task that is killed leaves at most a stray temporary file, which its rerun replaces.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Protocol

import orjson
import zstandard
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import temporary_sibling
from pipeline.steps.progress import LiveCount

ZSTD_LEVEL = 3

# One JSON line of an intermediate file: a document's {"id", "text", "metadata"} (`document_record`), or the
# record another step writes.
Record = dict[str, Any]


class _CompressedSink(Protocol):
    """What the writer uses of zstandard's stream writer (whose `close` zstandard leaves unannotated)."""

    def write(self, data: bytes) -> int: ...

    def close(self) -> None: ...


class AtomicJsonlZstWriter:
    """Appends JSON lines to a compressed temporary file; `commit()` renames it into place."""

    def __init__(self, path: Path):
        self.path = Path(path)
        fd, self._tmp = temporary_sibling(self.path)
        self._raw = os.fdopen(fd, "wb")
        self._stream: _CompressedSink = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(
            self._raw, closefd=False
        )
        self.count = 0

    def write(self, record: Record) -> None:
        with self._named():
            self._stream.write(orjson.dumps(record) + b"\n")
        self.count += 1

    def commit(self) -> None:
        with self._named():
            self._stream.close()
            self._raw.flush()
            os.fsync(self._raw.fileno())
        self._raw.close()
        os.replace(self._tmp, self.path)

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """A stream's write or flush names no file (a full disk): this one is."""
        try:
            yield
        except OSError as exc:
            if exc.filename is None:
                raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
            raise

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()
        with contextlib.suppress(Exception):
            self._raw.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)

    def __enter__(self) -> AtomicJsonlZstWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def read_jsonl_zst(path: Path | BinaryIO) -> Iterator[Record]:
    """The records of a `.jsonl.zst` file, streamed (a path, or a file object already open)."""
    with contextlib.ExitStack() as stack:
        raw: BinaryIO = stack.enter_context(open(path, "rb")) if isinstance(path, (str, Path)) else path
        stream = stack.enter_context(zstandard.ZstdDecompressor().stream_reader(raw))
        for line in io.TextIOWrapper(stream, encoding="utf-8"):
            if line.strip():
                yield orjson.loads(line)


def document_record(doc: Document) -> Record:
    return {"id": doc.id, "text": doc.text, "metadata": doc.metadata}


def task_file(directory: Path, rank: int) -> Path:
    return Path(directory) / f"{rank:05d}.jsonl.zst"


class TaskDocumentWriter(PipelineStep):
    """Writes the documents that reach it to `<directory>/<rank>.jsonl.zst` and passes them on."""

    name = "💾 task documents"
    type = "✍️ - WRITER"

    def __init__(self, directory: Path | str):
        super().__init__()
        self.directory = Path(directory)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        with AtomicJsonlZstWriter(task_file(self.directory, rank)) as writer:
            for doc in data or ():
                writer.write(document_record(doc))
                self.stat_update("written")
                yield doc


class TaskDocumentReader(PipelineStep):
    """Reads back what `TaskDocumentWriter` wrote for the same rank (same task count)."""

    name = "📂 task documents"
    type = "📖 - READER"

    def __init__(self, directory: Path | str, progress_dir: Path | str | None = None):
        super().__init__()
        self.directory = Path(directory)
        self.progress_dir = None if progress_dir is None else Path(progress_dir)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:

        if data:
            yield from data
        path = task_file(self.directory, rank)
        if not path.exists():
            raise FileNotFoundError(f"{path}: the previous stage's output for task {rank} is missing")
        live = LiveCount(None if self.progress_dir is None else self.progress_dir / f"{rank:05d}.json")
        for read, record in enumerate(read_jsonl_zst(path), start=1):
            self.stat_update("read")
            live.update(read)
            yield Document(text=record["text"], id=record["id"], metadata=record["metadata"])
        live.close()
