"""What a store version's composition page shows: its cells, sources, funnel and built revisions.

Reads artifacts only (store.json, cells/*/cell.json, mixtures/*/*/manifest.json)
and turns them into one JSON-ready dict. Revision-dependent numbers (weights,
counts, epochs) are kept as arrays aligned with `cells`, so five revisions of a
200-cell store stay a few tens of kilobytes inside the page.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from millrace.errors import ArtifactError, MillraceError
from millrace.home import Home
from mixtures.catalog import find_revision_file
from mixtures.manifest import MANIFEST_FILE, BuiltManifest, lineage_of, read_manifest
from mixtures.revision import load_revision
from pipeline.store.format import Store
from pipeline.store.language_mix import bucket_language_mix
from pipeline.store.manifest_records import Counts, Funnel, FunnelStep

log = logging.getLogger(__name__)

GRID_CELL = re.compile(r"^c(\d+)q(\d+)$")


class CellRow(TypedDict):
    """One cell as the composition page shows it."""

    name: str
    domain: int | None  # cNNqQ cells: NN and Q; None for other names
    bucket: int | None
    label: str
    tokens: int
    documents: int
    bytes: int
    score_range: object  # as the pipeline's cell stats give it
    samples: list[dict[str, str]]  # id, source, text
    sources: dict[str, dict[str, int]]  # source -> its documents, tokens, bytes in the cell
    languages: dict[str, int]  # language label -> documents


class SourceRow(TypedDict):
    name: str
    tokens_by_cell: list[int]  # aligned with the cells
    tokens: int
    documents: int


class Share(TypedDict):
    name: str
    share: float


class DomainRow(TypedDict):
    index: int
    label: str
    documents: int
    sources: list[Share]
    languages: list[Share]


class Grid(TypedDict):
    """Domains × buckets, for a store whose cells are all named cNNqQ."""

    domains: list[DomainRow]
    buckets: list[int]


@dataclass(frozen=True)
class BuiltRevision:
    """One built manifest found next to a store version."""

    path: Path
    manifest: BuiltManifest
    manifest_hash: str
    description: str = ""

    @property
    def label(self) -> str:
        return f"{self.manifest.mixture} / {self.manifest.revision}"


@dataclass
class Composition:
    store: Store
    cells: list[CellRow]
    sources: list[SourceRow]
    funnel: list[dict[str, Any]]
    grid: Grid | None
    quality: dict[str, object] | None = None
    not_read: list[dict[str, object]] = field(default_factory=list)
    revisions: dict[str, BuiltRevision] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    # revision key -> the search that proposed it
    proposals: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def has_cell_stats(self) -> bool:
        return not self.store.manifest.stats_only

    def page_data(self) -> dict[str, object]:
        """Everything the page's script needs, JSON-ready."""
        manifest = self.store.manifest
        return {
            "store": {
                "name": manifest.name,
                "version": manifest.version,
                "stats_only": manifest.stats_only,
                "tokens": sum(c["tokens"] for c in self.cells),
                "documents": sum(c["documents"] for c in self.cells),
            },
            "cells": [
                {k: c[k] for k in ("name", "label", "domain", "bucket", "tokens", "documents")} for c in self.cells
            ],
            "grid": self.grid,
            "sources": [{"name": s["name"], "tokens_by_cell": s["tokens_by_cell"]} for s in self.sources],
            "revisions": {
                key: {**revision_data(rev, self.cells), "proposal": self.proposals.get(key)}
                for key, rev in self.revisions.items()
            },
            "stale": self.stale,
        }


