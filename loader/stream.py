"""`MixtureStream`: the batches of a built manifest, as a pure function of the step.

Batch `s` is global positions [s * B, (s + 1) * B); rank r of W gets the contiguous
slice [s * B + r * B / W, s * B + (r + 1) * B / W), so changing W between runs keeps
the global stream identical. Opening reads the manifest, checks it, and reads each
drawn cell's hash-checked shard table (`loader.shards`): O(cells + shards) work, nothing
proportional to documents, tokens or samples; shard files open when first read. A stats-only
manifest opens in index-only mode (positions ->
cell, sequence, epoch; no tokens).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar, overload

import numpy as np

from loader.files import StoreAccess, StoreFiles
from loader.packing import BlockPool, output_block_bytes, pack_segments, token_values
from loader.schedule import SampleIndex, Schedule
from loader.shards import CellShards, ReadAhead, TokenSpace
from loader.state import LoaderState
from millrace.artifacts import parse_envelope
from millrace.errors import ArtifactError, ConfigError
from mixtures.lineage import check_lineage_resume
from mixtures.manifest import BuiltManifest, read_manifest, store_dir_of
from pipeline.store.format import SCHEMA_VERSION, STORE_KIND, StoreManifest

log = logging.getLogger(__name__)

SPARE_BLOCKS = 4  # output blocks kept beyond the prefetched batches: the one being packed, those the consumer holds
INDEX_BLOCK = 8192  # positions indexed together while iterating, for global batches up to 1/8 of it


@dataclass(frozen=True)
class Batch:
    """One rank's slice of one step; arrays are numpy, b = global_batch // world rows."""

    step: int
    phase: str
    tokens: np.ndarray  # int64 [b, L + 1]: `input_ids` and `labels` are its views
    segment_ids: np.ndarray  # int32 [b, L]; a new segment after each EOS
    positions: np.ndarray  # int32 [b, L]; restart at 0 in each segment
    cells: list[str]  # per row
    cell_ids: np.ndarray  # int32 [b], index into MixtureStream.cell_names
    # int32 [b, S]: the source (index into MixtureStream.source_names) of segment k of each row at [row, k], -1
    # past the row's last segment; None without `.src`. Per token: `token_sources()`.
    segment_sources: np.ndarray | None
    sample_positions: np.ndarray  # int64 [b] global sample positions
    sequences: np.ndarray  # int64 [b] sequence index inside the cell
    epochs: np.ndarray  # int64 [b] epoch of the cell the sequence comes from

    @property
    def input_ids(self) -> np.ndarray:
        """int64 [b, L], a view of `tokens` (not contiguous: rows are L + 1 apart)."""
        return self.tokens[:, :-1]

    @property
    def labels(self) -> np.ndarray:
        """int64 [b, L], the next token of each input: a view of `tokens` that shares its memory with
        `input_ids` (write into a copy)."""
        return self.tokens[:, 1:]

    def token_sources(self) -> np.ndarray | None:
        """int32 [b, L]: the source of each input token's document (None without sources)."""
        return None if self.segment_sources is None else token_values(self.segment_sources, self.segment_ids)


@dataclass(frozen=True)
class Gathered:
    """A batch before packing: its windows in the store's dtype and where their segments start, about a
    tenth of the packed bytes; what a data-loader worker hands to the main process (`loader.torch_dataset`),
    which packs it (`MixtureStream.pack`)."""

    step: int
    index: SampleIndex
    windows: np.ndarray  # [b, L + 1], the store's dtype
    starts: np.ndarray  # int64 flat segment starts in [b, L]
    segment_sources: np.ndarray | None  # int32, one per segment


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


Made = TypeVar("Made", bound="Batch | Gathered")  # what a step becomes: packed, or gathered to be packed elsewhere


def _check_world(manifest: BuiltManifest, rank: int, world: int) -> None:
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank {rank} / world {world}: need world >= 1 and 0 <= rank < world")
    if manifest.global_batch % world:
        raise ConfigError(f"world {world} does not divide the manifest's global_batch {manifest.global_batch}")


