"""WARC files with the record kinds a crawl holds, or with the pages a test chooses, and the read step run on
its own."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import SourceConfig
from pipeline.steps.read.readers import ReadStep

if TYPE_CHECKING:
    from datatrove.data import Document
    from warcio.recordloader import ArcWarcRecord

PAGE = (
    "<p>" + "The mill by the river ground flour, oats, barley and rye for the whole valley. " * 12 + "</p>"
).encode()
# libmagic calls this text/csv (a doctype glued to its html, lines full of commas): its HTTP header says html
CSV_SNIFFED = b"<!DOCTYPE html><html><head><title>a, b</title></head><body>" + PAGE + b"</body></html>"


def write_warc(path: Path, gz: bool, without_uri: bool = True) -> int:
    """A WARC of the record kinds a crawl holds; returns how many records it has."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=gz)

        def response(uri: str, body: bytes, content_type: str | None) -> ArcWarcRecord:
            http = StatusAndHeaders(
                "200 OK", [("Content-Type", content_type)] if content_type else [], protocol="HTTP/1.1"
            )
            return writer.create_warc_record(uri, "response", payload=io.BytesIO(body), http_headers=http)

        records = [
            writer.create_warcinfo_record(path.name, {"software": "test"}),
            writer.create_warc_record(
                "https://example.org/", "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n")
            ),
            response("https://example.org/csv-sniffed", CSV_SNIFFED, "text/html; charset=utf-8"),
            response("https://example.org/logo.png", b"\x89PNG\r\n\x1a\n", "image/png"),
            response("https://example.org/no-header", b"<html><body>" + PAGE + b"</body></html>", None),
        ]
        if without_uri:
            record = response("https://example.org/lost", b"<html><body>" + PAGE + b"</body></html>", "text/html")
            record.rec_headers.remove_header("WARC-Target-URI")
            records.append(record)
        for record in records:
            writer.write_record(record)
    return len(records)


def write_pages_warc(path: Path, pages: Iterable[tuple[str, bytes, str]]) -> None:
    """A gzipped WARC of one HTTP response per page (URL, body, Content-Type header), as a crawler writes them:
    for tests that choose each page's bytes and declared charset."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=True)
        for url, body, content_type in pages:
            http = StatusAndHeaders("200 OK", [("Content-Type", content_type)], protocol="HTTP/1.1")
            writer.write_record(
                writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http)
            )


def read_source(
    tmp_path: Path, source: SourceConfig
) -> tuple[list[Document], dict[str, object], list[dict[str, object]]]:
    """Run the read step alone: its documents, its funnel counts and its malformed listing."""
    step = ReadStep(source, 0, tmp_path / "funnel", tmp_path / "malformed", tmp_path / "progress")
    documents = list(step.run(None, 0, 1))
    counts = json.loads((tmp_path / "funnel" / f"{source.name}-00000.json").read_text())
    listing = (tmp_path / "malformed" / source.name / "00000.jsonl").read_text().splitlines()
    return documents, counts, [json.loads(line) for line in listing]
