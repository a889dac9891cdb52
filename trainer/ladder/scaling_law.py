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

Points that are no power law in compute (flat, rising, a step) can send the fit off to infinity:
ln A and alpha grow together while the curve through the points stays put. The law is evaluated
in logs, so a large exponent never overflows; a fit that runs out of evaluations, or whose ln A
runs past any float A (it is fitted again with ln A held within `LOG_A_LIMIT`), is flagged as
diverged in one line, and a refit that diverges is left out of the refits and named.
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
LOG_A_LIMIT = 700.0  # |ln A| past this has no float A (exp overflows at 709.8): the fit has diverged

# What `ladder fit --json` prints and ladder.json keeps per revision (`fit_report`): JSON of many shapes.
FitReport = dict[str, Any]


def saturating_exp(x: float) -> float:
    """exp, infinite past the float range rather than raising: a rising law far from its points."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


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

    def excess(self, flops: float) -> float:
        """A * C^-alpha, in logs: C^-alpha alone overflows for a fit that rises steeply with compute."""
        return saturating_exp(math.log(self.A) - self.alpha * math.log(flops))

    def loss(self, flops: float) -> float:
        return self.L_inf + self.excess(flops)

    def flops_for(self, loss: float) -> float:
        """The compute at which the law reaches `loss` (inf when `loss` is at or below L_inf, or the law is flat)."""
        if loss <= self.L_inf or self.alpha == 0:
            return math.inf
        return saturating_exp((math.log(self.A) - math.log(loss - self.L_inf)) / self.alpha)

    def as_dict(self) -> dict[str, float]:
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
    """What a prediction interval needs from a fit: (J^T J)^-1 over its fitted parameters (of L_inf, a = ln A
    and alpha), the residual variance and its degrees of freedom (n - p; the variance is NaN at zero), whether
    the fit ran off (see `solve_law`), and the parameters that settled on a bound.

    A parameter on its bound still counts as free here. Counted as fixed, the interval assumes it known
    exactly: with L_inf on 0 (the micro-ladder's 7.6e-12) it held a new measurement 3% of the time, the
    truth never. Counted as free, the interval holds its level within 10 points over the redraws of a known
    law whose fits land on the bound about half the time, and more than its level in those fits."""

    free: tuple[str, ...]
    inverse: np.ndarray
    variance: float
    dof: int
    diverged: bool = False
    at_bound: tuple[str, ...] = ()

    def gradient(self, law: Law, flops: float) -> np.ndarray:
        """d loss / d (free parameters) at `flops`."""
        power = law.excess(flops)
        parts = {"L_inf": 1.0, "a": power, "alpha": -math.log(flops) * power}
        return np.array([parts[name] for name in self.free])

    def prediction_sd(self, law: Law, flops: float) -> float:
        """The standard deviation of a new measurement at `flops` about the law's prediction there."""
        g = self.gradient(law, flops)
        return math.sqrt(self.variance * (1.0 + float(g @ self.inverse @ g)))


def solve_law(points: list[Point], asymptote: float | None = None, where: str = "fit") -> tuple[Law, Spread]:
    """Least squares on the losses; `asymptote` fixes L_inf, None fits it in [0, min loss). A fit that runs
    off is marked diverged: out of evaluations, or ln A past `LOG_A_LIMIT` (then fitted again, held within)."""
    check_points(points, asymptote, where)
    x = np.log([p.flops for p in points])
    y = np.array([p.loss for p in points])
    floor = asymptote if asymptote is not None else 0.5 * float(y.min())
    slope, intercept = np.polyfit(x, np.log(np.maximum(y - floor, 1e-12)), 1)
    start = (float(np.clip(intercept, -LOG_A_LIMIT, LOG_A_LIMIT)), max(-slope, 1e-4))
    l_inf, a, alpha, free, converged = least_squares_law(x, y, asymptote, floor, start, limit=math.inf)
    if abs(a) > LOG_A_LIMIT:  # past any float A: again, ln A held within the limit
        l_inf, a, alpha, free, converged = least_squares_law(x, y, asymptote, floor, start, limit=LOG_A_LIMIT)
    law = Law(L_inf=float(l_inf), A=math.exp(a), alpha=float(alpha))
    fitted = ("a", "alpha") if asymptote is not None else ("L_inf", "a", "alpha")
    at_bound = tuple(name for name in fitted if name not in free)
    return law, spread_of(law, points, fitted, diverged=not converged or "a" not in free, at_bound=at_bound)


def least_squares_law(
    x: np.ndarray, y: np.ndarray, asymptote: float | None, floor: float, start: tuple[float, float], limit: float
) -> tuple[float, float, float, tuple[str, ...], bool]:
    """(L_inf, ln A, alpha, the free parameters, converged) from scipy's least squares on
    L_inf + exp(a - alpha ln C), ln A within [-limit, limit]; a parameter that settles on a bound is not free.
    Levenberg-Marquardt where nothing is bounded (L_inf fixed, no limit), trust region reflective otherwise.
    A step that overflows exp is one the solver rejects."""
    a0, alpha0 = start
    if asymptote is not None:
        names: tuple[str, ...] = ("a", "alpha")
        first, lower, upper = [a0, alpha0], [-limit, -np.inf], [limit, np.inf]

        def residuals(t: np.ndarray) -> np.ndarray:
            gap: np.ndarray = asymptote + np.exp(t[0] - t[1] * x) - y
            return gap

        def jacobian(t: np.ndarray) -> np.ndarray:
            power = np.exp(t[0] - t[1] * x)
            return np.stack([power, -x * power], axis=1)
    else:
        top = float(y.min()) * (1 - 1e-9)
        names = ("L_inf", "a", "alpha")
        first, lower, upper = [min(floor, top * 0.999), a0, alpha0], [0.0, -limit, -np.inf], [top, limit, np.inf]

        def residuals(t: np.ndarray) -> np.ndarray:
            gap: np.ndarray = t[0] + np.exp(t[1] - t[2] * x) - y
            return gap

        def jacobian(t: np.ndarray) -> np.ndarray:
            power = np.exp(t[1] - t[2] * x)
            return np.stack([np.ones_like(x), power, -x * power], axis=1)

    bounded = bool(np.isfinite(lower + upper).any())
    with np.errstate(over="ignore"):
        result = least_squares(
            residuals, first, jac=jacobian, bounds=(lower, upper), method="trf" if bounded else "lm"
        )
    found = dict(zip(names, (float(v) for v in result.x), strict=True))
    free = tuple(name for name, active in zip(names, result.active_mask, strict=True) if not active)
    return found.get("L_inf", asymptote or 0.0), found["a"], found["alpha"], free, result.status > 0


def spread_of(
    law: Law, points: list[Point], free: tuple[str, ...], diverged: bool = False, at_bound: tuple[str, ...] = ()
) -> Spread:
    shape = Spread(free, np.zeros((len(free), len(free))), math.nan, len(points) - len(free))
    jacobian = np.stack([shape.gradient(law, p.flops) for p in points])
    residuals = np.array([p.loss - law.loss(p.flops) for p in points])
    variance = float(residuals @ residuals) / shape.dof if shape.dof > 0 else math.nan
    return Spread(free, np.linalg.pinv(jacobian.T @ jacobian), variance, shape.dof, diverged, at_bound)


def fit_law(points: list[Point], asymptote: float | None = None, where: str = "fit") -> Law:
    """The fitted law alone (see `solve_law`)."""
    return solve_law(points, asymptote, where)[0]


def groups(points: list[Point], key: str) -> dict[str | int | float, list[Point]]:
    found: dict[str | int | float, list[Point]] = {}
    for p in points:
        found.setdefault(getattr(p, key) if getattr(p, key) is not None else p.flops, []).append(p)
    return found


def refits(points: list[Point], asymptote: float | None) -> tuple[list[tuple[str, Law]], list[str]]:
    """Each rung left out (where enough remain), and each seed alone (where there are several); and the
    names of those whose fit diverged, left out of the first list."""
    needed = 2 if asymptote is not None else 3
    subsets = []
    by_rung = groups(points, "rung")
    if len(by_rung) - 1 >= needed:
        subsets += [(f"without {rung}", [p for p in points if p not in members]) for rung, members in by_rung.items()]
    by_seed = {s: ps for s, ps in groups(points, "seed").items() if isinstance(s, int)}
    if len(by_seed) > 1:
        subsets += [
            (f"seed {seed}", members)
            for seed, members in sorted(by_seed.items())
            if len({p.flops for p in members}) >= needed
        ]
    found, diverged = [], []
    for name, subset in subsets:
        law, spread = solve_law(subset, asymptote)
        if spread.diverged:
            diverged.append(name)
        else:
            found.append((name, law))
    return found, diverged


def leave_one_out(points: list[Point], alternatives: list[tuple[str, Law]]) -> list[dict[str, str | float | None]]:
    """Per rung whose refit without it is among `alternatives` (see `refits`): that law's prediction there,
    and its error against the rung's mean."""
    laws = dict(alternatives)
    rows = []
    for rung, members in groups(points, "rung").items():
        law = laws.get(f"without {rung}")
        if law is None:  # too few rungs to leave one out, or the refit diverged
            continue
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
) -> dict[str, str | float | None]:
    """The law's prediction at `flops`, its prediction interval at `level` (None without degrees of
    freedom), and the range of the refits' predictions there (those that stay finite)."""
    loss = law.loss(flops)
    refit = [v for v in [loss] + [other.loss(flops) for _, other in alternatives] if math.isfinite(v)]
    low = high = sd = None
    if spread.dof > 0 and math.isfinite(loss):
        sd = spread.prediction_sd(law, flops)
        half = float(student_t.ppf(0.5 + level / 2, spread.dof)) * sd
        low, high = loss - half, loss + half
    return {
        "name": name,
        "flops": flops,
        "loss": loss if math.isfinite(loss) else None,
        "low": low,
        "high": high,
        "sd": sd,
        "refit_low": min(refit, default=None),
        "refit_high": max(refit, default=None),
    }


