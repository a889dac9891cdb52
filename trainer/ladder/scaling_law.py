"""The scaling law L(C) = L_inf + A * C^-alpha fitted to (FLOPs, held-out loss) points.

Pure functions of the points (no files, no torch). Fitted by scipy's `least_squares` on
the losses themselves, in the form L_inf + exp(a - alpha * ln C) so that FLOPs of 1e20 keep
the problem well conditioned; with L_inf fixed the start is the straight line through
ln(L - L_inf) against ln C.

A prediction's interval is a prediction interval for a new measurement at that compute (one
more run, one seed), at a stated level (`LEVEL` by default): the delta method on the fit's
Jacobian, with the residual variance on n - p degrees of freedom and Student's t quantile, so
the points' scatter (seeds' spread included, when there are several seeds) and the parameters'
uncertainty both widen it. Zero degrees of freedom leave no variance to estimate: no interval,
and a warning says so; a fitted exponent at or below zero (a curve that rises with compute) is
flagged too. The refits (each rung left out, each seed alone) are reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import t as student_t

from millrace.errors import ConfigError

FORM = "L(C) = L_inf + A * C^-alpha"
LEVEL = 0.9
METHOD = "delta method (least_squares Jacobian), residual variance, Student t"


@dataclass(frozen=True)
class Point:
    flops: float
    loss: float
    rung: str | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Law:
    L_inf: float
    A: float
    alpha: float

    def loss(self, flops: float) -> float:
        return self.L_inf + self.A * flops**-self.alpha

    def flops_for(self, loss: float) -> float:
        """The compute at which the law reaches `loss` (inf when `loss` is at or below L_inf)."""
        if loss <= self.L_inf:
            return math.inf
        return ((loss - self.L_inf) / self.A) ** (-1.0 / self.alpha)

    def as_dict(self) -> dict:
        return {"L_inf": self.L_inf, "A": self.A, "alpha": self.alpha}


def check_points(points: list[Point], asymptote: float | None, where: str) -> None:
    needed = 2 if asymptote is not None else 3
    distinct = {p.flops for p in points}
    if len(distinct) < needed:
        raise ConfigError(
            f"{where}: {len(distinct)} distinct compute values; the fit needs at least {needed} "
            f"({'L_inf fixed' if asymptote is not None else 'L_inf free'})"
        )
    for p in points:
        if not (math.isfinite(p.flops) and p.flops > 0 and math.isfinite(p.loss)):
            raise ConfigError(
                f"{where}: point {p.rung or p.flops!r}: flops must be positive and loss finite "
                f"(got flops {p.flops!r}, loss {p.loss!r})"
            )
        if asymptote is not None and p.loss <= asymptote:
            raise ConfigError(
                f"{where}: point {p.rung or p.flops!r}: loss {p.loss:.4g} is not above the fixed "
                f"asymptote {asymptote:g}"
            )


@dataclass(frozen=True)
class Spread:
    """What a prediction interval needs from a fit: (J^T J)^-1 over its free parameters (of L_inf, a = ln A
    and alpha; an L_inf that settled on its bound counts as fixed), the residual variance and its degrees
    of freedom (n - p; the variance is NaN at zero)."""

    free: tuple[str, ...]
    inverse: np.ndarray
    variance: float
    dof: int

    def gradient(self, law: Law, flops: float) -> np.ndarray:
        """d loss / d (free parameters) at `flops`."""
        power = law.A * flops**-law.alpha
        parts = {"L_inf": 1.0, "a": power, "alpha": -math.log(flops) * power}
        return np.array([parts[name] for name in self.free])

    def prediction_sd(self, law: Law, flops: float) -> float:
        """The standard deviation of a new measurement at `flops` about the law's prediction there."""
        g = self.gradient(law, flops)
        return math.sqrt(self.variance * (1.0 + float(g @ self.inverse @ g)))


def solve_law(points: list[Point], asymptote: float | None = None, where: str = "fit") -> tuple[Law, Spread]:
    """Least squares on the losses; `asymptote` fixes L_inf, None fits it in [0, min loss)."""
    check_points(points, asymptote, where)
    x = np.log([p.flops for p in points])
    y = np.array([p.loss for p in points])
    floor = asymptote if asymptote is not None else 0.5 * float(y.min())
    slope, intercept = np.polyfit(x, np.log(np.maximum(y - floor, 1e-12)), 1)
    alpha0, a0 = max(-slope, 1e-4), intercept
    if asymptote is not None:
        result = least_squares(lambda t: asymptote + np.exp(t[0] - t[1] * x) - y, [a0, alpha0], method="lm")
        a, alpha, l_inf = result.x[0], result.x[1], asymptote
        free: tuple[str, ...] = ("a", "alpha")
    else:
        top = float(y.min()) * (1 - 1e-9)
        result = least_squares(
            lambda t: t[0] + np.exp(t[1] - t[2] * x) - y,
            [min(floor, top * 0.999), a0, alpha0],
            bounds=([0.0, -np.inf, -np.inf], [top, np.inf, np.inf]),
        )
        l_inf, a, alpha = result.x
        free = ("a", "alpha") if result.active_mask[0] else ("L_inf", "a", "alpha")
    law = Law(L_inf=float(l_inf), A=float(math.exp(a)), alpha=float(alpha))
    return law, spread_of(law, points, free)


