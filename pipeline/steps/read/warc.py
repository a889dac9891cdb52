"""One WARC record to one document, or the named reason it is none.

datatrove's `process_record` drops a record silently when libmagic sniffs its payload as something
other than HTML (a page that starts `<!DOCTYPE html>` can be classed `text/csv`), reads the whole
payload into memory, and fails with an error naming neither file nor record when a response has no
target URI. Here the MIME type is the HTTP `Content-Type` header's first, then the crawler's
`WARC-Identified-Payload-Type`, and libmagic's only when neither exists; the payload is read up to a
limit; and every record has an outcome the funnel counts: a document (named by its URL, the WARC
record id kept as `warc_record_id`), or a reason (`warc_<type>` for request, metadata and other
non-response records, `not_html`, `undecodable`, `too_long`, `no_target_uri`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from warcio.statusandheaders import StatusAndHeadersParser

from pipeline.steps.read.compressed import read_bounded
from pipeline.steps.read.decoding import decode_page

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PAGE_RECORDS = frozenset({"response", "conversion", "resource"})  # WET files hold "conversion" records
# records are iterated unparsed (warcio's own parsing fails with an AttributeError on a response without a
# target URI, ending the file): a response's HTTP headers are parsed here once its URI is known
HTTP_HEADERS = StatusAndHeadersParser(["HTTP/1.0", "HTTP/1.1"], verify=False)


@dataclass
class WarcOutcome:
    """A record's document fields (text, id, url, date, warc_record_id, read_bytes: the payload's size before
    any cut), or why it has none; its payload size."""

    document: dict[str, str | int | None] | None
    reason: str | None
    size: int


def _mime_and_charset(record: ArcWarcRecord) -> tuple[str | None, str | None]:
    header = record.http_headers.get_header("Content-Type") if record.http_headers else None
    if header:
        mime, _, params = header.partition(";")
        charset = next(
            (
                p.split("=", 1)[1].strip().strip("\"'")
                for p in params.split(";")
                if p.strip().lower().startswith("charset=")
            ),
            None,
        )
        return mime.strip().lower(), charset
    identified = record.rec_headers.get_header("WARC-Identified-Payload-Type")
    return (identified.strip().lower() if identified else None), None


def target_uri(record: ArcWarcRecord) -> str | None:
    """The record's URL: `WARC-Target-URI`, or an ARC record's `uri`."""
    return record.rec_headers.get_header("WARC-Target-URI") or record.rec_headers.get_header("uri") or None


def read_record(record: ArcWarcRecord, max_payload: int, long_documents: str) -> WarcOutcome:
    """The outcome of one record read by `ArchiveIterator(..., no_record_parse=True)`; a payload over
    `max_payload` bytes is never held whole (dropped, or cut to it when `long_documents = "cut"`)."""
    if record.rec_type not in PAGE_RECORDS:
        return WarcOutcome(None, f"warc_{record.rec_type}", int(record.length or 0))
    url = target_uri(record)
    if not url:
        return WarcOutcome(None, "no_target_uri", int(record.length or 0))
    if record.rec_type == "response" and record.http_headers is None and url.startswith(("http:", "https:")):
        record.http_headers = HTTP_HEADERS.parse(record.raw_stream)  # content_stream() then undoes chunking, gzip
    mime, charset = _mime_and_charset(record)
    payload, size = read_bounded(record.content_stream(), max_payload, keep_prefix=long_documents == "cut")
    if payload is None:
        return WarcOutcome(None, "too_long", size)
    if mime is None:
        import magic  # lazy: heavy (libmagic): only for a WARC record without a usable Content-Type

        mime = magic.from_buffer(payload[:4096], mime=True)
    plain_ok = record.rec_type == "conversion" and mime == "text/plain"
    if mime not in HTML_TYPES and not plain_ok:
        return WarcOutcome(None, "not_html", size)
    decoded = decode_page(payload, charset, cut=size > len(payload))
    if decoded is None:
        return WarcOutcome(None, "undecodable", size)
    text = decoded.text
    record_id = record.rec_headers.get_header("WARC-Record-ID")
    date = record.rec_headers.get_header("WARC-Date") or record.rec_headers.get_header("archive-date")
    document = {"text": text, "id": url, "url": url, "date": date, "warc_record_id": record_id, "read_bytes": size}
    return WarcOutcome(document, None, size)
