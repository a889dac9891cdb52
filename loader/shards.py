"""A cell's shards as one token stream per epoch, read on demand; nothing per document in memory.

Opening a cell reads its `cell.json` (checked against the hash the manifest pins) and keeps its
shard table: names, document and token counts, and the digest of each shard's digest sidecar,
O(shards). A shard's files are opened the first time a sample touches it (read with `pread`, see
`loader.files`), through a bounded LRU (`loader.files.OpenFiles`): the sidecar is checked against
the table, the `.idx` header and every file size against the counts, and each chunk of `.bin`,
`.idx` and `.src` against its digest the first time it is read. Document starts and sources are
read from the index on demand (a few bytes at a time), never held per document.

Document order: each shard's documents are cut into blocks of `block` consecutive documents, each
block into runs of `run` consecutive documents, and in epoch e a block's runs come in the order of a
keyed permutation of (seed, cell, shard, block, epoch), each run's documents in store order. A block
covers the same span of the cell's tokens in every epoch (a permutation keeps its total), so window s
(tokens [s L, s L + L + 1) of the epoch's stream) is located by two binary searches, and its cuts
change from one epoch to the next. The store's own order is already a keyed shuffle (the pipeline
writes documents by a hash of their id), so neighbours inside a run are no more alike than at random;
runs make a window a few contiguous byte ranges (one `pread` each) instead of one per document.
`run = 1` (manifests that name no run) is the per-document shuffle.

Each block's layout in an epoch (cached, `LAYOUT_CACHE`) keeps its documents' stream starts and sources, and its
ranges: the documents that follow each other in the `.bin` (a run's), merged. Locating a batch is then a few
`bisect`s per window over Python lists, which give its reads (the ranges it overlaps, one `pread` each) and its
segments (a slice of the layout per window) without a numpy call per window or per document.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from loader.files import ChunkedFile, OpenFiles, RemoteFile, StoreFiles
from loader.permutation import run_shuffle
from millrace.artifacts import parse_envelope
from millrace.errors import ArtifactError
from mixtures.manifest import BuiltManifest, ManifestCell
from pipeline.store.format import (
    CELL_KIND,
    CELL_SCHEMA_VERSION,
    INDEX_PREFIX_BYTES,
    CellManifest,
    ShardDigests,
    ShardTable,
    digest_hex,
    index_size,
    parse_index_header,
)

log = logging.getLogger(__name__)

# One shard's reads of a batch, in bytes: (offsets in its .bin, sizes, offsets in the batch's windows).
Reads = tuple[list[int], list[int], list[int]]

LAYOUT_CACHE = 512  # block layouts kept (each a few int64 per document of one block)
MAX_BATCHES_AHEAD = 64  # the read-ahead plans at most this many batches past the one being read
QUIET_BATCHES = 2  # batches in a row with every chunk held locally after which the read-ahead pauses


class OpenShard:
    """One shard's `.bin`, `.idx` (and `.src`): sizes and header checked when opened."""

    def __init__(self, files: StoreFiles, cell: str, table: ShardTable, index: int, dtype: np.dtype, sources: bool):
        """Shard `index` of `cell`'s table."""
        name, documents, tokens = table.names[index], table.documents[index], table.tokens[index]
        digest = table.digests[index]
        prefix = f"cells/{cell}/{name}"
        self.name, self.documents, self.tokens, self.itemsize = (
            files.describe(prefix),
            documents,
            tokens,
            dtype.itemsize,
        )
        sidecar = files.describe(prefix + ".xxh")
        raw = files.read_bytes(prefix + ".xxh")
        if digest_hex(raw) != digest:
            raise ArtifactError(f"{sidecar}: differs from cells/{cell}/cell.json's digest (shard altered or replaced)")
        digests = ShardDigests.parse(raw, sidecar)
        self._open: list[ChunkedFile] = []
        try:
            self.idx = self._keep(files.open(prefix + ".idx", index_size(documents), digests.idx, f"{digest}-idx"))
            found, sequences, entries = parse_index_header(bytes(self.idx.read(0, INDEX_PREFIX_BYTES)), self.idx.name)
            if found != dtype or sequences != documents or entries != documents + 1:
                raise ArtifactError(
                    f"{self.idx.name}: {sequences} documents of {found}, cells/{cell}/cell.json "
                    f"pins {documents} of {dtype}"
                )
            self.bin = self._keep(files.open(prefix + ".bin", tokens * dtype.itemsize, digests.bin, f"{digest}-bin"))
            self.src = None
            if sources:
                self.src = self._keep(files.open(prefix + ".src", 2 * documents, digests.src, f"{digest}-src"))
        except BaseException:
            self.close()
            raise
        self.pointers_at = INDEX_PREFIX_BYTES + 4 * documents
        self._block_starts: dict[int, int] = {}
        self._block_bounds: list[int] | None = None  # every block's start, once all are known

    def _keep(self, opened: ChunkedFile) -> ChunkedFile:
        self._open.append(opened)
        return opened

    @property
    def files(self) -> int:
        return len(self._open)

    def close(self) -> None:
        for opened in self._open:
            opened.close()
        self._open = []

    def lengths(self, lo: int, hi: int) -> np.ndarray:
        lengths: np.ndarray = self.idx.read(INDEX_PREFIX_BYTES + 4 * lo, 4 * (hi - lo)).view("<i4").astype(np.int64)
        return lengths

    def starts(self, lo: int, hi: int) -> np.ndarray:
        """Token offsets (inside the shard) where documents lo .. hi - 1 begin."""
        starts: np.ndarray = self.idx.read(self.pointers_at + 8 * lo, 8 * (hi - lo)).view("<i8") // self.itemsize
        return starts

    def source_ids(self, lo: int, hi: int) -> np.ndarray:
        if self.src is None:
            raise ValueError(f"{self.name}: opened without its .src sidecar")
        sources: np.ndarray = self.src.read(2 * lo, 2 * (hi - lo)).view("<u2")
        return sources

    def block_start(self, b: int, block: int) -> int:
        """Token offset where block b begins (remembered: every search passes the same first probes)."""
        found = self._block_starts.get(b)
        if found is None:
            found = self._block_starts[b] = int(self.starts(b * block, b * block + 1)[0])
        return found

    def block_at(self, offset: int, block: int) -> int:
        """The block (of `block` documents) holding token `offset` of the shard: a binary search over the block
        starts found so far (each read once), and a `bisect` over all of them once every one is known."""
        if self._block_bounds is not None:
            return bisect.bisect_right(self._block_bounds, offset) - 1
        blocks = -(-self.documents // block)
        low, high = 0, blocks  # the last block starting at or before offset, in [low, high)
        known = self._block_starts
        while high - low > 1:  # a plain binary search: a key function per probe costs more than the rest of a row
            middle = (low + high) // 2
            start = known.get(middle)
            if (self.block_start(middle, block) if start is None else start) <= offset:
                low = middle
            else:
                high = middle
        if len(known) - (0 in known) == blocks - 1:  # every start is known (block 0's is 0)
            self._block_bounds = [0, *(known[b] for b in range(1, blocks))]
        return low


@dataclass(frozen=True)
class BlockLayout:
    """One block in one epoch: its non-empty documents in this epoch's order (an empty one holds no token and
    starts no segment), and its ranges: the documents that follow each other in the `.bin`, merged."""

    table: np.ndarray  # int64 [2, documents]: stream start (shard-relative tokens) and source of each document
    starts: list[int]  # table[0] as Python ints: a `bisect` costs less than a numpy search per window
    documents: np.ndarray  # int64, each document's index in the shard
    lengths: np.ndarray  # int64 tokens of each document
    bounds: list[int]  # stream start of each range, then the block's end
    files: list[int]  # .bin token offset of each range's first token

    @property
    def stream_starts(self) -> np.ndarray:
        starts: np.ndarray = self.table[0]
        return starts

    @property
    def end(self) -> int:
        """Shard-relative token offset where the block ends."""
        return self.bounds[-1]


@dataclass
class Located:
    """A batch's windows located (`TokenSpace._locate`): what to read from each shard, and the segments."""

    reads: dict[int, Reads]  # shard key (cell_id << 32 | index) -> its reads
    parts: list[np.ndarray]  # per window span: the layout's [2, k] (stream start, source) of its segments
    clamps: list[int]  # per span: its first token (its first segment starts there, maybe mid-document)
    shifts: list[int]  # per span: flat index in [b, seq_len] minus shard-relative token
    counts: list[int]  # per span: its segments

    def segments(self, sources: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """(flat start in [rows, seq_len] of each segment, its int32 source or None): a segment is a document's
        piece of a window's input tokens (the first seq_len of its seq_len + 1), so a window's first segment may
        start mid-document; no token is scanned."""
        if not self.parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32) if sources else None
        table = np.concatenate(self.parts, axis=1)
        starts = np.maximum(table[0], np.repeat(self.clamps, self.counts))
        starts += np.repeat(self.shifts, self.counts)
        return starts, table[1].astype(np.int32) if sources else None


class CellShards:
    """The shard table of one drawn cell, read from its hash-checked `cell.json`."""

    def __init__(self, files: StoreFiles, cell: ManifestCell, dtype: np.dtype):
        where = files.describe(f"cells/{cell.name}/cell.json")
        envelope = parse_envelope(
            files.read_bytes(f"cells/{cell.name}/cell.json"), where, CELL_KIND, (CELL_SCHEMA_VERSION,)
        )
        pinned = envelope.pinned(cell.cell_manifest_hash, "the one the manifest pins", "rebuild the mixture")
        manifest = pinned.model(CellManifest)
        if manifest.dtype != str(np.dtype(dtype)):
            raise ArtifactError(f"{where}: dtype {manifest.dtype} differs from the manifest's {np.dtype(dtype)}")
        table = manifest.shards
        self.name = cell.name
        self.table = table
        self.shard_starts = np.concatenate([[0], np.cumsum(table.tokens, dtype=np.int64)]).astype(np.int64)
        self.starts: list[int] = self.shard_starts.tolist()  # the same, for bisect on the hot path
        self.tokens = int(self.shard_starts[-1])
        self.has_sources = table.sources
        if self.tokens != cell.available_tokens or len(table.names) != cell.shards:
            raise ArtifactError(
                f"{where}: {len(table.names)} shards of {self.tokens} tokens, the manifest pins "
                f"{cell.shards} of {cell.available_tokens}"
            )


class TokenSpace:
    """Token windows and per-segment sources of the drawn cells, by (cell, sequence, epoch)."""

    def __init__(self, files: StoreFiles, cells: list[CellShards | None], manifest: BuiltManifest, sources: bool):
        """The drawn `cells` (None: not drawn) of `manifest`'s store, its windows laid out as the manifest pins
        (sequence length, seed, document blocks and runs); `sources`: read the per-segment sources too."""
        self.files, self.cells, self.seq_len = files, cells, manifest.seq_len
        self.dtype = np.dtype(manifest.dtype)
        self.seed, self.block, self.run, self.sources = (
            manifest.seed,
            manifest.document_block,
            manifest.document_run,
            sources,
        )
        self.open_files: OpenFiles[tuple[int, int], OpenShard] = OpenFiles(files.options.max_open_files)
        self._layouts: OrderedDict[tuple[int, int, int, int], BlockLayout] = OrderedDict()  # cell, shard, block, epoch
        self._planned: OrderedDict[tuple[bytes, bytes, bytes], Located] = (
            OrderedDict()
        )  # the read-ahead's, for `gather`
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        """What a data-loader worker process gets: no open files, no cached layouts."""
        state = dict(self.__dict__)
        state["open_files"] = OpenFiles(self.files.options.max_open_files)
        state["_layouts"], state["_planned"], state["_lock"] = OrderedDict(), OrderedDict(), None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def cell(self, cell_id: int) -> CellShards:
        """A drawn cell's shards; a cell without shards is never drawn (the schedule gives it no samples)."""
        cell = self.cells[cell_id]
        if cell is None:
            raise ArtifactError(f"cell {cell_id} has no shards, yet a sample was drawn from it")
        return cell

    def shard(self, cell_id: int, index: int) -> OpenShard:
        cell = self.cell(cell_id)
        table = cell.table

        def opener() -> tuple[OpenShard, int]:
            opened = OpenShard(self.files, cell.name, table, index, self.dtype, self.sources and cell.has_sources)
            return opened, opened.files

        return self.open_files.get((cell_id, index), opener, 3 if self.sources and cell.has_sources else 2)

    def layout(self, cell_id: int, index: int, shard: OpenShard, block: int, epoch: int) -> BlockLayout:
        key = (cell_id, index, block, epoch)
        with self._lock:
            found = self._layouts.get(key)
            if found is not None:
                self._layouts.move_to_end(key)
                return found
        lo, hi = block * self.block, min(shard.documents, (block + 1) * self.block)
        order = run_shuffle(self.seed, f"{self.cell(cell_id).name}/{index}/{block}", epoch, hi - lo, self.run)
        lengths = shard.lengths(lo, hi)[order]
        order = order[lengths > 0]
        lengths = lengths[lengths > 0]
        files = shard.starts(lo, hi)[order]
        begin = shard.block_start(block, self.block)
        table = np.empty((2, order.size), dtype=np.int64)
        np.cumsum(lengths, out=table[0])
        table[0] += begin - lengths
        table[1] = shard.source_ids(lo, hi)[order] if shard.src is not None else 0
        # a range starts at each document that does not continue the one before it in the .bin
        heads = np.flatnonzero(np.append(True, files[1:] != files[:-1] + lengths[:-1])) if order.size else order
        bounds = [*table[0, heads].tolist(), begin + int(lengths.sum())]
        found = BlockLayout(table, table[0].tolist(), lo + order, lengths, bounds, files[heads].tolist())
        with self._lock:
            self._layouts[key] = found
            while len(self._layouts) > LAYOUT_CACHE:
                self._layouts.popitem(last=False)
        return found

    def gather(
        self, cell_ids: np.ndarray, sequences: np.ndarray, epochs: np.ndarray, with_sources: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """([n, seq_len + 1] tokens of each sample, flat segment starts in [n, seq_len], int32 source of each
        segment or None).

        No Python bytecode per document: locate each window's spans (one per block it crosses: a few `bisect`s
        over its layout's starts and ranges), read each shard's ranges straight into the output
        (`ChunkedFile.read_pieces_into`: chunks checked when first read, one `pread` each), and take the
        segments and their sources from the layouts, not from the tokens."""
        located = None
        if self._planned:
            with self._lock:
                located = self._planned.pop(self._plan_key(cell_ids, sequences, epochs), None)
        if located is None:
            located = self._locate(cell_ids, sequences, epochs)
        out = np.empty((cell_ids.size, self.seq_len + 1), dtype=self.dtype)
        raw = out.reshape(-1).view(np.uint8)
        for key, (offsets, sizes, at) in located.reads.items():
            self.shard(key >> 32, key & 0xFFFFFFFF).bin.read_pieces_into(offsets, sizes, raw, at)
        starts, sources = located.segments(with_sources)
        return out, starts, sources

    def chunks_to_read(
        self, cell_ids: np.ndarray, sequences: np.ndarray, epochs: np.ndarray
    ) -> list[tuple[ChunkedFile, np.ndarray]]:
        """(`.bin` file, sorted chunk indices) of each shard that `gather` of these samples reads: the
        read-ahead's plan, found as `gather` finds its reads (shards opened and index chunks read on the way)."""
        located = self._locate(cell_ids, sequences, epochs)
        with self._lock:  # `gather` of the same samples takes them instead of locating them again
            self._planned[self._plan_key(cell_ids, sequences, epochs)] = located
            while len(self._planned) > MAX_BATCHES_AHEAD + 2:
                self._planned.popitem(last=False)
        plan = []
        for key, (offsets, sizes, _) in located.reads.items():
            file = self.shard(key >> 32, key & 0xFFFFFFFF).bin
            first = np.asarray(offsets, dtype=np.int64) // file.chunk_bytes
            last = (np.asarray(offsets, dtype=np.int64) + sizes - 1) // file.chunk_bytes
            chunks = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(first.tolist(), last.tolist())]))
            plan.append((file, chunks))
        return plan

    def read_ahead(self, upcoming: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> ReadAhead | None:
        """A `ReadAhead` over the coming batches' (cell_ids, sequences, epochs), or None where there is nothing
        to fetch ahead (a local store, or `readahead_bytes = 0`)."""
        if self.files.fetcher is None:
            return None
        return ReadAhead(self, upcoming, self.files.options.readahead_bytes)

    def read(
        self, cell_ids: np.ndarray, sequences: np.ndarray, epochs: np.ndarray, with_sources: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """([n, seq_len + 1] tokens, [n, seq_len] int32 per-token sources or None) of each sample."""
        windows, starts, sources = self.gather(cell_ids, sequences, epochs, with_sources)
        if sources is None:
            return windows, None
        total = cell_ids.size * self.seq_len
        return windows, np.repeat(sources, np.diff(np.append(starts, total))).reshape(cell_ids.size, self.seq_len)

    @staticmethod
    def _plan_key(cell_ids: np.ndarray, sequences: np.ndarray, epochs: np.ndarray) -> tuple[bytes, bytes, bytes]:
        return cell_ids.tobytes(), sequences.tobytes(), epochs.tobytes()

    def _locate(self, cell_ids: np.ndarray, sequences: np.ndarray, epochs: np.ndarray) -> Located:
        """Where the windows' tokens [sequence seq_len, + seq_len + 1) of their cells in their epochs' order lie:
        each window cut into spans, one per block it crosses; each span's reads (the block's ranges it overlaps)
        and its segments (the documents that start inside it before the window's last input token). Plain Python
        ints and `bisect` (a numpy call per window costs more than all of this)."""
        reads: dict[int, Reads] = {}
        located = Located(reads, [], [], [], [])
        parts, clamps, shifts, counts = located.parts, located.clamps, located.shifts, located.counts
        opened: dict[int, OpenShard] = {}  # this batch's shards (looked up again if evicted meanwhile)
        block, length, itemsize = self.block, self.seq_len, self.dtype.itemsize
        width = length + 1
        bisect_left, bisect_right = bisect.bisect_left, bisect.bisect_right
        for row, (cell_id, sequence, epoch) in enumerate(zip(cell_ids.tolist(), sequences.tolist(), epochs.tolist())):
            cell = self.cell(cell_id)
            position = sequence * length
            if position + width > cell.tokens:
                raise ArtifactError(
                    f"cell {cell.name!r}: window at token {position} runs past its {cell.tokens} tokens"
                )
            column = 0
            while column < width:
                index = bisect_right(cell.starts, position) - 1
                key = cell_id << 32 | index
                shard = opened.get(key)
                if shard is None or not shard.files:
                    shard = opened[key] = self.shard(cell_id, index)
                offset = position - cell.starts[index]
                layout = self.layout(cell_id, index, shard, shard.block_at(offset, block), epoch)
                bounds, files = layout.bounds, layout.files
                end = min(offset + width - column, bounds[-1])
                shard_reads = reads.get(key)
                if shard_reads is None:
                    shard_reads = reads[key] = ([], [], [])
                at = (row * width + column - offset) * itemsize  # where shard token 0 would land in the output
                lo = offset
                k = bisect_right(bounds, offset) - 1
                while lo < end:
                    hi = min(end, bounds[k + 1])
                    shard_reads[0].append((files[k] + lo - bounds[k]) * itemsize)
                    shard_reads[1].append((hi - lo) * itemsize)
                    shard_reads[2].append(at + lo * itemsize)
                    lo = hi
                    k += 1
                if column < length:
                    first = bisect_right(layout.starts, offset) - 1
                    inside = bisect_left(layout.starts, offset + length - column, first)
                    parts.append(layout.table[:, first:inside])
                    clamps.append(offset)
                    shifts.append(row * length + column - offset)
                    counts.append(inside - first)
                column += end - offset
                position += end - offset
        return located

    def window_documents(self, cell_id: int, sequence: int, epoch: int) -> list[tuple[int, int]]:
        """(shard, document index in the shard) of each document window `sequence` of `epoch` overlaps,
        in window order."""
        cell = self.cell(cell_id)
        position, end = sequence * self.seq_len, sequence * self.seq_len + self.seq_len + 1
        found: list[tuple[int, int]] = []
        while position < min(end, cell.tokens):
            index = int(np.searchsorted(cell.shard_starts, position, side="right")) - 1
            shard = self.shard(cell_id, index)
            offset = position - int(cell.shard_starts[index])
            layout = self.layout(cell_id, index, shard, shard.block_at(offset, self.block), epoch)
            stop = offset + end - position
            first = int(np.searchsorted(layout.stream_starts, offset, side="right")) - 1
            last = int(np.searchsorted(layout.stream_starts, stop, side="left"))
            found += [(index, int(d)) for d, n in zip(layout.documents[first:last], layout.lengths[first:last]) if n]
            position += layout.end - offset
        return found


class ReadAhead:
    """The chunks of the batches to come, staged in memory while the current one is read (a remote store).

    A batch's pieces are a pure function of its samples, so a thread walks the coming batches in order, works
    out the chunks each will read (`TokenSpace.chunks_to_read`) and stages them with the store's
    `ChunkFetcher` (from the cache, or fetched by concurrent range reads). It stays at most `budget` bytes of
    staged chunks (and MAX_BATCHES_AHEAD batches) ahead of the reader, and each batch's chunks are released
    once it is read, so what it holds is bounded by the budget, whatever the store or the run's length. After
    QUIET_BATCHES batches whose chunks the local cache held already it pauses (its planning would only take
    the reader's time) until the reader has to fetch a chunk itself. An error here only stops the read-ahead:
    the reader reads what it needs itself and reports failures."""

    def __init__(self, space: TokenSpace, upcoming: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], budget: int):
        if space.files.fetcher is None:
            raise ValueError("read-ahead needs a remote store's ChunkFetcher")
        self.space, self.budget, self.fetcher = space, budget, space.files.fetcher
        self._pinned: deque[tuple[int, list[str]]] = deque()  # (batch, its chunk keys) of unfinished batches
        self._finished = 0  # batches the reader has finished
        self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(upcoming,), name="millrace-read-ahead", daemon=True)
        self._thread.start()

    def _run(self, upcoming: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        quiet = 0  # batches in a row whose chunks were all held already
        try:
            for batch, (cell_ids, sequences, epochs) in enumerate(upcoming):
                with self._changed:
                    while not self._stopped and batch > self._finished and self._too_far(batch):
                        self._changed.wait()
                    if quiet >= QUIET_BATCHES:  # a warm cache: planning ahead would only take the reader's time
                        demand = self.fetcher.on_demand
                        while not self._stopped and self.fetcher.on_demand == demand:  # until the reader fetches
                            self._changed.wait()
                        quiet = 0
                    if self._stopped:
                        return
                    if batch < self._finished:  # the reader got there first
                        continue
                started = self.fetcher.started
                keys: list[str] = []
                for file, chunks in self.space.chunks_to_read(cell_ids, sequences, epochs):
                    if isinstance(file, RemoteFile):
                        keys += self.fetcher.stage(file, chunks)
                quiet = 0 if self.fetcher.started > started else quiet + 1
                with self._changed:
                    if self._stopped or batch < self._finished:
                        self.fetcher.release(keys)
                    else:
                        self._pinned.append((batch, keys))
        except Exception as exc:  # the reader meets the same problem on demand, and names it
            log.debug("read-ahead stopped: %s", exc)

    def _too_far(self, batch: int) -> bool:
        return self.fetcher.staged_bytes >= self.budget or batch - self._finished > MAX_BATCHES_AHEAD

    def finished(self) -> None:
        """The reader finished its next batch: its chunks are released."""
        with self._changed:
            self._finished += 1
            while self._pinned and self._pinned[0][0] < self._finished:
                self.fetcher.release(self._pinned.popleft()[1])
            self._changed.notify_all()

    def close(self) -> None:
        """Stop, and release every batch still pinned."""
        with self._changed:
            self._stopped = True
            while self._pinned:
                self.fetcher.release(self._pinned.popleft()[1])
            self._changed.notify_all()
