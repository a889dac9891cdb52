"""Sorted record files, read a bounded slice at a time: the shuffle under the dedup tasks.

Every dedup file is a `.npy` of structured records sorted by all their fields, in field order.
A task reads them with plain reads of a slice (`RecordFile`), never whole and never through
a lasting memory map (whose touched pages would count as the task's memory), and merges many
of them as one sorted stream holding at most `chunk` records of each (`merged`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import cast

import numpy as np

MERGE_BYTES = 2 << 20  # records a merge holds, over all its inputs ...
MIN_CHUNK = 256  # ... but at least this many of each (about 5 KiB of LSH records)


class RecordFile:
    """One `.npy` file of records: its dtype and length from the header, slices by offset."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        with open(self.path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, _, self.dtype = read_header(handle)
            self.offset = handle.tell()
        self.shape = shape
        self.size = shape[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        stop = min(stop, self.size)
        if stop <= start:
            return np.zeros((0, *self.shape[1:]), dtype=self.dtype)
        row = int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1
        with open(self.path, "rb") as handle:
            handle.seek(self.offset + start * row * self.dtype.itemsize)
            data = np.fromfile(handle, dtype=self.dtype, count=(stop - start) * row)
        return data.reshape(stop - start, *self.shape[1:])

    def span(self, field: str, value: int) -> tuple[int, int]:
        """(start, stop) of the records whose `field` (the first, by which the file is sorted) equals `value`."""
        if not self.size:
            return 0, 0
        column = np.load(self.path, mmap_mode="r")[field]  # a binary search touches a few pages only
        start, stop = int(np.searchsorted(column, value, "left")), int(np.searchsorted(column, value, "right"))
        del column
        return start, stop

    def records_with(self, field: str, value: int) -> np.ndarray:
        return self.read(*self.span(field, value))


def sorted_records(records: np.ndarray) -> np.ndarray:
    """Structured records sorted by all their fields, in field order (the order every dedup file keeps)."""
    names = records.dtype.names or ()
    return records[np.lexsort([records[name] for name in reversed(names)])]


def _as_tuple(record: np.void) -> tuple:
    return cast(tuple, record.item())  # a structured record's item is a tuple (numpy types it bytes | tuple)


def merged(slices: Iterable[tuple[Path, int, int]], chunk: int | None = None) -> Iterator[np.ndarray]:
    """The records of sorted file slices (path, start, stop) as one sorted stream of sorted batches.

    Holds at most `chunk` records of each slice (by default MERGE_BYTES over all of them, at
    least MIN_CHUNK each): each round emits every buffered record up to the smallest last
    buffered record of the slices not yet read to their end (no later record of any slice can
    precede it) and tops up every buffer it left half empty, so that a round emits about half of
    what the buffers hold and the rounds number about twice the records over the budget.
    """
    opened = [(RecordFile(path), start, stop) for path, start, stop in slices if stop > start]
    files = [f for f, _, _ in opened]
    if chunk is None:
        chunk = max(MIN_CHUNK, MERGE_BYTES // (len(files) * files[0].dtype.itemsize)) if files else MIN_CHUNK
    read = [start for _, start, _ in opened]
    ends = [min(stop, f.size) for f, _, stop in opened]
    buffers = [np.zeros(0, dtype=f.dtype) for f in files]

    def refill(i: int) -> None:  # top the buffer up to `chunk` records
        more = files[i].read(read[i], min(read[i] + chunk - buffers[i].size, ends[i]))
        buffers[i] = np.concatenate([buffers[i], more]) if buffers[i].size else more
        read[i] += more.size

    for i in range(len(files)):
        refill(i)
    while any(b.size for b in buffers):
        unread = [i for i in range(len(files)) if read[i] < ends[i]]
        bound = min(buffers[i][-1].item() for i in unread) if unread else None
        taken = []
        for i, buffer in enumerate(buffers):
            cut = buffer.size if bound is None else bisect.bisect_right(buffer, bound, key=_as_tuple)
            taken.append(buffer[:cut])
            buffers[i] = buffer[cut:]
            if buffers[i].size <= chunk // 2 and read[i] < ends[i]:
                refill(i)
        batch = np.concatenate(taken)
        if batch.size:
            yield sorted_records(batch)


def group_firsts(batches: Iterable[np.ndarray], fields: tuple[str, ...]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """For a sorted stream of records with a `key` field: (first key, key) of every record that is not
    the first of its group (records equal on `fields`); the first has the group's smallest key."""
    carry: tuple | None = None  # the last group of the batch before: its `fields` values and its first key
    carry_key = -1
    for batch in batches:
        n = batch.size
        same = np.zeros(n, dtype=bool)
        same[1:] = True
        for name in fields:
            same[1:] &= batch[name][1:] == batch[name][:-1]
        same[0] = carry is not None and tuple(batch[0][name].item() for name in fields) == carry
        run = np.maximum.accumulate(np.where(same, -1, np.arange(n)))
        first = np.where(run >= 0, batch["key"][np.maximum(run, 0)], carry_key)
        yield first[same], batch["key"][same]
        carry, carry_key = tuple(batch[-1][name].item() for name in fields), int(first[-1])
