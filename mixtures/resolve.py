"""Resolve a revision against a store into a `BuiltManifest`, in memory (writes nothing).

This is where every store-dependent check lives, each failing with one line that
names the revision, phase, field and cell: cells exist and hold at least one
sequence, patterns match something, the epoch cap holds across phases, and no
non-zero weight is rounded to zero samples.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from fractions import Fraction

from millrace.artifacts import content_hash, read_envelope
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from millrace.names import known
from mixtures.apportion import Infeasible, apportion
from mixtures.catalog import load_named
from mixtures.cells import CellTable, is_pattern
from mixtures.lineage import Parent, ancestors_of, check_same_frame, inherited_phases
from mixtures.manifest import (
    DOCUMENT_RUN,
    MANIFEST_KIND,
    MANIFEST_SCHEMA_VERSION,
    Ancestor,
    BuiltManifest,
    ManifestCell,
    ManifestPhase,
    ManifestValidation,
    PinnedShard,
    StoreRef,
    manifest_path,
    read_manifest,
)
from mixtures.revision import PhaseSpec, Revision, StoreSpec
from mixtures.strategies import StrategyError, desired_weights, water_fill
from pipeline.store.format import CELL_KIND, CELL_SCHEMA_VERSION, ShardInfo, Store

log = logging.getLogger(__name__)


def store_versions(home: Home, name: str) -> list[str]:
    """Versions of a store that have a store.json, oldest first (CalVer sorts as text)."""
    return [p.name for p in home.store_versions(name)]


def store_names(home: Home) -> list[str]:
    """Names of the stores under `home` that have at least one version."""
    return sorted({p.parent.name for p in home.store_versions()})


def open_store(home: Home, spec: StoreSpec, where: str) -> Store:
    """The store a revision targets: its pinned version, else the newest; hash checked if pinned."""
    versions = store_versions(home, spec.name)
    if spec.version is None:
        if not versions:
            raise ConfigError(
                f"{where}: field 'store.name': no store {spec.name!r} under {home.stores} "
                "(make one with `millrace pipeline run CONFIG` or `millrace store from-stats FILE`)"
                + known("stores", store_names(home))
            )
        version = versions[-1]
    else:
        if spec.version not in versions:
            found = ", ".join(versions) or "none"
            raise ConfigError(
                f"{where}: field 'store.version': store {spec.name}/{spec.version} not found under {home.stores} "
                f"(versions present: {found})"
            )
        version = spec.version
    store = Store(home.store(spec.name, version))
    if store.name != spec.name or store.version != version:
        raise ArtifactError(
            f"{store.path}/store.json: names store {store.name}/{store.version}, expected {spec.name}/{version}"
        )
    if spec.manifest_hash is not None and spec.manifest_hash != store.manifest_hash:
        raise ConfigError(
            f"{where}: field 'store.manifest_hash': {spec.manifest_hash} differs from {store.path}/store.json's "
            f"{store.manifest_hash} (the store changed since the revision was written)"
        )
    return store


def phase_sequences(tokens: int, seq_len: int, global_batch: int) -> int:
    """The budget in whole batches, rounded half up, at least one batch."""
    steps = max(1, math.floor(Fraction(tokens, seq_len * global_batch) + Fraction(1, 2)))
    return steps * global_batch


@dataclass
class PhaseContext:
    revision: Revision
    phase: PhaseSpec
    source: str

    @property
    def where(self) -> str:
        return f"{self.source}: revision {self.revision.key}: phase {self.phase.name!r}"


def explicit_weights(ctx: PhaseContext, table: CellTable) -> dict[str, Fraction]:
    expanded, unmatched = table.expand(ctx.phase.weights or {})
    if unmatched:
        key = unmatched[0]
        what = "pattern matches no non-empty cell" if is_pattern(key) else "no such cell in the store"
        raise ConfigError(f"{ctx.where}: field 'weights' cell {key!r}: {what}")
    for cell, weight in sorted(expanded.items()):
        if weight > 0 and table.tokens[cell] <= 0:
            raise ConfigError(
                f"{ctx.where}: field 'weights' cell {cell!r}: cell is empty (0 tokens) "
                f"but has weight {float(weight):.6g}"
            )
        if weight > 0 and table.sequences(cell) == 0:
            raise ConfigError(
                f"{ctx.where}: field 'weights' cell {cell!r}: holds {table.tokens[cell]} tokens, fewer than one "
                f"sequence of seq_len + 1 = {table.seq_len + 1}"
            )
    return {cell: weight for cell, weight in expanded.items() if weight > 0}


def strategy_weights(
    ctx: PhaseContext, table: CellTable, capacity: dict[str, int], sequences: int
) -> dict[str, Fraction]:
    phase = ctx.phase
    cells = table.sampleable
    if phase.cells is not None:
        chosen: set[str] = set()
        for key in phase.cells:
            matched = [cell for cell in table.match(key) if table.sequences(cell) > 0]
            if not matched:
                raise ConfigError(f"{ctx.where}: field 'cells' cell {key!r}: matches no non-empty cell")
            chosen.update(matched)
        cells = sorted(chosen)
    try:
        desired = desired_weights(phase.strategy or "", {cell: table.tokens[cell] for cell in cells}, phase.options)
        weights = water_fill(desired, capacity, sequences)
    except StrategyError as exc:
        raise ConfigError(f"{ctx.where}: field 'strategy' ({phase.strategy}): {exc}") from None
    return {cell: weight for cell, weight in weights.items() if weight > 0}


def infeasible_message(
    ctx: PhaseContext,
    exc: Infeasible,
    table: CellTable,
    used: dict[str, int],
    capacity: dict[str, int],
    sequences: int,
) -> str:
    shown = exc.cells[:8]
    more = f" and {len(exc.cells) - len(shown)} more" if len(exc.cells) > len(shown) else ""
    if exc.reason == "tiny":
        detail = ", ".join(f"{c} ({float(exc.shares[c]):.3g} sequences)" for c in shown)
        return (
            f"{ctx.where}: field 'weights' cell {exc.cells[0]!r}: non-zero weights would get no sample in "
            f"{sequences} sequences and can't all be given one: {detail}{more}; raise the phase's tokens or these "
            "weights, or set them to 0"
        )
    cap = ctx.revision.epoch_cap
    detail = ", ".join(
        f"{c} (wants {float(exc.shares[c]):.6g} sequences, {capacity.get(c, 0)} left of "
        f"{table.sequences(c)} x {cap:g} after {used.get(c, 0)} drawn earlier)"
        for c in shown
    )
    return f"{ctx.where}: field 'epoch_cap' cell {exc.cells[0]!r}: passes the epoch cap of {cap:g}: {detail}{more}"


def resolve(revision: Revision, store: Store, source: str, parent: Parent | None = None) -> BuiltManifest:
    """Every check and every number of the build; pure given the revision, the store and the parent
    (resolved against the same store) that a revision with `[continues]` needs."""
    if (revision.continues is None) != (parent is None):
        raise ValueError("resolve needs the parent exactly when the revision continues one")
    table = CellTable({cell: summary.tokens for cell, summary in store.manifest.cells.items()}, revision.seq_len)
    cap = Fraction(revision.epoch_cap)
    limit = {cell: math.floor(cap * table.sequences(cell)) for cell in table.tokens}
    used = dict.fromkeys(table.tokens, 0)
    phases: list[ManifestPhase] = []
    position = 0
    ancestors: list[Ancestor] = []
    if parent is not None and revision.continues is not None:
        phases, position, ancestors = _inherit(revision, parent, store, source, used)
    for phase in revision.phases:
        built = _resolve_phase(PhaseContext(revision, phase, source), table, limit, used, position)
        phases.append(built)
        position += built.sequences
    drawn = _widen_to_drawn(phases, used)
    cells = {cell: pin_cell(store, cell, table, revision, source) for cell in drawn}
    tokenizer = store.manifest.tokenizer
    return BuiltManifest(
        mixture=revision.mixture,
        revision=revision.revision,
        revision_hash=revision.hash(),
        store=StoreRef(
            name=store.name,
            version=store.version,
            manifest_hash=store.manifest_hash,
            stats_only=store.manifest.stats_only,
        ),
        tokenizer_fingerprint=tokenizer.fingerprint if tokenizer else None,
        dtype=store.manifest.dtype,
        eos_id=tokenizer.eos_id if tokenizer else None,
        seed=revision.seed,
        seq_len=revision.seq_len,
        global_batch=revision.global_batch,
        epoch_cap=revision.epoch_cap,
        document_run=document_run(store, parent),
        cells=cells,
        phases=phases,
        total_sequences=position,
        total_steps=position // revision.global_batch,
        ancestors=ancestors,
        validation=pin_validation(store),
    )


def _inherit(
    revision: Revision, parent: Parent, store: Store, source: str, used: dict[str, int]
) -> tuple[list[ManifestPhase], int, list[Ancestor]]:
    """A child's phases up to its `at_step`, taken from its parent (their draws counted in `used`), with the
    position it starts from and its ancestors."""
    assert revision.continues is not None
    tokenizer = store.manifest.tokenizer
    check_same_frame(
        revision,
        parent,
        store.name,
        store.version,
        store.manifest_hash,
        tokenizer.fingerprint if tokenizer else None,
        f"{source}: revision {revision.key}",
    )
    phases = inherited_phases(parent.manifest, revision.continues.at_step)
    for inherited in phases:
        for cell, count in inherited.counts.items():
            used[cell] += count
    position = revision.continues.at_step * revision.global_batch
    return phases, position, ancestors_of(parent, revision.continues.at_step)


def _resolve_phase(
    ctx: PhaseContext, table: CellTable, limit: dict[str, int], used: dict[str, int], position: int
) -> ManifestPhase:
    """One phase's counts within what the epoch cap leaves each cell (its draws added to `used`)."""
    revision, phase = ctx.revision, ctx.phase
    sequences = phase_sequences(phase.tokens, revision.seq_len, revision.global_batch)
    capacity = {cell: max(0, limit[cell] - used[cell]) for cell in table.tokens}
    if phase.weights is not None:
        weights = explicit_weights(ctx, table)
    else:
        weights = strategy_weights(ctx, table, capacity, sequences)
    try:
        counts = apportion(weights, sequences, lower=dict.fromkeys(weights, 1), upper=capacity)
    except Infeasible as exc:
        raise ConfigError(infeasible_message(ctx, exc, table, used, capacity, sequences)) from None
    mass = sum(weights.values(), Fraction(0))
    for cell, count in counts.items():
        used[cell] += count
    return ManifestPhase(
        name=phase.name,
        token_budget=phase.tokens,
        start_position=position,
        sequences=sequences,
        start_step=position // revision.global_batch,
        steps=sequences // revision.global_batch,
        counts=dict(sorted(counts.items())),
        declared_weights={cell: float(weight / mass) for cell, weight in sorted(weights.items())},
    )


