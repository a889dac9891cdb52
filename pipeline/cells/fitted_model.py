"""Fitted models stored beside a store: one JSON artifact that pins its companion files by hash.

A model directory holds, per model, `<name>.json` (an artifact: settings, fitted numbers,
and `files: {file: sha256}`) and the files it names. The JSON is written last, so its
presence means the fit completed; loading checks every pinned file, so a model that was
altered or half-copied is refused with a message that names the file. A fit is reused when
the stored settings and the fingerprint of the fitting sample match: a rerun assigns the
same domain and bucket to every document.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import JsonObject, read_artifact, sha256_file, write_artifact
from millrace.config import StrictModel
from millrace.errors import ArtifactError, ConfigError

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1


class FitRecord(StrictModel):
    """What every fitted model's `<name>.json` holds: the settings and the sample it was fitted on (a fit is
    reused while both match) and the files it pins by hash; each model adds its numbers (`DomainsFit`,
    `QualityFit`)."""

    settings: JsonObject  # the section's config, as `model_dump(mode="json")` gives it
    sample_fingerprint: str
    sample_documents: int
    files: dict[str, str] = {}  # file -> sha256, set by `write_model`


Fit = TypeVar("Fit", bound=FitRecord)


def registered_class(name: str, registry: dict[str, type], field: str) -> type:
    """`registry[name]`, or a class named `package.module:Class`; else a ConfigError naming `field`."""
    if name in registry:
        return registry[name]
    module_name, _, attribute = name.partition(":")
    try:
        found: type = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"{field}: unknown {name!r} (known: {sorted(registry)} or 'module:Class')") from None
    return found


def sample_fingerprint(documents: Sequence[Document]) -> str:
    """A hash of the sample's document ids and text hashes, independent of their order."""
    digest = hashlib.sha256()
    for line in sorted(f"{doc.id}\t{hashlib.sha1(doc.text.encode()).hexdigest()}" for doc in documents):
        digest.update(line.encode() + b"\n")
    return "sha256:" + digest.hexdigest()


def sorted_sample(documents: Sequence[Document]) -> list[Document]:
    """The sample in id order, so a fit does not depend on the order a reader produced it in."""
    return sorted(documents, key=lambda doc: (doc.id, doc.text))


def write_model(directory: Path, kind: str, record: FitRecord, files: Sequence[str]) -> str:
    """Pin `files` (already written in `directory`) by hash and write `<kind name>.json` last."""
    directory = Path(directory)
    pinned = record.model_copy(update={"files": {name: sha256_file(directory / name) for name in files}})
    return write_artifact(model_path(directory, kind), kind, SCHEMA_VERSION, pinned.model_dump(mode="json"))


def model_path(directory: Path, kind: str) -> Path:
    return Path(directory) / f"{kind.rsplit('.', 1)[-1]}.json"


def read_model(directory: Path, kind: str, model: type[Fit]) -> Fit:
    """Read a model artifact as its record and check every file it pins."""
    directory = Path(directory)
    body = read_artifact(model_path(directory, kind), kind, model, (SCHEMA_VERSION,))
    for name, expected in body.files.items():
        path = directory / name
        if not path.exists():
            raise ArtifactError(f"{path}: missing (pinned by {model_path(directory, kind).name})")
        if sha256_file(path) != expected:
            raise ArtifactError(f"{path}: checksum differs from {model_path(directory, kind).name}'s {expected}")
    return body


def reusable_fit(
    directory: Path, kind: str, model: type[FitRecord], settings: Mapping[str, object], fingerprint: str
) -> bool:
    """True when `directory` already holds a fit of `kind` (read as `model`) with these settings on this
    sample; one it cannot read (damaged, or of an older shape) is refitted."""
    if not model_path(directory, kind).exists():
        return False
    try:
        body = read_model(directory, kind, model)
    except ArtifactError as exc:
        log.warning("refitting: %s", exc)
        return False
    if body.settings == settings and body.sample_fingerprint == fingerprint:
        log.info("reusing the fitted %s in %s", kind, directory)
        return True
    log.info("refitting %s in %s: settings or sample changed", kind, directory)
    return False


_Model = TypeVar("_Model")
_Loaded = TypeVar("_Loaded", covariant=True)


class FittedModel(Protocol[_Loaded]):
    """A model fitted by a pipeline phase (models) and stored in its directory (`QualityModel`, `DomainModel`)."""

    @classmethod
    def load(cls, directory: Path) -> _Loaded: ...


class FittedModelStep(PipelineStep, Generic[_Model]):
    """Applies a fitted model to batches of documents; the model loads once per task, on first use."""

    model_class: type[FittedModel[_Model]]

    def __init__(self, model_dir: Path | str, batch_size: int = 512):
        super().__init__()
        self.model_dir = Path(model_dir)
        self.batch_size = batch_size
        self._model: _Model | None = None

    @property
    def model(self) -> _Model:
        if self._model is None:
            self._model = self.model_class.load(self.model_dir)
        return self._model

    def apply(self, batch: list[Document]) -> None:
        """Label the documents of `batch` in place (and count what was done)."""
        raise NotImplementedError

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        batch: list[Document] = []
        for doc in data or ():
            batch.append(doc)
            if len(batch) >= self.batch_size:
                self.apply(batch)
                yield from batch
                batch = []
        if batch:
            self.apply(batch)
            yield from batch
