"""Drill: an eval.jsonl value edited after its rung finished flowed into `ladder fit` (a prediction of 1.59
instead of 5.36). A rung result records its final evaluation's digest; the fit refuses an edited line in one
line naming the file, and fits the untouched ladder as before."""

import json

import pytest

from millrace.cli import main as millrace
from millrace.home import Home
from mixtures.build import build
from mixtures.new import NewRevision, new_revision
from testkit.ladders import FITTED, write_ladder
from testkit.stores import make_store
from trainer.ladder.results import read_ladder
from trainer.ladder.run import run_ladder

CELLS = {"c00q0": 30000, "c01q0": 20000}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("drill-ladder")
    home = Home.resolve(root / "home")
    make_store(home, CELLS, held_out=6)
    new_revision(
        home,
        NewRevision(
            mixture="default",
            revision="natural",
            store="t",
            strategy="natural",
            seq_len=32,
            global_batch=8,
            phases=["main:60000"],
        ),
    )
    build(home, "default", "natural")
    path = write_ladder(
        root / "pins.toml",
        "pins",
        "natural",
        """[rules]
widths = [8, 12]
layers = [1, 1]
tokens_per_active_param = 2
batch = 4
"""
        + FITTED,
    )
    run_ladder(path, home)
    return home


def fit(home, capsys):
    capsys.readouterr()
    code = millrace(["--home", str(home.root), "ladder", "fit", "pins", "--json"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow  # two rungs trained for real: about 40 s on a quiet machine
def test_an_edited_rung_evaluation_is_refused_by_the_fit(trained, capsys):
    home = trained
    code, out, _ = fit(home, capsys)
    assert code == 0
    before = json.loads(out)
    result = read_ladder(home, "pins").results[0]
    assert result.final_digest is not None and result.final_digest.startswith("sha256:")
    eval_file = home.run(result.run) / "eval.jsonl"
    pristine = eval_file.read_text()
    lines = pristine.splitlines()
    last = json.loads(lines[-1])
    last["loss"]["macro"] = last["loss"]["macro"] / 3
    eval_file.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    try:
        code, out, err = fit(home, capsys)
        assert code == 2, out
        assert str(eval_file) in err and "differs from the one ladder 'pins' recorded" in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    finally:
        eval_file.write_text(pristine)
    code, out, _ = fit(home, capsys)
    assert code == 0 and json.loads(out) == before
