"""Cell shards: each tokenize task writes its documents into the store's final shards; a split task
per tokenize task then places the few documents that wait for the held-out split.

At the end of tokenize task r, each cell's run (its table `tokens/<r>/<cell>.npz` and the tokens
streamed beside it) is written in `store_order`, one document at a time with `pread` (memory is
the table, never the tokens), straight into the final shards `store/cells/<cell>/shard-<r>-<n>`
under the work directory, each closed past `shard_tokens`, with chunk digests computed as the
bytes are written; the run's tokens are then deleted. Only the task's held-out candidates wait
(`<cell>.candidates.tokens`): at most `max_documents_per_cell` per cell, a bound of the config,
not of the corpus. The split needs every task's candidates (`held_out_cutoffs`, merged by the
driver), so split task r then writes its candidates at or below the cell's cutoff to
`validation-<r>-<n>` and the others, in store order, to its next training shards, and writes
the trace part `documents-<r>.parquet` and `parts/<r>.json` (shard table rows, counts, trace
part, samples, evaluation-set findings), all that assembly reads: assembly renames `store/` into
place and copies no tokens.

Documents are in `store_order`: by a keyed hash of the internal document key (unique; ids may
repeat), so that neighbours in a shard are no more alike than at random (key order follows the
source, and the next document shared its source 65-92% of the time); a task's returned
candidates follow its other documents. Tasks follow each other in rank order. The store is
therefore the same, byte for byte, on a rerun, after a kill and resume, and under any executor
or worker count; another task count deals the same documents into other shards (a cell holds
the same documents, held-out split included).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from millrace.artifacts import atomic_output, atomic_write_text
from pipeline.cells.held_out_split import VALIDATION_PREFIX, held_out_mask, split_cutoff
from pipeline.config import HeldOutConfig
from pipeline.steps.held_out.eval_sets import SetOverlap
from pipeline.store.format import ShardInfo, ShardSequence
from pipeline.store.manifest_records import Counts, TracePart
from pipeline.store.trace import HELD_OUT_PREFIX, part_name, write_trace_part

# A cell's entry in a task's `parts/<rank>.json` (JSON): shard table rows, per-source counts, trace parts, samples.
CellPart = dict[str, Any]
# A task's whole `parts/<rank>.json` (`write_part`): {"cells": {cell: CellPart}, "overlap", "worker", "set_ngrams"}.
TaskPart = dict[str, Any]


@dataclass(frozen=True)
class CellTask:
    """One task's run of one cell and where its shards go: the run's table (`run_file`), the cell, its
    directory in the store, the task's rank, the tokens' dtype, the sources (a document's source index names
    one) and the tokens per shard."""

    run: Path
    cell: str
    cell_dir: Path
    rank: int
    dtype: np.dtype
    sources: Sequence[str]
    shard_tokens: int


@dataclass(frozen=True)
class CellShardsConfig:
    """What a pipeline run's tokenize and split tasks share: the tokenizer and its EOS, the sources, where
    the tasks' runs and the store's cells go, and the tokens per shard."""

    tokenizer_path: Path
    eos: str
    sources: tuple[str, ...]
    runs_dir: Path
    cells_dir: Path
    shard_tokens: int

    def task(self, rank: int, cell: str, dtype: np.dtype) -> CellTask:
        """Task `rank`'s run of `cell`, its tokens in `dtype`."""
        return CellTask(
            run_file(self.runs_dir, rank, cell),
            cell,
            self.cells_dir / cell,
            rank,
            dtype,
            self.sources,
            self.shard_tokens,
        )


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


def run_file(directory: Path, rank: int, cell: str) -> Path:
    """A task's run of one cell: its documents' table (`.npz`); the tokens beside it (`.tokens`)."""
    return Path(directory) / f"{rank:05d}" / f"{cell}.npz"


def tokens_file(run: Path) -> Path:
    return run.with_suffix(".tokens")


def waiting_file(run: Path) -> Path:
    """The tokens of the run's held-out candidates, in store order, once its other documents are in shards."""
    return run.with_suffix(".candidates.tokens")


