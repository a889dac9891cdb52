"""A store version copied to any fsspec URL (`s3://bucket/stores/name/version`, `gs://...`, `file://...`).

Every file goes up under its own relative path, `store.json` last: it is the copy's completion marker. A
reader that finds the store's manifest finds every file it names, and a copy interrupted part-way is never
taken for a store: copying again resumes it (an object already there at its size is a finished PUT, kept).
The copy is checked object by object (sizes) before `store.json` goes up, a folder's listing at a time: a
first copy lists nothing before it uploads, and no listing is of the whole store. A URL that holds another
store version's `store.json` is never written over (`check_target`). Every write has a deadline and a bounded
retry (`millrace.remote_calls`) and fails in one line naming the object. The loader then reads the copy by
byte ranges (`MixtureStream(..., store=StoreAccess(url=URL))`).

A pipeline whose work directory is on a URL too publishes its store without the shards touching the
driver's disk or process: each task copies its own shards from the work URL (`PublishShards`: on the server
where one storage profile holds both URLs), and only the manifests, written on the driver, go up from its
disk (`publish_store`); the driver lists no shard.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace import remote_calls
from millrace.errors import ArtifactError
from millrace.remote_calls import WRITE_LIMITS, CallLimits
from pipeline.steps.tokenize.cell_shards import task_file_prefixes
from pipeline.store.trace import HELD_OUT_PREFIX, part_name

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

COPY_BLOCK = 16 << 20  # bytes held at once by a copy between two filesystems
MARKER = "store.json"  # written last: a store version is at a URL only once this object is


def remote_fs(
    url: str, storage_options: Mapping[str, object] | None = None, limits: CallLimits = WRITE_LIMITS
) -> tuple[AbstractFileSystem, str]:
    """The filesystem and root of `url`, its calls limited by `limits` (one retry layer: `millrace.remote_calls`)."""
    return remote_calls.limited_fs(url, storage_options, limits)


def published(fs: AbstractFileSystem, root: str, limits: CallLimits = WRITE_LIMITS) -> bytes | None:
    """The bytes of the `store.json` at `root`, or None where no store version is complete there."""
    target = f"{root}/{MARKER}"
    try:
        return bytes(
            remote_calls.with_retries(
                fs.unstrip_protocol(target),
                lambda: remote_calls.within_deadline(fs, "cat_file", target, timeout=limits.timeout),
                limits,
            )
        )
    except ArtifactError as exc:
        if str(exc).endswith("object not found"):
            return None
        raise


def check_target(local: Path, fs: AbstractFileSystem, root: str, limits: CallLimits = WRITE_LIMITS) -> bool:
    """Whether the URL already holds this very store version (its `store.json` byte for byte: nothing to copy);
    another store version's `store.json` there is refused in one line, never written over."""
    there = published(fs, root, limits)
    if there is None:
        return False
    if there == (local / MARKER).read_bytes():
        return True
    raise ArtifactError(
        f"{fs.unstrip_protocol(root)}: another store version is already published there (its store.json differs "
        f"from {local / MARKER}); refusing to overwrite it: publish under another version, or remove it first"
    )


def holds_anything(fs: AbstractFileSystem, root: str, limits: CallLimits = WRITE_LIMITS) -> bool:
    """Whether anything is under `root` (an interrupted copy to resume): one probe, on S3 a HEAD and a listing
    of at most one key, never the target's listing."""
    try:
        return bool(
            remote_calls.with_retries(
                fs.unstrip_protocol(root),
                lambda: remote_calls.within_deadline(fs, "exists", root, timeout=limits.timeout),
                limits,
                "list",
            )
        )
    except ArtifactError as exc:
        if "no such bucket" in str(exc):
            return False
        raise


def listed(fs: AbstractFileSystem, folder: str, limits: CallLimits = WRITE_LIMITS) -> dict[str, int]:
    """Sizes of the objects directly in `folder`, by path: one folder's listing, never the store's."""
    try:
        entries = remote_calls.with_retries(
            fs.unstrip_protocol(folder),
            lambda: remote_calls.within_deadline(fs, "ls", folder, detail=True, timeout=limits.timeout),
            limits,
            "list",
        )
    except ArtifactError as exc:
        if "no such bucket" in str(exc) or "not found" in str(exc):
            return {}
        raise
    return {str(info["name"]): int(info.get("size", -1)) for info in entries if info.get("type") == "file"}


