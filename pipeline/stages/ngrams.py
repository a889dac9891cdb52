"""Token n-gram hashes and sorted look-ups: the containment checks' arithmetic (held-out documents and
evaluation sets against training, `pipeline.stages.contamination` and `pipeline.stages.eval_sets`)."""

from __future__ import annotations

import numpy as np

NGRAM_WEIGHTS_SEED = 0x6E6772616D  # "ngram": fixed, so a store's decision never depends on the run


def ngram_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """Sorted unique uint64 hashes of a document's token n-grams (a shorter document is one n-gram)."""
    # dedup's shingle maths (imported here: `pipeline.config` reaches this module without datatrove)
    from pipeline.stages.dedup import shingle_hashes

    weights = np.random.default_rng(NGRAM_WEIGHTS_SEED).integers(1, 2**63, size=n, dtype=np.uint64) * np.uint64(2)
    with np.errstate(over="ignore"):
        return np.unique(shingle_hashes(np.asarray(tokens, dtype=np.uint64), weights + np.uint64(1)))


def found_in(values: np.ndarray, sorted_index: np.ndarray) -> np.ndarray:
    """A mask of `values` present in the sorted array `sorted_index`."""
    if sorted_index.size == 0:
        return np.zeros(values.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_index, values), sorted_index.size - 1)
    return sorted_index[at] == values
