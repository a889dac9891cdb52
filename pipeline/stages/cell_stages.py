"""The pipeline's seam for cells: fit the quality and domain models once, then score and assign.

The runner's `post_dedup_stages()` does, after dedup and before tokenization:

    stages = CellStages(config.quality, config.domains, layout.models)
    stages.fit(DeduplicatedSample(layout).documents(stages.sample_bytes))  # once; a rerun reuses it
    steps = stages.steps()               # QualityScorer → DomainAssigner → CellStatsWriter
    stages.collect_stats()               # (StoreManifest.stats, {cell: CellManifest.stats})

Each document then carries `metadata["cell"]` (`cNNqQ`), and the tokenizer writes it there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep

from pipeline.cells.stats import CellStatsWriter, read_cell_stats
from pipeline.cells.domains import DOMAINS_KIND, DomainAssigner, DomainsConfig, domains_stats, fit_domains
from pipeline.cells.fitted_model import model_path
from pipeline.cells.quality import QUALITY_KIND, QualityConfig, QualityScorer, fit_quality, quality_stats

CELL_STATS_DIR = "cell-stats"


class CellStages:
    """Quality buckets and topic domains for one pipeline run; a section that is None or disabled is off."""

    def __init__(self, quality: QualityConfig | None, domains: DomainsConfig | None, model_dir: Path | str):
        self.quality = quality if quality is not None and quality.enabled else None
        self.domains = domains if domains is not None and domains.enabled else None
        self.model_dir = Path(model_dir)

    @property
    def enabled(self) -> bool:
        return self.quality is not None or self.domains is not None

    @property
    def sample_bytes(self) -> int:
        """How much text the runner should sample for fitting (the larger of the two needs)."""
        return max((c.sample_bytes for c in (self.quality, self.domains) if c is not None), default=0)

    def fit(self, documents: Sequence[Document]) -> None:
        """Fit (or reuse) the enabled models into `model_dir`."""
        if self.quality is not None:
            fit_quality(documents, self.quality, self.model_dir)
        if self.domains is not None:
            fit_domains(documents, self.domains, self.model_dir)

    def steps(self) -> list[PipelineStep]:
        """Quality first (the domain assigner names the cell from both), then domains, then cell stats."""
        steps: list[PipelineStep] = []
        if self.quality is not None:
            steps.append(QualityScorer(self.model_dir))
        if self.domains is not None:
            steps.append(DomainAssigner(self.model_dir))
        if steps:
            steps.append(CellStatsWriter(self.model_dir / CELL_STATS_DIR))
        return steps

    def collect_stats(self) -> tuple[dict, dict[str, dict]]:
        """`StoreManifest.stats` and `{cell: CellManifest.stats}`, once the steps have run."""
        stats = store_stats(self.model_dir)
        labels = stats.get("domains", {}).get("labels")
        return stats, read_cell_stats(self.model_dir / CELL_STATS_DIR, labels)


def store_stats(model_dir: Path | str) -> dict:
    """`StoreManifest.stats` entries for the models fitted in `model_dir`: "domains" and/or "quality"."""
    model_dir = Path(model_dir)
    stats: dict = {}
    if model_path(model_dir, DOMAINS_KIND).exists():
        stats["domains"] = domains_stats(model_dir)
    if model_path(model_dir, QUALITY_KIND).exists():
        stats["quality"] = quality_stats(model_dir)
    return stats


def starter_sections(source_names: Sequence[str]) -> str:
    """The `[quality]` and `[domains]` tables for `millrace pipeline init`, every option present.

    Quality needs a reference of good documents: `python-docs` (the standard library's prose)
    when the corpus has it; otherwise the section is written disabled, to be pointed at one.
    """
    q, d, e = QualityConfig(), DomainsConfig(), DomainsConfig().embedding
    has_reference = all(name in source_names for name in q.reference_sources)
    if has_reference:
        choice = (f"# Reference: {', '.join(q.reference_sources)} (found in this corpus: edited prose, the default "
                  "good class).")
    else:
        choice = (f"# Off: no reference source found ({', '.join(q.reference_sources)} is the default). To turn it "
                  f"on, name\n# a source of this corpus whose documents are the quality you want more of (here: "
                  f"{', '.join(source_names) or 'none'}),\n# or list files of such documents, then set enabled = true.")
    return f"""
# [quality] scores each document by how much it resembles a REFERENCE of good documents (the sources
# or files named below) rather than a document drawn at random from the rest of the corpus (DCLM's
# recipe), and splits the scores into buckets q0 (least like the reference) … q{q.buckets - 1} (most like it).
# The reference is the choice that defines "quality" here: pick text you would want the model to
# read more of (edited documentation, curated articles), not the corpus's most common source.
{choice}
[quality]                          # quality buckets q0 (lowest) … q{q.buckets - 1} (highest); cells become cNNqQ
enabled = {str(has_reference).lower()}
buckets = {q.buckets}
scorer = "{q.scorer}"                 # linear | fasttext | package.module:Class
reference_sources = {json.dumps(q.reference_sources)}   # the good class: sources of the quality you want more of
reference_files = []               # more good documents: .jsonl (a "text" per line) or plain text files
sample_size = {q.sample_size}               # documents the classifier is trained and calibrated on
sample_bytes = {q.sample_bytes}          # text sampled (after dedup, by id hash) to fit on
calibration_share = {q.calibration_share}          # held out of training; bucket edges are its score quantiles
calibrate_by = "{q.calibrate_by}"          # language: q0…q{q.buckets - 1} per language (each bucket keeps the
                                   # corpus's language mix; a q{q.buckets - 1} of one language may score below a q0
                                   # of another) | none: one global scale (buckets comparable across languages; their
                                   # language mix may differ)
min_group_documents = {q.min_group_documents}          # calibration documents a language needs for its own edges
seed = {q.seed}

[quality.linear]
features = {q.linear.features}               # hashed word n-gram columns
ngrams = {q.linear.ngrams}
c = {q.linear.c}                          # inverse regularisation strength
max_chars = {q.linear.max_chars}

[domains]                          # topic domains c00 … c(k-1), by embedding and clustering
enabled = true
k = {d.k}                              # domains (the reference run: 40)
fine_centroids = {d.fine_centroids}               # spherical k-means centres merged into k (reference: 5,000)
docs_per_fine_centroid = {d.docs_per_fine_centroid}         # caps fine_centroids on a small sample
min_share = {d.min_share}                   # every domain holds at least this share of documents
label_terms = {d.label_terms}                  # distinctive terms in each domain's label
kmeans_iterations = {d.kmeans_iterations}
embedder = "{d.embedder}"     # hashing-tfidf-svd | use-multilingual-v3 | package.module:Class
sample_size = {d.sample_size}
sample_bytes = {d.sample_bytes}
seed = {d.seed}

[domains.embedding]                # hashed TF-IDF + truncated SVD, offline on CPU
features = {e.features}
dimensions = {e.dimensions}
max_chars = {e.max_chars}
lowercase = {str(e.lowercase).lower()}
erase_languages = {str(e.erase_languages).lower()}             # project out the directions that separate languages
erase_min_documents = {e.erase_min_documents}           # a language's sample documents before its direction is erased
"""
