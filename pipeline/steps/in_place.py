"""Files read in place on the work URL by exact byte ranges, where a staged task would otherwise download them.

A staged task (`pipeline.remote_work.StagedTask`) runs its steps in a scratch directory laid out like the work
directory. What grows with the corpus or with the number of tasks (every signing task's signatures, every
round task's edges, every part's removals) is not downloaded there: inside `reading_in_place(scratch, fs, root)`
the readers here take a path missing under `scratch` from the same relative path under `root` on `fs`, and read
only the bytes they ask for (a range request each, no read-ahead), as datatrove's MinHash stages read one
bucket's files. A path that exists locally (one disk, or what the task wrote itself) is read from the disk.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_mounts: list[tuple[Path, AbstractFileSystem, str]] = []  # (local root, filesystem, URL root), innermost last


@contextlib.contextmanager
def reading_in_place(local: Path, fs: AbstractFileSystem, root: str) -> Iterator[None]:
    """Within the block, a missing path under `local` is read from `root` on `fs`."""
    _mounts.append((Path(local), fs, root.rstrip("/")))
    try:
        yield
    finally:
        _mounts.pop()


def _mount_of(path: Path) -> tuple[AbstractFileSystem, str] | None:
    """The filesystem and URL path that `path` stands for inside a mount, whether or not it exists on the disk."""
    for local, fs, root in reversed(_mounts):
        if path == local or local in path.parents:
            relative = path.relative_to(local).as_posix()
            return fs, root if relative == "." else f"{root}/{relative}"
    return None


def _remote(path: Path) -> tuple[AbstractFileSystem, str] | None:
    """The filesystem and URL path to read `path` from, or None where it is read from the disk."""
    return None if path.exists() else _mount_of(path)


def is_remote(path: Path | str) -> bool:
    """Whether `path` is read from the work URL (inside `reading_in_place`, and missing on the disk)."""
    return _remote(Path(path)) is not None


def read_range(path: Path | str, start: int, stop: int) -> bytes:
    """Bytes [start, stop) of a file (fewer at its end)."""
    return read_ranges(path, [(start, stop)])[0]


def read_ranges(path: Path | str, ranges: list[tuple[int, int]]) -> list[bytes]:
    """Several byte ranges of one file: on a URL, one concurrent batch of range requests."""
    path = Path(path)
    remote = _remote(path)
    if remote is None:
        out = []
        with open(path, "rb") as handle:
            for start, stop in ranges:
                handle.seek(start)
                out.append(handle.read(max(0, stop - start)))
        return out
    fs, url = remote
    wanted = [(start, stop) for start, stop in ranges if stop > start]
    got = iter(fs.cat_ranges([url] * len(wanted), [s for s, _ in wanted], [e for _, e in wanted]) if wanted else [])
    return [next(got) if stop > start else b"" for start, stop in ranges]


def opened(path: Path | str) -> BinaryIO:
    """A file object to seek and read (a zip's members one at a time): on a URL, each read one range request."""
    path = Path(path)
    remote = _remote(path)
    return open(path, "rb") if remote is None else remote[0].open(remote[1], "rb", cache_type="none")


def read_bytes(path: Path | str) -> bytes:
    """A whole (small) file."""
    path = Path(path)
    remote = _remote(path)
    return path.read_bytes() if remote is None else remote[0].cat_file(remote[1])


def size(path: Path | str) -> int:
    path = Path(path)
    remote = _remote(path)
    return path.stat().st_size if remote is None else int(remote[0].size(remote[1]))


def exists(path: Path | str) -> bool:
    path = Path(path)
    remote = _remote(path)
    return path.exists() if remote is None else bool(remote[0].exists(remote[1]))


def children(folder: Path | str, pattern: str = "*", folders: bool = False) -> list[Path]:
    """The files (or with `folders`, the subfolders) of `folder` whose names match `pattern`, sorted: inside a
    mount, those on the disk and those on the URL (a folder the driver pulled a few files of holds more there)."""
    folder = Path(folder)
    names = set()
    if folder.is_dir():
        names = {p.name for p in folder.iterdir() if p.is_dir() == folders}
    mounted = _mount_of(folder)
    if mounted is not None:
        fs, url = mounted
        try:
            listing = fs.ls(url, detail=True)
        except FileNotFoundError:
            listing = []
        kind = "directory" if folders else "file"
        names |= {info["name"].rstrip("/").rsplit("/", 1)[-1] for info in listing if info.get("type") == kind}
    return sorted(folder / name for name in names if fnmatch.fnmatch(name, pattern))
