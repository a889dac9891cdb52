"""The page for one store version: `SITE/<store>/<version>/index.html`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reports.composition import Composition
from reports.numbers import human_count, human_percent
from reports.render import embed_json, render_page, static_text

TOP_DOMAINS = 3
SHARE_BLUE = (31, 95, 191)


def _luminance(rgb: tuple[float, float, float]) -> float:
    lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in (c / 255 for c in rgb)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def share_style(share: float) -> str:
    """A table cell shaded by `share` with text of at least 4.5:1 contrast (white or black, whichever is higher)."""
    share = min(1.0, max(0.0, share))
    red, green, blue = (round(255 + (c - 255) * share) for c in SHARE_BLUE)
    rgb = (red, green, blue)
    level = _luminance(rgb)
    white, black = 1.05 / (level + 0.05), (level + 0.05) / 0.05
    return f"background: rgb{rgb}; color: {'#fff' if white >= black else '#000'}"


def _spread(composition: Composition) -> list[dict[str, object]]:
    """Per source: its share in each quality bucket and each domain (or its top cells)."""
    cells, grid = composition.cells, composition.grid
    out = []
    for source in composition.sources:
        total = source["tokens"] or 1
        row: dict[str, object] = {"name": source["name"], "tokens": source["tokens"], "documents": source["documents"]}
        if grid:
            buckets = dict.fromkeys(grid["buckets"], 0)
            domains = {d["index"]: 0 for d in grid["domains"]}
            for cell, tokens in zip(cells, source["tokens_by_cell"]):
                if cell["bucket"] is not None and cell["domain"] is not None:  # always, with a grid
                    buckets[cell["bucket"]] += tokens
                    domains[cell["domain"]] += tokens
            top = max(domains.values()) or 1
            labels = {d["index"]: d["label"] for d in grid["domains"]}
            row["buckets"] = [
                {"share": buckets[b] / total, "style": share_style(buckets[b] / total)} for b in grid["buckets"]
            ]
            row["domains"] = [
                {"name": f"c{d:02d}", "label": labels[d], "share": t / total, "rel": t / top}
                for d, t in domains.items()
            ]
            ranked = sorted(domains.items(), key=lambda item: -item[1])[:TOP_DOMAINS]
            row["top_domains"] = ", ".join(
                f"c{d:02d}{' ' + labels[d] if labels[d] else ''} {human_percent(t / total)}" for d, t in ranked if t
            )
        else:
            top_cells = sorted(zip(cells, source["tokens_by_cell"]), key=lambda item: -item[1])[:TOP_DOMAINS]
            row["top_cells"] = ", ".join(f"{c['name']} {human_percent(t / total)}" for c, t in top_cells if t)
        out.append(row)
    return out


def _funnel_sources(funnel: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = sorted({row["source"] for stage in funnel for row in stage["sources"]})
    out = []
    for name in names:
        entries = []
        for stage in funnel:
            row = next((r for r in stage["sources"] if r["source"] == name), None)
            if row is None:
                entries.append({"text": "—", "title": "not in this step", "removed": ""})
                continue
            kept = row["kept"]
            text = human_count(kept["documents"]) + (f" · {human_count(kept['tokens'])} tok" if kept["tokens"] else "")
            removed = "; ".join(f"{reason} {human_count(c['documents'])}" for reason, c in row["removed"].items())
            title = (
                f"received {human_count(row['received']['documents'])} documents"
                f"{', ' + human_count(row['received']['tokens']) + ' tokens' if row['received']['tokens'] else ''}"
                f"; removed: {removed or 'nothing'}"
            )
            gone = sum(c["documents"] for c in row["removed"].values())
            entries.append({"text": text, "title": title, "removed": human_count(gone) if gone else ""})
        out.append({"name": name, "stages": entries})
    return out


def _funnel_languages(funnel: list[dict[str, Any]]) -> dict[str, Any]:
    """Funnel steps that count languages, and per language each one's kept and removed documents (reasons on hover)."""
    stages = [stage for stage in funnel if stage.get("languages")]
    names = sorted(
        {lang for stage in stages for lang in stage["languages"]},
        key=lambda lang: -max(stage["languages"].get(lang, {}).get("received", 0) for stage in stages),
    )
    rows = []
    for lang in names:
        entries = []
        for stage in stages:
            counts = stage["languages"].get(lang)
            if counts is None:
                entries.append({"text": "—", "title": "", "removed": ""})
                continue
            gone = counts["received"] - counts["kept"]
            why = "; ".join(f"{reason} {human_count(n)}" for reason, n in counts["removed"].items())
            entries.append(
                {
                    "text": human_count(counts["kept"]),
                    "removed": human_count(gone) if gone else "",
                    "title": f"received {human_count(counts['received'])}; removed: {why or 'nothing'}",
                }
            )
        rows.append({"name": lang, "stages": entries})
    return {"stages": [stage["name"] for stage in stages], "rows": rows}


def write_composition_page(
    composition: Composition,
    site: Path,
    ladders: Sequence[dict[str, str]] = (),
    searches: Sequence[Mapping[str, object]] = (),
) -> Path:
    """`ladders`: links to the ladders trained on this page's revisions (reports.ladder_page.ladder_links);
    `searches`: the mixture searches whose proposals are revisions here (reports.search_page.search_links)."""
    store = composition.store
    out = site / store.name / store.version / "index.html"
    funnel = composition.funnel
    return render_page(
        "composition.html.j2",
        out,
        root="../../",
        store=store,
        cells=composition.cells,
        grid=composition.grid,
        quality=composition.quality,
        sources=composition.sources,
        spread=_spread(composition),
        funnel=funnel,
        funnel_sources=_funnel_sources(funnel),
        funnel_languages=_funnel_languages(funnel),
        not_read=composition.not_read,
        first_documents=funnel[0]["total"]["received"]["documents"] if funnel else 0,
        total_tokens=sum(c["tokens"] for c in composition.cells),
        total_documents=sum(c["documents"] for c in composition.cells),
        revision_count=len(composition.revisions),
        has_cell_stats=composition.has_cell_stats,
        page_json=embed_json(composition.page_data()),
        page_js=static_text("composition.js"),
        ladders=list(ladders),
        searches=list(searches),
    )
