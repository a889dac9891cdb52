"""The built mixture manifest: the immutable contract between `mixtures/` and `loader/`.

Lives at `stores/<name>/<version>/mixtures/<mixture>/<revision>/manifest.json`
(kind "millrace.mixture-manifest"); its content hash is the manifest hash that the
loader's state and the trainer's checkpoints pin.

Semantics the loader relies on:
- A sample is `seq_len + 1` tokens: a cell's documents are concatenated (EOS already
  after each; in shard order, each block of `document_block` documents of a shard
  reordered by a keyed permutation of its runs of `document_run` documents per epoch) and cut
  into windows of `seq_len` tokens that overlap by one, so `sequences_available = (available_tokens - 1) // seq_len`.
- Phases are contiguous in global sample positions; phase p covers positions
  [start_position, start_position + sequences). `sequences` is a multiple of
  `global_batch`, so no batch straddles two phases; step s covers positions
  [s * global_batch, (s + 1) * global_batch).
- In phase p, cell c receives exactly `counts[c]` samples. A cell's draws are
  numbered across phases (phase 0's first); draw k of cell c is epoch
  k // sequences_available, sequence perm_{seed, c, epoch}(k % sequences_available).
- Lineage (a revision that continues a parent from `at_step`): the manifest holds the
  parent's phases up to `at_step` (named `<revision>/<phase>`, `revision` set), then its
  own. A parent phase cut at `at_step` keeps the parent's full counts in `prefix_of`: its
  cell order is that phase's interleaving, cut after `sequences` positions, so those steps
  are the parent's exactly. Draws keep counting across the switch, so each cell's
  permutation cursor and epochs carry on. `ancestors` pins every ancestor's manifest hash
  and the number of leading steps this manifest shares with it. The lineage fields are
  left out of the file when empty, so manifests without lineage keep their hashes.
- `validation` pins the held-out shards of every store cell that has them, and every
  external evaluation set, whatever the weights (a zero-weight cell is still evaluated).
  They are never drawn for training; the loader's `ValidationSequences` reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pydantic

from millrace.artifacts import read_envelope, write_artifact
from millrace.config import StrictModel
from millrace.errors import ArtifactError
from millrace.home import Home
from millrace.names import known

MANIFEST_KIND = "millrace.mixture-manifest"
MANIFEST_SCHEMA_VERSION = 2
# documents per run in manifests built now: a few contiguous reads per window (loader.shards)
DOCUMENT_RUN = 16
MANIFEST_FILE = "manifest.json"


class PinnedShard(StrictModel):
    """One held-out shard (validation and evaluation sets are few shards, pinned one by one)."""

    name: str  # path prefix relative to its directory
    documents: int
    tokens: int
    digest: str  # of the shard's `.xxh` chunk-digest sidecar


class ManifestCell(StrictModel):
    name: str
    available_tokens: int
    documents: int
    sequences_available: int
    # The content hash of cells/<cell>/cell.json, which holds the cell's shard table (names, counts,
    # digests): the shards are pinned through it, so the manifest stays small at any shard count.
    cell_manifest_hash: str | None  # None for a stats-only store
    shards: int  # how many shards that table lists; 0 for a stats-only store


class ManifestValidation(StrictModel):
    """Held-out tokens of one cell (kind "cell") or one external evaluation set (kind "set")."""

    name: str
    kind: Literal["cell", "set"]
    directory: str  # relative to the store version: cells/<cell> or sets/<name>
    documents: int
    available_tokens: int
    bytes: int
    shards: list[PinnedShard]


class ManifestPhase(StrictModel):
    name: str
    token_budget: int  # as declared in the revision
    start_position: int
    sequences: int
    start_step: int
    steps: int
    counts: dict[str, int]  # sequences per cell; sums exactly to `sequences`
    declared_weights: dict[str, float]  # after pattern expansion
    # The revision of the lineage that drew this phase; None: this manifest's own revision.
    revision: str | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)
    # A parent's phase cut short: that phase's full counts, whose interleaving this phase's is a prefix of.
    prefix_of: dict[str, int] | None = pydantic.Field(default=None, exclude_if=lambda v: v is None)

    def interleaved_counts(self) -> dict[str, int]:
        return self.prefix_of if self.prefix_of is not None else self.counts


class StoreRef(StrictModel):
    name: str
    version: str
    manifest_hash: str
    stats_only: bool


class Ancestor(StrictModel):
    """A revision this one continues (directly or through others) and the steps they share."""

    revision: str
    revision_hash: str
    manifest_hash: str
    shared_steps: int  # steps [0, shared_steps) are this ancestor's exactly
    at_step: int  # where the ancestor's direct child took over from it


class BuiltManifest(StrictModel):
    mixture: str
    revision: str
    revision_hash: str
    store: StoreRef
    tokenizer_fingerprint: str | None
    dtype: str | None
    eos_id: int | None
    seed: int
    seq_len: int
    global_batch: int
    epoch_cap: float
    document_block: int = 1024  # documents per block the loader reorders in each epoch (loader.shards)
    # consecutive documents the loader keeps together when it reorders a block (loader.shards); 1, the
    # per-document shuffle of manifests built before runs, is left out of the file so their hashes hold
    document_run: int = pydantic.Field(default=1, ge=1, exclude_if=lambda v: v == 1)
    cells: dict[str, ManifestCell]
    phases: list[ManifestPhase]
    total_sequences: int
    total_steps: int
    validation: dict[str, ManifestValidation] = pydantic.Field(default_factory=dict, exclude_if=lambda v: not v)
    ancestors: list[Ancestor] = pydantic.Field(default_factory=list, exclude_if=lambda v: not v)  # parent first

    @property
    def at_step(self) -> int | None:
        """The first step drawn from this revision's own weights; None without lineage."""
        return self.ancestors[0].at_step if self.ancestors else None

    def shared_steps_with(self, manifest_hash: str) -> int | None:
        """Leading steps shared with the manifest of that hash (an ancestor); None if unrelated."""
        return next((a.shared_steps for a in self.ancestors if a.manifest_hash == manifest_hash), None)

    def revision_ranges(self) -> list[StepRange]:
        """Which revision of the lineage draws which steps, in step order."""
        ranges: list[StepRange] = []
        for phase in self.phases:
            name = phase.revision or self.revision
            stop = phase.start_step + phase.steps
            if ranges and ranges[-1].revision == name:
                ranges[-1] = ranges[-1].model_copy(update={"stop_step": stop})
            else:
                ranges.append(StepRange(revision=name, start_step=phase.start_step, stop_step=stop))
        return ranges

    def cell_plan(self, steps: int | None = None) -> dict[str, float]:
        """The per-cell plan: the sequences each cell draws in steps [0, steps), the whole plan when None; every
        cell of the manifest is listed. Phases are contiguous in sample positions, so the first `steps` steps
        consume every earlier phase whole and the current one in part; inside a phase the loader interleaves
        cells exactly, so a part-consumed phase gives each cell its share (within one sample of what is drawn).
        Whole phases count exactly (integers as floats). The mixtures plan, the trainer's run record and the
        training page's expected counts all read it, so they cannot disagree."""
        consumed = self.total_sequences if steps is None else steps * self.global_batch
        drawn = dict.fromkeys(self.cells, 0.0)
        for phase in self.phases:
            part = min(max(consumed - phase.start_position, 0), phase.sequences)
            for cell, count in phase.counts.items():
                share = count if part == phase.sequences else count * part / phase.sequences
                drawn[cell] = drawn.get(cell, 0.0) + share
        return drawn


