"""Shard files read on demand: each chunk checked against its digest the first time it is read.

A local store is read with `pread` (one file descriptor per open file, no mapping); a store at
an fsspec URL (`s3://`, `gs://`, `file://`, ...) is read by byte ranges of whole chunks, kept in
a bounded local cache (`cache_dir`, `cache_bytes`; content-addressed by chunk digest, so a stale
entry can never be served, and an entry damaged on the local disk is checked, dropped and fetched
again rather than blamed on the object). Every remote read has a deadline (`read_timeout`) and is
retried here alone, with a log line per retry: s3fs retries each call 5 times inside a loop of 5,
over botocore's own retries, which made a server that never answers cost 900 s with no word, so
those layers are set to one attempt each. After the last attempt a one-line error names the
object and byte range. Remote chunks can also be fetched ahead of need (`ChunkFetcher`: concurrent range
reads on a thread pool, straight into the cache), which is how the loader reads the next batches' chunks
while it packs the current one (`loader.shards.ReadAhead`). Nothing here knows about tokens or documents.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from millrace.errors import ArtifactError, ConfigError
from pipeline.store.format import FileDigests

log = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_FILES = 128


@dataclass(frozen=True)
class ReadOptions:
    """How the loader reaches a store's files; validated once, when the stream opens."""

    max_open_files: int = DEFAULT_MAX_OPEN_FILES  # open shard files (descriptors when local) per process
    cache_dir: Path | None = None  # remote chunks; default: a directory under the system temp dir
    cache_bytes: int = 4 << 30  # bound on cache_dir's chunk files
    memory_chunks: int = 512  # remote chunks also kept in memory (64 KiB each: 32 MiB)
    fetch_bytes: int = 4 << 20  # bytes a remote read asks for at once (whole chunks around the one needed)
    retries: int = 4  # attempts after the first failed read (the only retries: see the module docstring)
    backoff_s: float = 0.2  # first wait; doubles each attempt
    read_timeout: float = 60.0  # seconds one remote read (connect, request, whole body) may take
    readahead_bytes: int = 128 << 20  # remote: bytes of the next batches' chunks fetched ahead of need; 0: none
    fetch_threads: int = 16  # remote: range reads in flight at once (the read-ahead's)

    def __post_init__(self) -> None:
        for field in ("max_open_files", "cache_bytes", "memory_chunks", "fetch_bytes", "fetch_threads"):
            if getattr(self, field) < 1:
                raise ConfigError(f"{field} {getattr(self, field)}: must be at least 1")
        if self.readahead_bytes < 0:
            raise ConfigError(f"readahead_bytes {self.readahead_bytes}: must be non-negative (0: no read-ahead)")
        if self.retries < 0 or self.backoff_s < 0:
            raise ConfigError(f"retries {self.retries} / backoff_s {self.backoff_s}: must be non-negative")
        if not 0 < self.read_timeout < float("inf"):
            raise ConfigError(f"read_timeout {self.read_timeout}: must be a positive number of seconds")


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

    def verify_pieces(self, offsets: np.ndarray, ends: np.ndarray) -> None:
        """Check every chunk that bytes [offsets[i], ends[i]) touch and that is not checked yet: the verified
        set is a bitmap over chunks, so once a shard's chunks are checked this is a few vector ops."""
        if not offsets.size:
            return
        low, high = int(offsets.min()), int(ends.max())
        if low < 0 or high > self.size:
            bad = int(np.flatnonzero((offsets < 0) | (ends > self.size))[0])
            raise ArtifactError(f"{self.name}: read of bytes [{offsets[bad]}, {ends[bad]}) past its {self.size} bytes")
        verified = self._verified
        if verified[low // self.chunk_bytes : (high - 1) // self.chunk_bytes + 1].all():  # the usual case, once warm
            return
        first, last = offsets // self.chunk_bytes, (ends - 1) // self.chunk_bytes
        pending = ~(verified[first] & verified[last]) | (last - first > 1)
        if not pending.any():
            return
        for lo, hi in zip(first[pending].tolist(), last[pending].tolist()):
            self._verify_chunks(lo, hi)

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


class ChunkCache:
    """Verified remote chunks: a few in memory, the rest as files under `cache_dir` up to `cache_bytes`.

    Keys are (file digest key, chunk index, chunk digest), so two stores sharing a directory, or a
    store replaced in place, never see each other's bytes."""

    def __init__(self, options: ReadOptions):
        import tempfile

        self.directory = Path(options.cache_dir or Path(tempfile.gettempdir()) / "millrace-chunks")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.limit = options.cache_bytes
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memory_chunks = options.memory_chunks
        self._lock = threading.Lock()
        entries = sorted(self.directory.glob("*.chunk"), key=lambda p: p.stat().st_mtime)
        self._disk: OrderedDict[str, int] = OrderedDict((p.stem, p.stat().st_size) for p in entries)
        self._disk_bytes = sum(self._disk.values())

    def peek(self, key: str) -> np.ndarray | None:
        """The chunk if it is in memory (no file read, no reordering)."""
        with self._lock:
            return self._memory.get(key)

    def holds(self, key: str) -> bool:
        with self._lock:
            return key in self._memory or key in self._disk

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                return self._memory[key]
            if key not in self._disk:
                return None
            self._disk.move_to_end(key)
        path = self.directory / f"{key}.chunk"
        try:
            data = np.fromfile(path, dtype=np.uint8)
        except OSError:
            return None
        digest = int(key.rsplit("-", 1)[1], 16)
        if digest and xxhash.xxh3_64_intdigest(data.data) != digest:  # damaged here, on the local disk
            log.warning(
                "%s: cached chunk differs from its digest (local disk damage); dropped, fetching it again", path
            )
            self._drop(key)
            return None
        self._remember(key, data)
        return data

    def _drop(self, key: str) -> None:
        with self._lock:
            size = self._disk.pop(key, None)
            if size is not None:
                self._disk_bytes -= size
        (self.directory / f"{key}.chunk").unlink(missing_ok=True)

    def put(self, key: str, data: np.ndarray) -> None:
        tmp = self.directory / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        data.tofile(tmp)
        os.replace(tmp, self.directory / f"{key}.chunk")
        with self._lock:
            if key not in self._disk:
                self._disk[key] = data.size
                self._disk_bytes += data.size
            while self._disk_bytes > self.limit and len(self._disk) > 1:
                old, size = self._disk.popitem(last=False)
                self._disk_bytes -= size
                (self.directory / f"{old}.chunk").unlink(missing_ok=True)
        self._remember(key, data)

    def _remember(self, key: str, data: np.ndarray) -> None:
        with self._lock:
            self._memory[key] = data
            self._memory.move_to_end(key)
            while len(self._memory) > self._memory_chunks:
                self._memory.popitem(last=False)


def describe_failure(exc: BaseException, options: ReadOptions) -> str:
    """A read failure in words: a deadline passed says so (fsspec's FSTimeoutError has no message)."""
    import asyncio

    from fsspec.exceptions import FSTimeoutError

    if isinstance(exc, (FSTimeoutError, asyncio.TimeoutError, TimeoutError)):
        return f"stalled: no complete answer within read_timeout {options.read_timeout:g}s"
    text = str(exc) or repr(exc.__cause__ or exc.__context__ or "")
    return f"{type(exc).__name__}: {text}"


def with_retries(what: str, action: Callable[[], Any], options: ReadOptions) -> Any:
    """`action()`, retried on transient errors with exponential backoff (a log line per retry); then one
    line naming `what` (the object's URL and byte range)."""
    for attempt in range(options.retries + 1):
        try:
            return action()
        except FileNotFoundError:
            raise ArtifactError(f"{what}: object not found") from None
        except Exception as exc:  # fsspec backends raise their own types (botocore, aiohttp, OSError)
            cause = describe_failure(exc, options)
            if attempt == options.retries:
                raise ArtifactError(f"{what}: read failed after {attempt + 1} attempts ({cause})") from None
            wait = options.backoff_s * 2**attempt
            log.warning(
                "%s: read failed (%s); retry %d of %d in %.2fs", what, cause, attempt + 1, options.retries, wait
            )
            time.sleep(wait)
    raise AssertionError("unreachable")


def read_range(fs: Any, path: str, start: int | None, end: int | None, options: ReadOptions) -> bytes:
    """Bytes [start, end) of one object (None: the whole of it) within `read_timeout`: an async filesystem's
    call is cancelled at the deadline (a server that accepts and never answers, a body that stops)."""
    if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
        from fsspec.asyn import sync

        return sync(fs.loop, fs._cat_file, path, start=start, end=end, timeout=options.read_timeout)
    return fs.cat_file(path, start=start, end=end)


def single_retry_layer(protocol: str, storage_options: dict, options: ReadOptions) -> dict:
    """Storage options that leave retrying to `with_retries`: for s3, botocore makes one attempt with
    `read_timeout` for connecting and reading (s3fs's own retries are set on the instance, see StoreFiles)."""
    if protocol not in ("s3", "s3a"):
        return dict(storage_options)
    config = {
        **storage_options.get("config_kwargs", {}),
        "connect_timeout": options.read_timeout,
        "read_timeout": options.read_timeout,
        "retries": {"total_max_attempts": 1},
    }
    return {**storage_options, "config_kwargs": config, "skip_instance_cache": True}


class RemoteFile(ChunkedFile):
    """One object at an fsspec URL, read by whole chunks through the shared `ChunkCache`; a chunk the
    `ChunkFetcher` is already fetching is waited for, not asked for twice."""

    def __init__(
        self,
        fs: Any,
        path: str,
        size: int,
        digests: np.ndarray | None,
        chunk_bytes: int,
        key: str,
        cache: ChunkCache,
        options: ReadOptions,
        fetcher: ChunkFetcher | None = None,
    ):
        super().__init__(f"{fs.unstrip_protocol(path)}", size, digests, chunk_bytes)
        self.fs, self.path, self.key, self.cache, self.options = fs, path, key, cache, options
        self.fetcher = fetcher

    def _key(self, index: int) -> str:
        digest = int(self.digests[index]) if self.digests is not None else 0
        return f"{self.key}-{index}-{digest:016x}"

    def cached(self, index: int) -> bool:
        """Whether chunk `index` is in the cache (memory or disk), without reading it."""
        return self.cache.holds(self._key(index))

    def _chunk(self, index: int) -> np.ndarray:
        key = self._key(index)
        data = None if self.fetcher is None else self.fetcher.staged(key)
        if data is not None:
            return data
        data = self.cache.get(key)
        if data is None and self.fetcher is not None and self.fetcher.wait(key):
            data = self.cache.get(key)
        if data is not None:
            return data
        # One request fetches the aligned group of chunks around `index` (object stores want large ranges).
        group = max(1, self.options.fetch_bytes // self.chunk_bytes)
        first = index // group * group
        fetched = self.fetch(first, min(first + group, self.chunks))
        if not first <= index < first + len(fetched):
            raise ArtifactError(f"{self.name}: chunks [{first}, {first + len(fetched)}) do not hold chunk {index}")
        return fetched[index - first]

    @property
    def chunks(self) -> int:
        return self._verified.size

    def fetch(self, first: int, last: int) -> list[np.ndarray]:
        """Chunks [first, last) in one range read (retried), each checked against its digest and cached."""
        start, end = first * self.chunk_bytes, min(self.size, last * self.chunk_bytes)
        raw = with_retries(
            f"{self.name} bytes [{start}, {end})",
            lambda: read_range(self.fs, self.path, start, end, self.options),
            self.options,
        )
        fetched = np.frombuffer(raw, dtype=np.uint8)
        if fetched.size != end - start:
            raise ArtifactError(f"{self.name}: bytes [{start}, {end}) came back as {fetched.size} bytes")
        chunks = []
        for chunk in range(first, last):  # copies: a view would keep the whole range alive while any chunk is kept
            data = fetched[(chunk - first) * self.chunk_bytes : (chunk - first + 1) * self.chunk_bytes].copy()
            self._check(chunk, data)
            self._verified[chunk] = True
            self.cache.put(self._key(chunk), data)
            chunks.append(data)
        return chunks


class ChunkFetcher:
    """Remote chunks staged in memory before the reader asks for them (the read-ahead's store).

    `stage(file, chunks)` pins each chunk for one more batch: one in the cache's memory is held as it is,
    one in neither the memory nor the files of the cache is fetched with the rest of its aligned group of
    `fetch_bytes` (runs of chunks neither cached nor in flight, concurrently on `fetch_threads` threads;
    every chunk checked and cached, those asked for kept here). `release(keys)` unpins them after the batch
    is read; a chunk with no pins left is dropped. A chunk in the cache's files only is left to the reader
    (loaded by a thread here it measured no faster, only more contended). The reader takes a staged chunk
    with `staged(key)`, waiting if it is still in flight. A fetch that fails here is dropped: the reader then
    reads the chunk itself and reports the failure as usual. Memory: the staged chunks (`staged_bytes`, which the
    read-ahead keeps under its budget) and at most `fetch_threads` ranges in flight."""

    def __init__(self, options: ReadOptions):
        self.options = options
        self._pool = ThreadPoolExecutor(options.fetch_threads, thread_name_prefix="millrace-fetch")
        self._staged: dict[str, list] = {}  # key -> [ndarray | Future | None, pins, bytes]
        self._flying: dict[str, Future] = {}  # key -> the fetch of its run
        self._lock = threading.Lock()
        self.staged_bytes = 0

    def stage(self, file: RemoteFile, chunks: np.ndarray) -> list[str]:
        """Pin `chunks` (sorted, unique chunk indices of `file`) for one more batch; returns the keys pinned."""
        keys = [file._key(chunk) for chunk in chunks.tolist()]
        missing: list[int] = []
        with self._lock:
            pinned = []
            for chunk, key in zip(chunks.tolist(), keys):
                entry = self._staged.get(key)
                if entry is None:
                    held = file.cache.peek(key)
                    if held is None and key not in self._flying and file.cache.holds(key):
                        continue  # in the cache's files: the reader loads it itself, as fast as a thread here would
                    size = min(file.chunk_bytes, file.size - chunk * file.chunk_bytes)
                    entry = self._staged[key] = [held, 0, size]
                    self.staged_bytes += size
                    if held is None and key in self._flying:
                        entry[0] = self._flying[key]
                    elif held is None:
                        missing.append(chunk)
                entry[1] += 1
                pinned.append(key)
            self._fetch_groups(file, missing)
        return pinned

    def _fetch_groups(self, file: RemoteFile, chunks: list[int]) -> None:
        """Start the runs that fetch the aligned groups of `chunks` (the lock held)."""
        if not chunks:
            return
        group = max(1, self.options.fetch_bytes // file.chunk_bytes)
        groups = np.unique(np.array(chunks) // group)
        around = (groups[:, None] * group + np.arange(group)).ravel()
        runs: list[list[int]] = []
        for chunk in around[around < file.chunks].tolist():
            key = file._key(chunk)
            if key in self._flying or (chunk not in chunks and file.cache.holds(key)):
                continue
            if runs and chunk == runs[-1][-1] + 1 and len(runs[-1]) < group:  # ranges of fetch_bytes at most
                runs[-1].append(chunk)
            else:
                runs.append([chunk])
        for run in runs:
            future = self._pool.submit(self._fetch, file, run[0], run[-1] + 1)
            for chunk in run:
                key = file._key(chunk)
                self._flying[key] = future
                if key in self._staged:
                    self._staged[key][0] = future

    def _fetch(self, file: RemoteFile, first: int, last: int) -> None:
        fetched: list[np.ndarray] = []
        try:
            fetched = file.fetch(first, last)
        finally:
            with self._lock:
                for chunk, data in itertools.zip_longest(range(first, last), fetched):
                    key = file._key(chunk)
                    self._flying.pop(key, None)
                    entry = self._staged.get(key)
                    if entry is not None and data is not None:
                        entry[0] = data

    def staged(self, key: str) -> np.ndarray | None:
        """The staged chunk `key` (waiting for its fetch or load), or None when it is not staged or failed."""
        with self._lock:
            entry = self._staged.get(key)
            value = None if entry is None else entry[0]
        if isinstance(value, Future):
            try:
                value.result()
            except BaseException as exc:  # the reader reads it itself and reports the failure
                log.debug("read-ahead of %s failed (%s); read on demand", key, exc)
                return None
            with self._lock:
                value = entry[0] if entry is not None else None
        return value if isinstance(value, np.ndarray) else None

    def wait(self, key: str) -> bool:
        """Wait for chunk `key` if a fetch of it is in flight; whether one was (and succeeded)."""
        with self._lock:
            future = self._flying.get(key)
        if future is None:
            return False
        try:
            future.result()
        except BaseException:
            return False
        return True

    def release(self, keys: list[str]) -> None:
        """One batch's pins off `keys`; chunks without pins are dropped."""
        with self._lock:
            for key in keys:
                entry = self._staged.get(key)
                if entry is None:
                    continue
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._staged[key]
                    self.staged_bytes -= entry[2]

    def __getstate__(self) -> dict:
        """A data-loader worker gets its own threads and nothing staged."""
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class OpenFiles:
    """An LRU of opened things (a shard's files), bounded by the number of files they hold."""

    def __init__(self, limit: int):
        self.limit = limit
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: Any, opener: Callable[[], tuple[Any, int]], most: int) -> Any:
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

    def __init__(self, root: str | Path, options: ReadOptions, storage_options: dict | None = None):
        self.options = options
        self.fs: Any = None
        self.fetcher: ChunkFetcher | None = None
        self.local: Path | None = None
        text = str(root)
        if "://" in text and not text.startswith("file://"):
            import fsspec

            protocol = text.split("://", 1)[0]
            self.fs, self.root = fsspec.core.url_to_fs(
                text, **single_retry_layer(protocol, storage_options or {}, options)
            )
            if hasattr(self.fs, "retries"):  # s3fs: one attempt per call (its own instance: skip_instance_cache)
                self.fs.retries = 1
            self.root = self.root.rstrip("/")
            self.cache = ChunkCache(options)
            self.fetcher = ChunkFetcher(options) if options.readahead_bytes else None
        else:
            self.local = Path(text.removeprefix("file://"))
            self.root = str(self.local)

    def describe(self, relative: str) -> str:
        if self.local is not None:
            return f"{self.root}/{relative}"
        return self.fs.unstrip_protocol(f"{self.root}/{relative}")

    def read_bytes(self, relative: str) -> bytes:
        """A small file whole (manifests, digest tables), retried when remote."""
        if self.local is not None:
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
            lambda: read_range(self.fs, f"{self.root}/{relative}", None, None, self.options),
            self.options,
        )

    def open(self, relative: str, size: int, digests: FileDigests, key: str) -> ChunkedFile:
        """The file, which must hold exactly `size` bytes (checked now when local, at the read when remote)."""
        chunk_bytes, chunk_digests = digests.chunk_bytes, digests.digests
        if self.local is not None:
            opened = LocalFile(f"{self.root}/{relative}", chunk_digests, chunk_bytes, self.options.max_open_files)
            if opened.size != size:
                opened.close()
                raise ArtifactError(
                    f"{opened.name}: {opened.size} bytes, the manifest says {size} (truncated or altered)"
                )
            return opened
        return RemoteFile(
            self.fs,
            f"{self.root}/{relative}",
            size,
            chunk_digests,
            chunk_bytes,
            key,
            self.cache,
            self.options,
            self.fetcher,
        )
