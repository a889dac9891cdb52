"""A store version copied to any fsspec URL (`s3://bucket/stores/name/version`, `gs://...`, `file://...`).

Every file goes up under its own relative path, `store.json` last: a reader that finds the
store's manifest finds every file it names, and a copy interrupted part-way is never taken for a
store. The copy is checked object by object (sizes) before `store.json` goes up. The loader then
reads the copy by byte ranges (`MixtureStream(..., store_url=URL)`).

A pipeline whose work directory is on a URL too publishes its store without the shards touching the
driver's disk (`publish_store`): they are copied from the work URL object to object (a server-side copy on
one filesystem), and only the manifests, written on the driver, go up from its disk.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.errors import ArtifactError

COPY_BLOCK = 16 << 20  # bytes held at once by a copy between two filesystems


def remote_fs(url: str, storage_options: dict | None = None) -> tuple[Any, str]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, root.rstrip("/")


def copy_store(local: Path, url: str, storage_options: dict | None = None) -> int:
    """Upload the store version at `local` to `url`; returns the number of files copied."""
    if not (local / "store.json").exists():
        raise ArtifactError(f"{local}: no store.json, not a store version")
    fs, root = remote_fs(url, storage_options)
    files = sorted(
        p for p in local.rglob("*") if p.is_file() and p.name != "store.json" and not p.name.startswith(".")
    )
    for path in files:
        target = f"{root}/{path.relative_to(local).as_posix()}"
        fs.put_file(str(path), target)
        if fs.size(target) != path.stat().st_size:
            raise ArtifactError(
                f"{fs.unstrip_protocol(target)}: {fs.size(target)} bytes after upload, "
                f"{path} has {path.stat().st_size}"
            )
    fs.put_file(str(local / "store.json"), f"{root}/store.json")
    return len(files) + 1


def same_profile(source_fs: Any, fs: Any) -> bool:
    """Whether one filesystem can copy from the other on the server (the same kind, the same options)."""
    return type(source_fs) is type(fs) and source_fs.storage_options == fs.storage_options


def publish_store(
    local: Path, shards: tuple[Any, str], url: str, storage_options: dict | None = None, copied: bool = False
) -> int:
    """The store version at `url` from its manifests at `local` (no shard there) and the files the tasks wrote
    under `shards` (a filesystem and a root: the work URL's `store/`); returns the number of files published.
    The shards are copied on the server, or were `copied` by the tasks (`PublishShards`) where the two
    filesystems cannot: never through this process. Each is checked by its size before `store.json` goes up."""
    if not (local / "store.json").exists():
        raise ArtifactError(f"{local}: no store.json, not a store version")
    from fsspec.implementations.local import LocalFileSystem

    source_fs, source_root = shards
    fs, root = remote_fs(url, storage_options)
    if not copied and not same_profile(source_fs, fs):
        raise ArtifactError(f"{fs.unstrip_protocol(root)}: the shards must be copied by the tasks (PublishShards)")
    source_fs.invalidate_cache()
    listing = source_fs.find(source_root, detail=True)
    sizes = {
        path[len(source_root) + 1 :]: int(info["size"])
        for path, info in listing.items()
        if not path.rsplit("/", 1)[-1].startswith(".")
    }
    relatives = sorted(sizes)
    sources, targets = [f"{source_root}/{r}" for r in relatives], [f"{root}/{r}" for r in relatives]
    manifests = sorted(
        p for p in local.rglob("*") if p.is_file() and p.name != "store.json" and not p.name.startswith(".")
    )
    uploads = [f"{root}/{path.relative_to(local).as_posix()}" for path in manifests]
    if isinstance(fs, LocalFileSystem):  # folders to make first (an object store has none)
        for parent in sorted({target.rsplit("/", 1)[0] for target in [*targets, *uploads]}):
            fs.makedirs(parent, exist_ok=True)
    if not copied:
        fs.copy(sources, targets)  # object to object on the server
    fs.invalidate_cache()
    published = fs.find(root, detail=True)
    for source, target, relative in zip(sources, targets, relatives):
        if int(published.get(target, {}).get("size", -1)) != sizes[relative]:
            raise ArtifactError(
                f"{fs.unstrip_protocol(target)}: not a copy of {source_fs.unstrip_protocol(source)} "
                f"({sizes[relative]} bytes)"
            )
    for path, target in zip(manifests, uploads):
        fs.put_file(str(path), target)
    fs.put_file(str(local / "store.json"), f"{root}/store.json")
    return len(relatives) + len(manifests) + 1


class PublishShards(PipelineStep):
    """Task r: its own files of the store (its tokenize and split tasks' shards and trace part, by their names)
    from the work URL's `store/` to the store URL, streamed a block at a time by the task; for two storage
    profiles that cannot copy on the server. Lists each cell by the task's name prefixes only."""

    name = "📤 publish shards"
    type = "📤 - PUBLISH"

    def __init__(self, source_url: str, source_options: dict, url: str, storage_options: dict):
        super().__init__()
        self.source_url, self.source_options = source_url, source_options
        self.url, self.storage_options = url, storage_options

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        from fsspec.implementations.local import LocalFileSystem

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


def _own_files(fs: Any, cell: str, rank: int) -> list[str]:
    """Task `rank`'s files of one cell, listed by their name prefixes (an object store lists only those)."""
    from fsspec.implementations.local import LocalFileSystem

    from pipeline.stages.tokenize.cell_shards import task_file_prefixes

    found = []
    for prefix in task_file_prefixes(rank):
        listed = fs.find(cell) if isinstance(fs, LocalFileSystem) else fs.find(cell, prefix=prefix)
        found += [path for path in listed if path.rsplit("/", 1)[-1].startswith(prefix)]
    return sorted(found)