class StepRange(StrictModel):
    """The steps [start_step, stop_step) one revision of a lineage draws."""

    revision: str
    start_step: int
    stop_step: int


class LineageRange(StepRange):
    """A lineage's step range with the hash of the manifest it was drawn from."""

    manifest_hash: str


def lineage_of(manifest: BuiltManifest, digest: str) -> list[LineageRange]:
    """The step ranges of each revision of the lineage, with the manifest hash each was drawn from."""
    hashes = {a.revision: a.manifest_hash for a in manifest.ancestors} | {manifest.revision: digest}
    return [LineageRange(**r.model_dump(), manifest_hash=hashes[r.revision]) for r in manifest.revision_ranges()]


def manifest_path(home: Home, store_name: str, store_version: str, mixture: str, revision: str) -> Path:
    return home.built_mixture(store_name, store_version, mixture, revision) / MANIFEST_FILE


def store_dir_of(path: Path) -> Path:
    """The store version directory that a manifest at `path` belongs to."""
    return Home.store_of_built_mixture(path)


def write_manifest(path: Path, manifest: BuiltManifest) -> str:
    return write_artifact(path, MANIFEST_KIND, MANIFEST_SCHEMA_VERSION, manifest.model_dump(mode="json"))


def read_manifest(path: Path | str) -> tuple[BuiltManifest, str]:
    """Returns the manifest and its content hash; refuses unknown schemas and altered files."""
    envelope = read_envelope(path, MANIFEST_KIND, (MANIFEST_SCHEMA_VERSION,))
    return envelope.model(BuiltManifest), envelope.content_hash


def find_manifest(home: Home, mixture: str, revision: str, store: str | None = None) -> Path:
    """Locate a built revision under `home`: the newest store version wins; two store names are ambiguous."""
    found = [p / MANIFEST_FILE for p in home.built_mixtures(MANIFEST_FILE, store, mixture, revision)]
    if not found:
        built = sorted({p.name for p in home.built_mixtures(MANIFEST_FILE, store, mixture)})
        raise ArtifactError(
            f"no built manifest for mixture {mixture!r} revision {revision!r} under {home.stores} "
            f"(run `millrace mix build {mixture} --revision {revision}`)"
            + known("built revisions", built, f"of {mixture}")
        )
    names = sorted({store_dir_of(p).parent.name for p in found})
    if len(names) > 1:
        raise ArtifactError(
            f"mixture {mixture!r} revision {revision!r} is built on several stores ({', '.join(names)}): name one"
        )
    return max(found, key=lambda p: store_dir_of(p).name)
