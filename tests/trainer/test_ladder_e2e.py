"""The ladder end to end on the trainer's real held-out evaluation: run, fit, predict the next rung up,
train it; compare two revisions with seeds; the page is published from what the runs wrote."""

import json

import pytest

from millrace.cli import main as millrace
from mixtures.build import build
from mixtures.new import NewRevision, new_revision
from testkit.ladders import e2e_ladder
from testkit.stores import make_store
from trainer.ladder.check import predict_then_measure
from trainer.ladder.results import read_ladder

CELLS = {"c00q0": 40000, "c01q0": 30000, "c02q1": 20000}


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    from millrace.home import Home

    root = tmp_path_factory.mktemp("ladder-e2e")
    home = Home.resolve(root / "home")
    make_store(home, CELLS, held_out=6)
    for name, strategy in (("natural", "natural"), ("uniform", "uniform")):
        new_revision(
            home,
            NewRevision(
                mixture="default",
                revision=name,
                store="t",
                strategy=strategy,
                seq_len=32,
                global_batch=8,
                phases=["main:60000"],
            ),
        )
        build(home, "default", name)
    return home, e2e_ladder(root)


@pytest.mark.slow
def test_the_ladder_predicts_its_next_rung_from_held_out_loss(e2e):
    home, path = e2e
    check = predict_then_measure(path, home)
    body = read_ladder(home, "e2e")
    trained = {(r.rung, r.seed) for r in body.results}
    assert trained == {("d8", 0), ("d12", 0), ("d16", 0), ("d24", 0)}
    for result in body.results:
        eval_lines = (home.run(result.run) / "eval.jsonl").read_text().splitlines()
        final = json.loads(eval_lines[-1])
        assert result.final is not None
        assert result.final.loss.macro == final["loss"]["macro"]  # held-out, not training loss
        assert final["step"] == result.steps and len(result.curve) >= 2
    fit = body.fits["natural"]
    losses = [r["loss"] for r in fit["residuals"]]
    assert losses == sorted(losses, reverse=True)  # more compute, lower held-out loss
    assert check.low <= check.predicted <= check.high
    assert abs(check.error) < 1.0 and check.measured < min(losses)


@pytest.mark.slow
def test_compare_reports_differences_spread_and_a_verdict(e2e, capsys):
    home, path = e2e
    code = millrace(
        [
            "ladder",
            "compare",
            str(path),
            "--revision",
            "natural",
            "--revision",
            "uniform",
            "--seeds",
            "2",
            "--rungs",
            "d8,d12",
            "--json",
            "--no-progress",
            "--home",
            str(home.root),
        ]
    )
    assert code == 0, capsys.readouterr().err[-2000:]
    result = json.loads(capsys.readouterr().out)
    assert [r["rung"] for r in result["rungs"]] == ["d8", "d12"]
    for row in result["rungs"]:
        assert row["seeds"] == 2 and row["seed_spread"] > 0  # seeds change the initialisation
        assert row["beyond_noise"] == (abs(row["difference"]) > row["seed_spread"])
    assert result["speedup_b_over_a"] > 0 and result["noise_speedup"] >= 1.0
    assert result["noise"] == result["verdict"].startswith("noise")
    body = read_ladder(home, "e2e")
    assert set(body.fits) == {"natural", "uniform"} and body.comparison is not None
    assert body.comparison["verdict"] == result["verdict"]
    assert millrace(["report", "build", "--home", str(home.root)]) == 0
    page = (home.root / "site" / "ladders" / "e2e" / "index.html").read_text()
    assert result["verdict"] in page and "d24" in page
