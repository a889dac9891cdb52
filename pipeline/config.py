"""The pipeline's configuration file (TOML), one pydantic model per component.

    [[sources]]            one table per source: name, paths (files or directories), glob, format
                           (jsonl, jsonl.zst, parquet, warc, html, hf-datasets; absent glob: every file
                           with one of the format's extensions, FORMAT_SUFFIXES), kind (prose|code),
                           normalise, filters, language_id, languages, on_bad_file (error|skip),
                           max_document_bytes (1 MB) and long_documents (drop|cut)
    [filters.<name>]       options passed to datatrove's filter of that name (checked at load time)
    [dedup]                exact and MinHash fuzzy dedup: ngram, bands x rows, threshold, seed
    [tokenizer]            a tokenizer.json path, or a byte-level BPE trained on a sample
    [output]               store name, version (CalVer YYYY.MM.DD, default today), shard size
    [executor]             local, ray or slurm, tasks (fixes the file assignment), workers
    [executor.slurm]       partition, time, cpus and memory per task, extra sbatch args (pipeline.slurm)
    [validation]           the held-out split per cell: tokens_per_cell, fraction, max_documents_per_cell,
                           max_token_share, seed; external sets
    [quality], [domains]   optional; their models live in pipeline.cells.quality / pipeline.cells.domains

`load_pipeline_config` is the edge: every problem is a one-line ConfigError naming the file
and the field (unknown options, wrong types, a missing source path, a code source sent
through prose filters).
"""

from __future__ import annotations

import datetime as dt
import importlib
import re
from pathlib import Path
from typing import Any, Literal

import pydantic

from millrace.config import StrictModel, parse_document, validate
from millrace.errors import ConfigError, first_validation_error
from millrace.names import NAME_PATTERN
from pipeline.cells.validation import ValidationConfig

FilterName = Literal["gopher_quality", "gopher_repetition", "c4_quality", "fineweb_quality"]
FILTER_NAMES: tuple[str, ...] = ("gopher_quality", "gopher_repetition", "c4_quality", "fineweb_quality")
PROSE_FILTERS = frozenset(FILTER_NAMES)  # every datatrove heuristic filter assumes natural-language text
Format = Literal["jsonl", "jsonl.zst", "parquet", "warc", "html", "hf-datasets"]
_JSON_LINES = tuple(f"{stem}{codec}" for stem in (".jsonl", ".json", ".ndjson")
                    for codec in ("", ".gz", ".zst", ".zstd", ".bz2", ".xz"))
# the files a format reads inside a directory when no `glob` is set (compression is taken from the name)
FORMAT_SUFFIXES: dict[str, tuple[str, ...]] = {
    "jsonl": _JSON_LINES, "jsonl.zst": _JSON_LINES, "parquet": (".parquet",), "warc": (".warc", ".warc.gz"),
    "html": (".html", ".htm", ".html.gz", ".htm.gz"),
}
EXTRACTED_FORMATS = frozenset({"warc", "html"})  # their text is HTML: trafilatura extracts it before normalising
CALVER = re.compile(r"^\d{4}\.\d{2}\.\d{2}(\.\d+)?$")


def _section(module: str, name: str, value: Any) -> Any:
    """Validate an optional section with its owner's model, imported only when the section is used."""
    if value is None or isinstance(value, pydantic.BaseModel):
        return value
    model = getattr(importlib.import_module(module), name)
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise ValueError(first_validation_error(exc, lambda loc: ".".join(map(str, loc)) or "<root>")) from None


class SourceConfig(StrictModel):
    """One input source; its name becomes the cell name when no domains stage runs."""

    name: str = pydantic.Field(pattern=NAME_PATTERN)
    paths: list[str] = pydantic.Field(min_length=1)
    glob: str | None = None
    format: Format = "jsonl.zst"
    kind: Literal["prose", "code"] = "prose"
    normalise: bool = True
    filters: list[FilterName] = []
    language_id: bool = True
    languages: list[str] | None = None
    text_key: str = "text"
    id_key: str = "id"
    on_bad_file: Literal["error", "skip"] = "error"
    max_document_bytes: int = pydantic.Field(1_000_000, ge=1)
    long_documents: Literal["drop", "cut"] = "drop"
    symlinks_outside: Literal["skip", "read"] = "skip"  # links leading out of a source's folder: reported, or read

    @pydantic.model_validator(mode="after")
    def _code_skips_prose_filters(self) -> SourceConfig:
        if self.kind == "code":
            prose = [f for f in self.filters if f in PROSE_FILTERS]
            if prose:
                raise ValueError(f"code source {self.name!r} must not go through prose filters {prose}")
            if self.languages:
                raise ValueError(f"code source {self.name!r} cannot keep by natural language {self.languages}")
        if self.languages is not None and not self.language_id:
            raise ValueError(f"source {self.name!r}: 'languages' needs language_id = true")
        return self

    @property
    def files_read(self) -> str:
        """Which files of a directory this source reads, in words (for messages)."""
        if self.glob is not None:
            return f"{self.glob!r} files"
        return "files ending " + ", ".join(FORMAT_SUFFIXES.get(self.format, ()))


