"""Man pages that this machine has in several languages: the same content across languages.

Each page (`man1/dpkg.1`, …) present under /usr/share/man/<lang>/ in at least `min_languages`
languages (English, /usr/share/man/manN, counts as one) becomes one document per language, roff
requests and escapes stripped (`local_corpus.strip_roff`, fast enough for a test). Documents carry
`metadata["page"]`, `metadata["source"]` (`man-<lang>`) and `metadata["language"]` (ISO 639-1:
`pt_BR` → `pt`). An empty list where the machine has no translated man pages.
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

from datatrove.data import Document

from testkit.local_corpus import strip_roff

MAN_ROOT = Path("/usr/share/man")
MAX_CHARS = 3_000


def _translated_pages() -> dict[str, dict[str, Path]]:
    pages: dict[str, dict[str, Path]] = defaultdict(dict)
    if not MAN_ROOT.is_dir():
        return {}
    for path in sorted(MAN_ROOT.glob("*/man*/*.gz")):
        if path.is_file() and not path.is_symlink():
            pages[f"{path.parent.name}/{path.name}"][path.parts[-3]] = path
    for key in list(pages):
        english = MAN_ROOT / key
        if english.is_file() and not english.is_symlink():
            pages[key]["en"] = english
    return pages


def _read(path: Path) -> str:
    raw = gzip.decompress(path.read_bytes()).decode(errors="replace")
    return "" if raw.lstrip().startswith(".so ") else strip_roff(raw)[:MAX_CHARS]


def multilingual_man_pages(min_languages: int = 3) -> list[Document]:
    documents = []
    for page, languages in sorted(_translated_pages().items()):
        if len(languages) < min_languages:
            continue
        for lang, path in sorted(languages.items()):
            text = _read(path)
            if len(text.strip()) >= 200:
                documents.append(
                    Document(
                        text=text,
                        id=f"man-{lang}/{page}",
                        metadata={
                            "source": f"man-{lang.lower().replace('_', '-')}",
                            "language": lang.split("_")[0],
                            "page": page,
                        },
                    )
                )
    return documents
