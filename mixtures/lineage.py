"""Lineage: a revision that continues its parent's schedule from `at_step` (a mid-run mixture swap).

The child's manifest is the parent's schedule cut at `at_step` followed by the child's
own phases, so the loader needs nothing new to make the steps before the switch the
parent's exactly: the cut phase keeps the parent's interleaving (`ManifestPhase.prefix_of`)
and each cell's draws keep counting across the switch, so its permutation cursor, its
epochs and the epoch cap run over the whole lineage. A chain works the same way: the
parent's manifest already holds its own parent's steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from millrace.errors import ArtifactError, ConfigError
from mixtures.interleave import Interleaver
from mixtures.manifest import Ancestor, BuiltManifest, ManifestPhase
from mixtures.revision import Revision


@dataclass(frozen=True)
class Parent:
    """A parent revision resolved against the child's store, with the hash its manifest has."""

    manifest: BuiltManifest
    manifest_hash: str
    source: str  # the parent's revision file


def inherited_phases(parent: BuiltManifest, at_step: int) -> list[ManifestPhase]:
    """The parent's phases covering steps [0, at_step), the last one cut at `at_step`."""
    stop = at_step * parent.global_batch
    phases: list[ManifestPhase] = []
    for phase in parent.phases:
        if phase.start_position >= stop:
            break
        own = phase.revision is None
        update: dict[str, object] = {"revision": parent.revision} if own else {}
        if own:
            update["name"] = f"{parent.revision}/{phase.name}"
        if phase.start_position + phase.sequences > stop:
            update.update(cut_phase(phase, stop - phase.start_position, parent.global_batch))
        phases.append(phase.model_copy(update=update))
    return phases


def cut_phase(phase: ManifestPhase, sequences: int, global_batch: int) -> dict[str, object]:
    """The fields of `phase` cut after its first `sequences` positions (the interleaving kept whole)."""
    full = phase.interleaved_counts()
    names = sorted(full)  # the interleaving depends only on the order of the cells with a count
    prefix = Interleaver([full[name] for name in names]).prefix_counts(sequences)
    counts = {name: int(count) for name, count in zip(names, prefix)}
    return {
        "prefix_of": dict(full),
        "sequences": sequences,
        "steps": sequences // global_batch,
        "counts": {cell: counts.get(cell, 0) for cell in phase.counts},
    }


def check_same_frame(
    revision: Revision,
    parent: Parent,
    store_name: str,
    store_version: str,
    store_hash: str,
    tokenizer: str | None,
    where: str,
) -> None:
    """Store, tokenizer, seed, seq_len and global batch must be the parent's: one line naming the difference."""
    built = parent.manifest
    other = f"parent {built.mixture}/{built.revision} ({parent.source})"
    pairs = [
        ("store", f"{store_name}/{store_version}", f"{built.store.name}/{built.store.version}"),
        ("store.manifest_hash", store_hash, built.store.manifest_hash),
        ("store tokenizer", tokenizer, built.tokenizer_fingerprint),
        ("seed", revision.seed, built.seed),
        ("seq_len", revision.seq_len, built.seq_len),
        ("global_batch", revision.global_batch, built.global_batch),
    ]
    for field, mine, theirs in pairs:
        if mine != theirs:
            raise ConfigError(
                f"{where}: field {field!r}: {mine} differs from {other}'s {theirs}; "
                "a revision that continues another keeps its store, tokenizer, seed, seq_len and "
                "global batch"
            )
    at_step = revision.continues.at_step if revision.continues else 0
    if not 0 < at_step < built.total_steps:
        raise ConfigError(
            f"{where}: field 'continues.at_step': {at_step} is not a step of {other}'s schedule "
            f"(steps 1..{built.total_steps - 1} can start the switch)"
        )
    pinned = revision.continues.manifest_hash if revision.continues else None
    if pinned is not None and pinned != parent.manifest_hash:
        raise ConfigError(
            f"{where}: field 'continues.manifest_hash': {pinned} differs from {other}'s manifest "
            f"hash {parent.manifest_hash} (the parent changed since this revision was written)"
        )


def ancestors_of(parent: Parent, at_step: int) -> list[Ancestor]:
    """The child's ancestors, parent first: each with the leading steps the child shares with it."""
    built = parent.manifest
    first = Ancestor(
        revision=built.revision,
        revision_hash=built.revision_hash,
        manifest_hash=parent.manifest_hash,
        shared_steps=at_step,
        at_step=at_step,
    )
    return [first] + [a.model_copy(update={"shared_steps": min(a.shared_steps, at_step)}) for a in built.ancestors]


def check_lineage_resume(manifest: BuiltManifest, digest: str, resumed_hash: str, step: int, where: str) -> None:
    """A run drawn from manifest `resumed_hash` up to `step` may go on with `manifest` only if that is an
    ancestor and `step` is at most the steps they share; anything else is a change of mixture."""
    shared = manifest.shared_steps_with(resumed_hash)
    if shared is None:
        raise ArtifactError(
            f"{where}: state is from manifest {resumed_hash}, but {manifest.mixture}/{manifest.revision} is {digest} "
            "and does not continue it; refusing to resume a different mixture"
        )
    if step > shared:
        ancestor = next(a for a in manifest.ancestors if a.manifest_hash == resumed_hash)
        raise ConfigError(
            f"{where}: state is at step {step} of {manifest.mixture}/{ancestor.revision}, past step {shared} where "
            f"{manifest.revision} stops sharing its steps (steps {shared}..{step - 1} drew {ancestor.revision}'s "
            f"weights, not {manifest.revision}'s); resume from a checkpoint at step {shared} or earlier"
        )
