"""Which fields a source's records hold: read from its first file, to pick and to check its text and id fields.

A parquet export or a dataset rarely calls its text column `text`. `pipeline init` picks the fields from
the first record (`pick_text_key`, `pick_id_key`), and `pipeline run` refuses, before any task starts, a
source whose text field its first file does not have (`check_text_fields`): otherwise every record would
be counted `malformed` and the source lost whole, with exit 0.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import BinaryIO, cast

import orjson

from millrace.errors import ConfigError
from pipeline.config import EXTRACTED_FORMATS, PipelineConfig, SourceConfig
from pipeline.steps.read.compressed import byte_lines, compression_of
from pipeline.steps.read.decoding import decode_text
from pipeline.steps.read.discovery import data_folder, folder_of

LONG_TEXT = 64  # characters: a string field at least this long (and longer than any other) holds the text
ID_NAMES = ("id", "_id", "doc_id", "docid", "document_id", "uid", "uuid", "guid", "url", "path", "key", "name")
# what opening the first file reads ahead at a time on a bucket: the first record needs a few KiB, and s3fs's
# default block would fetch up to 50 MiB of the object (the driver reading a whole file at every start)
FIRST_RECORD_BLOCK = 1 << 16


class UnknownTextField(ConfigError):
    """No field of a source's first record is clearly its text: the columns to choose from."""

    def __init__(self, source: str, where: str, columns: list[str]):
        self.source, self.where, self.columns = source, where, columns
        super().__init__(
            f"{where}: source {source!r} has no 'text' field and no one long string field; columns: "
            f"{', '.join(columns) or 'none'}; name it with --text-key {source}=COLUMN"
        )


class _SmallReads(io.RawIOBase):
    """A file read at most `block` bytes a call (the decompressing reader asks a megabyte at a time): the first
    record costs the blocks up to its end, not the file."""

    def __init__(self, handle: BinaryIO, block: int):
        super().__init__()
        self.handle, self.block = handle, block

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.handle.read(min(len(buffer), self.block))
        buffer[: len(data)] = data
        return len(data)


def _first_jsonl_record(handle: BinaryIO, name: str) -> dict[str, object] | None:

    for line in byte_lines(handle, compression_of(name), 1 << 24):
        if isinstance(line, bytes) and line.strip():
            decoded = decode_text(line)
            try:
                record = orjson.loads(decoded.text) if decoded else None
            except orjson.JSONDecodeError:
                return None
            return record if isinstance(record, dict) else None
    return None


def first_record(source: SourceConfig) -> tuple[str, dict[str, object]] | None:
    """(where, first record) of the source's first file or dataset; None for HTML formats, empty sources and a
    first file that cannot be read (the read step names it, or skips it as the source says)."""
    from pipeline.steps.read.readers import UNREADABLE  # lazy: heavy (datatrove)

    try:
        return _first_record(source)
    except UNREADABLE:
        return None


def _first_record(source: SourceConfig) -> tuple[str, dict[str, object]] | None:
    if source.format in EXTRACTED_FORMATS:
        return None
    if source.format == "hf-datasets":
        import datasets  # lazy: heavy (datasets): only for an hf-datasets source

        dataset = datasets.load_from_disk(source.paths[0])
        if isinstance(dataset, datasets.DatasetDict):
            dataset = dataset[sorted(dataset)[0]]
        return source.paths[0], (dict(dataset[0]) if len(dataset) else dict.fromkeys(dataset.column_names))
    from pipeline.steps.read.readers import input_files  # lazy: heavy (datatrove)

    path, files = next(((p, f) for p, f in input_files(source) if f), (None, []))
    if path is None:
        return None
    folder = data_folder(folder_of(path, source.storage_options)[0], source.storage_options)
    where = folder.resolve_paths(files[0])
    with folder.open(files[0], "rb", block_size=FIRST_RECORD_BLOCK) as handle:
        if source.format == "parquet":
            import pyarrow.parquet as pq  # lazy: heavy (pyarrow)

            # buffered and not pre-buffered: the footer and each column's first pages, not the row group
            with pq.ParquetFile(handle, buffer_size=FIRST_RECORD_BLOCK, pre_buffer=False) as parquet:
                batch = next(parquet.iter_batches(batch_size=1), None)
                rows = batch.to_pylist() if batch is not None else []
                return where, (rows[0] if rows else dict.fromkeys(parquet.schema_arrow.names))
        record = _first_jsonl_record(cast(BinaryIO, _SmallReads(handle, FIRST_RECORD_BLOCK)), files[0])
    return None if record is None else (where, record)


def pick_text_key(record: Mapping[str, object], configured: str = "text") -> str | None:
    """`configured` when the record has it, else its one long string field (at least `LONG_TEXT` characters and
    the only one that long), else None."""
    if configured in record:
        return configured
    long = [key for key, value in record.items() if isinstance(value, str) and len(value) >= LONG_TEXT]
    return long[0] if len(long) == 1 else None


def pick_id_key(record: Mapping[str, object], text_key: str, configured: str = "id") -> str:
    """`configured` when the record has it, else the first usual id name it has, else its first field named
    `..._id`, else `configured` (the reader then names documents by file and position)."""
    if configured in record:
        return configured
    named = [name for name in ID_NAMES if name in record] + [k for k in record if str(k).lower().endswith("_id")]
    return next((name for name in named if name != text_key), configured)


def check_text_fields(config: PipelineConfig) -> None:
    """Refuse a source whose first record lacks its text field: one line naming the file and its columns."""
    for source in config.sources:
        found = first_record(source)
        if found is not None and source.text_key not in found[1]:
            where, record = found
            raise ConfigError(
                f"{where}: source {source.name!r} reads text from field {source.text_key!r}, which its first "
                f"record lacks; its columns: {', '.join(record) or 'none'}; set text_key on the source"
            )
