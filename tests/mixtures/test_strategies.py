"""The strategy registry (`mixtures.strategies.STRATEGIES`) as a newcomer meets it: one entry gives a strategy
its name in revisions, its phase fields and their checks, its weights at build, `mix new`'s options and the
docs' table; a field of one strategy on a `weights` phase or on another strategy's phase is refused naming it."""

import copy
from fractions import Fraction
from pathlib import Path
from typing import Annotated

import pydantic
import pytest
import tomli_w

from millrace.cli import main
from millrace.errors import ConfigError
from mixtures.resolve import resolve_revision
from mixtures.revision import load_revision, parse_revision
from mixtures.strategies import STRATEGIES, Strategy, StrategyOption, strategy_table
from testkit.revisions import base

DOCS = Path(__file__).parents[2] / "docs" / "mixtures.md"


def capped(tokens, options) -> dict[str, Fraction]:
    """Natural weights, none above `max_share` of the whole before normalising."""
    ceiling = Fraction(options["max_share"]) * sum(tokens.values())
    return {cell: min(Fraction(count), ceiling) for cell, count in tokens.items()}


@pytest.fixture
def registered(monkeypatch):
    """A strategy added as a newcomer adds one: a single registry entry."""
    share = Annotated[float, pydantic.Field(gt=0, le=1)]
    option = StrategyOption("max_share", share, "largest share of a cell, above 0 up to 1")
    monkeypatch.setitem(STRATEGIES, "capped", Strategy("capped", "natural, capped per cell", capped, (option,)))


def with_phase(**phase) -> dict:
    data = copy.deepcopy(base())
    data["phases"][1] = {"name": "cooldown", "tokens": 8192, **phase}
    return data


def test_the_docs_table_is_the_registry():
    assert strategy_table() in DOCS.read_text()


def test_mix_new_offers_every_strategy_and_option(capsys):
    assert main(["mix", "new", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for strategy in STRATEGIES.values():
        assert strategy.name in text and strategy.summary in text
        for option in strategy.options:
            assert f"--{option.name.replace('_', '-')} {option.metavar}" in text and option.help in text


@pytest.mark.parametrize(
    "phase, expected",
    [
        ({"weights": {"c*q4": 1.0}, "max_share": 0.5}, "field 'max_share': only for a strategy phase"),
        ({"strategy": "natural", "max_share": 0.5}, "field 'max_share': only for strategy 'capped'"),
        ({"strategy": "capped"}, "field 'max_share': Field required"),
        ({"strategy": "capped", "max_share": 1.5}, "field 'max_share': Input should be less than or equal to 1"),
        ({"strategy": "capped", "max_share": 0.5, "tilt": {"q4": 2.0}}, "field 'tilt': only for strategy 'quality"),
        ({"strategy": "capped", "max_shar": 0.5}, "field 'max_shar': unknown option"),
    ],
)
def test_a_misplaced_or_bad_option_is_one_line_naming_it(registered, phase, expected):
    with pytest.raises(ConfigError) as raised:
        parse_revision(with_phase(**phase), "r1.toml")
    message = str(raised.value)
    assert message.startswith("r1.toml: revision default/r1: phase 'cooldown': ") and "\n" not in message
    assert expected in message, message


def test_a_registered_strategy_builds_with_its_weight_function(registered, revision_home, tmp_path):
    path = tmp_path / "r1.toml"
    path.write_text(tomli_w.dumps(with_phase(strategy="capped", max_share=0.1, cells=["c*q3", "c*q4"])))
    manifest, store = resolve_revision(revision_home, load_revision(path), str(path))
    tokens = {cell: store.manifest.cells[cell].tokens for cell in store.manifest.cells if cell[-2:] in ("q3", "q4")}
    desired = capped(tokens, {"max_share": 0.1})
    expected = {cell: float(weight / sum(desired.values())) for cell, weight in desired.items()}
    declared = {cell: w for cell, w in manifest.phases[1].declared_weights.items() if w > 0}
    assert declared == pytest.approx(expected) and len(set(declared.values())) < len(declared)  # some capped
