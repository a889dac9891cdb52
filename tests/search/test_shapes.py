"""The shapes users bring to a search, with no training: a store with one cell (nothing to choose: one line at
`plan`, nothing written), two cells (a trivial but correct search), bounds that leave no mixture, and 200 cells
(40 domains x 5 buckets, as the reference) of very different sizes -- the 40 smallest merged into one tail, one
cell without held-out data -- planned with the default swarm, then fitted and proposed on rows scored by a
known log-linear law of their weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from millrace.cli import cli
from millrace.cli import main as millrace
from millrace.home import Home
from testkit.searches import scored_rows, search_home, write_search
from trainer.search.records import PLAN_FILE, TAIL, SwarmPlan
from trainer.search.revisions import weights_array
from trainer.search.steps import fit_step, plan_step, propose_step

MACRO = {"kind": "macro"}
TAIL_TOKENS = 250
# 40 domains x 5 buckets: bucket 0 tiny (under the tail's bound), the others 500 to 8,000 tokens (16x apart)
REFERENCE_SHAPE = {f"c{d:02d}q{q}": 200 if q == 0 else 500 * 2 ** ((d + q) % 5) for d in range(40) for q in range(5)}
NO_HELD_OUT = "c05q3"


def _refused(home: Home, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert millrace(["--home", str(home.root), "mix", "search", *args]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(
    ("cells", "tables", "says"),
    [
        ({"c00q0": 9000}, {}, "one cell with training data (c00q0)"),
        (
            {"c00q0": 400, "c01q0": 500, "c02q0": 600},
            {"components": {"tail_tokens": 10_000}},
            "3 cells, all under components.tail_tokens = 10,000 and merged into one tail",
        ),
    ],
)
def test_one_component_is_one_line_naming_the_store_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cells: dict[str, int], tables: dict, says: str
) -> None:
    home = search_home(tmp_path / "home", cells, steps=20)
    spec = write_search(tmp_path / "spec", proxies=None, proxy_steps=8, target=MACRO, **tables)
    line = _refused(home, capsys, "plan", str(spec))
    assert f"{spec}: store t/2026.01.01 gives default/natural {says}" in line and "nothing to choose" in line
    assert not (home.search("known") / PLAN_FILE).exists()


def test_a_max_share_no_mixture_fits_under_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = search_home(tmp_path / "home", {"c00q0": 6000, "c01q0": 3000})
    spec = write_search(tmp_path / "spec", target=MACRO, constraints={"max_share": 0.4})
    line = _refused(home, capsys, "plan", str(spec))
    assert "field 'constraints.max_share' 0.4: 2 components at most 0.4 each" in line and "at least 0.5" in line


def _best_first(plan: SwarmPlan, slopes: np.ndarray) -> list[str]:
    return [plan.components[i].name for i in np.argsort(slopes[0])]


@pytest.mark.slow  # the surrogate imports lightgbm (seconds)
def test_two_cells_plan_the_default_swarm_and_propose_the_better_cell_up_to_max_share(tmp_path: Path) -> None:
    home = search_home(tmp_path / "home", {"c00q0": 6000, "c01q0": 3000})
    spec = write_search(tmp_path / "spec", proxies=None, target=MACRO)
    _, plan = plan_step(spec, home)
    assert [c.name for c in plan.components] == ["c00q0", "c01q0"] and len(plan.proxies) == 4  # 2 per component
    slopes = np.array([[1.0, -1.0]])  # c01q0 lowers the target
    scored_rows(home, plan, slopes, noise=0.001)
    fit = fit_step(spec, home)
    assert fit.target_fit.rows == 4 and fit.target_fit.folds == 4 and fit.target_fit.spearman == pytest.approx(1.0)
    proposal = propose_step(spec, home)
    shares = {w.component: w.weight for w in proposal.phases[0].weights}
    assert shares == pytest.approx({"c00q0": 0.4, "c01q0": 0.6})  # the better cell up to max_share 0.6
    assert proposal.provenance.predicted == pytest.approx(np.exp(0.1 + 0.4 - 0.6), rel=0.01)


@pytest.fixture(scope="module")
def reference_shape(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Path, SwarmPlan]:
    """The 200-cell store, its natural baseline (long enough that the smallest cell draws a sequence) and the
    default swarm planned over it."""
    root = tmp_path_factory.mktemp("shape200")
    held = {cell: 1 for cell in REFERENCE_SHAPE if cell != NO_HELD_OUT and not cell.endswith("q0")}
    home = search_home(root / "home", REFERENCE_SHAPE, held_out=held, steps=400)
    spec = write_search(
        root / "spec",
        proxies=None,
        target=MACRO,
        components={"tail_tokens": TAIL_TOKENS},
        constraints={"max_share": 0.25},
    )
    _, plan = plan_step(spec, home)
    return home, spec, plan


@pytest.mark.slow  # the 200-cell store and its plan: about 2 s of CPU for the module
def test_200_cells_plan_o_cells_proxies_with_the_small_cells_in_one_tail(
    reference_shape: tuple[Home, Path, SwarmPlan],
) -> None:
    _, _, plan = reference_shape
    tail = [c for c in plan.components if c.name == TAIL]
    assert len(tail) == 1 and tail[0].cells == sorted(c for c in REFERENCE_SHAPE if c.endswith("q0"))
    assert len(plan.components) == 161 and len(plan.proxies) == 2 * 161
    assert NO_HELD_OUT in {c.name for c in plan.components}  # trained on, though nothing of it is held out
    tokens = {c.name: c.tokens for c in plan.components if c.name != TAIL}
    assert max(tokens.values()) / min(tokens.values()) > 12
    assert plan.epochs.feasible and plan.epochs.planned_feasible
    weights = np.stack([weights_array(p.phases, plan.components) for p in plan.proxies])
    np.testing.assert_allclose(weights.sum(axis=2), 1.0, atol=1e-9)
    assert weights.max() <= 0.25 + 1e-9 and len({tuple(np.round(w[0], 9)) for w in weights}) == len(plan.proxies)


@pytest.mark.slow  # the 200-cell store and its plan: about 2 s of CPU for the module
def test_200_cells_plan_names_the_components_the_macro_target_cannot_measure(
    reference_shape: tuple[Home, Path, SwarmPlan],
) -> None:
    home, spec, _ = reference_shape
    result = CliRunner().invoke(cli, ["--home", str(home.root), "mix", "search", "plan", str(spec)])
    assert result.exit_code == 0, result.output
    assert "  proxies        322\n" in result.output
    assert (
        "  held-out       2 of 161 components hold no held-out data (c05q3, tail): the macro target does not "
        "measure them" in result.output
    )


@pytest.mark.slow  # lightgbm's import, and plan/proxy records of 322 rows x 161 weights (~10 MB each)
def test_200_cells_fit_and_propose_on_a_known_law(reference_shape: tuple[Home, Path, SwarmPlan]) -> None:
    home, spec, plan = reference_shape
    slopes = np.random.default_rng(1).normal(0.0, 1.0, (1, len(plan.components)))
    scored_rows(home, plan, slopes)
    fit = fit_step(spec, home)
    assert fit.target_fit.rows == 322 and fit.target_fit.spearman >= 0.9
    proposal = propose_step(spec, home)
    shares = {w.component: w.weight for w in proposal.phases[0].weights}
    assert sum(shares.values()) == pytest.approx(1.0) and max(shares.values()) <= 0.25 + 1e-6
    chosen = [name for name, share in shares.items() if share > 0.01]
    assert set(chosen) <= set(_best_first(plan, slopes)[:12])  # only components the law favours
    prior = proposal.provenance.prior_predicted
    assert prior is not None and proposal.provenance.predicted < prior
    assert Path(proposal.revision_file).is_file()
