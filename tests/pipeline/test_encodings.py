"""Legacy-encoded input in every reader: read by its declared or detected encoding, never stored with U+FFFD;
and every reader's documents have an origin (a dataset's rows too)."""

from __future__ import annotations

import json

import pytest

from pipeline.config import parse_pipeline_config
from testkit.warc import read_source, write_pages_warc

TEXTS = {
    "iso-8859-1": "Par défaut, les bibliothèques sont installées à côté du système. "
    "Ça marche très bien, même en été, où les élèves étudient sans arrêt.",
    "cp1252": "Les “guillemets” – et l’apostrophe… coûtent 5 € à l’été prochain. "
    "Œuvres complètes, déjà vues à Noël, réédités en français.",
    "shift_jis": "デフォルトでは、ライブラリはシステムの横にインストールされます。"
    "この文書はエンコーディングの検出を確認するための日本語のテストです。表示されます。",
    "gb18030": "默认情况下，库安装在系统旁边。这是一个测试文档，用于检查编码的检测是否正确，"
    "以及文本是否被完整地读取而没有替换字符。",
}
ENCODINGS = list(TEXTS)


def _source(tmp_path, fmt: str):
    config = parse_pipeline_config(
        {"sources": [{"name": "s", "paths": [str(tmp_path / "in")], "format": fmt}]}, "t", tmp_path
    )
    return config.sources[0]


def _page(text: str, encoding: str, meta: bool) -> bytes:
    head = f'<meta http-equiv="Content-Type" content="text/html; charset={encoding}">' if meta else ""
    return f"<html><head>{head}<title>t</title></head><body><p>{text}</p></body></html>".encode(encoding)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("meta", [True, False], ids=["declared", "detected"])
def test_html_files_are_read_in_their_declared_or_detected_encoding(tmp_path, encoding, meta):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "page.html").write_bytes(_page(TEXTS[encoding], encoding, meta))
    (doc,), _counts, listing = read_source(tmp_path, _source(tmp_path, "html"))
    assert TEXTS[encoding] in doc.text and "\ufffd" not in doc.text
    assert listing == []


GIBBERISH = b"\xed\xa0\x81\x00\xff" * 40  # invalid UTF-8 and windows-1252 (0x81), no encoding cchardet is sure of


def test_an_html_page_no_encoding_decodes_is_undecodable_and_named(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.html").write_bytes(b'<meta charset="utf-8"><p>' + GIBBERISH + b"</p>")
    documents, counts, listing = read_source(tmp_path, _source(tmp_path, "html"))
    assert documents == []
    assert listing == [{"file": str(tmp_path / "in" / "bad.html"), "line": 0, "reason": "undecodable"}]
    assert counts["sources"]["s"]["removed"]["undecodable"]["documents"] == 1


def test_a_jsonl_line_no_encoding_decodes_is_undecodable_and_named(tmp_path):
    (tmp_path / "in").mkdir()
    good = json.dumps({"id": "a", "text": "plain words"}).encode()
    (tmp_path / "in" / "a.jsonl").write_bytes(good + b'\n{"id": "b", "text": "' + GIBBERISH + b'"}\n')
    documents, _counts, listing = read_source(tmp_path, _source(tmp_path, "jsonl"))
    assert [d.text for d in documents] == ["plain words"]
    assert listing == [{"file": str(tmp_path / "in" / "a.jsonl"), "line": 2, "reason": "undecodable"}]


def test_mostly_ascii_latin1_lines_that_detectors_misjudge_are_read_as_windows_1252(tmp_path):
    (tmp_path / "in").mkdir()
    texts = [f"Été à Noël, déjà vu. The mill by the river ground flour for the valley, line {i}." for i in range(4)]
    lines = [json.dumps({"id": f"l{i}", "text": text}, ensure_ascii=False) for i, text in enumerate(texts)]
    (tmp_path / "in" / "a.jsonl").write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    documents, counts, listing = read_source(tmp_path, _source(tmp_path, "jsonl"))
    assert [d.text for d in documents] == texts and listing == []
    assert counts["encodings"] == [{"source": "s", "file": str(tmp_path / "in" / "a.jsonl"), "encoding": "cp1252"}]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", ["a.jsonl", "a.json"])
def test_jsonl_and_json_files_not_in_utf8_are_read_in_the_detected_encoding(tmp_path, encoding, name):
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"id": f"d{i}", "text": TEXTS[encoding] + f" {i}"}, ensure_ascii=False) for i in range(3)]
    (tmp_path / "in" / name).write_bytes(("\n".join(lines) + "\n").encode(encoding))
    documents, counts, listing = read_source(tmp_path, _source(tmp_path, "jsonl"))
    assert [d.text for d in documents] == [TEXTS[encoding] + f" {i}" for i in range(3)]
    assert listing == []
    (read_as,) = counts["encodings"]
    assert read_as["file"] == str(tmp_path / "in" / name) and read_as["encoding"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_warc_pages_are_read_by_http_charset_then_meta_then_detection(tmp_path, encoding):
    (tmp_path / "in").mkdir()
    text = TEXTS[encoding]
    pages = [
        ("https://x.example/http", _page(text, encoding, False), f"text/html; charset={encoding}"),
        ("https://x.example/meta", _page(text, encoding, True), "text/html"),
        ("https://x.example/none", _page(text, encoding, False), "text/html"),
    ]
    write_pages_warc(tmp_path / "in" / "crawl.warc.gz", pages)
    documents, _, listing = read_source(tmp_path, _source(tmp_path, "warc"))
    assert [d.metadata["url"] for d in documents] == [url for url, _, _ in pages]
    assert all(text in d.text and "\ufffd" not in d.text for d in documents)
    assert listing == []


def test_dataset_rows_have_the_dataset_as_origin(tmp_path):
    import datasets

    datasets.Dataset.from_list([{"id": f"h{i}", "text": f"row {i}"} for i in range(3)]).save_to_disk(tmp_path / "in")
    documents, _, _ = read_source(tmp_path, _source(tmp_path, "hf-datasets"))
    assert [(d.metadata["origin"], d.metadata["position"]) for d in documents] == [
        (str(tmp_path / "in"), i) for i in range(3)
    ]


@pytest.mark.parametrize("encoding", ["utf-8", "shift_jis", "gb18030"])
def test_a_page_cut_inside_a_character_keeps_the_characters_before_it(tmp_path, encoding):
    (tmp_path / "in").mkdir()
    text = TEXTS.get(encoding, TEXTS["shift_jis"]) * 3
    page = _page(text, encoding, True)
    limit = next(
        n
        for n in range(len(page) - 200, len(page))
        if page[:n].decode(encoding, "ignore").encode(encoding) != page[:n]
    )
    (tmp_path / "in" / "page.html").write_bytes(page)
    source = _source(tmp_path, "html").model_copy(update={"max_document_bytes": limit, "long_documents": "cut"})
    (doc,), _, listing = read_source(tmp_path, source)
    whole = page[:limit].decode(encoding, "ignore")  # the limit counts UTF-8 bytes: the read step may cut again
    assert whole.startswith(doc.text) and len(doc.text) > 100 and "\ufffd" not in doc.text and listing == []
