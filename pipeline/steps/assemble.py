"""Assemble the token store from what the tasks wrote: manifests and renames, no token copied.

The tokenize and split tasks (`pipeline.steps.tokenize.cell_shards`) wrote every cell's final shards, their
chunk digests and trace parts under the work directory's `store/`, and each task's metadata (its
shard table rows, counts, trace part, sample texts, evaluation-set findings) to `parts/<rank>.json`.
Assembly renames `store/` to a staging directory next to the final one, reads only those small
part files (no `.bin` byte: the final shard files are the very files the tasks wrote), writes
each cell's manifest (its shard table: the tasks' rows in rank order), the evaluation sets (small,
tokenized here) and the store manifest, and renames the staging directory into place; the funnel
gets a last stage that counts the held-out documents. A kill at any point leaves either `store/`
or the staging directory, from which the rerun goes on; an existing version is never touched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from millrace.artifacts import content_hash, sha256_file
from millrace.errors import ConfigError, MillraceError
from pipeline.cells.held_out_split import GIVEN_BACK_REASON, HELD_OUT_REASON, VALIDATION_FUNNEL_STEP
from pipeline.config import HeldOutConfig
from pipeline.steps.held_out.eval_sets import Containment, Hit, StoreTokens, better_hit, write_eval_set
from pipeline.steps.tokenize.cell_shards import CellPart, TaskPart
from pipeline.steps.tokenize.tokenization import SAMPLES_PER_CELL, eos_id, load_tokenizer, tokenizer_fingerprint
from pipeline.store.config_record import PipelineRecord
from pipeline.store.format import (
    CellManifest,
    CellSummary,
    EvalSetSummary,
    HeldOut,
    ShardInfo,
    ShardTable,
    StoreManifest,
    TokenizerInfo,
    dtype_for_vocab,
    write_cell_manifest,
    write_store_manifest,
)
from pipeline.store.manifest_records import (
    CellStats,
    Counts,
    Funnel,
    FunnelCounts,
    FunnelStep,
    Overlap,
    StoreStats,
    Trace,
    TracePart,
)

log = logging.getLogger(__name__)


class PartsDigest:
    """One pass over the tasks' part files in rank order (the store's order of a cell's shards), one file held at
    a time: each cell's pieces go to a file of their own under `spill` (read back one cell at a time by
    `pieces`), and what is summed over tasks (the documents given back, the evaluation sets' findings) is merged
    as it comes. So assembly holds one task's part and one cell's pieces, never every task's parts at once."""

    def __init__(self, parts_dir: Path, spill: Path, set_names: list[str]):
        self.spill = spill
        self.cells: list[str] = []
        self.given_back: dict[str, Counts] = {}
        self.hits: dict[str, dict[int, Hit]] = {name: {} for name in set_names}
        self.ngrams: dict[str, np.ndarray] = {name: np.zeros(0, np.uint64) for name in set_names}
        spill.mkdir(parents=True, exist_ok=True)
        handles: dict[str, Any] = {}
        try:
            for path in sorted(Path(parts_dir).glob("*.json"), key=lambda p: int(p.stem)):
                self._add(json.loads(path.read_text()), handles)
        finally:
            for handle in handles.values():
                handle.close()
        self.cells.sort()

    def _add(self, part: TaskPart, handles: dict[str, Any]) -> None:
        for cell, piece in part["cells"].items():
            if cell not in handles:
                self.cells.append(cell)
                handles[cell] = open(self._spilled(cell), "w")  # noqa: SIM115  # closed after the pass
            handles[cell].write(json.dumps(piece) + "\n")
            for source, numbers in piece.get("given_back_sources", {}).items():
                self.given_back.setdefault(source, Counts()).add(Counts.model_validate(numbers))
        for name, hits in self.hits.items():
            for number, hit in part["overlap"].get(name, {}).items():
                hits[int(number)] = better_hit(hits.get(int(number)), hit)
        for name, known in self.ngrams.items():
            found = np.asarray(part.get("set_ngrams", {}).get(name, []), dtype=np.uint64)
            if found.size:
                self.ngrams[name] = np.union1d(known, found)

    def _spilled(self, cell: str) -> Path:
        return self.spill / f"{cell}.jsonl"

    def pieces(self, cell: str) -> list[CellPart]:
        """A cell's pieces, one per task that had documents of it, in rank order."""
        with open(self._spilled(cell)) as handle:
            return [json.loads(line) for line in handle]


def _sum_sources(entries: list[dict[str, dict[str, int]]]) -> dict[str, Counts]:
    total: dict[str, Counts] = {}
    for entry in entries:
        for name, counts in entry.items():
            into = total.setdefault(name, Counts())
            into.documents += counts["documents"]
            into.tokens += counts["tokens"]
            into.bytes += counts["bytes"]
    return {name: total[name] for name in sorted(total)}


def _cell_manifest(
    cell: str, pieces: list[CellPart], dtype: str, fingerprint: str, extra_stats: dict[str, object]
) -> CellManifest:
    """A cell's manifest from its pieces (one per task that had documents of it, in rank order)."""
    sources = _sum_sources([p["sources"] for p in pieces])
    held_sources = _sum_sources([p["validation_sources"] for p in pieces])
    samples = sorted((s for p in pieces for s in p["samples"]), key=lambda s: (s["hash"], s["id"]))
    held_parts = [TracePart.model_validate(p["held_out_trace"]) for p in pieces if p.get("held_out_trace")]
    stats = CellStats.model_validate(
        {"samples": [{k: s[k] for k in ("id", "source", "text")} for s in samples[:SAMPLES_PER_CELL]]} | extra_stats
    ).model_copy(
        update={
            "trace": Trace(parts=[TracePart.model_validate(p["trace"]) for p in pieces if p["trace"] is not None]),
            "held_out_trace": Trace(parts=held_parts) if held_parts else None,
        }
    )
    return CellManifest(
        cell=cell,
        dtype=dtype,
        tokenizer_fingerprint=fingerprint,
        documents=sum(c.documents for c in sources.values()),
        tokens=sum(c.tokens for c in sources.values()),
        bytes=sum(c.bytes for c in sources.values()),
        shards=ShardTable.of([ShardInfo(**s) for p in pieces for s in p["shards"]]),
        sources=sources,
        stats=stats,
        validation=HeldOut(
            documents=sum(c.documents for c in held_sources.values()),
            tokens=sum(c.tokens for c in held_sources.values()),
            bytes=sum(c.bytes for c in held_sources.values()),
            shards=[ShardInfo(**s) for p in pieces for s in p["validation"]],
            sources=held_sources,
        ),
    )


def staging_dir(final: Path) -> Path:
    return final.with_name(f".{final.name}.staging")


def _staging(final: Path, staged: Path) -> Path:
    """The staging directory holding the tasks' shard files: `staged` renamed next to `final`, or
    what an earlier, killed assembly left there (its manifests are rewritten)."""
    staging = staging_dir(final)
    if staged.exists():
        if staging.exists():
            shutil.rmtree(staging)  # an older staging: the tasks have run again since
        staging.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, staging)
    elif not staging.exists():
        raise MillraceError(
            f"{staged}: the tokenize and split tasks' output is missing (and no staging at {staging}); "
            "rerun with --restart"
        )
    for leftover in ("tokenizer", "models", "sets"):
        shutil.rmtree(staging / leftover, ignore_errors=True)
    for partial in staging.rglob(".*.tmp"):  # what a killed writer left half-written
        partial.unlink()
    (staging / "cells").mkdir(exist_ok=True)
    return staging