def _widen_to_drawn(phases: list[ManifestPhase], used: dict[str, int]) -> list[str]:
    """The cells any phase draws; every phase's counts and weights then name each of them (0 where not drawn)."""
    interleaved = {cell for phase in phases for cell, count in phase.interleaved_counts().items() if count > 0}
    drawn = sorted(cell for cell, count in used.items() if count > 0 or cell in interleaved)
    for phase_index, built in enumerate(phases):
        phases[phase_index] = built.model_copy(
            update={
                "counts": {cell: built.counts.get(cell, 0) for cell in drawn},
                "declared_weights": {cell: built.declared_weights.get(cell, 0.0) for cell in drawn},
            }
        )
    return drawn


def document_run(store: Store, parent: Parent | None) -> int:
    """A parent's run (the shared steps must read alike); else DOCUMENT_RUN, or 1 on a stats-only store, which
    has no documents to order (so its manifests keep their hashes)."""
    if parent is not None:
        return parent.manifest.document_run
    return 1 if store.manifest.stats_only else DOCUMENT_RUN


def pin_cell(store: Store, cell: str, table: CellTable, revision: Revision, source: str) -> ManifestCell:
    """The cell, its shard table pinned by the content hash of its hash-checked cell.json (none if stats-only).

    The shard files themselves are checked by the loader as it reads them, and by `store verify`."""
    summary = store.manifest.cells[cell]
    if store.manifest.stats_only:
        return ManifestCell(
            name=cell,
            available_tokens=summary.tokens,
            documents=summary.documents,
            sequences_available=table.sequences(cell),
            cell_manifest_hash=None,
            shards=0,
        )
    manifest = store.cell(cell)
    cell_json = store.cell_dir(cell) / "cell.json"
    if manifest.tokens != summary.tokens:
        raise ArtifactError(f"{cell_json}: {manifest.tokens} tokens, store.json says {summary.tokens}")
    if store.manifest.dtype is not None and manifest.dtype != store.manifest.dtype:
        raise ArtifactError(f"{cell_json}: dtype {manifest.dtype} differs from store.json's {store.manifest.dtype}")
    return ManifestCell(
        name=cell,
        available_tokens=manifest.tokens,
        documents=manifest.documents,
        sequences_available=table.sequences(cell),
        cell_manifest_hash=(
            summary.manifest_hash or read_envelope(cell_json, CELL_KIND, (CELL_SCHEMA_VERSION,)).content_hash
        ),
        shards=len(manifest.shards.names),
    )