def copy_store(
    local: Path, url: str, storage_options: Mapping[str, object] | None = None, limits: CallLimits = WRITE_LIMITS
) -> int:
    """Upload the store version at `local` to `url`, resuming an interrupted copy; returns the number of files
    copied (0: the URL already held this store version). A first copy lists nothing before it uploads (one
    probe says the URL is empty); each folder is listed on its own, so what this process holds is one folder's
    listing, never the store's."""
    if not (local / MARKER).exists():
        raise ArtifactError(f"{local}: no store.json, not a store version")
    fs, root = remote_fs(url, storage_options, limits)
    if check_target(local, fs, root, limits):
        return 0
    resuming = holds_anything(fs, root, limits)
    copied = 0
    for folder, folders, names in os.walk(local):
        folders.sort()
        files = sorted(name for name in names if name != MARKER and not name.startswith("."))
        if files:
            target = f"{root}/{Path(folder).relative_to(local).as_posix()}".removesuffix("/.")
            copied += _copy_folder(fs, Path(folder), files, target, resuming, limits)
    _make_parents(fs, [f"{root}/{MARKER}"])
    remote_calls.put_file(fs, str(local / MARKER), f"{root}/{MARKER}", (local / MARKER).stat().st_size, limits)
    return copied + 1


def _copy_folder(
    fs: AbstractFileSystem, folder: Path, names: list[str], target: str, resuming: bool, limits: CallLimits
) -> int:
    """One folder's files to `target`: those not there at their size (listed only when resuming), then each
    checked by its size before the marker goes up; returns the number uploaded."""
    sizes = {name: (folder / name).stat().st_size for name in names}
    _make_parents(fs, [f"{target}/{name}" for name in names])
    done = listed(fs, target, limits) if resuming else {}
    missing = [name for name in names if done.get(f"{target}/{name}") != sizes[name]]
    for name in missing:
        remote_calls.put_file(fs, str(folder / name), f"{target}/{name}", sizes[name], limits)
    fs.invalidate_cache(target)
    there = listed(fs, target, limits)
    for name in names:
        if there.get(f"{target}/{name}", -1) != sizes[name]:
            raise ArtifactError(
                f"{fs.unstrip_protocol(f'{target}/{name}')}: not a copy of {folder / name} ({sizes[name]} bytes)"
            )
    return len(missing)


def _make_parents(fs: AbstractFileSystem, targets: list[str]) -> None:
    """On a local filesystem, the folders `targets` go into (an object store has none to make)."""
    from fsspec.implementations.local import LocalFileSystem  # lazy: heavy (fsspec): only where a path is a URL

    if isinstance(fs, LocalFileSystem):
        for parent in sorted({target.rsplit("/", 1)[0] for target in targets}):
            fs.makedirs(parent, exist_ok=True)


def same_profile(
    source_url: str, source_options: Mapping[str, object], url: str, options: Mapping[str, object]
) -> bool:
    """Whether one URL's objects can be copied to the other's on the server: the same protocol and the same
    storage options (the same credentials and endpoint)."""
    return source_url.split("://", 1)[0] == url.split("://", 1)[0] and (source_options or {}) == (options or {})


def publish_store(
    local: Path, url: str, storage_options: Mapping[str, object] | None = None, limits: CallLimits = WRITE_LIMITS
) -> int:
    """The store version at `url`, once its tasks published their shards there (`PublishShards`): the manifests
    at `local` (no shard there) go up, `store.json` last; returns the number of files uploaded (0: the URL
    already held this store version). Nothing is listed: the tasks checked their own files, so what this
    process moves and holds grows with the manifests (cells), never with the shards."""
    if not (local / MARKER).exists():
        raise ArtifactError(f"{local}: no store.json, not a store version")
    fs, root = remote_fs(url, storage_options, limits)
    if check_target(local, fs, root, limits):
        return 0
    manifests = sorted(p for p in local.rglob("*") if p.is_file() and p.name != MARKER and not p.name.startswith("."))
    uploads = [f"{root}/{path.relative_to(local).as_posix()}" for path in manifests]
    _make_parents(fs, [*uploads, f"{root}/{MARKER}"])
    for path, target in zip(manifests, uploads):
        remote_calls.put_file(fs, str(path), target, path.stat().st_size, limits)
    remote_calls.put_file(fs, str(local / MARKER), f"{root}/{MARKER}", (local / MARKER).stat().st_size, limits)
    return len(manifests) + 1


