"""`mix search fit`: surrogates on the swarm's rows, for the target and every eval set, judged out of fold.

The rows are this search's and those of the searches it reuses (`reuse = [...]`), matched to today's components
by content fingerprint (`trainer.search.fingerprint.match_rows`): a row that trained on a cell whose content is
gone is stranded (named, not used); a component no usable row has seen is "changed" and is what mixture reuse
re-optimises. Each metric's fit is `cross_validate` (k-fold out-of-fold Spearman, RMSE, regret@1) from
`trainer.search.surrogate`; nothing here is maths.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence

import numpy as np

from millrace.errors import ConfigError
from millrace.home import Home
from trainer.search.fingerprint import match_rows
from trainer.search.records import (
    Component,
    FitReport,
    ProxyRow,
    SetFit,
    SwarmPlan,
    ValidationRun,
    read_proxies,
)
from trainer.search.revisions import weights_array

DEFAULT_METRICS = ("bpb.macro", "bpb.set.*", "bpb.domain.*", "bpb.bucket.*")
FOLDS = 5


def target_value(row: ProxyRow | ValidationRun, terms: dict[str, float]) -> float | None:
    """The target of one row: the weighted sum of its metrics; None when it lacks one of them."""
    if row.results is None:
        return None
    values = [row.results.metric(path) for path in terms]
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return float(sum(w * v for w, v in zip(terms.values(), values) if v is not None))


def rows_of(home: Home, search: str, reuse: Sequence[str]) -> list[ProxyRow]:
    """This search's finished rows and the reused searches' (their own proxies first)."""
    rows: list[ProxyRow] = []
    for name in [search, *reuse]:
        rows += [r for r in read_proxies(home.search(name)).rows if r.status == "done" and r.results is not None]
    return rows


def fit_metric(
    rows: list[ProxyRow], components: list[Component], metric: str, terms: dict[str, float], kind: str, seed: int
) -> SetFit | None:
    """One metric's out-of-fold quality over the rows that report it; None with fewer than 3 such rows."""
    pairs = [(row, target_value(row, terms)) for row in rows]
    kept = [(row, value) for row, value in pairs if value is not None]
    if len(kept) < 3:
        return None
    from trainer.search.surrogate import Observations, cross_validate  # lazy: heavy (lightgbm: seconds to import)

    weights = np.stack([weights_array(row.phases, components) for row, _ in kept])
    targets = np.array([value for _, value in kept])
    obs = Observations(components=tuple(c.fingerprint for c in components), weights=weights, targets=targets)
    quality = cross_validate(obs, kind, folds=min(FOLDS, len(kept)), seed=seed)  # type: ignore[arg-type]
    return SetFit(
        metric=metric,
        kind=quality.kind,
        folds=quality.folds,
        rows=len(kept),
        spearman=float(quality.spearman),
        rmse=float(quality.rmse),
        regret_at_1=float(quality.regret_at_1),
        measured=[float(v) for v in targets],
        oof_predictions=[float(v) for v in quality.oof_predictions],
        proxies=[row.run for row, _ in kept],
    )


def metric_names(rows: list[ProxyRow], patterns: Sequence[str]) -> list[str]:
    found = sorted({name for row in rows if row.results for name in row.results.metric_names()})
    return [name for name in found if any(fnmatch.fnmatchcase(name, p) for p in patterns)]


def fit_search(
    home: Home,
    plan: SwarmPlan,
    terms: dict[str, float],
    kind: str = "log-linear",
    reuse: Sequence[str] = (),
    patterns: Sequence[str] = DEFAULT_METRICS,
    seed: int = 0,
) -> FitReport:
    """The fit report: the target's surrogate quality and every matched metric's, with stranded rows named."""
    matched = match_rows(rows_of(home, plan.search, reuse), plan.components)
    usable = matched.usable
    target = fit_metric(usable, plan.components, "target", terms, kind, seed)
    if target is None:
        stranded = f"; {len(matched.stranded)} stranded by changed cells" if matched.stranded else ""
        raise ConfigError(
            f"search {plan.search!r}: {len(usable)} usable proxy rows report the target {terms}; a fit needs 3 "
            f"or more (run `millrace mix search run` first{stranded})"
        )
    sets = [
        fit
        for metric in metric_names(usable, patterns)
        if (fit := fit_metric(usable, plan.components, metric, {metric: 1.0}, kind, seed)) is not None
    ]
    return FitReport(
        search=plan.search,
        surrogate=target.kind,
        target=terms,
        components=plan.components,
        rows_used=[row.run for row in usable],
        rows_stranded=[row.run for row in matched.stranded],
        stranded_fingerprints=matched.stranded_fingerprints,
        changed_components=[c.name for c in matched.changed],
        target_fit=target,
        sets=sets,
    )
