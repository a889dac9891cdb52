"""Assemble the token store from the tokenize stage's per-task cell runs.

Runs of one cell from every task are merged and written in `store_order`: by a keyed hash of
the internal document key (unique; ids may repeat), so that neighbours in a shard are no more
alike than at random (key order follows the source, and the next document shared its source
65-92% of the time), and the order is the same whatever the task count or executor;
the cell's held-out documents (`pipeline.cells.validation`) go to its `validation-NNNNN` shards
instead, and the funnel gets a last stage that counts them:
the store is byte-identical across local and Ray runs and across a resumed run. The whole
version is written under a staging directory next to the final one and renamed into place
only when complete; an existing version is never touched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from millrace.artifacts import content_hash
from millrace.errors import ConfigError
from pipeline.store.format import (
    CellManifest,
    CellSummary,
    EvalSetSummary,
    HeldOut,
    ShardSequence,
    ShardTable,
    StoreManifest,
    TokenizerInfo,
    dtype_for_vocab,
    write_cell_manifest,
    write_store_manifest,
)
from pipeline.store.trace import write_trace
from pipeline.stages.eval_sets import NearDuplicateIndex, write_eval_set
from pipeline.stages.tokenization import SAMPLES_PER_CELL, eos_id, load_tokenizer, tokenizer_fingerprint
from pipeline.cells.validation import (HELD_OUT_REASON, VALIDATION_PREFIX, VALIDATION_STAGE, ValidationConfig,
                                      document_hash, held_out)

log = logging.getLogger(__name__)

STORE_ORDER_SEED = 0x6D696C6C72616365  # "millrace": fixed, so a store's order never depends on the run


def store_order(keys: np.ndarray) -> np.ndarray:
    """Indices of the internal document `keys` in the order the store writes them: by a keyed splitmix64
    hash of the key (a bijection of 64-bit keys, so no ties between distinct keys), then by key."""
    z = (keys.astype(np.uint64) + np.uint64(STORE_ORDER_SEED)) * np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return np.lexsort((keys, z))


def _cells(runs_dir: Path) -> list[str]:
    return sorted({path.stem for path in runs_dir.glob("*/*.npz")})


def _write_cell(cell: str, runs_dir: Path, cell_dir: Path, dtype: np.dtype, fingerprint: str,
                sources: list[str], shard_tokens: int, extra_stats: dict,
                validation: ValidationConfig, overlap: NearDuplicateIndex | None) -> tuple[CellManifest, str]:
    parts = [np.load(path) for path in sorted(runs_dir.glob(f"*/{cell}.npz"))]
    keys = np.concatenate([p["keys"] for p in parts])
    lengths = np.concatenate([p["lengths"] for p in parts])
    source_ids = np.concatenate([p["sources"] for p in parts])
    nbytes = np.concatenate([p["bytes"] for p in parts])
    doc_ids = np.concatenate([p["ids"] for p in parts])
    origins = np.concatenate([p["origins"] for p in parts])
    positions = np.concatenate([p["positions"] for p in parts])
    tokens = [p["tokens"] for p in parts]
    part_of = np.concatenate([np.full(len(p["ids"]), i, dtype=np.int64) for i, p in enumerate(parts)])
    offsets = np.concatenate([np.concatenate([[0], np.cumsum(p["lengths"])[:-1]]).astype(np.int64) for p in parts])
    order = store_order(keys)

    def document(index: int) -> np.ndarray:
        start = int(offsets[index])
        return tokens[part_of[index]][start : start + int(lengths[index])]

    hashes = np.fromiter((document_hash(document(i), validation.seed) for i in order), dtype=np.uint64, count=order.size)
    is_held_out = held_out(hashes, validation)
    training = ShardSequence(cell_dir, "shard", dtype, shard_tokens)
    held = ShardSequence(cell_dir, VALIDATION_PREFIX, dtype, shard_tokens)
    for index, to_validation in zip(order.tolist(), is_held_out.tolist()):
        source = int(source_ids[index])
        (held if to_validation else training).add(document(index), source, sources[source], int(nbytes[index]))
        if overlap is not None:
            overlap.add(document(index), cell)
    shards, held_shards = training.close(), held.close()

    kept = order[~is_held_out]  # the trace covers the training shards, the ones the loader reads
    placed = np.asarray(training.placed, dtype=np.int32).reshape(-1, 2)
    token_start = np.concatenate([[0], np.cumsum(lengths[kept])[:-1]]).astype(np.int64)
    trace = write_trace(cell_dir, {
        "shard": placed[:, 0], "document": placed[:, 1], "token_start": token_start, "tokens": lengths[kept],
        "source": [sources[int(i)] for i in source_ids[kept]], "id": doc_ids[kept].tolist(),
        "origin": origins[kept].tolist(), "position": positions[kept],
    })
    samples = sorted((s for p in parts for s in json.loads(str(p["samples"]))), key=lambda s: (s["hash"], s["id"]))
    stats = {"samples": [{k: s[k] for k in ("id", "source", "text")} for s in samples[:SAMPLES_PER_CELL]]}
    stats.update(extra_stats)
    stats["trace"] = trace
    documents, token_count, byte_count = training.totals()
    held_documents, held_tokens, held_bytes = held.totals()
    manifest = CellManifest(
        cell=cell,
        dtype=str(dtype),
        tokenizer_fingerprint=fingerprint,
        documents=documents,
        tokens=token_count,
        bytes=byte_count,
        shards=ShardTable.of(shards),
        sources={name: training.sources[name] for name in sorted(training.sources)},
        stats=stats,
        validation=HeldOut(documents=held_documents, tokens=held_tokens, bytes=held_bytes, shards=held_shards,
                           sources={name: held.sources[name] for name in sorted(held.sources)}),
    )
    return manifest, write_cell_manifest(cell_dir, manifest)


def validation_stage(manifests: list[CellManifest]) -> dict:
    """The funnel's last stage: per source, documents that reached the store and those held out of training."""
    per_source: dict[str, dict] = {}
    for manifest in manifests:
        for part, counts in (("kept", manifest.sources), ("held", manifest.validation.sources)):
            for source, numbers in counts.items():
                entry = per_source.setdefault(source, {"received": _zero(), "kept": _zero(),
                                                       "removed": {HELD_OUT_REASON: _zero()}})
                for target in (entry["received"], entry["kept"] if part == "kept" else entry["removed"][HELD_OUT_REASON]):
                    target["documents"] += numbers.documents
                    target["tokens"] += numbers.tokens
                    target["bytes"] += numbers.bytes
    return {"name": VALIDATION_STAGE, "sources": {source: per_source[source] for source in sorted(per_source)}}


