"""The pipeline config as a store records it (`StoreManifest.pipeline_config`): each section's fields, defaults
and bounds, declared once. `pipeline.config` reads a config file into these same sections and adds the checks
that need the filter registry or the machinery (a known embedder, registered filters, paths that exist); a
store's record is read without them, so a store built elsewhere, or before a filter was renamed, still opens.
Light: pydantic only, like the store format that embeds it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pydantic

from millrace.config import StrictModel
from millrace.names import NAME_PATTERN
from pipeline.filters import FILTER_NAMES

Format = Literal["jsonl", "jsonl.zst", "parquet", "warc", "html", "hf-datasets"]
CALVER = re.compile(r"^\d{4}\.\d{2}\.\d{2}(\.\d+)?$")


class SourceRecord(StrictModel):
    """One input source, as a store records it; its name becomes the cell name when no domains step runs."""

    name: str = pydantic.Field(pattern=NAME_PATTERN, description="becomes the cell name when no domains step runs")
    paths: list[str] = pydantic.Field(
        min_length=1,
        examples=[["web/", "s3://bucket/corpus/web/"]],
        description="files or directories (relative to this file or absolute), or fsspec URLs (s3://, gs://, hf://)",
    )
    storage_options: dict[str, pydantic.JsonValue] = pydantic.Field(
        {},
        exclude=True,  # credentials and endpoints: never recorded in work state or store
        examples=[{"anon": True}],
        description="the URL paths' filesystem options (endpoint, credentials profile, ...); never recorded",
    )
    glob: str | None = pydantic.Field(
        None,
        examples=["**/*.jsonl"],
        description="only these files inside directories; absent: every file with one of the format's extensions",
    )
    format: Format = pydantic.Field(
        "jsonl.zst",
        description="jsonl | jsonl.zst | parquet | warc | html | hf-datasets "
        "(warc, html: trafilatura extracts the text)",
    )
    kind: Literal["prose", "code"] = pydantic.Field(
        "prose", description="prose | code (code never goes through prose filters)"
    )
    normalise: bool = pydantic.Field(True, description="unicode repair (ftfy) before anything else")
    filters: list[str] = pydantic.Field([], description="any of " + ", ".join(FILTER_NAMES) + " (pipeline.filters)")
    language_id: bool = pydantic.Field(
        True, description="py3langid, before the filters: each applies its language's rules"
    )
    languages: list[str] | None = pydantic.Field(
        None, examples=[["en"]], description="keep only these languages (needs language_id); absent keeps all"
    )
    text_key: str = pydantic.Field("text", description="the record field holding the text")
    id_key: str = pydantic.Field("id", description="the record field holding the document id")
    on_bad_file: Literal["error", "skip"] = pydantic.Field(
        "error", description="error | skip: a truncated or corrupt file stops the run, or is skipped and listed"
    )
    max_document_bytes: int = pydantic.Field(
        1_000_000, ge=1, description="longer documents are dropped (too_long) or cut, as long_documents says"
    )
    long_documents: Literal["drop", "cut"] = pydantic.Field("drop", description="drop | cut")
    symlinks_outside: Literal["skip", "read"] = pydantic.Field(
        "skip", description="skip | read: links leading out of the source's folders are reported, or read"
    )


class DedupConfig(StrictModel):
    """Exact (content hash) then fuzzy (MinHash + LSH over word n-gram shingles) dedup.

    A pair of documents becomes a candidate when all `rows` hashes of any of `bands` bands
    agree (probability 1-(1-J^rows)^bands at Jaccard J); a candidate is a duplicate when the
    full signature estimates J ≥ `threshold`. 40 × 3 puts the LSH S-curve's midpoint near
    J ≈ 0.29, so copies with 5% of words edited (5-gram Jaccard ≈ 0.55–0.65) become
    candidates with probability ≥ 0.999; the signature check removes the false candidates
    that such a low midpoint lets in. A member of a cluster is removed only when its estimated
    J with the cluster's kept document is ≥ `verify_threshold`, so chains of matches never
    remove unrelated documents; it is lower than `threshold` because two copies of one
    original, each edited, are less alike than either is to the original (0.5 here lost 3-5%
    of recall on the near-duplicate corpora, 0.4 none, precision 1.0 both).
    """

    exact: bool = pydantic.Field(True, description="drop documents with identical text (keeps the smallest key)")
    fuzzy: bool = pydantic.Field(True, description="MinHash + LSH near-duplicate removal")
    ngram: int = pydantic.Field(5, ge=1, description="word n-gram shingles")
    bands: int = pydantic.Field(
        40,
        ge=1,
        le=1024,
        description="LSH bands x rows = signature length; 40 x 3 makes pairs "
        "from Jaccard ~0.5 up candidates with probability > 0.995",
    )
    rows: int = pydantic.Field(3, ge=1, le=64, description="hashes per LSH band (at most 64)")
    threshold: float = pydantic.Field(0.5, ge=0.0, le=1.0, description="estimated Jaccard a candidate pair must reach")
    verify_threshold: float = pydantic.Field(
        0.4, ge=0.0, le=1.0, description="... and a removed document with its cluster's kept one (no chains)"
    )
    seed: int = pydantic.Field(1, description="the MinHash permutations' seed")
    # each part an executor task, holding about 1/parts of the signing records at a time
    parts: int = pydantic.Field(
        4,
        ge=1,
        le=1 << 16,
        description="duplicate finding runs as this many parallel "
        "tasks over parts of the hash space (the removals do not depend on it)",
    )


class TokenizerConfig(StrictModel):
    """`path` to any tokenizer.json, or (when absent) a byte-level BPE trained on a corpus sample."""

    path: str | None = pydantic.Field(
        None,
        examples=["tokenizer.json"],
        description="any HF tokenizer.json; absent: train a byte-level BPE on a sample",
    )
    vocab_size: int = pydantic.Field(
        8192, ge=260, le=1 << 20, description="for the trained BPE (<= 65536 gives uint16 shards)"
    )
    sample_bytes: int = pydantic.Field(
        4_000_000, ge=1, description="text sampled from the deduplicated corpus to train it"
    )
    eos: str = pydantic.Field("<|endoftext|>", description="appended after every document")
    batch_size: int = pydantic.Field(256, ge=1, description="documents encoded per tokenizer call")


class OutputConfig(StrictModel):
    """Where the store goes: $MILLRACE_HOME/stores/<name>/<version>, and optionally a copy at `url`."""

    name: str = pydantic.Field("local", pattern=NAME_PATTERN, description="$MILLRACE_HOME/stores/<name>/<version>")
    version: str | None = pydantic.Field(None, examples=["2026.01.31"], description="CalVer; absent: today's date")
    # 256M tokens (512 MiB of uint16, 1 GiB of int32): about 90,000 shards for the reference 23T tokens
    # (450 a cell), large objects for object storage (well past where a request's latency matters, under
    # S3's 5 GiB single-PUT limit), a few MB of `.idx` each; the loader keeps at most 128 open at once.
    shard_tokens: int = pydantic.Field(1 << 28, ge=1, description="a cell's shard rolls over after this many tokens")
    url: str | None = pydantic.Field(
        None,
        examples=["s3://bucket/stores"],
        description="also copy the finished store to <url>/<name>/<version> (any fsspec URL; store.json last)",
    )
    storage_options: dict[str, pydantic.JsonValue] = pydantic.Field(
        {}, description="the url's filesystem options (endpoint, credentials profile, ...)"
    )

    @pydantic.field_validator("version")
    @classmethod
    def _calver(cls, value: str | None) -> str | None:
        if value is not None and not CALVER.match(value):
            raise ValueError("expected CalVer YYYY.MM.DD (optionally .N)")
        return value

    @property
    def resolved_version(self) -> str:
        return self.version or dt.date.today().strftime("%Y.%m.%d")


class EvalSetConfig(StrictModel):
    """One `[[validation.sets]]` table."""

    name: str = pydantic.Field(pattern=NAME_PATTERN, description="the set's name in the store and on the pages")
    paths: list[str] = pydantic.Field(min_length=1, description="files or directories")
    format: Literal["jsonl", "parquet", "text"] = pydantic.Field(
        "jsonl", description="jsonl | parquet | text (one document per file)"
    )
    text_key: str = pydantic.Field("text", description="the record field holding the text")


class HeldOutConfig(StrictModel):
    """`[validation]`: the held-out split of every cell (`pipeline.cells.held_out_split`) and the external
    evaluation sets (`pipeline.steps.held_out.eval_sets`)."""

    tokens_per_cell: int = pydantic.Field(
        4096,
        ge=0,
        description="held-out tokens per cell: the lowest-hash "
        "documents until they reach this (the one that reaches it included)",
    )
    fraction: float = pydantic.Field(
        0.005, ge=0.0, lt=1.0, description="also every document whose hash is below this share of the range"
    )
    max_documents_per_cell: int = pydantic.Field(200, ge=0, description="at most this many held out per cell")
    max_token_share: float = pydantic.Field(
        0.2,
        gt=0.0,
        le=1.0,
        description="past its first held-out document, a cell holds out at most this share of its tokens",
    )
    seed: int = pydantic.Field(0, ge=0, description="the hash key: another seed holds out other documents")
    decontaminate: bool = pydantic.Field(
        True,
        description="give back to training the held-out documents whose "
        "token n-grams are found in training (`pipeline.steps.held_out.contamination`)",
    )
    contamination_ngram: int = pydantic.Field(13, ge=1, description="n of the token n-grams looked up")
    contamination_threshold: float = pydantic.Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="share of a document's n-grams found in training from which it counts as contaminated",
    )
    sets: list[EvalSetConfig] = pydantic.Field(
        [],
        examples=[[{"name": "wiki-2026", "paths": ["eval/wiki.jsonl"]}]],
        description="external evaluation sets, tokenized into the store, never trained on",
    )

    @pydantic.model_validator(mode="after")
    def _unique_sets(self) -> HeldOutConfig:
        names = [s.name for s in self.sets]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"evaluation set names must be unique; repeated: {repeated}")
        return self


class FastTextConfig(StrictModel):
    """fastText supervised training settings (single-threaded, so a fit is reproducible)."""

    dim: int = pydantic.Field(32, ge=2, le=512, description="word vector size")
    epoch: int = pydantic.Field(5, ge=1, le=100, description="passes over the training sample")
    lr: float = pydantic.Field(0.1, gt=0.0, le=2.0, description="learning rate")
    word_ngrams: int = pydantic.Field(2, ge=1, le=5, description="word n-grams up to this length")
    min_count: int = pydantic.Field(2, ge=1, description="words seen fewer times are left out")
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

    enabled: bool = pydantic.Field(True, description="false keeps one quality bucket")
    buckets: int = pydantic.Field(5, ge=1, le=100, description="q0 (least like the reference) ... q{B-1} (most)")
    scorer: str = pydantic.Field("linear", description="linear | fasttext | package.module:Class")
    reference_sources: list[str] = pydantic.Field(
        ["python-docs"], description="sources whose documents are the good class"
    )
    reference_files: list[Path] = pydantic.Field(
        [], description="more good documents: .jsonl (a `text` per line) or plain text (one document per file)"
    )
    sample_size: int = pydantic.Field(20_000, ge=10, description="documents the model is trained and calibrated on")
    sample_bytes: int = pydantic.Field(
        16_000_000, ge=1, description="text the pipeline samples (after dedup, by id hash) to fit on"
    )
    calibration_share: float = pydantic.Field(
        0.5, gt=0.0, lt=1.0, description="share of the sample held out to fix bucket edges (not trained on)"
    )
    calibrate_by: Literal["language", "none"] = pydantic.Field(
        "language",
        description="language: q0...q{B-1} per language (each bucket keeps the corpus's language mix; a "
        "top bucket of one language may score below a q0 of another) | none: one global scale (buckets comparable "
        "across languages; their language mix may differ)",
    )
    min_group_documents: int = pydantic.Field(
        10, ge=1, description="calibration documents a language needs for its own edges (fewer: pooled edges)"
    )
    linear: LinearConfig = pydantic.Field(LinearConfig(), description="the linear scorer's settings")
    fasttext: FastTextConfig = pydantic.Field(FastTextConfig(), description="the fasttext scorer's settings")
    seed: int = pydantic.Field(0, description="the fit's seed (sample split, solver)")


class EmbeddingConfig(StrictModel):
    """How documents become vectors; stored with the model so assignment embeds exactly as fitting did."""

    features: int = pydantic.Field(1 << 18, ge=1 << 10, le=1 << 24, description="hash columns (hashing-tfidf-svd)")
    dimensions: int = pydantic.Field(64, ge=2, le=1024, description="SVD components (hashing-tfidf-svd)")
    max_chars: int = pydantic.Field(20_000, ge=100, description="characters of a document that are embedded")
    lowercase: bool = pydantic.Field(True, description="lower-case the text before hashing")
    erase_languages: bool = pydantic.Field(True, description="project out the directions that separate languages")
    erase_min_documents: int = pydantic.Field(
        20, ge=2, description="a language's documents in the sample before its direction is erased"
    )


class DomainsRecord(StrictModel):
    """Topic domains (the embedded corpus: k = 8; the reference run: k = 40 from 5,000 fine centres)."""

    enabled: bool = pydantic.Field(True, description="false keeps one domain")
    k: int = pydantic.Field(8, ge=1, le=1000, description="domains (cells c00 … c{k-1})")
    fine_centroids: int = pydantic.Field(256, ge=1, description="k-means centres before merging")
    docs_per_fine_centroid: int = pydantic.Field(
        8, ge=1, description="at least this many sample documents per fine centre (caps fine_centroids)"
    )
    sample_size: int = pydantic.Field(20_000, ge=10, description="documents the model is fitted on")
    sample_bytes: int = pydantic.Field(
        16_000_000, ge=1, description="text the pipeline samples (after dedup, by id hash) to fit on"
    )
    min_share: float = pydantic.Field(0.01, ge=0.0, lt=1.0, description="smallest share of documents per domain")
    label_terms: int = pydantic.Field(3, ge=1, le=10, description="distinctive terms in a domain's label")
    kmeans_iterations: int = pydantic.Field(100, ge=1, description="k-means iterations at most")
    embedder: str = pydantic.Field(
        "hashing-tfidf-svd", description="hashing-tfidf-svd | use-multilingual-v3 | package.module:Class"
    )
    embedding: EmbeddingConfig = pydantic.Field(
        EmbeddingConfig(), description="hashed TF-IDF + truncated SVD, offline on CPU"
    )
    seed: int = pydantic.Field(0, description="the fit's seed (k-means, SVD)")

    @pydantic.model_validator(mode="after")
    def _shares_fit(self) -> DomainsRecord:
        if self.k * self.min_share > 1.0:
            raise ValueError(f"k={self.k} domains of at least min_share={self.min_share} cannot fit in 100%")
        return self


class PipelineRecord(StrictModel):
    """The config a store was built from: every section but `executor` (how it ran changes nothing in it), with
    the output's copy URL and its storage options recorded as unset (`pipeline.runner.stored_config`)."""

    sources: Sequence[SourceRecord] = pydantic.Field(min_length=1)
    filters: dict[str, dict[str, pydantic.JsonValue]] = {}  # each registered filter's options, `{}` for defaults
    dedup: DedupConfig = DedupConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    output: OutputConfig = OutputConfig()
    validation: HeldOutConfig = HeldOutConfig()
    quality: QualityConfig | None = None
    domains: DomainsRecord | None = None
