"""Lines of a possibly compressed input file, failing loudly on a truncated or corrupt one, in bounded memory.

`zstandard`'s stream reader (and fsspec's zstd codec on top of it) returns end-of-file when
the input stops in the middle of a frame, so a truncated `.jsonl.zst` reads as a shorter (or
empty) file with no error. Here every frame must end: input that stops inside one raises
`TruncatedInput`. gzip, bz2 and xz raise `EOFError` on truncation themselves. Lines are bytes,
so that a record with invalid UTF-8 is one malformed record, not an error that stops the file.

Memory stays bounded whatever the input: decompressed chunks are at most a few `CHUNK`s (zstd
input is fed in slices sized by the expansion seen so far, since a few bytes of zstd can expand
to megabytes), and a line longer than `max_line` is not held: it is skipped to its end and reported
as an `OverlongLine` with its size.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

CHUNK = 1 << 20
MIN_ZSTD_SLICE = 64  # a zstd block (at most 128 KiB out) takes at least 4 bytes in: 64 bytes give at most ~2 MiB


class TruncatedInput(EOFError):
    """The compressed stream ended inside a frame."""


@dataclass(frozen=True)
class OverlongLine:
    """A line longer than the reader's limit, skipped without being held: its size in bytes."""

    size: int


def _zstd_chunks(raw: BinaryIO) -> Iterator[bytes]:
    """Decompressed zstd in chunks of about `CHUNK`: input goes in slices that start small and grow at most
    twofold a step, sized by the last slice's expansion, so a few bytes that expand to megabytes never
    produce more than a few megabytes at once."""
    context = zstandard.ZstdDecompressor()
    frame, in_frame, size = context.decompressobj(), False, MIN_ZSTD_SLICE
    while data := raw.read(CHUNK):
        start = 0
        while start < len(data):
            piece, start = data[start : start + size], start + size
            expansion = 0.0
            while piece:
                in_frame = True
                out = frame.decompress(piece)
                expansion = max(expansion, len(out) / len(piece))
                if out:
                    yield out
                if not frame.eof:
                    break
                piece, frame, in_frame = frame.unused_data, context.decompressobj(), False
            size = max(MIN_ZSTD_SLICE, min(CHUNK, 2 * size, int(CHUNK / max(expansion, 1.0))))
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


def byte_lines(raw: BinaryIO, compression: str, max_line: int | None = None) -> Iterator[bytes | OverlongLine]:
    """Every line of the decompressed stream (without its newline), the last one even without a newline;
    a line over `max_line` bytes comes as an `OverlongLine` (never held whole)."""
    pending: list[bytes] = []
    held = 0  # bytes in `pending`
    overlong: int | None = None  # the size so far of a line already past `max_line`
    for chunk in decompressed_chunks(raw, compression):
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end == -1 else chunk[start:end]
            if overlong is not None:
                overlong += len(piece)
            elif max_line is not None and held + len(piece) > max_line:
                overlong, pending, held = held + len(piece), [], 0
            else:
                pending.append(piece)
                held += len(piece)
            if end == -1:
                break
            yield b"".join(pending) if overlong is None else OverlongLine(overlong)
            pending, held, overlong, start = [], 0, None, end + 1
    if overlong is not None:
        yield OverlongLine(overlong)
    elif pending:
        yield b"".join(pending)


def read_bounded(stream: BinaryIO, limit: int, keep_prefix: bool = False) -> tuple[bytes | None, int]:
    """At most `limit` bytes of `stream` and its whole size: (its bytes, size) when it fits, else (None, size),
    or with `keep_prefix` its first `limit` bytes; the rest is read through, never held."""
    data = stream.read(limit + 1)
    if len(data) <= limit:
        return data, len(data)
    size = len(data)
    while chunk := stream.read(CHUNK):
        size += len(chunk)
    return (data[:limit] if keep_prefix else None), size