class PublishShards(PipelineStep):
    """Task r: its own files of the store (its tokenize and split tasks' shards and trace parts, by their names)
    from the work URL's `store/` to the store URL: copied on the server where the two URLs share one storage
    profile (`same_profile`), else streamed a block at a time by the task. A file already there at its size (a
    killed task's rerun) is kept; every file is checked by its size before the task completes. Each cell is
    listed by the task's name prefixes only, so a task lists and holds its own files, never the store's."""

    name = "📤 publish shards"
    type = "📤 - PUBLISH"

    def __init__(
        self, source_url: str, source_options: Mapping[str, object], url: str, storage_options: Mapping[str, object]
    ):
        super().__init__()
        self.source_url, self.source_options = source_url, source_options
        self.url, self.storage_options = url, storage_options

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        source_fs, source_root = remote_fs(self.source_url, self.source_options)
        fs, root = remote_fs(self.url, self.storage_options)
        server_side = same_profile(self.source_url, self.source_options, self.url, self.storage_options)
        cells = source_fs.ls(f"{source_root}/cells", detail=False) if source_fs.exists(f"{source_root}/cells") else []
        for cell in cells:
            own = _own_files(source_fs, cell.rstrip("/"), rank)
            target_cell = f"{root}/cells/{cell.rstrip('/').rsplit('/', 1)[-1]}"
            there = _own_files(fs, target_cell, rank)
            for source, size in own.items():
                target = f"{target_cell}/{source.rsplit('/', 1)[-1]}"
                if there.get(target) != size:
                    _copy(source_fs, source, fs, target, size, server_side)
                    self.stat_update("published")
            fs.invalidate_cache()
            _check_own(fs, target_cell, rank, {f"{target_cell}/{s.rsplit('/', 1)[-1]}": n for s, n in own.items()})


def _copy(
    source_fs: AbstractFileSystem, source: str, fs: AbstractFileSystem, target: str, size: int, server_side: bool
) -> None:
    """One file: on the server where one filesystem holds both, else through this process a block at a time."""
    from fsspec.implementations.local import LocalFileSystem  # lazy: heavy (fsspec): only where a path is a URL

    if isinstance(fs, LocalFileSystem):
        fs.makedirs(fs._parent(target), exist_ok=True)
    if server_side:
        deadline = WRITE_LIMITS.timeout + size / remote_calls.MIN_WRITE_RATE

        def copy() -> None:
            remote_calls.within_deadline(fs, "copy", source, target, timeout=deadline)

        remote_calls.with_retries(fs.unstrip_protocol(target), copy, WRITE_LIMITS, "write")
        return
    with source_fs.open(source, "rb") as reader, fs.open(target, "wb") as writer:
        shutil.copyfileobj(reader, writer, COPY_BLOCK)


def _check_own(fs: AbstractFileSystem, cell: str, rank: int, expected: dict[str, int]) -> None:
    """Every file a task published at the size of its source, before its completion marker."""
    there = _own_files(fs, cell, rank)
    for target, size in expected.items():
        if there.get(target, -1) != size:
            raise ArtifactError(f"{fs.unstrip_protocol(target)}: not a copy of the task's file ({size} bytes)")


def _own_files(fs: AbstractFileSystem, cell: str, rank: int) -> dict[str, int]:
    """Task `rank`'s files of one cell with their sizes, listed by their name prefixes (an object store lists
    only those); none where the cell is not there yet."""
    from fsspec.implementations.local import LocalFileSystem  # lazy: heavy (fsspec): only where a path is a URL

    found: dict[str, int] = {}
    for prefix in (*task_file_prefixes(rank), part_name(rank, HELD_OUT_PREFIX)):
        try:
            listed = (
                fs.find(cell, detail=True)
                if isinstance(fs, LocalFileSystem)
                else fs.find(cell, prefix=prefix, detail=True)
            )
        except FileNotFoundError:
            listed = {}
        found.update(
            {path: int(info["size"]) for path, info in listed.items() if path.rsplit("/", 1)[-1].startswith(prefix)}
        )
    return dict(sorted(found.items()))
