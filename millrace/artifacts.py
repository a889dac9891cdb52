"""Artifacts between rooms: JSON files with a kind, a schema version and a content hash.

Every write is atomic (temporary file in the same directory, fsync, rename), so a
reader never sees half a file and a crash never damages what was already there.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeVar, overload

import pydantic

from millrace.errors import NO_SPACE, ArtifactError, first_validation_error

HASH_FIELD = "content_hash"
ENVELOPE_FIELDS = ("kind", "schema_version", HASH_FIELD)  # what every artifact carries around its payload
Payload = TypeVar("Payload", bound=pydantic.BaseModel)
JsonObject = dict[str, pydantic.JsonValue]  # a JSON object whose schema its reader does not need
DISK_FULL_BYTES = 1 << 20  # a short write with less free space than this is a full disk
STALE_TEMPORARY_SECONDS = 600  # a live writer's temporary lasts one write; one this old was left by a killed one


def canonical_json(payload: object) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def content_hash(payload: object) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(payload)).hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask alone must set it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temporary_sibling(path: Path) -> tuple[int, str]:
    """A new temporary file next to `path`, readable as an ordinary file would be under the umask.

    mkstemp creates files 0600; renamed into place they would lock out a teammate, a web
    server or another user's loader, so the mode is widened to what `open()` would give.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    return fd, tmp


def remove_stale_temporaries(directory: Path, older_than: float = STALE_TEMPORARY_SECONDS) -> list[Path]:
    """Remove the `temporary_sibling` files under `directory` that a killed writer left (SIGKILL, a lost node:
    nothing ran to remove them); a live writer's, younger than `older_than` seconds, are left alone."""
    removed = []
    now = time.time()
    for path in directory.rglob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if path.is_file() and now - path.stat().st_mtime > older_than:
                path.unlink()
                removed.append(path)
    return removed


@overload
def atomic_output(path: Path | str, mode: Literal["wb"] = "wb") -> AbstractContextManager[IO[bytes]]: ...
@overload
def atomic_output(path: Path | str, mode: Literal["w"]) -> AbstractContextManager[IO[str]]: ...
@contextlib.contextmanager
def atomic_output(path: Path | str, mode: Literal["wb", "w"] = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of `path` (bytes, or text with mode "w"); on success fsync and rename it into
    place. (IO[Any]: the overloads above say which handle each mode gives.)"""
    path = Path(path)
    fd, tmp = temporary_sibling(path)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        # numpy's `tofile` reports a short write without an errno: the disk is full if it is so while the
        # temporary still holds what was written (once it is removed, the space is free again)
        short_write = isinstance(exc, OSError) and exc.errno is None and not isinstance(exc, shutil.Error)
        full = short_write and shutil.disk_usage(path.parent).free < DISK_FULL_BYTES
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno in NO_SPACE and not exc.filename:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc  # a write names no file: name it
        if full:
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({exc})", str(path)) from exc
        raise


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    with atomic_output(path, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: Path | str, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def artifact_bytes(
    kind: str, schema_version: int, payload: Mapping[str, object], compact: bool = False
) -> tuple[bytes, str]:
    """`payload` as the bytes of an artifact of `kind`, and its content hash (for a writer that is not a local
    file, such as an object store). `compact`: one line, for an artifact of long number lists that indenting
    would put one number a line (the hash is the same either way)."""
    body: dict[str, object] = {"kind": kind, "schema_version": schema_version, **payload}
    body.pop(HASH_FIELD, None)
    digest = content_hash(body)
    body[HASH_FIELD] = digest
    indent, separators = (None, (",", ":")) if compact else (1, None)
    text = json.dumps(body, indent=indent, separators=separators, sort_keys=True, ensure_ascii=False)
    return text.encode() + b"\n", digest


def write_artifact(
    path: Path | str, kind: str, schema_version: int, payload: Mapping[str, object], compact: bool = False
) -> str:
    """Write `payload` as an artifact of `kind`; returns its content hash."""
    data, digest = artifact_bytes(kind, schema_version, payload, compact)
    atomic_write_bytes(path, data)
    return digest


@dataclass(frozen=True)
class Envelope:
    """An artifact read and checked (kind, schema version, content hash); its payload stays schemaless JSON
    until `model` types it, for the few readers that want the hash or the raw fields (a pin, a rewrite)."""

    where: str  # the file or object it was read from, for messages
    kind: str
    schema_version: int
    content_hash: str
    payload: JsonObject  # the fields its writer gave, envelope stripped

    def model(self, model: type[Payload]) -> Payload:
        """The payload validated by its schema `model`; a mismatch is an ArtifactError naming the file."""
        return validated(model, self.payload, f"{self.where}: not a valid {self.kind} artifact")

    def pinned(self, expected: str | None, pinned_by: str, remedy: str = "") -> Envelope:
        """This artifact, refused where its hash is not the one `pinned_by` (a store.json, a manifest) recorded."""
        if expected is not None and self.content_hash != expected:
            raise ArtifactError(
                f"{self.where}: hash {self.content_hash} differs from {pinned_by} ({expected})"
                + (f"; {remedy}" if remedy else "")
            )
        return self


def read_envelope(path: Path | str, kind: str, schema_versions: tuple[int, ...] = (1,)) -> Envelope:
    """Read and check an artifact; any problem is an ArtifactError that names the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing {kind} artifact") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: unreadable {kind} artifact ({exc})") from None
    return parse_envelope(raw, str(path), kind, schema_versions)


def parse_envelope(raw: bytes, where: str, kind: str, schema_versions: tuple[int, ...] = (1,)) -> Envelope:
    """Check an artifact's bytes (read from a file or an object store); problems name `where`."""
    try:
        body = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{where}: unreadable {kind} artifact ({exc})") from None
    if not isinstance(body, dict) or body.get("kind") != kind:
        found = body.get("kind") if isinstance(body, dict) else type(body).__name__
        raise ArtifactError(f"{where}: expected a {kind} artifact, found {found!r}")
    version = body.get("schema_version")
    if version not in schema_versions:
        raise ArtifactError(f"{where}: {kind} schema version {version!r} is not one of {list(schema_versions)}")
    recorded = body.pop(HASH_FIELD, None)
    if recorded != content_hash(body):
        raise ArtifactError(f"{where}: content hash mismatch (recorded {recorded}); the file was altered or damaged")
    payload = {k: v for k, v in body.items() if k not in ENVELOPE_FIELDS}
    return Envelope(where, kind, version, recorded, payload)


def read_artifact(
    path: Path | str, kind: str, model: type[Payload], schema_versions: tuple[int, ...] = (1,)
) -> Payload:
    """Read and check an artifact of `kind`, as its schema `model`; any problem is an ArtifactError naming the
    file (and the field)."""
    return read_envelope(path, kind, schema_versions).model(model)


def parse_artifact(
    raw: bytes, where: str, kind: str, model: type[Payload], schema_versions: tuple[int, ...] = (1,)
) -> Payload:
    """`read_artifact` for bytes read from elsewhere (an object store); problems name `where`."""
    return parse_envelope(raw, where, kind, schema_versions).model(model)


def validated(model: type[Payload], data: object, where: str) -> Payload:
    """`data`, an artifact's JSON, as a `model`, strictly (`millrace.config.StrictModel`'s rule: checked as the
    JSON it is, so an object is a fine dataclass but "256" is no number); a mismatch is an ArtifactError naming
    `where` and the field (the first error)."""
    try:
        return model.model_validate_json(json.dumps(data), strict=True)
    except pydantic.ValidationError as exc:
        raise ArtifactError(f"{where}: {first_validation_error(exc)}") from None
