"""Shard files read on demand: each chunk checked against its digest the first time it is read.

A local store is read with `pread` (one file descriptor per open file, no mapping); a store at
an fsspec URL (`s3://`, `gs://`, `file://`, ...) is read by byte ranges of whole chunks, kept in
a bounded local cache (`cache_dir`, `cache_bytes`: one sparse file per remote file, holding the chunks
fetched so far at their own offsets, so that a second pass reads local disk as a local store does; keyed by
the file's chunk digests, so a stale entry can never be served, and a chunk damaged on the local disk is
checked, dropped and fetched again rather than blamed on the object). Every remote read has a deadline
(`read_timeout`) and is retried in one layer (`millrace.remote_calls`, the one writes use too), with a log line
per retry; after the last attempt a one-line error names the object and byte range. Remote chunks can also
be fetched ahead of need (`ChunkFetcher`: concurrent range reads on a thread pool, straight into the cache),
which is how the loader reads the next batches' chunks while it packs the current one
(`loader.shards.ReadAhead`). Nothing here knows about tokens or documents.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import resource
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, TypeVarTuple

import numpy as np

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem
import xxhash

from millrace import remote_calls
from millrace.errors import ArtifactError, ConfigError
from millrace.urls import local_path
from pipeline.store.format import FileDigests

log = logging.getLogger(__name__)
T = TypeVar("T")
Args = TypeVarTuple("Args")

DEFAULT_MAX_OPEN_FILES = 128


@dataclass(frozen=True)
class ReadOptions:
    """How the loader reaches a store's files; validated once, when the stream opens."""

    max_open_files: int = DEFAULT_MAX_OPEN_FILES  # open shard files (descriptors when local) per process
    cache_dir: Path | None = None  # remote chunks; default: a directory under the system temp dir
    cache_bytes: int = 4 << 30  # bound on cache_dir's chunk files
    fetch_bytes: int = 4 << 20  # bytes a remote read asks for at once (whole chunks around the one needed)
    retries: int = 4  # attempts after the first failed read (the only retries: see the module docstring)
    backoff_s: float = 0.2  # first wait; doubles each attempt
    read_timeout: float = 60.0  # seconds one remote read (connect, request, whole body) may take
    readahead_bytes: int = 128 << 20  # remote: bytes of the next batches' chunks fetched (to disk) ahead; 0: none
    fetch_threads: int = 16  # remote: range reads in flight at once (the read-ahead's)

    def __post_init__(self) -> None:
        for name in ("max_open_files", "cache_bytes", "fetch_bytes", "fetch_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} {getattr(self, name)}: must be at least 1")
        if self.readahead_bytes < 0:
            raise ConfigError(f"readahead_bytes {self.readahead_bytes}: must be non-negative (0: no read-ahead)")
        self.limits  # noqa: B018  checks read_timeout, retries and backoff_s

    @property
    def limits(self) -> remote_calls.CallLimits:
        """The deadline and retries of one remote read."""
        return remote_calls.CallLimits(self.read_timeout, self.retries, self.backoff_s, "read_timeout")


@dataclass(frozen=True)
class StoreAccess:
    """Where the loader reads a manifest's pinned store from, and how: `url` any fsspec URL (e.g. a copy on
    `s3://`; None: the directory the manifest sits in), `storage_options` fsspec's for that URL, `read` the
    bounds on open files, the remote chunk cache and remote reads."""

    url: str | None = None
    storage_options: Mapping[str, object] | None = None
    read: ReadOptions = field(default_factory=ReadOptions)


def open_file_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _limit_error(path: str, exc: OSError, max_open: int) -> ArtifactError:
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return ArtifactError(
            f"{path}: out of file descriptors (ulimit -n is {open_file_limit()}; the loader keeps at most "
            f"max_open_files={max_open} shard files open): raise `ulimit -n` or lower max_open_files"
        )
    if exc.errno == errno.ENOMEM:
        return ArtifactError(
            f"{path}: cannot map the file (vm.max_map_count or memory exhausted; the loader keeps at most "
            f"max_open_files={max_open} maps): lower max_open_files"
        )
    return ArtifactError(f"{path}: cannot open ({exc.strerror or exc})")


