"""n-gram arithmetic in numpy alone: shingle hashes and MinHash signatures (word shingles in
`pipeline.steps.dedup.signing`, token shingles in `pipeline.steps.held_out.eval_sets`), and token n-gram
hashes with sorted look-ups for the containment checks (held-out documents and evaluation sets against
training, `pipeline.steps.held_out.contamination`)."""

from __future__ import annotations

import numpy as np

NGRAM_WEIGHTS_SEED = 0x6E6772616D  # "ngram": fixed, so a store's decision never depends on the run
CHUNK = 4096  # shingles per numpy block: bounds memory on very long documents


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


def ngram_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """Sorted unique uint64 hashes of a document's token n-grams (a shorter document is one n-gram)."""
    weights = np.random.default_rng(NGRAM_WEIGHTS_SEED).integers(1, 2**63, size=n, dtype=np.uint64) * np.uint64(2)
    with np.errstate(over="ignore"):
        return np.unique(shingle_hashes(np.asarray(tokens, dtype=np.uint64), weights + np.uint64(1)))


def found_in(values: np.ndarray, sorted_index: np.ndarray) -> np.ndarray:
    """A mask of `values` present in the sorted array `sorted_index`."""
    if sorted_index.size == 0:
        return np.zeros(values.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_index, values), sorted_index.size - 1)
    found: np.ndarray = sorted_index[at] == values
    return found
