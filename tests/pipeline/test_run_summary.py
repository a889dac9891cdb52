"""The run's summary: one line per source (received, kept, the top removal reason), a warning under 10%."""

from __future__ import annotations

from pipeline.cells.held_out_split import HELD_OUT_REASON
from pipeline.steps.funnel import per_source
from pipeline.store.manifest_records import Funnel, FunnelStep


def _counts(received: int, kept: int, removed: dict[str, int]) -> dict:
    zero = {"tokens": 0, "bytes": 0}
    return {
        "received": {"documents": received, **zero},
        "kept": {"documents": kept, **zero},
        "removed": {reason: {"documents": n, **zero} for reason, n in removed.items()},
    }


FUNNEL = Funnel.model_validate(
    {
        "stages": [
            {
                "name": "read",
                "sources": {"fortunes": _counts(3000, 3000, {}), "man": _counts(120, 119, {"malformed": 1})},
            },
            {
                "name": "gopher_quality",
                "sources": {
                    "fortunes": _counts(3000, 163, {"gopher_short_doc": 2829, "gopher_below_alpha_threshold": 8}),
                    "man": _counts(119, 110, {"gopher_short_doc": 9}),
                },
            },
            {
                "name": "validation",
                "sources": {
                    "fortunes": _counts(163, 160, {HELD_OUT_REASON: 3}),
                    "man": _counts(110, 100, {HELD_OUT_REASON: 10}),
                },
            },
        ]
    }
)


def test_each_source_has_its_received_kept_and_top_removal_reason():
    entries = {e.source: e for e in per_source(FUNNEL, frozenset({HELD_OUT_REASON}))}
    assert entries["fortunes"].describe() == (
        "source fortunes: received 3,000, kept 163 (5.4%), most removed by gopher_short_doc (2,829); "
        "warning: keeps under 10% of its documents"
    )
    assert entries["man"].describe() == (
        "source man: received 120, kept 110 (91.7%), most removed by gopher_short_doc (9)"
    )


def test_a_source_that_reached_no_cell_keeps_nothing():
    funnel = Funnel(stages=[FUNNEL.stages[0], FunnelStep(name="validation")])
    (fortunes, _) = per_source(funnel)
    assert (fortunes.kept, fortunes.top_reason, fortunes.low) == (0, None, True)
