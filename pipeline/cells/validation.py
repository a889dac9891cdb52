"""The held-out validation split: which of a cell's documents are kept out of training.

A document is chosen by a keyed hash of its content (xxh3-64 of its token ids with the
configured seed), never by its position, so the split does not depend on the order of
documents, the task count or the executor, and a document keeps its side when others come
or go. Per cell, in hash order (ties by internal key), the documents are held out while the
held-out tokens are under `tokens_per_cell` or the hash falls below `fraction` of the hash
range (the part that grows with the cell), at most `max_documents_per_cell` of them and, past
the first, no more than `max_token_share` of the cell's tokens; at least one when the cell has
two or more documents, and a cell always keeps at least one training document. Each rule cuts
a prefix of the hash order, so each tokenize task offers its own few candidates
(`split_candidates`: hash, key, length), the driver merges them into one cutoff per cell
(`split_cutoff`), and each shard task applies it to its own documents.
"""

from __future__ import annotations

from collections.abc import Sequence

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

    tokens_per_cell: int = pydantic.Field(4096, ge=0, description="held-out tokens per cell: the lowest-hash "
                                          "documents until they reach this (the one that reaches it included)")
    fraction: float = pydantic.Field(0.005, ge=0.0, lt=1.0,
                                     description="also every document whose hash is below this share of the range")
    max_documents_per_cell: int = pydantic.Field(200, ge=0, description="at most this many held out per cell")
    max_token_share: float = pydantic.Field(0.2, gt=0.0, le=1.0, description="past its first held-out document, "
                                            "a cell holds out at most this share of its tokens")
    seed: int = pydantic.Field(0, ge=0, description="the hash key: another seed holds out other documents")
    decontaminate: bool = pydantic.Field(True, description="give back to training the held-out documents whose "
                                         "token n-grams are found in training (`pipeline.stages.contamination`)")
    contamination_ngram: int = pydantic.Field(13, ge=1, description="n of the token n-grams looked up")
    contamination_threshold: float = pydantic.Field(0.5, gt=0.0, le=1.0, description="share of a document's "
                                                    "n-grams found in training from which it counts as contaminated")
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


def _enabled(config: ValidationConfig) -> bool:
    return config.max_documents_per_cell > 0 and (config.fraction > 0 or config.tokens_per_cell > 0)


def _wanted(hashes: np.ndarray, lengths: np.ndarray, config: ValidationConfig) -> int:
    """How many of these documents, in hash order, the token target or the fraction asks for."""
    before = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)[:-1]])
    return int(((before < config.tokens_per_cell) | (hashes < _threshold(config))).sum())


def split_candidates(hashes: np.ndarray, keys: np.ndarray, lengths: np.ndarray,
                     config: ValidationConfig) -> np.ndarray:
    """(hash, key, length) rows, lowest first, of the documents of one task's part of a cell that the split
    can choose whatever the other parts hold: its lowest that the token target or the fraction asks for
    (the token target counted over this part alone, so never fewer than over the whole cell), at most
    `max_documents_per_cell`, and at least its lowest document."""
    if hashes.size == 0 or not _enabled(config):
        return np.zeros((0, 3), dtype=np.uint64)
    hashes = np.asarray(hashes, dtype=np.uint64)
    order = np.lexsort((keys, hashes))
    take = max(min(_wanted(hashes[order], np.asarray(lengths)[order], config), config.max_documents_per_cell), 1)
    return np.stack([hashes[order[:take]], np.asarray(keys, dtype=np.uint64)[order[:take]],
                     np.asarray(lengths, dtype=np.uint64)[order[:take]]], axis=1)


def split_cutoff(documents: int, tokens: int, candidates: np.ndarray,
                 config: ValidationConfig) -> tuple[int, int] | None:
    """The last (hash, key) held out of a cell of `documents` documents and `tokens` tokens, given every
    part's `split_candidates`: a document is held out iff its (hash, key) is at most this. None: nothing."""
    if documents < 2 or not _enabled(config) or not len(candidates):
        return None
    rows = np.asarray(candidates, dtype=np.uint64).reshape(-1, 3)
    rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
    lengths = rows[:, 2].astype(np.int64)
    within_share = int((np.cumsum(lengths) <= config.max_token_share * tokens).sum())
    chosen = min(max(min(_wanted(rows[:, 0], lengths, config), within_share), 1),
                 config.max_documents_per_cell, documents - 1)
    return int(rows[chosen - 1, 0]), int(rows[chosen - 1, 1])


def held_out_mask(hashes: np.ndarray, keys: np.ndarray, cutoff: Sequence[int] | None) -> np.ndarray:
    """True for the documents at or below `cutoff` (see `split_cutoff`)."""
    if cutoff is None:
        return np.zeros(len(hashes), dtype=bool)
    hashes, keys = np.asarray(hashes, dtype=np.uint64), np.asarray(keys, dtype=np.uint64)
    last_hash, last_key = np.uint64(cutoff[0]), np.uint64(cutoff[1])
    return (hashes < last_hash) | ((hashes == last_hash) & (keys <= last_key))


def held_out(hashes: np.ndarray, lengths: np.ndarray, config: ValidationConfig) -> np.ndarray:
    """A boolean mask over one cell's documents (given their keyed hashes and token counts): True =
    validation. Ties between equal hashes (never hit in practice) go by position."""
    keys = np.arange(len(hashes), dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    candidates = split_candidates(np.asarray(hashes), keys, lengths, config)
    return held_out_mask(hashes, keys, split_cutoff(len(hashes), int(lengths.sum()), candidates, config))
