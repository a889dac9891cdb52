"""Lines of a possibly compressed input file, failing loudly on a truncated or corrupt one.

`zstandard`'s stream reader (and fsspec's zstd codec on top of it) returns end-of-file when
the input stops in the middle of a frame, so a truncated `.jsonl.zst` reads as a shorter (or
empty) file with no error. Here every frame must end: input that stops inside one raises
`TruncatedInput`. gzip, bz2 and xz raise `EOFError` on truncation themselves. Lines are bytes,
so that a record with invalid UTF-8 is one malformed record, not an error that stops the file.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterator
from typing import BinaryIO

import zstandard

CHUNK = 1 << 20


class TruncatedInput(EOFError):
    """The compressed stream ended inside a frame."""


def _zstd_chunks(raw: BinaryIO) -> Iterator[bytes]:
    context = zstandard.ZstdDecompressor()
    frame, in_frame = context.decompressobj(), False
    while chunk := raw.read(CHUNK):
        while chunk:
            in_frame = True
            out = frame.decompress(chunk)
            if out:
                yield out
            if not frame.eof:
                break
            chunk, frame, in_frame = frame.unused_data, context.decompressobj(), False
    if in_frame:
        raise TruncatedInput("zstd stream ends inside a frame (truncated file)")


def decompressed_chunks(raw: BinaryIO, compression: str) -> Iterator[bytes]:
    """The decompressed bytes of `raw`, in chunks; a truncated stream raises (EOFError or `TruncatedInput`)."""
    if compression == "zstd":
        yield from _zstd_chunks(raw)
        return
    opener = {"gzip": gzip.GzipFile, "bz2": bz2.BZ2File, "xz": lzma.LZMAFile}.get(compression)
    stream = opener(fileobj=raw) if opener else raw
    while chunk := stream.read(CHUNK):
        yield chunk


def compression_of(path: str, declared: str | None = None) -> str:
    """`declared` when given, else from the file name: zstd, gzip, bz2, xz or none."""
    if declared:
        return declared
    suffixes = {".zst": "zstd", ".zstd": "zstd", ".gz": "gzip", ".bz2": "bz2", ".xz": "xz"}
    return next((codec for suffix, codec in suffixes.items() if path.endswith(suffix)), "none")


def byte_lines(raw: BinaryIO, compression: str) -> Iterator[bytes]:
    """Every line of the decompressed stream (without its newline), the last one even without a newline."""
    pending: list[bytes] = []
    for chunk in decompressed_chunks(raw, compression):
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            pending.append(chunk[start:end])
            yield b"".join(pending)
            pending, start = [], end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending)
