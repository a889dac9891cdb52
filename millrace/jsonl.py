"""JSON-lines streams (metrics.jsonl, eval.jsonl, samples.jsonl): one reader, one rule for a torn last line.

A writer appends one flushed line per record, so a crash (SIGKILL, a full disk, a lost node)
can leave only the LAST line half written. The rule, everywhere:
- a last line that does not parse (with or without its newline) is torn: readers leave it
  out, and a resumed run cuts it away (`cut_back`) and says so;
- a line that does not parse with more lines after it is damage, not a crash: one line
  naming the file and the line number;
- a record that parses but breaks its schema is an error naming the file and the line,
  unless the caller asks to skip it (`on_bad="skip"`: one warning naming file and line);
- a record its parser repaired (dropped a malformed part of it: `Repaired`) is kept, with one warning naming
  the file and the line.
A reader that follows a stream while it is written (`Follower`) reads a line once its newline is there;
one that wants only the last record (`last_record`) reads the file's end.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, TypeVar

import pydantic
from pydantic import JsonValue

from millrace.artifacts import atomic_write_bytes
from millrace.errors import ArtifactError, first_validation_error

log = logging.getLogger(__name__)

Check = Callable[[object], str | None]  # a record (JSON as parsed) -> what is wrong with it, or None
T = TypeVar("T")
M = TypeVar("M", bound=pydantic.BaseModel)
Parse = Callable[[bytes], tuple[T, str | None]]  # a line -> (its record, what is wrong with it); ValueError: no JSON


class Repaired(str):
    """What a parser dropped from a record it still returns (`Parse`'s problem): the record is kept and this is
    said as a warning naming the file and the line, rather than the line skipped."""


def has_step(record: object) -> str | None:
    """The check every run stream shares: an object with an integer `step`."""
    if not isinstance(record, dict) or not isinstance(record.get("step"), int) or isinstance(record.get("step"), bool):
        return "expected a JSON object with an integer 'step'"
    return None


def json_lines(check: Check = has_step) -> Parse[dict[str, JsonValue]]:
    """Lines parsed as JSON objects, each checked with `check`."""

    def parse(line: bytes) -> tuple[dict[str, JsonValue], str | None]:
        record: dict[str, JsonValue] = json.loads(line)  # not an object: `check` says so, and it is not kept
        return record, check(record)

    return parse


def model_lines(model: type[M], check: Check = has_step) -> Parse[M]:
    """Lines parsed straight into `model` (pydantic-core reads the bytes: no dict is built first, so a long
    stream costs little more than `json.loads`); a line that breaks the model is parsed as JSON to say why:
    `check`'s problem first (a wrong schema named as such), else the model's first error."""

    def parse(line: bytes) -> tuple[M, str | None]:
        try:
            return model.model_validate_json(line), None
        except pydantic.ValidationError as exc:
            error = exc
        record = json.loads(line)
        return record, check(record) or first_validation_error(error)

    return parse


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a stream's lines become records: a 100,000-line stream makes a
    million small acyclic objects, and each full collection meanwhile would rescan all made so far (a third of
    a long run page's build). Reference counting still frees everything; the collector resumes after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class Stream(Generic[T]):
    """What a read found: the good records, their line numbers, and whether the last line was torn."""

    path: Path
    records: list[T] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)  # the line number of each record
    lines: list[bytes] = field(default_factory=list)  # each record's line as written
    torn: bytes | None = None  # the torn last line, when there is one
    ends_with_newline: bool = True


def read_stream(
    path: Path | str, check: Check = has_step, on_bad: Literal["raise", "skip"] = "raise"
) -> Stream[dict[str, JsonValue]]:
    """Every complete record of `path` (an absent file is an empty stream), by the rule above."""
    return parse_stream(path, json_lines(check), on_bad)


def parse_stream(path: Path | str, parse: Parse[T], on_bad: Literal["raise", "skip"] = "raise") -> Stream[T]:
    """`read_stream` with each line made a record by `parse` (`json_lines`, `model_lines`)."""
    path = Path(path)
    stream: Stream[T] = Stream(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return stream
    except OSError as exc:
        raise ArtifactError(f"{path}: unreadable ({exc.strerror or exc})") from None
    stream.ends_with_newline = not raw or raw.endswith(b"\n")
    with collector_paused():
        _parse_lines(stream, raw.split(b"\n"), parse, on_bad)
    return stream


def _parse_lines(stream: Stream[T], lines: list[bytes], parse: Parse[T], on_bad: Literal["raise", "skip"]) -> None:
    path = stream.path
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        number = index + 1
        try:
            record, problem = parse(line)
        except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            if index == last:
                stream.torn = line
                break
            raise ArtifactError(
                f"{path}:{number}: not a JSON line ({exc}); the file is damaged before its last line"
            ) from None
        if not accepted(problem, on_bad, path, number):
            continue
        stream.records.append(record)
        stream.numbers.append(number)
        stream.lines.append(line)


def accepted(problem: str | None, on_bad: Literal["raise", "skip"], path: Path, number: int) -> bool:
    """Whether a record (line `number` of `path`) with `problem` is kept; a problem raises, or is skipped with a
    warning; a record its parser `Repaired` is kept, with a warning."""
    if isinstance(problem, Repaired):
        log.warning("%s:%d: %s", path, number, problem)
        return True
    if problem:
        if on_bad == "skip":
            log.warning("%s:%d: skipped a malformed record (%s)", path, number, problem)
            return False
        raise ArtifactError(f"{path}:{number}: {problem}")
    return True


def read_records(
    path: Path | str, check: Check = has_step, on_bad: Literal["raise", "skip"] = "raise"
) -> list[dict[str, JsonValue]]:
    return read_stream(path, check, on_bad).records


def cut_back(path: Path | str, step: int, check: Check = has_step) -> None:
    """Keep the records up to `step` (a checkpoint's) and drop a torn last line, atomically; say what went.

    Run before a resumed run appends, so the stream never holds a step twice nor a line glued to a torn one."""
    path = Path(path)
    stream = read_stream(path, check)
    kept = [
        line
        for record, line in zip(stream.records, stream.lines)
        if isinstance(at := record["step"], int) and at <= step
    ]
    dropped = len(stream.records) - len(kept)
    if stream.torn is not None:
        log.warning(
            "%s: cut a torn last line (%d bytes, what a crash leaves) back to step %d, the checkpoint's",
            path,
            len(stream.torn),
            step,
        )
    if dropped:
        log.info("%s: dropped %d record(s) past step %d, the checkpoint's", path, dropped, step)
    if stream.torn is not None or dropped or not stream.ends_with_newline:
        atomic_write_bytes(path, b"".join(line + b"\n" for line in kept))


def drop_torn_tail(path: Path | str) -> None:
    """Cut a torn last line (bytes after the last newline: what a kill mid-append leaves) away, atomically, and
    say so; run before appending to a stream that has no steps to cut back to (`append_line`)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 1))
            if size == 0 or handle.read(1) == b"\n":
                return
            handle.seek(0)
            raw = handle.read()
    except FileNotFoundError:
        return
    kept = raw[: raw.rfind(b"\n") + 1]
    log.warning("%s: cut a torn last line (%d bytes, what a crash leaves)", path, len(raw) - len(kept))
    atomic_write_bytes(path, kept)


