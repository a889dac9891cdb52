"""Homes with a real store for the mixtures tests (documents of one length, dealt over two shards)."""

from __future__ import annotations

import pytest

from millrace.home import Home
from testkit.revisions import CELLS
from testkit.stores import EVEN, grid, make_store


@pytest.fixture
def store_home(home: Home) -> Home:
    """A 3-domain x 5-bucket store for one test."""
    make_store(home, grid(), EVEN)
    return home


@pytest.fixture(scope="module")
def revision_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """The cells `testkit.revisions.base()` names (with an empty and a too-small cell), shared by a module."""
    home = Home.resolve(tmp_path_factory.mktemp("home"))
    make_store(home, CELLS, EVEN)
    return home
