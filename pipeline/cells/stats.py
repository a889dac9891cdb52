"""Cells `cNNqQ`: a document's (domain, quality bucket), and the per-cell stats of a cell manifest.

`CellStatsTally` gathers what a cell manifest records beyond counts (its `CellStats` record), as documents
pass on their way to the tokenizer (`CellStatsWriter`, one file per task): the observed quality-score
range, documents per language label (so a report can show each quality bucket's language
mix) and a deterministic sample of documents. The
sample keeps the documents whose ids hash lowest (xxhash64), so it is the same whatever
the order of documents, the number of tasks or the executor; two partial tallies (say
from two tasks) merge into the one a single task would have gathered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_write_text
from pipeline.cells.calibration import calibration_group
from pipeline.store.manifest_records import Sample

SAMPLES_PER_CELL = 5
SAMPLE_CHARS = 400


def cell_name(domain: int | None, bucket: int | None) -> str:
    """`c03q4`; `c03` without a quality bucket; `q4` without a domain."""
    parts = []
    if domain is not None:
        parts.append(f"c{int(domain):02d}")
    if bucket is not None:
        parts.append(f"q{int(bucket)}")
    if not parts:
        raise ValueError("a cell needs a domain or a quality bucket")
    return "".join(parts)


def trim(text: str, chars: int = SAMPLE_CHARS) -> str:
    """At most `chars` characters, cut at a word boundary when one is near, with an ellipsis."""
    text = text.strip()
    if len(text) <= chars:
        return text
    cut = text[:chars]
    space = cut.rfind(" ")
    return (cut[:space] if space > chars * 3 // 4 else cut).rstrip() + "…"


def _sample_order(pair: tuple[int, Sample]) -> tuple[int, str]:
    return pair[0], pair[1].id


@dataclass
class CellStatsTally:
    """Per-cell statistics as one task gathers them, mergeable with another task's: domain, bucket, observed
    score range, languages, lowest-hash sample (written into the cell's `CellStats` record)."""

    domain: int | None = None
    bucket: int | None = None
    score_min: float | None = None
    score_max: float | None = None
    samples: list[tuple[int, Sample]] = field(default_factory=list)
    languages: dict[str, int] = field(default_factory=dict)
    keep: int = SAMPLES_PER_CELL

    def add(self, doc: Document, source: str | None = None) -> None:
        meta = doc.metadata
        if meta.get("domain") is not None:
            self.domain = int(meta["domain"])
        if meta.get("quality_bucket") is not None:
            self.bucket = int(meta["quality_bucket"])
        score = meta.get("quality_score")
        if score is not None:
            score = float(score)
            self.score_min = score if self.score_min is None else min(self.score_min, score)
            self.score_max = score if self.score_max is None else max(self.score_max, score)
        language = calibration_group(meta)
        self.languages[language] = self.languages.get(language, 0) + 1
        rank = xxhash.xxh64_intdigest(doc.id.encode())
        if any(sample.id == doc.id for _, sample in self.samples):
            return
        if len(self.samples) < self.keep or rank < self.samples[-1][0]:
            sample = Sample(id=doc.id, source=source or meta.get("source", ""), text=trim(doc.text))
            self.samples = sorted(self.samples + [(rank, sample)], key=_sample_order)[: self.keep]

    def merge(self, other: CellStatsTally) -> CellStatsTally:
        merged = CellStatsTally(
            domain=self.domain if self.domain is not None else other.domain,
            bucket=self.bucket if self.bucket is not None else other.bucket,
            score_min=min((s for s in (self.score_min, other.score_min) if s is not None), default=None),
            score_max=max((s for s in (self.score_max, other.score_max) if s is not None), default=None),
            languages={
                lang: self.languages.get(lang, 0) + other.languages.get(lang, 0)
                for lang in sorted(set(self.languages) | set(other.languages))
            },
            keep=self.keep,
        )
        unique = {sample.id: (rank, sample) for rank, sample in self.samples + other.samples}
        merged.samples = sorted(unique.values(), key=_sample_order)[: self.keep]
        return merged

    def to_json(self, labels: dict[str, str] | None = None) -> dict[str, object]:
        """The `CellManifest.stats` keys: domain, bucket, label, score_range, languages, samples (absent when
        unknown)."""
        stats: dict[str, object] = {}
        if self.domain is not None:
            stats["domain"] = self.domain
            if labels and f"c{self.domain:02d}" in labels:
                stats["label"] = labels[f"c{self.domain:02d}"]
        if self.bucket is not None:
            stats["bucket"] = self.bucket
        if self.score_min is not None:
            stats["score_range"] = [self.score_min, self.score_max]
        stats["languages"] = dict(sorted(self.languages.items()))
        stats["samples"] = [sample.model_dump() for _, sample in self.samples]
        return stats

    @classmethod
    def from_json(cls, stats: dict[str, Any]) -> CellStatsTally:
        """Rebuild from `to_json` output (e.g. a task's partial stats), to merge with others."""
        score_range = stats.get("score_range") or [None, None]
        samples = [
            (xxhash.xxh64_intdigest(s["id"].encode()), Sample.model_validate(s)) for s in stats.get("samples", [])
        ]
        return cls(
            domain=stats.get("domain"),
            bucket=stats.get("bucket"),
            score_min=score_range[0],
            score_max=score_range[1],
            samples=sorted(samples, key=_sample_order),
            languages=dict(stats.get("languages") or {}),
        )


class CellStatsWriter(PipelineStep):
    """Gathers a `CellStatsTally` per cell as documents pass, and writes this task's share as `<rank>.json`.

    Placed last before tokenization. The file is written whole (atomically) when the task's
    documents are exhausted, so a rerun task replaces it; `read_cell_stats` merges all tasks.
    """

    name = "📊 cell stats"
    type = "🗂️ - CELLS"

    def __init__(self, output_dir: Path | str):
        super().__init__()
        self.output_dir = Path(output_dir)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        cells: dict[str, CellStatsTally] = {}
        for doc in data or ():
            cell = doc.metadata.get("cell")
            if cell is not None:
                cells.setdefault(cell, CellStatsTally()).add(doc)
                self.stat_update("recorded")
            yield doc
        payload = {cell: stats.to_json() for cell, stats in sorted(cells.items())}
        atomic_write_text(self.output_dir / f"{rank:05d}.json", json.dumps(payload, sort_keys=True))


def read_cell_stats(directory: Path | str, labels: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    """Merge every task's `CellStatsWriter` output into `CellManifest.stats` per cell."""
    merged: dict[str, CellStatsTally] = {}
    for path in sorted(Path(directory).glob("*.json")):
        for cell, stats in json.loads(path.read_text()).items():
            partial = CellStatsTally.from_json(stats)
            merged[cell] = merged[cell].merge(partial) if cell in merged else partial
    return {cell: stats.to_json(labels) for cell, stats in sorted(merged.items())}
