"""The filter registry (`pipeline.filters`) as a newcomer meets it: a plain filter class registered with one
entry runs (no `language` keyword forced on it), its options are checked at config load by its options model,
what its constructor refuses is a one-line config error, and the docs' table is the registry's."""

import inspect
from pathlib import Path

import pytest
from datatrove.data import Document

from millrace.cli import main
from millrace.config import StrictModel
from millrace.errors import ConfigError
from pipeline import filters as registry
from pipeline.config import load_pipeline_config
from pipeline.filters import FILTERS, FilterSpec, filter_table
from pipeline.steps.filter.filtering import FilterStep
from testkit.corpus import config_text, make_corpus

DOCS = Path(__file__).parents[2] / "docs" / "pipeline.md"


class MinWords:
    """A plain filter: no datatrove base, no `language` keyword."""

    def __init__(self, min_words: int = 3):
        if min_words < 1:
            raise ValueError(f"min_words must be at least 1, got {min_words}")
        self.min_words = min_words

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return len(doc.text.split()) >= self.min_words or (False, "few_words")


class MinWordsOptions(StrictModel):
    min_words: int = 3


@pytest.fixture
def plain_filter(monkeypatch):
    spec = FilterSpec("min_words", MinWords, "documents of fewer words", options=MinWordsOptions)
    monkeypatch.setattr(registry, "FILTERS", (*FILTERS, spec))
    return spec


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("registry") / "corpus", documents=4)


def write(tmp_path: Path, corpus: Path, table: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(config_text(corpus).replace('filters = ["gopher_quality"]', 'filters = ["min_words"]') + table)
    return path


def test_a_plain_filter_runs_without_language_rules(tmp_path, corpus, plain_filter):
    config = load_pipeline_config(write(tmp_path, corpus, "[filters.min_words]\nmin_words = 4\n"))
    assert config.filters["min_words"] == {"min_words": 4} and config.source("notes").filters == ["min_words"]
    step = FilterStep("min_words", config.filters["min_words"], tmp_path / "funnel", tmp_path / "removed", ["notes"])
    docs = [
        Document(text=text, id=str(i), metadata={"source": "notes", "language": language})
        for i, (text, language) in enumerate([("one two three four", "fr"), ("one two", "en"), ("a b c", None)])
    ]
    kept = [doc.id for doc in step.run(iter(docs))]
    assert kept == ["0"]  # built without `language=` for French, English and unknown alike


@pytest.mark.parametrize(
    "table, expected",
    [
        ("[filters.min_words]\nmin_words = 0\n", "field 'filters.min_words': min_words must be at least 1, got 0"),
        ('[filters.min_words]\nmin_words = "four"\n', "field 'filters.min_words.min_words': Input should be"),
        ('[filters.min_words]\nlanguage = "fr"\n', "field 'filters.min_words.language': unknown option"),
    ],
)
def test_a_refused_option_is_one_line_naming_file_and_field(tmp_path, corpus, plain_filter, table, expected, capsys):
    path = write(tmp_path, corpus, table)
    with pytest.raises(ConfigError, match=f"^{path}: ") as raised:
        load_pipeline_config(path)
    assert expected in str(raised.value) and "\n" not in str(raised.value)
    assert main(["pipeline", "run", str(path), "--home", str(tmp_path / "home")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and not (tmp_path / "home" / "stores").exists()


@pytest.mark.parametrize("spec", FILTERS, ids=lambda spec: spec.name)
def test_each_options_model_is_its_class_signature(spec):
    """Every option the model takes is the class's keyword with the class's default (what millrace sets itself,
    `exclusion_writer` and the per-language `language`, is not an option)."""
    parameters = inspect.signature(spec.filter_class()).parameters
    for name, field in spec.options.model_fields.items():
        assert name in parameters, name
        default = parameters[name].default
        assert field.default == default or (default is None and field.default is None), name
    assert not {"exclusion_writer", "language"} & set(spec.options.model_fields)


def test_the_docs_table_is_the_registry():
    assert filter_table() in DOCS.read_text()
