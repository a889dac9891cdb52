"""`pipeline init`'s starter file against the config's models and the filter registry: every option is in it
(set, or commented out with an example), no option it names is unknown, and what it sets loads as the models'
defaults (but for what the starter chooses on purpose)."""

import re
import tomllib
import typing
from pathlib import Path

import pydantic
import pytest

from pipeline.config import DedupConfig, DomainsConfig, PipelineConfig, QualityConfig
from pipeline.filters import FILTERS
from pipeline.starter import init_config
from testkit.corpus import make_corpus

TABLE = re.compile(r"^(?:# )?\[\[?([\w.]+)\]\]?\s*(?:#|$)")  # a table header, not prose naming one
OPTION = re.compile(r"^(?:# )?(\w+) = ")


@pytest.fixture(scope="module")
def starter(tmp_path_factory) -> tuple[Path, str]:
    corpus = make_corpus(tmp_path_factory.mktemp("starter") / "corpus", documents=6)
    return corpus, init_config(corpus)


def _model_of(annotation: typing.Any) -> type[pydantic.BaseModel] | None:
    """The model a field holds: itself, in a list, or beside None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, pydantic.BaseModel):
            return candidate
        inner = typing.get_args(candidate)
        if typing.get_origin(candidate) is list and inner and issubclass(inner[0], pydantic.BaseModel):
            return inner[0]
    return None


def expected_options(model: type[pydantic.BaseModel], table: str = "") -> set[tuple[str, str]]:
    """(table, option) for every field of `model` and its nested models; `[filters.<name>]` from the registry."""
    options: set[tuple[str, str]] = set()
    for name, info in model.model_fields.items():
        where = f"{table}.{name}" if table else name
        if model is PipelineConfig and name == "filters":
            for spec in FILTERS:
                options |= {(f"filters.{spec.name}", key) for key in (*spec.starter, *spec.examples)}
                options.add((f"filters.{spec.name}", ""))
        elif (nested := _model_of(info.annotation)) is not None:
            options |= {(where, "")} | expected_options(nested, where)
        else:
            options.add((table, name))
    return options


def starter_options(text: str) -> set[tuple[str, str]]:
    """(table, option) for every table and option the file names, set or commented out."""
    found: set[tuple[str, str]] = set()
    table = ""
    for line in text.splitlines():
        if match := TABLE.match(line):
            table = match.group(1)
            found.add((table, ""))
        elif match := OPTION.match(line):
            found.add((table, match.group(1)))
    return found


def test_the_starter_names_every_option_of_the_models_and_no_other(starter):
    _, text = starter
    expected, found = expected_options(PipelineConfig), starter_options(text)
    assert expected - found == set(), "options missing from the starter"
    assert found - expected == set(), "options in the starter the models do not have"
    assert ("output", "storage_options") in found and ("quality.fasttext", "dim") in found


def test_the_comparison_catches_an_option_left_out(starter):
    """The hand-written starter this replaced missed `[output] storage_options` and `[quality.fasttext]`."""
    _, text = starter
    cut = re.sub(r"\n\[quality\.fasttext\].*?\n\n", "\n\n", text, flags=re.S)
    cut = "\n".join(line for line in cut.splitlines() if not line.startswith("storage_options"))
    missing = expected_options(PipelineConfig) - starter_options(cut)
    assert ("output", "storage_options") in missing and ("quality.fasttext", "dim") in missing
    assert ("quality.fasttext", "") in missing


def test_the_starter_loads_as_the_defaults_but_for_its_own_choices(starter):
    corpus, text = starter
    config = PipelineConfig.model_validate(tomllib.loads(text))  # loading the file itself: test_config.py
    assert config.dedup == DedupConfig() and config.domains == DomainsConfig()
    assert config.quality == QualityConfig(enabled=False)  # no python-docs source: off, and the file says why
    assert "no reference source found" in text and "(here: articles, notes, snippets)" in text
    assert config.filters == {spec.name: dict(spec.starter) for spec in FILTERS}
    assert [s.name for s in config.sources] == ["articles", "notes", "snippets"]
    assert config.source("snippets").filters == [] and config.source("articles").paths == [str(corpus / "articles")]


def test_every_commented_example_is_a_valid_value(starter):
    _, text = starter
    text = "\n\n".join(block for block in text.split("\n\n") if 'kind = "code"' not in block)  # keeps no language
    uncommented = "\n".join(
        line[2:] if line.startswith("# ") and (TABLE.match(line) or OPTION.match(line)) else line
        for line in text.splitlines()
    )
    data = tomllib.loads(uncommented)
    config = PipelineConfig.model_validate(data)  # paths are not resolved: the examples name files not here
    assert config.executor.slurm.partition == "cpu" and config.validation.sets[0].name == "wiki-2026"
    assert config.output.url == "s3://bucket/stores" and config.sources[0].languages == ["en"]
