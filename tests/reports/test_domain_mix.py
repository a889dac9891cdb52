"""Beside each domain's label the page shows what the domain holds: its documents by source and by language,
summed from the store's cell manifests and the pipeline's per-cell stats."""

import re

from pipeline.store.format import Store
from reports import build_site
from reports.composition import load_composition
from testkit import factory


def test_each_domain_shows_its_source_and_language_mix(small_home, tmp_path):
    store = Store(small_home.store(factory.STORE, factory.VERSION))
    grid = load_composition(store.path).grid
    for domain in grid["domains"]:
        cells = [c for c in store.manifest.cells if c.startswith(f"c{domain['index']:02d}")]
        by_source: dict[str, int] = {}
        for cell in cells:
            for source, counts in store.cell(cell).sources.items():
                by_source[source] = by_source.get(source, 0) + counts.documents
        total = sum(by_source.values())
        assert domain["documents"] == total
        shown = {m["name"]: m["share"] for m in domain["sources"]}
        assert shown == {s: n / total for s, n in by_source.items()}  # 3 sources: all shown, none as "other"
        english = sum((store.cell(c).stats.languages or {})["en"] for c in cells)
        assert {m["name"]: m["share"] for m in domain["languages"]}["en"] == english / total
    build_site(small_home, tmp_path)
    body = (tmp_path / factory.STORE / factory.VERSION / "index.html").read_text()
    table = re.search(r'<table id="domain-mix">(.*?)</table>', body, re.DOTALL).group(1)
    for label in factory.DOMAIN_LABELS.values():
        row = re.search(rf"<td class=\"l\">{re.escape(label)}</td>.*?</tr>", table, re.DOTALL).group(0)
        assert all(source in row for source in factory.SOURCES) and "en " in row and "de " in row
