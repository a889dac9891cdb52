"""Domain labels beside every cell shown: store info (with or without quality buckets), mix plan."""

from __future__ import annotations

from millrace.cli import main
from millrace.home import Home
from pipeline.store.labels import labelled
from pipeline.store.manifest_records import DomainStats, StoreStats
from testkit.stores import EVEN, grid, make_store

LABELS = {"c00": "sql queries", "c01": "river mills", "c02": "sonnets"}


def test_a_cell_is_shown_with_its_domains_label():
    assert labelled("c01q3", LABELS) == "c01q3 (river mills)"
    assert labelled("c02", LABELS) == "c02 (sonnets)"
    assert labelled("articles", LABELS) == "articles"
    assert labelled("c01q3", LABELS, width=12) == "c01q3 (rive…"


def test_store_info_without_quality_labels_its_domain_cells(tmp_path, capsys):
    home = Home.resolve(tmp_path / "home")
    make_store(
        home, {"c00": 20000, "c01": 20000}, EVEN, store_stats=StoreStats(domains=DomainStats(k=2, labels=LABELS))
    )
    assert main(["--home", str(home.root), "store", "info", EVEN.name]) == 0
    out = capsys.readouterr().out
    assert "c00 (sql queries)" in out and "c01 (river mills)" in out


def test_mix_plan_labels_its_cells(tmp_path, capsys):
    home = Home.resolve(tmp_path / "home")
    make_store(home, grid(), EVEN, store_stats=StoreStats(domains=DomainStats(k=3, labels=LABELS)))
    assert main(["--home", str(home.root), "mix", "plan", "default", "--revision", "natural"]) == 0
    out = capsys.readouterr().out
    assert "c00q0 (sql queries)" in out and "c02q4 (sonnets)" in out
