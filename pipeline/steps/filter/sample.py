"""The corpus sample for the tokenizer and the quality and domain models, drawn inside the filter tasks.

A second pass over the corpus to draw a sample costs days at the reference scale, so each
filter task keeps a bottom-k sketch of its documents as they stream by: the documents with the
smallest hashes of their internal key, up to `max_bytes` of text (a heap; memory bounded by the
sample size, not the corpus). The union of the tasks' sketches, cut to the smallest hashes again,
is the sketch of the whole corpus whatever the task count. Dedup runs after the filter tasks, so
one task per filter task (`DeduplicatedSketch`, the dedup phase's last run) drops from its sketch
the documents dedup removed (its own rows of each removal part) before the driver merges and cuts
the sketches: the driver reads no removal list. The tasks keep `OVERSAMPLE` times the budget to
cover the removals.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from pathlib import Path

import xxhash
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from pipeline.config import PipelineConfig
from pipeline.steps import in_place
from pipeline.steps.dedup.duplicates import load_duplicates
from pipeline.steps.intermediate import AtomicJsonlZstWriter, Record, document_record, read_jsonl_zst, task_file

OVERSAMPLE = 2


def sample_rank(key: int) -> int:
    """The hash that orders documents in the sample: a pure function of the document's key."""
    return xxhash.xxh64_intdigest(key.to_bytes(8, "little"))


class SampleSketch(PipelineStep):
    """Per filter task: keep the smallest-hash documents up to `max_bytes`, write them when the stream ends."""

    name = "🎲 sample sketch"
    type = "🎲 - SAMPLER"

    def __init__(self, directory: Path | str, max_bytes: int):
        super().__init__()
        self.directory = Path(directory)
        self.max_bytes = max_bytes

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        heap: list[tuple[int, int, int, Document]] = []  # (-hash, -key, size, document): the largest on top
        held = 0
        for doc in data or ():
            rank_hash = sample_rank(doc.metadata["key"])
            size = len(doc.text.encode("utf-8", errors="surrogatepass"))
            if held < self.max_bytes or rank_hash < -heap[0][0]:
                copy = Document(text=doc.text, id=doc.id, metadata=dict(doc.metadata))
                heapq.heappush(heap, (-rank_hash, -doc.metadata["key"], size, copy))
                held += size
                while held - heap[0][2] >= self.max_bytes:  # the rest still fills the budget
                    held -= heapq.heappop(heap)[2]
            yield doc
        with AtomicJsonlZstWriter(task_file(self.directory, rank)) as writer:
            for _, _, _, doc in sorted(heap, key=lambda item: (-item[0], -item[1])):
                writer.write(document_record(doc))


class DeduplicatedSketch(PipelineStep):
    """Task r (one per filter task): filter task r's sketch less the documents dedup removed, in the same hash
    order. Its own inputs only (its sketch, its rows of each removal part, read in place on a work URL), so
    the driver's merge reads the kept sketches and no removal list, whatever the number of removals."""

    name = "🎲 deduplicated sketch"
    type = "🎲 - SAMPLER"

    def __init__(self, sketches: Path | str, duplicates: Path | str, directory: Path | str):
        super().__init__()
        self.sketches, self.duplicates, self.directory = Path(sketches), Path(duplicates), Path(directory)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        gone = load_duplicates(self.duplicates, rank)
        with (
            AtomicJsonlZstWriter(task_file(self.directory, rank)) as writer,
            in_place.opened(task_file(self.sketches, rank)) as raw,
        ):
            for record in read_jsonl_zst(raw):
                if record["metadata"]["key"] not in gone:
                    writer.write(record)
                    self.stat_update("kept")


def sample_budget(config: PipelineConfig) -> int:
    """Bytes each filter task keeps: what the tokenizer and the cell models ask, with room for dedup's removals."""
    tokenizer = 0 if config.tokenizer.path else config.tokenizer.sample_bytes
    cells = 0
    if config.fits_cells:
        from pipeline.steps.tokenize.cell_steps import CellSteps  # lazy: heavy (sklearn)

        cells = CellSteps(config.quality, config.domains, Path(".")).sample_bytes
    return OVERSAMPLE * max(tokenizer, cells)


def merged_sample(directory: Path, removed_of: Callable[[int], set[int]] | None, max_bytes: int) -> list[Document]:
    """The corpus sample: every task's sketch less its removed keys (`removed_of(rank)`, read one task at a
    time; None where the sketches are deduplicated already, `DeduplicatedSketch`), smallest hashes up to
    `max_bytes`, in key order. Streamed through a heap that keeps only the smallest hashes reaching
    `max_bytes`, so the merge holds about one sample, whatever the task count. Each sketch is in hash order:
    once the sample is full, a sketch is read only up to its first larger hash (on a work URL, in place:
    `pipeline.steps.in_place`), so the merge reads about one sample too."""
    kept: list[tuple[int, int, int, Record]] = []  # max-heap by (hash, key): (-hash, -key, bytes, record)
    held = 0
    for path in in_place.children(directory, "*.jsonl.zst"):
        gone = removed_of(int(path.name.split(".")[0])) if removed_of is not None else set()
        with in_place.opened(path) as raw:
            for record in read_jsonl_zst(raw):
                key = record["metadata"]["key"]
                if held >= max_bytes and (sample_rank(key), key) > (-kept[0][0], -kept[0][1]):
                    break  # every later record of this sketch has a larger hash
                if key in gone:
                    continue
                size = len(record["text"].encode("utf-8", errors="surrogatepass"))
                heapq.heappush(kept, (-sample_rank(key), -key, size, record))
                held += size
                while held - kept[0][2] >= max_bytes:  # the sample is complete without its largest hash
                    held -= heapq.heappop(kept)[2]
    sample = [Document(text=r["text"], id=r["id"], metadata=r["metadata"]) for _, _, _, r in kept]
    return sorted(sample, key=lambda doc: doc.metadata["key"])
