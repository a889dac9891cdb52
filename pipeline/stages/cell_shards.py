"""Shard tasks: each writes its own tokenize task's documents into the store's final cell shards.

Runs after the tokenize stage, one task per tokenize task (the same rank), because the held-out
split is decided per cell over every task (`held_out_cutoffs`, a few (hash, key) pairs per task
merged by the driver). Task r reads its runs (`tokens/<r>/<cell>.npz` and `.tokens`, one
document at a time with `pread`: memory is its table, never its tokens) and writes, under the
work directory's `store/cells/<cell>/`, the shards `shard-<r>-<n>` and `validation-<r>-<n>` (each
closed past `shard_tokens`, so every task ends its cell with its own partial shard) with their
chunk digests computed as the bytes are written, and its trace part `documents-<r>.parquet`.
What it wrote (shard table rows, counts, trace part, sample texts, evaluation-set findings) goes
to `parts/<r>.json`, all that assembly reads: assembly renames `store/` into place and copies no
tokens.

Within a task, documents are in `store_order`: by a keyed hash of the internal document key
(unique; ids may repeat), so that neighbours in a shard are no more alike than at random (key
order follows the source, and the next document shared its source 65-92% of the time). Tasks
follow each other in rank order. The store is therefore the same, byte for byte, on a rerun,
after a kill and resume, and under any executor or worker count; another task count deals the
same documents into other shards (a cell holds the same documents, held-out split included).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_write_text
from pipeline.cells.validation import VALIDATION_PREFIX, ValidationConfig, held_out_mask, split_cutoff
from pipeline.stages.eval_sets import EvalSetConfig, SetOverlap
from pipeline.stages.tokenization import candidates_file, eos_id, load_tokenizer, tokens_file, worker
from pipeline.store.format import ShardSequence, dtype_for_vocab
from pipeline.store.trace import part_name, write_trace_part

STORE_ORDER_SEED = 0x6D696C6C72616365  # "millrace": fixed, so a store's order never depends on the run
TRAINING_PREFIX = "shard"


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


def part_file(parts_dir: Path, rank: int) -> Path:
    return Path(parts_dir) / f"{rank:05d}.json"


def held_out_cutoffs(runs_dir: Path, validation: ValidationConfig) -> dict[str, list[int] | None]:
    """Per cell, the last (hash, key) of the held-out split, from the tokenize tasks' candidates: the
    driver keeps at most `max_documents_per_cell` pairs per cell while it merges them."""
    documents: dict[str, int] = {}
    pairs: dict[str, np.ndarray] = {}
    keep = max(validation.max_documents_per_cell, 1)
    for path in sorted(Path(runs_dir).glob("*/held-out.json")):
        for cell, entry in json.loads(path.read_text())["cells"].items():
            documents[cell] = documents.get(cell, 0) + entry["documents"]
            merged = np.concatenate([pairs.get(cell, np.zeros((0, 2), np.uint64)),
                                     np.asarray(entry["pairs"], dtype=np.uint64).reshape(-1, 2)])
            pairs[cell] = merged[np.lexsort((merged[:, 1], merged[:, 0]))][:keep]
    cutoffs = {}
    for cell in sorted(documents):
        cutoff = split_cutoff(documents[cell], pairs[cell], validation)
        cutoffs[cell] = None if cutoff is None else list(cutoff)
    return cutoffs


def _remove_task_files(cells_dir: Path, rank: int) -> None:
    """What an earlier run of this task wrote (a rerun may have other cells or fewer shards)."""
    prefixes = (f"{TRAINING_PREFIX}-{rank:05d}-", f"{VALIDATION_PREFIX}-{rank:05d}-", part_name(rank))
    for path in cells_dir.glob("*/*") if cells_dir.is_dir() else ():
        if path.name.lstrip(".").startswith(prefixes):
            path.unlink()


def write_cell_part(run: Path, cell: str, cell_dir: Path, rank: int, dtype: np.dtype, sources: list[str],
                    shard_tokens: int, cutoff: list[int] | None, overlap: SetOverlap | None) -> dict:
    """One task's documents of one cell into its training and validation shards and trace part."""
    table = np.load(run)
    keys, lengths, source_ids, nbytes = table["keys"], table["lengths"], table["sources"], table["bytes"]
    order = store_order(keys)
    held = held_out_mask(table["hashes"][order], keys[order], None if cutoff is None else tuple(cutoff))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) * dtype.itemsize
    training = ShardSequence(cell_dir, f"{TRAINING_PREFIX}-{rank:05d}", dtype, shard_tokens)
    validation = ShardSequence(cell_dir, f"{VALIDATION_PREFIX}-{rank:05d}", dtype, shard_tokens)
    with open(tokens_file(run), "rb") as handle:
        for index, to_validation in zip(order.tolist(), held.tolist()):
            raw = os.pread(handle.fileno(), int(lengths[index]) * dtype.itemsize, int(offsets[index]))
            tokens = np.frombuffer(raw, dtype=dtype)
            source = int(source_ids[index])
            (validation if to_validation else training).add(tokens, source, sources[source], int(nbytes[index]))
            if overlap is not None:
                overlap.add(tokens, cell)
    shards, held_shards = training.close(), validation.close()
    kept = order[~held]  # the trace covers the training shards, the ones the loader reads
    trace = None
    if kept.size:
        placed = np.asarray(training.placed, dtype=np.int32).reshape(-1, 2)
        trace = write_trace_part(cell_dir, rank, {
            "shard": placed[:, 0], "document": placed[:, 1],
            "token_start": np.concatenate([[0], np.cumsum(lengths[kept])[:-1]]).astype(np.int64),
            "tokens": lengths[kept], "source": [sources[int(i)] for i in source_ids[kept]],
            "id": table["ids"][kept].tolist(), "origin": table["origins"][kept].tolist(),
            "position": table["positions"][kept],
        }, shards=len(shards))
    return {
        "shards": [dataclasses.asdict(s) for s in shards],
        "validation": [dataclasses.asdict(s) for s in held_shards],
        "sources": {name: counts.model_dump() for name, counts in training.sources.items()},
        "validation_sources": {name: counts.model_dump() for name, counts in validation.sources.items()},
        "trace": trace,
        "samples": json.loads(str(table["samples"])),
    }


