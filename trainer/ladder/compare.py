"""Compare two revisions on the same rungs: loss differences against the seed spread, and a speed-up.

The speed-up of B over A is compute-equivalent: at the compute C of the widest rung, A
reaches L_A(C); B reaches that loss at C_B = L_B^-1(L_A(C)); B is C / C_B times cheaper.
Identical small runs differ (the reference saw 0.0042 between three seeds, which alone
reads as a 6.7% speed-up), so a difference is called noise unless it exceeds the seed
spread (max - min over seeds, the wider of the two revisions) at every rung, in the same
direction. With one seed there is no spread to judge by, and the verdict says so.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from millrace.errors import ConfigError
from millrace.home import Home
from trainer.ladder.points import ladder_points
from trainer.ladder.results import ladder_writer, read_ladder, write_ladder
from trainer.ladder.run import LadderSelection, run_ladder
from trainer.ladder.scaling_law import Law, Point, fit_report, law_of
from trainer.ladder.spec import load_ladder


def by_rung(points: list[Point]) -> dict[str, list[Point]]:
    found: dict[str, list[Point]] = {}
    for p in points:
        if p.rung is None:
            raise ValueError(f"a ladder point without its rung ({p.flops:.3g} FLOPs)")
        found.setdefault(p.rung, []).append(p)
    return found


def speedup(a: Law, b: Law, flops: float) -> float:
    """How many times less compute B needs than A for A's loss at `flops` (0 when B never reaches it)."""
    return flops / b.flops_for(a.loss(flops))


def compare_points(
    a_points: list[Point], b_points: list[Point], law_a: Law, law_b: Law, names: tuple[str, str]
) -> dict[str, Any]:
    """Pure: per-rung differences and spreads, the speed-up at the widest common rung, and the verdict."""
    a_rungs, b_rungs = by_rung(a_points), by_rung(b_points)
    common = [r for r in a_rungs if r in b_rungs]
    if not common:
        raise ConfigError(f"revisions {names[0]!r} and {names[1]!r} share no trained rung")
    rows: list[dict[str, Any]] = []
    for rung in common:
        a_losses, b_losses = [p.loss for p in a_rungs[rung]], [p.loss for p in b_rungs[rung]]
        spread = max(max(a_losses) - min(a_losses), max(b_losses) - min(b_losses))
        diff = float(np.mean(b_losses) - np.mean(a_losses))
        rows.append(
            {
                "rung": rung,
                "flops": a_rungs[rung][0].flops,
                "loss_a": float(np.mean(a_losses)),
                "loss_b": float(np.mean(b_losses)),
                "difference": diff,
                "seed_spread": spread,
                "seeds": min(len(a_losses), len(b_losses)),
                "beyond_noise": abs(diff) > spread > 0,
            }
        )
    widest = max(rows, key=lambda r: r["flops"])
    flops = widest["flops"]
    spread = max(r["seed_spread"] for r in rows)
    noise_speedup = law_a.flops_for(law_a.loss(flops) - spread) / flops if spread > 0 else 1.0
    same_sign = len({math.copysign(1, r["difference"]) for r in rows}) == 1
    significant = spread > 0 and same_sign and all(r["beyond_noise"] for r in rows)
    if spread == 0:
        verdict = "one seed: no seed spread to tell a difference from noise (use --seeds 3)"
    elif significant:
        verdict = "beyond the seed spread at every rung"
    else:
        verdict = "noise: the difference is within the seed spread"
    return {
        "revisions": {"a": names[0], "b": names[1]},
        "rungs": rows,
        "at_flops": flops,
        "speedup_b_over_a": speedup(law_a, law_b, flops),
        "noise_speedup": noise_speedup,
        "seed_spread": spread,
        "noise": not significant,
        "verdict": verdict,
    }


def compare_ladder(
    path: Path | str,
    home: Home,
    revision_a: str,
    revision_b: str,
    seeds: int = 3,
    rungs: list[str] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Train (or reuse) the rungs for both revisions and seeds, fit each, compare; saved in ladder.json."""
    for revision in (revision_a, revision_b):
        selection = LadderSelection(rungs, seeds, revision, sized_for=(revision_a, revision_b))
        run_ladder(path, home, selection, progress=progress)
    ladder = load_ladder(path).ladder
    with ladder_writer(home, ladder):
        return _compare_and_save(home, ladder, revision_a, revision_b, seeds, rungs)


def _compare_and_save(
    home: Home, ladder: str, revision_a: str, revision_b: str, seeds: int, rungs: list[str] | None
) -> dict[str, Any]:
    body = read_ladder(home, ladder)
    metric, asymptote = body.metric or "loss.macro", body.asymptote
    fits, points = {}, {}
    for revision in (revision_a, revision_b):
        chosen = [p for p in ladder_points(body, metric, revision, home) if rungs is None or p.rung in rungs]
        points[revision] = [p for p in chosen if p.seed is None or p.seed < seeds]
        fits[revision] = fit_report(points[revision], asymptote, [], where=f"revision {revision}", metric=metric)
    comparison = compare_points(
        points[revision_a],
        points[revision_b],
        law_of(fits[revision_a]),
        law_of(fits[revision_b]),
        (revision_a, revision_b),
    )
    comparison["metric"] = metric
    write_ladder(home, body.model_copy(update={"fits": body.fits | fits, "comparison": comparison}))
    return comparison