class FilterOptions(StrictModel):
    """Keyword options for each datatrove filter, e.g. `[filters.gopher_quality] min_doc_words = 20`."""

    gopher_quality: dict[str, Any] = {}
    gopher_repetition: dict[str, Any] = {}
    c4_quality: dict[str, Any] = {}
    fineweb_quality: dict[str, Any] = {}


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

    exact: bool = True
    fuzzy: bool = True
    ngram: int = pydantic.Field(5, ge=1)
    bands: int = pydantic.Field(40, ge=1)
    rows: int = pydantic.Field(3, ge=1)
    threshold: float = pydantic.Field(0.5, ge=0.0, le=1.0)
    verify_threshold: float = pydantic.Field(0.4, ge=0.0, le=1.0)
    seed: int = 1
    # parts of the hash space that duplicate finding runs in parallel (each an executor task, holding about
    # 1/parts of the signing records at a time); the removals do not depend on it
    parts: int = pydantic.Field(4, ge=1, le=1 << 16)


class TokenizerConfig(StrictModel):
    """`path` to any tokenizer.json, or (when absent) a byte-level BPE trained on a corpus sample."""

    path: str | None = None
    vocab_size: int = pydantic.Field(8192, ge=260, le=1 << 20)
    sample_bytes: int = pydantic.Field(4_000_000, ge=1)
    eos: str = "<|endoftext|>"
    batch_size: int = pydantic.Field(256, ge=1)


class OutputConfig(StrictModel):
    name: str = pydantic.Field("local", pattern=NAME_PATTERN)
    version: str | None = None
    # 256M tokens (512 MiB of uint16, 1 GiB of int32): about 90,000 shards for the reference 23T tokens
    # (450 a cell), large objects for object storage (well past where a request's latency matters, under
    # S3's 5 GiB single-PUT limit), a few MB of `.idx` each; the loader keeps at most 128 open at once.
    shard_tokens: int = pydantic.Field(1 << 28, ge=1)
    # Also copy the finished version to <url>/<name>/<version> (any fsspec URL, e.g. s3://bucket/stores),
    # store.json last; `storage_options` are that filesystem's (endpoint, credentials profile, ...).
    url: str | None = None
    storage_options: dict = {}

    @pydantic.field_validator("version")
    @classmethod
    def _calver(cls, value: str | None) -> str | None:
        if value is not None and not CALVER.match(value):
            raise ValueError("expected CalVer YYYY.MM.DD (optionally .N)")
        return value

    @property
    def resolved_version(self) -> str:
        return self.version or dt.date.today().strftime("%Y.%m.%d")


SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){1,2}$|^\d+$")


class SlurmConfig(StrictModel):
    """What each stage's sbatch script asks for (datatrove's `SlurmPipelineExecutor`, see `pipeline.slurm`)."""

    partition: str = ""
    time: str = "04:00:00"                  # per task: D-HH:MM:SS, HH:MM:SS or minutes
    cpus_per_task: int = pydantic.Field(1, ge=1)
    mem_per_cpu_gb: int = pydantic.Field(2, ge=1)
    driver_cpus: int = pydantic.Field(4, ge=1)  # the one-task jobs (dedup rounds, tokenizer, assembly)
    max_running: int = pydantic.Field(0, ge=0)  # array tasks at once (sbatch --array=0-N%max); 0: no limit
    qos: str = ""
    env_command: str = ""                   # e.g. "source /path/to/.venv/bin/activate"
    sbatch_args: dict[str, str | int] = {}  # any other #SBATCH option, e.g. {account = "lab", constraint = "cpu"}
    logs: str = ""                          # raw Slurm output files; default: the run's work logs/slurm

    @pydantic.field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        if not SLURM_TIME.match(value):
            raise ValueError("expected a Slurm time limit: D-HH:MM:SS, HH:MM:SS, MM:SS or minutes")
        return value


