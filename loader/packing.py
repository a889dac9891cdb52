"""Token windows -> model inputs: ids, next-token labels, and document segments from EOS.

A window holds seq_len + 1 tokens of a cell's concatenated documents (EOS after each).
`input_ids = window[:-1]`, `labels = window[1:]`. A new segment starts after every EOS
in `input_ids`, so a document-masked attention keeps each token inside its document;
`positions` restart at 0 at each segment start (the first token of a window is
position 0 even mid-document: the model sees nothing before it).

Segments are sparse (one per document), so both arrays are built by repeating one
value per segment (`np.repeat`) over the flattened batch instead of scanning every
token with cumulative sums.
"""

from __future__ import annotations

import numpy as np


def repeat_pieces(starts: np.ndarray, values: np.ndarray, total: int, dtype: np.dtype) -> np.ndarray:
    """A flat array of `total` elements: values[i] from starts[i] up to starts[i + 1] (starts sorted, starts[0] = 0)."""
    lengths = np.diff(np.append(starts, total))
    return np.repeat(values.astype(dtype, copy=False), lengths)


def pack(windows: np.ndarray, eos_id: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids int64, labels int64, segment_ids int32, positions int32), each [b, seq_len]."""
    input_ids = windows[:, :-1].astype(np.int64)
    labels = windows[:, 1:].astype(np.int64)
    rows, length = input_ids.shape
    row_starts = np.arange(rows, dtype=np.int64) * length
    if eos_id is None or length == 0:
        starts = row_starts
    else:
        after_eos = np.flatnonzero(windows[:, : length - 1] == eos_id)  # flat index into [rows, length - 1]
        after_eos = after_eos // (length - 1) * length + after_eos % (length - 1) + 1
        starts = np.sort(np.concatenate([row_starts, after_eos]))
    total = rows * length
    first_of_row = np.searchsorted(starts, row_starts)
    # segment number inside its row: global segment index minus that of the row's first segment
    row_of_segment = np.repeat(np.arange(rows), np.diff(np.append(first_of_row, starts.size)))
    segment_ids = repeat_pieces(starts, np.arange(starts.size) - first_of_row[row_of_segment], total, np.int32)
    positions = np.arange(total, dtype=np.int64 if total >= 2**31 else np.int32)
    positions -= repeat_pieces(starts, starts, total, positions.dtype)
    return input_ids, labels, segment_ids.reshape(rows, length), positions.astype(np.int32, copy=False).reshape(
        rows, length)