def pin_shards(shards: list[ShardInfo]) -> list[PinnedShard]:
    return [PinnedShard(name=s.name, documents=s.documents, tokens=s.tokens, digest=s.digest) for s in shards]


def pin_validation(store: Store) -> dict[str, ManifestValidation]:
    """Every cell's held-out shards and every external evaluation set, whatever the revision's weights
    (a cell without held-out documents is left out)."""
    if store.manifest.stats_only:
        return {}
    pinned: dict[str, ManifestValidation] = {}
    for cell, summary in sorted(store.manifest.cells.items()):
        if not summary.validation_documents:
            continue
        held = store.cell(cell).validation
        if held.documents != summary.validation_documents:
            raise ArtifactError(
                f"{store.cell_dir(cell) / 'cell.json'}: {held.documents} held-out documents, "
                f"store.json says {summary.validation_documents}"
            )
        pinned[cell] = ManifestValidation(
            name=cell,
            kind="cell",
            directory=f"cells/{cell}",
            documents=held.documents,
            available_tokens=held.tokens,
            bytes=held.bytes,
            shards=pin_shards(held.shards),
        )
    for name in sorted(store.manifest.sets):
        if name in pinned:
            raise ArtifactError(f"{store.path / 'store.json'}: evaluation set {name!r} has a cell's name")
        held = store.eval_set(name).held
        pinned[name] = ManifestValidation(
            name=name,
            kind="set",
            directory=f"sets/{name}",
            documents=held.documents,
            available_tokens=held.tokens,
            bytes=held.bytes,
            shards=pin_shards(held.shards),
        )
    return pinned


