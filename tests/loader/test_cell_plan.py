"""The per-cell plan is one method of the built manifest (`BuiltManifest.cell_plan`): what the loader draws
stays within one sample of it after every step, and the mixtures plan and the trainer's run record read it."""

from fractions import Fraction

from loader import MixtureStream
from mixtures.manifest import read_manifest
from mixtures.plan import plan_of
from testkit.manifests import BOUNDARY_STEP, LOADER_PHASES
from trainer.run_record import planned_tokens_per_cell


def test_the_loader_draws_the_plan_within_one_sample_after_every_step(built):
    _, path = built
    stream = MixtureStream(path, prefetch=0)
    manifest = stream.manifest
    for step in range(manifest.total_steps + 1):
        planned, realised = manifest.cell_plan(step), stream.realised_counts(step)
        assert set(planned) == set(manifest.cells)
        assert all(abs(realised.get(cell, 0) - planned[cell]) <= 1 for cell in planned), step
    # at a phase boundary and at the end, whole phases: exact
    assert manifest.cell_plan(BOUNDARY_STEP) == LOADER_PHASES[0]
    whole = {cell: sum(phase[cell] for phase in LOADER_PHASES) for cell in LOADER_PHASES[0]}
    assert manifest.cell_plan() == whole == stream.realised_counts(manifest.total_steps)
    # part of a phase: each cell's share of the consumed positions
    half = BOUNDARY_STEP // 2 * manifest.global_batch
    expected = {c: float(Fraction(n * half, sum(LOADER_PHASES[0].values()))) for c, n in LOADER_PHASES[0].items()}
    assert manifest.cell_plan(BOUNDARY_STEP // 2) == expected


def test_the_mixtures_plan_and_the_run_record_read_the_same_plan(built):
    _, path = built
    stream = MixtureStream(path, prefetch=0)
    manifest, digest = read_manifest(path)
    plan = manifest.cell_plan()
    assert {cell: row["sequences"] for cell, row in plan_of(manifest, digest)["cells"].items()} == plan
    assert planned_tokens_per_cell(stream) == {cell: int(n) * manifest.seq_len for cell, n in plan.items()}
