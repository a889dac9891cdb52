"""The whole static site: store version pages, run pages and the index that lists them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from millrace.artifacts import remove_stale_temporaries
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from millrace.jsonl import collector_paused
from millrace.names import known
from mixtures.manifest import MANIFEST_FILE
from pipeline.store.format import Store
from reports.compare_data import write_explain_data, write_run_summary
from reports.compare_page import compare_query, write_compare_page, write_explain_page
from reports.composition import Composition, load_composition
from reports.composition_page import write_composition_page
from reports.ladder_page import ladder_links, load_ladders, write_ladder_page
from reports.render import embed_json, render_page, static_text
from reports.run_data import RunSeries
from reports.run_page import REFRESH_SECONDS, write_run_page, write_streamed_run_page
from reports.search_page import SearchView, load_searches, search_links, write_search_page
from reports.training import MetricsTail, RunView, load_run, load_run_summary, open_run
from trainer.records import RUN_FILE, LadderRecord

log = logging.getLogger(__name__)


@dataclass
class SitePages:
    """What one build wrote (for `--json` and the demo)."""

    index: Path
    stores: list[Path] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)
    ladders: list[Path] = field(default_factory=list)
    searches: list[Path] = field(default_factory=list)
    compare: str | None = None  # the compare page's URL for the runs named, when several were

    def as_json(self) -> dict[str, object]:
        return {
            "index": str(self.index),
            "stores": [str(p) for p in self.stores],
            "runs": [str(p) for p in self.runs],
            "ladders": [str(p) for p in self.ladders],
            "searches": [str(p) for p in self.searches],
            "compare": self.compare,
            "bytes": {
                str(p): p.stat().st_size for p in [self.index, *self.stores, *self.runs, *self.ladders, *self.searches]
            },
        }


def _as_home(home: Home | Path | str) -> Home:
    return home if isinstance(home, Home) else Home.resolve(home)


def find_store_versions(home: Home, selection: Sequence[str] = ()) -> list[Path]:
    """Store version directories, all or those named `NAME` or `NAME/VERSION`; an unmatched name is an error."""
    found = home.store_versions()
    if not selection:
        return found
    chosen: list[Path] = []
    for item in selection:
        name, _, version = item.partition("/")
        matches = [p for p in found if p.parent.name == name and (not version or p.name == version)]
        if not matches:
            raise ConfigError(
                f"--store {item}: no such store version under {home.stores}"
                + known("stores", (f"{p.parent.name}/{p.name}" for p in found))
            )
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def find_runs(home: Home, selection: Sequence[str] | None = None) -> list[Path]:
    """Run directories (those with a run.json), all or the named ones; an unknown name is an error."""
    found = home.run_dirs(RUN_FILE)
    if selection is None:
        return found
    chosen = []
    for name in selection:
        path = home.run(name)
        if not (path / RUN_FILE).exists():
            raise ConfigError(f"--run {name}: no {RUN_FILE} in {path}" + known("runs", (p.name for p in found)))
        chosen.append(path)
    return chosen


def build_pages(
    home: Home | Path | str,
    out: Path | str | None = None,
    *,
    stores: Sequence[str] = (),
    mixtures: Sequence[str] = (),
    runs: Sequence[str] | None = None,
    progress: Callable[[], None] | None = None,
) -> SitePages:
    """Write every selected page and the index; `mixtures` limits the revisions embedded per store."""
    home = _as_home(home)
    site = _prepare_site(home, out)
    store_dirs = find_store_versions(home, stores)
    run_dirs = find_runs(home, runs)
    pages = SitePages(index=site / "index.html")
    compositions = [load_composition(store_dir) for store_dir in store_dirs]
    if mixtures:
        _select_mixtures(compositions, mixtures)
    ladders = load_ladders(home)
    searches = load_searches(home)
    store_links = _write_store_pages(compositions, ladders, searches, site, pages, progress)
    _write_ladder_and_search_pages(ladders, searches, store_links, site, home, pages)
    views, damaged = _write_run_pages(run_dirs, rung_runs(ladders), site, home, pages, progress)
    compare = write_compare_page(
        site, [p.name for p in find_runs(home) if (site / "runs" / p.name / "summary.js").exists()]
    )
    if runs and len(views) > 1:  # runs named on the command line: the compare page opened on them
        pages.compare = compare.as_uri() + compare_query([v.name for v in views])
        log.info("compare them at %s", pages.compare)
    refresh_index(home, site)
    if damaged:
        raise ArtifactError(f"every other page was built, not those of run {'; run '.join(damaged)}")
    return pages


def _prepare_site(home: Home, out: Path | str | None) -> Path:
    """The site directory, made, with the half-written pages of a killed build cleared away."""
    site = Path(out) if out is not None else home.site
    site.mkdir(parents=True, exist_ok=True)
    for leftover in remove_stale_temporaries(site):
        log.info("removed %s, a page a killed build left half written", leftover)
    return site


def _write_store_pages(
    compositions: list[Composition],
    ladders: list[LadderRecord],
    searches: list[SearchView],
    site: Path,
    pages: SitePages,
    progress: Callable[[], None] | None,
) -> dict[str, list[dict[str, str]]]:
    """One page per store version; returns, per ladder, the links to the store pages that feed it."""
    store_links: dict[str, list[dict[str, str]]] = {body.ladder: [] for body in ladders}
    for composition in compositions:
        pairs = {(rev.manifest.mixture, rev.manifest.revision) for rev in composition.revisions.values()}
        links = ladder_links(ladders, pairs, "../../")
        path = write_composition_page(composition, site, links, search_links(searches, composition, "../../"))
        log.debug("wrote %s (%d revisions)", path, len(composition.revisions))
        pages.stores.append(path)
        store = composition.store
        for link in links:
            store_links[link["name"]].append(
                {"label": f"{store.name}/{store.version}", "href": f"../../{store.name}/{store.version}/index.html"}
            )
        if progress:
            progress()
    return store_links


def _write_ladder_and_search_pages(
    ladders: list[LadderRecord],
    searches: list[SearchView],
    store_links: dict[str, list[dict[str, str]]],
    site: Path,
    home: Home,
    pages: SitePages,
) -> None:
    for body in ladders:
        path = write_ladder_page(body, site, store_links[body.ladder])
        log.debug("wrote %s (%d rung results)", path, len(body.results))
        pages.ladders.append(path)
    for search in searches:
        pages.searches.append(write_search_page(search, site, home))
        log.debug("wrote %s", pages.searches[-1])


def _write_run_pages(
    run_dirs: list[Path],
    rungs: dict[str, Mapping[str, str | int | None]],
    site: Path,
    home: Home,
    pages: SitePages,
    progress: Callable[[], None] | None,
) -> tuple[list[RunView], list[str]]:
    """Each run's page, summary and explain page; returns the views written and the runs skipped as damaged."""
    views: list[RunView] = []
    damaged: list[str] = []
    for run_dir in run_dirs:
        try:
            with collector_paused():  # a long run's series: many small acyclic objects
                view = open_run(run_dir)
                path, curves = write_streamed_run_page(view, site)
                write_run_summary(view, site, rungs.get(view.name), curves)
                write_explain_data(view, site, home)
            write_explain_page(site, view.name)
        except ArtifactError as exc:  # one damaged run never stops the others' pages
            damaged.append(f"{run_dir.name} ({exc})")
            continue
        views.append(view)
        log.debug("wrote %s (%d metrics records, %s)", path, view.count, view.status)
        pages.runs.append(path)
        if progress:
            progress()
    return views, damaged


