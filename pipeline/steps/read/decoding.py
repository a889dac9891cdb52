"""Bytes to text without inventing characters: the one decoder every reader shares.

A page is decoded by the charset it declares (a byte order mark, then the transport's -- a WARC
response's HTTP `Content-Type` --, then its own `<meta charset>` or `<meta http-equiv="Content-Type">`),
then as UTF-8, then by the encoding `cchardet` detects when it is at least `MIN_CONFIDENCE` sure, else
as windows-1252, browsers' default for a page that declares nothing (a low confidence mostly means ASCII
text with a few accented letters, which detectors take for a Baltic or Cyrillic code page; the real
corpus's latin-1 JSON Lines were such). Every decoding is strict: bytes that do not
decode in any of these give no text (the reader counts the record as `undecodable`, naming its file),
never a text with U+FFFD where the bytes were. As browsers do (WHATWG Encoding), a declared ISO-8859-1
or ASCII is read as windows-1252, its superset.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

SNIFF_BYTES = 4096  # a page's meta charset is looked for in its first bytes, as browsers do (1024 there)
META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
FALLBACK = "cp1252"  # WHATWG's default encoding for a document that declares none, in most locales
MIN_CONFIDENCE = 0.5  # cchardet's confidence in legacy text of a few sentences: 0.63 (cp1252) to 1.0 (Shift-JIS)
WINDOWS_1252_LABELS = {"iso-8859-1", "latin-1", "ascii", "us-ascii", "iso8859-1", "l1", "latin1"}


@dataclass(frozen=True)
class Decoded:
    """A text and the encoding it was read in (a Python codec name, as given)."""

    text: str
    encoding: str


def declared_charset(page: bytes) -> str | None:
    """The charset a page's `<meta>` tag declares in its first `SNIFF_BYTES`, else None."""
    match = META_CHARSET.search(page[:SNIFF_BYTES])
    if not match:
        return None
    label = match.group(1).decode("ascii").lower()
    return "utf-8" if label.startswith(("utf-16", "utf-32")) else label  # a page that reads its meta is not UTF-16


def decode_as(data: bytes, encoding: str | None, cut: bool = False) -> Decoded | None:
    """`data` decoded whole in `encoding` (a declared ISO-8859-1 or ASCII as windows-1252 first), else None.
    `cut`: `data` is a prefix (`long_documents = "cut"`), and a character it ends inside of is left out."""
    if not encoding:
        return None
    for candidate in ("cp1252", encoding) if encoding.lower() in WINDOWS_1252_LABELS else (encoding,):
        try:
            return Decoded(codecs.getincrementaldecoder(candidate)().decode(data, final=not cut), candidate)
        except (UnicodeDecodeError, LookupError):
            continue
    return None


def detected_encoding(data: bytes) -> str | None:
    """The encoding `cchardet` finds for `data` with at least `MIN_CONFIDENCE`, or None."""
    import cchardet  # lazy: heavy (cchardet): only for a file that is not UTF-8

    found = cchardet.detect(data)
    return found["encoding"] if (found["confidence"] or 0) >= MIN_CONFIDENCE else None


def decode_text(data: bytes, cut: bool = False) -> Decoded | None:
    """`data` as UTF-8 (a BOM dropped), else in its detected encoding, else in `FALLBACK`; None when none of
    them decodes it whole."""
    return (
        decode_as(data, "utf-8-sig", cut)
        or decode_as(data, detected_encoding(data), cut)
        or decode_as(data, FALLBACK, cut)
    )


def decode_page(page: bytes, transport_charset: str | None = None, cut: bool = False) -> Decoded | None:
    """An HTML page by its BOM, `transport_charset`, its meta charset, then UTF-8, then detection; None when
    none of them decodes it whole (`cut`: see `decode_as`)."""
    bom = next((name for mark, name in BOMS if page.startswith(mark)), None)
    for encoding in (bom, transport_charset, declared_charset(page)):
        if (decoded := decode_as(page, encoding, cut)) is not None:
            return decoded
    return decode_text(page, cut)
