"""Exact and fuzzy (MinHash + LSH) dedup across all sources, as datatrove `PipelineStep`s.

Why not datatrove's four MinHash stages: its signature stage splits words with spaCy and
spends about 90% of its time there (about 130 documents/s per core here). This module
splits words with one compiled regex, hashes them with xxhash in C (`map`), and computes
every MinHash permutation at once with numpy: several thousand documents/s per core, with
the same LSH scheme (see bench/bench_dedup.py).

The scheme:
- words: `\\w+` runs of the lower-cased text; each word hashed to 32 bits (xxh32, seed 0);
- shingles: word n-grams (n = `ngram`, 5 by default), hashed by a fixed random linear
  combination of their word hashes modulo 2^64; a document shorter than n words is one shingle;
- signature: `bands × rows` MinHash values, permutation i being multiply-shift hashing
  `(a_i·s + b_i) mod 2^64 >> 32` with odd random a_i (seeded, so every task agrees);
- LSH: a band hash is a random linear combination of its rows' values; two documents that
  share a band hash in the same band are a candidate pair; a candidate pair is a duplicate
  when their full signatures agree on at least `threshold` of the values (an estimate of
  the Jaccard similarity, which removes LSH false positives);
- clusters are connected components of duplicate pairs; the document with the smallest key
  in each cluster is kept, so the result does not depend on the number of tasks or their order;
  a member is removed only when its signature also agrees with the kept document's (no chains).

Documents are keyed by `metadata["key"]` (file ordinal, position; see `readers.document_key`),
never by the user's id: ids repeat (URLs, re-crawls), and texts that differ are all kept.
Exact dedup groups documents by a 128-bit xxh3 hash of their text and keeps the smallest
key. Fuzzy dedup runs on what exact dedup keeps.

The steps: `DedupSignatures` (per task, passes documents through, writes
`signatures/<rank>.npz`), `FindDuplicates` (one task: reads every signature file, writes
`duplicates/<rank>.npz` per filter task with each removed key, its reason and the key it
duplicates) and `DropDuplicates` (per task, a funnel stage dropping the documents its own
task's list names: no task loads the whole removal list).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import xxhash
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_output
from pipeline.stages.filtering import CountedStage

WORD = re.compile(r"\w+")
CHUNK = 4096  # shingles per numpy block: bounds memory on very long documents
REASON_CODES = {"exact": 1, "fuzzy": 2}
CODE_REASONS = {code: reason for reason, code in REASON_CODES.items()}


def shingle_hashes(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """uint64 hashes of the n-grams (n = `weights.size`) of uint64 `values`: each a linear combination with
    `weights` modulo 2^64; fewer than n values make one shingle (empty: 0)."""
    n = weights.size
    if values.size < n:
        return np.array([values.dot(weights[: values.size]) if values.size else 0], dtype=np.uint64)
    count = values.size - n + 1
    shingles = np.zeros(count, dtype=np.uint64)
    for k in range(n):
        shingles += values[k : k + count] * weights[k]
    return shingles


def minhash(shingles: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint32 MinHash signature: per permutation i, min over shingles of `(a_i·s + b_i) mod 2^64 >> 32`
    (`a`, `b`: [permutations, 1] uint64), in blocks of CHUNK shingles."""
    signature = np.full(a.shape[0], np.iinfo(np.uint64).max, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, shingles.size, CHUNK):
            block = shingles[start : start + CHUNK][None, :]
            np.minimum(signature, ((a * block + b) >> np.uint64(32)).min(axis=1), out=signature)
    return signature.astype(np.uint32)