def _summary(run_dir: Path) -> RunView | None:
    """The index line's view of a run, or None for a damaged one (named by the build that skipped its page)."""
    try:
        return load_run_summary(run_dir)
    except ArtifactError:
        return None


def _select_mixtures(compositions: list[Composition], mixtures: Sequence[str]) -> None:
    """Keep only revisions of `mixtures`: an unknown mixture is an error (before any page is written),
    and a page that now shows fewer revisions than are built says so in the log."""
    built = {rev.manifest.mixture for c in compositions for rev in c.revisions.values()}
    for mixture in mixtures:
        if mixture not in built:
            raise ConfigError(
                f"--mixture {mixture}: no built revisions of mixture {mixture!r} in the selected "
                "stores" + known("built mixtures", built)
            )
    for composition in compositions:
        left_out = sorted(k for k, v in composition.revisions.items() if v.manifest.mixture not in set(mixtures))
        composition.revisions = {k: v for k, v in composition.revisions.items() if k not in left_out}
        if left_out:
            log.warning(
                "%s/%s: the page leaves out built revisions %s (not in --mixture %s)",
                composition.store.name,
                composition.store.version,
                ", ".join(left_out),
                " ".join(mixtures),
            )


def rung_runs(ladders: list[LadderRecord]) -> dict[str, Mapping[str, str | int | None]]:
    """Run name -> the ladder, rung and seed it trained for (from each ladder.json's results)."""
    return {r.run: {"ladder": body.ladder, "rung": r.rung, "seed": r.seed} for body in ladders for r in body.results}


def _run_row(view: RunView, rung: Mapping[str, str | int | None] | None = None) -> dict[str, object]:
    last = view.last
    return {
        "name": view.name,
        "href": f"runs/{quote(view.name)}/index.html",
        "status": view.status,
        "live": view.live,
        "mixture": view.run.mixture or "?",
        "revision": view.run.revision or "?",
        "step": last.step if last is not None else None,
        "total_steps": view.run.total_steps,
        "tokens": last.tokens if last is not None else None,
        "loss": last.loss if last is not None else None,
        "time": last.time if last is not None else None,
        "alerts": list(last.alerts.active) if last is not None and last.alerts is not None else [],
        "tags": list(view.run.tags),
        "notes": view.run.notes,
        "ladder": (rung or {}).get("ladder"),
        "rung": (rung or {}).get("rung"),
        "seed": (rung or {}).get("seed"),
    }


