"""A run's work directory on a bucket (any fsspec URL): workers on different nodes share nothing else.

With `[executor] work_url` set, `<work_url>/<name>/<version>/` holds every intermediate, and
datatrove's per-task completion markers and logs live under its `logs/` (the executor's logging
folder is a `DataFolder` on the URL, so resume works as on a disk). Each task (`StagedTask`) runs
in a fresh local scratch directory of its own: it downloads the inputs its phase reads, runs the
phase's steps there (the same steps as on one disk, their paths moved to the scratch directory),
uploads every file it wrote (one object each: an object appears whole or not at all), and only
then does datatrove write its completion marker. A task killed part-way leaves no marker; its
rerun overwrites whatever it had uploaded. The scratch directory is deleted when the task ends, and a killed
task's by the next task that starts on its node (`remove_stale_scratch`: its PID is gone).

The driver never mirrors the work directory: it reads from the URL only the small files its own steps
read (`DRIVER_READS`: counts, funnel parts, the held-out candidates, cutoffs' inputs, the tasks' store
metadata), into a local copy (`$MILLRACE_HOME/work/...`, emptied when a run starts), and uploads what
its own steps wrote (work state, tokenizer, models, the held-out index) before each executor run. The
tasks' big outputs (filtered documents, signatures, token runs, shards) never come to its disk: with
`[output] url` each task publishes its own shards from the work URL to the store URL
(`pipeline.store.remote.PublishShards`). It never reads a task's local disk.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import shutil
import socket
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, BinaryIO

from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolder
from datatrove.pipeline.base import PipelineStep
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

from millrace.errors import MillraceError
from pipeline.steps.in_place import reading_in_place

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)
SCRATCH_PREFIX = "millrace-"  # a task's scratch directory: millrace-<phase>-<rank>-<host>-pid<pid>-<random>
_HOST = socket.gethostname().replace("-", "_")
UA_APP_ID = "AWS_SDK_UA_APP_ID"  # botocore's app id, sent in each request's user agent
Info = dict[str, Any]  # an object's info as fsspec lists it (name, size, type, ETag or mtime, ...)
LOGS = "logs"  # datatrove's markers, stats and task logs: read on the URL, never mirrored

# What each executor run's tasks download before they start, relative to the work root (a folder, a file or a
# glob; `{rank}` is the task's rank as five digits); see `pipeline.runner` for which step reads what. Only a
# task's own files: what it reads of other tasks' outputs (the dedup tasks' signatures, edges and removals, a
# tokenize task's rows of each removal part) it reads in place by byte range (`pipeline.steps.in_place`).
TASK_INPUTS: dict[str, tuple[str, ...]] = {
    "filter": ("inputs/{rank}.json",),  # which files it reads, dealt by the driver
    "dedup": (),
    "sample": (),  # its sketch and its rows of each removal part, read in place
    "tokenize": ("filtered/{rank}.jsonl.zst", "removed/*/{rank}.jsonl.zst", "tokenizer.json", "models/*.*"),
    # its own token runs and training shards, against the held-out index
    "decontaminate": ("tokens/{rank}", "store/cells/*/shard-{rank}-*", "contamination/held-out.npz"),
    # its own token runs (tables, placed rows, waiting candidates) and written.json; in a Slurm chain, the
    # cutoffs and decision the decontaminate job saved (`pipeline.slurm`: the split is built in the task)
    "split": ("tokenizer.json", "tokens/{rank}", "contamination/cutoffs.json", "contamination/decision.json"),
    "publish": (),  # its own shards go from the work URL to the store URL (`pipeline.store.remote.PublishShards`)
}

# What the driver reads from the work URL after each executor run (and at its start): small files only, none
# that grows with the corpus's tokens. `assemble` is read only when the store is built on the driver's disk
# (no `[output] url`): the store's files themselves.
DRIVER_READS: dict[str, tuple[str, ...]] = {
    # the work state; the driver's own outputs of an earlier run (the filter tasks' inputs files, tokenizer,
    # fitted models, held-out index)
    "start": ("work.json", "run.json", "inputs/", "tokenizer.json", "models/", "contamination/held-out.npz"),
    "filter": ("funnel/",),  # per-task funnel counts: is anything left?
    "dedup": ("components/round-*/*.json",),  # per-task edge and not-star counts: another component round?
    "sample": (),  # (the sample is read in place: each task's deduplicated sketch up to the budget)
    "tokenize": (
        "funnel/",
        "removed-tokens/",
        "malformed/",
        "models/cell-stats/",  # per-cell stats for the manifests
        "tokens/*/held-out.json",  # each task's held-out candidates (hash, key, length): the cutoffs
    ),
    # (the held-out n-gram index reads the chosen candidates' rows and tokens in place, by range)
    "decontaminate": ("contamination/",),  # each task's found n-grams
    "split": ("parts/",),  # each task's shard table rows, counts, samples, set findings: the manifests
    "assemble": ("store/",),
    "publish": (),
}


class RemoteWorkError(MillraceError):
    """A step of a staged task kept a path of the driver's disk that could not be moved to its scratch."""


