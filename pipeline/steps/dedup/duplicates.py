"""Finding duplicates from the signing tasks' files: parallel, resumable stages, none holding the corpus.

`find_duplicates` runs, each as one executor run of `parts` tasks (datatrove's completion
markers make each resumable):
1. `FindCandidates`, task p: a streaming merge of part p's exact records from every signing
   task; each group of equal hashes keeps its smallest key, the others are exact duplicates
   (`duplicates/exact-<p>.npy`). Then a streaming merge of part p's LSH records: in each group
   of equal (band, band hash) the smallest key is paired with each other member; a pair whose
   full signatures agree on at least `threshold` of the values is a confirmed edge, written
   for the component rounds (`pipeline.steps.dedup.components`).
2. `ComponentsRound`, rounds until every component is a star around its smallest key.
3. `VerifyDuplicates`, task p: a node of part p is removed as a fuzzy duplicate of its
   component's smallest key only when its own signature agrees with that document's on at least
   `verify_threshold` of the values, so that a chain of weak matches never removes a document
   unlike the one kept (`duplicates/fuzzy-<p>.npy`).

Signatures are read by binary search in the signing tasks' key-sorted files (`SignatureLookup`),
a batch of pairs at a time. Removal files are sorted by filter task, each with an offsets index beside
it (`duplicates/offsets/<reason>-<p>.npy`: where each task's rows start): `DropDuplicates` and the
sample read two offsets and then exactly their own task's rows of each. Every decision is a function of the documents
alone (groups keep their smallest key, components their smallest key), so the removals do not
depend on the number of filter tasks or parts; exact dedup runs on every document and fuzzy
dedup only removes what exact dedup keeps (an exact duplicate joins its original's component
with the same signature, so the components of the others are unchanged).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_write_text
from millrace.errors import MillraceError
from pipeline.config import DedupConfig
from pipeline.steps import in_place
from pipeline.steps.dedup.components import ComponentFiles, ComponentsRound, edge_records
from pipeline.steps.dedup.signing import SignatureFiles, load_array, save_array
from pipeline.steps.dedup.sorted_runs import RecordFile, group_firsts, merged, sorted_records
from pipeline.steps.filter.filtering import CountedStep
from pipeline.steps.read.readers import KEY_POSITION_BITS

REASON_CODES = {"exact": 1, "fuzzy": 2}
REMOVAL = np.dtype([("rank", "<i4"), ("key", "<i8"), ("reason", "i1"), ("duplicate_of", "<i8")])
PAIRS_PER_BATCH = 1 << 12  # candidate pairs whose signatures are read at once (up to 3.75 MiB of signatures)
MAX_ROUNDS = 200  # component rounds converge in O(log² n); far more means a bug, not a big corpus

Run = Callable[[str, list[PipelineStep], int], None]  # (name, pipeline, tasks): one executor run, to completion


class DedupError(MillraceError):
    """The dedup files are inconsistent (a key no signing task holds, overlapping tasks)."""


class TaskIndex:
    """Which filter task holds a document key: from each task's key interval per input file it read."""

    def __init__(self, files: SignatureFiles):
        ranks, starts, ends = [], [], []
        for rank in files.ranks():
            intervals = load_array(files.intervals(rank))
            ranks.append(np.full(len(intervals), rank, dtype=np.int32))
            starts.append(intervals[:, 0])
            ends.append(intervals[:, 1])
        self.root = files.root
        self.starts = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        order = np.argsort(self.starts, kind="stable")
        self.starts = self.starts[order]
        self.ends = (np.concatenate(ends) if ends else np.zeros(0, np.int64))[order]
        self.ranks = (np.concatenate(ranks) if ranks else np.zeros(0, np.int32))[order]
        overlap = np.flatnonzero(self.starts[1:] <= self.ends[:-1])
        if overlap.size:
            i = overlap[0]
            raise DedupError(
                f"{self.root}: filter tasks {self.ranks[i]} and {self.ranks[i + 1]} both hold documents"
                f" of input file ordinal {self.starts[i + 1] >> KEY_POSITION_BITS}"
            )

    def rank_of(self, keys: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.starts, keys, side="right") - 1
        missing = (i < 0) | (keys > self.ends[np.maximum(i, 0)]) if self.starts.size else np.ones(keys.size, bool)
        if missing.any():
            raise DedupError(f"{self.root}: document key {int(keys[missing][0])} is in no filter task's signatures")
        return self.ranks[i]


