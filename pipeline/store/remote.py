"""A store version copied to any fsspec URL (`s3://bucket/stores/name/version`, `gs://...`, `file://...`).

Every file goes up under its own relative path, `store.json` last: it is the copy's completion marker. A
reader that finds the store's manifest finds every file it names, and a copy interrupted part-way is never
taken for a store: copying again resumes it (an object already there at its size is a finished PUT, kept).
The copy is checked object by object (sizes) before `store.json` goes up. A URL that holds another store
version's `store.json` is never written over (`check_target`). Every write has a deadline and a bounded
retry (`millrace.remote_calls`) and fails in one line naming the object. The loader then reads the copy by
byte ranges (`MixtureStream(..., store_url=URL)`).

A pipeline whose work directory is on a URL too publishes its store without the shards touching the
driver's disk (`publish_store`): they are copied from the work URL object to object (a server-side copy on
one filesystem), and only the manifests, written on the driver, go up from its disk.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace import remote_calls
from millrace.errors import ArtifactError
from millrace.remote_calls import WRITE_LIMITS, CallLimits
from pipeline.stages.tokenize.cell_shards import task_file_prefixes
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


def present(fs: AbstractFileSystem, root: str, limits: CallLimits = WRITE_LIMITS) -> dict[str, int]:
    """Sizes of the objects already under `root`, by path: what an interrupted copy finished."""
    try:
        listing = remote_calls.with_retries(
            fs.unstrip_protocol(root),
            lambda: remote_calls.within_deadline(fs, "find", root, detail=True, timeout=limits.timeout),
            limits,
            "list",
        )
    except ArtifactError as exc:
        if "no such bucket" in str(exc) or "not found" in str(exc):
            return {}
        raise
    return {path: int(info.get("size", -1)) for path, info in listing.items()}


def copy_store(
    local: Path, url: str, storage_options: Mapping[str, object] | None = None, limits: CallLimits = WRITE_LIMITS
) -> int:
    """Upload the store version at `local` to `url`, resuming an interrupted copy; returns the number of files
    copied (0: the URL already held this store version)."""
    if not (local / MARKER).exists():
        raise ArtifactError(f"{local}: no store.json, not a store version")
    fs, root = remote_fs(url, storage_options, limits)
    if check_target(local, fs, root, limits):
        return 0
    done = present(fs, root, limits)
    files = sorted(p for p in local.rglob("*") if p.is_file() and p.name != MARKER and not p.name.startswith("."))
    _make_parents(fs, [*(f"{root}/{p.relative_to(local).as_posix()}" for p in files), f"{root}/{MARKER}"])
    copied = 0
    for path in files:
        target, size = f"{root}/{path.relative_to(local).as_posix()}", path.stat().st_size
        if done.get(target) == size:
            continue
        remote_calls.put_file(fs, str(path), target, size, limits)
        copied += 1
    _check_sizes(fs, root, {f"{root}/{p.relative_to(local).as_posix()}": (p.stat().st_size, str(p)) for p in files})
    remote_calls.put_file(fs, str(local / MARKER), f"{root}/{MARKER}", (local / MARKER).stat().st_size, limits)
    return copied + 1


def _make_parents(fs: AbstractFileSystem, targets: list[str]) -> None:
    """On a local filesystem, the folders `targets` go into (an object store has none to make)."""
    from fsspec.implementations.local import LocalFileSystem  # lazy: heavy (fsspec): only where a path is a URL

    if isinstance(fs, LocalFileSystem):
        for parent in sorted({target.rsplit("/", 1)[0] for target in targets}):
            fs.makedirs(parent, exist_ok=True)


def _check_sizes(
    fs: AbstractFileSystem, root: str, expected: dict[str, tuple[int, str]], limits: CallLimits = WRITE_LIMITS
) -> None:
    """Every object under `root` at the size of its source (`expected`: target -> (size, source)), before the
    marker goes up."""
    fs.invalidate_cache()
    sizes = present(fs, root, limits)
    for target, (size, source) in expected.items():
        if sizes.get(target, -1) != size:
            raise ArtifactError(f"{fs.unstrip_protocol(target)}: not a copy of {source} ({size} bytes)")


def same_profile(
    source_url: str, source_options: Mapping[str, object], url: str, options: Mapping[str, object]
) -> bool:
    """Whether one URL's objects can be copied to the other's on the server: the same protocol and the same
    storage options (the same credentials and endpoint)."""
    return source_url.split("://", 1)[0] == url.split("://", 1)[0] and (source_options or {}) == (options or {})


def publish_store(
    local: Path,
    shards: tuple[AbstractFileSystem, str],
    url: str,
    storage_options: Mapping[str, object] | None = None,
    limits: CallLimits = WRITE_LIMITS,
    copied: bool = False,
) -> int:
    """The store version at `url` from its manifests at `local` (no shard there) and the files the tasks wrote
    under `shards` (a filesystem and a root: the work URL's `store/`), resuming an interrupted publication;
    returns the number of files copied (0: the URL already held this store version). The shards are copied on
    the server, or were `copied` by the tasks (`PublishShards`) where the two filesystems cannot: never through
    this process. Each is checked by its size before `store.json` goes up."""
    if not (local / MARKER).exists():
        raise ArtifactError(f"{local}: no store.json, not a store version")
    source_fs, source_root = shards
    fs, root = remote_fs(url, storage_options, limits)
    if check_target(local, fs, root, limits):
        return 0
    source_fs.invalidate_cache()
    listing = source_fs.find(source_root, detail=True)
    sizes = {
        path[len(source_root) + 1 :]: int(info["size"])
        for path, info in listing.items()
        if not path.rsplit("/", 1)[-1].startswith(".")
    }
    done = present(fs, root, limits)
    relatives = sorted(r for r in sizes if done.get(f"{root}/{r}") != sizes[r])
    sources, targets = [f"{source_root}/{r}" for r in relatives], [f"{root}/{r}" for r in relatives]
    manifests = sorted(p for p in local.rglob("*") if p.is_file() and p.name != MARKER and not p.name.startswith("."))
    uploads = [f"{root}/{path.relative_to(local).as_posix()}" for path in manifests]
    _make_parents(fs, [*targets, *uploads])
    for source, target, relative in zip(sources, targets, [] if copied else relatives):
        deadline = limits.timeout + sizes[relative] / remote_calls.MIN_WRITE_RATE

        def copy(source: str = source, target: str = target, deadline: float = deadline) -> None:
            remote_calls.within_deadline(fs, "copy", source, target, timeout=deadline)  # on the server

        remote_calls.with_retries(fs.unstrip_protocol(target), copy, limits, "write")
    expected = {f"{root}/{r}": (sizes[r], source_fs.unstrip_protocol(f"{source_root}/{r}")) for r in sizes}
    _check_sizes(fs, root, expected, limits)
    for path, target in zip(manifests, uploads):
        remote_calls.put_file(fs, str(path), target, path.stat().st_size, limits)
    remote_calls.put_file(fs, str(local / MARKER), f"{root}/{MARKER}", (local / MARKER).stat().st_size, limits)
    return len(relatives) + len(manifests) + 1


class PublishShards(PipelineStep):
    """Task r: its own files of the store (its tokenize and split tasks' shards and trace part, by their names)
    from the work URL's `store/` to the store URL, streamed a block at a time by the task; for two storage
    profiles that cannot copy on the server. Lists each cell by the task's name prefixes only."""

    name = "📤 publish shards"
    type = "📤 - PUBLISH"

    def __init__(
        self, source_url: str, source_options: Mapping[str, object], url: str, storage_options: Mapping[str, object]
    ):
        super().__init__()
        self.source_url, self.source_options = source_url, source_options
        self.url, self.storage_options = url, storage_options

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        from fsspec.implementations.local import LocalFileSystem  # lazy: heavy (fsspec): only where a path is a URL

        if data:
            yield from data
        source_fs, source_root = remote_fs(self.source_url, self.source_options)
        fs, root = remote_fs(self.url, self.storage_options)
        cells = source_fs.ls(f"{source_root}/cells", detail=False) if source_fs.exists(f"{source_root}/cells") else []
        for cell in cells:
            for source in _own_files(source_fs, cell.rstrip("/"), rank):
                target = f"{root}/cells/{source[len(source_root) + len('/cells/') :]}"
                if isinstance(fs, LocalFileSystem):
                    fs.makedirs(fs._parent(target), exist_ok=True)
                with source_fs.open(source, "rb") as reader, fs.open(target, "wb") as writer:
                    shutil.copyfileobj(reader, writer, COPY_BLOCK)
                self.stat_update("published")


def _own_files(fs: AbstractFileSystem, cell: str, rank: int) -> list[str]:
    """Task `rank`'s files of one cell, listed by their name prefixes (an object store lists only those)."""
    from fsspec.implementations.local import LocalFileSystem  # lazy: heavy (fsspec): only where a path is a URL

    found = []
    for prefix in (*task_file_prefixes(rank), part_name(rank, HELD_OUT_PREFIX)):
        listed = fs.find(cell) if isinstance(fs, LocalFileSystem) else fs.find(cell, prefix=prefix)
        found += [path for path in listed if path.rsplit("/", 1)[-1].startswith(prefix)]
    return sorted(found)
