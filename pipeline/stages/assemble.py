"""Assemble the token store from what the tasks wrote: manifests and renames, no token copied.

The tokenize and split tasks (`pipeline.stages.tokenize.cell_shards`) wrote every cell's final shards, their
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
from pathlib import Path
from typing import Any

import numpy as np

from millrace.artifacts import content_hash, sha256_file
from millrace.errors import ConfigError, MillraceError
from pipeline.cells.held_out_split import GIVEN_BACK_REASON, HELD_OUT_REASON, VALIDATION_FUNNEL_STEP
from pipeline.config import HeldOutConfig
from pipeline.stages.funnel import COUNT_KEYS, Counts, Table
from pipeline.stages.held_out.eval_sets import Hit, better_hit, write_eval_set
from pipeline.stages.tokenize.cell_shards import CellPart, TaskPart
from pipeline.stages.tokenize.tokenization import SAMPLES_PER_CELL, eos_id, load_tokenizer, tokenizer_fingerprint
from pipeline.store.format import (
    CellManifest,
    CellSummary,
    EvalSetSummary,
    HeldOut,
    ShardInfo,
    ShardTable,
    SourceCounts,
    StoreManifest,
    TokenizerInfo,
    dtype_for_vocab,
    write_cell_manifest,
    write_store_manifest,
)
from pipeline.store.trace import HELD_OUT_KEY

log = logging.getLogger(__name__)


def _read_parts(parts_dir: Path) -> list[TaskPart]:
    """Every shard task's metadata, in rank order (the store's order of a cell's shards)."""
    return [json.loads(path.read_text()) for path in sorted(Path(parts_dir).glob("*.json"), key=lambda p: int(p.stem))]


def _sum_sources(entries: list[dict[str, dict[str, int]]]) -> dict[str, SourceCounts]:
    total: dict[str, SourceCounts] = {}
    for entry in entries:
        for name, counts in entry.items():
            into = total.setdefault(name, SourceCounts())
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
    stats: dict[str, Any] = {
        "samples": [{k: s[k] for k in ("id", "source", "text")} for s in samples[:SAMPLES_PER_CELL]]
    }
    stats.update(extra_stats)
    stats["trace"] = {"parts": [p["trace"] for p in pieces if p["trace"] is not None]}
    if held_parts := [p["held_out_trace"] for p in pieces if p.get("held_out_trace")]:
        stats[HELD_OUT_KEY] = {"parts": held_parts}
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


def _set_hits(parts: list[TaskPart], name: str) -> dict[int, Hit]:
    """One evaluation set's findings over every task: per set document, the reported [kind, cell]."""
    hits: dict[int, Hit] = {}
    for part in parts:
        for number, hit in part["overlap"].get(name, {}).items():
            hits[int(number)] = better_hit(hits.get(int(number)), hit)
    return hits


def _set_trained_ngrams(parts: list[TaskPart], name: str) -> np.ndarray:
    """One evaluation set's n-gram hashes that training documents hold, over every task."""
    found = [np.asarray(part.get("set_ngrams", {}).get(name, []), dtype=np.uint64) for part in parts]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)


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


def validation_funnel_step(
    manifests: list[CellManifest], given_back: dict[str, Counts] | None = None
) -> dict[str, object]:
    """The funnel's last stage: per source, documents that reached the store and those held out of training.

    `given_back` (per source): chosen for the held-out split, then given back to training by the decontamination.
    They are among the kept documents, and counted again under `given_back` with their own reason."""
    per_source: dict[str, Table] = {}
    for manifest in manifests:
        for part, counts in (("kept", manifest.sources), ("held", manifest.validation.sources)):
            for source, numbers in counts.items():
                entry = per_source.setdefault(
                    source, {"received": _zero(), "kept": _zero(), "removed": {HELD_OUT_REASON: _zero()}}
                )
                for target in (
                    entry["received"],
                    entry["kept"] if part == "kept" else entry["removed"][HELD_OUT_REASON],
                ):
                    target["documents"] += numbers.documents
                    target["tokens"] += numbers.tokens
                    target["bytes"] += numbers.bytes
    for source, returned in (given_back or {}).items():
        per_source[source]["given_back"] = {
            GIVEN_BACK_REASON: {
                "documents": returned["documents"],
                "tokens": returned["tokens"],
                "bytes": returned["bytes"],
            }
        }
    return {"name": VALIDATION_FUNNEL_STEP, "sources": {source: per_source[source] for source in sorted(per_source)}}


def given_back_sources(parts: list[TaskPart]) -> dict[str, Counts]:
    """Per source, the held-out documents the split tasks gave back to training (summed over tasks and cells)."""
    total: dict[str, Counts] = {}
    for part in parts:
        for cell in part["cells"].values():
            for source, numbers in cell.get("given_back_sources", {}).items():
                entry = total.setdefault(source, _zero())
                for key in COUNT_KEYS:
                    entry[key] += numbers[key]
    return dict(sorted(total.items()))


