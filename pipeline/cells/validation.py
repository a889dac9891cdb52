"""The held-out validation split: which of a cell's documents are kept out of training.

A document is chosen by a keyed hash of its content (xxh3-64 of its token ids with the
configured seed), never by its position, so the split does not depend on the order of
documents, the task count or the executor, and a document keeps its side when others come
or go. Per cell: the documents whose hash falls below `fraction` of the hash range, at most
`max_documents_per_cell` of them (the lowest hashes), and at least one when the cell has two
or more documents; a cell always keeps at least one training document.
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


def held_out(hashes: np.ndarray, config: ValidationConfig) -> np.ndarray:
    """A boolean mask over one cell's documents (given their keyed hashes): True = validation."""
    count = hashes.size
    mask = np.zeros(count, dtype=bool)
    if count < 2 or config.max_documents_per_cell == 0 or config.fraction == 0:
        return mask
    threshold = np.uint64(min(int(config.fraction * 2.0**64), 2**64 - 1))
    wanted = int((hashes < threshold).sum())
    chosen = min(max(wanted, 1), config.max_documents_per_cell, count - 1)
    order = np.lexsort((np.arange(count), hashes))  # lowest hash first; ties by position, never hit in practice
    mask[order[:chosen]] = True
    return mask
