"""The page for one mixture search: `SITE/searches/<search>/index.html`, from its records alone.

Shows how well the surrogate ranks mixtures (out-of-fold predicted against measured for every proxy, and
Spearman, RMSE and regret@1 per eval set), the proposal's shares per phase by topic domain and by quality
bucket against the prior (old against new, as the reference run published them), and the validation at
several seeds (the measured difference per eval set with its interval, or "not distinguishable from noise").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from millrace.errors import MillraceError
from millrace.home import Home
from pipeline.store.format import Store
from reports.composition import GRID_CELL, Composition
from reports.render import render_page
from trainer.search.records import (
    FIT_FILE,
    PLAN_FILE,
    PROPOSAL_FILE,
    VALIDATION_FILE,
    Component,
    FitReport,
    PhaseWeights,
    ProposalRecord,
    ProxyResults,
    ProxyTable,
    SetFit,
    SwarmPlan,
    ValidationRecord,
    has_proxies,
    read_fit,
    read_plan,
    read_proposal,
    read_proxies,
    read_validation,
)

SCATTER = 320  # the predicted-against-measured chart's side, in pixels
MARGIN = 36


@dataclass(frozen=True)
class SearchView:
    """One search's records: the plan always, the later steps' records once they are written."""

    name: str
    plan: SwarmPlan
    proxies: ProxyTable | None
    fit: FitReport | None
    proposal: ProposalRecord | None
    validation: ValidationRecord | None


def find_searches(home: Home) -> list[Path]:
    return home.search_dirs(PLAN_FILE)


def load_search(directory: Path) -> SearchView:
    """A search's records, each checked by its own reader (a broken one is an error naming the file)."""
    return SearchView(
        name=directory.name,
        plan=read_plan(directory),
        proxies=read_proxies(directory) if has_proxies(directory) else None,
        fit=read_fit(directory) if (directory / FIT_FILE).exists() else None,
        proposal=read_proposal(directory) if (directory / PROPOSAL_FILE).exists() else None,
        validation=read_validation(directory) if (directory / VALIDATION_FILE).exists() else None,
    )


def load_searches(home: Home) -> list[SearchView]:
    return [load_search(directory) for directory in find_searches(home)]


def search_href(name: str, root: str) -> str:
    return f"{root}searches/{quote(name)}/index.html"


def fit_row(fit: SetFit) -> dict[str, object]:
    return {k: getattr(fit, k) for k in ("metric", "kind", "rows", "folds", "spearman", "rmse", "regret_at_1")}


def scatter(fit: SetFit) -> dict[str, object]:
    """Out-of-fold predicted (y) against measured (x) as SVG coordinates on shared axes, with the diagonal."""
    values = [v for v in fit.measured + fit.oof_predictions if math.isfinite(v)]
    if not values:
        return {"points": [], "size": SCATTER, "low": None, "high": None}
    low, high = min(values), max(values)
    pad = (high - low) * 0.05 or abs(low) * 0.01 or 1.0
    low, high = low - pad, high + pad
    inner = SCATTER - 2 * MARGIN

    def place(value: float, flip: bool) -> float:
        share = (value - low) / (high - low)
        return round(MARGIN + inner * (1 - share if flip else share), 1)

    points = [
        {"x": place(m, False), "y": place(p, True), "proxy": name, "measured": m, "predicted": p}
        for name, m, p in zip(fit.proxies or [""] * len(fit.measured), fit.measured, fit.oof_predictions)
        if math.isfinite(m) and math.isfinite(p)
    ]
    return {"points": points, "size": SCATTER, "margin": MARGIN, "low": low, "high": high, "end": SCATTER - MARGIN}


def proxy_rows(fit: SetFit) -> list[dict[str, object]]:
    names = fit.proxies or [""] * len(fit.measured)
    return [
        {"proxy": name, "measured": m, "predicted": p, "residual": p - m}
        for name, m, p in zip(names, fit.measured, fit.oof_predictions)
    ]


def cell_tokens(home: Home, plan: SwarmPlan) -> dict[str, int]:
    """Tokens per cell of the store the swarm was planned on (to spread the tail's weight over its cells);
    empty when that store version is gone (the weight is then spread evenly)."""
    try:
        store = Store(home.store(plan.store.name, plan.store.version))
    except (MillraceError, OSError):
        return {}
    return {name: cell.tokens for name, cell in store.manifest.cells.items()}


def cell_weights(phase: PhaseWeights, components: list[Component], tokens: dict[str, int]) -> dict[str, float]:
    """One phase's weight per cell: each component's weight spread over its cells by their tokens."""
    by_fingerprint = {c.fingerprint: c for c in components}
    by_name = {c.name: c for c in components}
    out: dict[str, float] = defaultdict(float)
    for entry in phase.weights:
        component = by_fingerprint.get(entry.fingerprint) or by_name.get(entry.component)
        cells = component.cells if component is not None and component.cells else [entry.component]
        sizes = [tokens.get(cell, 0) for cell in cells]
        total = sum(sizes)
        for cell, size in zip(cells, sizes):
            out[cell] += entry.weight * (size / total if total else 1 / len(cells))
    return dict(out)


def _grouped(old: dict[str, float], new: dict[str, float], key: Callable[[str], str]) -> list[dict[str, object]]:
    groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for cell in sorted(set(old) | set(new)):
        group = groups[key(cell)]
        group[0] += old.get(cell, 0.0)
        group[1] += new.get(cell, 0.0)
    return [{"name": name, "old": o, "new": n, "change": n - o} for name, (o, n) in sorted(groups.items())]


