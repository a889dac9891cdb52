"""Each language's rules for datatrove's prose filters: its word splitting, stop words and thresholds.

datatrove's Gopher, C4 and FineWeb filters default to English (spaCy's English word splitting,
Gopher's eight English stop words), which removes most non-English prose as "no stop words" or
"average word length". Language id runs before the filters; each filter is then built once per
language (`LanguageFilters`) with:

- Word splitting: datatrove's tokenizer for the language as FineWeb-2 chose it (`tokenizer_assignment.csv`,
  looked up by FineWeb-2's `<code>_<script>` name: datatrove's two-letter keys take the csv's last row, e.g.
  spaCy "xx" for Chinese and Arabic), when its model ships inside a package this project depends on: spaCy's
  blank languages (German, French, Arabic, ...), Chinese (spaCy with jieba), Japanese (spaCy with SudachiPy
  and its core dictionary), Korean (Kiwi, `kiwipiepy` < 0.22 as datatrove pins it) and Thai (PyThaiNLP).
  Lao, Khmer, Burmese and Tibetan (their segmenters are not dependencies) count characters as words
  (`CharacterWordTokenizer`); every other language (those that need stanza, indic-nlp or pyvi, Hindi and
  Vietnamese among them) splits on spaces with datatrove's `WhitespaceTokenizer`. The choice never depends
  on what else is installed, so a store does not change with the machine.
- Thresholds: English keeps datatrove's defaults (FineWeb's English recipe). Every other language
  py3langid names takes FineWeb-2's published thresholds for it (`fineweb2_language_rules.json`,
  from FineWeb-2's `configs/<language>_<script>.yml`) and FineWeb-2's recipe around them (no
  paragraph or character repetition rules, no short-line rule, character duplicates 0.1). A
  language without an entry keeps datatrove's defaults less the stop-word rule.
- Stop words: FineWeb-2's list when the words can be found: with datatrove's own tokenizer for the
  language (Korean's stop words are Kiwi morphemes, 의/는/를, so Kiwi finds them), or one-character stop
  words with the character tokenizer. Otherwise the stop-word rule is off.
- Repetition: FineWeb-2's n-gram rules count words; where words are characters they count n-grams of
  twice as many characters, and the top n-gram share allows for the spaces datatrove counts between the
  characters (`character_n_grams`).
- C4: its rules (ASCII terminal punctuation, three space-separated words a line, English policy
  phrases) are English; FineWeb-2 does not apply C4 either, so only English documents go through it.

Options a config sets under `[filters.<name>]` apply to every language, over these.
"""

from __future__ import annotations

import json
import logging
import sys
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import regex
from datatrove.utils.word_tokenizers import (
    SpaCyTokenizer,
    WhitespaceTokenizer,
    WordTokenizer,
    load_tokenizer_assignments,
    strip_strings,
)

if TYPE_CHECKING:
    from spacy.language import Language

RULES_FILE = Path(__file__).with_name("fineweb2_language_rules.json")
ENGLISH = "en"
# languages written without spaces whose segmenters are not dependencies (py3langid codes)
UNSPACED = frozenset({"lo", "km", "my", "bo", "dz"})
# datatrove tokenizers whose models ship inside this project's dependencies (pyproject.toml)
SHIPPED_TOKENIZERS = frozenset({"SpaCyTokenizer", "KiwiTokenizer", "ThaiTokenizer"})
# spaCy blank languages that need a package this project does not depend on (pyvi, natto-py)
SPACY_NEEDS_EXTRA = frozenset({"vi", "ko"})
CHARACTERS_PER_WORD = 2  # about a word's length in characters where words are not spaced
UNSPACED_CHARACTER = r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}\p{Tibetan}]"
# FineWeb-2's recipe for every language besides the per-language values (its fineweb-2-pipeline.py)
FINEWEB2_FIXED: dict[str, dict[str, Any]] = {
    "gopher_repetition": {"dup_para_frac": 0, "dup_line_char_frac": 0, "dup_para_char_frac": 0},
    "fineweb_quality": {"short_line_thr": 999, "char_duplicates_ratio": 0.1},
    "gopher_quality": {"min_stop_words": 2},
}
PER_LANGUAGE = {
    "gopher_repetition": ("dup_line_frac", "top_n_grams", "dup_n_grams"),
    "fineweb_quality": ("line_punct_thr", "new_line_ratio"),
    "gopher_quality": ("min_avg_word_length", "max_avg_word_length", "max_non_alpha_words_ratio"),
}


class CharacterWordTokenizer(WhitespaceTokenizer):
    """Words of text written without spaces: each ideograph, kana or letter of such a script is a
    word, as is each run of other letters or digits and each punctuation mark; sentences as
    datatrove's `WhitespaceTokenizer` splits them (on terminal punctuation, 。！？ included)."""

    WORD = regex.compile(rf"{UNSPACED_CHARACTER}|[^\s\p{{P}}\p{{S}}{UNSPACED_CHARACTER[1:-1]}]+|[\p{{P}}\p{{S}}]")

    def word_tokenize(self, text: str) -> list[str]:
        words: list[str] = strip_strings(self.WORD.findall(text))
        return words