def placed_file(run: Path) -> Path:
    """Where the tokenize task put the run's documents: `placed`, per document it wrote to a shard, (row of
    the run's table, shard, document in shard); `waiting`, the candidates' rows in `waiting_file`'s order,
    and their `waiting_hashes`, `waiting_keys`, `waiting_lengths` (so that the driver reads no table)."""
    return run.with_suffix(".placed.npz")


def candidates_file(directory: Path, rank: int) -> Path:
    """A task's held-out candidates per cell (`pipeline.cells.held_out_split.split_candidates`)."""
    return Path(directory) / f"{rank:05d}" / "held-out.json"


def written_file(directory: Path, rank: int) -> Path:
    """What a tokenize task wrote to the store: per cell its shard table rows and counts; set findings."""
    return Path(directory) / f"{rank:05d}" / "written.json"


def part_file(parts_dir: Path, rank: int) -> Path:
    return Path(parts_dir) / f"{rank:05d}.json"


def held_out_cutoffs(runs_dir: Path, validation: HeldOutConfig) -> dict[str, list[int] | None]:
    """Per cell, the last (hash, key) of the held-out split, from the tokenize tasks' candidates (hash, key,
    length): the driver keeps at most `max_documents_per_cell` per cell while it merges them."""
    documents: dict[str, int] = {}
    tokens: dict[str, int] = {}
    pairs: dict[str, np.ndarray] = {}
    keep = max(validation.max_documents_per_cell, 1)
    for path in sorted(Path(runs_dir).glob("*/held-out.json")):
        for cell, entry in json.loads(path.read_text())["cells"].items():
            documents[cell] = documents.get(cell, 0) + entry["documents"]
            tokens[cell] = tokens.get(cell, 0) + entry["tokens"]
            merged = np.concatenate(
                [
                    pairs.get(cell, np.zeros((0, 3), np.uint64)),
                    np.asarray(entry["pairs"], dtype=np.uint64).reshape(-1, 3),
                ]
            )
            pairs[cell] = merged[np.lexsort((merged[:, 1], merged[:, 0]))][:keep]
    cutoffs = {}
    for cell in sorted(documents):
        cutoff = split_cutoff(documents[cell], tokens[cell], pairs[cell], validation)
        cutoffs[cell] = None if cutoff is None else list(cutoff)
    return cutoffs


def task_file_prefixes(rank: int) -> tuple[str, ...]:
    """How the names of task `rank`'s files in a cell begin: its training and held-out shards, its trace part."""
    return (f"{TRAINING_PREFIX}-{rank:05d}-", f"{VALIDATION_PREFIX}-{rank:05d}-", part_name(rank))


def remove_task_files(cells_dir: Path, rank: int) -> None:
    """What an earlier run of tokenize task `rank` wrote to the store (a rerun may have other cells or
    fewer shards), its split task's files included."""
    prefixes = task_file_prefixes(rank)
    for path in cells_dir.glob("*/*") if cells_dir.is_dir() else ():
        if path.name.lstrip(".").startswith(prefixes):
            path.unlink()


def _remove_split_files(cell_dir: Path, rank: int, first_shard: int) -> None:
    """What an earlier run of split task `rank` wrote to one cell: its held-out shards, the training
    shards from `first_shard` on, the trace part (the tokenize task's shards before it stay)."""
    training = f"{TRAINING_PREFIX}-{rank:05d}-"
    held_part = part_name(rank, HELD_OUT_PREFIX)
    for path in cell_dir.glob("*"):
        name = path.name.lstrip(".")
        later = name.startswith(training) and int(name[len(training) :].split(".")[0]) >= first_shard
        if later or name.startswith((f"{VALIDATION_PREFIX}-{rank:05d}-", part_name(rank), held_part)):
            path.unlink()