def spread_of(law: Law, points: list[Point], free: tuple[str, ...]) -> Spread:
    shape = Spread(free, np.zeros((len(free), len(free))), math.nan, len(points) - len(free))
    jacobian = np.stack([shape.gradient(law, p.flops) for p in points])
    residuals = np.array([p.loss - law.loss(p.flops) for p in points])
    variance = float(residuals @ residuals) / shape.dof if shape.dof > 0 else math.nan
    return Spread(free, np.linalg.pinv(jacobian.T @ jacobian), variance, shape.dof)


def fit_law(points: list[Point], asymptote: float | None = None, where: str = "fit") -> Law:
    """The fitted law alone (see `solve_law`)."""
    return solve_law(points, asymptote, where)[0]


def groups(points: list[Point], key: str) -> dict:
    found: dict = {}
    for p in points:
        found.setdefault(getattr(p, key) if getattr(p, key) is not None else p.flops, []).append(p)
    return found


def refits(points: list[Point], asymptote: float | None) -> list[tuple[str, Law]]:
    """Each rung left out (where enough remain), and each seed alone (where there are several)."""
    needed = 2 if asymptote is not None else 3
    found = []
    by_rung = groups(points, "rung")
    if len(by_rung) - 1 >= needed:
        for rung, members in by_rung.items():
            rest = [p for p in points if p not in members]
            found.append((f"without {rung}", fit_law(rest, asymptote)))
    by_seed = {s: ps for s, ps in groups(points, "seed").items() if isinstance(s, int)}
    if len(by_seed) > 1:
        for seed, members in sorted(by_seed.items()):
            if len({p.flops for p in members}) >= needed:
                found.append((f"seed {seed}", fit_law(members, asymptote)))
    return found


def leave_one_out(points: list[Point], asymptote: float | None) -> list[dict]:
    """Per rung: the law fitted without it, its prediction there, and the error against the rung's mean."""
    needed = 2 if asymptote is not None else 3
    by_rung = groups(points, "rung")
    if len(by_rung) - 1 < needed:
        return []
    rows = []
    for rung, members in by_rung.items():
        law = fit_law([p for p in points if p not in members], asymptote)
        flops = members[0].flops
        measured = float(np.mean([p.loss for p in members]))
        predicted = law.loss(flops)
        rows.append(
            {
                "rung": rung if isinstance(rung, str) else None,
                "flops": flops,
                "loss": measured,
                "predicted": predicted,
                "error": predicted - measured,
            }
        )
    return rows


def predict(
    law: Law,
    spread: Spread,
    alternatives: list[tuple[str, Law]],
    flops: float,
    name: str | None = None,
    level: float = LEVEL,
) -> dict:
    """The law's prediction at `flops`, its prediction interval at `level` (None without degrees of
    freedom), and the range of the refits' predictions there."""
    loss = law.loss(flops)
    refit = [loss] + [other.loss(flops) for _, other in alternatives]
    low = high = sd = None
    if spread.dof > 0:
        sd = spread.prediction_sd(law, flops)
        half = float(student_t.ppf(0.5 + level / 2, spread.dof)) * sd
        low, high = loss - half, loss + half
    return {
        "name": name,
        "flops": flops,
        "loss": loss,
        "low": low,
        "high": high,
        "sd": sd,
        "refit_low": min(refit),
        "refit_high": max(refit),
    }


def fit_warnings(law: Law, spread: Spread, points: list[Point], where: str) -> list[str]:
    """One line per reason not to trust the fit's predictions as they stand."""
    found = []
    if spread.dof <= 0:
        found.append(
            f"{where}: zero degrees of freedom ({len(points)} points for {len(spread.free)} free "
            "parameters): no prediction interval; add a rung or a seed, or fix the asymptote"
        )
    if law.alpha <= 0:
        found.append(
            f"{where}: the fitted curve rises with compute (alpha = {law.alpha:.4g} <= 0): the rungs' "
            "loss does not fall with compute, and predictions beyond the rungs rise above them"
        )
    return found


def fit_report(
    points: list[Point],
    asymptote: float | None,
    targets: list[tuple[str | None, float]],
    where: str = "fit",
    metric: str | None = None,
    level: float = LEVEL,
) -> dict:
    """Everything `ladder fit --json` prints: the form, parameters, residuals, leave-one-out, predictions
    with their intervals at `level`, and warnings."""
    if not 0 < level < 1:
        raise ConfigError(f"{where}: interval level must be between 0 and 1 (got {level!r})")
    law, spread = solve_law(points, asymptote, where)
    alternatives = refits(points, asymptote)
    residuals: list[dict[str, Any]] = [
        {
            "rung": p.rung,
            "seed": p.seed,
            "flops": p.flops,
            "loss": p.loss,
            "fit": law.loss(p.flops),
            "residual": p.loss - law.loss(p.flops),
        }
        for p in points
    ]
    return {
        "form": FORM,
        "metric": metric,
        "asymptote": "fixed" if asymptote is not None else "free",
        "params": law.as_dict(),
        "free_params": ["A" if name == "a" else name for name in spread.free],
        "residuals": residuals,
        "rms_residual": float(np.sqrt(np.mean([r["residual"] ** 2 for r in residuals]))),
        "residual_sd": math.sqrt(spread.variance) if spread.dof > 0 else None,
        "dof": spread.dof,
        "level": level,
        "method": METHOD,
        "leave_one_out": leave_one_out(points, asymptote),
        "refits": [{"name": name, "params": other.as_dict()} for name, other in alternatives],
        "predictions": [predict(law, spread, alternatives, flops, name, level) for name, flops in targets],
        "warnings": fit_warnings(law, spread, points, where),
    }


def law_of(report: dict) -> Law:
    return Law(**report["params"])
