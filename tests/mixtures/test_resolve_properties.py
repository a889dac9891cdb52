"""Whole builds on random stats-only stores: exact counts, no weight rounded away, the cap held, or a named error."""

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from millrace.errors import ConfigError
from mixtures.resolve import resolve
from mixtures.revision import parse_revision
from pipeline.store.format import Store, write_stats_only_store

cells_st = st.dictionaries(
    st.builds(lambda d, q: f"c{d:02d}q{q}", st.integers(0, 39), st.integers(0, 4)),
    st.integers(min_value=1, max_value=10**10),
    min_size=1,
    max_size=40,
)


@st.composite
def scenarios(draw):
    cells = draw(cells_st)
    names = sorted(cells)
    phases = []
    for index in range(draw(st.integers(1, 2))):
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        raw = {name: draw(st.one_of(st.just(0.0), st.floats(1e-7, 1e-5), st.floats(0.01, 1.0))) for name in chosen}
        if not any(raw.values()):
            raw[chosen[0]] = 1.0
        phases.append({"name": f"p{index}", "tokens": draw(st.integers(1, 10**11)), "weights": raw})
    return cells, {
        "mixture": "m",
        "revision": "r",
        "seed": 0,
        "normalize": True,
        "seq_len": draw(st.sampled_from([1, 7, 128, 4096])),
        "global_batch": draw(st.sampled_from([1, 8, 1024])),
        "epoch_cap": draw(st.sampled_from([0.5, 1.0, 8.0])),
        "store": {"name": "s"},
        "phases": phases,
    }


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_builds_are_exact_or_fail_naming_a_cell(tmp_path_factory, scenario):
    cells, doc = scenario
    root = tmp_path_factory.mktemp("store")
    write_stats_only_store(root, "s", "2025.01.01", cells)
    store = Store(root)
    revision = parse_revision(doc, "r.toml")
    try:
        manifest = resolve(revision, store, "r.toml")
    except ConfigError as exc:
        message = str(exc)
        event(
            "refused: "
            + (
                "epoch cap"
                if "epoch_cap" in message
                else "no sample"
                if "no sample" in message
                else "short cell"
                if "fewer than one sequence" in message
                else "other"
            )
        )
        assert "\n" not in message and "r.toml: revision m/r: phase 'p" in message
        assert any(f"'{name}'" in message for name in cells)
        return
    event("built")
    drawn = dict.fromkeys(manifest.cells, 0)
    for phase, spec in zip(manifest.phases, doc["phases"]):
        assert sum(phase.counts.values()) == phase.sequences and phase.sequences % doc["global_batch"] == 0
        mass = sum(Fraction(w) for w in spec["weights"].values())
        for name, weight in spec["weights"].items():
            share = Fraction(weight) / mass * phase.sequences
            count = phase.counts.get(name, 0)
            assert abs(count - share) < 1
            assert (count >= 1) == (weight > 0)
            drawn[name] = drawn.get(name, 0) + count
    for name, info in manifest.cells.items():
        assert drawn[name] <= doc["epoch_cap"] * info.sequences_available
        assert info.sequences_available == (cells[name] - 1) // doc["seq_len"]
