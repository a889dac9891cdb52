"""Topic domains: spherical k-means with many fine centroids, merged into k domains.

Fitting (once per store, on a sample; see `fit_domains`):
1. embed the sample (`pipeline.cells.embedding`: the configured embedder, by default hashed
   TF-IDF + SVD with the directions that separate languages erased; unit vectors);
2. scikit-learn `KMeans` on the unit vectors with `fine_centroids` centres (spherical:
   the centres are re-normalised and documents go to the centre of largest cosine);
3. Ward agglomeration of the fine centres, its dendrogram cut into `k` domains that each hold
   at least `min_share` of the sample (a split that would leave a smaller side is not made);
4. domains numbered by size (c00 the largest), each labelled by its most distinctive terms
   (class-based TF-IDF over the documents of the sources that make up the domain's majority), never a
   stop word of a language of the sample
   (`pipeline.cells.labels`).

Assignment (`DomainAssigner`, a datatrove step, so it scales out with the pipeline) embeds a
document, takes its nearest fine centre and maps it through the stored merge map: the same
text always lands in the same domain, on any executor and in any run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from datatrove.data import Document
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.preprocessing import normalize

from millrace.artifacts import atomic_output
from millrace.errors import ArtifactError, ConfigError
from pipeline.cells.embedding import Embedder, LanguageErasingEmbedder, fit_embedder, load_embedder
from pipeline.cells.fitted_model import (
    FitRecord,
    FittedModelStep,
    read_model,
    reusable_fit,
    sample_fingerprint,
    sorted_sample,
    write_model,
)
from pipeline.cells.labels import distinctive_terms
from pipeline.cells.languages import sample_languages
from pipeline.cells.stats import cell_name
from pipeline.config import DomainsConfig
from pipeline.store.manifest_records import DomainStats

log = logging.getLogger(__name__)

DOMAINS_KIND = "millrace.domains"
CENTROIDS_FILE = "domains-centroids.npy"


class DomainsFit(FitRecord):
    """domains.json: fine centres merged into k domains (`merge_map[fine] = domain`), labels and sample
    shares by domain key (`c00`)."""

    k: int
    k_configured: int | None = None  # what the config asked for (a small sample gives fewer); older fits lack it
    fine_centroids: int
    merge_map: list[int]
    labels: dict[str, str]
    sample_shares: dict[str, float]


class DomainModel:
    """The fitted domains: embedder, fine centres, the merge map from fine centre to domain, labels."""

    def __init__(
        self,
        embedder: Embedder | LanguageErasingEmbedder,
        centroids: np.ndarray,
        merge_map: np.ndarray,
        labels: list[str],
    ):
        self.embedder = embedder
        self.centroids = np.asarray(centroids, dtype=np.float32)
        self._centroids64 = self.centroids.astype(np.float64)
        self.merge_map = np.asarray(merge_map, dtype=np.int64)
        self.labels = labels

    @property
    def k(self) -> int:
        return len(self.labels)

    def fine(self, vectors: np.ndarray) -> np.ndarray:
        """Nearest fine centre by cosine (ties to the lowest index, as `argmax` does)."""
        if not len(vectors):
            return np.zeros(0, dtype=np.int64)
        nearest: np.ndarray = np.argmax(vectors @ self._centroids64.T, axis=1)
        return nearest

    def assign(self, texts: Sequence[str]) -> np.ndarray:
        domains: np.ndarray = self.merge_map[self.fine(self.embedder.transform(texts))]
        return domains

    @classmethod
    def load(cls, directory: Path) -> DomainModel:
        body = read_model(directory, DOMAINS_KIND, DomainsFit)
        config = DomainsConfig.model_validate(body.settings)
        embedder = load_embedder(config.embedder, directory, config.embedding)
        try:
            centroids = np.load(Path(directory) / CENTROIDS_FILE, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"{Path(directory) / CENTROIDS_FILE}: cannot read ({exc})") from None
        labels = [body.labels[domain_key(d)] for d in range(body.k)]
        return cls(embedder, centroids, np.asarray(body.merge_map), labels)


def domain_key(domain: int) -> str:
    return f"c{domain:02d}"


def _merge(centroids: np.ndarray, weights: np.ndarray, k: int, min_docs: float) -> np.ndarray:
    """Fine centre → domain: cut Ward's dendrogram of the fine centres into k clusters of enough documents.

    Going down from the root, the merge that joined two clusters at the greatest Ward distance
    is undone first (which, without the size condition, is exactly scikit-learn's cut into k);
    a merge is only undone when both sides hold at least `min_docs` sample documents, so a
    small outlying group stays with its nearest neighbours instead of becoming a domain.
    """
    n = len(centroids)
    if n <= 1 or k <= 1:
        return np.zeros(n, dtype=np.int64)
    tree = AgglomerativeClustering(n_clusters=1, linkage="ward", compute_full_tree=True, compute_distances=True).fit(
        centroids
    )
    children, heights = tree.children_, tree.distances_
    size = np.r_[weights, np.zeros(n - 1)]
    for merge_index, (left, right) in enumerate(children):
        size[n + merge_index] = size[left] + size[right]

    def splittable(node: int) -> bool:
        return node >= n and min(size[children[node - n][0]], size[children[node - n][1]]) >= min_docs

    clusters = [2 * n - 2]  # the root
    while len(clusters) < k:
        candidates = [node for node in clusters if splittable(node)]
        if not candidates:
            log.warning(
                "domains: only %d domains of at least %.0f sample documents (k=%d)", len(clusters), min_docs, k
            )
            break
        node = max(candidates, key=lambda c: (heights[c - n], -c))
        clusters.remove(node)
        clusters += [int(child) for child in children[node - n]]
    merge = np.empty(n, dtype=np.int64)
    for domain, root in enumerate(clusters):
        stack = [root]
        while stack:
            node = stack.pop()
            if node < n:
                merge[node] = domain
            else:
                stack += [int(child) for child in children[node - n]]
    return merge


def _renumber_by_size(merge: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Domains numbered by documents, largest first (ties: lowest fine centre first); empty ones dropped."""
    domains = np.unique(merge)
    sizes = {d: weights[merge == d].sum() for d in domains}
    first = {d: int(np.flatnonzero(merge == d)[0]) for d in domains}
    order = sorted(domains, key=lambda d: (-sizes[d], first[d]))
    renumber = {old: new for new, old in enumerate(order)}
    return np.asarray([renumber[d] for d in merge], dtype=np.int64)


def domains_for(sample_documents: int, config: DomainsConfig) -> int:
    """The domains a sample can give: `k`, or fewer (with a notice) when the sample has fewer than
    `docs_per_fine_centroid` documents per domain; an empty sample is a one-line error that says what to do."""
    if sample_documents == 0:
        raise ConfigError(
            "domains: no document reached the sample the domains are fitted on (every document was "
            "removed before it, see the funnel); give the pipeline documents that pass its filters, "
            "or set domains.enabled = false"
        )
    fits = max(1, min(config.k, sample_documents // config.docs_per_fine_centroid))
    if fits < config.k:
        log.warning(
            "domains: %d documents in the sample give %d domains of at least %d documents, not domains.k = "
            "%d (a small corpus; set domains.k = %d to silence this)",
            sample_documents,
            fits,
            config.docs_per_fine_centroid,
            config.k,
            fits,
        )
    return fits


def fit_domains(documents: Sequence[Document], config: DomainsConfig, out_dir: Path) -> None:
    """Fit the domains on a sample of documents and store the model under `out_dir` (reused when unchanged)."""
    out_dir = Path(out_dir)
    settings = config.model_dump(mode="json")
    fingerprint = sample_fingerprint(documents)
    if reusable_fit(out_dir, DOMAINS_KIND, DomainsFit, settings, fingerprint):
        return
    sample = sorted_sample(documents)
    if len(sample) > config.sample_size:
        keep = np.sort(np.random.default_rng(config.seed).choice(len(sample), config.sample_size, replace=False))
        sample = [sample[i] for i in keep]
    k_wanted = domains_for(len(sample), config)
    texts = [doc.text for doc in sample]
    languages = [doc.metadata.get("language") for doc in sample]
    embedder, vectors = fit_embedder(config.embedder, texts, languages, config.embedding, config.seed)
    fine_count = max(k_wanted, min(config.fine_centroids, len(sample) // config.docs_per_fine_centroid))
    kmeans = KMeans(fine_count, n_init=1, max_iter=config.kmeans_iterations, random_state=config.seed).fit(vectors)
    centroids = normalize(kmeans.cluster_centers_).astype(np.float32)
    model = DomainModel(embedder, centroids, np.zeros(fine_count, dtype=np.int64), [])
    fine = model.fine(vectors)
    weights = np.bincount(fine, minlength=fine_count).astype(np.float64)
    merge = _merge(centroids, weights, k_wanted, config.min_share * len(sample))
    merge = _renumber_by_size(merge, weights)
    k = int(merge.max()) + 1
    domains = merge[fine]
    sources = [doc.metadata.get("source") for doc in sample]
    terms = distinctive_terms(texts, domains, k, config.label_terms, sample_languages(languages), sources)
    labels = {domain_key(d): " ".join(terms[d]) or domain_key(d) for d in range(k)}
    shares = {domain_key(d): round(float(np.mean(domains == d)), 6) for d in range(k)}

    out_dir.mkdir(parents=True, exist_ok=True)
    files = embedder.save(out_dir)
    with atomic_output(out_dir / CENTROIDS_FILE) as handle:
        np.save(handle, centroids, allow_pickle=False)
    files.append(CENTROIDS_FILE)
    fit = DomainsFit(
        settings=settings,
        sample_fingerprint=fingerprint,
        sample_documents=len(sample),
        k=k,
        k_configured=config.k,
        fine_centroids=fine_count,
        merge_map=merge.tolist(),
        labels=labels,
        sample_shares=shares,
    )
    write_model(out_dir, DOMAINS_KIND, fit, files)
    log.info("domains: %d fine centres merged into %d domains: %s", fine_count, k, labels)


def domains_stats(model_dir: Path) -> DomainStats:
    """`StoreManifest.stats.domains`: the number of domains (and the configured k, when a small sample gave
    fewer) and each one's label."""
    fit = read_model(model_dir, DOMAINS_KIND, DomainsFit)
    configured = fit.k_configured if fit.k_configured != fit.k else None
    return DomainStats(k=fit.k, labels=fit.labels, k_configured=configured)


class DomainAssigner(FittedModelStep[DomainModel]):
    """Sets `metadata["domain"]` (int) and `metadata["cell"]` (`cNNqQ`, or `cNN` without a quality bucket)."""

    name = "🧭 domain assigner"
    type = "🗂️ - CELLS"
    model_class = DomainModel

    def apply(self, batch: list[Document]) -> None:
        with self.track_time(unit="batch"):
            domains = self.model.assign([doc.text for doc in batch])
        for doc, domain in zip(batch, domains):
            doc.metadata["domain"] = int(domain)
            doc.metadata["cell"] = cell_name(int(domain), doc.metadata.get("quality_bucket"))
            self.stat_update(domain_key(int(domain)))
        self.stat_update("assigned", value=len(batch))