def fit_warnings(law: Law, spread: Spread, points: list[Point], where: str, diverged: list[str]) -> list[str]:
    """One line per reason not to trust the fit's predictions as they stand (`diverged`: the refits that did)."""
    found = []
    if spread.dof <= 0:
        found.append(
            f"{where}: zero degrees of freedom ({len(points)} points for {len(spread.free)} free "
            "parameters): no prediction interval; add a rung or a seed, or fix the asymptote"
        )
    if spread.diverged:
        found.append(
            f"{where}: the fit diverged (ln A ran to {math.log(law.A):.0f}, alpha to {law.alpha:.4g}): the rungs' "
            "losses follow no power law in compute (flat, rising or a step), so its predictions mean nothing; "
            "train the rungs longer or fix the asymptote"
        )
    elif law.alpha <= 0:
        found.append(
            f"{where}: the fitted curve rises with compute (alpha = {law.alpha:.4g} <= 0): the rungs' "
            "loss does not fall with compute, and predictions beyond the rungs rise above them"
        )
    else:
        found += bound_warnings(law, spread, points, where)  # a rising or diverged fit is flagged already
    if diverged:
        found.append(
            f"{where}: {len(diverged)} refit(s) diverged and are left out of the refits and leave-one-out: "
            + ", ".join(diverged)
        )
    return found


