"""The demo after its pipeline adapts to the store it built: another machine's files give another store.

A fresh clone failed `make demo` after 40 minutes on a store of 35 cells, 13 of them in q3/q4: the
micro-ladder's smallest rung scaled the `uniform-sampling` cooldown to 12 sequences. Here the demo's
mixtures, training, micro-ladder (the shipped one) and site run on a real token store of that shape.
"""

import pytest
from rich.console import Console

from millrace.demo import MICRO_LADDER, DemoReport, from_store
from tests.trainer.stores import make_store

# 35 cells as the failing machine's: 8 domains, 13 cells in q3/q4
KEYS = [(d, q) for d in range(8) for q in range(3)][:22] + [(d, q) for d in range(8) for q in (3, 4)][:13]
CELLS = {f"c{d:02d}q{q}": (30_000 if q == 4 else 9_000) + 700 * ((d * 5 + q) % 7) for d, q in KEYS}


def test_the_shapes_of_the_failing_store():
    assert len(CELLS) == 35 and sum(cell[-1] in "34" for cell in CELLS) == 13


@pytest.mark.slow
def test_the_demo_after_its_pipeline_runs_on_a_35_cell_store(home):
    store = make_store(home, CELLS, name="local", held_out=3)
    report = from_store(home, DemoReport(home=home.root, store=store), 2, Console(quiet=True), MICRO_LADDER)
    assert set(report.manifests) == {"natural", "uniform-sampling", "quality-tilt"}
    ladder = report.ladder
    assert ladder["target"] == "d32" and ladder["measured"] > 0 and ladder["low"] <= ladder["predicted"]
    raised = (home.root / "mixtures" / "default" / "uniform-sampling.micro.d8.toml").read_text()
    assert "c00q3" in raised or "c00q4" in raised  # the rung's cooldown weights every q3/q4 cell it can
    assert (home.site / "ladders" / "micro" / "index.html").is_file()