def manifest_hash(manifest: BuiltManifest) -> str:
    """The content hash `write_manifest` will record for this manifest."""
    return content_hash(
        {"kind": MANIFEST_KIND, "schema_version": MANIFEST_SCHEMA_VERSION, **manifest.model_dump(mode="json")}
    )


def resolve_revision(
    home: Home, revision: Revision, source: str, seen: tuple[str, ...] = (), version: str | None = None
) -> tuple[BuiltManifest, Store]:
    """Open a revision's store and resolve it, its parents first when it continues one. A revision
    that names no store version takes `version` (its child's), else its parent's, else the newest."""
    spec = revision.store
    if spec.version is None and version is not None:
        spec = spec.model_copy(update={"version": version})
    where = f"{source}: revision {revision.key}"
    store = open_store(home, spec, where) if spec.version is not None else None  # its own errors first
    parent = None
    if revision.continues is not None:
        parent = resolve_parent(home, revision, source, (*seen, revision.revision), spec.version)
        if spec.version is None and spec.name == parent.manifest.store.name:
            spec = spec.model_copy(update={"version": parent.manifest.store.version})
    store = store or open_store(home, spec, where)
    return resolve(revision, store, source, parent), store


def resolve_parent(home: Home, revision: Revision, source: str, seen: tuple[str, ...], version: str | None) -> Parent:
    """The parent in memory (on the child's store version when it names none); its built manifest,
    if there is one, must be what its file resolves to now."""
    assert revision.continues is not None
    where = f"{source}: revision {revision.key}: field 'continues.revision'"
    name = revision.continues.revision
    if name in seen:
        raise ConfigError(f"{where}: {' -> '.join((*seen, name))} is a cycle")
    try:
        loaded, path = load_named(home, revision.mixture, name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    same_store = loaded.store.name == revision.store.name
    manifest, _ = resolve_revision(home, loaded, str(path), seen, version if same_store else None)
    digest = manifest_hash(manifest)
    built = manifest_path(home, manifest.store.name, manifest.store.version, manifest.mixture, manifest.revision)
    if built.exists():
        _, built_hash = read_manifest(built)
        if built_hash != digest:
            raise ConfigError(
                f"{where}: parent {loaded.key}'s built manifest {built} has hash {built_hash}, but "
                f"{path} resolves to {digest} now (the parent or its store changed)"
            )
    return Parent(manifest, digest, str(path))
