"""Document embeddings for topic domains: hashed TF-IDF projected by a truncated SVD (LSA).

Why this method (measured on the embedded corpus, see the domains note in the README):
it runs offline on CPU with nothing to download, embeds thousands of documents per
second per core, and separates the corpus's sources as well as a vocabulary TF-IDF does.
Hashing (scikit-learn's `HashingVectorizer`) makes the featurisation stateless, so a task
on another machine needs only the small fitted arrays below, never a vocabulary.

Fitted state, stored as plain arrays (no pickles, so a file is readable by any version):

    embedder.json         the settings and shapes (inside the domains model artifact)
    embedder-columns.npy  int64, the hash columns seen while fitting (all others project to 0)
    embedder-idf.npy      float32, inverse document frequency of those columns
    embedder-svd.npy      float32 [dimensions, columns], the SVD's components

Embedding a text: hashed term counts → sublinear TF × IDF → L2-normalise → project → L2-normalise.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import pydantic
import scipy.sparse as sp
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.preprocessing import normalize

from millrace.artifacts import atomic_output, sha256_file
from millrace.config import StrictModel
from millrace.errors import ArtifactError

log = logging.getLogger(__name__)

TOKEN_PATTERN = r"(?u)\b\w\w+\b|[^\w\s]+"
ARRAYS = ("columns", "idf", "svd")


class EmbeddingConfig(StrictModel):
    """How documents become vectors; stored with the model so assignment embeds exactly as fitting did."""

    method: Literal["hashing-tfidf-svd"] = "hashing-tfidf-svd"
    features: int = pydantic.Field(1 << 18, ge=1 << 10, le=1 << 24, description="hash columns")
    dimensions: int = pydantic.Field(64, ge=2, le=1024, description="SVD components")
    max_chars: int = pydantic.Field(20_000, ge=100, description="characters of a document that are embedded")
    lowercase: bool = True


class TextEmbedder:
    """A fitted hashing + TF-IDF + SVD embedding; `transform` gives unit-length float64 rows."""

    def __init__(self, config: EmbeddingConfig, columns: np.ndarray, idf: np.ndarray, svd: np.ndarray):
        self.config = config
        self.columns = np.asarray(columns, dtype=np.int64)
        # stored as float32; computed in float64 so that no BLAS blocking or thread count can move a result
        self.idf = np.asarray(idf, dtype=np.float32)
        self.svd = np.asarray(svd, dtype=np.float32)
        self._svd64 = self.svd.astype(np.float64)
        self._position = np.full(config.features, -1, dtype=np.int64)
        self._position[self.columns] = np.arange(len(self.columns))
        self._hasher = HashingVectorizer(
            n_features=config.features,
            alternate_sign=False,
            norm=None,
            lowercase=config.lowercase,
            token_pattern=TOKEN_PATTERN,
            dtype=np.float32,
        )

    @property
    def dimensions(self) -> int:
        return int(self.svd.shape[0])

    def _weighted(self, texts: Sequence[str]) -> sp.csr_matrix:
        counts = self._hasher.transform([text[: self.config.max_chars] for text in texts])
        # keep the fitted columns, renumbered compactly (cheaper than scipy's column fancy-indexing)
        position = self._position[counts.indices]
        kept = position >= 0
        rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))[kept]
        weights = (1.0 + np.log(counts.data[kept].astype(np.float64))) * self.idf[position[kept]]  # sublinear tf × idf
        weighted = sp.csr_matrix((weights, (rows, position[kept])), shape=(counts.shape[0], len(self.columns)))
        return normalize(weighted, copy=False)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions))
        return normalize(np.asarray(self._weighted(texts) @ self._svd64.T), copy=False)

    @classmethod
    def fit(cls, texts: Sequence[str], config: EmbeddingConfig, seed: int) -> "TextEmbedder":
        """Fit IDF and SVD on `texts`; only hash columns that occur there are kept."""
        hasher = HashingVectorizer(
            n_features=config.features, alternate_sign=False, norm=None,
            lowercase=config.lowercase, token_pattern=TOKEN_PATTERN, dtype=np.float32,
        )
        counts = hasher.transform([text[: config.max_chars] for text in texts]).tocsc()
        columns = np.flatnonzero(np.diff(counts.indptr)).astype(np.int64)
        counts = counts[:, columns].tocsr()
        tfidf = TfidfTransformer(sublinear_tf=True).fit(counts)
        weighted = tfidf.transform(counts)
        dimensions = min(config.dimensions, max(1, min(weighted.shape) - 1))
        # ARPACK is deterministic given the seed and, on a few thousand rows, faster than randomized SVD.
        svd = TruncatedSVD(dimensions, algorithm="arpack", random_state=seed).fit(weighted)
        components = svd.components_.astype(np.float32)
        # ARPACK's sign is arbitrary: fix it so the largest weight of each component is positive.
        signs = np.sign(components[np.arange(dimensions), np.abs(components).argmax(axis=1)])
        components *= signs[:, None]
        log.info("embedding: %d documents, %d hash columns, %d dimensions", len(texts), len(columns), dimensions)
        return cls(config, columns, tfidf.idf_.astype(np.float32), components)

    def save(self, directory: Path) -> dict[str, str]:
        """Write the arrays; returns file name → sha256 for the model artifact to pin."""
        hashes = {}
        for name in ARRAYS:
            path = Path(directory) / f"embedder-{name}.npy"
            with atomic_output(path) as handle:
                np.save(handle, getattr(self, name), allow_pickle=False)
            hashes[path.name] = sha256_file(path)
        return hashes

    @classmethod
    def load(cls, directory: Path, config: EmbeddingConfig) -> "TextEmbedder":
        arrays = {}
        for name in ARRAYS:
            path = Path(directory) / f"embedder-{name}.npy"
            try:
                arrays[name] = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise ArtifactError(f"{path}: cannot read embedding array ({exc})") from None
        return cls(config, **arrays)