def bound_warnings(law: Law, spread: Spread, points: list[Point], where: str) -> list[str]:
    """One line for a fitted L_inf on its bound: on 0 the interval counts it as free (see `Spread`); on the
    lowest measured loss the curve has flattened onto the rungs (a step), and no interval can be trusted."""
    if "L_inf" not in spread.at_bound:
        return []
    lowest = min(p.loss for p in points)
    if law.L_inf > 0.5 * lowest:
        return [
            f"{where}: L_inf settled on its upper bound, the lowest measured loss ({lowest:.4g}): the rungs' losses "
            "flatten like a step, not a power law in compute, so the prediction interval is not trustworthy; "
            "train the rungs longer or fix the asymptote"
        ]
    return [
        f"{where}: L_inf settled on its bound 0: the interval counts it as a free parameter "
        f"({spread.dof} degrees of freedom), so it is wider than a fit with L_inf known would give"
    ]


def fit_report(
    points: list[Point],
    asymptote: float | None,
    targets: list[tuple[str | None, float]],
    where: str = "fit",
    metric: str | None = None,
    level: float = LEVEL,
) -> FitReport:
    """Everything `ladder fit --json` prints: the form, parameters, residuals, leave-one-out, predictions
    with their intervals at `level`, and warnings."""
    if not 0 < level < 1:
        raise ConfigError(f"{where}: interval level must be between 0 and 1 (got {level!r})")
    law, spread = solve_law(points, asymptote, where)
    alternatives, diverged = refits(points, asymptote)
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
        "at_bound": ["A" if name == "a" else name for name in spread.at_bound],
        "residuals": residuals,
        "rms_residual": float(np.sqrt(np.mean([r["residual"] ** 2 for r in residuals]))),
        "residual_sd": math.sqrt(spread.variance) if spread.dof > 0 else None,
        "dof": spread.dof,
        "level": level,
        "method": METHOD,
        "leave_one_out": leave_one_out(points, alternatives),
        "refits": [{"name": name, "params": other.as_dict()} for name, other in alternatives],
        "predictions": [predict(law, spread, alternatives, flops, name, level) for name, flops in targets],
        "warnings": fit_warnings(law, spread, points, where, diverged),
    }


def law_of(report: FitReport) -> Law:
    return Law(**report["params"])