def _grid_part(cell: str, group: int, form: str) -> str:
    """A grid cell's topic domain (`c03`) or quality bucket (`q2`)."""
    match = GRID_CELL.match(cell)
    return form.format(int(match.group(group))) if match else cell


def share_tables(view: SearchView, tokens: dict[str, int]) -> list[dict[str, object]]:
    """Per phase, the prior's and the proposal's shares by topic domain and by quality bucket (cells named
    cNNqQ), or by cell when the store's cells are no grid."""
    proposal = view.proposal
    if proposal is None:
        return []
    components = (view.fit.components if view.fit is not None else None) or view.plan.components
    prior = {p.phase: cell_weights(p, components, tokens) for p in proposal.prior}
    tables = []
    for phase in proposal.phases:
        new, old = cell_weights(phase, components, tokens), prior.get(phase.phase, {})
        grid = all(GRID_CELL.match(cell) for cell in set(old) | set(new))
        table: dict[str, object] = {"phase": phase.phase, "grid": grid}
        if grid:
            table["domains"] = _grouped(old, new, lambda cell: _grid_part(cell, 1, "c{:02d}"))
            table["buckets"] = _grouped(old, new, lambda cell: _grid_part(cell, 2, "q{}"))
        else:
            table["cells"] = _grouped(old, new, lambda cell: cell)
        tables.append(table)
    return tables


def metric_value(results: ProxyResults, metric: str, target: dict[str, float]) -> float | None:
    """A run's figure for `metric`, where "target" is the search's weighted sum of metrics."""
    if metric != "target":
        return results.metric(metric)
    values = [(results.metric(path), weight) for path, weight in target.items()]
    return sum(v * w for v, w in values if v is not None) if all(v is not None for v, _ in values) else None


def validation_rows(validation: ValidationRecord, target: dict[str, float]) -> list[dict[str, object]]:
    """Each comparison with the arms' measured means (so the difference reads as a share too)."""
    rows = []
    for comparison in validation.comparisons:
        means = {}
        for arm in ("proposal", comparison.against):
            values = [
                value
                for run in validation.runs
                if run.arm == arm
                and run.results is not None
                and (value := metric_value(run.results, comparison.metric, target)) is not None
            ]
            means[arm] = sum(values) / len(values) if values else None
        baseline = means.get(comparison.against)
        rows.append(
            {
                **comparison.model_dump(),
                "proposal_mean": means.get("proposal"),
                "against_mean": baseline,
                "relative": comparison.difference / baseline if baseline else None,
            }
        )
    return rows


def composition_href(site: Path, plan: SwarmPlan, revision: str | None, root: str) -> str | None:
    """The composition page of the swarm's store version, opened on `revision`, when that page is built."""
    store = plan.store
    if not (site / store.name / store.version / "index.html").exists():
        return None
    query = f"?revision={quote(revision)}" if revision else ""
    return f"{root}{quote(store.name)}/{quote(store.version)}/index.html{query}"


def write_search_page(view: SearchView, site: Path, home: Home) -> Path:
    out = site / "searches" / view.name / "index.html"
    fit, proposal = view.fit, view.proposal
    rows = view.proxies.rows if view.proxies is not None else []
    target = proposal.provenance.target if proposal is not None else (fit.target if fit is not None else {})
    return render_page(
        "search.html.j2",
        out,
        root="../../",
        search=view,
        plan=view.plan,
        proxies_done=sum(r.status == "done" for r in rows),
        proxies_failed=sum(r.status == "failed" for r in rows),
        fit=fit,
        fit_rows=[fit_row(f) for f in ([fit.target_fit, *fit.sets] if fit is not None else [])],
        chart=scatter(fit.target_fit) if fit is not None else None,
        proxy_rows=proxy_rows(fit.target_fit) if fit is not None else [],
        proposal=proposal,
        shares=share_tables(view, cell_tokens(home, view.plan)),
        proposal_href=composition_href(site, view.plan, proposal.revision if proposal else None, "../../"),
        prior_href=composition_href(site, view.plan, proposal.continues if proposal else None, "../../"),
        validation=view.validation,
        comparisons=validation_rows(view.validation, target) if view.validation is not None else [],
    )


def search_links(searches: list[SearchView], composition: Composition, root: str) -> list[dict[str, object]]:
    """The searches whose proposal is a revision built on this store version; each one's provenance is
    attached to its revision (`composition.proposals`), so the composition page shows where it came from."""
    keys = {(rev.manifest.mixture, rev.manifest.revision): key for key, rev in composition.revisions.items()}
    found = []
    for view in searches:
        proposal = view.proposal
        key = keys.get((proposal.mixture, proposal.revision)) if proposal is not None else None
        if proposal is None or key is None:
            continue
        provenance = proposal.provenance
        link = {
            "search": view.name,
            "href": search_href(view.name, root),
            "revision": proposal.revision,
            "prior": proposal.continues,
            "surrogate": provenance.surrogate,
            "rows": provenance.rows,
            "predicted": provenance.predicted,
            "interval": list(provenance.interval),
            "prior_predicted": provenance.prior_predicted,
        }
        composition.proposals[key] = link
        found.append(link)
    return found
