"""Which files each source reads, and every file under a source's folders that no source reads.

A source's directory is listed with datatrove's `DataFolder.list_files` (recursively); without a
`glob` a source reads the files with one of its format's extensions (`FORMAT_SUFFIXES`), hidden
files and folders left out. Two kinds of entry are never read and are reported instead: a dangling
symbolic link, and (unless the source sets `symlinks_outside = "read"`) a link that leads outside
the source's folder, since a corpus folder that quietly pulls in files from elsewhere is rarely
what its owner meant. A path that is an fsspec URL (`s3://bucket/corpus/`) is listed and read through
datatrove's `DataFolder` with its source's `storage_options` (object stores have no links).
`unread_files` lists, per folder, the files no source reads and why, for the
run's log and the funnel's `not_read`.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from millrace.urls import is_url
from pipeline.config import FORMAT_SUFFIXES, PipelineConfig, SourceConfig
from pipeline.store.manifest_records import NotRead

if TYPE_CHECKING:
    from datatrove.io import DataFolder

EXAMPLES = 3  # file names shown per folder in `not_read`
NO_READER = "no source reads its extension"
DANGLING = "dangling symbolic link"
OUTSIDE = "symbolic link leading outside the folder"


# Inside `listed_once`: each listing and file test, by its arguments (the kind fixes the value's type).
_listings: dict[tuple[str, str, str], object] | None = None
_Found = TypeVar("_Found")


@contextlib.contextmanager
def listed_once() -> Iterator[None]:
    """Within the block, each source path is listed (and tested for being a file) once: a run's driver asks
    for the same listings for the fingerprints, the unread files and the task plan."""
    global _listings
    previous, _listings = _listings, {}
    try:
        yield
    finally:
        _listings = previous


def _once(kind: str, path: str, storage_options: Mapping[str, object] | None, compute: Callable[[], _Found]) -> _Found:
    if _listings is None:
        return compute()
    key = (kind, path, json.dumps(storage_options or {}, sort_keys=True, default=str))
    if key not in _listings:
        _listings[key] = compute()
    return cast(_Found, _listings[key])  # stored by `compute` of the same kind, so of its type


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in Path(relative).parts)


def link_problem(folder: Path, relative: str) -> str | None:
    """Why a listed file must not be read (a dangling link, a link leaving `folder`), or None."""
    path = folder / relative
    if not path.exists():
        return DANGLING if path.is_symlink() else None
    return None if path.resolve().is_relative_to(folder.resolve()) else OUTSIDE


def data_folder(path: str, storage_options: Mapping[str, object] | None = None) -> DataFolder:
    """The datatrove folder of a local directory or a URL prefix."""
    from datatrove.io import DataFolder  # lazy: heavy (datatrove)

    return DataFolder(path, **(storage_options or {}))


def is_file(path: str, storage_options: Mapping[str, object] | None = None) -> bool:
    """Whether a configured path names one file (a local file, or an object at a URL)."""
    if not is_url(path):
        return Path(path).is_file()
    from fsspec.core import url_to_fs  # lazy: heavy (fsspec): only where a path is a URL

    def test() -> bool:
        fs, stripped = url_to_fs(path, **(storage_options or {}))
        return bool(fs.isfile(stripped))

    return bool(_once("is_file", path, storage_options, test))


def folder_of(path: str, storage_options: Mapping[str, object] | None = None) -> tuple[str, bool]:
    """(the directory a configured path's files are relative to, whether the path is one file)."""
    if not is_file(path, storage_options):
        return path, False
    return (path.rsplit("/", 1)[0] if is_url(path) else str(Path(path).parent)), True


def listed_files(path: str, storage_options: Mapping[str, object] | None = None) -> list[str]:
    """Every file under directory `path` (relative to it, sorted), hidden ones left out."""

    def listing() -> list[str]:
        return [f for f in data_folder(path, storage_options).list_files(recursive=True) if not _hidden(f)]

    return list(_once("listed", path, storage_options, listing))


def source_files(source: SourceConfig, path: str) -> list[str]:
    """The files of one configured path that `source` reads, relative to it (for a file path: its name)."""
    if is_file(path, source.storage_options):
        return [path.rsplit("/", 1)[-1] if is_url(path) else Path(path).name]
    if source.glob is not None:
        glob = source.glob
        files: list[str] = _once(
            f"glob {glob}",
            path,
            source.storage_options,
            lambda: data_folder(path, source.storage_options).list_files(recursive=True, glob_pattern=glob),
        )
    else:
        suffixes = FORMAT_SUFFIXES.get(source.format, ())
        files = [f for f in listed_files(path, source.storage_options) if f.lower().endswith(suffixes)]
    if is_url(path):
        return files
    folder = Path(path)
    allowed = (None,) if source.symlinks_outside == "skip" else (None, OUTSIDE)
    return [f for f in files if link_problem(folder, f) in allowed]


def _location(folder: str, relative: str) -> str:
    """One file's full name, the same however its folder was spelled (a URL's trailing slash, a local `..`)."""
    return f"{folder.rstrip('/')}/{relative}" if is_url(folder) else str(Path(folder) / relative)


def unread_files(config: PipelineConfig) -> list[NotRead]:
    """Per source folder, the files no source reads (`NotRead.describe` is its log line)."""
    read: set[str] = set()
    for source in config.sources:
        if source.format == "hf-datasets":
            read.update(_location(path, f) for path in source.paths for f in listed_files(path))
            continue
        for path in source.paths:
            folder = folder_of(path, source.storage_options)[0]
            read.update(_location(folder, f) for f in source_files(source, path))
    found: list[NotRead] = []
    seen: set[str] = set()
    for source in config.sources:
        for path in source.paths:
            if path in seen or folder_of(path, source.storage_options)[1]:
                continue
            if not is_url(path) and not Path(path).is_dir():
                continue
            seen.add(path)
            missed = [f for f in listed_files(path, source.storage_options) if _location(path, f) not in read]
            if missed:
                local = None if is_url(path) else Path(path)
                reasons = Counter((local and link_problem(local, f)) or NO_READER for f in missed)
                found.append(
                    NotRead(
                        source=source.name,
                        path=path,
                        files=len(missed),
                        reasons=dict(sorted(reasons.items())),
                        examples=missed[:EXAMPLES],
                    )
                )
    return found
