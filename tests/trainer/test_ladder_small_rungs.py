"""A ladder's rungs build on every store their revision builds on: 1 to 200 cells, every shipped revision.

The micro-ladder's smallest rung scales a cooldown to a dozen sequences; a store of 35 cells with 13 in
q3/q4 (another machine's files) or a 39-cell natural mixture cannot give each cell one of them. `ladder
plan` raises such a rung to the smallest budget that builds (or refuses, with the tokens per parameter
that would), and `ladder run` builds exactly what the plan sized.
"""

import json
from pathlib import Path

import pytest

from millrace.cli import main as millrace
from millrace.errors import ConfigError
from millrace.home import Home
from mixtures.build import build
from mixtures.catalog import SHIPPED
from mixtures.manifest import read_manifest
from testkit.ladders import demo_micro_ladder
from trainer.ladder.plan import plan_ladder
from trainer.ladder.rung_revision import build_rung_revision, resolve_base, rung_problem

REFERENCE_STATS = Path(__file__).parents[2] / "mixtures" / "examples" / "reference" / "available_tokens.json"
DEFAULT_REVISIONS = sorted(p.stem for p in (SHIPPED / "default").glob("*.toml"))
REFERENCE_REVISIONS = sorted(p.stem for p in (SHIPPED / "reference").glob("*.toml"))


def generated_cells(count: int) -> dict[str, int]:
    """`count` cells, domain by domain over buckets q0..q4, Zipf-sized from millions of tokens down to a
    few sequences' worth (the long tail a real store has)."""
    return {f"c{i // 5:02d}q{i % 5}": 600 + int(3_000_000 * (i + 1) ** -1.3) for i in range(count)}


def stats_store(home: Home, tmp_path: Path, name: str, cells: dict[str, int], version: str = "2026.01.01") -> None:
    stats = tmp_path / f"{name}-{version}.json"
    stats.write_text(json.dumps({"available_tokens": cells}))
    assert (
        millrace(["--home", str(home.root), "store", "from-stats", str(stats), "--name", name, "--version", version])
        == 0
    )


def base_builds(home: Home, mixture: str, revision: str) -> bool:
    try:
        build(home, mixture, revision)
    except ConfigError:
        return False
    return True


def assert_every_rung_builds_as_planned(home: Home, ladder: Path, mixture: str, revision: str) -> list:
    """Each rung's revision, at the planned budget, passes the build's own checks; the smallest is built
    as `ladder run` builds it, and every cell it weights gets a sequence in every phase."""
    plan = plan_ladder(ladder, home)
    assert plan.store is not None
    base = resolve_base(home, mixture, revision)
    for rung in plan.rungs + [plan.target]:
        assert rung_problem(base, f"{revision}.micro.{rung.name}", rung.tokens, rung.batch) is None, rung.name
        if rung.raised_from is not None:
            assert rung.tokens > rung.raised_from and rung.raised_because
    smallest = plan.rungs[0]
    _, path = build_rung_revision(home, mixture, revision, "micro", smallest.name, smallest.tokens, smallest.batch)
    manifest, _ = read_manifest(path)
    assert manifest.total_steps == smallest.steps  # the plan's steps are the built phases' (whole batches each)
    for phase in manifest.phases:
        weighted = [cell for cell, w in phase.declared_weights.items() if w > 0]
        assert weighted and all(phase.counts[cell] >= 1 for cell in weighted), phase.name
    return plan.rungs


@pytest.mark.slow
@pytest.mark.parametrize("cells", [1, 13, 35, 39, 200])
def test_every_shipped_default_revision_scales_to_every_rung_on_1_to_200_cells(home, tmp_path, cells):
    stats_store(home, tmp_path, "local", generated_cells(cells))
    built = [r for r in DEFAULT_REVISIONS if base_builds(home, "default", r)]
    # natural builds here up to 39 cells (past that, its cooldown of 768 sequences can't hold the long tail);
    # uniform-sampling and quality-tilt need q3/q4 cells
    assert built and ("natural" in built or cells > 39)
    raised = 0
    for revision in built:
        rungs = assert_every_rung_builds_as_planned(
            home, demo_micro_ladder(tmp_path, "default", revision), "default", revision
        )
        raised += sum(r.raised_from is not None for r in rungs)
    if cells >= 35:  # 35 cells: the cooldown of 12 sequences at d8 can't hold them (the failing fresh clone)
        assert raised > 0


@pytest.mark.slow
def test_every_shipped_reference_revision_scales_to_a_micro_ladder(home, tmp_path):
    cells = json.loads(REFERENCE_STATS.read_text())["available_tokens"]
    stats_store(home, tmp_path, "reference", cells, "2025.06.01")
    for revision in REFERENCE_REVISIONS:  # swap-108000 continues pre-swap: a rung trains its phases whole
        rungs = assert_every_rung_builds_as_planned(
            home, demo_micro_ladder(tmp_path, "reference", revision), "reference", revision
        )
        assert rungs[0].raised_from is not None  # seq 4096 and 200 cells: every micro rung is raised


def test_a_raised_rung_is_the_smallest_budget_that_builds(home, tmp_path):
    stats_store(home, tmp_path, "local", generated_cells(39))
    plan = plan_ladder(demo_micro_ladder(tmp_path, "default", "natural"), home)
    rung = plan.rungs[0]
    assert rung.raised_from is not None and "would get no sample" in rung.raised_because
    base = resolve_base(home, "default", "natural")
    step = rung.batch * plan.seq_len
    assert rung_problem(base, "probe", rung.tokens, rung.batch) is None
    assert rung_problem(base, "probe", rung.tokens - step, rung.batch) is not None


def test_refuse_names_the_rung_and_the_tokens_per_parameter_that_builds(home, tmp_path, capsys):
    stats_store(home, tmp_path, "local", generated_cells(39))
    ladder = demo_micro_ladder(tmp_path, "default", "natural", small_rungs="refuse")
    assert millrace(["--home", str(home.root), "ladder", "plan", str(ladder)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(ladder) in err and "rung d8" in err, err
    tpa = float(err.split("tokens_per_active_param = ")[1].split()[0])
    assert tpa > 12
    fixed = demo_micro_ladder(tmp_path, "default", "natural", small_rungs="refuse", tpa=tpa)
    plan = plan_ladder(fixed, home)  # the value it names builds every rung, with nothing raised
    assert all(r.raised_from is None for r in plan.rungs + [plan.target])
    assert_every_rung_builds_as_planned(home, fixed, "default", "natural")


def test_plan_shows_a_raised_rung(home, tmp_path, capsys):
    stats_store(home, tmp_path, "local", generated_cells(39))
    ladder = demo_micro_ladder(tmp_path, "default", "natural")
    assert millrace(["--home", str(home.root), "ladder", "plan", str(ladder)]) == 0
    out = capsys.readouterr().out
    assert "d8: tokens raised from " in out
    assert millrace(["--home", str(home.root), "ladder", "plan", str(ladder), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["store"] == "local/2026.01.01" and body["rungs"][0]["raised_from"] < body["rungs"][0]["tokens"]
