"""A small multi-source corpus written by the tests: prose, code, duplicates and a malformed line."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

import zstandard

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "which",
    "have",
    "not",
    "had",
    "they",
    "river",
    "mill",
    "water",
    "wheel",
    "channel",
    "stone",
    "grain",
    "flour",
    "miller",
    "valley",
    "bridge",
    "village",
    "morning",
    "evening",
    "season",
    "harvest",
    "stream",
    "current",
    "power",
    "engine",
    "gear",
    "shaft",
    "wooden",
    "iron",
    "old",
    "new",
    "small",
    "large",
    "quiet",
    "busy",
    "long",
    "short",
    "people",
    "work",
    "farm",
    "field",
    "road",
    "town",
    "market",
    "winter",
    "summer",
    "spring",
    "autumn",
    "light",
    "dark",
    "cold",
    "warm",
    "clear",
    "deep",
]


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
    return " ".join(words).capitalize() + "."


def prose(rng: random.Random) -> str:
    return "\n\n".join(" ".join(sentence(rng) for _ in range(rng.randint(3, 6))) for _ in range(rng.randint(3, 6)))


def code(rng: random.Random, index: int) -> str:
    body = "\n".join(
        f"    total += {rng.choice(['x', 'y', 'z'])} * {rng.randint(1, 99)}" for _ in range(rng.randint(5, 30))
    )
    return f"def function_{index}(x, y, z):\n    total = 0\n{body}\n    return total\n"


def edit(rng: random.Random, text: str, fraction: float) -> str:
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, int(len(words) * fraction))):
        words[i] = rng.choice(WORDS)
    return " ".join(words)


def write_jsonl_zst(path: Path, records: Sequence[Mapping[str, object]], corrupt_line: str | None = None) -> None:
    lines = [json.dumps(r) for r in records]
    if corrupt_line is not None:
        lines.insert(len(lines) // 2, corrupt_line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(("\n".join(lines) + "\n").encode()))


def make_corpus(root: Path, documents: int = 60, seed: int = 0) -> Path:
    rng = random.Random(seed)
    texts = [prose(rng) for _ in range(documents)]
    articles = [{"id": f"a{i:04d}", "text": t, "metadata": {"language": "en"}} for i, t in enumerate(texts)]
    articles.append({"id": "a-copy", "text": texts[0], "metadata": {}})  # an exact duplicate
    articles.append({"id": "a-near", "text": edit(rng, texts[1], 0.02), "metadata": {}})  # a near duplicate
    articles.append({"id": "a-empty", "text": "", "metadata": {}})
    half = len(articles) // 2
    write_jsonl_zst(root / "articles" / "part-0.jsonl.zst", articles[:half], corrupt_line='{"id": "broken", "text": ')
    write_jsonl_zst(root / "articles" / "part-1.jsonl.zst", articles[half:])
    notes = [{"id": f"n{i:04d}", "text": prose(rng)} for i in range(documents // 3)]
    notes.append({"id": "n-copy", "text": texts[2]})  # an exact duplicate of another source's document
    write_jsonl_zst(root / "notes" / "notes.jsonl.zst", notes)
    snippets = [
        {"id": f"c{i:04d}", "text": code(rng, i), "metadata": {"language": "python"}} for i in range(documents // 2)
    ]
    write_jsonl_zst(root / "snippets" / "code.jsonl.zst", snippets)
    return root


def write_overlapping_eval_set(path: Path) -> list[str]:
    """An evaluation set (`.jsonl`) of two of `make_corpus`'s own article texts (its default size and seed), one
    of them edited a little, and three new texts: what decontamination must find, and what it must leave."""
    corpus_rng = random.Random(0)  # make_corpus's own sequence of texts
    texts = [prose(corpus_rng) for _ in range(60)]
    other = random.Random(99)
    documents = [texts[10], texts[11], edit(random.Random(1), texts[12], 0.02)] + [prose(other) for _ in range(3)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in documents))
    return documents


def write_mixed_folder(root: Path) -> Path:
    """Parquet, JSON lines (one malformed line) and a CSV no source reads, in one folder: the formats a user
    drops side by side."""
    import pyarrow as pa  # lazy: heavy (pyarrow), only this builder writes parquet
    import pyarrow.parquet as pq

    rng = random.Random(5)
    root.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"id": f"p{i}", "text": prose(rng)} for i in range(5)]), root / "a.parquet")
    lines = [json.dumps({"id": f"j{i}", "text": prose(rng)}) for i in range(4)] + ["not json"]
    (root / "b.jsonl").write_text("\n".join(lines) + "\n")
    (root / "c.csv").write_text("id,text\n")
    return root


def config_text(corpus: Path, version: str = "2026.01.02", tasks: int = 2, workers: int = 1, extra: str = "") -> str:
    return f"""
[[sources]]
name = "articles"
paths = ["{corpus / "articles"}"]
filters = ["gopher_repetition", "gopher_quality"]

[[sources]]
name = "notes"
paths = ["{corpus / "notes"}"]
filters = ["gopher_quality"]
languages = ["en"]

[[sources]]
name = "snippets"
paths = ["{corpus / "snippets"}"]
kind = "code"
language_id = false

[tokenizer]
vocab_size = 400

[output]
version = "{version}"

[executor]
tasks = {tasks}
workers = {workers}
{extra}
"""


def store_files(path: Path) -> dict[str, bytes]:
    """Every file of a store version with its bytes: identical stores compare equal."""
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
