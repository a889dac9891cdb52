"""The last checkpoint a process loaded, kept in memory for the next run that loads it (a fleet worker's).

A swarm's proxies all start from one shared checkpoint; a worker that trains them one after another would
read and unpickle it from disk for each. While `keeping_loaded()` is active (a fleet worker, the in-process
fleet), `trainer.checkpoint.load` keeps a copy of what it read, per part, and hands the next load of the same
checkpoint a fresh copy of that instead of reading it again: the same values, so the run is the same.

Only one checkpoint is kept (the last loaded), only of a local directory, and only while its `.metadata`
file is the same file (a checkpoint is renamed into place whole; a newer one at the same step is another
file): its stamp is taken before the read and the copy kept only if it is unchanged after, so a checkpoint
replaced while it was read is read again next time. A part whose load template differs from the one the copy
was read for (another model shape, another cell list) is read from disk as usual, so DCP's own checks refuse
what they would refuse.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

_kept: dict[tuple[str, str], tuple[Any, Any, dict[str, Any]]] = {}  # (dir, part) -> (stamp, layout, state)
_active = 0


@contextlib.contextmanager
def keeping_loaded() -> Iterator[None]:
    """Keep the last loaded checkpoint while active; forget it at the end (its memory freed)."""
    global _active
    _active += 1
    try:
        yield
    finally:
        _active -= 1
        if not _active:
            _kept.clear()


def layout(value: Any) -> Any:
    """A load template's structure: keys, and each tensor's shape and dtype (values do not matter)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, dict):
        return {key: layout(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [layout(item) for item in value]
    return type(value).__name__


def stamp(path: Any) -> tuple[int, int, int] | None:
    """Which file a local checkpoint's `.metadata` is (None at a URL, or when there is none)."""
    if not isinstance(path, Path):
        return None
    try:
        found = (path / ".metadata").stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def recall(path: Any, name: str, template: dict[str, Any]) -> dict[str, Any] | None:
    """A fresh copy of part `name` of checkpoint `path` as loaded into `template` before, else None."""
    if not _active or not isinstance(path, Path):
        return None
    kept = _kept.get((str(path), name))
    if kept is None or kept[0] != stamp(path) or kept[1] != layout(template):
        return None
    return copy.deepcopy(kept[2])


def remember(path: Any, name: str, template_layout: Any, loaded: dict[str, Any], read_from: Any) -> None:
    """Keep a copy of what part `name` of `path` loaded (forgetting any other checkpoint's parts). `read_from`
    is the checkpoint's `stamp` taken before the read: a checkpoint replaced at the same path since may have
    been read in part from either file, so nothing is kept under the new file's stamp."""
    if not _active or not isinstance(path, Path):
        return
    for key in [key for key in _kept if key[0] != str(path)]:
        del _kept[key]
    if read_from is None or stamp(path) != read_from:
        _kept.pop((str(path), name), None)
        return
    _kept[(str(path), name)] = (read_from, template_layout, copy.deepcopy(loaded))
