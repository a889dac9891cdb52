import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixtures.interleave import Interleaver


def realised(cells: np.ndarray, k: int) -> np.ndarray:
    """Counts per cell over every prefix: row n = counts among the first n positions."""
    prefix = np.zeros((cells.size + 1, k), dtype=np.int64)
    prefix[np.arange(1, cells.size + 1), cells] = 1
    return prefix.cumsum(axis=0)


def check_every_prefix(counts: list[int]) -> float:
    interleaver = Interleaver(counts)
    total = sum(counts)
    cells, draws = interleaver.assign(0, total)
    counts_array = np.asarray(counts)
    assert (np.bincount(cells, minlength=len(counts)) == counts_array).all()
    prefix = realised(cells, len(counts))
    ideal = np.arange(total + 1)[:, None] * counts_array[None, :] / total
    worst = float(np.abs(prefix - ideal).max())
    assert worst < 2, f"prefix discrepancy {worst} for counts {counts}"
    # the draw number of each position is the cell's count before it
    assert (draws == prefix[np.arange(total), cells]).all()
    return worst


counts_strategy = st.lists(st.one_of(st.integers(0, 3), st.integers(0, 400)), min_size=1, max_size=60).filter(
    lambda c: sum(c) > 0
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True)
@given(counts_strategy)
def test_every_prefix_within_bound(counts):
    check_every_prefix(counts)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 2), min_size=100, max_size=200), st.integers(1000, 5000))
def test_many_tiny_cells_beside_a_giant(tiny, giant):
    """The case that breaks Webster-style merging: the bound must not grow with the number of cells."""
    check_every_prefix([giant] + tiny)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(counts_strategy, st.data())
def test_random_access_matches_full_sequence(counts, data):
    interleaver = Interleaver(counts)
    cells, draws = interleaver.assign(0, interleaver.size)
    start = data.draw(st.integers(0, interleaver.size))
    stop = data.draw(st.integers(start, interleaver.size))
    part_cells, part_draws = interleaver.assign(start, stop)
    assert (part_cells == cells[start:stop]).all() and (part_draws == draws[start:stop]).all()
    assert (interleaver.prefix_counts(start) == realised(cells[:start], len(counts))[-1]).all()


def test_tiny_share_is_spread_not_at_the_front():
    cells, _ = Interleaver([999, 1]).assign(0, 1000)
    assert 400 < int(np.flatnonzero(cells == 1)[0]) < 600
    cells, _ = Interleaver([996, 4]).assign(0, 1000)
    gaps = np.diff(np.flatnonzero(cells == 1))
    assert (gaps > 200).all() and (gaps < 300).all()


def test_large_phase_prefix_is_exact_and_cheap():
    counts = [int(c) for c in np.random.default_rng(3).integers(1, 10**9, size=200)] + [1, 2, 3]
    interleaver = Interleaver(counts)
    n = interleaver.size // 3 + 12345
    prefix = interleaver.prefix_counts(n)
    assert prefix.sum() == n
    assert np.abs(prefix - n * np.asarray(counts, dtype=np.float64) / interleaver.size).max() < 2
    cells, draws = interleaver.assign(n, n + 4096)
    assert (draws[:1] == prefix[cells[:1]]).all()
