"""What a user meets at the command line: names offered when one is wrong, listings, --json everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from millrace.cli import main

REFERENCE_STATS = Path(__file__).parents[1] / "mixtures" / "examples" / "reference" / "available_tokens.json"


def run(capsys, home, *argv) -> tuple[int, str, str]:
    code = main(["--home", str(home.root), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def small_stats(tmp_path: Path, cells: int = 4) -> Path:
    path = tmp_path / "cells.json"
    path.write_text(json.dumps({"available_tokens": {f"c{d:02d}q0": 10_000 * (d + 1) for d in range(cells)}}))
    return path


def test_a_wrong_revision_offers_the_revisions_that_exist(capsys, home):
    code, _, err = run(capsys, home, "mix", "build", "default", "--revision", "uniform")
    assert code != 0
    assert err.strip() == "error: no revision 'uniform'; revisions of default: natural, quality-tilt, uniform-sampling"
    code, _, err = run(capsys, home, "mix", "plan", "nosuch", "--revision", "natural")
    assert code != 0 and "no mixture 'nosuch'; mixtures: default, reference" in err


def test_a_wrong_store_offers_the_stores_that_exist(capsys, home, tmp_path):
    assert (
        run(
            capsys,
            home,
            "store",
            "from-stats",
            str(small_stats(tmp_path)),
            "--name",
            "small",
            "--version",
            "2026.01.01",
        )[0]
        == 0
    )
    code, _, err = run(capsys, home, "store", "info", "smal")
    assert code != 0 and err.count("\n") == 1 and err.rstrip().endswith("; stores: small/2026.01.01")
    code, _, err = run(capsys, home, "mix", "new", "m", "--revision", "r", "--store", "nosuch")
    assert code != 0 and "`millrace pipeline run CONFIG`" in err and err.rstrip().endswith("; stores: small")
    assert "`millrace pipeline`" not in err


def test_mix_new_reads_the_only_store_by_default_and_names_them_when_several(capsys, home, tmp_path):
    code, _, err = run(capsys, home, "mix", "new", "m", "--revision", "r")
    assert code != 0 and "no store under" in err
    run(capsys, home, "store", "from-stats", str(small_stats(tmp_path)), "--name", "small", "--version", "2026.01.01")
    code, out, _ = run(capsys, home, "mix", "new", "m", "--revision", "r", "--json")
    assert code == 0 and json.loads(out)["store"]["name"] == "small"
    run(capsys, home, "store", "from-stats", str(small_stats(tmp_path)), "--name", "other", "--version", "2026.01.01")
    code, _, err = run(capsys, home, "mix", "new", "m", "--revision", "r2")
    assert code != 0 and err.rstrip().endswith(
        "several stores under " + str(home.stores) + "; name one; stores: other, small"
    )


@pytest.mark.slow
def test_store_list_and_from_stats_and_pipeline_init_speak_json(capsys, home, tmp_path):
    code, out, _ = run(capsys, home, "store", "list", "--json")
    assert code == 0 and json.loads(out) == {"stores": []}
    code, out, _ = run(
        capsys,
        home,
        "store",
        "from-stats",
        str(small_stats(tmp_path)),
        "--name",
        "small",
        "--version",
        "2026.01.01",
        "--json",
    )
    made = json.loads(out)
    assert code == 0 and made["cells"] == 4 and made["tokens"] == 100_000
    code, out, _ = run(capsys, home, "store", "list", "--json")
    [row] = json.loads(out)["stores"]
    assert (row["name"], row["version"], row["cells"], row["tokens"], row["stats_only"]) == (
        "small",
        "2026.01.01",
        4,
        100_000,
        True,
    )
    code, out, _ = run(capsys, home, "store", "list")
    assert code == 0 and "small/2026.01.01" in out and "100,000" in out
    corpus = tmp_path / "corpus" / "notes"
    corpus.mkdir(parents=True)
    (corpus / "a.jsonl").write_text(json.dumps({"text": "some words of text", "id": "1"}) + "\n")
    code, out, _ = run(
        capsys, home, "pipeline", "init", str(tmp_path / "corpus"), "--out", str(tmp_path / "p.toml"), "--json"
    )
    assert code == 0 and json.loads(out)["config"] == str(tmp_path / "p.toml") and (tmp_path / "p.toml").exists()


def test_runs_list_and_train_list(capsys, home):
    from trainer.records import METRICS_FILE, RunRecord, write_run

    code, out, _ = run(capsys, home, "train", "list", "--json")
    assert code == 0 and json.loads(out) == {"runs": []}
    run_dir = home.run("r1")
    write_run(
        run_dir, RunRecord(run="r1", status="interrupted", mixture="default", revision="natural", total_steps=10)
    )
    (run_dir / METRICS_FILE).write_text(
        "".join(json.dumps({"step": s, "loss": 5.0 - s / 10}) + "\n" for s in (1, 2, 3))
    )
    code, out, _ = run(capsys, home, "runs", "list", "--json")
    [row] = json.loads(out)["runs"]
    assert (row["run"], row["status"], row["step"], row["loss"]) == ("r1", "interrupted", 3, pytest.approx(4.7))
    code, out, _ = run(capsys, home, "train", "list")
    assert code == 0 and "r1" in out and "3/10" in out and "default/natural" in out


def test_report_build_of_an_unknown_mixture_is_an_error_and_leaves_the_page(capsys, home):
    assert (
        run(
            capsys, home, "store", "from-stats", str(REFERENCE_STATS), "--name", "reference", "--version", "2025.06.01"
        )[0]
        == 0
    )
    assert run(capsys, home, "mix", "build", "reference", "--revision", "two-phase")[0] == 0
    assert run(capsys, home, "report", "build", "--no-runs")[0] == 0
    page = home.site / "reference" / "2025.06.01" / "index.html"
    before = page.read_bytes()
    code, _, err = run(capsys, home, "report", "build", "--no-runs", "--mixture", "nosuch")
    assert code != 0 and "--mixture nosuch" in err and "built mixtures: reference" in err
    assert page.read_bytes() == before
    code, _, err = run(capsys, home, "report", "build", "--run", "nosuch")
    assert code != 0 and "there are no runs" in err


def test_messages_show_numbers_as_written_not_float_noise(tmp_path, capsys, home):
    run(capsys, home, "store", "from-stats", str(small_stats(tmp_path)), "--name", "small", "--version", "2026.01.01")
    revision = tmp_path / "r.toml"
    revision.write_text(
        'mixture = "m"\nrevision = "r"\nseed = 1\nseq_len = 8\nglobal_batch = 2\nepoch_cap = 8.0\n'
        '[store]\nname = "small"\n[[phases]]\nname = "main"\ntokens = 1000\n'
        "[phases.weights]\nc00q0 = 0.6\nc01q0 = 0.3\n"
    )
    code, _, err = run(capsys, home, "mix", "validate", str(revision))
    assert code != 0 and "weights sum to 0.9, not 1" in err and "0.8999" not in err


def test_one_flag_names_the_run_everywhere(capsys, home):
    """--run (and --run-name, which torchrun leaves alone) on train, report build and report watch."""
    from millrace.cli import cli

    for argv in (["train", "run"], ["report", "build"], ["report", "watch"]):
        command = cli
        for name in argv:
            command = command.get_command(None, name) if hasattr(command, "get_command") else command
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert "--run" in options, argv
    for argv in (
        ["report", "watch", "--run", "nosuch", "--timeout", "0"],
        ["report", "watch", "nosuch", "--timeout", "0"],
    ):
        code, _, err = run(capsys, home, *argv)
        assert code != 0 and "nosuch" in err and "not a plain name" not in err
    code, _, err = run(capsys, home, "report", "watch", "a", "--run", "b")
    assert code != 0 and "name the run to follow once" in err
    code, out, _ = run(capsys, home, "train", "run", "--help")
    assert "--run, --run-name" in out and "torchrun" in out


def test_a_page_built_with_fewer_revisions_says_which_it_leaves_out(capsys, home, caplog):
    run(capsys, home, "store", "from-stats", str(REFERENCE_STATS), "--name", "reference", "--version", "2025.06.01")
    assert run(capsys, home, "mix", "build", "reference", "--revision", "two-phase")[0] == 0
    assert run(capsys, home, "mix", "new", "other", "--revision", "flat", "--phase", "main:1T")[0] == 0
    assert run(capsys, home, "mix", "build", "other", "--revision", "flat")[0] == 0
    caplog.clear()
    assert run(capsys, home, "report", "build", "--no-runs", "--mixture", "reference")[0] == 0
    assert "reference/2025.06.01: the page leaves out built revisions flat (not in --mixture reference)" in caplog.text