class WriteCellShards(PipelineStep):
    """Per task: its tokenize task's cell runs into final store shards, and `parts/<rank>.json`."""

    name = "🧱 cell shards"
    type = "🔢 - TOKENIZER"

    def __init__(self, tokenizer_path: Path | str, eos: str, sources: list[str], runs_dir: Path | str,
                 cells_dir: Path | str, parts_dir: Path | str, shard_tokens: int,
                 cutoffs: dict[str, list[int] | None], sets: list[EvalSetConfig] = ()):
        super().__init__()
        self.tokenizer_path, self.eos, self.sources = str(tokenizer_path), eos, list(sources)
        self.runs_dir, self.cells_dir, self.parts_dir = Path(runs_dir), Path(cells_dir), Path(parts_dir)
        self.shard_tokens, self.cutoffs, self.sets = shard_tokens, dict(cutoffs), list(sets)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        tokenizer = load_tokenizer(self.tokenizer_path)
        dtype = dtype_for_vocab(tokenizer.get_vocab_size(with_added_tokens=True))
        overlap = SetOverlap(self.sets, tokenizer, eos_id(tokenizer, self.eos)) if self.sets else None
        _remove_task_files(self.cells_dir, rank)
        cells = {}
        for run in sorted(candidates_file(self.runs_dir, rank).parent.glob("*.npz")):
            with self.track_time("cell"):
                cells[run.stem] = write_cell_part(run, run.stem, self.cells_dir / run.stem, rank, dtype, self.sources,
                                                  self.shard_tokens, self.cutoffs.get(run.stem), overlap)
            self.stat_update("documents", value=sum(c["documents"] for c in cells[run.stem]["sources"].values()))
        atomic_write_text(part_file(self.parts_dir, rank), json.dumps(
            {"cells": cells, "overlap": overlap.hits if overlap else {}, "worker": worker()}, sort_keys=True))
