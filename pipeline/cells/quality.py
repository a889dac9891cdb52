"""Document quality: a pluggable scorer, and buckets q0 (lowest) … q{B-1} (highest) by quantiles.

The scorer is DCLM's recipe run locally: a linear classifier over word uni- and bigrams,
trained on a reference set of good documents (configured sources and/or files) against
other documents of the corpus; a document's score is the classifier's probability that it
is good. Bucket thresholds are the score's quantiles over the fitting sample, stored with
the model, so a document's bucket is a pure function of its text and the stored model.

Two scorers are built in:
- `linear` (default): scikit-learn `HashingVectorizer` (uni+bigrams, sublinear TF, L2) and
  `LogisticRegression`; weights stored as plain arrays. The same model family as fastText
  (a linear classifier over a bag of hashed n-grams), deterministic and offline.
- `fasttext`: DCLM's own tool. The fasttext-numpy2 wheels (0.10.4 and 0.9.2) installed here
  fail `train_supervised` with "Encountered NaN" even on trivially separable data, for most
  `dim` values, so it is not the default; where a working fastText is installed it is one
  setting away.
Another scorer plugs in by naming a class, `quality.scorer = "package.module:Class"`,
that implements `QualityBackend` (fit from good/other texts, save, load, score).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import tempfile
from pathlib import Path
from typing import ClassVar, Protocol, Sequence

import numpy as np
import pydantic
from datatrove.data import Document
from scipy.special import expit
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import normalize

from millrace.artifacts import atomic_output
from millrace.config import StrictModel
from millrace.errors import ArtifactError, ConfigError
from pipeline.cells.stats import cell_name
from pipeline.cells.fitted_model import FittedModelStep, read_model, reusable_fit, sample_fingerprint, sorted_sample, write_model

log = logging.getLogger(__name__)

QUALITY_KIND = "millrace.quality"
GOOD_LABEL = "__label__good"
OTHER_LABEL = "__label__other"


class FastTextConfig(StrictModel):
    """fastText supervised training settings (single-threaded, so a fit is reproducible)."""

    dim: int = pydantic.Field(32, ge=2, le=512)
    epoch: int = pydantic.Field(5, ge=1, le=100)
    lr: float = pydantic.Field(0.1, gt=0.0, le=2.0)
    word_ngrams: int = pydantic.Field(2, ge=1, le=5)
    min_count: int = pydantic.Field(2, ge=1)
    bucket: int = pydantic.Field(100_000, ge=0, description="hash buckets for word n-grams (model size)")
    max_chars: int = pydantic.Field(20_000, ge=100, description="characters of a document that are scored")


class LinearConfig(StrictModel):
    """The `linear` scorer: hashed word n-grams and an L2-regularised logistic regression."""

    features: int = pydantic.Field(1 << 20, ge=1 << 10, le=1 << 24, description="hash columns")
    ngrams: int = pydantic.Field(2, ge=1, le=3, description="word n-grams up to this length")
    c: float = pydantic.Field(4.0, gt=0.0, description="inverse regularisation strength")
    max_chars: int = pydantic.Field(20_000, ge=100, description="characters of a document that are scored")


class QualityConfig(StrictModel):
    """Quality scoring into buckets (default: a linear classifier, python-docs prose as the reference of good)."""

    enabled: bool = True
    buckets: int = pydantic.Field(5, ge=1, le=100)
    scorer: str = pydantic.Field("linear", description='"linear", "fasttext" or "package.module:Class"')
    reference_sources: list[str] = pydantic.Field(
        ["python-docs"], description="sources whose documents are the good class"
    )
    reference_files: list[Path] = pydantic.Field(
        [], description="more good documents: .jsonl (a `text` per line) or plain text (one document per file)"
    )
    sample_size: int = pydantic.Field(20_000, ge=10, description="documents the model is trained and quantiled on")
    sample_bytes: int = pydantic.Field(
        16_000_000, ge=1, description="text the pipeline samples (after dedup, by id hash) to fit on"
    )
    linear: LinearConfig = LinearConfig()
    fasttext: FastTextConfig = FastTextConfig()
    seed: int = 0


class QualityBackend(Protocol):
    """What a scorer provides; `score` must be a pure function of the text."""

    files: ClassVar[list[str]]  # the files `save` writes, pinned by hash in quality.json

    @classmethod
    def fit(cls, good: Sequence[str], other: Sequence[str], config: QualityConfig) -> "QualityBackend": ...

    def save(self, directory: Path) -> None: ...

    @classmethod
    def load(cls, directory: Path, config: QualityConfig) -> "QualityBackend": ...

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """Scores in [0, 1], higher is better."""


def _one_line(text: str, max_chars: int) -> str:
    return " ".join(text[:max_chars].split())


class FastTextQuality:
    """DCLM-style fastText classifier: P(good | text)."""

    files: ClassVar[list[str]] = ["quality-fasttext.bin"]

    def __init__(self, model, config: QualityConfig):
        self.model = model
        self.config = config

    @classmethod
    def fit(cls, good: Sequence[str], other: Sequence[str], config: QualityConfig) -> "FastTextQuality":
        import fasttext

        settings = config.fasttext
        rows = [f"{GOOD_LABEL} {_one_line(t, settings.max_chars)}" for t in good]
        rows += [f"{OTHER_LABEL} {_one_line(t, settings.max_chars)}" for t in other]
        order = np.random.default_rng(config.seed).permutation(len(rows))
        with tempfile.TemporaryDirectory(prefix="millrace-quality-") as tmp:
            train_file = Path(tmp) / "train.txt"
            train_file.write_text("".join(rows[i] + "\n" for i in order))
            try:
                model = fasttext.train_supervised(
                    str(train_file), dim=settings.dim, epoch=settings.epoch, lr=settings.lr,
                    wordNgrams=settings.word_ngrams, minCount=settings.min_count, bucket=settings.bucket,
                    thread=1, seed=config.seed, verbose=0,
                )
            except RuntimeError as exc:
                raise ConfigError(
                    f"quality.scorer: fastText training failed ({exc}); the installed fastText build is "
                    'known to do this (see pipeline/cells/quality.py): use scorer = "linear"'
                ) from None
        return cls(model, config)

    def save(self, directory: Path) -> None:
        path = Path(directory) / self.files[0]
        tmp = path.with_name(f".{path.name}.tmp")
        self.model.save_model(str(tmp))
        os.replace(tmp, path)

    @classmethod
    def load(cls, directory: Path, config: QualityConfig) -> "FastTextQuality":
        import fasttext

        path = Path(directory) / cls.files[0]
        try:
            return cls(fasttext.load_model(str(path)), config)
        except ValueError as exc:
            raise ArtifactError(f"{path}: cannot load fastText model ({exc})") from None

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """P(good) from the log-odds in float64: fastText's own `predict` adds 1e-5 and rounds to
        float32, which ties the many documents whose probability is within 1e-7 of 1."""
        if not texts:
            return np.zeros(0)
        output = self.model.get_output_matrix().astype(np.float64)
        labels = list(self.model.labels)
        direction = output[labels.index(GOOD_LABEL)] - output[labels.index(OTHER_LABEL)]
        hidden = np.stack([
            self.model.get_sentence_vector(_one_line(t, self.config.fasttext.max_chars)) for t in texts
        ]).astype(np.float64)
        return expit(hidden @ direction)


class LinearQuality:
    """Logistic regression over hashed word n-grams: P(good) = sigmoid(w · x + b)."""

    files: ClassVar[list[str]] = ["quality-linear-weights.npy"]

    def __init__(self, weights: np.ndarray, config: QualityConfig):
        self.weights = np.asarray(weights, dtype=np.float64)  # [features + 1]: coefficients, then intercept
        self.config = config
        settings = config.linear
        self._hasher = HashingVectorizer(
            n_features=settings.features, ngram_range=(1, settings.ngrams), alternate_sign=False,
            norm=None, token_pattern=r"(?u)\b\w+\b", dtype=np.float64,
        )

    def _features(self, texts: Sequence[str]):
        counts = self._hasher.transform([t[: self.config.linear.max_chars] for t in texts])
        counts.data = 1.0 + np.log(counts.data)
        return normalize(counts, copy=False)

    @classmethod
    def fit(cls, good: Sequence[str], other: Sequence[str], config: QualityConfig) -> "LinearQuality":
        scorer = cls(np.zeros(config.linear.features + 1), config)
        features = scorer._features(list(good) + list(other))
        labels = np.r_[np.ones(len(good)), np.zeros(len(other))]
        model = LogisticRegression(C=config.linear.c, class_weight="balanced", max_iter=1000, solver="liblinear",
                                   random_state=config.seed).fit(features, labels)
        scorer.weights = np.r_[model.coef_.ravel(), model.intercept_].astype(np.float32).astype(np.float64)
        return scorer

    def save(self, directory: Path) -> None:
        with atomic_output(Path(directory) / self.files[0]) as handle:
            np.save(handle, self.weights.astype(np.float32), allow_pickle=False)

    @classmethod
    def load(cls, directory: Path, config: QualityConfig) -> "LinearQuality":
        path = Path(directory) / cls.files[0]
        try:
            weights = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"{path}: cannot read quality weights ({exc})") from None
        if weights.shape != (config.linear.features + 1,):
            raise ArtifactError(f"{path}: {weights.shape} weights, settings say {config.linear.features + 1}")
        return cls(weights, config)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0)
        logits = self._features(texts) @ self.weights[:-1] + self.weights[-1]
        return expit(np.asarray(logits, dtype=np.float64))


SCORERS: dict[str, type] = {"linear": LinearQuality, "fasttext": FastTextQuality}


def backend_class(name: str) -> type:
    """A registered scorer by name, or a class named `package.module:Class`."""
    if name in SCORERS:
        return SCORERS[name]
    module_name, _, attribute = name.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError):
        known = f"{sorted(SCORERS)} or 'module:Class'"
        raise ConfigError(f"quality.scorer: unknown scorer {name!r} (known: {known})") from None


def _reference_texts(files: Sequence[Path]) -> list[str]:
    import json

    texts = []
    for path in files:
        try:
            if path.suffix == ".jsonl":
                texts += [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]
            else:
                texts.append(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"quality.reference_files: {path}: cannot read ({exc})") from None
    return texts


def bucket_of(scores: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """Bucket b holds scores in [thresholds[b-1], thresholds[b]); q0 below the first threshold."""
    return np.searchsorted(np.asarray(thresholds, dtype=np.float64), np.asarray(scores, dtype=np.float64), side="right")


class QualityModel:
    """A fitted scorer with its bucket thresholds."""

    def __init__(self, backend: QualityBackend, thresholds: Sequence[float]):
        self.backend = backend
        self.thresholds = list(thresholds)

    def score(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        scores = self.backend.score(texts)
        return scores, bucket_of(scores, self.thresholds)

    @classmethod
    def load(cls, directory: Path) -> "QualityModel":
        body = read_model(directory, QUALITY_KIND)
        config = QualityConfig.model_validate(body["settings"])
        return cls(backend_class(config.scorer).load(Path(directory), config), body["thresholds"])


def fit_quality(documents: Sequence[Document], config: QualityConfig, out_dir: Path) -> None:
    """Train the scorer on reference vs other documents of the sample, fix bucket thresholds, store both."""
    out_dir = Path(out_dir)
    settings = config.model_dump(mode="json")
    reference = _reference_texts(config.reference_files)
    fingerprint = sample_fingerprint(documents)
    if reference:
        digest = hashlib.sha256("\x00".join(reference).encode()).hexdigest()
        fingerprint = f"{fingerprint}+ref:{digest}"
    if reusable_fit(out_dir, QUALITY_KIND, settings, fingerprint):
        return
    backend = backend_class(config.scorer)
    sample = sorted_sample(documents)
    rng = np.random.default_rng(config.seed)
    if len(sample) > config.sample_size:
        sample = [sample[i] for i in np.sort(rng.choice(len(sample), config.sample_size, replace=False))]
    wanted = set(config.reference_sources)
    good = [d.text for d in sample if d.metadata.get("source") in wanted] + reference
    other = [d.text for d in sample if d.metadata.get("source") not in wanted]
    if not good or not other:
        present = sorted({str(d.metadata.get("source")) for d in sample})
        which = "good (reference)" if not good else "other"
        raise ConfigError(
            f"quality.reference_sources: no {which} documents to train on "
            f"(reference {sorted(wanted)}, sample sources {present})"
        )
    half = max(1, config.sample_size // 2)
    if len(other) > half:  # DCLM balances the classes; random corpus documents stand for "other"
        other = [other[i] for i in np.sort(rng.choice(len(other), half, replace=False))]
    out_dir.mkdir(parents=True, exist_ok=True)
    backend.fit(good, other, config).save(out_dir)
    scorer = backend.load(out_dir, config)  # thresholds from the stored model, exactly as assignment will score
    scores = scorer.score([d.text for d in sample])
    quantiles = [b / config.buckets for b in range(1, config.buckets)]
    thresholds = [float(t) for t in np.quantile(scores, quantiles)]
    if not np.all(np.isfinite(scores)):
        raise ConfigError(f"quality.scorer: the {config.scorer!r} model gives non-finite scores (a failed training)")
    buckets = bucket_of(scores, thresholds)
    largest = np.bincount(buckets, minlength=config.buckets).max() / len(scores)
    if len(scores) >= config.buckets and largest > 2.0 / config.buckets:
        raise ConfigError(
            f"quality.scorer: the {config.scorer!r} scores of the {len(scores)} sampled documents take only "
            f"{len(np.unique(scores))} distinct values; {largest:.0%} fall in one bucket of {config.buckets}"
        )
    edges = [0.0, *thresholds, 1.0]
    body = {
        "settings": settings,
        "sample_fingerprint": fingerprint,
        "sample_documents": len(sample),
        "training": {"good": len(good), "other": len(other)},
        "buckets": config.buckets,
        "thresholds": thresholds,
        "score_ranges": {f"q{b}": [edges[b], edges[b + 1]] for b in range(config.buckets)},
        "sample_bucket_counts": {f"q{b}": int(np.sum(buckets == b)) for b in range(config.buckets)},
    }
    write_model(out_dir, QUALITY_KIND, body, backend.files)
    log.info("quality: trained on %d good / %d other; thresholds %s", len(good), len(other),
             [round(t, 4) for t in thresholds])


def quality_stats(model_dir: Path) -> dict:
    """`StoreManifest.stats["quality"]`: the number of buckets and each one's score range."""
    body = read_model(model_dir, QUALITY_KIND)
    return {"buckets": body["buckets"], "score_ranges": body["score_ranges"]}


class QualityScorer(FittedModelStep):
    """Sets `metadata["quality_score"]` (float, higher is better) and `metadata["quality_bucket"]` (int)."""

    name = "⭐ quality scorer"
    type = "🗂️ - CELLS"
    model_class = QualityModel

    def apply(self, batch: list[Document]) -> None:
        with self.track_time(unit="batch"):
            scores, buckets = self.model.score([doc.text for doc in batch])
        for doc, score, bucket in zip(batch, scores, buckets):
            doc.metadata["quality_score"] = float(score)
            doc.metadata["quality_bucket"] = int(bucket)
            doc.metadata["cell"] = cell_name(doc.metadata.get("domain"), int(bucket))
            self.stat_update(f"q{int(bucket)}")
        self.stat_update("scored", value=len(batch))
