"""The demo on a store too small for one of its shipped revisions: that one is left out with its reason."""

import io

import pytest
from rich.console import Console

from demo.run import REVISIONS, TRAINED_REVISION, DemoReport, build_revisions
from millrace.errors import ConfigError
from millrace.home import Home
from testkit.manifests import make_stats_store


def _store(tmp_path, q4_tokens: int, q3_tokens: int) -> Home:
    """Four domains by five buckets; q3 and q4 sized by the test (the cooldowns read them)."""
    home = Home.resolve(tmp_path / "home")
    sizes = {0: 400_000, 1: 400_000, 2: 400_000, 3: q3_tokens, 4: q4_tokens}
    make_stats_store(home, {f"c{d:02d}q{q}": sizes[q] for d in range(4) for q in range(5)}, name="local")
    return home


def test_a_revision_the_store_cannot_hold_is_left_out_with_its_reason(tmp_path):
    home = _store(tmp_path, q4_tokens=3_000, q3_tokens=40_000)  # q4: 4 x 3,000 x 8 epochs < the 196,608 asked
    report, out = DemoReport(home=home.root), io.StringIO()
    build_revisions(home, report, Console(file=out, width=200))
    assert set(report.manifests) == set(REVISIONS) - {"quality-tilt"}
    assert set(report.not_built) == {"quality-tilt"}
    assert (
        "epoch cap" in report.not_built["quality-tilt"] and "quality-tilt: not built on this store" in out.getvalue()
    )


def test_the_trained_revision_out_of_room_is_one_error_that_says_what_to_raise(tmp_path):
    home = _store(tmp_path, q4_tokens=1_000, q3_tokens=1_000)  # q3 + q4 under their cap: no cooldown for training
    with pytest.raises(ConfigError, match=rf"{TRAINED_REVISION}.*a larger --max-bytes"):
        build_revisions(home, DemoReport(home=home.root), Console(file=io.StringIO()))
