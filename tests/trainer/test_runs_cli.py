"""`millrace runs tag` / `runs note`: a run's tags and notes in its run.json, refused in one line when wrong."""

from __future__ import annotations

import json

from millrace.cli import main
from millrace.home import Home
from trainer.records import RunRecord, read_run, write_run


def test_tags_and_notes_are_written_listed_and_refused_when_wrong(tmp_path, capsys):
    home = Home.resolve(tmp_path)
    write_run(home.run("a"), RunRecord(run="a", status="completed", total_steps=10))
    before = (home.run("a") / "run.json").read_text()
    at = ["--home", str(tmp_path)]
    assert main(["runs", "tag", "a", "baseline", "lr-sweep", *at]) == 0
    assert capsys.readouterr().out == "a: tags baseline lr-sweep\n"
    assert main(["runs", "tag", "a", "baseline", "--remove", "lr-sweep", "--json", *at]) == 0
    assert json.loads(capsys.readouterr().out) == {"run": "a", "tags": ["baseline"]}
    assert main(["runs", "note", "a", " the reference for issue 36 ", *at]) == 0
    assert capsys.readouterr().out == "a: notes 'the reference for issue 36'\n"
    run = read_run(home.run("a"))
    assert run.tags == ["baseline"] and run.notes == "the reference for issue 36" and run.total_steps == 10
    assert main(["runs", "list", "--json", *at]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert row["tags"] == ["baseline"] and row["notes"] == "the reference for issue 36"
    written = (home.run("a") / "run.json").read_text()
    assert main(["runs", "tag", "a", "two words", *at]) != 0
    assert main(["runs", "note", "b", "x", *at]) != 0
    assert main(["train", "tiny", "--run", "c", "--tag", "two words", *at]) != 0  # refused before any training
    assert not home.run("c").exists()
    err = capsys.readouterr().err
    assert "tag 'two words': a tag is one word" in err and "run 'b'" in err and "a" in err.splitlines()[-1]
    assert (home.run("a") / "run.json").read_text() == written != before
