"""Exact and fuzzy (MinHash + LSH) dedup across all sources: the signing half, inside the filter tasks.

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
  the Jaccard similarity, which removes LSH false positives).

Documents are keyed by `metadata["key"]` (file ordinal, position; see `readers.document_key`),
never by the user's id: ids repeat (URLs, re-crawls), and texts that differ are all kept.

`DedupSignatures` writes, per filter task, everything the duplicate-finding tasks
(`pipeline.steps.dedup.duplicates`) read, each file sorted so that they read it as a stream or by
binary search, never whole (`SignatureFiles`): its keys and signatures in key order, the key
interval of each input file it read, its exact records (xxh3-128 of the text, key) and its LSH
records (band, band hash, key), both sorted, with the offsets of each of `parts` parts (a
range of hash prefixes; of bands and band-hash prefixes): five files whatever `parts` is.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_output
from pipeline.config import DedupConfig
from pipeline.steps import in_place
from pipeline.steps.dedup.ngrams import minhash, shingle_hashes
from pipeline.steps.dedup.sorted_runs import sorted_records
from pipeline.steps.read.readers import KEY_POSITION_BITS

WORD = re.compile(r"\w+")


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
            banded: np.ndarray = (grouped * self.band_weights).sum(axis=2, dtype=np.uint64)
        return banded


EXACT = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("key", "<i8")])  # sorted by every field, in this order
BAND = np.dtype([("band", "<u4"), ("hash", "<u8"), ("key", "<i8")])
RECORD_KINDS = ("exact", "bands")


def content_hash(text: str) -> tuple[int, int]:
    digest = xxhash.xxh3_128_intdigest(text)
    return digest >> 64, digest & ((1 << 64) - 1)


def prefix_part(values: np.ndarray, parts: int) -> np.ndarray:
    """The part (0 .. parts-1) of uint64 hash values, by their top 32 bits: equal values share a part, and
    the part never decreases along sorted values."""
    top = np.asarray(values, dtype=np.uint64) >> np.uint64(32)
    return ((top * np.uint64(parts)) >> np.uint64(32)).astype(np.int64)


def band_part(band: np.ndarray, hashes: np.ndarray, bands: int, parts: int) -> np.ndarray:
    """The part of LSH records: (band, band hash) split into `parts` equal ranges, in sorted order."""
    position = (np.asarray(band, dtype=np.uint64) << np.uint64(32)) | (np.asarray(hashes, np.uint64) >> np.uint64(32))
    return (position * np.uint64(parts) // (np.uint64(bands) << np.uint64(32))).astype(np.int64)


def load_array(path: Path) -> np.ndarray:
    """A small `.npy` file whole, from the disk or in place on a staged task's work URL."""
    loaded: np.ndarray = np.load(io.BytesIO(in_place.read_bytes(path)))
    return loaded


def save_array(path: Path, array: np.ndarray) -> None:
    with atomic_output(path) as handle:
        np.save(handle, array)


@dataclass(frozen=True)
class SignatureFiles:
    """Where each filter task's dedup files live: `<root>/<rank>/`.

    `exact.npy` and `bands.npy` are each sorted, so that every part is one slice of them;
    `parts.npy` holds the slices' offsets ([2, parts + 1]: exact, then bands).
    """

    root: Path

    def task(self, rank: int) -> Path:
        return Path(self.root) / f"{rank:05d}"

    def ranks(self) -> list[int]:
        return sorted(int(p.name) for p in in_place.children(self.root, folders=True) if p.name.isdigit())

    def keys(self, rank: int) -> Path:
        return self.task(rank) / "keys.npy"

    def signatures(self, rank: int) -> Path:
        return self.task(rank) / "signatures.npy"

    def intervals(self, rank: int) -> Path:
        return self.task(rank) / "intervals.npy"

    def records(self, rank: int, kind: str) -> Path:
        return self.task(rank) / f"{kind}.npy"

    def offsets(self, rank: int) -> Path:
        return self.task(rank) / "parts.npy"

    def part_slices(self, kind: str, part: int) -> list[tuple[Path, int, int]]:
        """(file, start, stop) of part `part` of every task's `kind` ("exact" or "bands") records."""
        row = RECORD_KINDS.index(kind)
        slices = []
        for rank in self.ranks():
            offsets = load_array(self.offsets(rank))[row]
            slices.append((self.records(rank, kind), int(offsets[part]), int(offsets[part + 1])))
        return slices