class TorchFreeSpaCyTokenizer(SpaCyTokenizer):
    """datatrove's spaCy tokenizer, loaded without torch. spaCy imports thinc, and thinc imports torch when it
    is installed (as it is here, for the trainer): 3-4 s of CPU in every pipeline process that splits words,
    for a rule-based tokenizer that never uses it."""

    @property
    def tokenizer(self) -> Language:
        if self._tokenizer is None:
            import_spacy_without_torch()
        loaded: Language = super().tokenizer
        return loaded


def import_spacy_without_torch() -> None:
    """Import spaCy with torch hidden; thinc then runs without it, and a later `import torch` works as usual.
    A process that has torch already (a trainer, a test session) imports spaCy as it is."""
    if "spacy" in sys.modules or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        # lazy: imported with torch hidden (above): spaCy's thinc then skips torch
        import spacy  # noqa: F401
    finally:
        del sys.modules["torch"]


@lru_cache(maxsize=1)
def fineweb2_rules() -> dict[str, dict[str, Any]]:
    rules: dict[str, dict[str, Any]] = json.loads(RULES_FILE.read_text(encoding="utf-8"))["languages"]
    return rules


@cache
def word_tokenizer(language: str) -> tuple[WordTokenizer, str]:
    """The tokenizer for `language` and its kind: "datatrove" (FineWeb-2's assignment), "characters" or "spaces"."""
    rules = fineweb2_rules().get(language)
    factory = load_tokenizer_assignments().get(rules["config"] if rules else language)
    if factory is not None:
        kind, argument = factory.args
        if kind in SHIPPED_TOKENIZERS and not (kind == "SpaCyTokenizer" and argument in SPACY_NEEDS_EXTRA):
            if argument == "zh":
                quiet_jieba()
            if kind == "SpaCyTokenizer":
                return TorchFreeSpaCyTokenizer(argument), "datatrove"
            return factory(), "datatrove"
    if language in UNSPACED:
        return CharacterWordTokenizer(), "characters"
    return WhitespaceTokenizer(), "spaces"


def quiet_jieba() -> None:
    """jieba logs its dictionary loading at DEBUG to stderr in every worker; keep its warnings only."""
    import jieba  # lazy: heavy (jieba's dictionary)

    jieba.setLogLevel(logging.WARNING)


def usable_stop_words(language: str, stop_words: list[str]) -> list[str]:
    """The stop words this language's tokenizer can find as words (none when they need another splitter)."""
    tokenizer, kind = word_tokenizer(language)
    if kind == "datatrove":
        return stop_words
    if kind == "characters":
        return [w for w in stop_words if len(w) == 1 and tokenizer.word_tokenize(w) == [w]]
    return []


def character_n_grams(top_n_grams: list[list[float]], dup_n_grams: list[list[float]]) -> dict[str, list[list[float]]]:
    """FineWeb-2's n-gram rules for words of about `CHARACTERS_PER_WORD` characters, restated for words that
    are single characters: n words become 2n characters. datatrove measures a top n-gram by its length
    joined with spaces (one per word boundary): 3n - 1 characters for n two-character words, 4n - 1 for 2n
    one-character ones, so its share is scaled by (4n - 1) / (3n - 1) to mean the same text."""
    w = CHARACTERS_PER_WORD
    top = [[w * n, share * (2 * w * n - 1) / ((w + 1) * n - 1)] for n, share in top_n_grams]
    return {"top_n_grams": top, "dup_n_grams": [[w * n, share] for n, share in dup_n_grams]}


def filter_options(name: str, language: str | None, configured: dict[str, Any]) -> dict[str, Any] | None:
    """Keyword options for datatrove's filter `name` on documents of `language` (None: not identified,
    English rules), or None where the filter does not apply to that language (C4 outside English)."""
    if language is None or language == ENGLISH:
        return {**configured, "language": word_tokenizer(ENGLISH)[0]}
    if name == "c4_quality":
        return None
    options: dict[str, Any] = {"language": word_tokenizer(language)[0]}
    rules = fineweb2_rules().get(language)
    if rules is not None:
        options.update(FINEWEB2_FIXED.get(name, {}))
        options.update({key: rules[key] for key in PER_LANGUAGE.get(name, ())})
        if name == "gopher_repetition" and word_tokenizer(language)[1] == "characters":
            options.update(character_n_grams(options["top_n_grams"], options["dup_n_grams"]))
    if name == "gopher_quality":
        stop_words = usable_stop_words(language, rules["stopwords"]) if rules else []
        options.update({"stop_words": stop_words} if len(stop_words) >= 2 else {"min_stop_words": None})
    return {**options, **configured}
