"""`ladder fit` on a ladder: its rungs' final held-out metric, fitted, predicted at the target, saved."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

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


def fit_ladder(
    home: Home,
    ladder: str,
    metric: str | None = None,
    asymptote: float | None = None,
    free_asymptote: bool = False,
    predict_flops: Sequence[float] = (),
    revision: str | None = None,
    save: bool = True,
    level: float = LEVEL,
) -> FitReport:
    """Fit the ladder's rungs of `revision` (default its own), with prediction intervals at `level`; the
    report is stored under fits/<revision> (under the ladder's writer lock)."""
    with ladder_writer(home, ladder) if save else nullcontext():
        return _fit_ladder(home, ladder, metric, asymptote, free_asymptote, predict_flops, revision, save, level)


def _fit_ladder(
    home: Home,
    ladder: str,
    metric: str | None,
    asymptote: float | None,
    free_asymptote: bool,
    predict_flops: Sequence[float],
    revision: str | None,
    save: bool,
    level: float,
) -> FitReport:
    body = read_ladder(home, ladder)
    metric = metric or body.metric or "loss.macro"
    revision = revision or body.plan.revision
    if free_asymptote and asymptote is not None:
        raise ConfigError("give --asymptote or --free-asymptote, not both")
    if not free_asymptote and asymptote is None:
        asymptote = body.asymptote
    points = ladder_points(body, metric, revision, home)
    report = fit_report(
        points, asymptote, targets_of(body, list(predict_flops)), where=f"ladder {ladder}", metric=metric, level=level
    )
    report["revision"] = revision
    if save:
        write_ladder(home, body.model_copy(update={"fits": body.fits | {revision: report}}))
    return report