def key_intervals(keys: np.ndarray) -> np.ndarray:
    """[files, 2] first and last key of each input file among sorted `keys` (a file is read by one task)."""
    if not keys.size:
        return np.zeros((0, 2), dtype=np.int64)
    ordinals = keys >> KEY_POSITION_BITS
    starts = np.flatnonzero(np.r_[True, ordinals[1:] != ordinals[:-1]])
    ends = np.r_[starts[1:], keys.size] - 1
    return np.stack([keys[starts], keys[ends]], axis=1)


class DedupSignatures(PipelineStep):
    """Per task: content hash and MinHash signature of every document, written as sorted part files at the end."""

    name = "🔏 dedup signatures"
    type = "🫂 - DEDUP"

    def __init__(self, directory: Path | str, config: DedupConfig):
        super().__init__()
        self.files = SignatureFiles(Path(directory))
        self.hasher = MinHasher(config.ngram, config.bands, config.rows, config.seed)
        self.parts, self.exact, self.fuzzy = config.parts, config.exact, config.fuzzy

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        keys: list[int] = []
        hashes: list[tuple[int, int]] = []
        signatures: list[np.ndarray] = []
        for doc in data or ():
            with self.track_time():
                keys.append(doc.metadata["key"])
                if self.exact:
                    hashes.append(content_hash(doc.text))
                if self.fuzzy:
                    signatures.append(self.hasher.signature(doc.text))
            self.stat_update("signed")
            yield doc
        with self.track_time():
            self._write(rank, np.asarray(keys, dtype=np.int64), hashes, signatures)

    def _write(self, rank: int, keys: np.ndarray, hashes: list[tuple[int, int]], signatures: list[np.ndarray]) -> None:
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        save_array(self.files.keys(rank), keys)
        save_array(self.files.intervals(rank), key_intervals(keys))
        offsets = np.zeros((len(RECORD_KINDS), self.parts + 1), dtype=np.int64)
        if self.exact:
            pairs = np.asarray(hashes, dtype=np.uint64).reshape(-1, 2)[order]
            records = np.empty(keys.size, dtype=EXACT)
            records["hi"], records["lo"], records["key"] = pairs[:, 0], pairs[:, 1], keys
            records = sorted_records(records)
            offsets[0] = self._save_parts(rank, "exact", records, prefix_part(records["hi"], self.parts))
        if self.fuzzy:
            perms, bands = self.hasher.bands * self.hasher.rows, self.hasher.bands
            sigs = np.stack(signatures)[order] if signatures else np.zeros((0, perms), np.uint32)
            save_array(self.files.signatures(rank), sigs)
            records = np.empty(keys.size * bands, dtype=BAND)
            records["band"] = np.tile(np.arange(bands, dtype=np.uint32), keys.size)
            records["hash"] = self.hasher.band_hashes(sigs).reshape(-1)
            records["key"] = np.repeat(keys, bands)
            records = sorted_records(records)
            offsets[1] = self._save_parts(
                rank, "bands", records, band_part(records["band"], records["hash"], bands, self.parts)
            )
        save_array(self.files.offsets(rank), offsets)

    def _save_parts(self, rank: int, kind: str, records: np.ndarray, part: np.ndarray) -> np.ndarray:
        """Save sorted `records` (whose `part` never decreases) and return each part's start, then the end."""
        save_array(self.files.records(rank, kind), records)
        return np.searchsorted(part, np.arange(self.parts + 1), side="left")
