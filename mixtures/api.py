"""The mixtures room's Python face: what `millrace mix` does, callable from the demo and tests.

new_revision(home, NewRevision(mixture=..., revision=..., store=..., ...)) -> Path   # `mix new`
build(home, mixture, revision, *, file=None) -> Path          # the manifest's path
plan(home, mixture, revision, *, file=None) -> dict           # `mix plan --json`
diff(home, mixture, a, b) -> dict                             # `mix diff --json`
validate_file(home, path) -> ValidationSummary                # `mix validate --json`
list_revisions(home) -> RevisionListing                       # `mix list --json`
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from millrace.errors import ArtifactError
from millrace.home import Home
from mixtures.build import build, build_result, resolve_named
from mixtures.catalog import built_manifests, revision_files
from mixtures.manifest import read_manifest
from mixtures.new import NewRevision, new_revision
from mixtures.plan import diff_of, plan_of
from mixtures.resolve import manifest_hash, resolve_revision
from mixtures.revision import load_revision


class PhaseSummary(TypedDict):
    name: str
    sequences: int
    steps: int
    cells: int  # cells the phase draws from


class ContinuesSummary(TypedDict):
    revision: str
    at_step: int | None
    manifest_hash: str


class ValidationSummary(TypedDict):
    """`mix validate --json` (and `mix new --json`): a revision file that builds, and what it builds."""

    file: str
    mixture: str
    revision: str
    revision_hash: str
    store: dict[str, object]
    manifest_hash: str
    phases: list[PhaseSummary]
    total_steps: int
    cells: int
    continues: ContinuesSummary | None
    valid: bool


class BuiltOn(TypedDict, total=False):
    """Where a revision is built: the store and manifest, or the error reading a damaged one."""

    store: str
    version: str
    manifest_hash: str
    total_steps: int
    path: str
    error: str


class RevisionEntry(TypedDict):
    file: str
    origin: str
    built: list[BuiltOn]


class MixtureEntry(TypedDict):
    revisions: dict[str, RevisionEntry]


class RevisionListing(TypedDict):
    """`mix list --json`."""

    home: str
    mixtures: dict[str, MixtureEntry]


def plan(home: Home, mixture: str, revision: str, *, file: Path | str | None = None) -> dict[str, Any]:
    """Resolve in memory (nothing is written) and report per cell and phase what is drawn."""
    manifest, _, source, store = resolve_named(home, mixture, revision, file)
    result = plan_of(manifest, manifest_hash(manifest), {c: s.tokens for c, s in store.manifest.cells.items()})
    result["revision_file"] = str(source)
    result["labels"] = store.manifest.stats.domain_labels()
    return result


def diff(home: Home, mixture: str, a: str, b: str) -> dict[str, Any]:
    return diff_of(plan(home, mixture, a), plan(home, mixture, b))


def validate_file(home: Home, path: Path | str) -> ValidationSummary:
    """Every check a build makes, on any revision file, without writing anything."""
    loaded = load_revision(path)
    manifest, _ = resolve_revision(home, loaded, str(path))
    return {
        "file": str(path),
        "mixture": loaded.mixture,
        "revision": loaded.revision,
        "revision_hash": loaded.hash(),
        "store": manifest.store.model_dump(mode="json"),
        "manifest_hash": manifest_hash(manifest),
        "phases": [
            {
                "name": p.name,
                "sequences": p.sequences,
                "steps": p.steps,
                "cells": sum(1 for c in p.counts.values() if c),
            }
            for p in manifest.phases
        ],
        "total_steps": manifest.total_steps,
        "cells": len(manifest.cells),
        "continues": None
        if not manifest.ancestors
        else {
            "revision": manifest.ancestors[0].revision,
            "at_step": manifest.at_step,
            "manifest_hash": manifest.ancestors[0].manifest_hash,
        },
        "valid": True,
    }


def list_revisions(home: Home) -> RevisionListing:
    """Mixtures, their revision files (user's and shipped) and where each is built."""
    mixtures: dict[str, MixtureEntry] = {}
    for entry in revision_files(home):
        builds: list[BuiltOn] = []
        for path in built_manifests(home, entry.mixture, entry.revision):
            try:
                manifest, digest = read_manifest(path)
                builds.append(
                    {
                        "store": manifest.store.name,
                        "version": manifest.store.version,
                        "manifest_hash": digest,
                        "total_steps": manifest.total_steps,
                        "path": str(path),
                    }
                )
            except ArtifactError as exc:
                builds.append({"path": str(path), "error": str(exc)})
        mixtures.setdefault(entry.mixture, {"revisions": {}})["revisions"][entry.revision] = {
            "file": str(entry.path),
            "origin": entry.origin,
            "built": builds,
        }
    return {"home": str(home.root), "mixtures": mixtures}


__all__ = [
    "NewRevision",
    "build",
    "build_result",
    "diff",
    "list_revisions",
    "new_revision",
    "plan",
    "validate_file",
]