def _trace_part(
    task: CellTask,
    table: np.lib.npyio.NpzFile,
    chosen: np.ndarray,
    rows: np.ndarray,
    shards: int,
    held_out: bool = False,
) -> TracePart:
    """The trace part of the run's `chosen` documents, placed at `rows` (shard, document) in order."""
    lengths, sources = table["lengths"], task.sources
    return write_trace_part(
        task.cell_dir,
        task.rank,
        {
            "shard": rows[:, 0].astype(np.int32),
            "document": rows[:, 1].astype(np.int32),
            "token_start": _offsets(lengths[chosen], 1),
            "tokens": lengths[chosen],
            "source": [sources[int(i)] for i in table["sources"][chosen]],
            "id": table["ids"][chosen].tolist(),
            "origin": table["origins"][chosen].tolist(),
            "position": table["positions"][chosen],
        },
        shards=shards,
        prefix=HELD_OUT_PREFIX if held_out else "documents",
    )


def _offsets(lengths: np.ndarray, itemsize: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) * itemsize


def write_training_shards(task: CellTask, candidates: np.ndarray, overlap: SetOverlap | None) -> CellPart:
    """In the tokenize task: the run's documents into final training shards, but for its held-out
    `candidates` ((hash, key, length) rows, lowest first), whose tokens go to `waiting_file`. Returns the
    shard table rows and per-source counts written; the run's own tokens file is deleted."""
    run, cell, dtype, sources = task.run, task.cell, task.dtype, task.sources
    table = np.load(run)
    keys, lengths, source_ids, nbytes = table["keys"], table["lengths"], table["sources"], table["bytes"]
    order = store_order(keys)
    last = (int(candidates[-1][0]), int(candidates[-1][1])) if len(candidates) else None
    waits = held_out_mask(table["hashes"][order], keys[order], last)
    offsets = _offsets(lengths, dtype.itemsize)
    training = ShardSequence(task.cell_dir, f"{TRAINING_PREFIX}-{task.rank:05d}", dtype, task.shard_tokens)
    with open(tokens_file(run), "rb") as handle, atomic_output(waiting_file(run)) as waiting:
        for index, wait in zip(order.tolist(), waits.tolist()):
            raw = os.pread(handle.fileno(), int(lengths[index]) * dtype.itemsize, int(offsets[index]))
            if wait:
                waiting.write(raw)
                continue
            tokens = np.frombuffer(raw, dtype=dtype)
            source = int(source_ids[index])
            training.add(tokens, source, sources[source], int(nbytes[index]))
            if overlap is not None:
                overlap.add(tokens, cell)
    shards = training.close()
    placed = np.column_stack([order[~waits], np.asarray(training.placed, dtype=np.int64).reshape(-1, 2)])
    with atomic_output(placed_file(run)) as handle:
        np.savez(
            handle,
            placed=placed.astype(np.int64),
            waiting=order[waits],
            waiting_hashes=table["hashes"][order[waits]],
            waiting_keys=keys[order[waits]],
            waiting_lengths=lengths[order[waits]],
        )
    tokens_file(run).unlink()
    return {
        "shards": [dataclasses.asdict(s) for s in shards],
        "sources": {name: counts.model_dump() for name, counts in training.sources.items()},
    }


def _held_mask(
    table: Mapping[str, np.ndarray],
    waiting: np.ndarray,
    cutoff: list[int] | None,
    contaminated: Sequence[Sequence[int]],
) -> tuple[np.ndarray, np.ndarray]:
    """Of the waiting candidates: those chosen (at or below `cutoff`), and those held out (chosen, not
    contaminated)."""
    hashes, keys = table["hashes"][waiting], table["keys"][waiting]
    chosen = held_out_mask(hashes, keys, None if cutoff is None else tuple(cutoff))
    given_back = {(int(h), int(k)) for h, k in contaminated}
    held = chosen & np.asarray([(int(h), int(k)) not in given_back for h, k in zip(hashes, keys)], dtype=bool)
    return chosen, held


def _given_back(table: Mapping[str, np.ndarray], indices: np.ndarray, sources: Sequence[str]) -> dict[str, Counts]:
    """Per source, the chosen documents given back to training (contaminated)."""
    returned: dict[str, Counts] = {}
    lengths, source_ids, nbytes = table["lengths"], table["sources"], table["bytes"]  # each read once from the npz
    for index in indices.tolist():
        counts = returned.setdefault(sources[int(source_ids[index])], Counts())
        counts.documents += 1
        counts.tokens += int(lengths[index])
        counts.bytes += int(nbytes[index])
    return returned


