"""The mixture search end to end on a store with a known optimum (testkit.searches): the target set is drawn two
parts from c01q0 and one part from c03q0, cells whose content no other cell has. The search must find them:
the proposal puts at least 90% of its weight on the two cells and more on c01q0 than on c03q0 (a random
proposal under the same 60% share bound does both about 1.5% of the time), its surrogate ranks the proxies out
of fold (Spearman >= 0.8), and the validated proposal beats natural and uniform on the target set by more than
two standard errors over three seeds -- measured, not predicted.

One search is trained once for the module (16 proxies of 16 steps, 3 seeds x 3 arms, a very small MoE).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from millrace.cli import cli
from millrace.home import Home
from testkit.searches import TARGET_CELLS, TARGET_SET, known_optimum_home, write_search
from trainer.search.records import FitReport, ProposalRecord, ProxyRow, ValidationRecord, read_proxies
from trainer.search.steps import fit_step, plan_step, propose_step, run_step, validate_step

pytestmark = pytest.mark.slow
TARGET = f"bpb.set.{TARGET_SET}"


@pytest.fixture(scope="module")
def searched(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Home, Path, list[ProxyRow], FitReport, ProposalRecord, ValidationRecord]:
    root = tmp_path_factory.mktemp("known")
    home = known_optimum_home(root / "home")
    spec = write_search(root / "spec")
    plan_step(spec, home)
    _, _, rows = run_step(spec, home)
    fit = fit_step(spec, home, patterns=["bpb.set.*"])
    proposal = propose_step(spec, home)
    validation = validate_step(spec, home)
    return home, spec, rows, fit, proposal, validation


def test_the_proposal_finds_the_cells_the_target_is_drawn_from(searched) -> None:
    _, _, _, _, proposal, _ = searched
    for phase in proposal.phases:
        shares = {w.component: w.weight for w in phase.weights}
        assert sum(shares[c] for c in TARGET_CELLS) >= 0.9, shares
        assert shares["c01q0"] > shares["c03q0"], shares  # the set is two parts c01q0 to one part c03q0
    revision = Path(proposal.revision_file)
    assert revision.is_file() and proposal.continues == "natural"
    assert "predicted target" in revision.read_text() and proposal.provenance.rows == 16


def test_the_surrogate_ranks_the_proxies_out_of_fold(searched) -> None:
    _, _, rows, fit, _, _ = searched
    assert fit.target_fit.rows == len(rows) == 16 and fit.target_fit.spearman is not None
    assert fit.target_fit.spearman >= 0.8
    assert fit.target == {TARGET: 1.0}
    assert [s.metric for s in fit.sets] == [TARGET]


def _standard_error(a: list[float], b: list[float]) -> float:
    return math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))


def test_validated_proposal_beats_natural_and_uniform_by_two_standard_errors(searched) -> None:
    _, _, _, _, _, validation = searched
    measured: dict[str, list[float]] = {}
    for run in validation.runs:
        assert run.results is not None
        value = run.results.metric(TARGET)
        assert value is not None
        measured.setdefault(run.arm, []).append(value)
    assert {arm: len(v) for arm, v in measured.items()} == {"proposal": 3, "natural": 3, "uniform": 3}
    for baseline in ("natural", "uniform"):
        gap = statistics.mean(measured[baseline]) - statistics.mean(measured["proposal"])
        assert gap > 2 * _standard_error(measured["proposal"], measured[baseline]), (baseline, measured)
        reported = next(c for c in validation.comparisons if c.metric == TARGET and c.against == baseline)
        assert reported.distinguishable and reported.high < 0 and reported.verdict == "proposal better"


def test_rows_keep_every_result_so_a_new_target_refits_without_training(searched) -> None:
    home, spec, rows, _, _, _ = searched
    before = {r.run: (home.run(r.run) / "metrics.jsonl").read_text() for r in rows}
    again = run_step(spec, home)[2]  # resumable: nothing is trained twice
    assert [r.model_dump() for r in again] == [r.model_dump() for r in rows]
    assert {r.run: (home.run(r.run) / "metrics.jsonl").read_text() for r in rows} == before
    result = CliRunner().invoke(
        cli, ["--home", str(home.root), "mix", "search", "fit", str(spec), "--target", "bpb.cell.c00q0", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["target"] == {"bpb.cell.c00q0": 1.0} and report["target_fit"]["rows"] == 16
    assert read_proxies(home.search("known")).rows[0].results.metric("bpb.cell.c00q0") is not None
    fit_step(spec, home, patterns=["bpb.set.*"])  # the module's own target back for the other tests


def test_plan_prints_the_swarm(searched) -> None:
    home, spec, _, _, _, _ = searched
    result = CliRunner().invoke(cli, ["--home", str(home.root), "mix", "search", "plan", str(spec)])
    assert result.exit_code == 0, result.output
    for words in (
        "proxies        16",
        "Dirichlet around the uniform weights",
        "to step 4 of 40",
        "16 steps",
        "FLOPs",
        "epoch caps     allow it",
    ):
        assert words in result.output, result.output
