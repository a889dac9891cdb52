"""Build a revision: resolve it and write its manifest next to the store, once.

Idempotent: the same revision and store give byte-identical manifests, and a
second build finds the first and writes nothing. Revision names are immutable:
a file whose meaning changed since a build under the same name is refused. Two
builds at once are serialised by an exclusive lock (`fcntl.flock`) on a lock file
per revision name, and the manifest itself appears by atomic rename, so a reader
sees no manifest or a complete one, never half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
from mixtures.catalog import built_manifests, load_named
from mixtures.manifest import BuiltManifest, manifest_path, read_manifest, write_manifest
from mixtures.resolve import manifest_hash, resolve_revision
from mixtures.revision import Revision
from pipeline.store.format import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildResult:
    path: Path
    manifest: BuiltManifest
    manifest_hash: str
    written: bool  # False when an identical manifest was already there
    revision_file: Path


@contextlib.contextmanager
def revision_lock(home: Home, mixture: str, revision: str) -> Iterator[None]:
    """Exclusive across processes for one revision name (the lock file is never removed)."""
    path = home.revisions / mixture / f".{revision}.build-lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def resolve_named(
    home: Home, mixture: str, revision: str, file: Path | str | None = None
) -> tuple[BuiltManifest, Revision, Path, Store]:
    """Find, load and resolve a revision by name; returns the store it resolved against too."""
    loaded, path = load_named(home, mixture, revision, file)
    manifest, store = resolve_revision(home, loaded, str(path))
    return manifest, loaded, path, store


def build_result(home: Home, mixture: str, revision: str, file: Path | str | None = None) -> BuildResult:
    manifest, loaded, source, _ = resolve_named(home, mixture, revision, file)
    digest = manifest_hash(manifest)
    target = manifest_path(home, manifest.store.name, manifest.store.version, mixture, revision)
    with revision_lock(home, mixture, revision):
        for existing in built_manifests(home, mixture, revision):
            built, built_hash = read_manifest(existing)
            if built.revision_hash != manifest.revision_hash:
                raise ConfigError(
                    f"{source}: revision {loaded.key} was already built from a different file "
                    f"(revision hash {built.revision_hash}, now {manifest.revision_hash}; manifest {existing}); "
                    "a revision name is immutable: save the change as a new revision"
                )
            if existing == target and built_hash != digest:
                raise ConfigError(
                    f"{existing}: built from this revision with different inputs (manifest hash {built_hash}, "
                    f"now {digest}): store {manifest.store.name}/{manifest.store.version} changed in place"
                )
        if target.exists():
            log.debug("mixture %s revision %s already built: %s", mixture, revision, target)
            return BuildResult(target, manifest, digest, False, source)
        written = write_manifest(target, manifest)
    log.debug(
        "built mixture %s revision %s on store %s/%s: %s steps, %s (%s)",
        mixture,
        revision,
        manifest.store.name,
        manifest.store.version,
        manifest.total_steps,
        target,
        written,
    )
    return BuildResult(target, manifest, written, True, source)


def build(home: Home, mixture: str, revision: str, *, file: Path | str | None = None) -> Path:
    """Build (or find, if already built identically) a revision; returns the manifest's path."""
    return build_result(home, mixture, revision, file).path
