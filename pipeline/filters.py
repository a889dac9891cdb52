"""The filter registry: every document filter a source may list, registered once.

A filter is anything with datatrove's filter interface, `filter(doc) -> bool | (bool, reason)`, built with
the keyword options of its `[filters.<name>]` table. From `FILTERS` come the config's checks (`sources.filters`
names, `[filters.<name>]` tables, prose filters kept off code sources), the run's funnel stages (one per
filter in use, in this order), and the starter file's `[filters.<name>]` tables. Adding a filter is one entry
here (and its class, here or in any importable module), plus a test.

This module stays light (no datatrove import): `pipeline.config` reads it; a run imports each filter's class
when it builds it (`pipeline.stages.filter.filtering.build_filter`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FilterFactory = Callable[..., Any]


@dataclass(frozen=True)
class FilterSpec:
    """One registered filter."""

    name: str
    factory: str | FilterFactory  # "package.module:Class" (imported when a run builds it) or the class itself
    summary: str  # one line, shown in the starter file
    prose: bool = True  # assumes natural-language text: a code source may not list it
    language_rules: bool = True  # built per document language with its rules (`pipeline.stages.filter.language_rules`)
    starter: Mapping[str, Any] = field(default_factory=dict)  # options `pipeline init` sets
    examples: Mapping[str, Any] = field(default_factory=dict)  # options `pipeline init` shows, commented out

    def filter_class(self) -> FilterFactory:
        if not isinstance(self.factory, str):
            return self.factory
        module, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module), attribute)


FILTERS: tuple[FilterSpec, ...] = (
    FilterSpec(
        "gopher_quality",
        "datatrove.pipeline.filters:GopherQualityFilter",
        "Gopher's quality rules: word counts and lengths, symbols, bullets, stop words",
        # share of words with a letter; datatrove's web default 0.8 drops most technical text
        starter={"max_non_alpha_words_ratio": 0.5},
        examples={"min_doc_words": 50, "max_symbol_word_ratio": 0.1},
    ),
    FilterSpec(
        "gopher_repetition",
        "datatrove.pipeline.filters:GopherRepetitionFilter",
        "Gopher's repetition rules: duplicated lines, paragraphs and n-grams",
        examples={"dup_line_frac": 0.3},
    ),
    FilterSpec(
        "c4_quality",
        "datatrove.pipeline.filters:C4QualityFilter",
        "C4's line rules: terminal punctuation, javascript, policy lines (English only)",
        examples={"filter_no_terminal_punct": True},
    ),
    FilterSpec(
        "fineweb_quality",
        "datatrove.pipeline.filters:FineWebQualityFilter",
        "FineWeb's line rules: punctuation, short lines, repeated characters",
        examples={"line_punct_thr": 0.12},
    ),
)
FILTER_NAMES: tuple[str, ...] = tuple(spec.name for spec in FILTERS)
PROSE_FILTERS = frozenset(spec.name for spec in FILTERS if spec.prose)


def filter_spec(name: str) -> FilterSpec:
    """The registered filter `name`; a ValueError naming the known ones otherwise."""
    for spec in FILTERS:
        if spec.name == name:
            return spec
    raise ValueError(f"unknown filter {name!r} (known: {', '.join(FILTER_NAMES)})")
