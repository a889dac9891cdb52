"""Quality bucket edges: quantiles of held-out scores, per language, so buckets do not sort by language.

A classifier trained on one reference source (say `python-docs`, English prose) against the rest
scores English higher than any other language; quantiles over the whole corpus would then fill the
top bucket with English and the bottom ones with everything else. Here the fitting sample is split
by a hash of each document's key: one part trains the classifier, the other (`calibration_share`)
is scored and only fixes the bucket edges, so the edges are not quantiles of the very documents
the classifier has fitted. Edges are quantiles within each calibration group, the document's
language (`metadata["language"]`; a code source's label, e.g. `python`, is a content kind and is
a group as well): `q4` is the top fifth of each language. Groups with fewer than
`min_group_documents` calibration documents share the edges of all such documents pooled (`*`),
which also serves a language the calibration sample never saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash
from datatrove.data import Document

POOLED = "*"
UNKNOWN = "und"


def calibration_group(metadata: Mapping[str, object]) -> str:
    """A document's calibration group: its language label, or `und` when it has none."""
    language = metadata.get("language")
    return str(language) if language else UNKNOWN


def _identity(doc: Document) -> bytes:
    """The pipeline's internal key (`metadata["key"]`, unique) where there is one, else the document id."""
    key = doc.metadata.get("key")
    return key.to_bytes(8, "little") if isinstance(key, int) else doc.id.encode()


def split_for_calibration(
    sample: Sequence[Document], share: float, seed: int
) -> tuple[list[Document], list[Document]]:
    """(training, calibration): a document is held out when the seeded hash of its key falls under `share`."""
    cutoff = int(share * (1 << 64))
    training: list[Document] = []
    calibration: list[Document] = []
    for doc in sample:
        held_out = xxhash.xxh64_intdigest(_identity(doc), seed=seed) < cutoff
        (calibration if held_out else training).append(doc)
    return training, calibration


def bucket_of(scores: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """Bucket b holds scores in [thresholds[b-1], thresholds[b]); q0 below the first threshold."""
    return np.searchsorted(
        np.asarray(thresholds, dtype=np.float64), np.asarray(scores, dtype=np.float64), side="right"
    )


@dataclass(frozen=True)
class BucketEdges:
    """Thresholds per calibration group; `*` holds the pooled edges for small or unseen groups."""

    thresholds: dict[str, list[float]]

    @property
    def buckets(self) -> int:
        return len(self.thresholds[POOLED]) + 1

    def group_edges(self, group: str) -> list[float]:
        return self.thresholds.get(group, self.thresholds[POOLED])

    def bucket(self, scores: np.ndarray, groups: Sequence[str]) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64)
        out = np.empty(len(scores), dtype=np.int64)
        labels = np.asarray(list(groups), dtype=object)
        for group in set(labels.tolist()):
            rows = np.flatnonzero(labels == group)
            out[rows] = bucket_of(scores[rows], self.group_edges(group))
        return out

    def score_ranges(self) -> dict[str, dict[str, list[float]]]:
        """Per group, each bucket's [low, high) score range."""
        ranges = {}
        for group, thresholds in sorted(self.thresholds.items()):
            edges = [0.0, *thresholds, 1.0]
            ranges[group] = {f"q{b}": [edges[b], edges[b + 1]] for b in range(len(edges) - 1)}
        return ranges

    @classmethod
    def fit(
        cls, scores: np.ndarray, groups: Sequence[str], buckets: int, min_group_documents: int, by_group: bool = True
    ) -> BucketEdges:
        """Quantile edges per group with enough documents, and pooled ones for the rest (or all, if too few)."""
        scores = np.asarray(scores, dtype=np.float64)
        labels = np.asarray(list(groups), dtype=object)
        quantiles = [b / buckets for b in range(1, buckets)]

        def edges(values: np.ndarray) -> list[float]:
            return [float(t) for t in np.quantile(values, quantiles)]

        thresholds: dict[str, list[float]] = {}
        if by_group:
            names, counts = np.unique(labels.astype(str), return_counts=True)
            thresholds = {
                str(n): edges(scores[labels == n]) for n, c in zip(names, counts) if c >= min_group_documents
            }
        rest = ~np.isin(labels.astype(str), list(thresholds))
        pooled = scores[rest] if rest.sum() >= min_group_documents else scores
        thresholds[POOLED] = edges(pooled)
        return cls(thresholds)