def write_index(
    site: Path,
    store_rows: Sequence[Mapping[str, object]],
    run_rows: Sequence[Mapping[str, object]],
    ladder_rows: Sequence[Mapping[str, object]] = (),
    search_rows: Sequence[Mapping[str, object]] = (),
) -> Path:
    return render_page(
        "index.html.j2",
        site / "index.html",
        root="",
        stores=store_rows,
        runs=run_rows,
        ladders=list(ladder_rows),
        searches=list(search_rows),
        runs_json=embed_json(run_rows),
        page_js=static_text("index.js"),
    )


def build_site(
    home: Home | Path | str,
    out: Path | str | None = None,
    *,
    stores: Sequence[str] = (),
    mixtures: Sequence[str] = (),
    runs: Sequence[str] | None = None,
) -> Path:
    """Build the static site under `out` (default `$MILLRACE_HOME/site`); returns `out/index.html`."""
    return build_pages(home, out, stores=stores, mixtures=mixtures, runs=runs).index


def build_run_page(
    home: Home | Path | str,
    run: str,
    out: Path | str | None = None,
    *,
    refresh_seconds: int = REFRESH_SECONDS,
    tail: MetricsTail | None = None,
    series: RunSeries | None = None,
) -> Path:
    """Rebuild one run's page and the index; `tail` (a followed stream) saves re-reading it from the start,
    and `series` (the chunks written last time) rewriting the chunks that did not change."""
    home = _as_home(home)
    site = Path(out) if out is not None else home.site
    with collector_paused():  # a long run's records and series: millions of small acyclic objects
        view = load_run(home.run(run), tail)
        changed_from = tail.take_changed_from() if tail is not None and series is not None else 0
        path = write_run_page(view, site, refresh_seconds, series, changed_from)
        write_run_summary(view, site, rung_runs(load_ladders(home)).get(view.name))
        write_explain_data(view, site, home)  # the step panel's data (explain.json appears when training ends)
    refresh_index(home, site)
    return path


def refresh_index(home: Home, site: Path) -> Path:
    """SITE/index.html listing every store version and run under `home` whose page is in `site`
    (so building one page never drops the others from the index)."""
    store_rows = []
    for store_dir in find_store_versions(home):
        name, version = store_dir.parent.name, store_dir.name
        if (site / name / version / "index.html").exists():
            store_rows.append(_store_row(store_dir))
    rungs = rung_runs(load_ladders(home))
    run_rows = [
        _run_row(view, rungs.get(view.name))
        for run_dir in find_runs(home)
        if (site / "runs" / run_dir.name / "index.html").exists() and (view := _summary(run_dir))
    ]
    ladder_rows = [
        {
            "name": body.ladder,
            "href": f"ladders/{quote(body.ladder)}/index.html",
            "mixture": body.plan.mixture,
            "revision": body.plan.revision,
            "rungs": len(body.plan.rungs),
            "results": len(body.results),
            "fitted": ", ".join(body.fits) or None,
        }
        for body in load_ladders(home)
        if (site / "ladders" / body.ladder / "index.html").exists()
    ]
    search_rows = [
        _search_row(view) for view in load_searches(home) if (site / "searches" / view.name / "index.html").exists()
    ]
    return write_index(site, store_rows, run_rows, ladder_rows, search_rows)


def _search_row(view: SearchView) -> dict[str, object]:
    """One line of the index's searches: how far it got, and its proposal with the predicted target."""
    proposal, fit = view.proposal, view.fit
    return {
        "name": view.name,
        "href": f"searches/{quote(view.name)}/index.html",
        "baseline": view.plan.branch.revision,
        "proxies": len(view.plan.proxies),
        "spearman": fit.target_fit.spearman if fit is not None else None,
        "proposal": proposal.revision if proposal is not None else None,
        "predicted": proposal.provenance.predicted if proposal is not None else None,
        "validated": view.validation is not None and bool(view.validation.comparisons),
    }


def _store_row(store_dir: Path) -> dict[str, object]:
    """One line of the index: the store's totals and its built revisions (read from paths, not parsed)."""
    manifest = Store(store_dir).manifest
    built = [(p.parent.name, p.name) for p in Home.built_mixtures_in(store_dir, MANIFEST_FILE)]
    names = [revision for _, revision in built]
    return {
        "name": manifest.name,
        "version": manifest.version,
        "stats_only": manifest.stats_only,
        "href": f"{quote(manifest.name)}/{quote(manifest.version)}/index.html",
        "cells": len(manifest.cells),
        "tokens": sum(c.tokens for c in manifest.cells.values()),
        "documents": sum(c.documents for c in manifest.cells.values()),
        "revisions": [
            {
                "key": revision if names.count(revision) == 1 else f"{mixture}/{revision}",
                "label": f"{mixture} / {revision}",
            }
            for mixture, revision in built
        ],
    }
