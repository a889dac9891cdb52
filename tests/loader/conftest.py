import pytest

from millrace.home import Home
from tests.loader.helpers import make_manifest, make_store

CELLS = {"a": 6000, "b": 2500, "c": 800, "d": 170}  # d is small: repeated for several epochs
PHASES = [{"a": 120, "b": 60, "c": 2, "d": 26}, {"a": 40, "b": 20, "c": 10, "d": 34}]
BOUNDARY_STEP = 26  # phase 1 starts at position 208 = step 26 with global batch 8


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, manifest path) of a real 4-cell, 2-shard-per-cell store and a 2-phase manifest."""
    home = Home.resolve(tmp_path_factory.mktemp("loader-home"))
    store = make_store(home, CELLS)
    return home, make_manifest(home, store, PHASES)
