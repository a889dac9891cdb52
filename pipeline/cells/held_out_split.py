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
import xxhash

from pipeline.config import HeldOutConfig

HELD_OUT_REASON = "held out for validation"
# A held-out document the decontamination gave back to training (its n-grams are mostly in training already).
GIVEN_BACK_REASON = "found in training (decontaminated)"
VALIDATION_FUNNEL_STEP = "validation"
VALIDATION_PREFIX = "validation"


def document_hash(tokens: np.ndarray, seed: int) -> int:
    """The keyed hash of a document's content (its token ids, whatever the store's dtype)."""
    return xxhash.xxh3_64_intdigest(np.ascontiguousarray(tokens, dtype="<u4").tobytes(), seed=seed)


def _threshold(config: HeldOutConfig) -> np.uint64:
    return np.uint64(min(int(config.fraction * 2.0**64), 2**64 - 1))


def _enabled(config: HeldOutConfig) -> bool:
    return config.max_documents_per_cell > 0 and (config.fraction > 0 or config.tokens_per_cell > 0)


def _wanted(hashes: np.ndarray, lengths: np.ndarray, config: HeldOutConfig) -> int:
    """How many of these documents, in hash order, the token target or the fraction asks for."""
    before = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)[:-1]])
    return int(((before < config.tokens_per_cell) | (hashes < _threshold(config))).sum())


def split_candidates(hashes: np.ndarray, keys: np.ndarray, lengths: np.ndarray, config: HeldOutConfig) -> np.ndarray:
    """(hash, key, length) rows, lowest first, of the documents of one task's part of a cell that the split
    can choose whatever the other parts hold: its lowest that the token target or the fraction asks for
    (the token target counted over this part alone, so never fewer than over the whole cell), at most
    `max_documents_per_cell`, and at least its lowest document."""
    if hashes.size == 0 or not _enabled(config):
        return np.zeros((0, 3), dtype=np.uint64)
    hashes = np.asarray(hashes, dtype=np.uint64)
    order = np.lexsort((keys, hashes))
    take = max(min(_wanted(hashes[order], np.asarray(lengths)[order], config), config.max_documents_per_cell), 1)
    return np.stack(
        [
            hashes[order[:take]],
            np.asarray(keys, dtype=np.uint64)[order[:take]],
            np.asarray(lengths, dtype=np.uint64)[order[:take]],
        ],
        axis=1,
    )


def split_cutoff(documents: int, tokens: int, candidates: np.ndarray, config: HeldOutConfig) -> tuple[int, int] | None:
    """The last (hash, key) held out of a cell of `documents` documents and `tokens` tokens, given every
    part's `split_candidates`: a document is held out iff its (hash, key) is at most this. None: nothing."""
    if documents < 2 or not _enabled(config) or not len(candidates):
        return None
    rows = np.asarray(candidates, dtype=np.uint64).reshape(-1, 3)
    rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
    lengths = rows[:, 2].astype(np.int64)
    within_share = int((np.cumsum(lengths) <= config.max_token_share * tokens).sum())
    chosen = min(
        max(min(_wanted(rows[:, 0], lengths, config), within_share), 1), config.max_documents_per_cell, documents - 1
    )
    return int(rows[chosen - 1, 0]), int(rows[chosen - 1, 1])


def held_out_mask(hashes: np.ndarray, keys: np.ndarray, cutoff: Sequence[int] | None) -> np.ndarray:
    """True for the documents at or below `cutoff` (see `split_cutoff`)."""
    if cutoff is None:
        return np.zeros(len(hashes), dtype=bool)
    hashes, keys = np.asarray(hashes, dtype=np.uint64), np.asarray(keys, dtype=np.uint64)
    last_hash, last_key = np.uint64(cutoff[0]), np.uint64(cutoff[1])
    held: np.ndarray = (hashes < last_hash) | ((hashes == last_hash) & (keys <= last_key))
    return held


def held_out(hashes: np.ndarray, lengths: np.ndarray, config: HeldOutConfig) -> np.ndarray:
    """A boolean mask over one cell's documents (given their keyed hashes and token counts): True =
    validation. Ties between equal hashes (never hit in practice) go by position."""
    keys = np.arange(len(hashes), dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    candidates = split_candidates(np.asarray(hashes), keys, lengths, config)
    return held_out_mask(hashes, keys, split_cutoff(len(hashes), int(lengths.sum()), candidates, config))
