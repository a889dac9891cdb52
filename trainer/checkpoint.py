"""Checkpoints with `torch.distributed.checkpoint`: model, optimiser, router biases, RNG, loader, step.

Layout under the run directory:

    checkpoints/step-00000120/      one DCP checkpoint (every rank writes its shards), and
                                    digests.json: a digest of each file (`trainer.checkpoint_digest`)
    checkpoints/.tmp-step-00000130/ a checkpoint being written; renamed when complete

A checkpoint appears under its final name only after every rank has finished
writing (write to a temporary directory, digest, barrier, rename), so a crash mid-write
leaves the previous checkpoints intact; a write that fails (a full disk) removes its
temporary directory. Only the newest `keep` are kept; a resume checks the digests first.

What a checkpoint holds is a mapping of name -> torch `Stateful` part (`trainer.state`):
the model (whose router biases are buffers, so they travel with it), the optimiser,
the trainer's counters, the loader's position and the RNG. Nothing is keyed by rank:
DCP reshards the model and optimiser, so a checkpoint loads at any world size.

A run kept at an fsspec URL (`trainer.run_url`) has its checkpoints there, written and read with DCP's
fsspec writer and reader; an object store has no rename, so there a checkpoint is written under its final
name and committed by `digests.json`, the last object written: a directory without one is never listed.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.stateful import Stateful

from millrace import remote_calls
from millrace.errors import ArtifactError, ConfigError, disk_full_cause
from millrace.remote_calls import WRITE_LIMITS
from trainer import checkpoint_memo as memo
from trainer.checkpoint_digest import DIGEST_FILE, write_digests
from trainer.run_url import RemoteDir

Place = Path | RemoteDir  # a checkpoint directory: local, or at an fsspec URL

log = logging.getLogger(__name__)

PREFIX = "step-"
TMP_PREFIX = ".tmp-step-"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def list_checkpoints(directory: Place) -> list[tuple[int, Place]]:
    if isinstance(directory, RemoteDir):
        return _committed(directory)
    if not directory.exists():
        return []
    found: list[tuple[int, Place]] = []
    for path in directory.iterdir():
        if path.is_dir() and path.name.startswith(PREFIX) and path.name[len(PREFIX) :].isdigit():
            found.append((int(path.name[len(PREFIX) :]), path))
    return sorted(found)


def _committed(directory: RemoteDir) -> list[tuple[int, Place]]:
    """The checkpoints at a URL whose digests.json (their commit) is there: one listing call."""
    directory.fs.invalidate_cache()  # another process (another node) may have written since
    found: list[tuple[int, Place]] = []
    for marker in directory.fs.glob(f"{directory.path}/{PREFIX}*/{DIGEST_FILE}"):
        name = marker.rstrip("/").split("/")[-2]
        if name[len(PREFIX) :].isdigit():
            found.append((int(name[len(PREFIX) :]), directory / name))
    return sorted(found, key=lambda item: item[0])


def latest_checkpoint(directory: Place) -> tuple[int, Place] | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


@contextlib.contextmanager
def single_process_is_intended() -> Iterator[None]:
    """DCP warns at every save and load of a run without a process group that it assumes one process;
    a one-process run (CPU, one GPU) is meant, so the warning is one line repeated for nothing."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def save(directory: Place, step: int, parts: Mapping[str, Stateful], keep: int) -> Place:
    """Write checkpoint `step` of every part atomically and prune all but the newest `keep`."""
    if isinstance(directory, RemoteDir):
        return _save_remote(directory, step, parts, keep)
    final = directory / checkpoint_name(step)
    tmp = directory / f"{TMP_PREFIX}{step:08d}"
    if _rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    _barrier()
    try:
        with single_process_is_intended():
            dcp.save({name: part.state_dict() for name, part in parts.items()}, checkpoint_id=str(tmp))
        _barrier()
        write_digests(tmp)
    except BaseException:  # DCP's CheckpointException is a BaseException; a full disk must not leave the files
        if _rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    _barrier()
    if _rank() == 0:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for _, old in list_checkpoints(directory)[:-keep]:
            shutil.rmtree(str(old), ignore_errors=True)
        log.info("checkpoint %s written", final)
    _barrier()
    return final


