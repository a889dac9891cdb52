"""Token windows -> model inputs: ids, next-token labels, and document segments.

A window holds seq_len + 1 tokens of a cell's concatenated documents (EOS after each).
`input_ids = window[:-1]`, `labels = window[1:]`. A new segment starts at each document
in `input_ids`, so a document-masked attention keeps each token inside its document;
`positions` restart at 0 at each segment start (the first token of a window is
position 0 even mid-document: the model sees nothing before it). The training loader knows
where its documents start (`loader.shards.Pieces.segments`) and hands the starts in with
one source per segment, which the batch keeps per segment (a [b, S] table: 4 bytes a token
fewer to write and to copy to the device; `token_values` spreads it over the tokens where
a per-token view is wanted); held-out windows find segments after each EOS (`segment_starts`).

Segments are sparse (one per document), so both arrays are built by repeating one
value per segment (`np.repeat`) over the flattened batch instead of scanning every
token with cumulative sums. The outputs are views of one allocation: measured on the bench
VM, separate 0.5-1 MB arrays per batch made glibc hand memory back to the kernel and fault
it in again every batch (hundreds of page faults, more time than the gather itself); one
3 MB block is reused from the heap.
"""

from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=4)
def _counting(total: int, dtype: type) -> np.ndarray:
    """arange(total), kept read-only between batches of one shape."""
    counting: np.ndarray = np.arange(total, dtype=dtype)
    counting.flags.writeable = False
    return counting


def segment_starts(windows: np.ndarray, eos_id: int | None) -> np.ndarray:
    """Sorted flat indices into [rows, seq_len] where a segment starts: each row's first token, and each
    token after an EOS."""
    rows, width = windows.shape
    length = width - 1
    row_starts = np.arange(rows, dtype=np.int64) * length
    if eos_id is None or length == 0:
        return row_starts
    eos = np.flatnonzero(windows.reshape(-1) == eos_id)  # one scan of the contiguous windows
    row, column = np.divmod(eos, width)
    inside = column < length - 1  # an EOS at the last input token starts no segment inside the row
    return np.sort(np.concatenate([row_starts, row[inside] * length + column[inside] + 1]))


def output_block(rows: int, length: int, token_sources: bool = False) -> np.ndarray:
    """The one allocation `pack` writes a batch into (bytes for ids, labels, segments, positions and, when
    wanted, per-token sources). Take it before the batch's temporaries: the block then reuses the one the
    previous batch freed instead of finding that space cut up by temporaries and growing the heap."""
    return np.empty((28 if token_sources else 24) * rows * length, dtype=np.uint8)


def pack_segments(
    windows: np.ndarray, starts: np.ndarray, segment_sources: np.ndarray | None = None, block: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(input_ids int64, labels int64, segment_ids int32, positions int32: each [b, seq_len] and a contiguous
    view of `block` (default: a new `output_block`); the source of each row's segments or None). `starts`: the
    sorted flat indices into [b, seq_len] where segments start (each row's first token among them);
    `segment_sources`: one source per segment, handed back as an int32 [b, S] table (`row_segment_table`)."""
    rows, width = windows.shape
    length = width - 1
    total = rows * length
    if block is None:
        block = output_block(rows, length)
    input_ids = block[: 8 * total].view(np.int64).reshape(rows, length)
    labels = block[8 * total : 16 * total].view(np.int64).reshape(rows, length)
    segment_ids = block[16 * total : 20 * total].view(np.int32)
    positions = block[20 * total : 24 * total].view(np.int32)
    np.copyto(input_ids, windows[:, :-1])
    np.copyto(labels, windows[:, 1:])
    row = starts // length
    number = np.arange(starts.size, dtype=np.int32)  # segment number inside its row: global index minus the
    number -= np.searchsorted(starts, np.arange(rows, dtype=np.int64) * length).astype(np.int32)[row]  # row's first
    lengths = np.diff(starts, append=total)
    segment_ids[:] = np.repeat(number, lengths)
    wide = np.int64 if total >= 2**31 else np.int32
    np.subtract(
        _counting(total, wide), np.repeat(starts.astype(wide), lengths), out=positions, casting="unsafe"
    )  # each value is below seq_len
    table = None if segment_sources is None else row_segment_table(rows, row, number, segment_sources)
    return input_ids, labels, segment_ids.reshape(rows, length), positions.reshape(rows, length), table


def row_segment_table(rows: int, row: np.ndarray, number: np.ndarray, values: np.ndarray) -> np.ndarray:
    """int32 [rows, S]: `values[i]` at [row[i], number[i]] (segment `number` of its row), -1 past a row's last
    segment; S is the most segments in a row. A token's value is `table[row, segment_ids[row, token]]`
    (`token_values`)."""
    table = np.full((rows, int(number.max()) + 1 if number.size else 0), -1, dtype=np.int32)
    table[row, number] = values
    return table


def token_values(table: np.ndarray, segment_ids: np.ndarray) -> np.ndarray:
    """A [b, S] per-segment table spread over its [b, L] tokens (int32)."""
    return np.take_along_axis(table, segment_ids, axis=1)


def pack(
    windows: np.ndarray, eos_id: int | None, sources: np.ndarray | None = None, block: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """`pack_segments` with segments after each EOS; `sources` ([b, seq_len], any integer dtype) is copied in
    per token beside the rest."""
    rows, width = windows.shape
    if block is None:
        block = output_block(rows, width - 1, sources is not None)
    input_ids, labels, segment_ids, positions, _ = pack_segments(windows, segment_starts(windows, eos_id), None, block)
    copied = None
    if sources is not None:
        total = rows * (width - 1)
        copied = block[24 * total : 28 * total].view(np.int32).reshape(rows, width - 1)
        np.copyto(copied, sources, casting="unsafe")
    return input_ids, labels, segment_ids, positions, copied
