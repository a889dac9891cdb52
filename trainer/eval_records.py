"""The `runs/<run>/eval.jsonl` record format, torch-free: the evaluator writes it, `train status` and
the scaling ladder read it (the ladder's `fit --points` must not pay for importing torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from millrace.errors import ArtifactError

EVAL_SCHEMA = "millrace.eval/1"
EVAL_FILE = "eval.jsonl"


def read_eval(run_dir: Path | str) -> list[dict[str, Any]]:
    """Every evaluation record of a run, oldest first (what the scaling ladder fits on).

    A torn last line (a run killed mid-write) is skipped; a record of another schema is an error."""
    path = Path(run_dir) / EVAL_FILE
    if not path.exists():
        return []
    records = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ArtifactError(f"{path}:{number}: not a JSON line") from None
        found = record.get("schema") if isinstance(record, dict) else type(record).__name__
        if found != EVAL_SCHEMA:
            raise ArtifactError(f"{path}:{number}: schema {found!r}, expected {EVAL_SCHEMA!r}")
        records.append(record)
    return records
