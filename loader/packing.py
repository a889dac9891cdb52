"""Token windows -> model inputs: ids, next-token labels, and document segments.

A window holds seq_len + 1 tokens of a cell's concatenated documents (EOS after each). It is widened to int64
once, into one `[b, seq_len + 1]` buffer (`tokens`): `input_ids = tokens[:, :-1]` and `labels = tokens[:, 1:]`
are views of it (as modded-nanogpt hands them out), so the ids are written once and a trainer copies one buffer
to the device, not two. The views share memory: write into a copy (`labels.copy()`), never into them.

A new segment starts at each document in `input_ids`, so a document-masked attention keeps each token inside its
document; `positions` restart at 0 at each segment start (the first token of a window is position 0 even
mid-document: the model sees nothing before it). The training loader knows where its documents start
(`loader.shards.Located.segments`) and hands the starts in with one source per segment, which the batch keeps per
segment (a [b, S] table: `token_values` spreads it over the tokens where a per-token view is wanted); held-out
windows find segments after each EOS (`segment_starts`).

Segments are sparse (one per document), so segment ids and positions are written by repeating one value per
segment (`np.repeat`) over the flattened batch, never by scanning tokens. The outputs are views of one
allocation: measured on the bench VM, separate 0.5-1 MB arrays per batch made glibc hand memory back to the
kernel and fault it in again every batch (hundreds of page faults, more time than the gather itself). The
training stream takes that block from a `BlockPool`, which hands a block out again once no batch refers to it.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import NamedTuple

import numpy as np


class Packed(NamedTuple):
    """A packed batch: int64 `tokens` [b, seq_len + 1] (ids and labels are its views), int32 `segment_ids` and
    `positions` [b, seq_len], and the source of each row's segments (int32 [b, S]) or None."""

    tokens: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    segment_sources: np.ndarray | None

    @property
    def input_ids(self) -> np.ndarray:
        return self.tokens[:, :-1]

    @property
    def labels(self) -> np.ndarray:
        return self.tokens[:, 1:]


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
    row_starts: np.ndarray = np.arange(rows, dtype=np.int64) * length
    if eos_id is None or length == 0:
        return row_starts
    eos = np.flatnonzero(windows.reshape(-1) == eos_id)  # one scan of the contiguous windows
    row, column = np.divmod(eos, width)
    inside = column < length - 1  # an EOS at the last input token starts no segment inside the row
    return np.sort(np.concatenate([row_starts, row[inside] * length + column[inside] + 1]))


def output_block_bytes(rows: int, length: int) -> int:
    """The size of the one allocation `pack_segments` writes a batch into (int64 tokens, int32 segment ids and
    positions)."""
    return 8 * rows * (length + 1) + 8 * rows * length


class BlockPool:
    """Output blocks handed out again once nothing refers to them (no batch, view or tensor of one is alive).

    A fresh 2 MB block per batch comes from the heap's top, which glibc trims back and faults in again from one
    batch to the next, depending on what else was freed meanwhile (measured: 0 to 40 page faults a batch for
    the same code, more time than the segment ids). Each block handed out is a new array over a kept buffer
    (through a memoryview, so that every numpy view of it, and every `torch.from_numpy` tensor of those, keeps
    that array alive); when the last of them dies, a finalizer gives the buffer back. At most `size` buffers
    wait to be reused; past that they are freed."""

    def __init__(self, size: int):
        self.size = size
        self._free: list[np.ndarray] = []
        self._lock = threading.RLock()  # a finalizer may run in any thread, inside `take` too

    def take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            buffer = self._free.pop() if self._free and self._free[-1].size == nbytes else None
        if buffer is None:
            buffer = np.empty(nbytes, dtype=np.uint8)
        block = np.frombuffer(buffer.data, dtype=np.uint8)  # a memoryview: views of it stop at `block`
        weakref.finalize(block, self._give_back, buffer)
        return block

    def _give_back(self, buffer: np.ndarray) -> None:
        with self._lock:
            if len(self._free) < self.size:
                self._free.append(buffer)

    def __getstate__(self) -> dict[str, int]:
        """What a data-loader worker process gets: the size, no buffers."""
        return {"size": self.size}

    def __setstate__(self, state: dict[str, int]) -> None:
        BlockPool.__init__(self, state["size"])


def pack_segments(
    windows: np.ndarray, starts: np.ndarray, segment_sources: np.ndarray | None = None, block: np.ndarray | None = None
) -> Packed:
    """`windows` [b, seq_len + 1] packed into views of `block` (uint8, `output_block_bytes` long; default: a new
    one). `starts`: the sorted flat indices into [b, seq_len] where segments start (each row's first token among
    them, at column 0, and no other); `segment_sources`: one source per segment, handed back as an int32 [b, S]
    table (`row_segment_table`)."""
    rows, width = windows.shape
    length = width - 1
    total = rows * length
    if block is None:
        block = np.empty(output_block_bytes(rows, length), dtype=np.uint8)
    tokens = block[: 8 * rows * width].view(np.int64).reshape(rows, width)
    segment_ids = block[8 * rows * width : 8 * rows * width + 4 * total].view(np.int32)
    positions = block[8 * rows * width + 4 * total : 8 * rows * width + 8 * total].view(np.int32)
    np.copyto(tokens, windows)
    lengths = np.empty_like(starts)  # np.diff(starts, append=total), without its overhead
    np.subtract(starts[1:], starts[:-1], out=lengths[:-1])
    lengths[-1:] = total - starts[-1:]
    row = starts // length
    number = np.arange(starts.size, dtype=np.int64)  # a segment's number inside its row: minus the row's first
    number -= np.searchsorted(starts, _counting(rows, np.int64) * length)[row]
    segment_ids[:] = np.repeat(number.astype(np.int32), lengths)
    wide = np.int64 if total >= 2**31 else np.int32
    np.subtract(_counting(total, wide), np.repeat(starts.astype(wide), lengths), out=positions, casting="unsafe")
    table = None if segment_sources is None else row_segment_table(rows, row, number, segment_sources)
    return Packed(tokens, segment_ids.reshape(rows, length), positions.reshape(rows, length), table)


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


def pack(windows: np.ndarray, eos_id: int | None) -> Packed:
    """`pack_segments` with segments after each EOS (held-out windows)."""
    return pack_segments(windows, segment_starts(windows, eos_id))
