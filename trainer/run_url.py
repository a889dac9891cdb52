"""A run kept at an fsspec URL (`[run] url = "s3://bucket/runs"`), so that a job restarted on other nodes finds it.

The run's home directory (`$MILLRACE_HOME/runs/<run>`) stays the place where records are written as they
happen (metrics line by line, run.json atomically, the writer lock); the URL `<url>/<run>` holds what a
restart needs:
- checkpoints, written there directly by DCP's fsspec writer (`trainer.checkpoint`). An object store has no
  rename, so a checkpoint is committed by its `digests.json`, the last object written: a directory without
  one is a write that never finished, and is never loaded;
- the run's records (run.json, metrics.jsonl, eval.jsonl, samples.jsonl, explain.json, ...), copied there by
  rank 0 after each checkpoint and when the run ends, on a background thread (`trainer.record_uploads`: the
  next checkpoint, the run's end and a preemption wait for them); an appended record (`.jsonl`) only its new
  tail, as a part `<name>.parts/<offset>` (`read_record` joins them).
A resume on a node that has never seen the run copies the records back first, then loads the newest
committed checkpoint from the URL: the same steps as a local resume (lines after the checkpoint are cut
back as usual).
Every write there has a deadline and a bounded retry (`millrace.remote_calls`) and fails in one line naming the
object.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

from millrace import remote_calls
from millrace.artifacts import atomic_output, atomic_write_text
from millrace.errors import ArtifactError
from millrace.remote_calls import WRITE_LIMITS
from trainer.records import LOCK_FILE

log = logging.getLogger(__name__)

SKIPPED = {LOCK_FILE, "checkpoints", "tensorboard"}  # not records: the lock is per node, the rest are not copied
PUSHING = ".pushing"  # in the run directory while its records go to the URL (a dot file: never copied)


@dataclass(frozen=True)
class RemoteDir:
    """A directory at an fsspec URL; `/` names a child, `str()` is its URL (for messages and DCP)."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False)

    @cached_property
    def _resolved(self) -> tuple[AbstractFileSystem, str]:
        return remote_calls.limited_fs(self.url, self.storage_options, WRITE_LIMITS)

    @property
    def bounded_options(self) -> dict[str, Any]:
        """The storage options with the write deadline as the connect and read timeouts, for a writer that makes
        its own filesystem (DCP's): no request waits past it on a server that never answers."""
        protocol = self.url.split("://", 1)[0]
        return remote_calls.single_retry_layer(protocol, self.storage_options, WRITE_LIMITS.timeout)

    @property
    def fs(self) -> AbstractFileSystem:
        return self._resolved[0]

    @property
    def path(self) -> str:
        """The path inside the filesystem (no protocol)."""
        return self._resolved[1]

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    def __truediv__(self, child: str) -> RemoteDir:
        return RemoteDir(f"{self.url.rstrip('/')}/{child}", self.storage_options)

    def __str__(self) -> str:
        return self.url

    def files(self) -> list[str]:
        """Names of the files directly inside (none when the directory does not exist)."""
        try:
            entries = self.fs.ls(self.path, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(entry["name"].rstrip("/").rsplit("/", 1)[-1] for entry in entries if entry["type"] == "file")

    def exists(self, child: str) -> bool:
        return bool(self.fs.exists(f"{self.path}/{child}"))

    def read_bytes(self, child: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(f"{self.path}/{child}"))
        except FileNotFoundError:
            raise ArtifactError(f"{self / child}: missing") from None

    def write_bytes(self, child: str, data: bytes) -> None:
        """One object, whole (a PUT on an object store: readers see all of it or none), within its deadline."""
        remote_calls.pipe_file(self.fs, f"{self.path}/{child}", data)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path, recursive=True)
        self.fs.invalidate_cache()


def run_location(url: str, storage_options: dict[str, Any], run: str) -> RemoteDir | None:
    """`<url>/<run>`, or None when the config names no URL (the run lives in its home directory only)."""
    return RemoteDir(f"{url.rstrip('/')}/{run}", storage_options) if url else None


APPENDED = (".jsonl",)  # records only ever appended to (or cut back on a resume): their new tail goes up
PARTS = ".parts"  # `<name>.parts/<offset>`: a tail of `<name>` from byte `offset`, appended since `<name>`
_pushed: dict[tuple[str, str], int] = {}  # (run URL, record name): the bytes of it the URL holds, this invocation


def forget_pushed(remote: RemoteDir) -> None:
    """A run invocation starts: what earlier ones in this process pushed to `remote` is no guide (a resume cut
    the records back and wrote them again, or another node pushed since), so its first push sends each whole."""
    for key in [key for key in _pushed if key[0] == remote.url]:
        del _pushed[key]


