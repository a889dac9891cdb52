"""The loader tests' store (4 cells, 2 shards each) and its short and long two-phase schedules."""

import pytest

from millrace.home import Home
from testkit.manifests import LOADER_CELLS, LOADER_PHASES, LONG_PHASES, make_manifest
from testkit.stores import RANDOM, make_store


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, manifest path) of a real 4-cell, 2-shard-per-cell store and a 2-phase manifest."""
    home = Home.resolve(tmp_path_factory.mktemp("loader-home"))
    store = make_store(home, LOADER_CELLS, RANDOM)
    return home, make_manifest(home, store, LOADER_PHASES)


@pytest.fixture(scope="module")
def long_schedule(built):
    home, path = built
    return make_manifest(home, path.parents[3], LONG_PHASES, revision="long")
