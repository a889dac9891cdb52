"""The mixture search page: predicted against measured for every proxy, the fit quality per eval set, the
proposal's shares by domain and bucket against the prior, the validation with seeds; linked from the
composition page (where the proposal is a revision beside its prior, with its provenance) and the index.
Records are written by the search's own writers from what the search's maths computed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from millrace.cli import main
from millrace.home import Home
from mixtures.build import build
from mixtures.new import NewRevision, new_revision
from pipeline.store.format import write_stats_only_store
from reports.numbers import human_percent
from testkit.browser import Tab
from testkit.factory import page_data
from trainer.records import EvalFigures
from trainer.search.propose import Constraints, propose
from trainer.search.records import (
    FIT_FILE,
    PLAN_FILE,
    PROPOSAL_FILE,
    PROXIES_FILE,
    VALIDATION_FILE,
    BranchPoint,
    Comparison,
    Component,
    ComponentWeight,
    EpochCheck,
    FitReport,
    PhaseWeights,
    PlannedProxy,
    ProposalRecord,
    Provenance,
    ProxyBudget,
    ProxyResults,
    ProxyRow,
    ProxyTable,
    SetFit,
    StoreRef,
    SwarmPlan,
    ValidationRecord,
    ValidationRun,
    read_fit,
    write_search_record,
)
from trainer.search.sampling import sample_mixtures
from trainer.search.seeds import compare_seeds
from trainer.search.surrogate import Observations, cross_validate, fit_surrogate

CELLS = {"c00q0": 400_000, "c00q1": 300_000, "c01q0": 250_000, "c01q1": 150_000, "c02q0": 30_000, "c02q1": 10_000}
COMPONENTS = [(name, [name]) for name in ("c00q0", "c00q1", "c01q0", "c01q1")] + [("tail", ["c02q0", "c02q1"])]
PHASES = ("main", "cooldown")
SEARCH, PROXIES = "page-search", 24


def phase_weights(names, weights):
    return [
        PhaseWeights(
            phase=phase,
            weights=[ComponentWeight(component=n, fingerprint=f"fp-{n}", weight=float(w)) for n, w in zip(names, row)],
        )
        for phase, row in zip(PHASES, weights)
    ]


def results(macro, code):
    return ProxyResults(step=40, bpb=EvalFigures(macro=float(macro), set={"code": float(code)}))


def set_fit(metric, obs, quality, proxies):
    return SetFit(
        metric=metric,
        kind=quality.kind,
        folds=quality.folds,
        rows=obs.rows,
        spearman=quality.spearman,
        rmse=quality.rmse,
        regret_at_1=quality.regret_at_1,
        measured=obs.targets.tolist(),
        oof_predictions=quality.oof_predictions.tolist(),
        proxies=proxies,
    )


def write_search(home: Home, manifest_hash: str) -> dict:
    """A swarm of 24 proxies scored by a known law, fitted, proposed and validated by the search's maths."""
    names = [name for name, _ in COMPONENTS]
    tokens = np.array([sum(CELLS[c] for c in cells) for _, cells in COMPONENTS], dtype=float)
    prior = np.tile(tokens / tokens.sum(), (2, 1))
    weights = sample_mixtures(prior, PROXIES, seed=0)
    slopes = np.array([[-1.0, 0.5, -0.5, 1.0, 0.0], [-0.5, -1.0, 0.5, 0.0, 0.0]])
    macro = np.exp(0.1 + np.einsum("npc,pc->n", weights, slopes))
    code = macro * 1.3 + np.random.default_rng(1).normal(0, 0.02, PROXIES)
    proxies = [f"p{i:02d}" for i in range(PROXIES)]
    directory = home.search(SEARCH)
    plan = SwarmPlan(
        search=SEARCH,
        spec_file="search.toml",
        spec={},
        store=StoreRef(name="ref", version="v1", manifest_hash=manifest_hash),
        components=[
            Component(name=n, fingerprint=f"fp-{n}", cells=cells, tokens=int(t))
            for (n, cells), t in zip(COMPONENTS, tokens)
        ],
        prior=phase_weights(names, prior),
        branch=BranchPoint(run="base", revision="natural", at_step=10, total_steps=100),
        budget=ProxyBudget(tokens=40_960, steps=40, phase_steps=[32, 8], seq_len=32, global_batch=32),
        proxies=[
            PlannedProxy(proxy=p, run=f"{SEARCH}-{p}", revision=f"{SEARCH}-{p}", phases=phase_weights(names, w))
            for p, w in zip(proxies, weights)
        ],
        epochs=EpochCheck(feasible=True, epoch_cap=8.0),
    )
    plan_hash = write_search_record(directory, PLAN_FILE, plan)
    rows = [
        ProxyRow(
            proxy=p,
            run=f"{SEARCH}-{p}",
            revision=f"{SEARCH}-{p}",
            phases=phase_weights(names, w),
            status="done",
            results=results(m, c),
        )
        for p, w, m, c in zip(proxies, weights, macro, code)
    ]
    write_search_record(directory, PROXIES_FILE, ProxyTable(search=SEARCH, components=plan.components, rows=rows))
    obs = Observations(tuple(names), weights, macro)
    quality = cross_validate(obs, "log-linear", folds=4)
    code_obs = Observations(tuple(names), weights, code)
    fit = FitReport(
        search=SEARCH,
        surrogate="log-linear",
        target={"bpb.macro": 1.0},
        components=plan.components,
        rows_used=proxies,
        target_fit=set_fit("bpb.macro", obs, quality, proxies),
        sets=[set_fit("bpb.set.code", code_obs, cross_validate(code_obs, "log-linear", folds=4), proxies)],
    )
    fit_hash = write_search_record(directory, FIT_FILE, fit)
    constraints = Constraints(np.array([8e5, 2e5]), tokens, max_share=0.6, prior=prior)
    proposal = propose(fit_surrogate(obs), constraints, quality)
    record = ProposalRecord(
        search=SEARCH,
        mixture="default",
        revision="proposed",
        revision_file="proposed.toml",
        continues="natural",
        at_step=10,
        phases=phase_weights(names, proposal.weights),
        prior=phase_weights(names, prior),
        provenance=Provenance(
            search=SEARCH,
            plan_hash=plan_hash,
            fit_hash=fit_hash,
            surrogate="log-linear",
            rows=PROXIES,
            target={"bpb.macro": 1.0},
            predicted=proposal.predicted,
            interval=proposal.interval,
            prior_predicted=proposal.prior_predicted,
        ),
    )
    write_search_record(directory, PROPOSAL_FILE, record)
    arms = {
        "proposal": ([0.951, 0.953, 0.950], [1.20, 1.26, 1.18]),
        "natural": ([0.981, 0.979, 0.984], [1.22, 1.19, 1.25]),
    }
    runs = [
        ValidationRun(arm=arm, revision=arm, seed=s, run=f"v-{arm}-{s}", status="done", results=results(m, c))
        for arm, (ms, cs) in arms.items()
        for s, m, c in zip((1, 2, 3), ms, cs)
    ]
    comparisons = []
    for metric, index in (("bpb.macro", 0), ("bpb.set.code", 1), ("target", 0)):  # the target: 1 x bpb.macro
        seen = compare_seeds(arms["proposal"][index], arms["natural"][index])
        comparisons.append(
            Comparison(
                metric=metric,
                against="natural",
                difference=seen.difference,
                low=seen.low,
                high=seen.high,
                distinguishable=seen.distinguishable,
                n_a=seen.n_a,
                n_b=seen.n_b,
                verdict="better beyond noise" if seen.distinguishable else "not distinguishable from noise",
            )
        )
    write_search_record(
        directory,
        VALIDATION_FILE,
        ValidationRecord(
            search=SEARCH, proposal="proposed", seeds=[1, 2, 3], confidence=0.95, runs=runs, comparisons=comparisons
        ),
    )
    return {"fit": fit, "proposal": record, "comparisons": comparisons, "prior": prior}


