"""The pipeline's seam for cells: fit the quality and domain models once, then score and assign.

The runner calls, after dedup and before tokenization:

    fit_cell_models(sample, quality, domains, model_dir)   # once; a rerun reuses the stored fit
    steps = cell_steps(quality, domains, model_dir)        # datatrove steps to insert
    StoreManifest.stats.update(store_stats(model_dir))     # labels and score ranges

Each document then carries `metadata["cell"]` (`cNNqQ`), and the tokenizer writes it there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep

from pipeline.domains import DOMAINS_KIND, DomainAssigner, DomainsConfig, domains_stats, fit_domains
from pipeline.fitted_model import model_path
from pipeline.quality import QUALITY_KIND, QualityConfig, QualityScorer, fit_quality, quality_stats


def cell_stages_enabled(quality: QualityConfig, domains: DomainsConfig) -> bool:
    return quality.enabled or domains.enabled


def sample_size(quality: QualityConfig, domains: DomainsConfig) -> int:
    """How many documents the runner should sample for fitting (the larger of the two needs)."""
    sizes = [c.sample_size for c in (quality, domains) if c.enabled]
    return max(sizes, default=0)


def fit_cell_models(
    documents: Sequence[Document], quality: QualityConfig, domains: DomainsConfig, model_dir: Path
) -> None:
    """Fit (or reuse) the enabled models into `model_dir`."""
    if quality.enabled:
        fit_quality(documents, quality, model_dir)
    if domains.enabled:
        fit_domains(documents, domains, model_dir)


def cell_steps(quality: QualityConfig, domains: DomainsConfig, model_dir: Path) -> list[PipelineStep]:
    """Quality first (the domain assigner names the cell from both), then domains."""
    steps: list[PipelineStep] = []
    if quality.enabled:
        steps.append(QualityScorer(model_dir))
    if domains.enabled:
        steps.append(DomainAssigner(model_dir))
    return steps


def store_stats(model_dir: Path | str) -> dict:
    """`StoreManifest.stats` entries for the models fitted in `model_dir`: "domains" and/or "quality"."""
    model_dir = Path(model_dir)
    stats: dict = {}
    if model_path(model_dir, DOMAINS_KIND).exists():
        stats["domains"] = domains_stats(model_dir)
    if model_path(model_dir, QUALITY_KIND).exists():
        stats["quality"] = quality_stats(model_dir)
    return stats
