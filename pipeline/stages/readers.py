"""The read stage: datatrove's readers, with every malformed record counted and named.

datatrove's `JsonlReader` logs a decode error and moves on, and every reader drops a record
without text silently. Here each such record is counted in the funnel's `read` stage
(reason `malformed` or `empty`) and listed with its file and line in
`malformed/<source>/<rank>.jsonl`, which the runner reports. Document ids are prefixed with
the source name (unless they already are) so ids are unique across sources, and
`metadata["source"]` is the configured source name.
"""

from __future__ import annotations

import json
from pathlib import Path

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.readers import JsonlReader, ParquetReader, WarcReader

from millrace.artifacts import atomic_write_text
from pipeline.config import SourceConfig
from pipeline.stages.filtering import text_bytes
from pipeline.stages.funnel import StageCounts


class _ProblemLog:
    """Mixin for datatrove readers: remember records that yield no document, and why."""

    problems: list[tuple[str, int | str, str, int]]

    def problem(self, source_file: str, where: int | str, reason: str, size: int) -> None:
        self.problems.append((self.data_folder.resolve_paths(source_file), where, reason, size))

    def get_document_from_dict(self, data, source_file, id_in_file):
        if not isinstance(data, dict):
            self.problem(source_file, id_in_file, "malformed", len(str(data)))
            return None
        text = data.get(self.text_key)
        if text is not None and not isinstance(text, str):
            self.problem(source_file, id_in_file, "malformed", len(str(data)))
            return None
        document = super().get_document_from_dict(dict(data), source_file, id_in_file)
        if document is None:
            reason = "empty" if self.text_key in data else "malformed"
            self.problem(source_file, id_in_file, reason, len(str(data)))
        return document


class CountingJsonlReader(_ProblemLog, JsonlReader):
    name = "🐿 Jsonl (counted)"

    def read_file(self, filepath: str):
        import orjson

        with self.data_folder.open(filepath, "r", compression=self.compression) as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    self.problem(filepath, line_number, "malformed", len(line))
                    continue
                document = self.get_document_from_dict(record, filepath, line_number)
                if document is not None:
                    yield document


class CountingParquetReader(_ProblemLog, ParquetReader):
    name = "📒 Parquet (counted)"


class CountingWarcReader(_ProblemLog, WarcReader):
    name = "🕷 Warc (counted)"


class HFDatasetsDirReader(PipelineStep):
    """A dataset saved with `datasets.Dataset.save_to_disk`; task `rank` reads a contiguous slice."""

    name = "🤗 datasets dir"
    type = "📖 - READER"

    def __init__(self, path: str, text_key: str, id_key: str):
        super().__init__()
        self.path, self.text_key, self.id_key = path, text_key, id_key
        self.problems: list[tuple[str, int | str, str, int]] = []

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        import datasets

        dataset = datasets.load_from_disk(self.path)
        if isinstance(dataset, datasets.DatasetDict):
            dataset = datasets.concatenate_datasets([dataset[k] for k in sorted(dataset)])
        total = len(dataset)
        start, stop = total * rank // world_size, total * (rank + 1) // world_size
        for index in range(start, stop):
            row = dataset[index]
            text = row.get(self.text_key)
            if not isinstance(text, str) or not text:
                self.problems.append((self.path, index, "empty" if text == "" else "malformed", len(str(row))))
                continue
            metadata = {k: v for k, v in row.items() if k not in (self.text_key, self.id_key)}
            yield Document(text=text, id=str(row.get(self.id_key, index)), metadata=metadata)


def build_reader(source: SourceConfig, path: str):
    """The datatrove reader for one configured path of a source."""
    if source.format == "hf-datasets":
        return HFDatasetsDirReader(path, source.text_key, source.id_key)
    common = dict(text_key=source.text_key, id_key=source.id_key, recursive=True)
    folder, glob = (str(Path(path).parent), Path(path).name) if Path(path).is_file() else (path, source.file_glob)
    if source.format in ("jsonl", "jsonl.zst"):
        compression = "zstd" if source.format == "jsonl.zst" else "infer"
        return CountingJsonlReader(folder, glob_pattern=glob, compression=compression, **common)
    if source.format == "parquet":
        return CountingParquetReader(folder, glob_pattern=glob, **common)
    return CountingWarcReader(folder, glob_pattern=glob, **common)


def input_files(source: SourceConfig) -> list[tuple[str, list[str]]]:
    """Each configured path of a source with its files (relative to it, sorted); datasets dirs list none."""
    listed = []
    for path in source.paths:
        if source.format == "hf-datasets":
            listed.append((path, []))
            continue
        reader = build_reader(source, path)
        listed.append((path, reader.data_folder.list_files(recursive=True, glob_pattern=reader.glob_pattern)))
    return listed


class ReadStage(PipelineStep):
    """Reads one source on this task's share of its files and counts the funnel's `read` stage.

    Files are dealt to tasks round-robin continuing from `offset` (the number of files of the
    sources before this one), so that many one-file sources spread over the tasks instead of
    all landing on task 0 as with datatrove's per-reader `sorted(files)[rank::world_size]`.
    """

    type = "📖 - READER"

    def __init__(self, source: SourceConfig, offset: int, funnel_dir: Path | str, malformed_dir: Path | str):
        self.name = f"📖 {source.name}"
        super().__init__()
        self.source = source
        self.offset = offset
        self.funnel_dir = Path(funnel_dir)
        self.malformed_dir = Path(malformed_dir)

    def _document(self, doc: Document) -> Document:
        prefix = f"{self.source.name}/"
        doc.id = doc.id if str(doc.id).startswith(prefix) else prefix + str(doc.id)
        doc.metadata = {**doc.metadata, "source": self.source.name}
        doc.metadata.pop("file_path", None)
        return doc

    def _documents(self, rank: int, world_size: int, problems: list) -> DocumentsPipeline:
        position = self.offset
        for path, files in input_files(self.source):
            reader = build_reader(self.source, path)
            reader.problems = problems
            if self.source.format == "hf-datasets":
                yield from reader.run(None, rank, world_size)
                continue
            mine = [f for i, f in enumerate(files) if (position + i) % world_size == rank]
            position += len(files)
            yield from reader.read_files_shard(mine)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        counts = StageCounts()
        problems: list[tuple[str, int | str, str, int]] = []
        for doc in self._documents(rank, world_size, problems):
            doc = self._document(doc)
            counts.received(self.source.name, text_bytes(doc))
            counts.kept(self.source.name, text_bytes(doc))
            self.stat_update("documents")
            yield doc
        for _file, _line, reason, size in problems:
            counts.received(self.source.name, size)
            counts.removed(self.source.name, reason, size)
        lines = [json.dumps({"file": str(f), "line": line, "reason": r}) for f, line, r, _ in problems]
        atomic_write_text(self.malformed_dir / self.source.name / f"{rank:05d}.jsonl", "".join(x + "\n" for x in lines))
        counts.save(self.funnel_dir / f"{self.source.name}-{rank:05d}.json")
