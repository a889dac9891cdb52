"""The `runs/<run>/eval.jsonl` record format, torch-free: the evaluator writes it, `train status` and
the scaling ladder read it (the ladder's `fit --points` must not pay for importing torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from millrace.jsonl import has_step, read_records

EVAL_SCHEMA = "millrace.eval/1"
EVAL_FILE = "eval.jsonl"


def eval_problem(record: Any) -> str | None:
    found = record.get("schema") if isinstance(record, dict) else type(record).__name__
    if found != EVAL_SCHEMA:
        return f"schema {found!r}, expected {EVAL_SCHEMA!r}"
    return has_step(record)


def read_eval(run_dir: Path | str) -> list[dict[str, Any]]:
    """Every evaluation record of a run, oldest first (what the scaling ladder fits on).

    A torn last line (a run killed mid-write) is skipped; a record of another schema is an error
    naming the file and line (`millrace.jsonl`)."""
    return read_records(Path(run_dir) / EVAL_FILE, eval_problem)
