"""What each funnel step received, kept and removed (and why), per source, in documents, tokens, bytes.

Every funnel step writes one small JSON file per task, `funnel/<NN>-<step>/<rank>.json`
(atomically, at the end of the task; a rerun of the task overwrites it). The runner sums
the tasks into the store's funnel, `pipeline.store.manifest_records.Funnel` (its steps under the key "stages",
the store format's name for them; per source and, from language identification on, per language), with the
files the read step skipped, read in another encoding or never read.

Tokens are counted once, with the store's tokenizer, after tokenization: a kept document
by the tokens it was written with, a removed one by the tokens of the text it had when it
was removed (its EOS included). A step's received and kept tokens are then derived
backwards from the last step: kept(s) = received(s+1), received(s) = kept(s) + removed(s).
Bytes are UTF-8 bytes of the text as the step saw it (a step that rewrites text, such
as C4's line filter, keeps fewer bytes than it received without removing a document).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

from millrace.artifacts import atomic_write_text
from millrace.config import StrictModel
from pipeline.store.manifest_records import BadFile, Funnel, FunnelCounts, FunnelStep, ReadAs

COUNT_KEYS: tuple[Literal["documents", "tokens", "bytes"], ...] = ("documents", "tokens", "bytes")


class TaskCounts(TypedDict):
    """Documents, tokens and bytes as one task counts them: a plain dict, cheap to add to once per document, and
    the shape of its per-task file. `merge_step` reads the files into the store's `Counts` records."""

    documents: int
    tokens: int
    bytes: int


class TaskCut(TypedDict):
    """Kept documents one task shortened to `max_document_bytes`, and the bytes cut off (the store's `Cut`)."""

    documents: int
    bytes: int


class TaskTable(TypedDict):
    """One source's (or language's) counts in one step of one task (the store's `FunnelCounts`); "cut" (read
    step) and "given_back" (validation step) when there are any."""

    received: TaskCounts
    kept: TaskCounts
    removed: dict[str, TaskCounts]
    cut: NotRequired[TaskCut]
    given_back: NotRequired[dict[str, TaskCounts]]


def _zero() -> TaskCounts:
    return {"documents": 0, "tokens": 0, "bytes": 0}


class StepCounts:
    """One funnel step's counts inside one task."""

    def __init__(self) -> None:
        self.sources: dict[str, TaskTable] = {}
        self.languages: dict[str, TaskTable] = {}  # documents and bytes per identified language, all sources together
        self.bad_files: list[dict[str, str]] = []  # the read step's skipped files: {source, file, error}
        self.encodings: list[
            dict[str, str]
        ] = []  # the read step's files read in a detected encoding: {source, file, encoding}

    def language(self, language: str | None, received_bytes: int, reason: str | None, kept_bytes: int) -> None:
        """One document of `language` (None: not identified yet, not counted) received, then kept or removed."""
        if language is None:
            return
        counts = self.languages.setdefault(language, {"received": _zero(), "kept": _zero(), "removed": {}})
        counts["received"]["documents"] += 1
        counts["received"]["bytes"] += received_bytes
        into = counts["kept"] if reason is None else counts["removed"].setdefault(reason, _zero())
        into["documents"] += 1
        into["bytes"] += kept_bytes

    def _source(self, source: str) -> TaskTable:
        if source not in self.sources:
            self.sources[source] = {"received": _zero(), "kept": _zero(), "removed": {}}
        return self.sources[source]

    def received(self, source: str, nbytes: int) -> None:
        counts = self._source(source)["received"]
        counts["documents"] += 1
        counts["bytes"] += nbytes

    def received_removed(self, source: str, reason: str, documents: int, nbytes: int) -> None:
        """`documents` records received and removed for `reason`, `nbytes` bytes in all."""
        entry = self._source(source)
        for counts in (entry["received"], entry["removed"].setdefault(reason, _zero())):
            counts["documents"] += documents
            counts["bytes"] += nbytes

    def kept(self, source: str, nbytes: int, tokens: int = 0) -> None:
        counts = self._source(source)["kept"]
        counts["documents"] += 1
        counts["bytes"] += nbytes
        counts["tokens"] += tokens

    def removed(self, source: str, reason: str, nbytes: int) -> None:
        counts = self._source(source)["removed"].setdefault(reason, _zero())
        counts["documents"] += 1
        counts["bytes"] += nbytes

    def cut(self, source: str, nbytes_cut: int) -> None:
        """A kept document shortened (to `max_document_bytes`) by `nbytes_cut` bytes."""
        counts = self._source(source).setdefault("cut", {"documents": 0, "bytes": 0})
        counts["documents"] += 1
        counts["bytes"] += nbytes_cut

    def save(self, path: Path) -> None:
        body = {
            "sources": self.sources,
            **({"languages": self.languages} if self.languages else {}),
            **({"bad_files": self.bad_files} if self.bad_files else {}),
            **({"encodings": self.encodings} if self.encodings else {}),
        }
        atomic_write_text(path, json.dumps(body, sort_keys=True))


