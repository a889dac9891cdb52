"""JSON-lines streams (metrics.jsonl, eval.jsonl, samples.jsonl): one reader, one rule for a torn last line.

A writer appends one flushed line per record, so a crash (SIGKILL, a full disk, a lost node)
can leave only the LAST line half written. The rule, everywhere:
- a last line that does not parse (with or without its newline) is torn: readers leave it
  out, and a resumed run cuts it away (`cut_back`) and says so;
- a line that does not parse with more lines after it is damage, not a crash: one line
  naming the file and the line number;
- a record that parses but breaks its schema is an error naming the file and the line,
  unless the caller asks to skip it (`on_bad="skip"`: one warning naming file and line).
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
            raise ArtifactError(f"{path}:{number}: not a JSON line ({exc}); the file is damaged before its "
                                "last line") from None
        problem = check(record)
        if problem:
            if on_bad == "skip":
                log.warning("%s:%d: skipped a malformed record (%s)", path, number, problem)
                continue
            raise ArtifactError(f"{path}:{number}: {problem}")
        stream.records.append(record)
        stream.numbers.append(number)
        stream.lines.append(line)
    return stream


def read_records(path: Path | str, check: Check = has_step, on_bad: Literal["raise", "skip"] = "raise"
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
        log.warning("%s: cut a torn last line (%d bytes, what a crash leaves) back to step %d, the checkpoint's",
                    path, len(stream.torn), step)
    if dropped:
        log.info("%s: dropped %d record(s) past step %d, the checkpoint's", path, dropped, step)
    if stream.torn is not None or dropped or not stream.ends_with_newline:
        atomic_write_bytes(path, b"".join(line + b"\n" for line in kept))
