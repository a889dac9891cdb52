"""The pipeline's seam for cells: fit the quality and domain models once, then score and assign.

The runner's `post_dedup_steps()` does, after dedup and before tokenization:

    cells = CellSteps(config.quality, config.domains, layout.models)
    cells.fit(DeduplicatedSample(config, layout).documents(cells.sample_bytes))  # once; a rerun reuses it
    steps = cells.steps()                # QualityScorer → DomainAssigner → CellStatsWriter
    cells.collect_stats()                # (StoreManifest.stats, {cell: CellManifest.stats})

Each document then carries `metadata["cell"]` (`cNNqQ`), and the tokenizer writes it there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep

from pipeline.cells.domains import DOMAINS_KIND, DomainAssigner, domains_stats, fit_domains
from pipeline.cells.fitted_model import model_path
from pipeline.cells.quality import QUALITY_KIND, QualityScorer, fit_quality, quality_stats
from pipeline.cells.stats import CellStatsWriter, read_cell_stats
from pipeline.config import DomainsConfig, QualityConfig
from pipeline.store.manifest_records import StoreStats

CELL_STATS_DIR = "cell-stats"


class CellSteps:
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

    def collect_stats(self) -> tuple[StoreStats, dict[str, dict[str, object]]]:
        """`StoreManifest.stats` and `{cell: CellManifest.stats}`, once the steps have run."""
        stats = store_stats(self.model_dir)
        return stats, read_cell_stats(self.model_dir / CELL_STATS_DIR, stats.domain_labels() or None)


def store_stats(model_dir: Path | str) -> StoreStats:
    """`StoreManifest.stats` for the models fitted in `model_dir`: its domains and/or quality buckets."""
    model_dir = Path(model_dir)
    return StoreStats(
        domains=domains_stats(model_dir) if model_path(model_dir, DOMAINS_KIND).exists() else None,
        quality=quality_stats(model_dir) if model_path(model_dir, QUALITY_KIND).exists() else None,
    )
