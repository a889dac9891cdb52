"""A home with real artifacts: a small store with shards, two revisions built by mixtures, a trained run."""

from __future__ import annotations

import pytest

from millrace.home import Home
from tests.reports import factory


@pytest.fixture(scope="session")
def small_home(tmp_path_factory) -> Home:
    home = Home.resolve(tmp_path_factory.mktemp("reports") / "home")
    factory.make_small_store(home)
    factory.make_small_revisions(home)
    factory.train_run(home, "tiny-1", revision="uniform-sampling", steps=24)
    return home


@pytest.fixture(scope="session")
def reference_home(tmp_path_factory) -> Home:
    home = Home.resolve(tmp_path_factory.mktemp("reference") / "home")
    factory.make_reference_store(home, revisions=5)
    return home