def _continued_training(task: CellTask, written: CellPart) -> ShardSequence:
    """The task's training shards, carrying on after the ones its tokenize step wrote."""
    return ShardSequence(
        task.cell_dir,
        f"{TRAINING_PREFIX}-{task.rank:05d}",
        task.dtype,
        task.shard_tokens,
        shards=[ShardInfo(**s) for s in written["shards"]],
        sources={name: Counts(**c) for name, c in written["sources"].items()},
    )


def write_held_out(
    task: CellTask,
    cutoff: list[int] | None,
    written: CellPart,
    overlap: SetOverlap | None,
    contaminated: Sequence[Sequence[int]] = (),
) -> CellPart:
    """In the split task: the run's waiting candidates into held-out shards (those at or below `cutoff`, but
    for the `contaminated` (hash, key) pairs) and the task's next training shards (the others); its trace
    part; its entry of `parts/<rank>.json`."""
    run, cell, cell_dir, rank, dtype, sources = task.run, task.cell, task.cell_dir, task.rank, task.dtype, task.sources
    table = np.load(run)
    lengths, source_ids, nbytes = table["lengths"], table["sources"], table["bytes"]
    with np.load(placed_file(run)) as where:
        placed, waiting = where["placed"], where["waiting"]
    first_shard = len(written["shards"])
    _remove_split_files(cell_dir, rank, first_shard)
    chosen, held = _held_mask(table, waiting, cutoff, contaminated)
    returned = _given_back(table, waiting[chosen & ~held], sources)
    training = _continued_training(task, written)
    validation = ShardSequence(cell_dir, f"{VALIDATION_PREFIX}-{rank:05d}", dtype, task.shard_tokens)
    offsets = _offsets(lengths[waiting], dtype.itemsize)
    with open(waiting_file(run), "rb") as handle:
        for index, offset, to_validation in zip(waiting.tolist(), offsets.tolist(), held.tolist()):
            raw = os.pread(handle.fileno(), int(lengths[index]) * dtype.itemsize, offset)
            tokens = np.frombuffer(raw, dtype=dtype)
            source = int(source_ids[index])
            (validation if to_validation else training).add(tokens, source, sources[source], int(nbytes[index]))
            if overlap is not None:
                overlap.add(tokens, cell, training=not to_validation)
    shards, held_shards = training.close(), validation.close()
    kept = np.concatenate(
        [placed[:, 0], waiting[~held]]
    )  # the trace covers the training shards, the ones the loader reads
    rows = np.concatenate([placed[:, 1:], np.asarray(training.placed, dtype=np.int64).reshape(-1, 2)])
    trace = _trace_part(task, table, kept, rows, len(shards)) if kept.size else None
    held_rows = np.asarray(validation.placed, dtype=np.int64).reshape(-1, 2)
    held_trace = None
    if held.any():  # which documents were held out, so that their files and URLs can be found
        held_trace = _trace_part(task, table, waiting[held], held_rows, len(held_shards), True)
    return {
        "shards": [dataclasses.asdict(s) for s in shards],
        "validation": [dataclasses.asdict(s) for s in held_shards],
        "sources": {name: counts.model_dump() for name, counts in training.sources.items()},
        "validation_sources": {name: counts.model_dump() for name, counts in validation.sources.items()},
        "given_back_sources": {name: counts.model_dump() for name, counts in sorted(returned.items())},
        "trace": trace.model_dump() if trace is not None else None,
        "held_out_trace": held_trace.model_dump() if held_trace is not None else None,
        "samples": json.loads(str(table["samples"])),
    }


def write_part(
    parts_dir: Path,
    rank: int,
    cells: dict[str, CellPart],
    overlap: Mapping[str, object],
    worker: Mapping[str, object],
    set_ngrams: dict[str, list[int]] | None = None,
) -> None:
    atomic_write_text(
        part_file(parts_dir, rank),
        json.dumps(
            {"cells": cells, "overlap": overlap, "worker": worker, "set_ngrams": set_ngrams or {}}, sort_keys=True
        ),
    )