class MinHasher:
    """MinHash signatures and LSH band hashes; a pure function of (text, parameters)."""

    def __init__(self, ngram: int = 5, bands: int = 40, rows: int = 3, seed: int = 1):
        self.ngram, self.bands, self.rows = ngram, bands, rows
        rng = np.random.default_rng(seed)
        perms = bands * rows
        self.shingle_weights = rng.integers(1, 2**63, size=ngram, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.a = (rng.integers(1, 2**63, size=perms, dtype=np.uint64) * np.uint64(2) + np.uint64(1))[:, None]
        self.b = rng.integers(0, 2**63, size=perms, dtype=np.uint64)[:, None] * np.uint64(2)
        self.band_weights = rng.integers(1, 2**63, size=rows, dtype=np.uint64) * np.uint64(2) + np.uint64(1)

    def word_hashes(self, text: str) -> np.ndarray:
        words = WORD.findall(text.lower())
        return np.fromiter(map(xxhash.xxh32_intdigest, words), dtype=np.uint64, count=len(words))

    def shingles(self, text: str) -> np.ndarray:
        return shingle_hashes(self.word_hashes(text), self.shingle_weights)

    def signature(self, text: str) -> np.ndarray:
        return minhash(self.shingles(text), self.a, self.b)

    def band_hashes(self, signatures: np.ndarray) -> np.ndarray:
        """[documents, bands] uint64 from [documents, bands*rows] uint32 signatures."""
        grouped = signatures.reshape(signatures.shape[0], self.bands, self.rows).astype(np.uint64)
        with np.errstate(over="ignore"):
            return (grouped * self.band_weights).sum(axis=2, dtype=np.uint64)


def content_hash(text: str) -> tuple[int, int]:
    digest = xxhash.xxh3_128_intdigest(text)
    return digest >> 64, digest & ((1 << 64) - 1)


def signature_file(directory: Path, rank: int) -> Path:
    return Path(directory) / f"{rank:05d}.npz"


class DedupSignatures(PipelineStep):
    """Per task: content hash and MinHash signature of every document, saved when the stream ends."""

    name = "🔏 dedup signatures"
    type = "🫂 - DEDUP"

    def __init__(self, directory: Path | str, ngram: int, bands: int, rows: int, seed: int, fuzzy: bool = True):
        super().__init__()
        self.directory = Path(directory)
        self.hasher = MinHasher(ngram, bands, rows, seed)
        self.fuzzy = fuzzy

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        keys: list[int] = []
        hashes: list[tuple[int, int]] = []
        signatures: list[np.ndarray] = []
        for doc in data or ():
            with self.track_time():
                keys.append(doc.metadata["key"])
                hashes.append(content_hash(doc.text))
                if self.fuzzy:
                    signatures.append(self.hasher.signature(doc.text))
            self.stat_update("signed")
            yield doc
        perms = self.hasher.bands * self.hasher.rows
        sigs = np.stack(signatures) if signatures else np.zeros((0 if self.fuzzy else len(keys), perms), np.uint32)
        with atomic_output(signature_file(self.directory, rank)) as handle:
            np.savez(
                handle,
                keys=np.asarray(keys, dtype=np.int64),
                hashes=np.asarray(hashes, dtype=np.uint64).reshape(-1, 2),
                signatures=sigs,
            )


def _components(n: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(left.size, dtype=np.int8), (left, right)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def _keep_smallest(labels: np.ndarray) -> np.ndarray:
    """For id-sorted elements with dense group labels 0..k-1: the index of each one's group's first member."""
    _, first_index = np.unique(labels, return_index=True)
    return first_index[labels]


def find_duplicates(
    keys: np.ndarray, hashes: np.ndarray, signatures: np.ndarray | None, hasher: MinHasher | None, threshold: float,
    exact: bool = True, verify_threshold: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (removed keys, reason codes, kept keys they duplicate), sorted by removed key.

    Documents are keyed by their internal integer key (file ordinal, position), never by the
    user's id, which may repeat. A pure function of the documents: everything is ordered by key
    first, and every group keeps its smallest key. A fuzzy duplicate is removed only when its
    own signature agrees with its cluster's kept document's on at least `verify_threshold`
    (default: `threshold`) of the values, so a chain of weak matches never removes documents
    unlike the one kept.
    """
    order = np.argsort(keys, kind="stable")
    keys, hashes = keys[order], hashes[order]
    signatures = signatures[order] if signatures is not None else None
    n = keys.size
    duplicate_of = np.arange(n)
    reason = np.zeros(n, dtype=np.int8)

    if exact and n:
        _, labels = np.unique(hashes, axis=0, return_inverse=True)
        keeper = _keep_smallest(labels.reshape(-1))
        dup = keeper != np.arange(n)
        duplicate_of[dup] = keeper[dup]
        reason[dup] = REASON_CODES["exact"]

    if hasher is not None and signatures is not None and n:
        candidates = np.flatnonzero(reason == 0)
        sig = signatures[candidates]
        left, right = _candidate_pairs(hasher.band_hashes(sig))
        if left.size:
            agree = (sig[left] == sig[right]).mean(axis=1) >= threshold
            left, right = left[agree], right[agree]
        keeper = _keep_smallest(_components(candidates.size, left, right))
        verify = threshold if verify_threshold is None else verify_threshold
        dup = (keeper != np.arange(candidates.size)) & ((sig == sig[keeper]).mean(axis=1) >= verify)
        duplicate_of[candidates[dup]] = candidates[keeper[dup]]
        reason[candidates[dup]] = REASON_CODES["fuzzy"]

    removed = np.flatnonzero(reason)
    return keys[removed], reason[removed], keys[duplicate_of[removed]]


def _candidate_pairs(bands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) index pairs that share a band hash in some band: each group's first member with the others."""
    left_parts, right_parts = [], []
    for band in range(bands.shape[1]):
        column = bands[:, band]
        by_hash = np.lexsort((np.arange(column.size), column))
        sorted_hash = column[by_hash]
        starts = np.ones(by_hash.size, dtype=bool)
        starts[1:] = sorted_hash[1:] != sorted_hash[:-1]
        group_first = by_hash[np.maximum.accumulate(np.where(starts, np.arange(by_hash.size), 0))]
        members = ~starts
        left_parts.append(group_first[members])
        right_parts.append(by_hash[members])
    left = np.concatenate(left_parts) if left_parts else np.zeros(0, np.int64)
    right = np.concatenate(right_parts) if right_parts else np.zeros(0, np.int64)
    if not left.size:
        return left, right
    pairs = np.unique(np.stack([left, right], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]


class FindDuplicates(PipelineStep):
    """One task: read every task's signatures, decide what is a duplicate, write one removal list per filter task."""

    name = "🫂 find duplicates"
    type = "🫂 - DEDUP"

    def __init__(self, signature_dir: Path | str, output: Path | str, ngram: int, bands: int, rows: int, seed: int,
                 threshold: float, exact: bool, fuzzy: bool, verify_threshold: float | None = None):
        super().__init__()
        self.signature_dir, self.output = Path(signature_dir), Path(output)
        self.hasher = MinHasher(ngram, bands, rows, seed) if fuzzy else None
        self.threshold, self.exact, self.verify_threshold = threshold, exact, verify_threshold

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        files = sorted(self.signature_dir.glob("*.npz"))
        parts = [np.load(path) for path in files]
        keys = np.concatenate([p["keys"] for p in parts]) if parts else np.zeros(0, np.int64)
        task_of = np.concatenate([np.full(p["keys"].size, int(f.stem)) for f, p in zip(files, parts)]) if parts else keys
        hashes = np.concatenate([p["hashes"] for p in parts]) if parts else np.zeros((0, 2), np.uint64)
        signatures = np.concatenate([p["signatures"] for p in parts]) if parts and self.hasher else None
        with self.track_time():
            removed, reasons, kept = find_duplicates(keys, hashes, signatures, self.hasher, self.threshold, self.exact,
                                                     self.verify_threshold)
        self.stat_update("documents", value=int(keys.size))
        self.stat_update("removed", value=int(removed.size))
        by_key = np.argsort(keys, kind="stable")
        removed_task = task_of[by_key[np.searchsorted(keys[by_key], removed)]] if removed.size else removed
        for path in files:  # one removal list per filter task: each tokenize task reads only its own
            mine = removed_task == int(path.stem)
            with atomic_output(duplicate_file(self.output, int(path.stem))) as handle:
                np.savez(handle, keys=removed[mine], reasons=reasons[mine], duplicate_of=kept[mine])


def duplicate_file(directory: Path, rank: int) -> Path:
    """The removal list of the documents filter task `rank` wrote."""
    return Path(directory) / f"{rank:05d}.npz"


def load_duplicates(path: Path) -> dict[int, tuple[str, int]]:
    """{removed key: (reason, key of the document kept in its place)} of one task's removal list."""
    if not path.exists():
        return {}
    data = np.load(path)
    return {
        int(i): (CODE_REASONS[int(r)], int(k)) for i, r, k in zip(data["keys"], data["reasons"], data["duplicate_of"])
    }


class DropDuplicates(CountedStage):
    """A funnel stage that drops the documents `FindDuplicates` named for its reasons."""

    def __init__(self, stage: str, reasons: tuple[str, ...], duplicates: Path | str, funnel_dir, removed_dir):
        self.name = f"🫂 {stage}"
        super().__init__(stage, funnel_dir, removed_dir, None)
        self.reasons = reasons
        self.duplicates_path = Path(duplicates)
        self._duplicates: dict[int, tuple[str, int]] | None = None

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        self._duplicates = load_duplicates(duplicate_file(self.duplicates_path, rank))
        yield from super().run(data, rank, world_size)

    def decide(self, doc: Document) -> str | None:
        found = self._duplicates.get(doc.metadata["key"])
        if found is not None and found[0] in self.reasons:
            doc.metadata["duplicate_of"] = found[1]
            return found[0]
        return None