@pytest.fixture(scope="module")
def search_site(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("search-page") / "home")
    manifest_hash = write_stats_only_store(home.store("ref", "v1"), "ref", "v1", CELLS)
    for name, options in (
        ("natural", {"strategy": "natural"}),
        ("proposed", {"strategy": "temperature", "options": {"temperature": 2.0}}),
    ):
        new_revision(
            home,
            NewRevision(
                mixture="default",
                revision=name,
                store="ref/v1",
                phases=["main:800K", "cooldown:200K"],
                seq_len=32,
                global_batch=32,
                **options,
            ),
        )
        build(home, "default", name)
    written = write_search(home, manifest_hash)
    site = home.root / "site"
    assert main(["report", "build", "--home", str(home.root), "--out", str(site)]) == 0
    return home, site, written


def test_report_build_names_the_search_page(search_site, capsys):
    home, site, _ = search_site
    assert main(["report", "build", "--home", str(home.root), "--out", str(site), "--json"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["searches"] == [str(site / "searches" / SEARCH / "index.html")]


def test_fit_json_keeps_the_artifact_kind_and_the_surrogate_kind_apart(search_site):
    home, _, _ = search_site
    raw = json.loads((home.search(SEARCH) / FIT_FILE).read_text())
    assert (raw["kind"], raw["surrogate"]) == ("millrace.search.fit", "log-linear")
    assert read_fit(home.search(SEARCH)).surrogate == "log-linear"


def test_the_page_shows_every_proxy_predicted_against_measured_and_the_fit_quality(search_site):
    _, site, written = search_site
    html = (site / "searches" / SEARCH / "index.html").read_text()
    fit = written["fit"]
    assert html.count('<circle class="proxy"') == PROXIES
    for proxy, measured, predicted in zip(
        fit.target_fit.proxies, fit.target_fit.measured, fit.target_fit.oof_predictions
    ):
        assert f"{proxy}: measured" in html
        assert f"{predicted - measured:+.4f}" in html  # each proxy's out-of-fold residual
    assert fit.target_fit.spearman >= 0.8
    for row in (fit.target_fit, *fit.sets):
        assert f'<td class="l">{row.metric}' in html
        assert f"<td>{row.spearman:.3f}".rstrip("0") in html


def test_the_page_shows_the_proposal_by_domain_and_bucket_against_the_prior(search_site):
    _, site, written = search_site
    html = (site / "searches" / SEARCH / "index.html").read_text()
    proposal, prior = written["proposal"], written["prior"]
    new = np.array([[w.weight for w in phase.weights] for phase in proposal.phases])
    tail_q0 = CELLS["c02q0"] / (CELLS["c02q0"] + CELLS["c02q1"])  # the tail's weight spread by its cells' tokens
    for p in range(2):
        # components: c00q0 c00q1 c01q0 c01q1 tail(c02q0, c02q1)
        domains = {"c00": (0, 1), "c01": (2, 3), "c02": (4,)}
        for domain, columns in domains.items():
            old, new_share = prior[p, list(columns)].sum(), new[p, list(columns)].sum()
            row = f'<td class="l">{domain}</td><td>{human_percent(old)}</td><td>{human_percent(new_share)}</td>'
            assert row in html
        q0_new = new[p, 0] + new[p, 2] + new[p, 4] * tail_q0
        q0_old = prior[p, 0] + prior[p, 2] + prior[p, 4] * tail_q0
        assert f'<td class="l">q0</td><td>{human_percent(q0_old)}</td><td>{human_percent(q0_new)}</td>' in html
    assert html.count('<table id="domains-') == 2 and html.count('<table id="buckets-') == 2
    pv = proposal.provenance
    assert f"{pv.interval[0]:.4g}"[:4] in html and "log-linear surrogate on 24 rows" in html
    assert 'href="../../ref/v1/index.html?revision=proposed"' in html
    assert 'href="../../ref/v1/index.html?revision=natural"' in html


def test_the_page_shows_the_validation_with_seeds(search_site):
    _, site, written = search_site
    html = (site / "searches" / SEARCH / "index.html").read_text()
    macro, code, _target = written["comparisons"]
    assert macro.distinguishable and not code.distinguishable
    assert f"{macro.low:+.4f} – {macro.high:+.4f}" in html and "better beyond noise" in html
    assert f"{code.low:+.4f} – {code.high:+.4f}" in html and "not distinguishable from noise" in html
    assert f"{macro.difference / np.mean([0.981, 0.979, 0.984]) * 100:+.2f}%" in html
    means = f"<td>{np.mean([0.951, 0.953, 0.950]):.4g}</td><td>{np.mean([0.981, 0.979, 0.984]):.4g}</td>"
    assert f'<td class="l">target</td><td class="l">natural</td>{means}' in html  # the target's terms, measured


def test_composition_page_and_index_link_the_search_and_carry_the_provenance(search_site):
    _, site, written = search_site
    page = site / "ref" / "v1" / "index.html"
    assert f'href="../../searches/{SEARCH}/index.html"' in page.read_text()
    revisions = page_data(page)["revisions"]
    assert revisions["natural"]["proposal"] is None
    provenance = revisions["proposed"]["proposal"]
    assert provenance["search"] == SEARCH and provenance["prior"] == "natural"
    assert provenance["predicted"] == pytest.approx(written["proposal"].provenance.predicted)
    index = (site / "index.html").read_text()
    assert f'href="searches/{SEARCH}/index.html"' in index and "proposed" in index


def test_the_composition_page_shows_the_proposals_provenance_in_a_browser(browser, search_site):
    _, site, written = search_site
    tab = Tab(browser)
    page = site / "ref" / "v1" / "index.html"
    tab.open(page, "?revision=proposed")
    about = tab.page.evaluate("() => document.getElementById('revision-description').textContent")
    predicted = f"{written['proposal'].provenance.predicted:.4g}"
    assert f"Proposed by mixture search {SEARCH}" in about and predicted in about and "continuing natural" in about
    tab.open(page, "?revision=natural")
    assert tab.page.evaluate("() => document.getElementById('revision-description').hidden")
    tab.open(site / "searches" / SEARCH / "index.html")
    assert tab.page.evaluate("() => document.querySelectorAll('#scatter circle.proxy').length") == PROXIES
    assert tab.errors == [] and all(url.startswith("file:") for url in tab.requests)
