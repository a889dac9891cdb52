"""Held-out decontamination: a held-out document whose token n-grams are mostly found in training is
given back to training.

Fuzzy dedup compares whole documents (MinHash of their shingles), so it does not see a short
document inside a long one: a held-out document can be 99% contained in a training document and
still be held out. Here each held-out document's token n-grams (`[validation] contamination_ngram`,
13 by default) are looked up in everything that trains; one whose share found reaches
`contamination_threshold` goes back to training (its text is in training already, so keeping it
there costs nothing, while dropping it would lose a document the funnel counts as kept).

It scales with the held-out split, never with the corpus:
    driver   `write_held_out_index`: the held-out documents (at most `max_documents_per_cell` per
             cell, read from the tokenize tasks' waiting candidates) and their n-gram hashes, sorted
    tasks    `FindContainedNgrams`: task r streams its own training documents (its tokenize task's
             shards and its candidates above the cutoff) against that sorted array and keeps the
             hashes it finds (a subset of the held-out n-grams)
    driver   `contaminated`: the union of the tasks' findings; per held-out document the share found,
             to a fixpoint: a document given back to training is training too, so its n-grams join the
             findings and the rest are judged again until none more goes back. One pass judged a snippet
             of a long candidate against a training set without it, and the long one went back: the
             store then trained on 98.9% of the snippet's 13-grams while it stayed held out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_output, atomic_write_text
from pipeline.cells.held_out_split import held_out_mask
from pipeline.steps import in_place
from pipeline.steps.dedup.ngrams import found_in, ngram_hashes
from pipeline.steps.tokenize.cell_shards import TRAINING_PREFIX, placed_file, waiting_file
from pipeline.store.format import ShardReader
from pipeline.store.manifest_records import CellContamination, Decontamination

INDEX_FILE = "held-out.npz"
COMPACT_EVERY = 4096  # documents' findings kept apart before they are merged


def waiting_documents(
    run: Path, dtype: np.dtype, cutoff: list[int] | None, held: bool
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(hash, key, tokens) of a tokenize task's waiting candidates of one cell: those at or below the
    cell's `cutoff` (`held`) or the others, which the split puts in training. Reads the run's small
    `placed_file` and its waiting tokens, never its table (the driver reads every task's)."""
    with in_place.opened(placed_file(run)) as handle, np.load(handle) as where:  # only the waiting arrays
        hashes, keys, lengths = where["waiting_hashes"], where["waiting_keys"], where["waiting_lengths"]
    mask = held_out_mask(hashes, keys, None if cutoff is None else tuple(cutoff))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) * dtype.itemsize
    chosen = np.flatnonzero(mask == held).tolist()
    ranges = [(int(offsets[i]), int(offsets[i]) + int(lengths[i]) * dtype.itemsize) for i in chosen]
    for i, raw in zip(chosen, in_place.read_ranges(waiting_file(run), ranges)):
        yield int(hashes[i]), int(keys[i]), np.frombuffer(raw, dtype=dtype)


def cell_runs(runs_dir: Path, rank: int | None = None) -> Iterator[tuple[int, str, Path]]:
    """(rank, cell, run table) of every tokenize task's run (or of task `rank`'s), found by their small
    `placed_file`s (the driver has those, never the tables)."""
    tasks = [Path(runs_dir) / f"{rank:05d}"] if rank is not None else in_place.children(runs_dir, folders=True)
    for placed in (found for task in tasks for found in in_place.children(task, "*.placed.npz")):
        cell = placed.name.removesuffix(".placed.npz")
        yield int(placed.parent.name), cell, placed.with_name(f"{cell}.npz")


def write_held_out_index(
    runs_dir: Path, out_dir: Path, cutoffs: dict[str, list[int] | None], dtype: np.dtype, n: int
) -> int:
    """In the driver: every held-out document's (cell, hash, key, tokens) and n-gram hashes, and the sorted
    union of those hashes, to `out_dir/held-out.npz`. Returns the number of held-out documents."""
    cells, pairs, lengths, grams = [], [], [], []
    for _, cell, run in cell_runs(runs_dir):
        if cutoffs.get(cell) is None:
            continue
        for doc_hash, key, tokens in waiting_documents(run, dtype, cutoffs[cell], held=True):
            cells.append(cell)
            pairs.append((doc_hash, key))
            lengths.append(tokens.size)
            grams.append(ngram_hashes(tokens, n))
    save_index(out_dir, cells, pairs, lengths, grams)
    return len(cells)


def save_index(
    out_dir: Path, cells: list[str], pairs: list[tuple[int, int]], lengths: list[int], grams: list[np.ndarray]
) -> None:
    """`out_dir/held-out.npz`: per held-out document its cell, (hash, key), length and n-gram hashes, and
    the sorted union of those hashes that the tasks look up."""
    counts = np.asarray([g.size for g in grams], dtype=np.int64)
    flat = np.concatenate(grams) if grams else np.zeros(0, np.uint64)
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_output(out_dir / INDEX_FILE) as handle:
        np.savez(
            handle,
            cells=np.asarray(cells, dtype=np.str_),
            pairs=np.asarray(pairs, dtype=np.uint64).reshape(-1, 2),
            lengths=np.asarray(lengths, dtype=np.int64),
            counts=counts,
            ngrams=flat,
            index=np.unique(flat),
        )


