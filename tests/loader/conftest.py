import pytest

from millrace.home import Home
from tests.loader.helpers import make_manifest, make_store

CELLS = {"a": 6000, "b": 2500, "c": 800, "d": 170}  # d is small: repeated for several epochs
PHASES = [{"a": 120, "b": 60, "c": 2, "d": 26}, {"a": 40, "b": 20, "c": 10, "d": 34}]
BOUNDARY_STEP = 26  # phase 1 starts at position 208 = step 26 with global batch 8
# A long schedule over the same store (cells repeat for many epochs): 2,000 + 3,000 steps.
LONG_PHASES = [{"a": 9000, "b": 5000, "c": 1500, "d": 500}, {"a": 6000, "b": 6000, "c": 6000, "d": 6000}]
LONG_BOUNDARY_STEP = 2000


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, manifest path) of a real 4-cell, 2-shard-per-cell store and a 2-phase manifest."""
    home = Home.resolve(tmp_path_factory.mktemp("loader-home"))
    store = make_store(home, CELLS)
    return home, make_manifest(home, store, PHASES)


@pytest.fixture(scope="module")
def long_schedule(built):
    home, path = built
    return make_manifest(home, path.parents[3], LONG_PHASES, revision="long")
