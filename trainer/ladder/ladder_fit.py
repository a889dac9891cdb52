"""`ladder fit` on a ladder: its rungs' final held-out metric, fitted, predicted at the target, saved."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

from millrace.errors import ConfigError
from millrace.home import Home
from trainer.ladder.points import ladder_points
from trainer.ladder.results import ladder_writer, read_ladder, write_ladder
from trainer.ladder.scaling_law import LEVEL, FitReport, fit_report
from trainer.records import LadderRecord


def targets_of(body: LadderRecord, predict_flops: list[float]) -> list[tuple[str | None, float]]:
    target = body.plan.target
    found: list[tuple[str | None, float]] = [(target.name, target.flops)] if target is not None else []
    return found + [(None, float(f)) for f in predict_flops]


@dataclass(frozen=True)
class FitRequest:
    """What `ladder fit` asks for beyond the ladder: the metric (default the ladder's), a known asymptote or a
    free one (default the ladder's), FLOPs to predict at besides the target, the revision whose rungs are fitted
    (default the ladder's own), and the prediction intervals' level."""

    metric: str | None = None
    asymptote: float | None = None
    free_asymptote: bool = False
    predict_flops: Sequence[float] = ()
    revision: str | None = None
    level: float = LEVEL


def fit_ladder(home: Home, ladder: str, request: FitRequest | None = None, save: bool = True) -> FitReport:
    """Fit the ladder's rungs of the request's revision, with prediction intervals; the report is stored under
    fits/<revision> (under the ladder's writer lock)."""
    with ladder_writer(home, ladder) if save else nullcontext():
        return _fit_ladder(home, ladder, request or FitRequest(), save)


def _fit_ladder(home: Home, ladder: str, request: FitRequest, save: bool) -> FitReport:
    body = read_ladder(home, ladder)
    metric = request.metric or body.metric or "loss.macro"
    revision = request.revision or body.plan.revision
    asymptote = request.asymptote
    if request.free_asymptote and asymptote is not None:
        raise ConfigError("give --asymptote or --free-asymptote, not both")
    if not request.free_asymptote and asymptote is None:
        asymptote = body.asymptote
    points = ladder_points(body, metric, revision, home)
    targets = targets_of(body, list(request.predict_flops))
    report = fit_report(points, asymptote, targets, where=f"ladder {ladder}", metric=metric, level=request.level)
    report["revision"] = revision
    if save:
        write_ladder(home, body.model_copy(update={"fits": body.fits | {revision: report}}))
    return report
