"""The reference 535B-A23B shape on paper, through the command line."""

import json
from pathlib import Path

import pytest

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
    assert "parallel.expert_parallel" in capsys.readouterr().err


SHIPPED = sorted((Path(__file__).parents[2] / "trainer" / "configs").glob("*.toml"))


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: p.name)
def test_plan_plans_every_shipped_config_or_names_the_command_that_does(capsys, config):
    from millrace.config import parse_document

    code = millrace(["train", "plan", str(config), "--json"])
    out, err = capsys.readouterr()
    if "ladder" in parse_document(config):
        assert code != 0 and f"plan it with: millrace ladder plan {config}" in err
        return
    assert code == 0, err
    plan = json.loads(out)
    assert plan["params"]["total"] > 0 and plan["flops_per_token"] > 0
    if config.name == "tiny.toml":  # vocab_size 0: the store's when training, the pipeline default on paper
        assert plan["vocab_size"] == 8192


def test_plan_of_a_tiny_config_says_which_vocabulary_and_fits_its_units(capsys):
    tiny = str(Path(__file__).parents[2] / "trainer" / "configs" / "tiny.toml")
    assert millrace(["train", "plan", tiny, "--vocab-size", "512"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary 512 (from --vocab-size)" in out and " K" in out and "0.00 B" not in out