CellSources = tuple[dict[str, Counts], dict[str, Counts]]  # a cell's (kept, held-out) per source


def validation_funnel_step(cells: list[CellSources], given_back: dict[str, Counts] | None = None) -> FunnelStep:
    """The funnel's last step: per source, documents that reached the store and those held out of training.

    `given_back` (per source): chosen for the held-out split, then given back to training by the decontamination.
    They are among the kept documents, and counted again under `given_back` with their own reason."""
    per_source: dict[str, FunnelCounts] = {}
    for kept, held in cells:
        for part, counts in (("kept", kept), ("held", held)):
            for source, numbers in counts.items():
                entry = per_source.setdefault(source, FunnelCounts(removed={HELD_OUT_REASON: Counts()}))
                into = entry.kept if part == "kept" else entry.removed[HELD_OUT_REASON]
                for target in (entry.received, into):
                    target.add(Counts(documents=numbers.documents, tokens=numbers.tokens, bytes=numbers.bytes))
    for source, returned in (given_back or {}).items():
        per_source[source].given_back = {GIVEN_BACK_REASON: returned}
    return FunnelStep(
        name=VALIDATION_FUNNEL_STEP, sources={source: per_source[source] for source in sorted(per_source)}
    )


@dataclass(frozen=True)
class StoreContents:
    """What the assembly writes into a store version besides the tasks' shard files: its name, the tokenizer it
    was tokenized with, the recorded config, and what the phases before counted (funnel, statistics)."""

    name: str
    version: str
    tokenizer: Path  # the tokenizer.json the tasks used
    eos: str
    sources: list[str]
    shard_tokens: int
    pipeline_config: PipelineRecord  # the config as the store records it (`runner.stored_config`)
    funnel: Funnel
    stats: StoreStats
    cell_stats: dict[str, dict[str, object]] = field(default_factory=dict)
    models_dir: Path | None = None  # the fitted quality and domain models, copied under `models/`
    validation: HeldOutConfig = field(default_factory=HeldOutConfig)


