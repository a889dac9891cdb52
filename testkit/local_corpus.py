"""A small corpus of plainly different sources, read from this machine: code, prose, man pages, licences.

- code:     the standard library's top-level `.py` files (first 6,000 characters each);
- prose:    `pydoc_data` topics (the Python reference manual's prose), in pieces of ~2,000 characters;
- man:      English man pages (section 1), roff requests and escapes stripped;
- licenses: /usr/share/common-licenses and /usr/share/doc/*/copyright.
Documents are `datatrove` Documents with `metadata["source"]`; the order is sorted by id. `write_local_corpus`
writes them as a pipeline's sources, `cells_config_text` a pipeline config over them that makes cells.
"""

from __future__ import annotations

import gzip
import re
import sysconfig
from pathlib import Path

from datatrove.data import Document

from testkit.corpus import write_jsonl_zst

MAX_CHARS = 6_000
MIN_CHARS = 200


def _code(limit: int) -> list[tuple[str, str]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [(f"code/{p.name}", p.read_text(errors="replace")) for p in sorted(root.glob("*.py"))[:limit]]


def _prose(limit: int, piece: int = 2_000) -> list[tuple[str, str]]:
    from pydoc_data.topics import topics

    documents = []
    for name in sorted(topics):
        text, part = "", 0
        for paragraph in topics[name].split("\n\n"):
            text += paragraph + "\n\n"
            if len(text) >= piece:
                documents.append((f"prose/{name}/{part}", text))
                text, part = "", part + 1
        if text.strip():
            documents.append((f"prose/{name}/{part}", text))
    return documents[:limit]


def strip_roff(raw: str) -> str:
    lines = []
    for line in raw.splitlines():
        if line.startswith(('.\\"', "'\\\"")):
            continue
        if line.startswith("."):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 else ""
        line = re.sub(r"\\f[BIRP]|\\\(..|\\[-e&]|\\", "", line).replace('"', "")
        if line.strip():
            lines.append(line)
    return "\n".join(lines)


def _man(limit: int) -> list[tuple[str, str]]:
    pages = sorted(Path("/usr/share/man/man1").glob("*.gz"))[:limit]
    return [(f"man/{p.name}", strip_roff(gzip.decompress(p.read_bytes()).decode(errors="replace"))) for p in pages]


def _licenses(limit: int) -> list[tuple[str, str]]:
    files = sorted(Path("/usr/share/common-licenses").glob("*")) + sorted(Path("/usr/share/doc").glob("*/copyright"))
    return [(f"licenses/{p.parent.name}/{p.name}", p.read_text(errors="replace")) for p in files if p.is_file()][
        :limit
    ]


def plainly_different_sources(per_source: int = 300) -> list[Document]:
    documents = []
    for source, items in (
        ("code", _code(per_source)),
        ("prose", _prose(per_source)),
        ("man", _man(per_source)),
        ("licenses", _licenses(per_source)),
    ):
        for doc_id, text in items:
            text = text[:MAX_CHARS]
            if len(text.strip()) >= MIN_CHARS:
                documents.append(Document(text=text, id=doc_id, metadata={"source": source}))
    return sorted(documents, key=lambda d: d.id)


def write_local_corpus(root: Path, per_source: int) -> tuple[list[str], int]:
    """`plainly_different_sources` as a pipeline reads them, one `<source>/part-0.jsonl.zst` a source under
    `root`: the sources' names (sorted) and how many documents were written."""
    documents = plainly_different_sources(per_source=per_source)
    by_source: dict[str, list[dict[str, object]]] = {}
    for doc in documents:
        by_source.setdefault(str(doc.metadata["source"]), []).append({"id": doc.id, "text": doc.text, "metadata": {}})
    for source, records in by_source.items():
        write_jsonl_zst(root / source / "part-0.jsonl.zst", records)
    return sorted(by_source), len(documents)


def cells_config_text(corpus: Path, sources: list[str], tasks: int, workers: int = 1) -> str:
    """A pipeline config over `write_local_corpus`'s `sources` under `corpus` that cuts the store into cells:
    four domains by five quality buckets, the prose as the quality reference (version 2026.01.03)."""
    tables = "".join(f'[[sources]]\nname = "{s}"\npaths = ["{corpus / s}"]\nlanguage_id = false\n\n' for s in sources)
    return (
        tables
        + f"""
[dedup]
fuzzy = false

[tokenizer]
vocab_size = 400

[output]
version = "2026.01.03"

[executor]
tasks = {tasks}
workers = {workers}

[quality]
reference_sources = ["prose"]

[domains]
k = 4
"""
    )