def found_file(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"found-{rank:05d}.npy"


class FindContainedNgrams(PipelineStep):
    """Per task: which held-out n-grams its training documents hold (see the module docstring)."""

    name = "🧼 held-out decontamination"
    type = "🔢 - TOKENIZER"

    def __init__(
        self,
        runs_dir: Path | str,
        cells_dir: Path | str,
        out_dir: Path | str,
        cutoffs: dict[str, list[int] | None],
        dtype: str,
        n: int,
    ):
        super().__init__()
        self.runs_dir, self.cells_dir, self.out_dir = Path(runs_dir), Path(cells_dir), Path(out_dir)
        self.cutoffs, self.dtype, self.n = dict(cutoffs), np.dtype(dtype), n

    def training_documents(self, rank: int) -> Iterator[np.ndarray]:
        for _, cell, run in cell_runs(self.runs_dir, rank):
            for idx in sorted((self.cells_dir / cell).glob(f"{TRAINING_PREFIX}-{rank:05d}-*.idx")):
                reader = ShardReader(idx.with_suffix(""), self.dtype)
                for start, length in zip(reader.pointers // self.dtype.itemsize, reader.lengths):
                    yield np.asarray(reader.tokens_view[start : start + length])
            for _, _, tokens in waiting_documents(run, self.dtype, self.cutoffs.get(cell), held=False):
                yield tokens

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        with np.load(self.out_dir / INDEX_FILE) as stored:
            index = stored["index"]
        found = [np.zeros(0, np.uint64)]
        for tokens in self.training_documents(rank) if index.size else ():
            with self.track_time("document"):
                grams = ngram_hashes(tokens, self.n)
                found.append(grams[found_in(grams, index)])
                if len(found) >= COMPACT_EVERY:  # a subset of the held-out n-grams, whatever the documents
                    found = [np.unique(np.concatenate(found))]
            self.stat_update("documents")
        with atomic_output(found_file(self.out_dir, rank)) as handle:
            np.save(handle, np.unique(np.concatenate(found)))


class ContaminationDecision(Decontamination):
    """The decontamination's decision (`decision.json` in the work directory): the store's record of it, and
    which held-out documents go back to training, per cell (`[hash, key]` pairs) for the split tasks."""

    cells: dict[str, list[list[int]]] = {}

    def record(self) -> Decontamination:
        """What the store manifest keeps of it (`StoreStats.decontamination`): all but the documents' keys."""
        return Decontamination.model_validate(self.model_dump(exclude={"cells"}))


def contaminated(out_dir: Path, threshold: float, ngram: int) -> ContaminationDecision:
    """In the driver: the held-out documents whose share of `ngram`-grams found in training reaches `threshold`,
    judged to a fixpoint (see the module docstring)."""
    found = np.unique(
        np.concatenate(
            [np.load(path) for path in sorted(Path(out_dir).glob("found-*.npy"))] or [np.zeros(0, np.uint64)]
        )
    )
    with np.load(Path(out_dir) / INDEX_FILE) as stored:
        cells, pairs, lengths, counts, grams = (stored[k] for k in ("cells", "pairs", "lengths", "counts", "ngrams"))
    back, rounds = given_back_to_fixpoint(grams, counts, found, threshold)
    removed: dict[str, list[list[int]]] = {}
    per_cell: dict[str, CellContamination] = {}
    for i in np.flatnonzero(back).tolist():
        cell = str(cells[i])
        removed.setdefault(cell, []).append([int(v) for v in pairs[i]])
        entry = per_cell.setdefault(cell, CellContamination())
        entry.documents += 1
        entry.tokens += int(lengths[i])
    return ContaminationDecision(
        ngram=ngram,
        threshold=threshold,
        cells=removed,
        documents=sum(e.documents for e in per_cell.values()),
        tokens=sum(e.tokens for e in per_cell.values()),
        checked=int(counts.size),
        rounds=len(rounds),
        later_rounds=sum(rounds[1:]),
        per_cell=dict(sorted(per_cell.items())),
    )


def given_back_to_fixpoint(
    grams: np.ndarray, counts: np.ndarray, found: np.ndarray, threshold: float
) -> tuple[np.ndarray, list[int]]:
    """Which held-out documents go back (a mask) and how many went back in each round: a round adds the
    n-grams of the documents it gave back to `found` (the training set's) and judges the rest again."""
    back = np.zeros(counts.size, dtype=bool)
    if not counts.size:
        return back, []
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    owner = np.repeat(np.arange(counts.size), counts)
    rounds: list[int] = []
    while True:
        shares = np.add.reduceat(found_in(grams, found).astype(np.int64), starts) / np.maximum(counts, 1)
        newly = (shares >= threshold) & (counts > 0) & ~back
        if not newly.any():
            return back, rounds
        back |= newly
        rounds.append(int(newly.sum()))
        found = np.union1d(found, grams[newly[owner]])


def save_decision(out_dir: Path, decision: ContaminationDecision) -> None:
    atomic_write_text(Path(out_dir) / "decision.json", json.dumps(decision.model_dump(mode="json"), sort_keys=True))


def load_decision(out_dir: Path) -> ContaminationDecision | None:
    """The saved decision; None with decontamination off (none was saved: nothing is given back)."""
    path = Path(out_dir) / "decision.json"
    return ContaminationDecision.model_validate_json(path.read_text()) if path.exists() else None