class SignatureLookup:
    """MinHash signatures of given keys, by binary search in each holding task's key-sorted files."""

    def __init__(self, files: SignatureFiles, index: TaskIndex, perms: int):
        self.files, self.index, self.perms = files, index, perms

    def signatures(self, keys: np.ndarray) -> np.ndarray:
        out = np.empty((keys.size, self.perms), dtype=np.uint32)
        ranks = self.index.rank_of(keys)
        order = np.argsort(ranks, kind="stable")
        bounds = (
            np.flatnonzero(np.r_[True, ranks[order][1:] != ranks[order][:-1], True])
            if keys.size
            else np.zeros(0, np.int64)
        )
        for start, stop in itertools.pairwise(bounds):
            mine = order[start:stop]
            rank = int(ranks[mine[0]])
            wanted = keys[mine]  # sorted: `keys` is, and a stable sort by rank keeps its order within a rank
            stored = RecordFile(self.files.keys(rank))
            rows = np.minimum(stored.search(wanted), stored.size - 1)
            unique = np.unique(rows)
            at = np.searchsorted(unique, rows)
            if not np.array_equal(stored.rows(unique)[at], wanted):
                raise DedupError(f"{self.files.keys(rank)}: a document key of filter task {rank} is missing")
            out[mine] = RecordFile(self.files.signatures(rank)).rows(unique)[at]
        return out

    def agreement(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Per pair, the share of signature values on which the two documents agree (a Jaccard estimate)."""
        keys = np.unique(np.concatenate([left, right]))
        signatures = self.signatures(keys)
        agreed: np.ndarray = (
            signatures[np.searchsorted(keys, left)] == signatures[np.searchsorted(keys, right)]
        ).mean(axis=1)
        return agreed


def removal_file(directory: Path | str, reason: str, part: int) -> Path:
    return Path(directory) / f"{reason}-{part:05d}.npy"


def offsets_file(removals: Path) -> Path:
    """Beside a removal part, its offsets index: filter task r's rows of the part are [offsets[r], offsets[r + 1])."""
    return removals.parent / "offsets" / removals.name


def write_removals(path: Path, removed: np.ndarray, kept: np.ndarray, reason: str, index: TaskIndex) -> None:
    """One part's removals, sorted by filter task then key, and beside them where each task's rows start, so that
    a task reads two offsets and then exactly its own rows, however many rows the part holds."""
    records = np.empty(removed.size, dtype=REMOVAL)
    records["rank"], records["key"] = index.rank_of(removed), removed
    records["reason"], records["duplicate_of"] = REASON_CODES[reason], kept
    save_removals(path, records, int(index.ranks.max()) + 1 if index.ranks.size else 0)


def save_removals(path: Path, records: np.ndarray, tasks: int) -> None:
    """`REMOVAL` records of filter tasks below `tasks`, sorted, and their offsets index (written first: a part
    is never newer than its index)."""
    records = sorted_records(records)
    save_array(offsets_file(path), np.searchsorted(records["rank"], np.arange(tasks + 1)).astype("<i8"))
    save_array(path, records)


def own_removals(path: Path, rank: int, indexed: bool) -> np.ndarray:
    """Filter task `rank`'s rows of one removal part: by its offsets index (two values read), or where the part
    has none (a work directory written before the index) by searching the part for them."""
    removals = RecordFile(path)
    if not indexed:
        return removals.records_with("rank", rank)
    bounds = RecordFile(offsets_file(path)).read(rank, rank + 2) if rank >= 0 else np.zeros(0, np.int64)
    return removals.read(int(bounds[0]), int(bounds[1])) if bounds.size == 2 else removals.read(0, 0)


def load_duplicates(directory: Path | str, rank: int) -> dict[int, tuple[str, int]]:
    """{removed key: (reason, key of the document kept in its place)} of filter task `rank`'s documents."""
    found: dict[int, tuple[str, int]] = {}
    indexed = {path.name for path in in_place.children(Path(directory) / "offsets", "*.npy")}
    for reason in ("fuzzy", "exact"):  # exact last: a copy of a kept text is an exact duplicate, whatever else
        for path in in_place.children(directory, f"{reason}-*.npy"):
            rows = own_removals(path, rank, path.name in indexed)
            found.update((int(k), (reason, int(d))) for k, d in zip(rows["key"], rows["duplicate_of"]))
    return found


def _concatenate(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)


class FindCandidates(PipelineStep):
    """Part `rank`: exact duplicates, and the confirmed candidate pairs of its LSH records."""

    name = "🫂 find duplicates"
    type = "🫂 - DEDUP"

    def __init__(
        self,
        signatures: Path | str,
        components: Path | str,
        duplicates: Path | str,
        perms: int,
        threshold: float,
        exact: bool,
        fuzzy: bool,
    ):
        super().__init__()
        self.files = SignatureFiles(Path(signatures))
        self.components, self.duplicates = ComponentFiles(Path(components)), Path(duplicates)
        self.perms, self.threshold, self.exact, self.fuzzy = perms, threshold, exact, fuzzy

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        index = TaskIndex(self.files)
        with self.track_time():
            if self.exact:
                groups = list(group_firsts(merged(self.files.part_slices("exact", rank)), ("hi", "lo")))
                kept, removed = _concatenate([g[0] for g in groups]), _concatenate([g[1] for g in groups])
                write_removals(removal_file(self.duplicates, "exact", rank), removed, kept, "exact", index)
                self.stat_update("exact_removed", value=int(removed.size))
            if self.fuzzy:
                left, right = self._edges(rank, SignatureLookup(self.files, index, self.perms))
                save_array(self.components.edges(0, rank), edge_records(left, right, world_size))
                atomic_write_text(self.components.found(rank), json.dumps({"edges": int(left.size)}) + "\n")
                self.stat_update("edges", value=int(left.size))

    def _edges(self, part: int, lookup: SignatureLookup) -> tuple[np.ndarray, np.ndarray]:
        confirmed: list[np.ndarray] = []
        pending: list[tuple[np.ndarray, np.ndarray]] = []
        held = 0
        for first, key in group_firsts(merged(self.files.part_slices("bands", part)), ("band", "hash")):
            pending.append((first, key))
            held += first.size
            if held >= PAIRS_PER_BATCH:
                confirmed.append(self._confirmed(pending, lookup))
                pending, held = [], 0
        confirmed.append(self._confirmed(pending, lookup))
        pairs = np.concatenate(confirmed)
        return pairs[:, 0], pairs[:, 1]

    def _confirmed(self, pending: list[tuple[np.ndarray, np.ndarray]], lookup: SignatureLookup) -> np.ndarray:
        """The unique candidate pairs of `pending` whose signatures agree on at least `threshold`."""
        left, right = _concatenate([p[0] for p in pending]), _concatenate([p[1] for p in pending])
        if not left.size:
            return np.zeros((0, 2), dtype=np.int64)
        pairs = np.unique(np.stack([left, right], axis=1), axis=0)
        self.stat_update("candidates", value=len(pairs))
        alike = [
            lookup.agreement(pairs[i : i + PAIRS_PER_BATCH, 0], pairs[i : i + PAIRS_PER_BATCH, 1]) >= self.threshold
            for i in range(0, len(pairs), PAIRS_PER_BATCH)
        ]
        return pairs[np.concatenate(alike)]


class VerifyDuplicates(PipelineStep):
    """Part `rank`: each node removed as a fuzzy duplicate of its component's smallest key, if alike enough."""

    name = "🫂 verify duplicates"
    type = "🫂 - DEDUP"

    def __init__(
        self,
        signatures: Path | str,
        components: Path | str,
        duplicates: Path | str,
        perms: int,
        round_: int,
        verify_threshold: float,
    ):
        super().__init__()
        self.files = SignatureFiles(Path(signatures))
        self.components, self.duplicates = ComponentFiles(Path(components)), Path(duplicates)
        self.perms, self.round, self.verify_threshold = perms, round_, verify_threshold

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        index = TaskIndex(self.files)
        lookup = SignatureLookup(self.files, index, self.perms)
        with self.track_time():
            edges = self.components.part_edges(self.round, rank)
            leaf = edges["other"] < edges["node"]  # at the fixed point: a member and its component's smallest key
            members, kept = edges["node"][leaf], edges["other"][leaf]
            alike = np.concatenate(
                [np.zeros(0, bool)]
                + [
                    lookup.agreement(members[i : i + PAIRS_PER_BATCH], kept[i : i + PAIRS_PER_BATCH])
                    >= self.verify_threshold
                    for i in range(0, members.size, PAIRS_PER_BATCH)
                ]
            )
            write_removals(removal_file(self.duplicates, "fuzzy", rank), members[alike], kept[alike], "fuzzy", index)
        self.stat_update("fuzzy_removed", value=int(alike.sum()))


def find_duplicates(options: DedupConfig, signatures: Path, components: Path, duplicates: Path, run: Run) -> int:
    """Run the duplicate-finding stages over the signing tasks' files, each through `run` with `options.parts`
    tasks; returns the number of component rounds. Rerun after a kill, it skips what `run` finished."""
    parts, perms = options.parts, options.bands * options.rows
    run(
        "candidates",
        [FindCandidates(signatures, components, duplicates, perms, options.threshold, options.exact, options.fuzzy)],
        parts,
    )
    files = ComponentFiles(Path(components))
    if not options.fuzzy or not files.confirmed_edges(parts):
        return 0
    for round_ in range(MAX_ROUNDS):
        run(f"components-{round_:03d}", [ComponentsRound(components, round_)], parts)
        if not files.not_star_nodes(round_, parts):
            break
    else:
        raise DedupError(f"{components}: duplicate components did not settle in {MAX_ROUNDS} rounds")
    run(
        "verify",
        [VerifyDuplicates(signatures, components, duplicates, perms, round_, options.verify_threshold)],
        parts,
    )
    return round_ + 1


class DropDuplicates(CountedStep):
    """A funnel step that drops the documents `find_duplicates` named for its reasons."""

    def __init__(
        self,
        funnel_step: str,
        reasons: tuple[str, ...],
        duplicates: Path | str,
        funnel_dir: Path | str,
        removed_dir: Path | str,
    ):
        self.name = f"🫂 {funnel_step}"
        super().__init__(funnel_step, funnel_dir, removed_dir, None)
        self.reasons = reasons
        self.duplicates_path = Path(duplicates)
        self._duplicates: dict[int, tuple[str, int]] | None = None

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        self._duplicates = load_duplicates(self.duplicates_path, rank)
        yield from super().run(data, rank, world_size)

    def decide(self, doc: Document) -> str | None:
        if self._duplicates is None:
            raise RuntimeError("decide() before run() loaded the duplicates")
        found = self._duplicates.get(doc.metadata["key"])
        if found is not None and found[0] in self.reasons:
            doc.metadata["duplicate_of"] = found[1]
            return found[0]
        return None