def _zero() -> dict[str, int]:
    return {"documents": 0, "tokens": 0, "bytes": 0}


def assemble_store(
    final: Path,
    name: str,
    version: str,
    runs_dir: Path,
    tokenizer_path: Path,
    eos: str,
    sources: list[str],
    shard_tokens: int,
    pipeline_config: dict,
    funnel: dict,
    store_stats: dict,
    cell_stats: dict[str, dict],
    models_dir: Path | None = None,
    validation: ValidationConfig = ValidationConfig(),
) -> Path:
    """Write the store version to a staging directory, then rename it to `final`.

    The fitted quality and domain models travel with the store (under `models/`), so that
    the same document lands in the same cell wherever the store goes.
    """
    staging = final.with_name(f".{final.name}.staging")
    if staging.exists():
        shutil.rmtree(staging)  # what a killed assembly left: rebuilt from the runs, which are complete
    (staging / "cells").mkdir(parents=True)
    tokenizer_copy = staging / "tokenizer" / "tokenizer.json"
    tokenizer_copy.parent.mkdir(parents=True)
    shutil.copyfile(tokenizer_path, tokenizer_copy)
    if models_dir is not None and models_dir.is_dir():
        shutil.copytree(models_dir, staging / "models", ignore=shutil.ignore_patterns("cell-stats"))
    tokenizer = load_tokenizer(tokenizer_copy)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = dtype_for_vocab(vocab_size)
    fingerprint = tokenizer_fingerprint(tokenizer_copy)
    cells: dict[str, CellSummary] = {}
    manifests = []
    clashing = sorted({s.name for s in validation.sets} & set(_cells(runs_dir)))
    if clashing:
        raise ConfigError(f"field 'validation.sets': set name {clashing[0]!r} is also a cell's name")
    overlap = NearDuplicateIndex() if validation.sets else None
    for cell in _cells(runs_dir):
        manifest, digest = _write_cell(cell, runs_dir, staging / "cells" / cell, dtype, fingerprint, sources, shard_tokens,
                                       cell_stats.get(cell, {}), validation, overlap)
        manifests.append(manifest)
        cells[cell] = CellSummary(
            documents=manifest.documents, tokens=manifest.tokens, bytes=manifest.bytes,
            validation_documents=manifest.validation.documents, validation_tokens=manifest.validation.tokens,
            manifest_hash=digest,
        )
    funnel = {**funnel, "stages": [*funnel.get("stages", []), validation_stage(manifests)]}
    eval_sets = {}
    for config in validation.sets:
        written = write_eval_set(config, staging / "sets" / config.name, tokenizer, eos_id(tokenizer, eos), dtype,
                                 fingerprint, shard_tokens, overlap)
        eval_sets[config.name] = EvalSetSummary(
            documents=written.held.documents, tokens=written.held.tokens, bytes=written.held.bytes,
            manifest_hash=written.manifest_hash, overlap_exact=written.overlap["exact"],
            overlap_near=written.overlap["near"])
        if written.overlap["exact"] or written.overlap["near"]:
            log.warning("evaluation set %s: %d documents occur in the store's cells, %d more as near duplicates "
                        "(listed in sets/%s/set.json)", config.name, written.overlap["exact"], written.overlap["near"],
                        config.name)
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
    )
    write_store_manifest(staging, store)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(staging, final)
    return final