def _save_remote(directory: RemoteDir, step: int, parts: Mapping[str, Stateful], keep: int) -> Place:
    """`save` at a URL: DCP's fsspec writer under the final name, then the digests, written last, commit it."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter  # lazy: heavy (torch)

    final = directory / checkpoint_name(step)
    if _rank() == 0:
        final.remove()  # an unfinished write of this step (never committed), or the step written again
    _barrier()
    try:
        writer = FsspecWriter(final.url, **final.bounded_options)
        with single_process_is_intended():
            dcp.save({name: part.state_dict() for name, part in parts.items()}, storage_writer=writer)
        _barrier()
        write_digests(final)
    except BaseException as exc:  # as above: nothing half-written is left to list
        if _rank() == 0:
            final.remove()
        if isinstance(exc, Exception) and not isinstance(exc, ArtifactError) and disk_full_cause(exc) is None:
            cause = remote_calls.describe_failure(exc.__cause__ or exc, WRITE_LIMITS)
            raise ArtifactError(f"{final}: checkpoint write failed ({cause})") from exc
        raise
    _barrier()
    if _rank() == 0:
        for _, old in list_checkpoints(directory)[:-keep]:
            if isinstance(old, RemoteDir):
                old.remove()
        log.info("checkpoint %s written", final)
    _barrier()
    return final


def _reader(path: Place) -> dict[str, Any]:
    """DCP's `checkpoint_id` for a local checkpoint, its fsspec `storage_reader` for one at a URL."""
    if isinstance(path, RemoteDir):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader  # lazy: heavy (torch)

        return {"storage_reader": FsspecReader(path.url, **path.bounded_options)}
    return {"checkpoint_id": str(path)}


def saved_keys(path: Place, prefix: str) -> list[str]:
    """The keys under `prefix` (dotted) that checkpoint `path` holds, from its metadata alone."""
    try:
        reader = _reader(path).get("storage_reader") or dcp.FileSystemReader(str(path))
        keys = reader.read_metadata().state_dict_metadata
    except Exception as exc:  # a missing or damaged .metadata file; the user needs the path
        raise ArtifactError(f"{path}: cannot read checkpoint metadata ({type(exc).__name__}: {exc})") from None
    return sorted(key[len(prefix) :] for key in keys if key.startswith(prefix))


def load(path: Place, parts: Mapping[str, Stateful]) -> None:
    """Load `path` into every part in place, one part after another in the mapping's order, so that a
    cheap part (the trainer's recorded settings) refuses a mismatched checkpoint before any tensor is read."""
    for name, part in parts.items():
        state = {name: part.state_dict()}
        kept = memo.recall(path, name, state)
        if kept is not None:  # a fleet worker's copy of the checkpoint it loaded last (`trainer.checkpoint_memo`)
            state = kept
        else:
            template, read_from = memo.layout(state), memo.stamp(path)
            _read(path, name, state)
            memo.remember(path, name, template, state, read_from)
        try:
            part.load_state_dict(state[name])
        except (ArtifactError, ConfigError) as exc:
            raise type(exc)(f"{path}: {exc}") from None


def _read(path: Place, name: str, state: dict[str, Any]) -> None:
    """Part `name` of checkpoint `path` into `state`, in place (DCP)."""
    try:
        with single_process_is_intended():
            dcp.load(state, **_reader(path))
    except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
        if interrupted(exc):  # Ctrl-C while DCP reads: a stop, not a damaged checkpoint
            raise KeyboardInterrupt from None
        raise ArtifactError(f"{path}: cannot load checkpoint part '{name}' ({describe(exc)})") from None


def interrupted(exc: BaseException) -> bool:
    """DCP wraps a Ctrl-C that lands inside it in a `CheckpointException` naming the rank's KeyboardInterrupt."""
    failures = exc.failures if isinstance(exc, CheckpointException) else {}
    return any(isinstance(inner, KeyboardInterrupt) for inner, _ in failures.values())


def describe(exc: BaseException) -> str:
    """One line for a checkpoint error: DCP's `CheckpointException` carries every rank's traceback."""
    if isinstance(exc, CheckpointException) and exc.failures:
        rank, (inner, _) = min(exc.failures.items())
        exc = inner
        where = f" on rank {rank}"
    else:
        where = ""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}{where}: {lines[0] if lines else ''}"
