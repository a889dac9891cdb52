"""Shipped training configs are found by name from any directory and listed; a missing run lists the runs."""

from __future__ import annotations

import json

import pytest

from millrace.cli import main
from millrace.errors import ConfigError
from trainer.config import SHIPPED_CONFIGS, load_train_config, resolve_train_config


def test_a_shipped_config_is_found_by_name_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for spec in ("tiny", "tiny.toml", "trainer/configs/tiny.toml"):
        assert resolve_train_config(spec) == SHIPPED_CONFIGS / "tiny.toml"
    assert load_train_config("tiny") == load_train_config(SHIPPED_CONFIGS / "tiny.toml")
    (tmp_path / "tiny.toml").write_text("[model]\nn_layers = 1\n")  # a file of that name is the user's, read first
    assert resolve_train_config("tiny.toml").resolve() == tmp_path / "tiny.toml"
    with pytest.raises(ConfigError, match=r"nope: training config not found .*tiny.*millrace train configs"):
        resolve_train_config("nope")


def test_train_configs_lists_the_shipped_configs(capsys):
    assert main(["train", "configs", "--json"]) == 0
    configs = json.loads(capsys.readouterr().out)["configs"]
    assert {"tiny", "micro-ladder"} <= set(configs) and configs["tiny"] == str(SHIPPED_CONFIGS / "tiny.toml")
    assert main(["train", "configs"]) == 0
    assert any(line.split()[0] == "tiny" for line in capsys.readouterr().out.splitlines())


def test_status_of_a_missing_run_lists_the_runs(tmp_path, capsys):
    for name in ("alpha", "beta"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_text("{}")
    for command in (["train", "status", "nope"], ["train", "explain", "nope", "--step", "1"]):
        assert main([*command, "--home", str(tmp_path)]) != 0
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "run 'nope'" in line and "runs: alpha, beta" in line
