"""Sorted record files, read a bounded slice at a time: the shuffle under the dedup tasks.

Every dedup file is a `.npy` of structured records sorted by all their fields, in field order.
A task reads them with plain reads of a slice (`RecordFile`), never whole and never through
a lasting memory map (whose touched pages would count as the task's memory), and merges many
of them as one sorted stream holding at most `chunk` records of each (`merged`).
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal, cast

import numpy as np

from pipeline.steps import in_place

MERGE_BYTES = 2 << 20  # records a merge holds, over all its inputs ...
MIN_CHUNK = 256  # ... but at least this many of each (about 5 KiB of LSH records)
HEADER_BYTES = 128  # read first for a .npy header (numpy writes 128 bytes for these records)
SEARCH_PAGE = 4096  # records a binary search on a URL reads at once
SPAN_PAGE, SPAN_FENCES = 16, 16  # one value's search on a URL: the window read whole, the records read per round
Side = Literal["left", "right"]


class RecordFile:
    """One `.npy` file of records: its dtype and length from the header, slices by offset. On a staged task's
    work URL (`pipeline.steps.in_place`) each read is one range request for exactly its bytes."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        head = in_place.read_range(self.path, 0, HEADER_BYTES)
        version = np.lib.format.read_magic(io.BytesIO(head))
        width = 2 if version == (1, 0) else 4  # the header's length field, after the magic and the version
        offset = 8 + width + int.from_bytes(head[8 : 8 + width], "little")
        if offset > len(head):  # a long header (many fields): read it whole
            head = in_place.read_range(self.path, 0, offset)
        handle = io.BytesIO(head)
        np.lib.format.read_magic(handle)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, self.dtype = read_header(handle)
        self.offset = handle.tell()
        self.shape = shape
        self.size = shape[0]
        self.row = int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1

    def _bounds(self, start: int, stop: int) -> tuple[int, int]:
        width = self.row * self.dtype.itemsize
        return self.offset + start * width, self.offset + stop * width

    def _array(self, data: bytes, rows: int) -> np.ndarray:
        return np.frombuffer(bytearray(data), dtype=self.dtype).reshape(rows, *self.shape[1:])

    def read(self, start: int, stop: int) -> np.ndarray:
        stop = min(stop, self.size)
        if stop <= start:
            return np.zeros((0, *self.shape[1:]), dtype=self.dtype)
        return self._array(in_place.read_range(self.path, *self._bounds(start, stop)), stop - start)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The records at the given row numbers (ascending), adjacent rows read as one range."""
        if not rows.size:
            return np.zeros((0, *self.shape[1:]), dtype=self.dtype)
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        runs = [(int(run[0]), int(run[-1]) + 1) for run in np.split(rows, breaks)]
        data = in_place.read_ranges(self.path, [self._bounds(a, b) for a, b in runs])
        return np.concatenate([self._array(d, b - a) for d, (a, b) in zip(data, runs)])

    def search(self, values: np.ndarray, side: Side = "left", field: str | None = None) -> np.ndarray:
        """np.searchsorted of `values` (sorted) in the file's sorted column (`field` of its records, or its values):
        on the disk through a short-lived memory map, on a URL a page of records at a time."""
        if not self.size:
            return np.zeros(values.size, dtype=np.int64)
        if not in_place.is_remote(self.path):
            column = np.load(self.path, mmap_mode="r")
            found = np.searchsorted(column if field is None else column[field], values, side)
            del column
            return found
        return self._paged_search(values, side, field)

    def _paged_search(self, values: np.ndarray, side: Side, field: str | None) -> np.ndarray:
        """Binary search over pages by their first records (one batch of tiny ranges), then in the pages touched."""
        starts = np.arange(0, self.size, SEARCH_PAGE)
        firsts = self.rows(starts)
        fences = firsts if field is None else firsts[field]
        page = np.maximum(np.searchsorted(fences, values, side) - 1, 0)
        found = np.empty(values.size, dtype=np.int64)
        for p in np.unique(page):
            records = self.read(int(starts[p]), int(starts[p]) + SEARCH_PAGE)
            column = records if field is None else records[field]
            mine = page == p
            found[mine] = starts[p] + np.searchsorted(column, values[mine], side)
        return found

    def span(self, field: str, value: int) -> tuple[int, int]:
        """(start, stop) of the records whose `field` (the first, by which the file is sorted) equals `value`."""
        if in_place.is_remote(self.path):  # a few small reads, whatever the file's length
            return self._narrowed(value, "left", field), self._narrowed(value, "right", field)
        values = np.array([value])
        return int(self.search(values, "left", field)[0]), int(self.search(values, "right", field)[0])

    def _narrowed(self, value: int, side: Side, field: str) -> int:
        """np.searchsorted of one value on a URL: each round reads `SPAN_FENCES` records spread over the window
        left (one batch of tiny ranges) and keeps the window between two, down to `SPAN_PAGE` records read
        whole. The bytes read grow with the log of the file's length, so a task reading its own rows of a file
        reads little more than those rows however many other tasks' rows the file holds."""
        low, high = 0, self.size
        while high - low > SPAN_PAGE:
            stride = max(SPAN_PAGE, -(-(high - low) // SPAN_FENCES))
            starts = np.arange(low, high, stride)
            fences = self.rows(starts)[field]
            page = max(int(np.searchsorted(fences, value, side)) - 1, 0)
            low, high = int(starts[page]), min(int(starts[page]) + stride, high)
        return low + int(np.searchsorted(self.read(low, high)[field], value, side))

    def records_with(self, field: str, value: int) -> np.ndarray:
        return self.read(*self.span(field, value))


def sorted_records(records: np.ndarray) -> np.ndarray:
    """Structured records sorted by all their fields, in field order (the order every dedup file keeps)."""
    names = records.dtype.names or ()
    return records[np.lexsort([records[name] for name in reversed(names)])]


def _as_tuple(record: np.void) -> tuple[object, ...]:
    return cast(
        tuple[object, ...], record.item()
    )  # a structured record's item is a tuple (numpy types it bytes | tuple)


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
    carry: tuple[object, ...] | None = (
        None  # the last group of the batch before: its `fields` values and its first key
    )
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
