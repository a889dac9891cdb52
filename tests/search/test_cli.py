"""`millrace mix search`: every step's help, the plan in JSON, and bad input as one line naming the file or field,
with a non-zero exit and nothing written. No training here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from millrace.cli import cli
from millrace.cli import main as millrace
from millrace.home import Home
from testkit.searches import known_optimum_home, write_search
from trainer.search.records import PLAN_FILE


@pytest.fixture
def planned(tmp_path: Path) -> tuple[Home, Path]:
    return known_optimum_home(tmp_path / "home"), write_search(tmp_path / "spec")


def _invoke(home: Home, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--home", str(home.root), "mix", "search", *args])
    return result.exit_code, result.output


def _refused(home: Home, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The command as a user runs it: refused with a non-zero exit and one `error:` line."""
    assert millrace(["--home", str(home.root), "mix", "search", *args]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("step", ["plan", "run", "fit", "propose", "validate"])
def test_every_step_explains_its_options(step: str) -> None:
    result = CliRunner().invoke(cli, ["mix", "search", step, "--help"])
    assert result.exit_code == 0 and "--json" in result.output and "--home" in result.output


def test_plan_json_is_the_swarm_and_plans_the_same_swarm_twice(planned: tuple[Home, Path]) -> None:
    home, spec = planned
    code, out = _invoke(home, "plan", str(spec), "--json")
    assert code == 0, out
    plan = json.loads(out)
    assert len(plan["proxies"]) == 16 and plan["branch"]["at_step"] == 4 and plan["budget"]["steps"] == 16
    assert plan["epochs"]["feasible"] and plan["total_flops"] > 0
    assert [c["name"] for c in plan["components"]] == ["c00q0", "c01q0", "c02q0", "c03q0"]
    for proxy in plan["proxies"]:
        for phase in proxy["phases"]:
            weights = [w["weight"] for w in phase["weights"]]
            assert sum(weights) == pytest.approx(1.0) and max(weights) <= 0.6 + 1e-9  # inside constraints.max_share
    again = json.loads(_invoke(home, "plan", "known", "--json")[1])  # by name, once planned
    assert again["proxies"] == plan["proxies"]


def test_a_budget_past_the_baseline_is_one_line_naming_the_field(
    planned: tuple[Home, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, _ = planned
    spec = write_search(tmp_path / "big", proxy_steps=100)
    line = _refused(home, capsys, "plan", str(spec))
    assert "big/known.toml: field 'proxies.tokens'" in line and "passes the 40 steps of default/natural" in line
    assert not (home.search("known") / PLAN_FILE).exists()


def test_fit_before_any_proxy_ran_says_what_to_run(
    planned: tuple[Home, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    home, spec = planned
    assert _invoke(home, "plan", str(spec))[0] == 0
    line = _refused(home, capsys, "fit", str(spec))
    assert "0 usable proxy rows" in line and "millrace mix search run" in line


def test_an_unknown_search_is_one_line(planned: tuple[Home, Path], capsys: pytest.CaptureFixture[str]) -> None:
    home, _ = planned
    assert "search 'nothing-here': no such file and no plan" in _refused(home, capsys, "fit", "nothing-here")
