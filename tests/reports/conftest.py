"""A home with real artifacts: a small store with shards, two built revisions, a short run."""

from __future__ import annotations

import pytest

from millrace.home import Home
from tests.reports import factory


@pytest.fixture(scope="module")
def small_home(tmp_path_factory) -> Home:
    home = Home.resolve(tmp_path_factory.mktemp("reports") / "home")
    store = factory.make_small_store(home)
    revisions = factory.make_small_revisions(home, store)
    factory.make_run(home, "tiny-1", revisions["uniform-sampling"], steps=30, status="finished")
    return home
