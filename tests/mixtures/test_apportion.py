"""Largest-remainder apportionment and water-filling: exact counts, bounds, the simplex."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixtures.apportion import Infeasible, apportion, exact_shares
from mixtures.strategies import StrategyError, water_fill

weights_st = st.dictionaries(
    st.from_regex(r"c[0-9]{2}q[0-4]", fullmatch=True),
    st.one_of(st.floats(min_value=1e-9, max_value=1.0), st.floats(min_value=1e-7, max_value=1e-5)),
    min_size=1,
    max_size=60,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(weights=weights_st, total=st.integers(min_value=1, max_value=10**12))
def test_counts_sum_exactly_within_one_and_never_round_a_weight_away(weights, total):
    shares = exact_shares({c: Fraction(w) for c, w in weights.items()}, total)
    try:
        counts = apportion(weights, total, lower=dict.fromkeys(weights, 1))
    except Infeasible as exc:
        assert exc.reason == "tiny"
        assert exc.cells and all(shares[c] < 1 for c in exc.cells)
        assert set(exc.cells) <= set(weights)
        return
    assert sum(counts.values()) == total
    for cell, count in counts.items():
        assert abs(count - shares[cell]) < 1
        assert count >= 1


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(weights=weights_st, total=st.integers(min_value=1, max_value=10**6))
def test_unbounded_apportionment_is_largest_remainder(weights, total):
    counts = apportion(weights, total)
    shares = exact_shares({c: Fraction(w) for c, w in weights.items()}, total)
    assert sum(counts.values()) == total
    assert all(abs(counts[c] - shares[c]) < 1 for c in weights)
    rounded_up = [c for c in weights if counts[c] > shares[c]]
    rounded_down = [c for c in weights if counts[c] < shares[c]]
    if rounded_up and rounded_down:
        assert min(shares[c] - (counts[c] - 1) for c in rounded_up) >= max(shares[c] - counts[c] for c in rounded_down)


def test_tiny_weights_that_cannot_all_get_a_sequence_are_named():
    weights = {"big": 1.0, **{f"c{i:02d}q0": 1e-6 for i in range(5)}}
    with pytest.raises(Infeasible) as info:
        apportion(weights, 3, lower=dict.fromkeys(weights, 1))
    assert info.value.reason == "tiny" and set(info.value.cells) == {f"c{i:02d}q0" for i in range(5)}
    with pytest.raises(Infeasible):  # one would need "big" a whole 5 sequences under its share
        apportion(weights, 100, lower=dict.fromkeys(weights, 1))
    assert apportion(weights, 10**7, lower=dict.fromkeys(weights, 1)) == {
        "big": 10**7 - 50,
        **{f"c{i:02d}q0": 10 for i in range(5)},
    }
    # A share under one sequence is raised to one when the others' remainders allow it.
    assert apportion({"a": 0.5, "b": 0.5, "t": 1e-6}, 3, lower={"a": 1, "b": 1, "t": 1}) == {"a": 1, "b": 1, "t": 1}


def test_upper_bounds_are_honoured_or_named():
    assert apportion({"a": 0.5, "b": 0.5}, 11, upper={"a": 5}) == {"a": 5, "b": 6}
    with pytest.raises(Infeasible) as info:
        apportion({"a": 0.9, "b": 0.1}, 10, upper={"a": 5})
    assert info.value.reason == "cap" and info.value.cells == ["a"]


capacities_st = st.dictionaries(
    st.from_regex(r"c[0-9]{2}q[0-4]", fullmatch=True),
    st.tuples(st.integers(min_value=0, max_value=10**9), st.floats(min_value=0.0, max_value=1e6)),
    min_size=1,
    max_size=60,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(cells=capacities_st, total=st.integers(min_value=1, max_value=10**9))
def test_water_filling_never_exceeds_the_cap_and_keeps_the_simplex(cells, total):
    capacity = {c: cap for c, (cap, _) in cells.items()}
    desired = {c: Fraction(w) for c, (_, w) in cells.items()}
    try:
        weights = water_fill(desired, capacity, total)
    except StrategyError:
        assert sum(capacity[c] for c in desired if desired[c] > 0) < total or not any(desired.values())
        return
    assert sum(weights.values()) == 1
    assert all(w >= 0 for w in weights.values())
    for cell, weight in weights.items():
        assert weight * total <= capacity[cell]
        if desired[cell] == 0:
            assert weight == 0
    # Uncapped cells keep the desired ratios between them.
    free = [c for c in weights if weights[c] * total < capacity[c] and desired[c] > 0]
    ratios = {weights[c] / desired[c] for c in free}
    assert len(ratios) <= 1
    # Every apportionment of water-filled weights stays under the cap.
    counts = apportion({c: w for c, w in weights.items() if w > 0}, total, upper=capacity)
    assert all(counts[c] <= capacity[c] for c in counts)


def test_uniform_water_filling_caps_small_cells_and_spreads_the_rest():
    desired = {"a": Fraction(1), "b": Fraction(1), "c": Fraction(1)}
    weights = water_fill(desired, {"a": 10, "b": 1000, "c": 1000}, 100)
    assert weights == {"a": Fraction(1, 10), "b": Fraction(9, 20), "c": Fraction(9, 20)}
