"""The pipeline's configuration file (TOML), one pydantic model per component.

    [[sources]]            one table per source: name, paths (files or directories), glob, format
                           (jsonl, jsonl.zst, parquet, warc, html, hf-datasets; absent glob: every file
                           with one of the format's extensions, FORMAT_SUFFIXES), kind (prose|code),
                           normalise, filters, language_id, languages, on_bad_file (error|skip),
                           max_document_bytes (1 MB) and long_documents (drop|cut)
    [filters.<name>]       options passed to the registered filter of that name (pipeline.filters; checked at
                           load time)
    [dedup]                exact and MinHash fuzzy dedup: ngram, bands x rows, threshold, seed
    [tokenizer]            a tokenizer.json path, or a byte-level BPE trained on a sample
    [output]               store name, version (CalVer YYYY.MM.DD, default today), shard size
    [executor]             local, ray or slurm, tasks (fixes the file assignment), workers
    [executor.slurm]       partition, time, cpus and memory per task, extra sbatch args (pipeline.slurm)
    [validation]           the held-out split per cell: tokens_per_cell, fraction, max_documents_per_cell,
                           max_token_share, seed; external sets
    [quality], [domains]   optional: quality buckets (pipeline.cells.quality) and topic domains
                           (pipeline.cells.domains); cells become cNNqQ

Every section's model is declared once, in `pipeline.store.config_record` (what a store records of its config);
this module adds the checks that need the filter registry or the machinery (`SourceConfig`, `DomainsConfig`,
`PipelineConfig`) and the sections a store does not record (`executor`). Reading a config imports no step (no
datatrove, no scikit-learn); the steps import their section's model from here. `pipeline init` writes the
starter file from these models (field descriptions become its comments) and from the filter registry,
`pipeline.filters`.

`load_pipeline_config` is the edge: every problem is a one-line ConfigError naming the file
and the field (unknown options, wrong types, a missing source path, a code source sent
through prose filters).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pydantic
import pydantic_core

from millrace.config import StrictModel, parse_document, validate
from millrace.errors import ConfigError
from millrace.urls import is_url
from pipeline import filters as registry
from pipeline.filters import filter_spec
from pipeline.store.config_record import CALVER as CALVER
from pipeline.store.config_record import DedupConfig as DedupConfig
from pipeline.store.config_record import DomainsRecord, SourceRecord
from pipeline.store.config_record import EmbeddingConfig as EmbeddingConfig
from pipeline.store.config_record import EvalSetConfig as EvalSetConfig
from pipeline.store.config_record import FastTextConfig as FastTextConfig
from pipeline.store.config_record import Format as Format
from pipeline.store.config_record import HeldOutConfig as HeldOutConfig
from pipeline.store.config_record import LinearConfig as LinearConfig
from pipeline.store.config_record import OutputConfig as OutputConfig
from pipeline.store.config_record import QualityConfig as QualityConfig
from pipeline.store.config_record import TokenizerConfig as TokenizerConfig

_JSON_LINES = tuple(
    f"{stem}{codec}"
    for stem in (".jsonl", ".json", ".ndjson")
    for codec in ("", ".gz", ".zst", ".zstd", ".bz2", ".xz")
)
# the files a format reads inside a directory when no `glob` is set (compression is taken from the name)
FORMAT_SUFFIXES: dict[str, tuple[str, ...]] = {
    "jsonl": _JSON_LINES,
    "jsonl.zst": _JSON_LINES,
    "parquet": (".parquet",),
    "warc": (".warc", ".warc.gz"),
    "html": (".html", ".htm", ".html.gz", ".htm.gz"),
}
EXTRACTED_FORMATS = frozenset({"warc", "html"})  # their text is HTML: trafilatura extracts it before normalising


class SourceConfig(SourceRecord):
    """One input source; its name becomes the cell name when no domains step runs."""

    @pydantic.field_validator("filters")
    @classmethod
    def _registered_filters(cls, names: list[str]) -> list[str]:
        for name in names:
            filter_spec(name)
        return names

    @pydantic.model_validator(mode="after")
    def _code_skips_prose_filters(self) -> SourceConfig:
        if self.kind == "code":
            prose = [f for f in self.filters if filter_spec(f).prose]
            if prose:
                raise ValueError(f"code source {self.name!r} must not go through prose filters {prose}")
            if self.languages:
                raise ValueError(f"code source {self.name!r} cannot keep by natural language {self.languages}")
        if self.languages is not None and not self.language_id:
            raise ValueError(f"source {self.name!r}: 'languages' needs language_id = true")
        if self.format == "hf-datasets" and any(is_url(p) for p in self.paths):
            raise ValueError(f"source {self.name!r}: an hf-datasets directory must be local (save_to_disk)")
        return self

    @property
    def files_read(self) -> str:
        """Which files of a directory this source reads, in words (for messages)."""
        if self.glob is not None:
            return f"{self.glob!r} files"
        return "files ending " + ", ".join(FORMAT_SUFFIXES.get(self.format, ()))


SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){1,2}$|^\d+$")


class SlurmConfig(StrictModel):
    """What each phase's sbatch script asks for (datatrove's `SlurmPipelineExecutor`, see `pipeline.slurm`)."""

    partition: str = pydantic.Field("", examples=["cpu"], description='required with kind = "slurm"')
    time: str = pydantic.Field("04:00:00", description="per task: D-HH:MM:SS, HH:MM:SS or minutes")
    cpus_per_task: int = pydantic.Field(1, ge=1, description="CPUs of each array task")
    mem_per_cpu_gb: int = pydantic.Field(2, ge=1, description="memory per CPU")
    driver_cpus: int = pydantic.Field(4, ge=1, description="the one-task jobs: dedup rounds, tokenizer, assembly")
    max_running: int = pydantic.Field(0, ge=0, description="array tasks at once (sbatch --array=0-N%max); 0: no limit")
    qos: str = pydantic.Field("", description="the jobs' quality of service")
    env_command: str = pydantic.Field(
        "",
        examples=["source /shared/.venv/bin/activate"],
        description="run before each task, e.g. to activate an environment",
    )
    sbatch_args: dict[str, str | int] = pydantic.Field(
        {}, examples=[{"account": "lab"}], description="any other #SBATCH option"
    )
    logs: str = pydantic.Field("", description="raw Slurm output files; default: the run's work logs/slurm")

    @pydantic.field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        if not SLURM_TIME.match(value):
            raise ValueError("expected a Slurm time limit: D-HH:MM:SS, HH:MM:SS, MM:SS or minutes")
        return value


class ExecutorConfig(StrictModel):
    """`tasks` fixes how input files are split (datatrove assigns sorted(files)[rank::tasks]); the
    store does not depend on it, but a resumed run must keep it. `workers` run at once (local, ray)."""

    kind: Literal["local", "ray", "slurm"] = pydantic.Field(
        "local", description="local | ray (RAY_ADDRESS=... for a running cluster) | slurm"
    )
    tasks: int = pydantic.Field(4, ge=1, le=100_000, description="input split; keep it when resuming a run")
    workers: int = pydantic.Field(2, ge=1, le=4096, description="tasks run at once (local, ray)")
    work_url: str | None = pydantic.Field(
        None,
        examples=["s3://bucket/millrace-work"],
        description="keep the work directory at <work_url>/<name>/<version> (any fsspec URL): tasks stage their "
        "inputs in a local scratch directory and upload what they write; absent: $MILLRACE_HOME/work",
    )
    work_storage_options: dict[str, pydantic.JsonValue] = pydantic.Field(
        {},
        exclude=True,  # credentials and endpoints: never recorded
        examples=[{"profile": "cluster"}],
        description="the work_url's filesystem options (endpoint, credentials profile, ...); never recorded",
    )
    scratch: str | None = pydantic.Field(
        None,
        examples=["/local/nvme/tmp"],
        description="with work_url: where each task makes its scratch directory (a local disk of its node); "
        "absent: the system's temporary directory",
    )
    slurm: SlurmConfig = pydantic.Field(
        SlurmConfig(),
        description='kind = "slurm": one sbatch job per phase, each '
        "after the one before; `--dry-run` writes the scripts without submitting",
        json_schema_extra={"starter": "commented"},
    )  # pipeline.starter.COMMENTED

    @pydantic.model_validator(mode="after")
    def _partition(self) -> ExecutorConfig:
        if self.kind == "slurm" and not self.slurm.partition:
            raise ValueError('kind = "slurm" needs executor.slurm.partition')
        return self


class DomainsConfig(DomainsRecord):
    """Topic domains; the embedder named must be one the pipeline can build."""

    @pydantic.field_validator("embedder")
    @classmethod
    def _known_embedder(cls, name: str) -> str:
        # lazy: heavy (scikit-learn): only when a config is checked
        from pipeline.cells.embedding import embedder_class

        try:
            embedder_class(name)
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("domains.embedder: ")) from None
        return name


def _every_filter_empty() -> dict[str, dict[str, pydantic.JsonValue]]:
    return {spec.name: {} for spec in registry.FILTERS}


def _checked_filter_table(name: str, options: object) -> dict[str, pydantic.JsonValue]:
    """`[filters.<name>]` through the filter's options model; its errors located under `filters.<name>`."""
    try:
        return filter_spec(name).checked_options(options)
    except pydantic.ValidationError as exc:
        located = [dict(error, loc=(name, *error["loc"])) for error in exc.errors()]
        raise pydantic_core.ValidationError.from_exception_data(exc.title, located) from None  # type: ignore[arg-type]


