"""A store version copied to any fsspec URL (`s3://bucket/stores/name/version`, `gs://...`, `file://...`).

Every file goes up under its own relative path, `store.json` last: a reader that finds the
store's manifest finds every file it names, and a copy interrupted part-way is never taken for a
store. The copy is checked object by object (sizes) before `store.json` goes up. The loader then
reads the copy by byte ranges (`MixtureStream(..., store_url=URL)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from millrace.errors import ArtifactError


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