def assemble_store(final: Path, staged: Path, parts_dir: Path, contents: StoreContents) -> Path:
    """Write the manifests next to the tasks' shard files (`staged`, their task metadata in `parts_dir`) in a
    staging directory, then rename it to `final`.

    The fitted quality and domain models travel with the store (under `models/`), so that
    the same document lands in the same cell wherever the store goes.
    """
    staging = _staging(final, staged)
    tokens = _copy_tokenizer_and_models(staging, contents)
    set_names = [s.name for s in contents.validation.sets]
    parts, cells, counted = write_cells(
        staging, parts_dir, str(tokens.dtype), tokens.fingerprint, contents.cell_stats, set_names
    )
    given_back = dict(sorted(parts.given_back.items()))
    funnel = contents.funnel.model_copy(
        update={"stages": [*contents.funnel.stages, validation_funnel_step(counted, given_back)]}
    )
    store = StoreManifest(
        name=contents.name,
        version=contents.version,
        dtype=str(tokens.dtype),
        tokenizer=TokenizerInfo(fingerprint=tokens.fingerprint, vocab_size=tokens.vocab_size, eos_id=tokens.eos_id),
        cells=cells,
        sources=contents.sources,
        pipeline_config=contents.pipeline_config,
        config_hash=content_hash(contents.pipeline_config.model_dump(mode="json")),
        funnel=funnel,
        stats=contents.stats,
        sets=_write_eval_sets(staging, parts, tokens, contents),
        files={
            path.relative_to(staging).as_posix(): sha256_file(path)
            for path in sorted((staging / "models").rglob("*"))
            if path.is_file()
        },
    )
    write_store_manifest(staging, store)
    os.rename(staging, final)
    return final