class PipelineConfig(StrictModel):
    sources: list[SourceConfig] = pydantic.Field(min_length=1)
    # each registered filter's options as JSON (what the store records and the filter phase's fingerprint
    # hashes); datatrove takes lists where its signatures say tuples, as the language rules give them
    filters: dict[str, dict[str, pydantic.JsonValue]] = pydantic.Field(default_factory=_every_filter_empty)
    dedup: DedupConfig = DedupConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    output: OutputConfig = OutputConfig()
    executor: ExecutorConfig = ExecutorConfig()
    validation: HeldOutConfig = HeldOutConfig()
    quality: QualityConfig | None = None
    domains: DomainsConfig | None = None

    @pydantic.field_validator("filters", mode="before")
    @classmethod
    def _every_filter(cls, value: Any) -> Any:
        """`[filters.<name>]` tables of registered filters, each checked by its options model; each one present
        (empty when not given), in registry order, so that the recorded config (and its hash) does not depend on
        which tables a file spells out."""
        if not isinstance(value, dict):
            return value
        for name in value:
            filter_spec(name)
        return {spec.name: _checked_filter_table(spec.name, value.get(spec.name, {})) for spec in registry.FILTERS}

    @pydantic.model_validator(mode="after")
    def _unique_sources(self) -> PipelineConfig:
        names = [s.name for s in self.sources]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"source names must be unique; repeated: {duplicated}")
        return self

    def source(self, name: str) -> SourceConfig:
        return next(s for s in self.sources if s.name == name)

    @property
    def fits_cells(self) -> bool:
        """Whether quality buckets or topic domains are fitted; callers import scikit-learn (3-4 s) only then."""
        return any(section is not None and section.enabled for section in (self.quality, self.domains))


