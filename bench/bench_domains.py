"""Domains and quality: embed + assign throughput per core, fitting time, and the embedding choice.

Everything runs on one core (BLAS and OpenMP pools limited to one thread) on about a thousand
documents from four plainly different local sources (code, prose, man pages, licences).

- embed + assign (`DomainAssigner`: hashed TF-IDF → SVD → nearest fine centre → domain) and
  quality scoring (`QualityScorer`) in documents/s/core, against a plain scikit-learn
  `TfidfVectorizer.transform` of the same documents measured in the same run;
- fitting both models on the corpus, against a one-minute budget (the demo must stay short);
- the embedding choice: purity of the domains against the source labels for our hashed
  TF-IDF + SVD against a vocabulary TF-IDF + SVD and hashed TF-IDF without SVD.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from bench.result import Result

REPEATS = 3


def _purity(predicted, truth) -> float:
    best: dict = {}
    for (domain, _), count in Counter(zip(predicted, truth)).items():
        best[domain] = max(best.get(domain, 0), count)
    return sum(best.values()) / len(truth)


def _rate(run, documents: int) -> float:
    """Documents per second, best of REPEATS (the machine is shared)."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return documents / best


def _copies(corpus):
    return [type(d)(text=d.text, id=d.id, metadata=dict(d.metadata)) for d in corpus]


def _alternative_purity(vectors, truth, k: int, fine: int, seed: int) -> float:
    """The same spherical k-means + Ward merge as pipeline.cells.domains, on another embedding."""
    vectors = normalize(vectors)
    kmeans = KMeans(fine, n_init=1, random_state=seed).fit(vectors)
    centroids = normalize(kmeans.cluster_centers_)
    nearest = np.asarray((vectors @ centroids.T)).argmax(axis=1)
    merge = AgglomerativeClustering(n_clusters=k, linkage="ward").fit(centroids).labels_
    return _purity(merge[nearest], truth)


def main() -> list[Result]:
    from pipeline.stages.cell_stages import CellStages
    from pipeline.cells.domains import DomainAssigner, DomainModel, DomainsConfig
    from pipeline.cells.quality import QualityConfig, QualityScorer
    from tests.domains.local_corpus import plainly_different_sources

    corpus = plainly_different_sources()
    texts = [d.text for d in corpus]
    truth = [d.metadata["source"] for d in corpus]
    results = []
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        domains_config = DomainsConfig()
        stages = CellStages(QualityConfig(reference_sources=["prose"]), domains_config, Path(tmp))
        start = time.perf_counter()
        stages.fit(corpus)
        fit_seconds = time.perf_counter() - start

        baseline = TfidfVectorizer(sublinear_tf=True).fit(texts)
        tfidf_rate = _rate(lambda: baseline.transform(texts), len(texts))
        assigner = DomainAssigner(Path(tmp))
        assign_rate = _rate(lambda: list(assigner.run(iter(_copies(corpus)))), len(texts))
        scorer = QualityScorer(Path(tmp))
        score_rate = _rate(lambda: list(scorer.run(iter(_copies(corpus)))), len(texts))
        results += [
            Result("embed + assign domain (1 core)", assign_rate, tfidf_rate, "plain TfidfVectorizer.transform",
                   "docs/s"),
            Result("quality score + bucket (1 core)", score_rate, tfidf_rate, "plain TfidfVectorizer.transform",
                   "docs/s"),
            Result(f"fit quality + domains on {len(texts)} docs", fit_seconds, 60.0, "one-minute budget", "s",
                   higher_is_better=False, target=1.0),
        ]

        model = DomainModel.load(Path(tmp))
        ours = _purity(model.assign(texts), truth)
        fine = max(domains_config.k, min(domains_config.fine_centroids,
                                         len(texts) // domains_config.docs_per_fine_centroid))
        dims = domains_config.embedding.dimensions
        vocabulary = TfidfVectorizer(sublinear_tf=True, min_df=2).fit_transform(texts)
        vocabulary_svd = TruncatedSVD(dims, algorithm="arpack", random_state=0).fit_transform(vocabulary)
        results.append(Result("domain purity vs sources (ours: hashed TF-IDF + SVD)", ours,
                              _alternative_purity(vocabulary_svd, truth, domains_config.k, fine, 0),
                              "vocabulary TF-IDF + SVD", "purity"))
        results.append(Result("domain purity vs sources (ours: hashed TF-IDF + SVD)", ours,
                              _alternative_purity(vocabulary, truth, domains_config.k, fine, 0),
                              "TF-IDF without SVD", "purity"))
    return results


if __name__ == "__main__":
    for result in main():
        print(result.line())
