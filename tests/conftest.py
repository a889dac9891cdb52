"""Fixtures every room's tests share. A test imports builders from `testkit`, never from another test module;
a fixture used in more than one directory lives here, one used in one directory in that directory's conftest."""

from __future__ import annotations

import signal
import threading
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tomli_w

from millrace.home import Home
from testkit import factory
from testkit.stores import build_mixture, make_store

# A suite started in the background (`nohup make test &` from a script) inherits an ignored SIGINT,
# and so would every command a test starts; the Ctrl-C drills need it delivered.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Not SIGCHLD: torch's DataLoader installs its own, chained to the previous one, once per process by design.
KEPT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture(autouse=True)
def signal_handlers_kept() -> Iterator[None]:
    """Every test leaves this process's signal handlers as it found them, and fails where it does not: the
    processes later tests fork inherit them (ray.init's SIGTERM handler, once left behind, made a forked pool
    worker outlive SIGTERM and its pool's shutdown wait for it forever)."""
    before = {number: signal.getsignal(number) for number in KEPT_SIGNALS}
    yield
    if threading.current_thread() is not threading.main_thread():
        return
    changed = [number.name for number, handler in before.items() if signal.getsignal(number) != handler]
    for number, handler in before.items():
        if handler is not None:
            signal.signal(number, handler)
    assert not changed, f"the test left its own handler for {', '.join(changed)} in place"


# Fixtures that cost tens of seconds (a trained run, a real Chromium, models fitted on a corpus): a test that takes
# one, directly or through another fixture, is `slow` (`make test-fast` leaves it out), so the cost never lands on
# whichever fast test happens to set the fixture up first. Names here must be unique in the suite.
SLOW_FIXTURES = frozenset({"small_home", "browser", "fitted", "mixed", "erased"})

TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"
TRAINER_CELLS = {"c00q0": 30000, "c01q0": 20000, "c02q1": 12000}
TRAINER_SEQ_LEN, TRAINER_GLOBAL_BATCH, TRAINER_STEPS = 32, 8, 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # Files with slow tests first: pytest-xdist hands out whole files (`--dist loadfile`) in this order, so the
    # long drills start at once and the short tests fill the end, rather than one long file running alone last.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """An empty $MILLRACE_HOME for one test."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("MILLRACE_HOME", str(root))
    return Home.resolve(root)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Path]:
    """(home, manifest path): a learnable store written with ShardWriter and a mixture built by `mixtures`.

    The loader's tests replace it with their own (tests/loader/conftest.py)."""
    home = Home.resolve(tmp_path_factory.mktemp("trainer-home"))
    make_store(home, TRAINER_CELLS)
    path = build_mixture(
        home,
        tokens=TRAINER_SEQ_LEN * TRAINER_GLOBAL_BATCH * TRAINER_STEPS,
        seq_len=TRAINER_SEQ_LEN,
        global_batch=TRAINER_GLOBAL_BATCH,
    )
    return home, path


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., Path]:
    """Write a variant of trainer/configs/tiny.toml with some fields replaced; returns its path."""
    base = tomllib.loads(TINY.read_text())

    def write(name: str = "tiny", **sections: object) -> Path:
        data = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
        data["metrics"]["tensorboard"] = False
        data["metrics"]["peak_flops_per_device"] = 1e11
        for section, values in sections.items():
            if isinstance(values, dict):
                data.setdefault(section, {}).update(values)
            else:
                data[section] = values
        path = tmp_path / f"{name}.toml"
        path.write_text(tomli_w.dumps(data))
        return path

    return write


@pytest.fixture
def ladder_home(home: Home) -> Home:
    """A learnable store and revision `two-phase` of mixture `default` built on it: what a micro ladder runs."""
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision

    make_store(home, {"c00q0": 30000, "c01q0": 20000, "c02q1": 12000, "c03q4": 9000})
    new_revision(
        home,
        NewRevision(
            mixture="default",
            revision="two-phase",
            store="t",
            strategy="natural",
            seq_len=32,
            global_batch=8,
            phases=["main:40000", "cool:8000:uniform@c*q4,c*q1"],
        ),
    )
    build(home, "default", "two-phase")
    return home


@pytest.fixture(scope="session")
def small_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """A home with real artifacts: a small store with shards, two revisions built by mixtures, a trained run."""
    home = Home.resolve(tmp_path_factory.mktemp("reports") / "home")
    factory.make_small_store(home)
    factory.make_small_revisions(home)
    factory.train_run(home, "tiny-1", revision="uniform-sampling", steps=24)
    return home


@pytest.fixture(scope="session")
def reference_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """The reference shape: a stats-only 200-cell store and five revisions built on it."""
    home = Home.resolve(tmp_path_factory.mktemp("reference") / "home")
    factory.make_reference_store(home, revisions=5)
    return home
