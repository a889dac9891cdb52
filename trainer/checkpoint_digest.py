"""Digests of a checkpoint's files: taken when it is written, checked before it is loaded.

DCP reads back whatever bytes it finds: a flipped exponent bit in a weight loads, trains on and
diverges steps later, with exit 0. So `digests.json` (an artifact with its own content hash)
records an xxh3-128 of every file of the checkpoint, and a resume compares them first; a
difference is one line naming the file. The files are shared out over the ranks for both
jobs (DCP's checkpoint directory is on a filesystem every rank sees), so no rank reads it all.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch.distributed as dist
import xxhash

from millrace.artifacts import read_artifact, write_artifact
from millrace.errors import ArtifactError

log = logging.getLogger(__name__)

DIGEST_FILE = "digests.json"
DIGEST_KIND = "millrace.checkpoint-digests"
CHUNK = 1 << 22


def file_digest(path: Path) -> str:
    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return "xxh3_128:" + digest.hexdigest()


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _share(directory: Path) -> list[Path]:
    """This rank's share of the checkpoint's files (every file but the digest file itself)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name != DIGEST_FILE)
    if not _distributed():
        return files
    return files[dist.get_rank() :: dist.get_world_size()]


def _gathered(local: dict[str, str] | list[str]) -> list:
    if not _distributed():
        return [local]
    found: list = [None] * dist.get_world_size()
    dist.all_gather_object(found, local)
    return found


def write_digests(directory: Path) -> None:
    """Digest every file of the checkpoint in `directory` (all ranks, after its files are written)."""
    digests: dict[str, str] = {}
    for part in _gathered({p.name: file_digest(p) for p in _share(directory)}):
        digests.update(part)
    if not _distributed() or dist.get_rank() == 0:
        write_artifact(directory / DIGEST_FILE, DIGEST_KIND, 1, {"files": dict(sorted(digests.items()))})


def verify_digests(directory: Path) -> None:
    """Raise an ArtifactError naming the first file of the checkpoint whose bytes differ from its digest,
    or that is missing; a checkpoint written before digests existed is loaded with a warning."""
    if not (directory / DIGEST_FILE).exists():
        log.warning(
            "%s: no %s (written before checkpoints were digested); loading it unverified", directory, DIGEST_FILE
        )
        return
    recorded = read_artifact(directory / DIGEST_FILE, DIGEST_KIND)["files"]
    problems: list[str] = []
    present = {p.name for p in directory.iterdir() if p.is_file() and p.name != DIGEST_FILE}
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
