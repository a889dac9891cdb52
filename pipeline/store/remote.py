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
    targets = [f"{root}/{path.relative_to(local).as_posix()}" for path in files]
    _make_parents(fs, [*targets, f"{root}/store.json"])
    for path, target in zip(files, targets):
        fs.put_file(str(path), target)
        if fs.size(target) != path.stat().st_size:
            raise ArtifactError(
                f"{fs.unstrip_protocol(target)}: {fs.size(target)} bytes after upload, "
                f"{path} has {path.stat().st_size}"
            )
    fs.put_file(str(local / "store.json"), f"{root}/store.json")
    return len(files) + 1


def _make_parents(fs: Any, targets: list[str]) -> None:
    """On a local filesystem, the folders `targets` go into (an object store has none to make)."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        for parent in sorted({target.rsplit("/", 1)[0] for target in targets}):
            fs.makedirs(parent, exist_ok=True)


def publish_store(local: Path, shards: tuple[Any, str], url: str, storage_options: dict | None = None) -> int:
    """The store version at `url` from its manifests at `local` (no shard there) and the files the tasks wrote
    under `shards` (a filesystem and a root: the work URL's `store/`); returns the number of files copied."""
    if not (local / "store.json").exists():
        raise ArtifactError(f"{local}: no store.json, not a store version")

    source_fs, source_root = shards
    fs, root = remote_fs(url, storage_options)
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
    _make_parents(fs, [*targets, *uploads])
    if type(source_fs) is type(fs) and source_fs.storage_options == fs.storage_options:
        fs.copy(sources, targets)  # object to object on the server
    else:  # another filesystem (or other credentials): streamed through memory, a block at a time
        for source, target in zip(sources, targets):
            with source_fs.open(source, "rb") as reader, fs.open(target, "wb") as writer:
                shutil.copyfileobj(reader, writer, COPY_BLOCK)
    fs.invalidate_cache()
    copied = fs.find(root, detail=True)
    for source, target, relative in zip(sources, targets, relatives):
        if int(copied.get(target, {}).get("size", -1)) != sizes[relative]:
            raise ArtifactError(
                f"{fs.unstrip_protocol(target)}: not a copy of {source_fs.unstrip_protocol(source)} "
                f"({sizes[relative]} bytes)"
            )
    for path, target in zip(manifests, uploads):
        fs.put_file(str(path), target)
    fs.put_file(str(local / "store.json"), f"{root}/store.json")
    return len(relatives) + len(manifests) + 1