def _zero() -> Counts:
    return {"documents": 0, "tokens": 0, "bytes": 0}


def assemble_store(
    final: Path,
    name: str,
    version: str,
    staged: Path,
    parts_dir: Path,
    tokenizer_path: Path,
    eos: str,
    sources: list[str],
    shard_tokens: int,
    pipeline_config: dict[str, Any],
    funnel: dict[str, Any],
    store_stats: dict[str, Any],
    cell_stats: dict[str, dict[str, object]],
    models_dir: Path | None = None,
    validation: HeldOutConfig = HeldOutConfig(),
) -> Path:
    """Write the manifests next to the tasks' shard files in a staging directory, then rename it to `final`.

    The fitted quality and domain models travel with the store (under `models/`), so that
    the same document lands in the same cell wherever the store goes.
    """
    staging = _staging(final, staged)
    tokenizer_copy = staging / "tokenizer" / "tokenizer.json"
    tokenizer_copy.parent.mkdir(parents=True)
    shutil.copyfile(tokenizer_path, tokenizer_copy)
    if models_dir is not None and models_dir.is_dir():
        shutil.copytree(models_dir, staging / "models", ignore=shutil.ignore_patterns("cell-stats"))
    tokenizer = load_tokenizer(tokenizer_copy)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = dtype_for_vocab(vocab_size)
    fingerprint = tokenizer_fingerprint(tokenizer_copy)
    parts = _read_parts(parts_dir)
    cell_names = sorted({cell for part in parts for cell in part["cells"]})
    clashing = sorted({s.name for s in validation.sets} & set(cell_names))
    if clashing:
        raise ConfigError(f"field 'validation.sets': set name {clashing[0]!r} is also a cell's name")
    cells: dict[str, CellSummary] = {}
    manifests = []
    for cell in cell_names:
        manifest = _cell_manifest(
            cell,
            [p["cells"][cell] for p in parts if cell in p["cells"]],
            str(dtype),
            fingerprint,
            cell_stats.get(cell, {}),
        )
        digest = write_cell_manifest(staging / "cells" / cell, manifest)
        manifests.append(manifest)
        cells[cell] = CellSummary(
            documents=manifest.documents,
            tokens=manifest.tokens,
            bytes=manifest.bytes,
            validation_documents=manifest.validation.documents,
            validation_tokens=manifest.validation.tokens,
            manifest_hash=digest,
        )
    funnel = {
        **funnel,
        "stages": [*funnel.get("stages", []), validation_funnel_step(manifests, given_back_sources(parts))],
    }
    eval_sets = {}
    for config in validation.sets:
        trained = _set_trained_ngrams(parts, config.name) if validation.decontaminate else None
        written = write_eval_set(
            config,
            staging / "sets" / config.name,
            tokenizer,
            eos_id(tokenizer, eos),
            dtype,
            fingerprint,
            shard_tokens,
            _set_hits(parts, config.name),
            trained,
            validation.contamination_ngram,
            validation.contamination_threshold,
        )
        eval_sets[config.name] = EvalSetSummary(
            documents=written.held.documents,
            tokens=written.held.tokens,
            bytes=written.held.bytes,
            manifest_hash=written.manifest_hash,
            overlap_exact=written.overlap["exact"],
            overlap_near=written.overlap["near"],
            contained=written.overlap["contained"],
        )
        if written.overlap["contained"]:
            log.warning(
                "evaluation set %s: %d documents are mostly found in training (%d-grams) and are left out of "
                "it (listed in sets/%s/set.json)",
                config.name,
                written.overlap["contained"],
                validation.contamination_ngram,
                config.name,
            )
        if written.overlap["exact"] or written.overlap["near"]:
            log.warning(
                "evaluation set %s: %d documents occur in the store's cells, %d more as near duplicates "
                "(listed in sets/%s/set.json)",
                config.name,
                written.overlap["exact"],
                written.overlap["near"],
                config.name,
            )
    store = StoreManifest(
        name=name,
        version=version,
        dtype=str(dtype),
        tokenizer=TokenizerInfo(fingerprint=fingerprint, vocab_size=vocab_size, eos_id=eos_id(tokenizer, eos)),
        cells=cells,
        sources=sources,
        pipeline_config=pipeline_config,
        config_hash=content_hash(pipeline_config),
        funnel=funnel,
        stats=store_stats,
        sets=eval_sets,
        files={
            path.relative_to(staging).as_posix(): sha256_file(path)
            for path in sorted((staging / "models").rglob("*"))
            if path.is_file()
        },
    )
    write_store_manifest(staging, store)
    os.rename(staging, final)
    return final