def revision_data(built: BuiltRevision, cells: list[CellRow]) -> dict[str, object]:
    """Per phase declared weights and sample counts, and per cell sequences available, aligned with `cells`."""
    manifest = built.manifest
    names = [c["name"] for c in cells]
    available = []
    for cell in cells:
        entry = manifest.cells.get(cell["name"])
        available.append(
            entry.sequences_available if entry is not None else max(0, (cell["tokens"] - 1) // manifest.seq_len)
        )
    return {
        "mixture": manifest.mixture,
        "revision": manifest.revision,
        "label": built.label,
        "description": built.description,
        "manifest_hash": built.manifest_hash,
        "revision_hash": manifest.revision_hash,
        "seed": manifest.seed,
        "seq_len": manifest.seq_len,
        "global_batch": manifest.global_batch,
        "epoch_cap": manifest.epoch_cap,
        "total_sequences": manifest.total_sequences,
        "total_steps": manifest.total_steps,
        "sequences_available": available,
        "at_step": manifest.at_step,
        "lineage": [
            r.model_dump() for r in lineage_of(manifest, built.manifest_hash)
        ],  # which revision draws which steps
        "phases": [
            {
                "name": phase.name,
                "token_budget": phase.token_budget,
                "sequences": phase.sequences,
                "steps": phase.steps,
                "start_step": phase.start_step,
                "revision": phase.revision or manifest.revision,
                "declared": [phase.declared_weights.get(name, 0.0) for name in names],
                "counts": [phase.counts.get(name, 0) for name in names],
            }
            for phase in manifest.phases
        ],
    }


MIX_SHOWN = 3  # the largest sources and languages beside a domain's label


def _mix(counts: dict[str, int]) -> list[Share]:
    """The largest entries as shares of the whole, largest first, with the rest as "other"."""
    total = sum(counts.values())
    if not total:
        return []
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [Share(name=name, share=n / total) for name, n in ordered[:MIX_SHOWN]]
    rest = sum(n for _, n in ordered[MIX_SHOWN:])
    return shown + ([Share(name="other", share=rest / total)] if rest else [])


def _domain_row(cells: list[CellRow], domain: int, label: str) -> DomainRow:
    """A domain's documents by source (cell manifests) and by language label (the pipeline's cell stats)."""
    sources: dict[str, int] = {}
    languages: dict[str, int] = {}
    for cell in cells:
        if cell["domain"] != domain:
            continue
        for source, counts in cell["sources"].items():
            sources[source] = sources.get(source, 0) + int(counts.get("documents", 0))
        for language, documents in cell["languages"].items():
            languages[language] = languages.get(language, 0) + int(documents)
    return {
        "index": domain,
        "label": label,
        "documents": sum(c["documents"] for c in cells if c["domain"] == domain),
        "sources": _mix(sources),
        "languages": _mix(languages),
    }


def _grid(cells: list[CellRow], domain_labels: dict[str, str]) -> Grid | None:
    """Domains × buckets when every cell is named cNNqQ; otherwise None (cells are sources). Each domain
    carries its label and what is in it: its source and language mix, so a label can be checked."""
    if not cells or any(c["domain"] is None for c in cells):
        return None
    domains = {c["domain"] for c in cells if c["domain"] is not None}  # every cell's (narrowed for mypy)
    buckets = {c["bucket"] for c in cells if c["bucket"] is not None}
    return {
        "domains": [_domain_row(cells, d, domain_labels.get(f"c{d:02d}", "")) for d in sorted(domains)],
        "buckets": sorted(buckets),
    }


def _counts(counts: Counts) -> dict[str, int]:
    return counts.model_dump()


def _funnel(funnel: Funnel) -> list[dict[str, Any]]:
    """Steps in order, each with per-source and total received/kept/removed (by reason)."""
    return [_funnel_step(step) for step in funnel.stages]


def _funnel_step(step: FunnelStep) -> dict[str, Any]:
    rows = []
    received, kept = Counts(), Counts()
    totals: dict[str, dict[str, Counts]] = {"removed": {}, "given_back": {}}
    for source, counts in sorted(step.sources.items()):
        rows.append(
            {
                "source": source,
                "received": _counts(counts.received),
                "kept": _counts(counts.kept),
                "removed": {reason: _counts(c) for reason, c in sorted(counts.removed.items())},
            }
        )
        received.add(counts.received)
        kept.add(counts.kept)
        # given back: kept, for a reason of their own (decontamination)
        for group, by_reason in (("removed", counts.removed), ("given_back", counts.given_back)):
            for reason, c in sorted(by_reason.items()):
                totals[group].setdefault(reason, Counts()).add(c)
    removed_all = Counts()
    for c in totals["removed"].values():
        removed_all.add(c)
    languages = {
        lang: {
            "received": c.received.documents,
            "kept": c.kept.documents,
            "removed": {reason: n.documents for reason, n in c.removed.items()},
        }
        for lang, c in sorted(step.languages.items())
    }
    total = {
        "received": _counts(received),
        "kept": _counts(kept),
        **{group: {reason: _counts(c) for reason, c in by.items()} for group, by in totals.items()},
    }
    return {
        "name": step.name,
        "sources": rows,
        "total": total,
        "removed_all": _counts(removed_all),
        "languages": languages,
    }


def _quality(store: Store, languages: int = 8) -> dict[str, object] | None:
    """What the quality score means, and each bucket's language mix as shares (the corpus's first)."""
    quality = store.manifest.stats.quality
    if quality is None:
        return None
    mix = bucket_language_mix(store)
    top = list(mix["corpus"])[:languages]
    rows = []
    for name, row in {"corpus": mix["corpus"], **mix["buckets"]}.items():
        size = sum(row.values())
        shares = [row.get(lang, 0) / size if size else 0.0 for lang in top]
        rows.append({"name": name, "documents": size, "shares": shares, "other": max(0.0, 1 - sum(shares))})
    return {
        "meaning": quality.meaning,
        "good": list(quality.good),
        "other": quality.other,
        "languages": top,
        "rows": rows if mix["buckets"] else [],
    }


def load_composition(store_path: Path) -> Composition:
    """Read a store version and every revision built on it."""
    store = Store(store_path)
    manifest = store.manifest
    domain_labels = manifest.stats.domain_labels()
    cells: list[CellRow] = []
    for name, summary in manifest.cells.items():
        match = GRID_CELL.match(name)
        domain, bucket = (int(match.group(1)), int(match.group(2))) if match else (None, None)
        cell: CellRow = {
            "name": name,
            "domain": domain,
            "bucket": bucket,
            "label": domain_labels.get(f"c{domain:02d}", "") if domain is not None else "",
            "tokens": summary.tokens,
            "documents": summary.documents,
            "bytes": summary.bytes,
            "score_range": None,
            "samples": [],
            "sources": {},
            "languages": {},
        }
        if not manifest.stats_only:
            detail = store.cell(name)
            cell_stats = detail.stats
            cell["label"] = cell_stats.label or cell["label"]
            cell["score_range"] = cell_stats.score_range
            cell["samples"] = [sample.model_dump() for sample in cell_stats.samples or []]
            cell["sources"] = {src: counts.model_dump() for src, counts in sorted(detail.sources.items())}
            cell["languages"] = dict(cell_stats.languages or {})
        cells.append(cell)

    source_names = sorted({src for c in cells for src in c["sources"]} | set(manifest.sources))
    sources: list[SourceRow] = []
    for src in source_names:
        by_cell = [c["sources"].get(src, {}).get("tokens", 0) for c in cells]
        docs = sum(c["sources"].get(src, {}).get("documents", 0) for c in cells)
        if not any(by_cell) and not docs:
            continue
        sources.append({"name": src, "tokens_by_cell": by_cell, "tokens": sum(by_cell), "documents": docs})

    composition = Composition(
        store=store,
        cells=cells,
        sources=sources,
        funnel=_funnel(manifest.funnel),
        grid=_grid(cells, domain_labels),
        quality=_quality(store),
        not_read=[entry.model_dump() for entry in manifest.funnel.not_read],
    )
    _attach_revisions(composition)
    return composition


def revision_description(store_path: Path, manifest: BuiltManifest) -> str:
    """The `description` of the revision file this manifest was built from, when that file is still there
    (under the store's $MILLRACE_HOME, or shipped) and still means the same revision; else ""."""
    try:
        revision = load_revision(find_revision_file(Home.of_store(store_path), manifest.mixture, manifest.revision))
    except MillraceError:
        return ""
    return revision.description if revision.hash() == manifest.revision_hash else ""


def _attach_revisions(composition: Composition) -> None:
    store = composition.store
    found: list[BuiltRevision] = []
    for path in (p / MANIFEST_FILE for p in Home.built_mixtures_in(store.path, MANIFEST_FILE)):
        manifest, digest = read_manifest(path)
        if (manifest.store.name, manifest.store.version) != (store.name, store.version):
            raise ArtifactError(
                f"{path}: built for store {manifest.store.name}/{manifest.store.version}, "
                f"but it lies under {store.name}/{store.version}"
            )
        if manifest.store.manifest_hash != store.manifest_hash:
            log.warning(
                "%s: built against another store.json (%s); shown, marked stale", path, manifest.store.manifest_hash
            )
        found.append(BuiltRevision(path, manifest, digest, revision_description(store.path, manifest)))
    names = [b.manifest.revision for b in found]
    for built in found:
        key = built.manifest.revision
        if names.count(key) > 1:  # the same revision name in two mixtures: qualify it
            key = f"{built.manifest.mixture}/{built.manifest.revision}"
        composition.revisions[key] = built
        if built.manifest.store.manifest_hash != store.manifest_hash:
            composition.stale.append(key)