def step_dir(funnel_root: Path, index: int, step: str) -> Path:
    return funnel_root / f"{index:02d}-{step}"


def merge_step(directory: Path, table: str = "sources") -> dict[str, FunnelCounts]:
    """Sum one funnel step's per-task files: per source, or per language with `table="languages"`."""
    merged: dict[str, FunnelCounts] = {}
    for path in sorted(directory.glob("*.json")):
        for key, counts in json.loads(path.read_text()).get(table, {}).items():
            merged.setdefault(key, FunnelCounts()).merge(FunnelCounts.model_validate(counts))
    return {key: merged[key] for key in sorted(merged)}


def _task_entries(directory: Path, key: str) -> list[dict[str, object]]:
    return [entry for path in directory.glob("*.json") for entry in json.loads(path.read_text()).get(key, [])]


def bad_files(directory: Path) -> list[BadFile]:
    """The files one funnel step's tasks skipped as unreadable (`on_bad_file = "skip"`), sorted by file."""
    found = [BadFile.model_validate(entry) for entry in _task_entries(directory, "bad_files")]
    return sorted(found, key=lambda entry: (entry.source, entry.file))


def encodings(directory: Path) -> list[ReadAs]:
    """The files one funnel step's tasks read in a detected encoding (not UTF-8), sorted by file."""
    found = [ReadAs.model_validate(entry) for entry in _task_entries(directory, "encodings")]
    return sorted(found, key=lambda entry: (entry.source, entry.file))


def removed_tokens_from(paths: list[Path]) -> dict[str, dict[str, dict[str, int]]]:
    """Sum the per-task `{stage: {source: {reason: tokens}}}` files of the removed-token counter."""
    total: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    for path in sorted(paths):
        for stage, sources in json.loads(path.read_text()).items():
            for source, reasons in sources.items():
                for reason, tokens in reasons.items():
                    total[stage][source][reason] += int(tokens)
    return total


def build_funnel(
    steps: list[tuple[str, dict[str, FunnelCounts]]], removed_tokens: dict[str, dict[str, dict[str, int]]]
) -> list[FunnelStep]:
    """The store's funnel steps in order, tokens filled backwards from the last step's kept tokens."""
    sources = sorted({source for _, counts in steps for source in counts})
    for source in sources:
        downstream_received: int | None = None
        for name, counts in reversed(steps):
            entry = counts.setdefault(source, FunnelCounts())
            removed_total = 0
            for reason, removed in entry.removed.items():
                removed.tokens = int(removed_tokens.get(name, {}).get(source, {}).get(reason, 0))
                removed_total += removed.tokens
            if downstream_received is not None:
                entry.kept.tokens = downstream_received
            entry.received.tokens = entry.kept.tokens + removed_total
            downstream_received = entry.received.tokens
    return [
        FunnelStep(name=name, sources={source: counts[source] for source in sorted(counts)}) for name, counts in steps
    ]


LOW_KEEP = 0.10  # a source that keeps less than this share of what it received is warned about


class SourceKept(StrictModel):
    """One source's way through the funnel, for `pipeline run`'s summary and `store info`."""

    source: str
    received: int  # documents read
    kept: int  # documents that reached the store
    top_reason: str | None  # the reason that removed the most documents
    top_removed: int
    low: bool  # kept less than LOW_KEEP of what it received

    def describe(self) -> str:
        """'source fortunes: received 3,000, kept 163 (5.4%), most removed by gopher_short_doc (2,829); ...'."""
        share = self.kept / self.received if self.received else 0.0
        line = f"source {self.source}: received {self.received:,}, kept {self.kept:,} ({share:.1%})"
        if self.top_reason:
            line += f", most removed by {self.top_reason} ({self.top_removed:,})"
        if self.low:
            line += f"; warning: keeps under {LOW_KEEP:.0%} of its documents"
        return line


def per_source(funnel: Funnel, skipped_reasons: frozenset[str] = frozenset()) -> list[SourceKept]:
    """One entry per source: documents received (read), kept (reaching the last step, the store's), and the
    reason that removed the most (reasons in `skipped_reasons`, such as being held out, not counted)."""
    stages = funnel.stages
    if not stages:
        return []
    entries = []
    for source, first in stages[0].sources.items():
        reasons: dict[str, int] = {}
        for stage in stages:
            counted = stage.sources.get(source)
            for reason, removed in (counted.removed if counted is not None else {}).items():
                if reason not in skipped_reasons:
                    reasons[reason] = reasons.get(reason, 0) + removed.documents
        last = stages[-1].sources.get(source)
        received, kept = first.received.documents, last.received.documents if last is not None else 0
        top = max(sorted(reasons.items()), key=lambda item: item[1], default=(None, 0))
        entries.append(
            SourceKept(
                source=source,
                received=received,
                kept=kept,
                top_reason=top[0] if top[1] else None,
                top_removed=top[1],
                low=received > 0 and kept < LOW_KEEP * received,
            )
        )
    return entries
