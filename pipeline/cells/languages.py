"""Document languages as the cell models use them: `metadata["language"]`, and each language's stop words.

The language step records py3langid's label, an ISO 639 code (`en`, `de`, `zh` …); the embedded
corpus's code source carries `python`, which is a content kind, not a natural language. Stop words
are spaCy's per-language `stop_words` lists (spaCy ships them; datatrove already needs spaCy for
word splitting); English is always included, since untranslated fragments carry it everywhere.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}$")
ALWAYS = ("en",)


def natural_language(label: object) -> str | None:
    """`label` when it is an ISO 639 language code, else None."""
    return label if isinstance(label, str) and LANGUAGE_CODE.match(label) else None


def sample_languages(languages: Iterable[object]) -> list[str]:
    """The natural languages present among `languages`, with English always included."""
    return sorted({lang for lang in map(natural_language, languages) if lang} | set(ALWAYS))


@cache
def stop_words(language: str) -> frozenset[str]:
    """spaCy's stop words for `language`, lower-cased; empty where spaCy has no list for it.

    The list file (`spacy/lang/<code>/stop_words.py`, one self-contained `STOP_WORDS` set) is
    loaded alone: importing the language package would build its tokenizer rules, seconds each.
    """
    spacy_spec = importlib.util.find_spec("spacy")
    if spacy_spec is None or not spacy_spec.submodule_search_locations:
        raise ImportError("spaCy is not installed (a dependency of millrace)")
    path = Path(next(iter(spacy_spec.submodule_search_locations))) / "lang" / language / "stop_words.py"
    if not path.is_file():
        return frozenset()
    spec = importlib.util.spec_from_file_location(f"millrace_stop_words_{language}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not loadable as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return frozenset(word.lower() for word in module.STOP_WORDS)


def all_stop_words(languages: Sequence[str]) -> frozenset[str]:
    return frozenset().union(*(stop_words(lang) for lang in languages))
