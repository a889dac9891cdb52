"""Token windows -> model inputs: ids, next-token labels, and document segments from EOS.

A window holds seq_len + 1 tokens of a cell's concatenated documents (EOS after each).
`input_ids = window[:-1]`, `labels = window[1:]`. A new segment starts after every EOS
in `input_ids`, so a document-masked attention keeps each token inside its document;
`positions` restart at 0 at each segment start (the first token of a window is
position 0 even mid-document: the model sees nothing before it).
"""

from __future__ import annotations

import numpy as np


def pack(windows: np.ndarray, eos_id: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids int64, labels int64, segment_ids int32, positions int32), each [b, seq_len]."""
    input_ids = windows[:, :-1].astype(np.int64)
    labels = windows[:, 1:].astype(np.int64)
    rows, length = input_ids.shape
    segment_ids = np.zeros((rows, length), dtype=np.int32)
    index = np.arange(length, dtype=np.int32)
    if eos_id is None or length == 0:
        return input_ids, labels, segment_ids, np.broadcast_to(index, (rows, length)).copy()
    ends = windows[:, : length - 1] == eos_id  # EOS at j - 1 opens a segment at j
    np.cumsum(ends, axis=1, dtype=np.int32, out=segment_ids[:, 1:])
    starts = np.zeros((rows, length), dtype=np.int32)
    starts[:, 1:] = np.where(ends, index[1:], 0)
    np.maximum.accumulate(starts, axis=1, out=starts)
    np.subtract(index, starts, out=starts)
    return input_ids, labels, segment_ids, starts
