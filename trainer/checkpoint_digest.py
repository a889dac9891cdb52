"""Digests of a checkpoint's files: taken when it is written, checked before it is loaded.

DCP reads back whatever bytes it finds: a flipped exponent bit in a weight loads, trains on and
diverges steps later, with exit 0. So `digests.json` (an artifact with its own content hash)
records an xxh3-128 of every file of the checkpoint, and a resume compares them first; a
difference is one line naming the file. The files are shared out over the ranks for both
jobs (DCP's checkpoint directory is on a filesystem every rank sees), so no rank reads it all.
A checkpoint at an fsspec URL (`trainer.run_url.RemoteDir`) is digested and checked the same way, through
its filesystem; there `digests.json` is also the commit: the last object written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import BinaryIO, TypeVar

import torch.distributed as dist
import xxhash

from millrace.artifacts import artifact_bytes, parse_artifact, read_artifact, write_artifact
from millrace.config import StrictModel
from millrace.errors import ArtifactError
from trainer.run_url import RemoteDir

log = logging.getLogger(__name__)

DIGEST_FILE = "digests.json"
DIGEST_KIND = "millrace.checkpoint-digests"
CHUNK = 1 << 22

_Part = TypeVar("_Part")


class CheckpointDigests(StrictModel):
    """digests.json's payload: file name -> its xxh3-128."""

    files: dict[str, str]


def file_digest(path: Path | RemoteDir) -> str:
    digest = xxhash.xxh3_128()
    handle: BinaryIO
    with path.fs.open(path.path, "rb") if isinstance(path, RemoteDir) else open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return "xxh3_128:" + digest.hexdigest()


def _files(directory: Path | RemoteDir) -> list[Path | RemoteDir]:
    """The checkpoint's files, by name, but the digest file itself."""
    if isinstance(directory, RemoteDir):
        return [directory / name for name in directory.files() if name != DIGEST_FILE]
    return [p for p in sorted(directory.iterdir()) if p.is_file() and p.name != DIGEST_FILE]


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _share(directory: Path | RemoteDir) -> list[Path | RemoteDir]:
    """This rank's share of the checkpoint's files (every file but the digest file itself)."""
    files = _files(directory)
    if not _distributed():
        return files
    return files[dist.get_rank() :: dist.get_world_size()]


def _gathered(local: _Part) -> list[_Part]:
    """Every rank's `local`, in rank order (the placeholders are overwritten by the gather)."""
    if not _distributed():
        return [local]
    found = [local] * dist.get_world_size()
    dist.all_gather_object(found, local)
    return found


def write_digests(directory: Path | RemoteDir) -> None:
    """Digest every file of the checkpoint in `directory` (all ranks, after its files are written)."""
    digests: dict[str, str] = {}
    for part in _gathered({p.name: file_digest(p) for p in _share(directory)}):
        digests.update(part)
    if _distributed() and dist.get_rank() != 0:
        return
    payload = CheckpointDigests(files=dict(sorted(digests.items()))).model_dump()
    if isinstance(directory, RemoteDir):
        directory.write_bytes(DIGEST_FILE, artifact_bytes(DIGEST_KIND, 1, payload)[0])
    else:
        write_artifact(directory / DIGEST_FILE, DIGEST_KIND, 1, payload)


def _recorded(directory: Path | RemoteDir) -> dict[str, str] | None:
    """The digests the checkpoint records, or None for one written before checkpoints were digested."""
    if isinstance(directory, RemoteDir):
        if not directory.exists(DIGEST_FILE):
            return None
        raw = directory.read_bytes(DIGEST_FILE)
        return parse_artifact(raw, str(directory / DIGEST_FILE), DIGEST_KIND, CheckpointDigests).files
    if not (directory / DIGEST_FILE).exists():
        return None
    return read_artifact(directory / DIGEST_FILE, DIGEST_KIND, CheckpointDigests).files


def verify_digests(directory: Path | RemoteDir, trust_unverified: bool = False) -> None:
    """Raise an ArtifactError naming the first file of the checkpoint whose bytes differ from its digest,
    or that is missing. A checkpoint without digests is refused (nothing says its bytes are the ones written:
    a run resumed from a damaged one trains on); `trust_unverified` loads it with a warning."""
    recorded = _recorded(directory)
    if recorded is None:
        if not trust_unverified:
            raise ArtifactError(
                f"{directory}: no {DIGEST_FILE}, so its files cannot be verified; pass --trust-unverified to "
                "load it anyway (a checkpoint written before checkpoints were digested), or remove it to resume "
                "from an earlier one"
            )
        log.warning("%s: no %s; loading it unverified (--trust-unverified)", directory, DIGEST_FILE)
        return
    problems: list[str] = []
    present = {p.name for p in _files(directory)}
    if not _distributed() or dist.get_rank() == 0:
        problems += [f"{directory / name}: missing from the checkpoint" for name in sorted(set(recorded) - present)]
        problems += [f"{directory / name}: not in {DIGEST_FILE}" for name in sorted(present - set(recorded))]
    for path in _share(directory):
        if path.name in recorded and file_digest(path) != recorded[path.name]:
            problems.append(
                f"{path}: digest mismatch (recorded {recorded[path.name]}): the checkpoint was "
                f"altered or damaged; remove {directory} to resume from an earlier one"
            )
    problems = [problem for part in _gathered(problems) for problem in part]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ArtifactError(problems[0] + more)