class ChunkedFile:
    """Bytes of one file in chunks of `chunk_bytes`; a chunk is read whole and checked against its digest
    the first time any byte of it is read, and after that only the bytes asked for are read."""

    def __init__(self, name: str, size: int, digests: np.ndarray | None, chunk_bytes: int):
        self.name, self.size, self.chunk_bytes = name, size, chunk_bytes
        self.digests = digests
        chunks = -(-size // chunk_bytes)
        if digests is not None and digests.size != chunks:
            raise ArtifactError(f"{name}: {size} bytes make {chunks} chunks, the digest table has {digests.size}")
        self._checked = bytearray(chunks)  # 1 once chunk i is verified: read per piece from Python
        self._verified = np.frombuffer(self._checked, dtype=bool)  # the same bytes, for vector checks

    def _chunk(self, index: int) -> np.ndarray:
        """The whole chunk `index` (uint8)."""
        raise NotImplementedError

    def _span(self, index: int, lo: int, hi: int) -> np.ndarray:
        """Bytes [lo, hi) of chunk `index`, which is already verified."""
        return self._chunk(index)[lo:hi]

    def _check(self, index: int, data: np.ndarray) -> None:
        if self.digests is not None and xxhash.xxh3_64_intdigest(data.data) != int(self.digests[index]):
            start = index * self.chunk_bytes
            raise ArtifactError(
                f"{self.name}: bytes [{start}, {start + data.size}) differ from the manifest's digest "
                f"(chunk {index}); the shard is damaged, run `millrace store verify`"
            )

    def _bytes(self, index: int, lo: int, hi: int) -> np.ndarray:
        if self._verified[index]:
            return self._span(index, lo, hi)
        chunk = self._chunk(index)
        self._check(index, chunk)
        self._verified[index] = True
        return chunk[lo:hi]

    def read(self, offset: int, size: int) -> np.ndarray:
        """uint8 bytes [offset, offset + size): a fresh array."""
        out = np.empty(size, dtype=np.uint8)
        self.read_into(offset, out)
        return out

    def read_into(self, offset: int, out: np.ndarray) -> None:
        """Bytes [offset, offset + out.size) into `out` (uint8, contiguous; a view of the caller's array)."""
        size = out.size
        if offset < 0 or offset + size > self.size:
            raise ArtifactError(f"{self.name}: read of bytes [{offset}, {offset + size}) past its {self.size} bytes")
        filled, step = 0, self.chunk_bytes
        while filled < size:
            index, inside = divmod(offset + filled, step)
            take = min(size - filled, step - inside)
            out[filled : filled + take] = self._bytes(index, inside, inside + take)
            filled += take

    def read_pieces_into(self, offsets: list[int], sizes: list[int], out: np.ndarray, at: list[int]) -> None:
        """Bytes [offsets[i], offsets[i] + sizes[i]) into out[at[i]:] for each i (sizes positive; `out`
        contiguous uint8): the pieces of one batch in one file, written where the batch wants them."""
        for offset, size, where in zip(offsets, sizes, at):
            self.read_into(offset, out[where : where + size])

    def _verify_chunks(self, first: int, last: int) -> None:
        """Check chunks first .. last that are not checked yet."""
        checked = self._checked
        for index in range(first, last + 1):
            if not checked[index]:
                self._check(index, self._chunk(index))
                checked[index] = 1

    def close(self) -> None:
        """Nothing to release by default (a remote object holds no descriptor)."""


class LocalFile(ChunkedFile):
    """A local file read with `pread`: one descriptor, no mapping. (A memory map would do too, but with the
    page cache's large folios each touched spot maps up to 2 MB into the process: measured, a first batch
    on a 100M-document store grew resident memory by 600 MB; `pread` keeps it to the bytes read.)"""

    def __init__(self, path: str, digests: np.ndarray | None, chunk_bytes: int, max_open: int):
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise ArtifactError(f"{path}: missing shard file") from None
        except OSError as exc:
            raise _limit_error(str(path), exc, max_open) from None
        super().__init__(path, os.fstat(self._fd).st_size, digests, chunk_bytes)

    def _pread(self, start: int, end: int) -> np.ndarray:
        if self._fd < 0:
            raise ArtifactError(f"{self.name}: read after close")
        raw = os.pread(self._fd, end - start, start)
        if len(raw) != end - start:
            raise ArtifactError(f"{self.name}: bytes [{start}, {end}) came back as {len(raw)} bytes (truncated)")
        return np.frombuffer(raw, dtype=np.uint8)

    def _chunk(self, index: int) -> np.ndarray:
        start = index * self.chunk_bytes
        return self._pread(start, min(self.size, start + self.chunk_bytes))

    def _span(self, index: int, lo: int, hi: int) -> np.ndarray:
        start = index * self.chunk_bytes
        return self._pread(start + lo, start + hi)

    def read_pieces_into(self, offsets: list[int], sizes: list[int], out: np.ndarray, at: list[int]) -> None:
        """As `ChunkedFile.read_pieces_into`: for each piece, its chunks checked first when not yet (a byte per
        chunk read from Python: for the few dozen pieces of a batch, cheaper than a dozen vector operations),
        then one `preadv` straight into `out` (no intermediate bytes, no join)."""
        if self._fd < 0:
            raise ArtifactError(f"{self.name}: read after close")
        fd, step, checked, size_of_file, view = self._fd, self.chunk_bytes, self._checked, self.size, out.data
        for offset, size, where in zip(offsets, sizes, at):
            end = offset + size
            if offset < 0 or end > size_of_file:
                raise ArtifactError(f"{self.name}: read of bytes [{offset}, {end}) past its {size_of_file} bytes")
            first, last = offset // step, (end - 1) // step
            if not (checked[first] and checked[last]) or last - first > 1:
                self._verify_chunks(first, last)
            got = os.preadv(fd, (view[where : where + size],), offset)
            if got != size:
                raise ArtifactError(f"{self.name}: bytes [{offset}, {end}) came back as {got} bytes (truncated)")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class CachedFile:
    """One remote file's verified chunks on local disk: a sparse file `<key>.data` holding each fetched chunk at
    its own offset, and `<key>.have` (a byte per chunk) naming those written. A chunk found there by another
    process is checked against its digest when first read (`verified` holds what this one has checked). The
    descriptor closes when the last holder lets go (a fetch in flight may outlive the eviction of its file)."""

    def __init__(self, directory: Path, key: str, size: int, chunks: int, generation: int):
        self.key, self.size, self.generation = key, size, generation
        self.data_path, self.have_path = directory / f"{key}.data", directory / f"{key}.have"
        self.fd = os.open(self.data_path, os.O_RDWR | os.O_CREAT, 0o644)
        have = bytearray(chunks)
        if os.fstat(self.fd).st_size == size:
            with contextlib.suppress(OSError):
                stored = self.have_path.read_bytes()
                if len(stored) == chunks:
                    have = bytearray(stored)
        else:
            os.ftruncate(self.fd, size)
        self.have = have
        self.verified = bytearray(chunks)
        self._lock = threading.Lock()

    def write(self, start: int, raw: bytes, first: int, last: int) -> None:
        """Bytes of chunks [first, last), checked, at `start`; then marked as held, here and in `have`."""
        written = os.pwrite(self.fd, raw, start)
        if written != len(raw):
            raise OSError(errno.ENOSPC, f"{self.data_path}: {written} of {len(raw)} bytes written")
        with self._lock:
            self.have[first:last] = b"\x01" * (last - first)
            self.verified[first:last] = b"\x01" * (last - first)
            tmp = self.have_path.with_name(f".{self.key}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(self.have)
            os.replace(tmp, self.have_path)

    def pread(self, start: int, end: int) -> np.ndarray:
        raw = os.pread(self.fd, end - start, start)
        if len(raw) != end - start:
            raise ArtifactError(f"{self.data_path}: bytes [{start}, {end}) came back as {len(raw)} bytes (truncated)")
        return np.frombuffer(raw, dtype=np.uint8)

    def disk_bytes(self) -> int:
        return os.fstat(self.fd).st_blocks * 512

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


class ChunkCache:
    """Verified remote chunks on local disk, one sparse file per remote file (`CachedFile`), up to `cache_bytes`
    of disk: when over, the least recently written files are deleted whole. A second pass over the same chunks
    reads local disk (`pread` straight into the batch, as from a local store); the page cache is the memory tier.

    Keys name a file's content (its shard's digest table's hash and its kind), so two stores sharing a directory,
    or a store replaced in place, never see each other's bytes."""

    def __init__(self, options: ReadOptions):

        self.directory = Path(options.cache_dir or Path(tempfile.gettempdir()) / "millrace-chunks")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.limit = options.cache_bytes
        self._lock = threading.Lock()
        entries = sorted(self.directory.glob("*.data"), key=lambda p: p.stat().st_mtime)
        self._sizes: OrderedDict[str, int] = OrderedDict((p.stem, p.stat().st_blocks * 512) for p in entries)
        self._bytes = sum(self._sizes.values())
        self._generation: dict[str, int] = {}  # bumped when a key's files are evicted

    def open(self, key: str, size: int, chunks: int) -> CachedFile:
        with self._lock:
            generation = self._generation.get(key, 0)
        cached = CachedFile(self.directory, key, size, chunks, generation)
        self.wrote(cached)
        return cached

    def evicted(self, cached: CachedFile) -> bool:
        with self._lock:
            return self._generation.get(cached.key, 0) != cached.generation

    def wrote(self, cached: CachedFile) -> None:
        """Count `cached`'s disk use, most recent; delete the least recent other files while over the limit."""
        size = cached.disk_bytes()
        with self._lock:
            self._bytes += size - self._sizes.pop(cached.key, 0)
            self._sizes[cached.key] = size
            while self._bytes > self.limit and len(self._sizes) > 1:
                old, held = self._sizes.popitem(last=False)
                self._bytes -= held
                self._generation[old] = self._generation.get(old, 0) + 1
                for suffix in (".data", ".have"):
                    (self.directory / f"{old}{suffix}").unlink(missing_ok=True)


def with_retries(what: str, action: Callable[[], T], options: ReadOptions) -> T:
    """`action()` under the read limits, retried (`millrace.remote_calls`); then one line naming `what`."""
    return remote_calls.with_retries(what, action, options.limits)


def read_range(fs: AbstractFileSystem, path: str, start: int | None, end: int | None, options: ReadOptions) -> bytes:
    """Bytes [start, end) of one object (None: the whole of it) within `read_timeout`."""
    data: bytes = remote_calls.within_deadline(
        fs, "cat_file", path, start=start, end=end, timeout=options.read_timeout
    )
    return data


@dataclass(frozen=True)
class RemoteReach:
    """What every remote file of one store shares: its filesystem, the local chunk cache, the read limits and
    the read-ahead's fetcher (None: no read-ahead)."""

    fs: AbstractFileSystem
    cache: ChunkCache
    options: ReadOptions
    fetcher: ChunkFetcher | None = None


class RemoteFile(ChunkedFile):
    """One object at an fsspec URL, its chunks fetched in aligned groups of `fetch_bytes` into the shared
    `ChunkCache` on local disk and read from there; a chunk the `ChunkFetcher` is already fetching is waited
    for, not asked for twice."""

    def __init__(self, reach: RemoteReach, path: str, size: int, digests: FileDigests, key: str):
        super().__init__(f"{reach.fs.unstrip_protocol(path)}", size, digests.digests, digests.chunk_bytes)
        self.fs, self.path, self.cache, self.options = reach.fs, path, reach.cache, reach.options
        self.key = key  # the shard's digest table's hash and the file's kind: its content's name
        self.fetcher = reach.fetcher
        self._local: CachedFile | None = None
        self._opening = threading.Lock()

    def _key(self, index: int) -> str:
        return f"{self.key}-{index}"

    @property
    def chunks(self) -> int:
        return self._verified.size

    def local(self) -> CachedFile:
        """This file's chunks on local disk (opened again, empty, when the cache has evicted them)."""
        with self._opening:
            local = self._local
            if local is None or self.cache.evicted(local):
                local = self._local = self.cache.open(self.key, self.size, self.chunks)
                self._checked, self._verified = local.verified, np.frombuffer(local.verified, dtype=bool)
            return local

    def ensure(self, first: int, last: int) -> CachedFile:
        """The local file holding chunks first..last, checked: those held already are checked once, the others
        fetched (waiting for the read-ahead's fetch where one is in flight). The file returned holds them even
        if the cache evicts it meanwhile (its descriptor stays open while held)."""
        for _ in range(3):
            local = self.local()
            done = np.frombuffer(local.verified, dtype=bool)[first : last + 1]
            if done.all():
                return local
            missing = [c for c in range(first, last + 1) if not local.verified[c] and not self._check_held(local, c)]
            if self.fetcher is not None:
                missing = [c for c in missing if not (self.fetcher.wait(self._key(c)) and local.verified[c])]
                self.fetcher.on_demand += bool(missing)
            group = max(1, self.options.fetch_bytes // self.chunk_bytes)
            for start in sorted({c // group * group for c in missing}):
                self.fetch(start, min(start + group, self.chunks), local)
            if np.frombuffer(local.verified, dtype=bool)[first : last + 1].all():
                return local
        raise ArtifactError(
            f"{self.name}: chunks [{first}, {last}] evicted from the local cache as fast as they were fetched; "
            f"raise cache_bytes ({self.cache.limit})"
        )

    def _check_held(self, local: CachedFile, index: int) -> bool:
        """Whether chunk `index`, held on local disk by an earlier process, is good (then marked verified)."""
        if not local.have[index]:
            return False
        start = index * self.chunk_bytes
        data = local.pread(start, min(self.size, start + self.chunk_bytes))
        if self.digests is not None and xxhash.xxh3_64_intdigest(data.data) != int(self.digests[index]):
            log.warning(
                "%s: cached chunk %d differs from its digest (local disk damage); fetching it again",
                local.data_path,
                index,
            )
            local.have[index] = 0
            return False
        local.verified[index] = 1
        return True

    def fetch(self, first: int, last: int, local: CachedFile | None = None) -> None:
        """Chunks [first, last) in one range read (retried), each checked against its digest, written in one
        write to `local` (by default the current local file)."""
        start, end = first * self.chunk_bytes, min(self.size, last * self.chunk_bytes)
        raw = with_retries(
            f"{self.name} bytes [{start}, {end})",
            lambda: read_range(self.fs, self.path, start, end, self.options),
            self.options,
        )
        fetched = np.frombuffer(raw, dtype=np.uint8)
        if fetched.size != end - start:
            raise ArtifactError(f"{self.name}: bytes [{start}, {end}) came back as {fetched.size} bytes")
        for chunk in range(first, last):
            self._check(chunk, fetched[(chunk - first) * self.chunk_bytes : (chunk - first + 1) * self.chunk_bytes])
        local = local or self.local()
        local.write(start, raw, first, last)
        self.cache.wrote(local)

    def _chunk(self, index: int) -> np.ndarray:
        start = index * self.chunk_bytes
        return self.ensure(index, index).pread(start, min(self.size, start + self.chunk_bytes))

    def _verify_chunks(self, first: int, last: int) -> None:
        self.ensure(first, last)

    def read_into(self, offset: int, out: np.ndarray) -> None:
        size = out.size
        if offset < 0 or offset + size > self.size:
            raise ArtifactError(f"{self.name}: read of bytes [{offset}, {offset + size}) past its {self.size} bytes")
        if size:
            self._read_local(offset, size, out, 0)

    def read_pieces_into(self, offsets: list[int], sizes: list[int], out: np.ndarray, at: list[int]) -> None:
        """As a local file's: each piece's chunks made local and checked first where they are not yet (a byte
        per chunk read from Python, as `LocalFile` does), then one `preadv` from the local cache into `out`."""
        local = self.local()
        step, view = self.chunk_bytes, out.data
        for offset, size, where in zip(offsets, sizes, at):
            end = offset + size
            if offset < 0 or end > self.size:
                raise ArtifactError(f"{self.name}: read of bytes [{offset}, {end}) past its {self.size} bytes")
            first, last = offset // step, (end - 1) // step
            holder = local
            if not (local.verified[first] and local.verified[last]) or last - first > 1:
                holder = self.ensure(first, last)
            got = os.preadv(holder.fd, (view[where : where + size],), offset)
            if got != size:
                raise ArtifactError(f"{holder.data_path}: bytes [{offset}, {end}) came back as {got} bytes")

    def _read_local(self, offset: int, size: int, out: np.ndarray, where: int) -> None:
        local = self.ensure(offset // self.chunk_bytes, (offset + size - 1) // self.chunk_bytes)
        got = os.preadv(local.fd, (out.data[where : where + size],), offset)
        if got != size:
            raise ArtifactError(f"{local.data_path}: bytes [{offset}, {offset + size}) came back as {got} bytes")

    def close(self) -> None:
        """Let go of the local file (its descriptor closes once no fetch in flight holds it either)."""
        with self._opening:
            self._local = None


class DaemonPool:
    """Threads that run submitted calls, as a ThreadPoolExecutor does, but daemonic: a process ending on an
    error does not wait for them. A read-ahead fetch in flight when the trainer fails on a stalled read keeps
    retrying for minutes (retries x read_timeout), and the executor's threads are joined at interpreter exit:
    the trainer printed its one-line error and ended 10 minutes later. What a fetch writes is checked against
    the chunk digests before anyone reads it, so abandoning one half-way damages nothing."""

    def __init__(self, threads: int, name: str):
        # each call as (cancel it, run it into its future); None: a thread's end
        self._calls: queue.SimpleQueue[tuple[Callable[[], bool], Callable[[], None]] | None] = queue.SimpleQueue()
        self._threads = threads
        for index in range(threads):
            threading.Thread(target=self._work, name=f"{name}-{index}", daemon=True).start()

    def submit(self, call: Callable[[*Args], T], *args: *Args) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(call(*args))
            except BaseException as exc:  # handed to whoever waits for it
                future.set_exception(exc)

        self._calls.put((future.cancel, run))
        return future

    def _work(self) -> None:
        while (item := self._calls.get()) is not None:
            item[1]()

    def shutdown(self) -> None:
        """Calls not started are cancelled; the threads end after the one they run."""
        with contextlib.suppress(queue.Empty):
            while (item := self._calls.get_nowait()) is not None:
                item[0]()
        for _ in range(self._threads):
            self._calls.put(None)


class ChunkFetcher:
    """Remote chunks fetched into the local cache before the reader asks for them (the read-ahead's).

    `stage(file, chunks)` pins each chunk for one more batch, and starts fetching those the cache does not
    hold, with the rest of their aligned group of `fetch_bytes` (runs of chunks neither held nor in flight,
    concurrently on `fetch_threads` threads; every chunk checked and written to the cache's file).
    `release(keys)` unpins them once the batch is read. `staged_bytes` (the pinned chunks' bytes, which the
    read-ahead keeps under its budget) says how far ahead it is; the chunks are on local disk, not in memory:
    what it holds in memory is at most `fetch_threads` ranges in flight. The reader waits for a chunk in flight
    (`wait`). A fetch that fails here is dropped: the reader then fetches the chunk itself and reports the
    failure as usual."""

    def __init__(self, options: ReadOptions):
        self.options = options
        self._pool = DaemonPool(options.fetch_threads, "millrace-fetch")
        self._pins: dict[str, list[int]] = {}  # key -> [pins, bytes]
        self._flying: dict[str, Future[None]] = {}  # key -> the fetch of its run
        self._lock = threading.Lock()
        self.staged_bytes = 0
        self.started = 0  # chunks it has started fetching, in all
        self.on_demand = 0  # fetches the reader made itself (a chunk neither held nor in flight), in all

    def stage(self, file: RemoteFile, chunks: np.ndarray) -> list[str]:
        """Pin `chunks` (sorted, unique chunk indices of `file`) for one more batch; returns the keys pinned."""
        local = file.local()
        keys = [file._key(chunk) for chunk in chunks.tolist()]
        missing: list[int] = []
        with self._lock:
            for chunk, key in zip(chunks.tolist(), keys):
                entry = self._pins.get(key)
                if entry is None:
                    size = min(file.chunk_bytes, file.size - chunk * file.chunk_bytes)
                    entry = self._pins[key] = [0, size]
                    self.staged_bytes += size
                entry[0] += 1
                if not local.have[chunk] and key not in self._flying:
                    missing.append(chunk)
            self._fetch_groups(file, local, missing)
        return keys

    def _fetch_groups(self, file: RemoteFile, local: CachedFile, chunks: list[int]) -> None:
        """Start the runs that fetch the aligned groups of `chunks` (the lock held)."""
        if not chunks:
            return
        group = max(1, self.options.fetch_bytes // file.chunk_bytes)
        groups = np.unique(np.array(chunks) // group)
        around = (groups[:, None] * group + np.arange(group)).ravel()
        runs: list[list[int]] = []
        for chunk in around[around < file.chunks].tolist():
            if file._key(chunk) in self._flying or local.have[chunk]:
                continue
            if runs and chunk == runs[-1][-1] + 1 and len(runs[-1]) < group:  # ranges of fetch_bytes at most
                runs[-1].append(chunk)
            else:
                runs.append([chunk])
        for run in runs:
            future = self._pool.submit(self._fetch, file, run[0], run[-1] + 1)
            self.started += len(run)
            for chunk in run:
                self._flying[file._key(chunk)] = future

    def _fetch(self, file: RemoteFile, first: int, last: int) -> None:
        try:
            file.fetch(first, last)
        finally:
            with self._lock:
                for chunk in range(first, last):
                    self._flying.pop(file._key(chunk), None)

    def wait(self, key: str) -> bool:
        """Wait for chunk `key` if a fetch of it is in flight; whether one was (and succeeded)."""
        with self._lock:
            future = self._flying.get(key)
        if future is None:
            return False
        try:
            future.result()
        except BaseException as exc:  # the reader fetches it itself and reports the failure
            log.debug("read-ahead of %s failed (%s); read on demand", key, exc)
            return False
        return True

    def release(self, keys: list[str]) -> None:
        """One batch's pins off `keys`."""
        with self._lock:
            for key in keys:
                entry = self._pins.get(key)
                if entry is None:
                    continue
                entry[0] -= 1
                if entry[0] <= 0:
                    del self._pins[key]
                    self.staged_bytes -= entry[1]

    def __getstate__(self) -> dict[str, ReadOptions]:
        """A data-loader worker gets its own threads and nothing staged."""
        return {"options": self.options}

    def __setstate__(self, state: dict[str, ReadOptions]) -> None:
        ChunkFetcher.__init__(self, state["options"])

    def close(self) -> None:
        self._pool.shutdown()


class Closable(Protocol):
    def close(self) -> None: ...


Key = TypeVar("Key")
Entry = TypeVar("Entry", bound=Closable)


class OpenFiles(Generic[Key, Entry]):
    """An LRU of opened things (a shard's files), bounded by the number of files they hold."""

    def __init__(self, limit: int):
        self.limit = limit
        self._entries: OrderedDict[Key, tuple[Entry, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: Key, opener: Callable[[], tuple[Entry, int]], most: int) -> Entry:
        """The entry for `key`, opened by `opener() -> (entry, files it holds)` when absent; room for `most`
        files is made first, so that the limit holds while it opens too."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found[0]
            self._evict(self.limit - most)
        entry, files = opener()
        with self._lock:
            if key in self._entries:  # another thread opened it meanwhile
                entry.close()
                self._entries.move_to_end(key)
                return self._entries[key][0]
            self._entries[key] = (entry, files)
            self._held += files
            self._evict(self.limit)
        return entry

    def _evict(self, keep: int) -> None:
        while self._held > keep and self._entries:
            _, (old, count) = self._entries.popitem(last=False)
            self._held -= count
            old.close()

    @property
    def open_files(self) -> int:
        return self._held

    def clear(self) -> None:
        with self._lock:
            for entry, _ in self._entries.values():
                entry.close()
            self._entries.clear()
            self._held = 0


class StoreFiles:
    """A store version's files by path relative to its root: a local directory or any fsspec URL.

    `file://` and plain paths are read with `pread`; other protocols go through `RemoteFile`."""

    def __init__(self, root: str | Path, options: ReadOptions, storage_options: Mapping[str, object] | None = None):
        self.options = options
        self.fs: AbstractFileSystem | None = None
        self.fetcher: ChunkFetcher | None = None
        text = str(root)
        self.local: Path | None = local_path(text)
        if self.local is None:
            import fsspec  # lazy: heavy (fsspec): only where a path is a URL

            protocol = text.split("://", 1)[0]
            self.fs, self.root = fsspec.core.url_to_fs(
                text, **remote_calls.single_retry_layer(protocol, storage_options or {}, options.read_timeout)
            )
            remote_calls.one_attempt(self.fs)
            self.root = self.root.rstrip("/")
            self.fetcher = ChunkFetcher(options) if options.readahead_bytes else None
            self.reach = RemoteReach(self.fs, ChunkCache(options), options, self.fetcher)
        else:
            self.root = str(self.local)

    def describe(self, relative: str) -> str:
        if self.fs is None:  # local
            return f"{self.root}/{relative}"
        url: str = self.fs.unstrip_protocol(f"{self.root}/{relative}")
        return url

    def read_bytes(self, relative: str) -> bytes:
        """A small file whole (manifests, digest tables), retried when remote."""
        fs = self.fs
        if fs is None:  # local
            path = f"{self.root}/{relative}"
            try:
                with open(path, "rb") as handle:
                    return handle.read()
            except FileNotFoundError:
                raise ArtifactError(f"{path}: missing") from None
            except OSError as exc:
                raise _limit_error(path, exc, self.options.max_open_files) from None
        return with_retries(
            self.describe(relative),
            lambda: read_range(fs, f"{self.root}/{relative}", None, None, self.options),
            self.options,
        )

    def open(self, relative: str, size: int, digests: FileDigests, key: str) -> ChunkedFile:
        """The file, which must hold exactly `size` bytes (checked now when local, at the read when remote)."""
        chunk_bytes, chunk_digests = digests.chunk_bytes, digests.digests
        if self.fs is None:  # local
            opened = LocalFile(f"{self.root}/{relative}", chunk_digests, chunk_bytes, self.options.max_open_files)
            if opened.size != size:
                opened.close()
                raise ArtifactError(
                    f"{opened.name}: {opened.size} bytes, the manifest says {size} (truncated or altered)"
                )
            return opened
        return RemoteFile(self.reach, f"{self.root}/{relative}", size, digests, key)
