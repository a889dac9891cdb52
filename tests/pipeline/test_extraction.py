"""HTML extraction is a pure function of the page: the same pages give the same text in any order."""

from __future__ import annotations

import json
import random

from datatrove.data import Document

from pipeline.steps.filter.filtering import ExtractStep
from testkit.corpus import prose

SHARED = (
    "Every page of this manual describes one command of the toolchain, its options and the files it writes; "
    "the examples below each can be run as they stand."
)


def _pages() -> list[tuple[str, str]]:
    rng = random.Random(5)
    return [
        (
            f"https://docs.example/{index}",
            f"<html><body><article><h1>Command {index}</h1><p>{SHARED}</p><p>{prose(rng)}</p>"
            f"<p>{prose(rng)}</p></article></body></html>",
        )
        for index in range(6)
    ]


def _extract(tmp_path, pages: list[tuple[str, str]], timeout: float = 5.0) -> dict[str, str]:
    step = ExtractStep(tmp_path / "funnel", tmp_path / "removed", ["web"], timeout=timeout)
    documents = [Document(text=html, id=url, metadata={"source": "web"}) for url, html in pages]
    return {doc.id: doc.text for doc in step.run(documents, 0, 1)}


def test_the_same_pages_extract_to_the_same_text_in_either_order(tmp_path):
    pages = _pages()
    forward = _extract(tmp_path / "a", pages)
    backward = _extract(tmp_path / "b", pages[::-1])
    assert forward == backward and len(forward) == len(pages)
    assert all(SHARED in text for text in forward.values())  # no page loses the paragraph the others share


def test_a_page_that_times_out_is_counted_and_changes_no_other_page(tmp_path):
    pages = _pages()
    cells = "".join(f"<table><tr><td><p>cell {i} with a few words</p></td></tr></table>" for i in range(20000))
    slow = ("https://docs.example/slow", f"<html><body>{cells}</body></html>")  # about 15 s to extract here
    alone = _extract(tmp_path / "a", pages, timeout=2.0)
    with_slow = _extract(tmp_path / "b", [*pages[:3], slow, *pages[3:]], timeout=2.0)
    assert with_slow == alone
    counts = json.loads((tmp_path / "b" / "funnel" / "00000.json").read_text())
    assert counts["sources"]["web"]["removed"]["extraction_timeout"]["documents"] == 1
