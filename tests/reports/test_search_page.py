"""The mixture search page: predicted against measured for every proxy, the fit quality per eval set, the
proposal's shares by domain and bucket against the prior, the validation with seeds; linked from the
composition page (where the proposal is a revision beside its prior, with its provenance) and the index.
Records are written by the search's own writers from what the search's maths computed
(`testkit.search_records`)."""

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
from testkit.search_records import CELLS, PROXIES, SEARCH, write_scored_search
from trainer.search.records import FIT_FILE, read_fit


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
    written = write_scored_search(home, manifest_hash)
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
    fit = written.fit
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
    proposal, prior = written.proposal, written.prior
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
    assert "Constraints: epoch_cap 8.0; min_share 0.0; max_share 0.6; phase_tokens [800000, 200000]." in html


def test_the_page_shows_the_validation_with_seeds(search_site):
    _, site, written = search_site
    html = (site / "searches" / SEARCH / "index.html").read_text()
    macro, code, _target = written.comparisons
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
    assert provenance["predicted"] == pytest.approx(written.proposal.provenance.predicted)
    index = (site / "index.html").read_text()
    assert f'href="searches/{SEARCH}/index.html"' in index and "proposed" in index


def test_the_composition_page_shows_the_proposals_provenance_in_a_browser(browser, search_site):
    _, site, written = search_site
    tab = Tab(browser)
    page = site / "ref" / "v1" / "index.html"
    tab.open(page, "?revision=proposed")
    about = tab.page.evaluate("() => document.getElementById('revision-description').textContent")
    predicted = f"{written.proposal.provenance.predicted:.4g}"
    assert f"Proposed by mixture search {SEARCH}" in about and predicted in about and "continuing natural" in about
    tab.open(page, "?revision=natural")
    assert tab.page.evaluate("() => document.getElementById('revision-description').hidden")
    tab.open(site / "searches" / SEARCH / "index.html")
    assert tab.page.evaluate("() => document.querySelectorAll('#scatter circle.proxy').length") == PROXIES
    assert tab.errors == [] and all(url.startswith("file:") for url in tab.requests)
