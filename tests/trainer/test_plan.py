"""The reference 535B-A23B shape on paper, through the command line."""

import json
from pathlib import Path

from millrace.cli import main as millrace

CONFIG = str(Path(__file__).parents[2] / "trainer" / "configs" / "535b-a23b.toml")


def test_reference_shape_lands_within_five_percent(capsys):
    assert millrace(["train", "plan", CONFIG, "--gpus", "792", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert abs(plan["params"]["total"] / 535e9 - 1) < 0.05
    assert abs(plan["params"]["active"] / 23e9 - 1) < 0.05
    assert abs(plan["total_flops"] / 2.7e24 - 1) < 0.05
    assert plan["gpus"] == 792 and plan["tokens"] == 18.75e12
    state = plan["weights_gib_per_gpu"] + plan["grads_gib_per_gpu"] + plan["optimizer_gib_per_gpu"]
    assert abs(state - plan["params"]["total"] * 16 / 792 / 2**30) < 1e-6
    assert 20 < plan["days"] < 100


def test_plan_text_and_help(capsys):
    assert millrace(["train", "plan", CONFIG, "--gpus", "792"]) == 0
    out = capsys.readouterr().out
    assert "total parameters" in out and "days" in out
    assert millrace(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "millrace train CONFIG" in out and "millrace train plan CONFIG --gpus N" in out


def test_plan_refuses_an_expert_split_that_does_not_divide(capsys):
    assert millrace(["train", "plan", CONFIG, "--gpus", "100"]) == 2
    assert "plan.expert_parallel" in capsys.readouterr().err
