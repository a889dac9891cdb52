"""Document quality: a pluggable scorer, and buckets q0 (lowest) … q{B-1} (highest) by quantiles.

The scorer is DCLM's recipe run locally: a linear classifier over word uni- and bigrams,
trained on a reference set of good documents (configured sources and/or files) against
other documents of the corpus; a document's score is the classifier's probability that it
is good, i.e. that it resembles the reference more than a random corpus document. Bucket edges
are quantiles of the score on a held-out calibration part of the fitting sample, within each
document's language (`pipeline.cells.calibration`), stored with the model, so a document's
bucket is a pure function of its text, its language label and the stored model, and each
bucket holds about the corpus's mix of languages (q4: the top fifth of every language).

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
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np
from datatrove.data import Document
from scipy.special import expit
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import normalize

from millrace.artifacts import atomic_output
from millrace.config import StrictModel
from millrace.errors import ArtifactError, ConfigError
from pipeline.cells.calibration import POOLED, BucketEdges, calibration_group, split_for_calibration
from pipeline.cells.fitted_model import (
    FitRecord,
    FittedModelStep,
    read_model,
    registered_class,
    reusable_fit,
    sample_fingerprint,
    sorted_sample,
    write_model,
)
from pipeline.cells.stats import cell_name
from pipeline.config import QualityConfig
from pipeline.store.manifest_records import QualityStats

if TYPE_CHECKING:
    import scipy.sparse as sp
    from fasttext.FastText import _FastText

log = logging.getLogger(__name__)

QUALITY_KIND = "millrace.quality"
GOOD_LABEL = "__label__good"
OTHER_LABEL = "__label__other"


class ScoreMeaning(StrictModel):
    """What the score is, in words: what was good, what was other, and how the buckets were cut."""

    good: list[str]
    other: str
    calibrated_by: str
    meaning: str


class TrainingCounts(StrictModel):
    good: int
    other: int


class CalibrationCounts(StrictModel):
    documents: int
    groups: dict[str, int]  # calibration group (a language, or pooled) -> documents


class QualityFit(FitRecord, ScoreMeaning):
    """quality.json: the scorer's training and calibration counts, and the bucket edges per group."""

    training: TrainingCounts
    calibration: CalibrationCounts
    buckets: int
    thresholds: dict[str, list[float]]
    score_ranges: dict[str, dict[str, list[float]]]
    calibration_bucket_counts: dict[str, int]


class QualityBackend(Protocol):
    """What a scorer provides; `score` must be a pure function of the text."""

    files: ClassVar[list[str]]  # the files `save` writes, pinned by hash in quality.json

    @classmethod
    def fit(cls, good: Sequence[str], other: Sequence[str], config: QualityConfig) -> QualityBackend: ...

    def save(self, directory: Path) -> None: ...

    @classmethod
    def load(cls, directory: Path, config: QualityConfig) -> QualityBackend: ...

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """Scores in [0, 1], higher is better."""


def _one_line(text: str, max_chars: int) -> str:
    return " ".join(text[:max_chars].split())


