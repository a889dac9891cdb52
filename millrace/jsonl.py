"""JSON-lines streams (metrics.jsonl, eval.jsonl, samples.jsonl): one reader, one rule for a torn last line.

A writer appends one flushed line per record, so a crash (SIGKILL, a full disk, a lost node)
can leave only the LAST line half written. The rule, everywhere:
- a last line that does not parse (with or without its newline) is torn: readers leave it
  out, and a resumed run cuts it away (`cut_back`) and says so;
- a line that does not parse with more lines after it is damage, not a crash: one line
  naming the file and the line number;
- a record that parses but breaks its schema is an error naming the file and the line,
  unless the caller asks to skip it (`on_bad="skip"`: one warning naming file and line).
A reader that follows a stream while it is written (`Follower`) reads a line once its newline is there;
one that wants only the last record (`last_record`) reads the file's end.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from millrace.artifacts import atomic_write_bytes
from millrace.errors import ArtifactError

log = logging.getLogger(__name__)

Check = Callable[[Any], str | None]  # a record -> what is wrong with it, or None


def has_step(record: Any) -> str | None:
    """The check every run stream shares: an object with an integer `step`."""
    if not isinstance(record, dict) or not isinstance(record.get("step"), int) or isinstance(record.get("step"), bool):
        return "expected a JSON object with an integer 'step'"
    return None


@dataclass
class Stream:
    """What a read found: the good records, their line numbers, and whether the last line was torn."""

    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)  # the line number of each record
    lines: list[bytes] = field(default_factory=list)  # each record's line as written
    torn: bytes | None = None  # the torn last line, when there is one
    ends_with_newline: bool = True


def read_stream(path: Path | str, check: Check = has_step, on_bad: Literal["raise", "skip"] = "raise") -> Stream:
    """Every complete record of `path` (an absent file is an empty stream), by the rule above."""
    path = Path(path)
    stream = Stream(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return stream
    except OSError as exc:
        raise ArtifactError(f"{path}: unreadable ({exc.strerror or exc})") from None
    stream.ends_with_newline = not raw or raw.endswith(b"\n")
    lines = raw.split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        number = index + 1
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if index == last:
                stream.torn = line
                break
            raise ArtifactError(
                f"{path}:{number}: not a JSON line ({exc}); the file is damaged before its last line"
            ) from None
        if not checked(record, check, on_bad, path, number):
            continue
        stream.records.append(record)
        stream.numbers.append(number)
        stream.lines.append(line)
    return stream


def checked(record: Any, check: Check, on_bad: Literal["raise", "skip"], path: Path, number: int) -> bool:
    """Whether `record` (line `number` of `path`) passes `check`; a failure raises, or is skipped with a warning."""
    problem = check(record)
    if problem:
        if on_bad == "skip":
            log.warning("%s:%d: skipped a malformed record (%s)", path, number, problem)
            return False
        raise ArtifactError(f"{path}:{number}: {problem}")
    return True


def read_records(
    path: Path | str, check: Check = has_step, on_bad: Literal["raise", "skip"] = "raise"
) -> list[dict[str, Any]]:
    return read_stream(path, check, on_bad).records


def cut_back(path: Path | str, step: int, check: Check = has_step) -> None:
    """Keep the records up to `step` (a checkpoint's) and drop a torn last line, atomically; say what went.

    Run before a resumed run appends, so the stream never holds a step twice nor a line glued to a torn one."""
    path = Path(path)
    stream = read_stream(path, check)
    kept = [line for record, line in zip(stream.records, stream.lines) if record["step"] <= step]
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


def last_record(path: Path | str, check: Check = has_step, window: int = 1 << 16) -> dict[str, Any] | None:
    """The stream's last complete record, by the rule above, reading only the file's end (a long run's stream
    is never read whole); None for an absent or empty file."""
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
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if offset == 0:
                continue  # torn: the record before it is the last one
            raise ArtifactError(
                f"{path}: not a JSON line before the torn last one ({exc}); the file is damaged"
            ) from None
        if problem := check(record):
            raise ArtifactError(f"{path}: last record: {problem}")
        return record
    return None


class Follower:
    """Follows a stream while it is written: each `poll()` parses only the complete lines added since the last
    one (a line without its newline yet waits for the next poll); a file that shrank (rewritten) is read again
    from the start, and `poll` says so."""

    def __init__(self, path: Path | str, check: Check = has_step, on_bad: Literal["raise", "skip"] = "raise"):
        self.path = Path(path)
        self.check, self.on_bad = check, on_bad
        self._offset = 0
        self._lines = 0

    def poll(self) -> tuple[list[tuple[int, dict[str, Any]]], bool]:
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
        arrived = []
        for line in complete.split(b"\n"):
            self._lines += 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ArtifactError(f"{self.path}:{self._lines}: not a JSON line ({exc})") from None
            if checked(record, self.check, self.on_bad, self.path, self._lines):
                arrived.append((self._lines, record))
        return arrived, restarted