class ExecutorConfig(StrictModel):
    """`tasks` fixes how input files are split (datatrove assigns sorted(files)[rank::tasks]); the
    store does not depend on it, but a resumed run must keep it. `workers` run at once (local, ray)."""

    kind: Literal["local", "ray", "slurm"] = "local"
    tasks: int = pydantic.Field(4, ge=1)
    workers: int = pydantic.Field(2, ge=1)
    slurm: SlurmConfig = SlurmConfig()

    @pydantic.model_validator(mode="after")
    def _partition(self) -> ExecutorConfig:
        if self.kind == "slurm" and not self.slurm.partition:
            raise ValueError("kind = \"slurm\" needs executor.slurm.partition")
        return self


class PipelineConfig(StrictModel):
    sources: list[SourceConfig] = pydantic.Field(min_length=1)
    filters: FilterOptions = FilterOptions()
    dedup: DedupConfig = DedupConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    output: OutputConfig = OutputConfig()
    executor: ExecutorConfig = ExecutorConfig()
    validation: ValidationConfig = ValidationConfig()
    # validated by pipeline.cells.quality.QualityConfig / pipeline.cells.domains.DomainsConfig (their owners' models)
    quality: Any = None
    domains: Any = None

    @pydantic.field_validator("quality", mode="before")
    @classmethod
    def _quality(cls, value: Any) -> Any:
        return _section("pipeline.cells.quality", "QualityConfig", value)

    @pydantic.field_validator("domains", mode="before")
    @classmethod
    def _domains(cls, value: Any) -> Any:
        return _section("pipeline.cells.domains", "DomainsConfig", value)

    @pydantic.model_validator(mode="after")
    def _unique_sources(self) -> PipelineConfig:
        names = [s.name for s in self.sources]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"source names must be unique; repeated: {duplicated}")
        return self

    def source(self, name: str) -> SourceConfig:
        return next(s for s in self.sources if s.name == name)


def _check_filter_options(config: PipelineConfig, origin: str) -> None:
    from pipeline.stages.filtering import build_filter

    for name in FILTER_NAMES:
        options = getattr(config.filters, name)
        try:
            build_filter(name, options)
        except TypeError as exc:
            raise ConfigError(f"{origin}: field 'filters.{name}': {exc}") from None


def resolve_paths(config: PipelineConfig, base: Path, origin: str) -> PipelineConfig:
    """Make source and tokenizer paths absolute (relative to the config file) and check they exist."""
    def resolved(raws: list[str], field: str) -> list[str]:
        paths = []
        for j, raw in enumerate(raws):
            path = (base / Path(raw).expanduser()).resolve()
            if not path.exists():
                raise ConfigError(f"{origin}: field '{field}.{j}': path not found: {path}")
            paths.append(str(path))
        return paths

    sources = [source.model_copy(update={"paths": resolved(source.paths, f"sources.{i}.paths")})
               for i, source in enumerate(config.sources)]
    sets = [eval_set.model_copy(update={"paths": resolved(eval_set.paths, f"validation.sets.{i}.paths")})
            for i, eval_set in enumerate(config.validation.sets)]
    config = config.model_copy(update={"validation": config.validation.model_copy(update={"sets": sets})})
    tokenizer = config.tokenizer
    if tokenizer.path is not None:
        path = (base / Path(tokenizer.path).expanduser()).resolve()
        if not path.is_file():
            raise ConfigError(f"{origin}: field 'tokenizer.path': file not found: {path}")
        from tokenizers import Tokenizer

        try:
            given = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises plain Exceptions for unreadable files
            raise ConfigError(f"{origin}: field 'tokenizer.path': not a tokenizer.json ({exc})") from None
        if given.token_to_id(tokenizer.eos) is None:
            raise ConfigError(f"{origin}: field 'tokenizer.eos': {tokenizer.eos!r} is not a token of {path}")
        tokenizer = tokenizer.model_copy(update={"path": str(path)})
    return config.model_copy(update={"sources": sources, "tokenizer": tokenizer})


def parse_pipeline_config(data: dict[str, Any], origin: str, base: Path) -> PipelineConfig:
    config = validate(PipelineConfig, data, origin)
    _check_filter_options(config, origin)
    return resolve_paths(config, base, origin)


def load_pipeline_config(path: Path | str) -> PipelineConfig:
    """Read, validate and resolve a pipeline config file; errors name the file and the field."""
    path = Path(path)
    return parse_pipeline_config(parse_document(path), str(path), path.resolve().parent)
