"""The held-out validation split: which of a cell's documents are kept out of training.

A document is chosen by a keyed hash of its content (xxh3-64 of its token ids with the
configured seed), never by its position, so the split does not depend on the order of
documents, the task count or the executor, and a document keeps its side when others come
or go. Per cell: the documents whose hash falls below `fraction` of the hash range, at most
`max_documents_per_cell` of them (the lowest hashes; ties by internal key), and at least one
when the cell has two or more documents; a cell always keeps at least one training document.
Each tokenize task offers its few candidates (`split_candidates`), the driver merges them into
one cutoff per cell (`split_cutoff`), and each shard task applies it to its own documents.
"""

from __future__ import annotations

import numpy as np
import pydantic
import xxhash

from millrace.config import StrictModel
from pipeline.stages.eval_sets import EvalSetConfig

HELD_OUT_REASON = "held out for validation"
VALIDATION_STAGE = "validation"
VALIDATION_PREFIX = "validation"


class ValidationConfig(StrictModel):
    """`[validation]`: the held-out split of every cell."""

    fraction: float = pydantic.Field(0.005, ge=0.0, lt=1.0, description="share of each cell's documents held out")
    max_documents_per_cell: int = pydantic.Field(200, ge=0)
    seed: int = pydantic.Field(0, ge=0, description="the hash key: another seed holds out other documents")
    sets: list[EvalSetConfig] = []

    @pydantic.model_validator(mode="after")
    def _unique_sets(self) -> "ValidationConfig":
        names = [s.name for s in self.sets]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"evaluation set names must be unique; repeated: {repeated}")
        return self


def document_hash(tokens: np.ndarray, seed: int) -> int:
    """The keyed hash of a document's content (its token ids, whatever the store's dtype)."""
    return xxhash.xxh3_64_intdigest(np.ascontiguousarray(tokens, dtype="<u4").tobytes(), seed=seed)


def _threshold(config: ValidationConfig) -> np.uint64:
    return np.uint64(min(int(config.fraction * 2.0**64), 2**64 - 1))


def split_candidates(hashes: np.ndarray, keys: np.ndarray, config: ValidationConfig) -> np.ndarray:
    """(hash, key) pairs, lowest first, of the documents of one task's part of a cell that the split can
    choose whatever the other parts hold: its lowest `max_documents_per_cell` below the fraction's
    threshold, and at least its lowest document (the one a cell holds out when none falls below)."""
    if hashes.size == 0 or config.max_documents_per_cell == 0 or config.fraction == 0:
        return np.zeros((0, 2), dtype=np.uint64)
    hashes = np.asarray(hashes, dtype=np.uint64)
    order = np.lexsort((keys, hashes))
    take = max(min(int((hashes < _threshold(config)).sum()), config.max_documents_per_cell), 1)
    return np.stack([hashes[order[:take]], np.asarray(keys, dtype=np.uint64)[order[:take]]], axis=1)


def split_cutoff(documents: int, candidates: np.ndarray, config: ValidationConfig) -> tuple[int, int] | None:
    """The last (hash, key) held out of a cell of `documents` documents, given every part's
    `split_candidates`: a document is held out iff its (hash, key) is at most this. None: nothing."""
    if documents < 2 or config.max_documents_per_cell == 0 or config.fraction == 0 or not len(candidates):
        return None
    pairs = np.asarray(candidates, dtype=np.uint64).reshape(-1, 2)
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    wanted = int((pairs[:, 0] < _threshold(config)).sum())
    chosen = min(max(wanted, 1), config.max_documents_per_cell, documents - 1)
    return int(pairs[chosen - 1, 0]), int(pairs[chosen - 1, 1])


def held_out_mask(hashes: np.ndarray, keys: np.ndarray, cutoff: tuple[int, int] | None) -> np.ndarray:
    """True for the documents at or below `cutoff` (see `split_cutoff`)."""
    if cutoff is None:
        return np.zeros(len(hashes), dtype=bool)
    hashes, keys = np.asarray(hashes, dtype=np.uint64), np.asarray(keys, dtype=np.uint64)
    last_hash, last_key = np.uint64(cutoff[0]), np.uint64(cutoff[1])
    return (hashes < last_hash) | ((hashes == last_hash) & (keys <= last_key))


def held_out(hashes: np.ndarray, config: ValidationConfig) -> np.ndarray:
    """A boolean mask over one cell's documents (given their keyed hashes): True = validation.
    Ties between equal hashes (never hit in practice) go by position."""
    keys = np.arange(len(hashes), dtype=np.int64)
    cutoff = split_cutoff(len(hashes), split_candidates(np.asarray(hashes), keys, config), config)
    return held_out_mask(hashes, keys, cutoff)
