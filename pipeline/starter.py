"""`pipeline init`: a commented starter config for a corpus directory, every option present.

The file is written from the config's models (`pipeline.config`: each field's default, its description as the
comment, its example where it has no default) and the filter registry (`pipeline.filters`), so an option added
there appears here with no edit; `tests/pipeline/test_starter.py` compares the two.

One `[[sources]]` table per source found: each sub-directory of the corpus directory that holds
data files, and the data files lying directly in it. A folder holding several formats (say
`.jsonl.zst` and `.parquet`) gives one source per format. Formats are found by extension, every
one a reader takes (`FORMAT_SUFFIXES`: `.jsonl`, `.json`, compressed `.gz` `.zst` `.bz2` `.xz`
variants, `.parquet`, `.warc`, `.warc.gz`, `.html`), and a `datasets` `save_to_disk` directory
by its `dataset_info.json` or `dataset_dict.json`. Each source's text and id fields are picked from its
first record (`pipeline.steps.read.fields`: the configured name, else the one long string field; a source
where that leaves a choice is an `UnknownTextField` listing the columns). The kind comes from the first record's
`metadata.language` (`python` → code, skipping prose filters and language id); prose sources get
datatrove's Gopher filters, applied with each document's language's rules after language id.
"""

from __future__ import annotations

import json
import textwrap
import typing
from pathlib import Path
from typing import Any, TypedDict

import pydantic

from millrace.errors import ConfigError
from pipeline.config import FORMAT_SUFFIXES, PipelineConfig, QualityConfig, SourceConfig
from pipeline.filters import FILTERS
from pipeline.steps.read.discovery import unread_files
from pipeline.steps.read.fields import UnknownTextField, first_record, pick_id_key, pick_text_key
from pipeline.store.manifest_records import NotRead

FORMATS = ("jsonl", "parquet", "warc", "html")  # in the order a folder's sources are named
CODE_LANGUAGES = {"python", "c", "cpp", "java", "javascript", "rust", "go", "shell", "code"}


def _is_datasets_dir(directory: Path) -> bool:
    return (directory / "dataset_info.json").exists() or (directory / "dataset_dict.json").exists()


def _data_files(paths: list[Path]) -> dict[str, list[Path]]:
    """The given files by format (sorted), hidden files, dangling links and other files left out."""
    by_format: dict[str, list[Path]] = {}
    for path in sorted(paths):
        fmt = next((f for f in FORMATS if path.name.lower().endswith(FORMAT_SUFFIXES[f])), None)
        if fmt and path.is_file() and not path.name.startswith("."):
            by_format.setdefault(fmt, []).append(path)
    return by_format


def is_json_document(path: Path) -> bool:
    """A plain `.json` file whose first line is not a whole JSON object is one JSON document (a pretty-printed
    object or array, such as the corpus builder's own `corpus.json`), not JSON Lines: read as JSON Lines, every
    line of it would be a malformed record."""
    if not path.name.lower().endswith(".json"):
        return False
    try:
        with open(path, "rb") as file:
            first = file.readline(1 << 20).decode("utf-8-sig", errors="replace")
        return not isinstance(json.loads(first), dict)
    except (OSError, json.JSONDecodeError):
        return True


def _folder_sources(name: str, directory: Path) -> list[tuple[str, list[Path], str]]:
    """A folder's sources: one per format found anywhere under it (named `name`, then `name-<format>`)."""
    if _is_datasets_dir(directory):
        return [(name, [directory], "hf-datasets")]
    visible = [
        p for p in directory.rglob("*") if not any(part.startswith(".") for part in p.relative_to(directory).parts)
    ]
    found = sorted(_data_files(visible).items(), key=lambda item: FORMATS.index(item[0]))
    return [(name if index == 0 else f"{name}-{fmt}", [directory], fmt) for index, (fmt, files) in enumerate(found)]


def discover_sources(corpus_dir: Path) -> list[tuple[str, list[Path], str]]:
    """(name, paths, format) for each source under `corpus_dir`: its folders,
    then the data files lying directly in it (listed by name, so that no folder is read twice)."""
    corpus_dir = Path(corpus_dir)
    if not corpus_dir.is_dir():
        raise ConfigError(f"{corpus_dir}: corpus directory not found")
    root = corpus_dir.name.lower()
    if _is_datasets_dir(corpus_dir):
        return [(root, [corpus_dir], "hf-datasets")]
    children = sorted(p for p in corpus_dir.iterdir() if not p.name.startswith("."))
    found = [source for child in children if child.is_dir() for source in _folder_sources(child.name.lower(), child)]
    taken = {source[0] for source in found}
    loose = _data_files([p for p in children if not p.is_dir() and not is_json_document(p)])
    for fmt, files in sorted(loose.items(), key=lambda item: FORMATS.index(item[0])):
        name = root if root not in taken else f"{root}-{fmt}"
        taken.add(name)
        found.append((name, files, fmt))
    if not found:
        raise ConfigError(
            f"{corpus_dir}: no jsonl, json, parquet, warc, html (or compressed) files or datasets directory found"
        )
    return found


