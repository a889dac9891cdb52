"""A run's work directory on a bucket (any fsspec URL): workers on different nodes share nothing else.

With `[executor] work_url` set, `<work_url>/<name>/<version>/` holds every intermediate, and
datatrove's per-task completion markers and logs live under its `logs/` (the executor's logging
folder is a `DataFolder` on the URL, so resume works as on a disk). Each task (`StagedTask`) runs
in a fresh local scratch directory of its own: it downloads the inputs its stage reads, runs the
stage's steps there (the same steps as on one disk, their paths moved to the scratch directory),
uploads every file it wrote (one object each: an object appears whole or not at all), and only
then does datatrove write its completion marker. A task killed part-way leaves no marker; its
rerun overwrites whatever it had uploaded. The scratch directory is deleted when the task ends.

The driver keeps a mirror of the work directory on its own disk (`$MILLRACE_HOME/work/...`, emptied
when a run starts): before each executor run it uploads what its own steps wrote (work state,
tokenizer, models, the held-out index), and after each run it downloads what the tasks wrote.
It never reads a task's local disk.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolder
from datatrove.pipeline.base import PipelineStep

from millrace.errors import MillraceError

log = logging.getLogger(__name__)
SCRATCH_PREFIX = "millrace-"  # a task's scratch directory: millrace-<stage>-<rank>-pid<pid>-<random>
LOGS = "logs"  # datatrove's markers, stats and task logs: read on the URL, never mirrored

# What each executor run's tasks download before they start, relative to the work root (glob patterns,
# `{rank}` is the task's rank as five digits); see `pipeline.runner` for which step reads what.
TASK_INPUTS: dict[str, tuple[str, ...]] = {
    "filter": (),
    "dedup": ("signatures", "components"),
    "tokenize": ("filtered/{rank}.jsonl.zst", "duplicates", "removed", "tokenizer.json", "models"),
    "decontaminate": ("tokens", "store", "contamination"),
    "split": ("tokenizer.json", "tokens", "store", "contamination"),
}


class RemoteWorkError(MillraceError):
    """A step of a staged task kept a path of the driver's disk that could not be moved to its scratch."""


def _version(info: dict) -> Any:
    """What changes when an object is rewritten: its ETag where the store has one, else size and time."""
    return info.get("ETag") or (info.get("size"), info.get("mtime") or info.get("LastModified"))