def _check_filter_options(config: PipelineConfig, origin: str) -> None:
    """Build each filter with its options once, so that what its constructor refuses fails here, in one line,
    and not in every task."""
    # lazy: heavy (datatrove): only when a config file is loaded
    from pipeline.steps.filter.filtering import build_filter

    for name, options in config.filters.items():
        try:
            build_filter(name, options)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{origin}: field 'filters.{name}': {exc}") from None


def resolve_paths(config: PipelineConfig, base: Path, origin: str) -> PipelineConfig:
    """Make source and tokenizer paths absolute (relative to the config file) and check they exist."""

    def resolved(raws: list[str], field: str) -> list[str]:
        paths = []
        for j, raw in enumerate(raws):
            if is_url(raw):  # listed (and found missing) by the run, through its filesystem
                paths.append(raw)
                continue
            path = (base / Path(raw).expanduser()).resolve()
            if not path.exists():
                raise ConfigError(f"{origin}: field '{field}.{j}': path not found: {path}")
            paths.append(str(path))
        return paths

    sources = [
        source.model_copy(update={"paths": resolved(source.paths, f"sources.{i}.paths")})
        for i, source in enumerate(config.sources)
    ]
    sets = [
        eval_set.model_copy(update={"paths": resolved(eval_set.paths, f"validation.sets.{i}.paths")})
        for i, eval_set in enumerate(config.validation.sets)
    ]
    config = config.model_copy(update={"validation": config.validation.model_copy(update={"sets": sets})})
    tokenizer = config.tokenizer
    if tokenizer.path is not None:
        path = (base / Path(tokenizer.path).expanduser()).resolve()
        if not path.is_file():
            raise ConfigError(f"{origin}: field 'tokenizer.path': file not found: {path}")
        from tokenizers import Tokenizer  # lazy: heavy (the Rust extension): only when a tokenizer is configured

        try:
            given = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises plain Exceptions for unreadable files
            raise ConfigError(f"{origin}: field 'tokenizer.path': not a tokenizer.json ({exc})") from None
        if given.token_to_id(tokenizer.eos) is None:
            raise ConfigError(f"{origin}: field 'tokenizer.eos': {tokenizer.eos!r} is not a token of {path}")
        tokenizer = tokenizer.model_copy(update={"path": str(path)})
    return config.model_copy(update={"sources": sources, "tokenizer": tokenizer})


def parse_pipeline_config(data: Mapping[str, object], origin: str, base: Path) -> PipelineConfig:
    config = validate(PipelineConfig, data, origin)
    _check_filter_options(config, origin)
    return resolve_paths(config, base, origin)


def load_pipeline_config(path: Path | str) -> PipelineConfig:
    """Read, validate and resolve a pipeline config file; errors name the file and the field."""
    path = Path(path)
    return parse_pipeline_config(parse_document(path), str(path), path.resolve().parent)