def _version(info: Info) -> object:
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
    """The work directory of one store version at `url`; `mirror` is its place on the driver's disk, which holds
    only what the driver pulled (`DRIVER_READS`) or wrote itself."""

    url: str
    storage_options: Mapping[str, object] = field(default_factory=dict)
    mirror: Path = Path()
    scratch: str | None = None  # where tasks make their scratch directories; None: the system's temporary dir
    _fs: AbstractFileSystem | None = field(default=None, repr=False, compare=False)
    _root: str = field(default="", repr=False, compare=False)
    _remote: dict[str, object] = field(default_factory=dict, repr=False, compare=False)
    _local: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False, compare=False)
    pulled_bytes: int = field(default=0, repr=False, compare=False)  # what the driver downloaded, in all

    def __getstate__(self) -> dict[str, object]:  # the filesystem and the driver's bookkeeping stay with the driver
        return {
            "url": self.url,
            "storage_options": self.storage_options,
            "mirror": self.mirror,
            "scratch": self.scratch,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def fs(self) -> AbstractFileSystem:
        if self._fs is None:
            self._fs, root = url_to_fs(self.url, **self.storage_options)
            self._root = root.rstrip("/")
        return self._fs

    @property
    def root(self) -> str:
        self.fs  # noqa: B018  # resolves the root with the filesystem
        return self._root

    def url_of(self, local: Path) -> str:
        """The full URL of a path of the mirror (for messages)."""
        url: str = self.fs.unstrip_protocol(self.remote_path(local))
        return url

    def remote_path(self, local: Path) -> str:
        """The URL path of a path of the mirror."""
        relative = Path(local).relative_to(self.mirror).as_posix()
        return self.root if relative == "." else f"{self.root}/{relative}"

    def folder(self, local: Path) -> DataFolder:
        """The URL folder of a mirror path (an executor's logging folder: markers and logs on the bucket)."""
        return DataFolder(self.remote_path(local), fs=self.fs)

    def remove(self, local: Path) -> None:
        """Delete a mirror path's file or folder on the URL (a phase that reruns from scratch)."""
        target = self.remote_path(local)
        if self.fs.exists(target):
            self.fs.rm(target, recursive=True)
        prefix = target[len(self.root) + 1 :]
        for rel in [r for r in self._remote if not prefix or r == prefix or r.startswith(prefix + "/")]:
            self._remote.pop(rel)
            self._local.pop(rel, None)

    # the driver's local copy

    def reset_mirror(self) -> None:
        """Start the driver's local copy empty: what the URL holds is the work directory, nothing else is."""
        shutil.rmtree(self.mirror, ignore_errors=True)
        self.mirror.mkdir(parents=True)
        self._remote.clear()
        self._local.clear()

    def exists(self, local: Path) -> bool:
        """Whether a mirror path's file or folder exists on the URL."""
        self.fs.invalidate_cache()
        return bool(self.fs.exists(self.remote_path(local)))

    def pull(self, patterns: tuple[str, ...]) -> None:
        """Download the objects matching `patterns` (see `DRIVER_READS`) that are new or changed since last seen."""
        self.fs.invalidate_cache()  # listings cached before the tasks wrote are stale
        wanted = []
        for pattern in patterns:
            for rel, info in _matching(self.fs, self.root, pattern).items():
                if self._remote.get(rel) != _version(info):
                    wanted.append(rel)
                    self._remote[rel] = _version(info)
                    self.pulled_bytes += int(info.get("size") or 0)
        _download(self.fs, self.root, self.mirror, wanted)
        for rel in wanted:
            self._local[rel] = _stat(self.mirror / rel)

    def publish(self) -> None:
        """Upload every file of the local copy that the driver wrote since it was last pulled or published."""
        changed = {rel: p for rel, p in _files(self.mirror).items() if self._local.get(rel) != _stat(p)}
        _upload(self.fs, self.root, changed)
        for rel, path in changed.items():
            self._local[rel] = _stat(path)
            self._remote[rel] = _version(self.fs.info(f"{self.root}/{rel}"))


def _matching(fs: AbstractFileSystem, root: str, pattern: str) -> dict[str, Info]:
    """Objects under `root` matching `pattern` (a folder, a file or a glob), by relative path, with their info."""
    target = f"{root}/{pattern.rstrip('/')}"
    if any(c in pattern for c in "*?["):
        found = fs.glob(target, detail=True)
    elif fs.isdir(target):
        found = fs.find(target, detail=True)
    else:
        found = {target: fs.info(target)} if fs.exists(target) else {}
    expanded: dict[str, Info] = {}
    for path, info in found.items():
        if info.get("type") == "directory":
            expanded.update(fs.find(path, detail=True))
        else:
            expanded[path] = info
    return {path[len(root) + 1 :]: info for path, info in expanded.items()}


def _download(fs: AbstractFileSystem, root: str, local: Path, relatives: list[str]) -> None:
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


def _upload(fs: AbstractFileSystem, root: str, files: dict[str, Path]) -> None:
    """One object per file; on a plain filesystem each is written beside its target and renamed into place."""
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


def remove_stale_scratch(base: Path) -> list[Path]:
    """Delete the scratch directories of killed tasks on this node (their PID, in the name, is gone): a task
    killed part-way cannot remove its own. Returns what it removed."""
    removed = []
    for entry in base.glob(f"{SCRATCH_PREFIX}*-{_HOST}-pid*-*"):  # a shared scratch: only this node's
        pid = entry.name.rsplit("-pid", 1)[1].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class _Relocating(pickle.Pickler):
    """Pickles steps with every path under `old` replaced by the same path under `new`."""

    def __init__(self, file: BinaryIO, old: Path, new: Path):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.old, self.new = str(old), str(new)

    def reducer_override(self, obj: object) -> Any:  # typeshed: a reduce tuple, or NotImplemented
        if isinstance(obj, PurePath):
            text = str(obj)
            if text == self.old or text.startswith(self.old + os.sep):
                return type(obj), (self.new + text[len(self.old) :],)
        return NotImplemented


def relocate(steps: list[PipelineStep], old: Path, new: Path) -> list[PipelineStep]:
    """A copy of `steps` whose paths under `old` (the driver's mirror) lie under `new` (a task's scratch)."""
    buffer = io.BytesIO()
    _Relocating(buffer, old, new).dump(steps)
    if str(old).encode() in buffer.getvalue():  # a path kept as a plain string: it would still name the driver's disk
        raise RemoteWorkError(f"a step keeps {old} as a string; keep it as a Path so a staged task can move it")
    moved: list[PipelineStep] = pickle.loads(buffer.getvalue())
    return moved


def task_app_id(label: str, part: str | None, rank: int) -> str:
    """The name a task's requests carry: millrace-<stage>[.<run>]-<rank>."""
    return f"millrace-{label}{f'.{part}' if part else ''}-{rank:05d}"


def _fresh_filesystems() -> None:
    """Forget the filesystems this process made before (fsspec keeps one per arguments and thread): a worker
    that ran another task, or unpickled this one (the executor's logging folder, made before this task named
    itself), made them under another name, and a source opened with the same options would reuse them."""
    found, classes = [AbstractFileSystem], []
    while found:
        cls = found.pop()
        classes.append(cls)
        found += cls.__subclasses__()
    for cls in classes:
        cls.clear_instance_cache()


class StagedTask(PipelineStep):
    """One executor run's steps, run by each task in its own scratch directory against the work URL."""

    name = "🪣 staged task"
    type = "🔀 - STAGING"

    def __init__(self, label: str, steps: list[PipelineStep], work: RemoteWork, part: str | None = None):
        super().__init__()
        self.label, self.steps, self.work, self.inputs = label, steps, work, TASK_INPUTS[label]
        self.part = part  # which run of a stage of several (a dedup round): in the name its requests carry

    def _stage_inputs(self, local: Path, rank: int) -> set[str]:
        fs, root = self.work.fs, self.work.root
        fs.invalidate_cache()  # a filesystem instance inherited from the driver may hold its stale listings
        found: set[str] = set()
        for pattern in self.inputs:
            found.update(_matching(fs, root, pattern.format(rank=f"{rank:05d}")))
        relatives = sorted(found)
        _download(fs, root, local, relatives)
        return set(relatives)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        # this task's requests name it (botocore's user-agent app id): a bucket's request log ties each to its task
        os.environ[UA_APP_ID] = task_app_id(self.label, self.part, rank)
        _fresh_filesystems()
        base = self.work.scratch or tempfile.gettempdir()
        Path(base).mkdir(parents=True, exist_ok=True)
        remove_stale_scratch(Path(base))
        with tempfile.TemporaryDirectory(
            prefix=f"{SCRATCH_PREFIX}{self.label}-{rank:05d}-{_HOST}-pid{os.getpid()}-", dir=base
        ) as tmp:
            local = Path(tmp) / "work"
            local.mkdir()
            self._stage_inputs(local, rank)
            staged = {rel: _stat(p) for rel, p in _files(local).items()}
            pipelined: DocumentsPipeline = None
            with reading_in_place(local, self.work.fs, self.work.root):
                for step in relocate(self.steps, self.work.mirror, local):
                    pipelined = step(pipelined, rank, world_size)
                for _ in pipelined or ():
                    pass
            written = {rel: p for rel, p in _files(local).items() if staged.get(rel) != _stat(p)}
            _upload(self.work.fs, self.work.root, written)
            self.stat_update("uploaded", value=len(written))