class FastTextQuality:
    """DCLM-style fastText classifier: P(good | text)."""

    files: ClassVar[list[str]] = ["quality-fasttext.bin"]

    def __init__(self, model: _FastText, config: QualityConfig):
        self.model = model
        self.config = config

    @classmethod
    def fit(cls, good: Sequence[str], other: Sequence[str], config: QualityConfig) -> FastTextQuality:
        import fasttext  # lazy: heavy (fasttext)

        settings = config.fasttext
        rows = [f"{GOOD_LABEL} {_one_line(t, settings.max_chars)}" for t in good]
        rows += [f"{OTHER_LABEL} {_one_line(t, settings.max_chars)}" for t in other]
        order = np.random.default_rng(config.seed).permutation(len(rows))
        with tempfile.TemporaryDirectory(prefix="millrace-quality-") as tmp:
            train_file = Path(tmp) / "train.txt"
            train_file.write_text("".join(rows[i] + "\n" for i in order))
            try:
                model = fasttext.train_supervised(
                    str(train_file),
                    dim=settings.dim,
                    epoch=settings.epoch,
                    lr=settings.lr,
                    wordNgrams=settings.word_ngrams,
                    minCount=settings.min_count,
                    bucket=settings.bucket,
                    thread=1,
                    seed=config.seed,
                    verbose=0,
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
    def load(cls, directory: Path, config: QualityConfig) -> FastTextQuality:
        import fasttext  # lazy: heavy (fasttext)

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
        hidden = np.stack(
            [self.model.get_sentence_vector(_one_line(t, self.config.fasttext.max_chars)) for t in texts]
        ).astype(np.float64)
        probabilities: np.ndarray = expit(hidden @ direction)
        return probabilities


class LinearQuality:
    """Logistic regression over hashed word n-grams: P(good) = sigmoid(w · x + b)."""

    files: ClassVar[list[str]] = ["quality-linear-weights.npy"]

    def __init__(self, weights: np.ndarray, config: QualityConfig):
        self.weights = np.asarray(weights, dtype=np.float64)  # [features + 1]: coefficients, then intercept
        self.config = config
        settings = config.linear
        self._hasher = HashingVectorizer(
            n_features=settings.features,
            ngram_range=(1, settings.ngrams),
            alternate_sign=False,
            norm=None,
            token_pattern=r"(?u)\b\w+\b",
            dtype=np.float64,
        )

    def _features(self, texts: Sequence[str]) -> sp.csr_matrix:
        counts = self._hasher.transform([t[: self.config.linear.max_chars] for t in texts])
        counts.data = 1.0 + np.log(counts.data)
        normalized: sp.csr_matrix = normalize(counts, copy=False)  # sklearn ships no types
        return normalized

    @classmethod
    def fit(cls, good: Sequence[str], other: Sequence[str], config: QualityConfig) -> LinearQuality:
        scorer = cls(np.zeros(config.linear.features + 1), config)
        features = scorer._features(list(good) + list(other))
        labels = np.r_[np.ones(len(good)), np.zeros(len(other))]
        model = LogisticRegression(
            C=config.linear.c, class_weight="balanced", max_iter=1000, solver="liblinear", random_state=config.seed
        ).fit(features, labels)
        scorer.weights = np.r_[model.coef_.ravel(), model.intercept_].astype(np.float32).astype(np.float64)
        return scorer

    def save(self, directory: Path) -> None:
        with atomic_output(Path(directory) / self.files[0]) as handle:
            np.save(handle, self.weights.astype(np.float32), allow_pickle=False)

    @classmethod
    def load(cls, directory: Path, config: QualityConfig) -> LinearQuality:
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
        probabilities: np.ndarray = expit(np.asarray(logits, dtype=np.float64))
        return probabilities


SCORERS: dict[str, type] = {"linear": LinearQuality, "fasttext": FastTextQuality}


def backend_class(name: str) -> type[QualityBackend]:
    """A registered scorer by name, or a class named `package.module:Class`."""
    return registered_class(name, SCORERS, "quality.scorer")


def _reference_texts(files: Sequence[Path]) -> list[str]:

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


class QualityModel:
    """A fitted scorer with its bucket edges per calibration group."""

    def __init__(self, backend: QualityBackend, edges: BucketEdges):
        self.backend = backend
        self.edges = edges

    def score(self, texts: Sequence[str], groups: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Scores and buckets; `groups` are the documents' calibration groups (None: the pooled edges)."""
        scores = self.backend.score(texts)
        return scores, self.edges.bucket(scores, groups if groups is not None else [POOLED] * len(texts))

    @classmethod
    def load(cls, directory: Path) -> QualityModel:
        body = read_model(directory, QUALITY_KIND, QualityFit)
        config = QualityConfig.model_validate(body.settings)
        return cls(backend_class(config.scorer).load(Path(directory), config), BucketEdges(body.thresholds))


def _training_classes(
    training: Sequence[Document], reference: list[str], config: QualityConfig, rng: np.random.Generator
) -> tuple[list[str], list[str]]:
    """Good: the reference sources' documents and files; other: the rest, at most half the sample size."""
    wanted = set(config.reference_sources)
    good = [d.text for d in training if d.metadata.get("source") in wanted] + reference
    other = [d.text for d in training if d.metadata.get("source") not in wanted]
    if not good or not other:
        present = sorted({str(d.metadata.get("source")) for d in training})
        which = "good (reference)" if not good else "other"
        raise ConfigError(
            f"quality.reference_sources: no {which} documents to train on "
            f"(reference {sorted(wanted)}, sample sources {present})"
        )
    half = max(1, config.sample_size // 2)
    if len(other) > half:  # DCLM balances the classes; random corpus documents stand for "other"
        other = [other[i] for i in np.sort(rng.choice(len(other), half, replace=False))]
    return good, other


def _check_spread(buckets: np.ndarray, scores: np.ndarray, config: QualityConfig) -> None:
    """A degenerate scorer (a few distinct values) cannot fill the buckets: an error, not lumped buckets."""
    largest = np.bincount(buckets, minlength=config.buckets).max() / len(scores)
    if len(scores) >= config.buckets and largest > 2.0 / config.buckets:
        raise ConfigError(
            f"quality.scorer: the {config.scorer!r} scores of the {len(scores)} calibration documents take only "
            f"{len(np.unique(scores))} distinct values; {largest:.0%} fall in one bucket of {config.buckets}"
        )


def score_meaning(config: QualityConfig, reference_files: int) -> ScoreMeaning:
    """What the score is, in words and numbers, for `store info` and the composition page."""
    good = list(config.reference_sources) + ([f"{reference_files} reference file(s)"] if reference_files else [])
    top = f"q{config.buckets - 1}"
    if config.calibrate_by == "language":
        edges = "within each language"
        scale = (
            f"buckets compare a document with others of its language only, so a {top} document of one "
            'language may score below a q0 of another (quality.calibrate_by = "none": one global scale)'
        )
    else:
        edges = "over all documents"
        scale = (
            "one global scale: a bucket's documents score alike whatever their language, and its language mix "
            'may differ from the corpus\'s (quality.calibrate_by = "language": per-language buckets)'
        )
    return ScoreMeaning(
        good=good,
        other="documents drawn at random from the rest of the corpus",
        calibrated_by=config.calibrate_by,
        meaning=(
            f"P(good): how much a document resembles {', '.join(good)} rather than a random corpus "
            f"document; buckets are quantiles of that score {edges} on a held-out calibration sample, "
            f"so q0 is the bottom and {top} the top {100 // config.buckets}% by this score {edges}; {scale}"
        ),
    )


def fit_quality(documents: Sequence[Document], config: QualityConfig, out_dir: Path) -> None:
    """Train the scorer on part of the sample, fix bucket edges on the held-out rest, store both."""
    out_dir = Path(out_dir)
    settings = config.model_dump(mode="json")
    reference = _reference_texts(config.reference_files)
    fingerprint = sample_fingerprint(documents)
    if reference:
        digest = hashlib.sha256("\x00".join(reference).encode()).hexdigest()
        fingerprint = f"{fingerprint}+ref:{digest}"
    if reusable_fit(out_dir, QUALITY_KIND, QualityFit, settings, fingerprint):
        return
    backend = backend_class(config.scorer)
    sample = sorted_sample(documents)
    rng = np.random.default_rng(config.seed)
    if len(sample) > config.sample_size:
        sample = [sample[i] for i in np.sort(rng.choice(len(sample), config.sample_size, replace=False))]
    training, calibration = split_for_calibration(sample, config.calibration_share, config.seed)
    if len(calibration) < config.buckets:
        raise ConfigError(
            f"quality.calibration_share: {len(calibration)} of {len(sample)} sampled documents held "
            f"out, fewer than the {config.buckets} buckets"
        )
    good, other = _training_classes(training, reference, config, rng)
    out_dir.mkdir(parents=True, exist_ok=True)
    backend.fit(good, other, config).save(out_dir)
    scorer = backend.load(out_dir, config)  # edges from the stored model, exactly as assignment will score
    scores = scorer.score([d.text for d in calibration])
    if not np.all(np.isfinite(scores)):
        raise ConfigError(f"quality.scorer: the {config.scorer!r} model gives non-finite scores (a failed training)")
    groups = [calibration_group(d.metadata) for d in calibration]
    edges = BucketEdges.fit(
        scores, groups, config.buckets, config.min_group_documents, by_group=config.calibrate_by == "language"
    )
    buckets = edges.bucket(scores, groups)
    _check_spread(buckets, scores, config)
    group_sizes = {g: int(n) for g, n in zip(*np.unique(np.asarray(groups, dtype=str), return_counts=True))}
    fit = QualityFit(
        **score_meaning(config, len(reference)).model_dump(),
        settings=settings,
        sample_fingerprint=fingerprint,
        sample_documents=len(sample),
        training=TrainingCounts(good=len(good), other=len(other)),
        calibration=CalibrationCounts(documents=len(calibration), groups=group_sizes),
        buckets=config.buckets,
        thresholds=edges.thresholds,
        score_ranges=edges.score_ranges(),
        calibration_bucket_counts={f"q{b}": int(np.sum(buckets == b)) for b in range(config.buckets)},
    )
    write_model(out_dir, QUALITY_KIND, fit, backend.files)
    log.info(
        "quality: trained on %d good / %d other; edges from %d held-out documents in %d groups",
        len(good),
        len(other),
        len(calibration),
        len(edges.thresholds),
    )


def quality_stats(model_dir: Path) -> QualityStats:
    """`StoreManifest.stats.quality`: buckets, what the score means, and each group's score ranges."""
    fit = read_model(model_dir, QUALITY_KIND, QualityFit)
    return QualityStats.model_validate(fit.model_dump(include=set(QualityStats.model_fields)))


class QualityScorer(FittedModelStep[QualityModel]):
    """Sets `metadata["quality_score"]` (float, higher is better) and `metadata["quality_bucket"]` (int)."""

    name = "⭐ quality scorer"
    type = "🗂️ - CELLS"
    model_class = QualityModel

    def apply(self, batch: list[Document]) -> None:
        with self.track_time(unit="batch"):
            scores, buckets = self.model.score(
                [doc.text for doc in batch], [calibration_group(doc.metadata) for doc in batch]
            )
        for doc, score, bucket in zip(batch, scores, buckets):
            doc.metadata["quality_score"] = float(score)
            doc.metadata["quality_bucket"] = int(bucket)
            doc.metadata["cell"] = cell_name(doc.metadata.get("domain"), int(bucket))
            self.stat_update(f"q{int(bucket)}")
        self.stat_update("scored", value=len(batch))
