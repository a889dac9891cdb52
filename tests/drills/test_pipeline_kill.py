"""Drill: SIGKILL at a random point of each pipeline phase, rerun, and get the identical store."""

import os
import random
import shutil
import subprocess
import sys

import pytest

from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import PHASE_LABELS, run_pipeline
from testkit.corpus import config_text, make_corpus, store_files

VERSION = "2026.02.01"
CELL_SECTIONS = """
[quality]
reference_sources = ["articles"]

[domains]
k = 2
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("drill-pipeline")
    corpus = make_corpus(root / "corpus")
    config_path = root / "pipeline.toml"
    config_path.write_text(config_text(corpus, version=VERSION, extra=CELL_SECTIONS))
    store = run_pipeline(load_pipeline_config(config_path), Home.resolve(root / "reference-home"))
    return config_path, store


def _killed_run(config_path, home, phase, delay):
    return subprocess.run(
        [sys.executable, "-m", "tests.drills.kill_harness", str(config_path), str(home), phase, f"{delay:.3f}"],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        start_new_session=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASE_LABELS)
def test_sigkill_in_each_phase_then_rerun_gives_the_identical_store(reference, tmp_path, phase):
    config_path, expected = reference
    home = tmp_path / "home"
    rng = random.Random(f"drill-{phase}")
    delay = rng.uniform(0.0, 0.3)
    final = home / "stores" / "local" / VERSION
    for _ in range(5):  # a phase shorter than the delay: try again earlier in it
        result = _killed_run(config_path, home, phase, delay)
        if result.returncode == -9 and not (final / "store.json").exists():
            break
        assert result.returncode in (0, -9), result.stderr.decode()[-2000:]
        delay /= 4
        shutil.rmtree(home)
    else:
        pytest.fail(f"the run outran every kill point in phase {phase}")
    rerun = subprocess.run(
        [sys.executable, "-m", "millrace", "--home", str(home), "pipeline", "run", str(config_path), "--json"],
        capture_output=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    assert store_files(final) == store_files(expected)
