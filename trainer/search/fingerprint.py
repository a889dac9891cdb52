"""Evidence keyed by content: a cell's fingerprint is what it holds, never its name.

A swarm's rows record each component (a cell, or the merged tail) by a fingerprint of its content: the
tokenizer, the token dtype, and each training and held-out shard's token and document counts and chunk digests,
as the cell's manifest (`pipeline.store.format.CellManifest`) lists them. A new store version that leaves a
cell's shards alone, or a re-bucketing that renames cells without moving documents, keeps the fingerprint; a
cell that gained or lost documents gets a new one. So after either, `fit` reuses the rows whose components all
still exist, names the stranded ones, and mixture reuse (Olmix) re-optimises only the components no usable row
has seen, holding the rest at the prior.
"""

from __future__ import annotations

from dataclasses import dataclass

from millrace.artifacts import content_hash
from pipeline.store.format import Store
from trainer.search.records import TAIL, Component, ProxyRow


def cell_fingerprint(store: Store, cell: str) -> str:
    """The content hash of what `cell` holds (its name, stats and shard file names left out)."""
    manifest = store.cell(cell)
    held = manifest.validation
    return content_hash(
        {
            "tokenizer": manifest.tokenizer_fingerprint,
            "dtype": manifest.dtype,
            "shards": [[s.documents, s.tokens, s.digest] for s in manifest.shards.rows()],
            "held_out": [[s.documents, s.tokens, s.digest] for s in held.shards],
        }
    )


def tail_fingerprint(fingerprints: list[str]) -> str:
    """The merged tail is the set of what its cells hold, whatever their names and order."""
    return content_hash({"tail": sorted(fingerprints)})


def components_of(store: Store, cells: list[str], tail_tokens: int = 0) -> list[Component]:
    """The search's columns over `cells` of `store`: one per cell, cells under `tail_tokens` merged into a tail."""
    tokens = {cell: store.manifest.cells[cell].tokens for cell in cells}
    prints = {cell: cell_fingerprint(store, cell) for cell in cells}
    small = sorted(c for c in cells if tokens[c] < tail_tokens)
    if len(small) < 2:
        small = []
    columns = [
        Component(name=cell, fingerprint=prints[cell], cells=[cell], tokens=tokens[cell])
        for cell in sorted(cells)
        if cell not in small
    ]
    if small:
        columns.append(
            Component(
                name=TAIL,
                fingerprint=tail_fingerprint([prints[c] for c in small]),
                cells=small,
                tokens=sum(tokens[c] for c in small),
            )
        )
    return columns


@dataclass(frozen=True)
class Reuse:
    """Which rows a fit may use against today's components, and what changed since they were trained."""

    usable: list[ProxyRow]
    stranded: list[ProxyRow]
    stranded_fingerprints: list[str]  # what stranded rows trained on that no component holds now
    changed: list[Component]  # components no usable row has seen: reuse re-optimises only these


def match_rows(rows: list[ProxyRow], components: list[Component]) -> Reuse:
    """A row is usable when every component it gave weight to is one of today's (by fingerprint)."""
    known = {c.fingerprint for c in components}
    usable: list[ProxyRow] = []
    stranded: list[ProxyRow] = []
    lost: set[str] = set()
    for row in rows:
        weighted = {w.fingerprint for phase in row.phases for w in phase.weights if w.weight > 0}
        missing = weighted - known
        (stranded if missing else usable).append(row)
        lost |= missing
    seen = {w.fingerprint for row in usable for phase in row.phases for w in phase.weights}
    changed = [c for c in components if c.fingerprint not in seen]
    return Reuse(usable, stranded, sorted(lost), changed)