def record_sizes(run_dir: Path) -> dict[str, int]:
    """The run's record files (not its lock, checkpoints, TensorBoard events or dot files) and their sizes now."""
    if not run_dir.is_dir():
        return {}
    return {
        path.name: path.stat().st_size
        for path in sorted(run_dir.iterdir())
        if path.is_file() and path.name not in SKIPPED and not path.name.startswith(".")
    }


def push_records(run_dir: Path, remote: RemoteDir, sizes: dict[str, int] | None = None) -> None:
    """Copy the run's record files to the URL, as they stood when `sizes` was taken (`record_sizes`; default:
    now). An appended record (`.jsonl`) goes up whole once a run invocation (`forget_pushed`), then only its new
    tail up to its noted size, as one more part: O(new records) per checkpoint, never O(steps) again; one cut
    back (a resume) goes up whole again, its parts deleted. The others go up whole (they are replaced
    atomically, never appended).
    While it does, `PUSHING` in the run directory says since when and where (`train status` shows a run stuck
    in a push). `trainer.record_uploads` runs this on a background thread after each checkpoint."""
    sizes = record_sizes(run_dir) if sizes is None else sizes
    if not sizes:
        return
    with marked_push(run_dir, remote):
        for name, size in sizes.items():
            path = run_dir / name
            if not path.exists():  # removed since the snapshot (the push runs later, on another thread)
                continue
            if path.suffix not in APPENDED:
                remote_calls.put_file(remote.fs, str(path), f"{remote.path}/{name}", path.stat().st_size)
                continue
            _push_appended(path, remote, size)
    log.debug("run records of %s copied to %s", run_dir, remote)


@contextlib.contextmanager
def marked_push(run_dir: Path, remote: RemoteDir) -> Iterator[None]:
    """`PUSHING` in `run_dir` for the block: since when, and to where."""
    marker = run_dir / PUSHING
    atomic_write_text(marker, json.dumps({"since": time.time(), "url": str(remote)}))
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)


def pushing(run_dir: Path) -> dict[str, Any] | None:
    """The push to the run's URL under way (its `since`, a time, and `url`), or None."""
    try:
        found = json.loads((run_dir / PUSHING).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get("since"), (int, float)) else None


def _push_appended(path: Path, remote: RemoteDir, size: int) -> None:
    key = (remote.url, path.name)
    held = _pushed.get(key)
    if held is not None and size == held:
        return
    if held is not None and size > held:
        with open(path, "rb") as handle:
            handle.seek(held)
            tail = handle.read(size - held)
        remote.fs.makedirs(f"{remote.path}/{path.name}{PARTS}", exist_ok=True)  # a folder only on a disk
        remote.write_bytes(f"{path.name}{PARTS}/{held:020d}", tail)
    else:  # the first push of this process, or a file cut back: whole, and no part after it
        with contextlib.suppress(FileNotFoundError):
            remote.fs.rm(f"{remote.path}/{path.name}{PARTS}", recursive=True)
        remote_calls.put_file(remote.fs, str(path), f"{remote.path}/{path.name}", size)
    _pushed[key] = size


def read_record(remote: RemoteDir, name: str) -> bytes:
    """A record as the URL holds it: the object, then each appended part at its offset."""
    data = remote.read_bytes(name)
    try:
        parts = sorted(remote.fs.ls(f"{remote.path}/{name}{PARTS}", detail=False, refresh=True))
    except FileNotFoundError:
        return data
    for part in parts:
        offset = int(part.rstrip("/").rsplit("/", 1)[-1])
        data = data[:offset] + bytes(remote.fs.cat_file(part))
    return data


def pull_records(remote: RemoteDir, run_dir: Path, keep_longer: bool = False) -> int:
    """Copy the run's records from the URL into `run_dir` (each file atomically); returns how many. The URL is
    the record a resume continues from. `keep_longer` (a resume, which then cuts every record back to its
    checkpoint): an appended record this node holds more of (the URL's bytes and more: a kill came after a
    checkpoint, before its tail went up) is kept, so the checkpoint's lines are not lost; the run's next push
    sends it whole."""
    names = [name for name in remote.files() if name not in SKIPPED and not name.startswith(".")]
    if not names:
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        data = read_record(remote, name)
        if keep_longer and Path(name).suffix in APPENDED and _extends(run_dir / name, data):
            log.info("%s: this node holds %s past the %d bytes at %s; kept", run_dir / name, name, len(data), remote)
            continue
        with atomic_output(run_dir / name, "wb") as handle:
            handle.write(data)
    log.info("run records %s copied from %s to %s", ", ".join(names), remote, run_dir)
    return len(names)


def _extends(path: Path, data: bytes) -> bool:
    """Whether the file at `path` begins with `data` and holds more."""
    try:
        if path.stat().st_size <= len(data):
            return False
        with open(path, "rb") as handle:
            return handle.read(len(data)) == data
    except FileNotFoundError:
        return False
