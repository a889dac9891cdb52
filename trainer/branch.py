"""A run branched from another run's checkpoint: `train --from-run SOURCE` (the mixture search's proxies,
which all start from one shared checkpoint, each under its own run name).

The source run must have trained this run's revision or one it continues (`mixtures.lineage`); its newest
checkpoint at or before the last step the two revisions share is loaded (model, optimiser, router biases,
counters, loader position, RNG), and the new run takes the source's records up to that step
(`trainer.loop.adopt_history`). Anything else -- no such run, no checkpoint in reach, an unrelated
revision -- is a one-line `ConfigError` before anything is written.
"""

from __future__ import annotations

from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from mixtures.manifest import BuiltManifest
from trainer import checkpoint as ckpt
from trainer.records import read_run


def source_manifest_hash(home: Home, source: str, option: str) -> str:
    """The manifest the source run last trained on, from its run.json."""
    try:
        record = read_run(home.run(source))
    except ArtifactError:
        raise ConfigError(f"{option} {source}: no run {source!r} in {home.runs} (no readable run.json)") from None
    if record.revisions:
        return record.revisions[-1].manifest_hash
    if record.manifest_hash is None:
        raise ConfigError(f"{option} {source}: run {source!r}'s run.json records no manifest hash")
    return record.manifest_hash


def shared_steps(manifest: BuiltManifest, digest: str, source_hash: str, stop: int) -> int | None:
    """How many leading steps this run may take from a source on manifest `source_hash`: all of them on the
    same manifest, the shared steps on an ancestor, None when the two are unrelated."""
    if source_hash == digest:
        return stop
    return manifest.shared_steps_with(source_hash)


def branch_checkpoint(
    home: Home, source: str, run: str, places: ckpt.Place, manifest: BuiltManifest, digest: str, stop: int
) -> tuple[int, ckpt.Place]:
    """The source run's newest checkpoint this run can start from; refuses with one line naming why not."""
    option = "--from-run"
    if source == run:
        raise ConfigError(f"{option} {source}: a run cannot branch from itself; use --resume to continue it")
    found = ckpt.list_checkpoints(places)
    if not found:
        raise ConfigError(f"{option} {source}: run {source!r} has no checkpoint in {places}")
    limit = shared_steps(manifest, digest, source_manifest_hash(home, source, option), stop)
    if limit is None:
        raise ConfigError(
            f"{option} {source}: run {source!r} trained on a revision that {manifest.mixture}/{manifest.revision} "
            "neither is nor continues; branch from a run of its own revision or of one it continues"
        )
    usable = [(step, place) for step, place in found if step <= limit]
    if not usable:
        steps = ", ".join(str(step) for step, _ in found)
        raise ConfigError(
            f"{option} {source}: run {source!r}'s checkpoints are at steps {steps}, none at or before step {limit} "
            f"where {manifest.mixture}/{manifest.revision} stops sharing its steps"
        )
    return usable[-1]
