"""Assemble the token store from the tokenize stage's per-task cell runs.

Runs of one cell from every task are merged by internal document key (unique; ids may repeat),
so a cell's shards hold its documents in id order whatever the task count or executor:
the store is byte-identical across local and Ray runs and across a resumed run. The whole
version is written under a staging directory next to the final one and renamed into place
only when complete; an existing version is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from millrace.artifacts import content_hash
from pipeline.store.format import (
    CellManifest,
    CellSummary,
    ShardWriter,
    SourceCounts,
    StoreManifest,
    TokenizerInfo,
    dtype_for_vocab,
    write_cell_manifest,
    write_store_manifest,
)
from pipeline.store.trace import write_trace
from pipeline.stages.tokenization import SAMPLES_PER_CELL, eos_id, load_tokenizer, tokenizer_fingerprint


def _cells(runs_dir: Path) -> list[str]:
    return sorted({path.stem for path in runs_dir.glob("*/*.npz")})


def _write_cell(cell: str, runs_dir: Path, cell_dir: Path, dtype: np.dtype, fingerprint: str,
                sources: list[str], shard_tokens: int, extra_stats: dict) -> tuple[CellManifest, str]:
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
    order = np.argsort(keys, kind="stable")

    shards, writer, in_shard, docs_in_shard = [], None, 0, 0
    per_source: dict[str, SourceCounts] = {}
    shard_of, index_in_shard = np.zeros(order.size, np.int32), np.zeros(order.size, np.int32)
    for rank, index in enumerate(order):
        if writer is None:
            writer = ShardWriter(cell_dir / f"shard-{len(shards):05d}", dtype)
        shard_of[rank], index_in_shard[rank] = len(shards), docs_in_shard
        docs_in_shard += 1
        start, length = int(offsets[index]), int(lengths[index])
        writer.add_document(tokens[part_of[index]][start : start + length], int(source_ids[index]))
        in_shard += length
        counts = per_source.setdefault(sources[int(source_ids[index])], SourceCounts())
        counts.documents += 1
        counts.tokens += length
        counts.bytes += int(nbytes[index])
        if in_shard >= shard_tokens:
            shards.append(writer.close())
            writer, in_shard, docs_in_shard = None, 0, 0
    if writer is not None:
        shards.append(writer.close())

    token_start = np.concatenate([[0], np.cumsum(lengths[order])[:-1]]).astype(np.int64)
    trace = write_trace(cell_dir, {
        "shard": shard_of, "document": index_in_shard, "token_start": token_start, "tokens": lengths[order],
        "source": [sources[int(i)] for i in source_ids[order]], "id": doc_ids[order].tolist(),
        "origin": origins[order].tolist(), "position": positions[order],
    })
    samples = sorted((s for p in parts for s in json.loads(str(p["samples"]))), key=lambda s: (s["hash"], s["id"]))
    stats = {"samples": [{k: s[k] for k in ("id", "source", "text")} for s in samples[:SAMPLES_PER_CELL]]}
    stats.update(extra_stats)
    stats["trace"] = trace
    manifest = CellManifest(
        cell=cell,
        dtype=str(dtype),
        tokenizer_fingerprint=fingerprint,
        documents=int(lengths.size),
        tokens=int(lengths.sum()),
        bytes=int(nbytes.sum()),
        shards=shards,
        sources={name: per_source[name] for name in sorted(per_source)},
        stats=stats,
    )
    return manifest, write_cell_manifest(cell_dir, manifest)


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
    for cell in _cells(runs_dir):
        manifest, digest = _write_cell(cell, runs_dir, staging / "cells" / cell, dtype, fingerprint, sources, shard_tokens,
                               cell_stats.get(cell, {}))
        cells[cell] = CellSummary(
            documents=manifest.documents, tokens=manifest.tokens, bytes=manifest.bytes, manifest_hash=digest
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
    )
    write_store_manifest(staging, store)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(staging, final)
    return final
