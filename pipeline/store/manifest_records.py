"""The store manifest's nested records: the funnel, the store-level statistics (domains, quality buckets,
decontamination) and an evaluation set's overlap with the cells.

They are the JSON the pipeline has always written (`store.json`'s `funnel` and `stats`, `set.json`'s `overlap`),
declared once so that the pipeline writes them from these models and every reader (`store info`, the
composition page, the mixtures room's labels) gets the models back instead of dicts. Keys a store may lack were
written only when they had something in them (a read step's `cut`, a funnel step's `languages`), so their
defaults are empty and they are left out of the file when empty: a store written before these models reads,
and one written after has the same bytes. A store whose funnel or statistics have another shape is refused in
one line naming `store.json` and the field. No datatrove import here (the reports room reads it).
"""

from __future__ import annotations

from typing import Literal

import pydantic

from millrace.config import StrictModel


class Record(StrictModel):
    """Strict like every artifact; not frozen (the pipeline sums counts into them in place)."""

    model_config = pydantic.ConfigDict(frozen=False)


class Counts(Record):
    """Documents, tokens and bytes (tokens are filled in after tokenization; a language table has none)."""

    documents: int = 0
    tokens: int = 0
    bytes: int = 0

    def add(self, other: Counts) -> None:
        self.documents += other.documents
        self.tokens += other.tokens
        self.bytes += other.bytes


class Cut(Record):
    """Kept documents shortened to `max_document_bytes`, and the bytes cut off them."""

    documents: int = 0
    bytes: int = 0


def _empty(value: object) -> bool:
    return not value


class FunnelCounts(Record):
    """What one funnel step received, kept and removed (by reason) for one source or one language."""

    received: Counts = pydantic.Field(default_factory=Counts)
    kept: Counts = pydantic.Field(default_factory=Counts)
    removed: dict[str, Counts] = {}
    # the read step's shortened documents (when any)
    cut: Cut | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    # chosen for the held-out split, then given back to training by the decontamination (the last step's)
    given_back: dict[str, Counts] = pydantic.Field(default_factory=dict, exclude_if=_empty)

    def merge(self, other: FunnelCounts) -> None:
        """Add another task's counts of the same step and key."""
        self.received.add(other.received)
        self.kept.add(other.kept)
        for reason, removed in other.removed.items():
            self.removed.setdefault(reason, Counts()).add(removed)
        if other.cut is not None:
            self.cut = self.cut or Cut()
            self.cut.documents += other.cut.documents
            self.cut.bytes += other.cut.bytes

    def removed_documents(self) -> int:
        return sum(c.documents for c in self.removed.values())


class FunnelStep(Record):
    """One funnel step: per source, and from language identification on, per language (all sources together)."""

    name: str
    sources: dict[str, FunnelCounts] = {}
    languages: dict[str, FunnelCounts] = pydantic.Field(default_factory=dict, exclude_if=_empty)


class BadFile(Record):
    """An input file skipped as unreadable (`on_bad_file = "skip"`)."""

    source: str
    file: str
    error: str


class ReadAs(Record):
    """A JSON Lines file read in a detected encoding, not UTF-8."""

    source: str
    file: str
    encoding: str


class NotRead(Record):
    """Files under one of a source's folders that no source reads."""

    source: str
    path: str
    files: int
    reasons: dict[str, int] = {}
    examples: list[str] = []

    def describe(self) -> str:
        """One log line: 'not read: 3 files under /corpus/web (source web), e.g. a.txt, b.csv (no reader ...)'."""
        why = "; ".join(f"{n} {reason}" for reason, n in self.reasons.items())
        return (
            f"not read: {self.files:,} file{'s' if self.files != 1 else ''} under {self.path} "
            f"(source {self.source}), e.g. {', '.join(self.examples)} ({why})"
        )


class Funnel(Record):
    """What each funnel step received, kept and removed, in order (the key is "stages", the store format's
    name for them), and the input files the read step skipped, read in another encoding or never read."""

    stages: list[FunnelStep] = []
    bad_files: list[BadFile] = []
    not_read: list[NotRead] = []
    encodings: list[ReadAs] = []

    @pydantic.model_serializer(mode="wrap")
    def _empty_as_empty_object(self, handler: pydantic.SerializerFunctionWrapHandler) -> dict[str, object]:
        """A stats-only store's funnel is `{}` in its store.json, as it always was (revisions pin its hash)."""
        empty = not (self.stages or self.bad_files or self.not_read or self.encodings)
        return {} if empty else dict(handler(self))


class DomainStats(Record):
    """The fitted domain model's summary: how many domains (and the configured k when a small sample gave
    fewer), and each domain's label (`c00`: "...")."""

    k: int
    labels: dict[str, str] = {}
    k_configured: int | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)


class QualityStats(Record):
    """The fitted quality model's summary: buckets, what the score means, and each calibration group's
    score range per bucket (`{group: {"q0": [low, high], ...}}`)."""

    buckets: int
    good: list[str]
    other: str
    calibrated_by: str
    meaning: str
    score_ranges: dict[str, dict[str, list[float]]] = {}


class CellContamination(Record):
    documents: int = 0
    tokens: int = 0


class Decontamination(Record):
    """Held-out documents given back to training because their n-grams are mostly found in it."""

    ngram: int
    threshold: float
    checked: int  # held-out documents judged
    documents: int  # given back
    tokens: int
    per_cell: dict[str, CellContamination] = {}
    # rounds of the fixpoint, and the documents given back after the first (stores built before: absent)
    rounds: int | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    later_rounds: int | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)


class StoreStats(Record):
    """Store-level statistics from the pipeline's later phases (each absent when its phase did not run)."""

    domains: DomainStats | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    quality: QualityStats | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    decontamination: Decontamination | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)

    def domain_labels(self) -> dict[str, str]:
        return dict(self.domains.labels) if self.domains is not None else {}


class OverlapDocument(Record):
    """An evaluation-set document the store's cells also hold, exactly or as a near duplicate."""

    index: int  # the document's position in the set's files
    kind: Literal["exact", "near"]
    cell: str


class ContainedDocument(Record):
    """An evaluation-set document whose n-grams are mostly in training: left out of its shards."""

    index: int
    kind: Literal["contained"]
    share: float  # of its n-grams found in training


class Overlap(Record):
    """An evaluation set's overlap with the store's training cells."""

    exact: int = 0
    near: int = 0
    contained: int = 0
    documents: list[OverlapDocument] = []
    contained_documents: list[ContainedDocument] = []


class TracePart(Record):
    """One tokenize (or split) task's trace sidecar of a cell (`pipeline.store.trace`), pinned by its sha256."""

    file: str
    sha256: str
    documents: int
    shards: int
    tokens: int


class Trace(Record):
    """A cell's trace sidecars in store order; stores built before the per-task parts name one `file`."""

    parts: list[TracePart] | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    file: str | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)


class Sample(Record):
    """A document of the cell shown on the composition page."""

    id: str
    source: str
    text: str


class CellStats(Record):
    """A cell's statistics (`cell.json`'s `stats`): its domain and bucket (with the domain's label and the
    bucket's score range) when the pipeline fitted them, its documents per language, sample documents, and its
    trace sidecars (training and held-out documents). Each key is absent when its phase did not run."""

    domain: int | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    bucket: int | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    label: str | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    score_range: list[float] | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    languages: dict[str, int] | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    samples: list[Sample] | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    trace: Trace | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    held_out_trace: Trace | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
