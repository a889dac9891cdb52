"""A revision that continues another: the loader's stream across the switch (and down a chain)."""

from __future__ import annotations

import pytest

from loader import MixtureStream
from loader.peek import peek
from millrace.errors import ArtifactError, ConfigError
from mixtures import api
from testkit.lineage import AT_STEP, CHILD, GRAND_AT, lineage_home, write_revision


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    home = lineage_home(tmp_path_factory.mktemp("lineage"))
    return {name: MixtureStream(api.build(home, "mix", name), prefetch=0) for name in ("natural", "swap", "late")}


def sample_keys(stream: MixtureStream, step: int) -> list[tuple[str, int, int]]:
    index = stream.index(step)
    return [(stream.cell_names[c], int(e), int(q)) for c, e, q in zip(index.cell_ids, index.epochs, index.sequences)]


@pytest.mark.slow
def test_steps_before_the_switch_are_the_parents(streams):
    parent, child = streams["natural"], streams["swap"]
    for step in range(AT_STEP):
        assert [s["digest"] for s in peek(parent, step)["samples"]] == [
            s["digest"] for s in peek(child, step)["samples"]
        ]
        assert sample_keys(parent, step) == sample_keys(child, step)
    assert sample_keys(parent, AT_STEP) != sample_keys(child, AT_STEP)


def test_a_chain_shares_each_ancestors_steps(streams):
    parent, child, grandchild = streams["natural"], streams["swap"], streams["late"]
    for step in range(0, GRAND_AT, 7):
        assert sample_keys(grandchild, step) == sample_keys(child, step)
    assert sample_keys(grandchild, 3) == sample_keys(parent, 3)
    assert [r.revision for r in grandchild.manifest.revision_ranges()] == ["natural", "swap", "late"]
    assert [a.shared_steps for a in grandchild.manifest.ancestors] == [GRAND_AT, AT_STEP]


def test_after_the_switch_each_child_phase_is_exact(streams):
    child = streams["swap"]
    batch = child.manifest.global_batch
    for phase in child.manifest.phases:
        if phase.revision is not None:
            continue
        base = child.realised_counts(phase.start_step)
        for step in range(phase.start_step, phase.start_step + phase.steps + 1):
            drawn = step - phase.start_step
            realised = child.realised_counts(step)
            for cell, count in phase.counts.items():
                share = count * drawn * batch / phase.sequences
                assert abs(realised[cell] - base[cell] - share) < 2, (phase.name, step, cell)
        end = child.realised_counts(phase.start_step + phase.steps)
        assert {c: end[c] - base[c] for c in phase.counts} == phase.counts


def test_no_cell_sequence_epoch_repeats_across_the_switch(streams):
    child = streams["swap"]
    seen: set[tuple[str, int, int]] = set()
    for step in range(child.steps):
        for key in sample_keys(child, step):
            assert key not in seen, (step, key)
            seen.add(key)
    # The small cell runs through epochs across the switch, each epoch a permutation of the whole cell.
    small = child.manifest.cells["c02q0"].sequences_available
    epochs = sorted({e for cell, e, _ in seen if cell == "c02q0"})
    assert len(epochs) >= 5
    for epoch in epochs[:-1]:
        assert {q for cell, e, q in seen if cell == "c02q0" and e == epoch} == set(range(small))
    before = {(e, q) for step in range(AT_STEP) for cell, e, q in sample_keys(child, step) if cell == "c02q0"}
    after = {
        (e, q) for step in range(AT_STEP, child.steps) for cell, e, q in sample_keys(child, step) if cell == "c02q0"
    }
    assert before and after and not before & after


def test_epochs_and_realised_counts_cover_the_lineage(streams):
    parent, child = streams["natural"], streams["swap"]
    at_switch = parent.realised_counts(AT_STEP)
    assert child.realised_counts(AT_STEP) == at_switch
    total = child.realised_counts(child.steps)
    for cell, info in child.manifest.cells.items():
        drawn = sum(p.counts.get(cell, 0) for p in child.manifest.phases)
        assert total[cell] == drawn
        assert drawn <= child.manifest.epoch_cap * info.sequences_available
    index = child.index(child.steps - 1)
    assert (index.epochs == index.draws // child.schedule.sequences_available[index.cell_ids]).all()


def test_resume_state_from_the_parent(streams):
    parent, child = streams["natural"], streams["swap"]
    state = parent.state_dict() | {"step": AT_STEP}
    child.load_state_dict(state)
    assert child.step == AT_STEP
    with pytest.raises(ConfigError, match=f"past step {AT_STEP} where swap stops sharing"):
        child.load_state_dict(state | {"step": AT_STEP + 1})
    with pytest.raises(ArtifactError, match="does not continue it"):
        parent.load_state_dict(child.state_dict())
    grandchild = streams["late"]
    grandchild.load_state_dict(state)  # a grandparent's state, inside the steps all three share
    assert grandchild.step == AT_STEP


@pytest.mark.slow
@pytest.mark.parametrize("at_step", [330, 100])
def test_a_grandchild_at_a_phase_boundary_or_before_its_parents_switch(tmp_path, at_step):
    """At 330 the child's own phase ends (nothing is cut); at 100 the child's already-cut parent phase is cut again."""
    home = lineage_home(tmp_path / "home")
    child = MixtureStream(api.build(home, "mix", "swap"), prefetch=0)
    text = (
        CHILD.replace('revision = "swap"', 'revision = "g"')
        .replace(f'revision = "natural"\nat_step = {AT_STEP}', f'revision = "swap"\nat_step = {at_step}')
        .replace("c00q0 = 0.2", "c00q0 = 0.7")
        .replace("c01q1 = 0.3", "c01q1 = 0.2")
        .replace("c02q0 = 0.5", "c02q0 = 0.1")
    )
    write_revision(home, text, "g")
    grandchild = MixtureStream(api.build(home, "mix", "g"), prefetch=0)
    for step in range(at_step):
        assert sample_keys(grandchild, step) == sample_keys(child, step)
    ranges = [(r.revision, r.start_step) for r in grandchild.manifest.revision_ranges()]
    assert ranges == (
        [("natural", 0), ("swap", AT_STEP), ("g", at_step)] if at_step > AT_STEP else [("natural", 0), ("g", at_step)]
    )
    cut = [p for p in grandchild.manifest.phases if p.prefix_of is not None]
    assert len(cut) == 1 and cut[0].prefix_of == child.manifest.phases[0].prefix_of  # the original interleaving
    seen = set()
    for step in range(grandchild.steps):
        for key in sample_keys(grandchild, step):
            assert key not in seen
            seen.add(key)
