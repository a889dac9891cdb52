"""The filter registry: every document filter a source may list, registered once.

A filter is anything with datatrove's filter interface, `filter(doc) -> bool | (bool, reason)`, built with
the keyword options of its `[filters.<name>]` table. Those options are checked at config load by the filter's
options model (a `StrictModel`: unknown options and wrong types are one-line errors naming the file and
field), then the filter is built once with them (its own `ValueError` or `TypeError` is a one-line error too).
From `FILTERS` come the config's checks (`sources.filters` names, `[filters.<name>]` tables, prose filters
kept off code sources), the run's funnel steps (one per filter in use, in this order), the starter file's
`[filters.<name>]` tables and the table in docs/pipeline.md (`filter_table`). Adding a filter is one entry here
(and its class, here or in any importable module), plus a test.

This module stays light (no datatrove import): `pipeline.config` reads it; a run imports each filter's class
when it builds it (`pipeline.steps.filter.filtering.build_filter`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from millrace.config import StrictModel

FilterFactory = Callable[..., Any]


class NoOptions(StrictModel):
    """A filter without options: any option given is an error."""


class GopherQualityOptions(StrictModel):
    """`GopherQualityFilter`'s options (datatrove's defaults; None turns a rule off)."""

    min_doc_words: int | None = 50
    max_doc_words: int | None = 100000
    min_avg_word_length: int | None = 3
    max_avg_word_length: int | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2
    stop_words: list[str] | None = None


class GopherRepetitionOptions(StrictModel):
    """`GopherRepetitionFilter`'s options (datatrove's defaults; None turns a rule off)."""

    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))


class C4QualityOptions(StrictModel):
    """`C4QualityFilter`'s options (datatrove's defaults; -1 turns a count rule off)."""

    split_paragraph: bool = True
    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True


class FineWebQualityOptions(StrictModel):
    """`FineWebQualityFilter`'s options (datatrove's defaults)."""

    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    stop_chars: tuple[str, ...] | None = None
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3


@dataclass(frozen=True)
class FilterSpec:
    """One registered filter."""

    name: str
    factory: str | FilterFactory  # "package.module:Class" (imported when a run builds it) or the class itself
    summary: str  # one line, shown in the starter file
    options: type[StrictModel] = NoOptions  # its `[filters.<name>]` table, checked at config load
    prose: bool = True  # assumes natural-language text: a code source may not list it
    # opt-in: built per document language with `language=` and that language's rules
    # (`pipeline.steps.filter.language_rules`, which knows datatrove's four filters' options)
    language_rules: bool = False
    starter: Mapping[str, Any] = field(default_factory=dict)  # options `pipeline init` sets
    examples: Mapping[str, Any] = field(default_factory=dict)  # options `pipeline init` shows, commented out

    def filter_class(self) -> FilterFactory:
        if not isinstance(self.factory, str):
            return self.factory
        module, _, attribute = self.factory.partition(":")
        imported: FilterFactory = getattr(importlib.import_module(module), attribute)
        return imported

    def checked_options(self, options: object) -> dict[str, JsonValue]:
        """The `[filters.<name>]` table as its options model reads it (only the options it sets), as JSON; a
        ValidationError locating the field otherwise."""
        checked: dict[str, JsonValue] = self.options.model_validate(options).model_dump(
            mode="json", exclude_unset=True
        )
        return checked


FILTERS: tuple[FilterSpec, ...] = (
    FilterSpec(
        "gopher_quality",
        "datatrove.pipeline.filters:GopherQualityFilter",
        "Gopher's quality rules: word counts and lengths, symbols, bullets, stop words",
        options=GopherQualityOptions,
        language_rules=True,
        # share of words with a letter; datatrove's web default 0.8 drops most technical text
        starter={"max_non_alpha_words_ratio": 0.5},
        examples={"min_doc_words": 50, "max_symbol_word_ratio": 0.1},
    ),
    FilterSpec(
        "gopher_repetition",
        "datatrove.pipeline.filters:GopherRepetitionFilter",
        "Gopher's repetition rules: duplicated lines, paragraphs and n-grams",
        options=GopherRepetitionOptions,
        language_rules=True,
        examples={"dup_line_frac": 0.3},
    ),
    FilterSpec(
        "c4_quality",
        "datatrove.pipeline.filters:C4QualityFilter",
        "C4's line rules: terminal punctuation, javascript, policy lines (English only)",
        options=C4QualityOptions,
        language_rules=True,
        examples={"filter_no_terminal_punct": True},
    ),
    FilterSpec(
        "fineweb_quality",
        "datatrove.pipeline.filters:FineWebQualityFilter",
        "FineWeb's line rules: punctuation, short lines, repeated characters",
        options=FineWebQualityOptions,
        language_rules=True,
        examples={"line_punct_thr": 0.12},
    ),
)
FILTER_NAMES: tuple[str, ...] = tuple(spec.name for spec in FILTERS)


def filter_spec(name: str) -> FilterSpec:
    """The registered filter `name`; a ValueError naming the known ones otherwise."""
    for spec in FILTERS:
        if spec.name == name:
            return spec
    raise ValueError(f"unknown filter {name!r} (known: {', '.join(spec.name for spec in FILTERS)})")


def filter_table() -> str:
    """The registry as the Markdown table docs/pipeline.md shows (tests/pipeline/test_registries.py compares)."""
    rows = ["| filter | what it removes | options | prose only | per-language rules |", "|---|---|---|---|---|"]
    for spec in FILTERS:
        options = ", ".join(f"`{name}`" for name in spec.options.model_fields) or "none"
        flags = ["yes" if spec.prose else "no", "yes" if spec.language_rules else "no"]
        rows.append(f"| `{spec.name}` | {spec.summary} | {options} | {' | '.join(flags)} |")
    return "\n".join(rows)
