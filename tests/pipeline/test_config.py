import pytest
from click.testing import CliRunner

from millrace.cli import main
from millrace.errors import ConfigError
from pipeline.config import load_pipeline_config
from pipeline.starter import init_config
from testkit.corpus import config_text, make_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("cfg") / "corpus", documents=6)


def _load(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return load_pipeline_config(path)


@pytest.mark.parametrize(
    "change, field",
    [
        (("[tokenizer]\nvocab_size = 400", "[tokenizer]\nvocab_size = 400\nvocab = 3"), "tokenizer.vocab"),
        (("vocab_size = 400", 'vocab_size = "big"'), "tokenizer.vocab_size"),
        (('kind = "code"', 'kind = "poetry"'), "sources.2.kind"),
        (('name = "notes"', 'name = "notes"\nfilterz = 1'), "sources.1.filterz"),
        (("/notes", "/nowhere"), "sources.1.paths.0"),
        (('version = "2026.01.02"', 'version = "soon"'), "output.version"),
        (('kind = "code"', 'kind = "code"\nfilters = ["gopher_quality"]'), "sources.2"),
        (("[executor]", "[filters.gopher_quality]\nmin_doc_wordz = 3\n[executor]"), "filters.gopher_quality"),
        (
            ("[executor]", '[filters.gopher_quality]\nmin_doc_words = "fifty"\n[executor]'),
            "filters.gopher_quality.min_doc_words",
        ),
    ],
)
def test_config_errors_name_the_field(tmp_path, corpus, change, field):
    text = config_text(corpus)
    assert change[0] in text
    with pytest.raises(ConfigError, match=f"p.toml: field '{field}"):
        _load(tmp_path, text.replace(change[0], change[1], 1))


def test_cli_config_error_is_one_line_and_exit_2(tmp_path, corpus, capsys):
    path = tmp_path / "p.toml"
    path.write_text(config_text(corpus).replace("vocab_size = 400", "vocab_size = -1"))
    assert main(["pipeline", "run", str(path), "--home", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'tokenizer.vocab_size'" in err[0]


@pytest.mark.slow
def test_init_writes_a_config_that_loads(tmp_path, corpus):
    text = init_config(corpus)
    assert "[[sources]]" in text and 'name = "snippets"' in text and "[dedup]" in text
    config = _load(tmp_path, text)
    assert [s.name for s in config.sources] == ["articles", "notes", "snippets"]
    assert config.source("snippets").kind == "code" and config.source("snippets").filters == []
    result = CliRunner().invoke(
        __import__("pipeline.cli", fromlist=["pipeline"]).pipeline,
        ["init", str(corpus), "--out", str(tmp_path / "starter.toml")],
    )
    assert result.exit_code == 0 and (tmp_path / "starter.toml").read_text() == text


def test_a_second_store_on_the_same_day_takes_the_next_free_number_with_a_notice(tmp_path, caplog):
    import datetime as dt

    from millrace.errors import ConfigError
    from millrace.home import Home
    from pipeline.config import PipelineConfig
    from pipeline.runner import store_version
    from pipeline.store.format import StoreManifest, write_store_manifest

    home = Home(tmp_path)
    today = dt.date.today().strftime("%Y.%m.%d")
    config = PipelineConfig.model_validate({"sources": [{"name": "a", "paths": [str(tmp_path)]}]})
    assert store_version(config, home, "sha256:a") == today
    write_store_manifest(
        home.store("local", today), StoreManifest(name="local", version=today, cells={}, config_hash="sha256:a")
    )
    assert store_version(config, home, "sha256:a") == today  # the same config: reuse
    assert store_version(config, home, "sha256:b") == f"{today}.1"
    assert f"local/{today}.1" in caplog.text
    again = f"{today}.1"
    write_store_manifest(
        home.store("local", again), StoreManifest(name="local", version=again, cells={}, config_hash="sha256:b")
    )
    assert store_version(config, home, "sha256:b") == f"{today}.1"
    assert store_version(config, home, "sha256:c") == f"{today}.2"
    pinned = config.model_copy(update={"output": config.output.model_copy(update={"version": today})})
    with pytest.raises(ConfigError, match=rf'name this one, e.g. version = "{today}.1" in \[output\]'):
        store_version(pinned, home, "sha256:c")
