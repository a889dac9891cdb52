"""The ladder's whole job on a small scale: train the rungs, fit, predict the target, train it, compare.

`millrace demo` runs it on a CPU micro-ladder; on a cluster the same call is a dress rehearsal
of the hero run (with the target being the next rung up, not the hero).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
from trainer.ladder.ladder_fit import fit_ladder
from trainer.ladder.results import metric_value
from trainer.ladder.run import LadderSelection, run_ladder
from trainer.ladder.scaling_law import FitReport
from trainer.records import RungResult


@dataclass(frozen=True)
class Check:
    ladder: str
    target: str
    flops: float
    predicted: float
    low: float | None  # no interval without degrees of freedom
    high: float | None
    measured: float
    fit: FitReport

    @property
    def error(self) -> float:
        return self.predicted - self.measured

    def as_dict(self) -> dict[str, object]:
        return {
            "ladder": self.ladder,
            "target": self.target,
            "flops": self.flops,
            "predicted": self.predicted,
            "low": self.low,
            "high": self.high,
            "measured": self.measured,
            "error": self.error,
            "params": self.fit["params"],
            "warnings": self.fit["warnings"],
        }


def predict_then_measure(
    path: Path | str, home: Home, progress: bool = False, on_result: Callable[[RungResult], None] | None = None
) -> Check:
    """Train every rung, fit them, predict the target; then train the target and read its held-out metric."""
    body = run_ladder(path, home, progress=progress, on_result=on_result)
    target = body.plan.target
    if target is None:
        raise ConfigError(f"{path}: the ladder has no [target] to predict and train")
    report = fit_ladder(home, body.ladder)
    prediction = next(p for p in report["predictions"] if p["name"] == target.name)
    if prediction["loss"] is None:
        raise ConfigError(
            f"ladder {body.ladder}: the fit predicts no finite loss at {target.name}: " + "; ".join(report["warnings"])
        )
    body = run_ladder(path, home, LadderSelection([target.name], seeds=1), progress=progress, on_result=on_result)
    result = next(
        r for r in body.results if r.rung == target.name and r.seed == 0 and r.revision == body.plan.revision
    )
    if result.final is None:
        raise ConfigError(f"run {result.run}: no held-out evaluation to compare the prediction with")
    measured = metric_value(result.final, report["metric"], f"run {result.run}")
    return Check(
        ladder=body.ladder,
        target=target.name,
        flops=prediction["flops"],
        predicted=prediction["loss"],
        low=prediction["low"],
        high=prediction["high"],
        measured=measured,
        fit=report,
    )
