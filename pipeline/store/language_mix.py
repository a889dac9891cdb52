"""Each quality bucket's language mix, from the cell manifests' per-language document counts.

Quality buckets are calibrated per language (`pipeline.cells.calibration`), so each bucket should
hold about the corpus's mix of languages; this is how `store info` and the composition page show
that it does. Light (no datatrove), like the rest of `pipeline.store`.
"""

from __future__ import annotations

import re
from typing import TypedDict

from pipeline.store.format import Store

BUCKET = re.compile(r"^(?:c\d+)?(q\d+)$")


class LanguageMix(TypedDict):
    """Documents per language: the corpus's, and each quality bucket's."""

    corpus: dict[str, int]
    buckets: dict[str, dict[str, int]]


def bucket_language_mix(store: Store) -> LanguageMix:
    """{"corpus": {language: documents}, "buckets": {"q0": {language: documents}, …}}; empty without buckets."""
    corpus: dict[str, int] = {}
    buckets: dict[str, dict[str, int]] = {}
    if store.manifest.stats_only:
        return {"corpus": corpus, "buckets": buckets}
    for name in sorted(store.manifest.cells):
        match = BUCKET.match(name)
        if not match:
            continue
        languages = store.cell(name).stats.languages or {}
        row = buckets.setdefault(match.group(1), {})
        for language, documents in languages.items():
            row[language] = row.get(language, 0) + int(documents)
            corpus[language] = corpus.get(language, 0) + int(documents)
    ordered = sorted(buckets, key=lambda b: int(b[1:]))
    return {
        "corpus": dict(sorted(corpus.items(), key=lambda kv: (-kv[1], kv[0]))),
        "buckets": {b: dict(sorted(buckets[b].items(), key=lambda kv: (-kv[1], kv[0]))) for b in ordered},
    }


def share_ratios(mix: LanguageMix, min_documents: int = 50) -> dict[str, dict[str, float]]:
    """Per bucket, each language's share of the bucket over its share of the corpus (languages >= min_documents)."""
    corpus = mix["corpus"]
    total = sum(corpus.values())
    ratios = {}
    for bucket, row in mix["buckets"].items():
        size = sum(row.values())
        ratios[bucket] = {
            lang: round((row.get(lang, 0) / size) / (docs / total), 3)
            for lang, docs in corpus.items()
            if docs >= min_documents and size and total
        }
    return ratios
