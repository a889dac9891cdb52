"""A run kept at an fsspec URL (`[run] url = "s3://bucket/runs"`), so that a job restarted on other nodes finds it.

The run's home directory (`$MILLRACE_HOME/runs/<run>`) stays the place where records are written as they
happen (metrics line by line, run.json atomically, the writer lock); the URL `<url>/<run>` holds what a
restart needs:
- checkpoints, written there directly by DCP's fsspec writer (`trainer.checkpoint`). An object store has no
  rename, so a checkpoint is committed by its `digests.json`, the last object written: a directory without
  one is a write that never finished, and is never loaded;
- the run's records (run.json, metrics.jsonl, eval.jsonl, samples.jsonl, explain.json, ...), copied there by
  rank 0 after each checkpoint and when the run ends, so they always cover at least the newest checkpoint.
A resume on a node that has never seen the run copies the records back first, then loads the newest
committed checkpoint from the URL: the same steps as a local resume (lines after the checkpoint are cut
back as usual).
Every write there has a deadline and a bounded retry (`millrace.remote_calls`) and fails in one line naming the
object.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from millrace import remote_calls
from millrace.artifacts import atomic_output
from millrace.errors import ArtifactError
from millrace.remote_calls import WRITE_LIMITS
from trainer.records import LOCK_FILE

log = logging.getLogger(__name__)

SKIPPED = {LOCK_FILE, "checkpoints", "tensorboard"}  # not records: the lock is per node, the rest are not copied


@dataclass(frozen=True)
class RemoteDir:
    """A directory at an fsspec URL; `/` names a child, `str()` is its URL (for messages and DCP)."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False)

    @cached_property
    def _resolved(self) -> tuple[Any, str]:
        return remote_calls.limited_fs(self.url, self.storage_options, WRITE_LIMITS)

    @property
    def bounded_options(self) -> dict[str, Any]:
        """The storage options with the write deadline as the connect and read timeouts, for a writer that makes
        its own filesystem (DCP's): no request waits past it on a server that never answers."""
        protocol = self.url.split("://", 1)[0]
        return remote_calls.single_retry_layer(protocol, self.storage_options, WRITE_LIMITS.timeout)

    @property
    def fs(self) -> Any:
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


def push_records(run_dir: Path, remote: RemoteDir) -> None:
    """Copy the run's record files (not its lock, checkpoints or TensorBoard events) to the URL."""
    if not run_dir.is_dir():
        return
    for path in sorted(run_dir.iterdir()):
        if path.is_file() and path.name not in SKIPPED and not path.name.startswith("."):
            remote_calls.put_file(remote.fs, str(path), f"{remote.path}/{path.name}", path.stat().st_size)
    log.debug("run records of %s copied to %s", run_dir, remote)


def pull_records(remote: RemoteDir, run_dir: Path) -> int:
    """Copy the run's records from the URL into `run_dir` (each file atomically); returns how many. The URL is
    the record a resume continues from: it covers the newest checkpoint."""
    names = [name for name in remote.files() if name not in SKIPPED and not name.startswith(".")]
    if not names:
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        with atomic_output(run_dir / name, "wb") as handle:
            handle.write(remote.read_bytes(name))
    log.info("run records %s copied from %s to %s", ", ".join(names), remote, run_dir)
    return len(names)