class MixtureStream:
    """Deterministic, resumable, elastic batches of one built mixture manifest."""

    def __init__(
        self,
        manifest_path: Path | str,
        rank: int = 0,
        world: int = 1,
        prefetch: int = 2,
        sources: bool = True,
        store: StoreAccess | None = None,
    ):
        """`sources=False` skips sources (Batch.segment_sources is None); everything else is the same.
        `store` reads the pinned store from elsewhere (`StoreAccess.url`, e.g. a copy on `s3://`) instead of
        the directory the manifest sits in, and bounds open files and the remote chunk cache
        (`loader.files.StoreAccess`)."""
        self.path = Path(manifest_path)
        self.manifest: BuiltManifest
        self.manifest, self.manifest_hash = read_manifest(self.path)
        manifest = self.manifest
        _check_world(manifest, rank, world)
        self.rank, self.world, self.prefetch = rank, world, prefetch
        self.schedule = Schedule(manifest, self.path)
        self.cell_names = self.schedule.cell_names
        self.steps = manifest.total_steps
        self.local_batch = manifest.global_batch // world
        self.seq_len = manifest.seq_len
        self._step = 0
        self._blocks = BlockPool(prefetch + SPARE_BLOCKS)
        self._block: tuple[int, SampleIndex] | None = None
        self._ahead: ReadAhead | None = None
        drawn = [name for name in self.cell_names if any(p.counts.get(name, 0) for p in manifest.phases)]
        self.index_only = manifest.store.stats_only
        self.source_names: list[str] = []
        # the local store directory whose tokenizer decodes these tokens (None: remote, or no tokenizer file)
        self.tokenizer_store: Path | None = None
        if self.index_only:
            log.info("%s: stats-only manifest, index-only mode (no tokens)", self.path)
            self.has_sources = False
            return
        self._open_store(store or StoreAccess(), sources, drawn)

    def _open_store(self, access: StoreAccess, sources: bool, drawn: list[str]) -> None:
        """Check the pinned store and open the shards of every drawn cell (their files on demand)."""
        manifest = self.manifest
        files = StoreFiles(access.url or store_dir_of(self.path), access.read, access.storage_options)
        store = self._check_store(files)
        if manifest.dtype is None:
            raise ArtifactError(f"{self.path}: a manifest with shards must name their dtype")
        self.source_names = list(store.sources)
        if store.tokenizer is not None and store.tokenizer.path and files.local is not None:
            self.tokenizer_store = files.local if (files.local / store.tokenizer.path).exists() else None
        cells: list[CellShards | None] = [None] * len(self.cell_names)
        for name in drawn:
            if not manifest.cells[name].shards:
                raise ArtifactError(f"{self.path}: cell {name!r} is drawn but pins no shards")
            cells[self.schedule.cell_index[name]] = CellShards(files, manifest.cells[name], np.dtype(manifest.dtype))
        opened = [c for c in cells if c is not None]
        self.has_sources = sources and bool(opened) and bool(self.source_names) and all(c.has_sources for c in opened)
        self._space = TokenSpace(files, cells, manifest, self.has_sources)
        log.info(
            "%s: %d cells, %d shards pinned (opened on demand); %d steps of %d x %d tokens",
            self.path,
            len(opened),
            sum(len(c.table.names) for c in opened),
            self.steps,
            manifest.global_batch,
            manifest.seq_len,
        )

    def _check_store(self, files: StoreFiles) -> StoreManifest:
        where = files.describe("store.json")
        envelope = parse_envelope(files.read_bytes("store.json"), where, STORE_KIND, (SCHEMA_VERSION,))
        pinned = f"the one pinned by {self.path}"
        return envelope.pinned(self.manifest.store.manifest_hash, pinned, "rebuild the mixture").model(StoreManifest)

    @property
    def open_files(self) -> int:
        """Shard files open now (bounded by ReadOptions.max_open_files)."""
        return 0 if self.index_only else self._space.open_files.open_files

    # ---- where samples come from -------------------------------------------------

    def _check_step(self, step: int) -> None:
        if not 0 <= step < self.steps:
            raise ConfigError(f"step {step} is outside the schedule of {self.path} (steps 0..{self.steps - 1})")

    def index(self, step: int) -> SampleIndex:
        """This rank's samples at `step`: positions, cells, draws, epochs, sequences."""
        self._check_step(step)
        start = step * self.manifest.global_batch + self.rank * self.local_batch
        return self.schedule.index(start, start + self.local_batch)

    def _sequential_index(self, step: int) -> SampleIndex:
        """`index(step)` for iteration: with small batches the per-call numpy overhead dominates, so a
        block of whole global steps inside the phase is computed at once and kept (the values are the
        same). Larger batches (where the block would mostly hold other ranks' rows) go one by one."""
        batch = self.manifest.global_batch
        if batch * 8 > INDEX_BLOCK:
            return self.index(step)
        self._check_step(step)
        phase = self.manifest.phases[self.schedule.phase_of_step(step)]
        per_block = INDEX_BLOCK // batch
        first = phase.start_step + (step - phase.start_step) // per_block * per_block
        cached = self._block
        if cached is None or cached[0] != first:
            last = min(first + per_block, phase.start_step + phase.steps)
            cached = (first, self.schedule.index(first * batch, last * batch))
            self._block = cached
        offset = (step - first) * batch + self.rank * self.local_batch
        return cached[1].rows(offset, offset + self.local_batch)

    def phase_name(self, step: int) -> str:
        self._check_step(step)
        return self.manifest.phases[self.schedule.phase_of_step(step)].name

    def realised_counts(self, step: int) -> dict[str, int]:
        """Global samples per cell over steps [0, step): the mixture actually drawn so far."""
        if not 0 <= step <= self.steps:
            raise ConfigError(f"step {step} is outside [0, {self.steps}] for {self.path}")
        return self.schedule.realised_counts(step * self.manifest.global_batch)

    # ---- tokens ------------------------------------------------------------------

    def windows(self, index: SampleIndex) -> np.ndarray:
        """The seq_len + 1 raw tokens of each sample, in the store's dtype."""
        return self._read(index, False)[0]

    def window_documents(self, cell: str, sequence: int, epoch: int) -> list[int]:
        """Store-order positions (documents in earlier shards + index in its own) of the documents that
        window `sequence` of `cell` overlaps in `epoch`, in window order."""
        if self.index_only:
            raise ArtifactError(f"{self.path}: stats-only manifest (index-only mode) has no documents")
        cell_id = self.schedule.cell_index[cell]
        before = np.concatenate([[0], np.cumsum(self._space.cell(cell_id).table.documents)])
        return [
            int(before[shard]) + document for shard, document in self._space.window_documents(cell_id, sequence, epoch)
        ]

    def _read(self, index: SampleIndex, sources: bool) -> tuple[np.ndarray, np.ndarray | None]:
        if self.index_only:
            raise ArtifactError(f"{self.path}: stats-only manifest (index-only mode) has no tokens")
        return self._space.read(index.cell_ids, index.sequences, index.epochs, sources)

    def batch(self, step: int) -> Batch:
        """This rank's batch at `step`: a pure function of (manifest, step, rank, world)."""
        return self._assemble(step, self.index(step))

    def gather(self, step: int, index: SampleIndex) -> Gathered:
        if self.index_only:
            raise ArtifactError(f"{self.path}: stats-only manifest (index-only mode) has no tokens")
        windows, starts, sources = self._space.gather(index.cell_ids, index.sequences, index.epochs, self.has_sources)
        return Gathered(step, index, windows, starts, sources)

    def pack(self, gathered: Gathered) -> Batch:
        index = gathered.index
        block = self._blocks.take(output_block_bytes(index.positions.size, self.seq_len))
        tokens, segment_ids, positions, sources = pack_segments(
            gathered.windows, gathered.starts, gathered.segment_sources, block
        )
        return Batch(
            step=gathered.step,
            phase=self.manifest.phases[index.phase].name,
            tokens=tokens,
            segment_ids=segment_ids,
            positions=positions,
            cells=[self.cell_names[c] for c in index.cell_ids.tolist()],
            cell_ids=index.cell_ids,
            segment_sources=sources,
            sample_positions=index.positions,
            sequences=index.sequences,
            epochs=index.epochs,
        )

    def _assemble(self, step: int, index: SampleIndex) -> Batch:
        return self.pack(self.gather(step, index))

    # ---- iteration and resume ------------------------------------------------------

    @property
    def step(self) -> int:
        """The next step `iterate()` yields when started without `start_step`."""
        return self._step

    @overload
    def iterate(
        self,
        start_step: int | None = None,
        end_step: int | None = None,
        stride: int = 1,
        gathered: Literal[False] = False,
    ) -> Generator[Batch]: ...

    @overload
    def iterate(
        self, start_step: int | None = None, end_step: int | None = None, stride: int = 1, *, gathered: Literal[True]
    ) -> Generator[Gathered]: ...

    def iterate(
        self, start_step: int | None = None, end_step: int | None = None, stride: int = 1, gathered: bool = False
    ) -> Generator[Batch] | Generator[Gathered]:
        """Batches start_step, start_step + stride, ... below end_step (default: from the current state to
        the end; a stride above 1 is one data-loader worker's share of the steps); with `gathered`, each as
        its unpacked `Gathered` form (for `pack` in another process).

        A background thread computes up to `prefetch` batches ahead. The state
        (`state_dict()["step"]`) advances when a batch is handed out.
        """
        start = self._step if start_step is None else start_step
        end = self.steps if end_step is None else end_step
        if not 0 <= start <= end <= self.steps:
            raise ConfigError(f"steps [{start}, {end}) are outside the schedule of {self.path} ({self.steps} steps)")
        if stride < 1:
            raise ConfigError(f"stride {stride}: must be at least 1")
        if self.index_only:
            raise ArtifactError(f"{self.path}: stats-only manifest (index-only mode) has no batches; use index(step)")
        self._step = start
        steps = range(start, end, stride)
        make = self._reading_ahead(self.gather if gathered else self._assemble, steps)
        if self.prefetch <= 0:
            for step in steps:
                batch = make(step, self._sequential_index(step))
                self._step = step + 1
                yield batch
            return
        yield from self._prefetched(make, steps)

    def _prefetched(
        self, make: Callable[[int, SampleIndex], Batch | Gathered], steps: range
    ) -> Generator[Batch | Gathered]:
        """`make` over `steps` on a background thread, up to `prefetch` batches ahead; its error is raised here,
        and closing the generator stops the thread."""
        ready: queue.Queue[Batch | Gathered | _Failure | None] = queue.Queue(maxsize=self.prefetch)  # None: done
        stop = threading.Event()

        def offer(item: Batch | Gathered | _Failure | None) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for step in steps:
                    if not offer(make(step, self._sequential_index(step))):
                        return
                offer(None)
            except BaseException as error:  # handed to the consumer, raised there
                offer(_Failure(error))

        worker = threading.Thread(target=produce, name="millrace-loader-prefetch", daemon=True)
        worker.start()
        try:
            while True:
                item = ready.get()
                if item is None:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                self._step = item.step + 1
                yield item
        finally:
            stop.set()
            worker.join(timeout=10)

    def _reading_ahead(
        self, make: Callable[[int, SampleIndex], Made], steps: range
    ) -> Callable[[int, SampleIndex], Made]:
        """`make`, with the chunks of the batches after each fetched meanwhile from a remote store
        (`loader.shards.ReadAhead`); `make` itself where there is no read-ahead. One iteration's at a time."""
        if self._ahead is not None:
            self._ahead.close()
        indices = (self.index(step) for step in steps)
        self._ahead = self._space.read_ahead((i.cell_ids, i.sequences, i.epochs) for i in indices)
        ahead = self._ahead
        if ahead is None:
            return make

        def made(step: int, index: SampleIndex) -> Made:
            try:
                return make(step, index)
            finally:
                ahead.finished()

        return made

    def state_dict(self) -> dict[str, object]:
        """Small and O(1): the next step, and what pins it to this manifest's schedule."""
        return LoaderState(
            manifest_hash=self.manifest_hash,
            step=self._step,
            global_batch=self.manifest.global_batch,
            total_steps=self.steps,
            phase_start_steps=[phase.start_step for phase in self.manifest.phases],
        ).model_dump()

    def load_step(self, step: int) -> None:
        """Continue at `step` (what a consumer that took the batches before it records)."""
        if not 0 <= step <= self.steps:
            raise ConfigError(f"step {step} is outside [0, {self.steps}] for {self.path}")
        self._step = step

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Continue at the saved step; refuses a state from another manifest, except from an ancestor
        of this revision's lineage at a step the two share (`mixtures.lineage`). O(1)."""
        loaded = LoaderState.parse(state, self.path)
        if loaded.manifest_hash != self.manifest_hash:
            check_lineage_resume(self.manifest, self.manifest_hash, loaded.manifest_hash, loaded.step, str(self.path))
        if not 0 <= loaded.step <= self.steps:
            raise ConfigError(f"loader state step {loaded.step} is past the end of {self.path} ({self.steps} steps)")
        self.load_step(loaded.step)
