"""A rung's revision: the ladder's revision scaled to the rung's token budget and batch.

The phases keep their share of the budget and their weights exactly: the base revision
is resolved against its store once (so strategy weights are the ones its own build
declares), and each phase's declared per-cell weights become the rung revision's
explicit weights. The build's largest-remainder apportionment then realises each cell
within one sequence of its share in every phase. Rung revisions are ordinary revisions of
the mixture (`$MILLRACE_HOME/mixtures/<mixture>/<revision>.<ladder>.<rung>.toml`), built
by the mixtures room like any other, so `mix plan` and the composition page show them.
"""

from __future__ import annotations

from pathlib import Path

from millrace.artifacts import atomic_write_text
from millrace.errors import ConfigError
from millrace.home import Home
from mixtures.build import build, resolve_named
from mixtures.revision import Revision, load_revision, parse_revision, revision_to_toml


def rung_revision_name(revision: str, ladder: str, rung: str) -> str:
    return f"{revision}.{ladder}.{rung}"


def scaled_revision(home: Home, mixture: str, revision: str, name: str, tokens: int, batch: int) -> Revision:
    """The revision `mixture/revision` with `tokens` in all, split over its phases in its own proportions."""
    manifest, loaded, source, store = resolve_named(home, mixture, revision)
    total = sum(phase.token_budget for phase in manifest.phases)
    data = loaded.model_dump(mode="json", exclude_none=True)
    data.update({
        "revision": name, "global_batch": batch,
        "description": f"{mixture}/{revision} scaled to {tokens:,} tokens in batches of {batch} (ladder rung)",
        "store": {"name": store.name, "version": store.version, "manifest_hash": store.manifest_hash},
        "phases": [{"name": phase.name, "tokens": max(1, round(tokens * phase.token_budget / total)),
                    "weights": {cell: w for cell, w in phase.declared_weights.items() if w > 0}}
                   for phase in manifest.phases],
    })
    return parse_revision(data, f"{source} scaled for rung {name}")


def write_rung_revision(home: Home, revision: Revision, header: str) -> Path:
    """Write the rung revision once; an existing file with another meaning is refused (names are immutable)."""
    path = home.revisions / revision.mixture / f"{revision.revision}.toml"
    if path.exists():
        existing = load_revision(path)
        if existing.hash() != revision.hash():
            raise ConfigError(f"{path}: rung revision {revision.key} exists with different weights or budget "
                              "(the ladder's rules, revision or store changed); rename the ladder to re-plan it")
        return path
    atomic_write_text(path, revision_to_toml(revision, header))
    return path


def build_rung_revision(home: Home, mixture: str, revision: str, ladder: str, rung: str, tokens: int,
                        batch: int) -> tuple[str, Path]:
    """Write and build the rung's revision; returns its name and built manifest."""
    name = rung_revision_name(revision, ladder, rung)
    scaled = scaled_revision(home, mixture, revision, name, tokens, batch)
    write_rung_revision(home, scaled, f"Ladder {ladder}, rung {rung}: {mixture}/{revision} scaled to {tokens:,} "
                                      "tokens (written by `millrace ladder run`; do not edit).")
    return name, build(home, mixture, name)