COMMENT_COLUMN = 34  # where a line's comment starts
WIDTH = 118
COMMENTED = "commented"  # `json_schema_extra={"starter": COMMENTED}`: a table the starter writes commented out


def toml_value(value: Any) -> str:
    """`value` as a TOML value (inline tables for dicts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"no TOML form for {value!r}")


def commented_line(text: str, comment: str | None, commented: bool = False) -> list[str]:
    """`text`, commented out when asked, with `comment` after it (wrapped onto aligned lines)."""
    text = f"# {text}" if commented else text
    if not comment:
        return [text]
    pad = max(COMMENT_COLUMN, len(text) + 2)
    parts = textwrap.wrap(comment, width=max(40, WIDTH - pad - 2))
    return [f"{text:<{pad - 1}} # {parts[0]}"] + [f"{'':<{pad - 1}} #   {part}" for part in parts[1:]]


def _model_list(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The model of a `list[Model]` field, else None."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args and isinstance(args[0], type):
        return args[0] if issubclass(args[0], pydantic.BaseModel) else None
    return None


def model_table(
    header: str, model: pydantic.BaseModel, comment: str | None = None, commented: bool = False, array: bool = False
) -> list[str]:
    """The TOML table `header` of `model`: every field with its value (its example where it has none, commented
    out), its description as the comment; nested models as sub-tables, lists of models as commented examples."""
    brackets = ("[[", "]]") if array else ("[", "]")
    lines = commented_line(f"{brackets[0]}{header}{brackets[1]}", comment, commented)
    nested: list[str] = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if isinstance(value, pydantic.BaseModel):
            nested += [""] + model_table(
                f"{header}.{name}", value, info.description, commented or extra.get("starter") == COMMENTED
            )
        elif (item_model := _model_list(info.annotation)) is not None:
            for example in value or (info.examples or [[]])[0]:
                item = item_model.model_validate(example) if isinstance(example, dict) else example
                nested += [""] + model_table(f"{header}.{name}", item, info.description, not value, array=True)
        elif commented and info.examples:
            lines += commented_line(f"{name} = {toml_value(info.examples[0])}", info.description, True)
        elif value is None:
            example = info.examples[0] if info.examples else ""
            lines += commented_line(f"{name} = {toml_value(example)}", info.description, True)
        else:
            lines += commented_line(f"{name} = {toml_value(value)}", info.description, commented)
    return lines + nested


def _title(model: pydantic.BaseModel) -> list[str]:
    """A model's docstring's first paragraph, as comment lines above its table."""
    first = " ".join((type(model).__doc__ or "").strip().split("\n\n")[0].split())
    return ["# " + line for line in textwrap.wrap(first.replace("`", ""), width=WIDTH - 2)]


def _filters_tables() -> list[str]:
    lines = [
        "# Options for each filter (pipeline.filters), passed to it as keyword arguments. Those of datatrove's",
        "# filters apply to every language, over each language's own rules (pipeline/steps/filter/language_rules.py:",
        "# FineWeb-2's thresholds and stop words).",
    ]
    for spec in FILTERS:
        lines += commented_line(f"[filters.{spec.name}]", spec.summary)
        lines += [f"{key} = {toml_value(value)}" for key, value in spec.starter.items()]
        lines += [f"# {key} = {toml_value(value)}" for key, value in spec.examples.items()]
    return lines


def _quality_intro(source_names: list[str], quality: QualityConfig) -> list[str]:
    """Quality needs a reference of good documents: `python-docs` (the standard library's prose) when the
    corpus has it; otherwise the section is written disabled, to be pointed at one."""
    lines = [
        "# [quality] scores each document by how much it resembles a REFERENCE of good documents (the sources",
        "# or files named below) rather than a document drawn at random from the rest of the corpus (DCLM's",
        '# recipe), and splits the scores into buckets. The reference is the choice that defines "quality" here:',
        "# pick text you would want the model to read more of (edited documentation, curated articles), not",
        "# the corpus's most common source. [quality] and [domains] make cells cNNqQ; delete both tables (or turn",
        "# both off with their `enabled` option) to keep one cell per source.",
    ]
    if quality.enabled:
        return lines + [
            f"# Reference: {', '.join(quality.reference_sources)} (found in this corpus: edited prose, "
            "the default good class)."
        ]
    return lines + [
        f"# Off: no reference source found ({', '.join(QualityConfig().reference_sources)} is the default)."
        " To turn it on, name",
        "# a source of this corpus whose documents are the quality you want more "
        f"of (here: {', '.join(source_names) or 'none'}),",
        "# or list files of such documents, then set enabled = true.",
    ]


def _source(name: str, paths: list[Path], fmt: str, text_keys: dict[str, str]) -> SourceConfig:
    """A found source with its text and id fields picked from its first record (`fields`), its kind from the
    record's `metadata.language` (`python` -> code: no prose filters, no language id)."""
    source = SourceConfig(name=name, paths=[str(p) for p in paths], format=fmt)  # type: ignore[arg-type]
    found = first_record(source)
    record = found[1] if found else {}
    text_key = text_keys.get(name) or (pick_text_key(record) if found else "text")
    if text_key is None or (found and text_key not in record):
        raise UnknownTextField(name, found[0] if found else paths[0].name, list(record))
    metadata = record.get("metadata")
    language = metadata.get("language") if isinstance(metadata, dict) else None
    code = str(language or "") in CODE_LANGUAGES or name.endswith("-code")
    return source.model_copy(
        update={
            "text_key": text_key,
            "id_key": pick_id_key(record, text_key),
            "kind": "code" if code else "prose",
            "language_id": not code,
            "filters": [] if code else ["gopher_repetition", "gopher_quality"],
        }
    )


def starter_config(
    corpus_dir: Path, found: list[tuple[str, list[Path], str]], text_keys: dict[str, str] | None = None
) -> PipelineConfig:
    """The config the starter file spells out: the found sources, quality on where the corpus has its reference.
    `text_keys` names a source's text field where its records leave it open (`UnknownTextField`)."""
    sources = [_source(name, paths, fmt, text_keys or {}) for name, paths, fmt in found]
    names = [source.name for source in sources]
    quality = QualityConfig()
    quality = quality.model_copy(update={"enabled": all(name in names for name in quality.reference_sources)})
    return PipelineConfig.model_validate(
        {
            "sources": [s.model_dump() for s in sources],
            "filters": {spec.name: dict(spec.starter) for spec in FILTERS},
            "quality": quality.model_dump(),
            "domains": {},
        }
    )


def init_config(corpus_dir: Path | str, text_keys: dict[str, str] | None = None) -> str:
    """The text of a starter config for `corpus_dir`."""
    return init_starter(corpus_dir, text_keys)[0]


class StarterSource(TypedDict):
    """A source the starter config reads, as `pipeline init` reports it."""

    name: str
    format: str
    paths: list[str]
    text_key: str
    id_key: str


class StarterFound(TypedDict):
    """What `init_starter` found: the sources, and the files no source reads."""

    sources: list[StarterSource]
    not_read: list[NotRead]


def init_starter(corpus_dir: Path | str, text_keys: dict[str, str] | None = None) -> tuple[str, StarterFound]:
    """The text of a starter config for `corpus_dir`, and what was found there: each source's name, format,
    paths and fields, and the files no source reads (`discovery.unread_files`)."""
    corpus_dir = Path(corpus_dir).resolve()
    discovered = discover_sources(corpus_dir)
    names = [name for name, _, _ in discovered]
    for name in set(text_keys or {}) - set(names):
        raise ConfigError(
            f"--text-key {name}=...: no source {name!r} found in {corpus_dir}; sources: {', '.join(names)}"
        )
    config = starter_config(corpus_dir, discovered, text_keys)
    found: StarterFound = {
        "sources": [
            {"name": s.name, "format": s.format, "paths": s.paths, "text_key": s.text_key, "id_key": s.id_key}
            for s in config.sources
        ],
        "not_read": unread_files(config),
    }
    return _config_text(corpus_dir, config), found


def _config_text(corpus_dir: Path, config: PipelineConfig) -> str:
    """The starter file: every option of `config`, commented."""
    lines = [
        f"# millrace pipeline config for {corpus_dir}",
        "# Run it with:  millrace pipeline run THIS_FILE.toml [--executor local|ray|slurm] [--workers N]",
        "# Every option is present; delete a line to take its default. Unknown options are errors.",
    ]
    lines += [
        f"# Not a source: {path.name} is one JSON document, not JSON Lines (one record per line)."
        for path in sorted(p for p in corpus_dir.iterdir() if p.is_file() and is_json_document(p))
    ]
    for name in PipelineConfig.model_fields:
        section = getattr(config, name)
        lines.append("")
        if name == "sources":
            for source in section:
                lines += model_table("sources", source, array=True) + [""]
        elif name == "filters":
            lines += _filters_tables()
        else:
            if name == "quality":
                lines += _quality_intro([s.name for s in config.sources], section)
            lines += _title(section) + model_table(name, section)
    return "\n".join(lines) + "\n"