def _stat(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _files(root: Path) -> dict[str, Path]:
    """Every file under `root` by its relative POSIX path, datatrove's logs left out."""
    if not root.is_dir():
        return {}
    found = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    return {rel: p for rel, p in found.items() if not rel.startswith(f"{LOGS}/")}


@dataclass
class RemoteWork:
    """The work directory of one store version at `url`, mirrored at `mirror` on the driver's disk."""

    url: str
    storage_options: dict = field(default_factory=dict)
    mirror: Path = Path()
    scratch: str | None = None  # where tasks make their scratch directories; None: the system's temporary dir
    _fs: Any = field(default=None, repr=False, compare=False)
    _root: str = field(default="", repr=False, compare=False)
    _remote: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _local: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict:  # the filesystem and the driver's bookkeeping stay with the driver
        return {
            "url": self.url,
            "storage_options": self.storage_options,
            "mirror": self.mirror,
            "scratch": self.scratch,
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def fs(self) -> Any:
        if self._fs is None:
            from fsspec.core import url_to_fs

            self._fs, root = url_to_fs(self.url, **self.storage_options)
            self._root = root.rstrip("/")
        return self._fs

    @property
    def root(self) -> str:
        self.fs  # noqa: B018  # resolves the root with the filesystem
        return self._root

    def url_of(self, local: Path) -> str:
        """The full URL of a path of the mirror (for messages)."""
        return self.fs.unstrip_protocol(self.remote_path(local))

    def remote_path(self, local: Path) -> str:
        """The URL path of a path of the mirror."""
        relative = Path(local).relative_to(self.mirror).as_posix()
        return self.root if relative == "." else f"{self.root}/{relative}"

    def folder(self, local: Path) -> DataFolder:
        """The URL folder of a mirror path (an executor's logging folder: markers and logs on the bucket)."""
        return DataFolder(self.remote_path(local), fs=self.fs)

    def remove(self, local: Path) -> None:
        """Delete a mirror path's file or folder on the URL (a stage that reruns from scratch)."""
        target = self.remote_path(local)
        if self.fs.exists(target):
            self.fs.rm(target, recursive=True)
        prefix = target[len(self.root) + 1 :]
        for rel in [r for r in self._remote if not prefix or r == prefix or r.startswith(prefix + "/")]:
            self._remote.pop(rel)
            self._local.pop(rel, None)

    # the driver's mirror

    def reset_mirror(self) -> None:
        """Start the driver's mirror empty: what the URL holds is the work directory, nothing else is."""
        shutil.rmtree(self.mirror, ignore_errors=True)
        self.mirror.mkdir(parents=True)
        self._remote.clear()
        self._local.clear()

    def refresh(self) -> None:
        """Download every object of the work directory that is new or changed since the mirror last saw it."""
        self.fs.invalidate_cache()  # listings cached before the tasks wrote are stale
        listing = self.fs.find(self.root, detail=True) if self.fs.exists(self.root) else {}
        wanted = []
        for path, info in listing.items():
            rel = path[len(self.root) + 1 :]
            if rel.startswith(f"{LOGS}/") or self._remote.get(rel) == _version(info):
                continue
            wanted.append(rel)
            self._remote[rel] = _version(info)
        _download(self.fs, self.root, self.mirror, wanted)
        for rel in wanted:
            self._local[rel] = _stat(self.mirror / rel)

    def publish(self) -> None:
        """Upload every file of the mirror that the driver wrote since the last refresh or publish."""
        changed = {rel: p for rel, p in _files(self.mirror).items() if self._local.get(rel) != _stat(p)}
        _upload(self.fs, self.root, changed)
        for rel, path in changed.items():
            self._local[rel] = _stat(path)
            self._remote[rel] = _version(self.fs.info(f"{self.root}/{rel}"))


def _download(fs: Any, root: str, local: Path, relatives: list[str]) -> None:
    for rel in relatives:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
    if not relatives:
        return
    try:
        fs.get([f"{root}/{rel}" for rel in relatives], [str(local / rel) for rel in relatives])
    except FileNotFoundError:
        fs.invalidate_cache()
        gone = [rel for rel in relatives if not fs.exists(f"{root}/{rel}")]
        raise RemoteWorkError(
            f"{fs.unstrip_protocol(root)}: {len(gone)} of the {len(relatives)} objects listed were gone when read,"
            f" e.g. {gone[:3]}"
        ) from None


def _upload(fs: Any, root: str, files: dict[str, Path]) -> None:
    """One object per file; on a plain filesystem each is written beside its target and renamed into place."""
    from fsspec.implementations.local import LocalFileSystem

    if not files:
        return
    if isinstance(fs, LocalFileSystem):
        for rel, path in files.items():
            target = f"{root}/{rel}"
            fs.makedirs(fs._parent(target), exist_ok=True)
            partial = f"{target}.{uuid.uuid4().hex}.part"
            fs.put_file(str(path), partial)
            os.replace(partial, target)
        return
    fs.put([str(p) for p in files.values()], [f"{root}/{rel}" for rel in files])


class _Relocating(pickle.Pickler):
    """Pickles steps with every path under `old` replaced by the same path under `new`."""

    def __init__(self, file: Any, old: Path, new: Path):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.old, self.new = str(old), str(new)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, PurePath):
            text = str(obj)
            if text == self.old or text.startswith(self.old + os.sep):
                return type(obj), (self.new + text[len(self.old) :],)
        return NotImplemented


def relocate(steps: list[PipelineStep], old: Path, new: Path) -> list[PipelineStep]:
    """A copy of `steps` whose paths under `old` (the driver's mirror) lie under `new` (a task's scratch)."""
    import io

    buffer = io.BytesIO()
    _Relocating(buffer, old, new).dump(steps)
    if str(old).encode() in buffer.getvalue():  # a path kept as a plain string: it would still name the driver's disk
        raise RemoteWorkError(f"a step keeps {old} as a string; keep it as a Path so a staged task can move it")
    return pickle.loads(buffer.getvalue())


class StagedTask(PipelineStep):
    """One executor run's steps, run by each task in its own scratch directory against the work URL."""

    name = "🪣 staged task"
    type = "🔀 - STAGING"

    def __init__(self, label: str, steps: list[PipelineStep], work: RemoteWork):
        super().__init__()
        self.label, self.steps, self.work, self.inputs = label, steps, work, TASK_INPUTS[label]

    def _stage_inputs(self, local: Path, rank: int) -> set[str]:
        fs, root = self.work.fs, self.work.root
        fs.invalidate_cache()  # a filesystem instance inherited from the driver may hold its stale listings
        found: set[str] = set()
        for pattern in self.inputs:
            target = f"{root}/{pattern.format(rank=f'{rank:05d}')}"
            matches = fs.glob(target) if any(c in target for c in "*?[") else [target]
            for match in matches:
                found.update(fs.find(match) if fs.isdir(match) else [match] if fs.exists(match) else [])
        relatives = sorted(path[len(root) + 1 :] for path in found)
        _download(fs, root, local, relatives)
        return set(relatives)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        base = self.work.scratch or tempfile.gettempdir()
        Path(base).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(
            prefix=f"{SCRATCH_PREFIX}{self.label}-{rank:05d}-pid{os.getpid()}-", dir=base
        ) as tmp:
            local = Path(tmp) / "work"
            local.mkdir()
            self._stage_inputs(local, rank)
            staged = {rel: _stat(p) for rel, p in _files(local).items()}
            pipelined: DocumentsPipeline = None
            for step in relocate(self.steps, self.work.mirror, local):
                pipelined = step(pipelined, rank, world_size)
            for _ in pipelined or ():
                pass
            written = {rel: p for rel, p in _files(local).items() if staged.get(rel) != _stat(p)}
            _upload(self.work.fs, self.work.root, written)
            self.stat_update("uploaded", value=len(written))
