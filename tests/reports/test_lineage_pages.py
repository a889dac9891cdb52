"""Pages of a revision that continues another: the lineage on the composition page, the switch on the training page."""

from __future__ import annotations

import pytest

from millrace.artifacts import read_envelope, write_artifact
from millrace.home import Home
from mixtures.build import build
from mixtures.manifest import lineage_of, read_manifest
from mixtures.new import NewRevision, new_revision
from reports import build_site
from reports.numbers import human_count
from reports.run_data import read_script
from testkit import factory
from testkit.browser import Tab
from testkit.factory import page_data

AT_STEP = 16  # of natural's 48 steps


@pytest.fixture(scope="module")
def lineage_site(tmp_path_factory):
    """natural, swap continuing it at step 16, a run record on swap, and the site built from them."""
    root = tmp_path_factory.mktemp("lineage-pages")
    home = Home.resolve(root / "home")
    factory.make_small_store(home)
    new_revision(
        home,
        NewRevision(
            mixture="default",
            revision="natural",
            store=f"{factory.STORE}/{factory.VERSION}",
            strategy="natural",
            phases=["main:12288"],
            seq_len=factory.SEQ_LEN,
            global_batch=factory.GLOBAL_BATCH,
        ),
    )
    build(home, "default", "natural")
    new_revision(
        home,
        NewRevision(
            mixture="default",
            revision="swap",
            continues="natural",
            at_step=AT_STEP,
            phases=["main:4096:uniform", "cooldown:2048:uniform@c*q1"],
        ),
    )
    manifest_path = build(home, "default", "swap")
    run_dir = factory.write_contract_metrics(home, "switched", manifest_path, steps=40)
    payload = read_envelope(run_dir / "run.json", "millrace.run").payload
    manifest, digest = read_manifest(manifest_path)
    write_artifact(
        run_dir / "run.json",
        "millrace.run",
        1,
        payload | {"lineage": [r.model_dump() for r in lineage_of(manifest, digest)]},
    )
    site = root / "site"
    build_site(home, site)
    return home, site


def test_the_composition_page_embeds_the_lineage_and_the_run_page_the_switch(lineage_site):
    _home, site = lineage_site
    data = page_data(site / factory.STORE / factory.VERSION / "index.html")["revisions"]["swap"]
    assert data["at_step"] == AT_STEP
    assert [(r["revision"], r["start_step"], r["stop_step"]) for r in data["lineage"]] == [
        ("natural", 0, AT_STEP),
        ("swap", AT_STEP, data["total_steps"]),
    ]
    assert [p["revision"] for p in data["phases"]] == ["natural", "swap", "swap"]
    assert sum(data["phases"][0]["counts"]) == AT_STEP * factory.GLOBAL_BATCH
    run = read_script(site / "runs" / "switched" / "data" / "overview.js")
    assert run["switches"] == [{"step": AT_STEP, "revision": "swap"}]


def test_the_pages_show_the_lineage_and_mark_the_switch_on_every_chart(lineage_site, browser):
    _home, site = lineage_site
    tab = Tab(browser)
    tab.open(site / factory.STORE / factory.VERSION / "index.html", "?revision=swap")
    text = tab.page.inner_text("#lineage")
    assert "steps 0–15 drawn by natural" in text and "then steps 16–" in text and "drawn by swap" in text
    rows = tab.weights_table()
    data = page_data(site / factory.STORE / factory.VERSION / "index.html")
    names = [c["name"] for c in data["cells"]]
    phases = data["revisions"]["swap"]["phases"]
    for i, cell in enumerate(names):
        by = {
            r: sum(p["counts"][i] for p in phases if p["revision"] == r) * factory.SEQ_LEN for r in ("natural", "swap")
        }
        assert rows[cell]["tokens by natural"] == human_count(by["natural"]), cell
        assert rows[cell]["tokens by swap"] == human_count(by["swap"]), cell
        assert rows[cell]["Tokens, whole lineage"] == human_count(by["natural"] + by["swap"]), cell
    assert "natural" in tab.page.inner_text("#phase-table")
    tab.shot("composition-lineage")
    tab.check_clean()
    run = Tab(browser)
    run.open(site / "runs" / "switched" / "index.html")
    run.page.wait_for_selector("body[data-ready='1']")
    run.every_chart()  # charts away from the viewport are drawn when scrolled to
    charts = run.page.locator(".tchart").count()
    assert charts >= 10
    assert run.page.locator(".tchart .mark").count() == charts  # every chart that has a curve
    assert "→ swap" in run.page.inner_text("#c-loss .mark")
    run.shot("run-lineage-switch")
    run.check_clean()
