import json

import pytest
import zstandard

from pipeline.corpus.builder import build_local_corpus


@pytest.mark.slow
def test_local_corpus_is_deterministic_and_capped(tmp_path):
    first = build_local_corpus(tmp_path / "a", max_bytes=150_000)
    second = build_local_corpus(tmp_path / "b", max_bytes=150_000)
    assert 0 < first.bytes == second.bytes <= 150_000
    names = [s.name for s in first.sources]
    assert "python-code" in names and "python-docs" in names
    files_a = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*.jsonl.zst")}
    files_b = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*.jsonl.zst")}
    assert files_a == files_b and files_a
    for path in (tmp_path / "a").rglob("*.jsonl.zst"):
        for line in zstandard.ZstdDecompressor().decompress(path.read_bytes()).decode().splitlines():
            record = json.loads(line)
            assert record["id"].startswith(record["metadata"]["source"] + "/")
            assert set(record["metadata"]) == {"source", "path", "language"} and record["text"].strip()


def test_roff_strip_stands_in_without_groff():
    from pipeline.corpus.builder import _strip_roff

    page = (
        '.\\" a comment\n.TH LS 1\n.SH NAME\nls \\- list directory contents\n'
        ".SH DESCRIPTION\n.B ls\nlists \\fBfiles\\fR.\n"
    )
    text = _strip_roff(page)
    assert "NAME" in text and "ls - list directory contents" in text and "lists files." in text
    assert "\\" not in text and "a comment" not in text


@pytest.mark.slow
def test_corpus_cli_json(tmp_path, capsys):
    from millrace.cli import main

    assert main(["corpus", "local", "--out", str(tmp_path / "c"), "--max-bytes", "40000", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert 0 < summary["bytes"] <= 40000 and summary["sources"]
    from millrace.artifacts import read_artifact
    from pipeline.corpus.builder import CorpusManifest

    assert read_artifact(tmp_path / "c" / "corpus.json", "millrace.corpus", CorpusManifest).max_bytes == 40000
