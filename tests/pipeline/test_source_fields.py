"""A source's text and id fields are picked from what its files hold, and a missing text field stops the run."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from millrace.cli import main
from millrace.errors import ConfigError
from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline
from pipeline.starter import init_starter
from pipeline.steps.read.fields import UnknownTextField
from testkit.corpus import prose


def _export(root, rows: list[dict]):
    (root / "corpus" / "export").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "corpus" / "export" / "part-0.parquet")
    return root / "corpus"


def test_init_takes_the_one_long_string_column_and_the_id_column(tmp_path):
    rng = random.Random(1)
    corpus = _export(tmp_path, [{"doc_id": f"d{i}", "lang": "en", "body": prose(rng)} for i in range(3)])
    (corpus / "export" / "notes.csv").write_text("a,b\n")
    text, found = init_starter(corpus)
    (source,) = found["sources"]
    assert (source["name"], source["format"], source["text_key"], source["id_key"]) == (
        "export",
        "parquet",
        "body",
        "doc_id",
    )
    assert 'text_key = "body"' in text and 'id_key = "doc_id"' in text
    assert [entry.examples for entry in found["not_read"]] == [["notes.csv"]]


def test_init_asks_for_the_text_field_when_two_columns_could_hold_it(tmp_path, capsys):
    rng = random.Random(2)
    corpus = _export(tmp_path, [{"title": prose(rng), "abstract": prose(rng)} for _ in range(2)])
    with pytest.raises(UnknownTextField, match="columns: title, abstract"):
        init_starter(corpus)
    out = tmp_path / "p.toml"
    assert main(["pipeline", "init", str(corpus), "--out", str(out)]) != 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "part-0.parquet" in line and "title, abstract" in line and "--text-key export=COLUMN" in line
    assert not out.exists()
    assert main(["pipeline", "init", str(corpus), "--out", str(out), "--text-key", "export=abstract", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["sources"][0]["text_key"] == "abstract" and found["not_read"] == []
    assert 'text_key = "abstract"' in out.read_text()
    with pytest.raises(ConfigError, match=r"no source 'exports' found .*; sources: export"):
        init_starter(corpus, {"exports": "abstract"})


def test_on_a_terminal_init_asks_which_column_holds_the_text(tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import _starter

    rng = random.Random(5)
    corpus = _export(tmp_path, [{"title": prose(rng), "abstract": prose(rng)}])
    with CliRunner().isolation(input="abstract\n") as streams:
        _, found = _starter(corpus, {}, ask=True)
    assert found["sources"][0]["text_key"] == "abstract"
    (question,) = [line for line in streams[1].getvalue().decode().splitlines() if line.strip()]
    assert "which field holds source export's text? (title, abstract)" in question


def test_init_prints_the_sources_formats_and_unread_files(tmp_path, capsys):
    rng = random.Random(3)
    corpus = _export(tmp_path, [{"id": "a", "text": prose(rng)}])
    (corpus / "notes").mkdir()
    (corpus / "notes" / "a.jsonl").write_text(json.dumps({"id": "n", "text": prose(rng)}) + "\n")
    (corpus / "notes" / "readme.txt").write_text("not data")
    assert main(["pipeline", "init", str(corpus), "--out", str(tmp_path / "p.toml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("source export: parquet (text 'text', id 'id') from ")
    assert lines[1].startswith("source notes: jsonl (text 'text', id 'id') from ")
    assert lines[2].startswith("not read: 1 file under ") and "readme.txt" in lines[2]


def test_run_refuses_a_source_whose_text_field_its_first_file_lacks(tmp_path):
    rng = random.Random(4)
    corpus = _export(tmp_path, [{"uid": "a", "content": prose(rng)}])
    (tmp_path / "p.toml").write_text(
        f'[[sources]]\nname = "export"\npaths = ["{corpus / "export"}"]\nformat = "parquet"\n'
    )
    home = Home.resolve(tmp_path / "home")
    with pytest.raises(ConfigError) as raised:
        run_pipeline(load_pipeline_config(tmp_path / "p.toml"), home)
    message = str(raised.value)
    assert "\n" not in message and str(corpus / "export" / "part-0.parquet") in message
    assert "'text'" in message and "uid, content" in message
    assert not (home.root / "work").exists()  # no task started