def append_line(path: Path | str, line: bytes) -> None:
    """Append one record's line in one write, flushed (a kill leaves at most this line torn, never an earlier
    one); the file is created where it is absent."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        handle.write(line.rstrip(b"\n") + b"\n")


def last_record(path: Path | str, check: Check = has_step, window: int = 1 << 16) -> dict[str, JsonValue] | None:
    """The stream's last complete record, by the rule above, reading only the file's end (a long run's stream
    is never read whole); None for an absent or empty file."""
    return last_parsed(path, json_lines(check), window)


def last_parsed(path: Path | str, parse: Parse[T], window: int = 1 << 16) -> T | None:
    """`last_record` with the line made a record by `parse`."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            while True:
                start = max(0, size - window)
                handle.seek(start)
                lines = handle.read(size - start).split(b"\n")[0 if start == 0 else 1 :]  # the first may be cut
                lines = [line for line in lines if line.strip()]
                if len(lines) > 1 or start == 0:
                    break
                window *= 4
    except FileNotFoundError:
        return None
    for offset, line in enumerate(reversed(lines[-2:])):
        try:
            record, problem = parse(line)
        except ValueError as exc:
            if offset == 0:
                continue  # torn: the record before it is the last one
            raise ArtifactError(
                f"{path}: not a JSON line before the torn last one ({exc}); the file is damaged"
            ) from None
        if isinstance(problem, Repaired):  # kept; a warning is a full read's, which can name the line
            log.info("%s: last record: %s", path, problem)
        elif problem:
            raise ArtifactError(f"{path}: last record: {problem}")
        return record
    return None


class Follower(Generic[T]):
    """Follows a stream while it is written: each `poll()` parses only the complete lines added since the last
    one (a line without its newline yet waits for the next poll); a file that shrank (rewritten) is read again
    from the start, and `poll` says so. Lines become records by `parse` (JSON objects with a step, unless
    told otherwise)."""

    def __init__(self, path: Path | str, parse: Parse[T], on_bad: Literal["raise", "skip"] = "raise"):
        self.path = Path(path)
        self.parse, self.on_bad = parse, on_bad
        self._offset = 0
        self._lines = 0

    def poll(self) -> tuple[list[tuple[int, T]], bool]:
        """The records that arrived with their line numbers, and whether the file was rewritten (the records
        read before are void)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return [], False
        restarted = size < self._offset
        if restarted:
            self._offset, self._lines = 0, 0
        if size == self._offset:
            return [], restarted
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read(size - self._offset)
        complete, newline, _partial = chunk.rpartition(b"\n")
        if not newline:
            return [], restarted
        self._offset += len(complete) + 1
        with collector_paused():
            return self._parse(complete.split(b"\n")), restarted

    def _parse(self, lines: list[bytes]) -> list[tuple[int, T]]:
        arrived = []
        for line in lines:
            self._lines += 1
            if not line.strip():
                continue
            try:
                record, problem = self.parse(line)
            except ValueError as exc:
                raise ArtifactError(f"{self.path}:{self._lines}: not a JSON line ({exc})") from None
            if accepted(problem, self.on_bad, self.path, self._lines):
                arrived.append((self._lines, record))
        return arrived