def _copy_tokenizer_and_models(staging: Path, contents: StoreContents) -> StoreTokens:
    """The tokenizer and the fitted models copied into the staging directory; the tokenizer read from its copy."""
    tokenizer_copy = staging / "tokenizer" / "tokenizer.json"
    tokenizer_copy.parent.mkdir(parents=True)
    shutil.copyfile(contents.tokenizer, tokenizer_copy)
    if contents.models_dir is not None and contents.models_dir.is_dir():
        shutil.copytree(contents.models_dir, staging / "models", ignore=shutil.ignore_patterns("cell-stats"))
    tokenizer = load_tokenizer(tokenizer_copy)
    return StoreTokens(
        tokenizer=tokenizer,
        dtype=dtype_for_vocab(tokenizer.get_vocab_size(with_added_tokens=True)),
        fingerprint=tokenizer_fingerprint(tokenizer_copy),
        eos_id=eos_id(tokenizer, contents.eos),
    )


def write_cells(
    staging: Path,
    parts_dir: Path,
    dtype: str,
    fingerprint: str,
    cell_stats: dict[str, dict[str, object]],
    set_names: list[str],
) -> tuple[PartsDigest, dict[str, CellSummary], list[CellSources]]:
    """Every cell's manifest, one cell at a time from one pass over the part files (`PartsDigest`, spilled under
    the work directory): the digest, each cell's summary and each cell's (kept, held-out) counts per source."""
    with tempfile.TemporaryDirectory(prefix="assembly-", dir=Path(parts_dir).parent) as spill:
        parts = PartsDigest(parts_dir, Path(spill), set_names)
        clashing = sorted(set(set_names) & set(parts.cells))
        if clashing:
            raise ConfigError(f"field 'validation.sets': set name {clashing[0]!r} is also a cell's name")
        cells: dict[str, CellSummary] = {}
        counted: list[CellSources] = []
        for cell in parts.cells:
            manifest = _cell_manifest(cell, parts.pieces(cell), dtype, fingerprint, cell_stats.get(cell, {}))
            cells[cell] = _written_cell(staging, manifest)
            counted.append((manifest.sources, manifest.validation.sources))
    return parts, cells, counted


def _written_cell(staging: Path, manifest: CellManifest) -> CellSummary:
    """Write a cell's manifest into the staging directory; its summary for the store manifest."""
    digest = write_cell_manifest(staging / "cells" / manifest.cell, manifest)
    return CellSummary(
        documents=manifest.documents,
        tokens=manifest.tokens,
        bytes=manifest.bytes,
        validation_documents=manifest.validation.documents,
        validation_tokens=manifest.validation.tokens,
        manifest_hash=digest,
    )


def _write_eval_sets(
    staging: Path, parts: PartsDigest, tokens: StoreTokens, contents: StoreContents
) -> dict[str, EvalSetSummary]:
    """Each external evaluation set tokenized into `sets/<name>/`, with its overlap with the cells (warned about)."""
    validation = contents.validation
    eval_sets = {}
    for config in validation.sets:
        containment = (
            Containment(
                parts.ngrams[config.name],
                validation.contamination_ngram,
                validation.contamination_threshold,
            )
            if validation.decontaminate
            else None
        )
        hits = parts.hits[config.name]
        written = write_eval_set(
            config, staging / "sets" / config.name, tokens, contents.shard_tokens, hits, containment
        )
        overlap = written.overlap
        eval_sets[config.name] = EvalSetSummary(
            documents=written.held.documents,
            tokens=written.held.tokens,
            bytes=written.held.bytes,
            manifest_hash=written.manifest_hash,
            overlap_exact=overlap.exact,
            overlap_near=overlap.near,
            contained=overlap.contained,
        )
        _warn_overlap(config.name, overlap, validation.contamination_ngram)
    return eval_sets


def _warn_overlap(name: str, overlap: Overlap, ngram: int) -> None:
    if overlap.contained:
        log.warning(
            "evaluation set %s: %d documents are mostly found in training (%d-grams) and are left out of "
            "it (listed in sets/%s/set.json)",
            name,
            overlap.contained,
            ngram,
            name,
        )
    if overlap.exact or overlap.near:
        log.warning(
            "evaluation set %s: %d documents occur in the store's cells, %d more as near duplicates "
            "(listed in sets/%s/set.json)",
            name,
            overlap.exact,
            overlap.near,
            name,
        )
